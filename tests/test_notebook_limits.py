"""A notebook's limits as a whole (issue 53's costs): its outputs and its grading time.

Through the real ``nbgrader autograde`` of lesson 02, with the limits made small: a notebook whose hundred cells
print 100 KiB each keeps no more than ``IsolatedExecute.max_notebook_output_bytes`` of output (its feedback is made
from it) and keeps every grade; a notebook with a slow cell before its tests runs no cell and no check past
``IsolatedExecute.notebook_time_limit``: each says so, scores 0, and the grading ends soon after the limit.
Control: the reference with the same limits gets full marks.
"""
from __future__ import annotations

import json
import sys
import time

import nbformat
import pytest

from autograder.course import grading
from autograder.nbgrader.execute import NOTEBOOK_TIME_UP_CHECK
from helpers import submission

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bubblewrap is Linux-only"),
              pytest.mark.lesson(n="02")]

LESSON = "02_fused_rmsnorm"
OUTPUT_CAP = 512 * 1024
TIME_LIMIT_S = 90
SLOW_S = 95


def with_cells(sources: list[str]) -> nbformat.NotebookNode:
    """The reference, with ``sources`` as code cells after its first answer cell."""
    nb = submission(LESSON)
    at = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("solution"))
    nb.cells[at + 1:at + 1] = [nbformat.v4.new_code_cell(s) for s in sources]
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("limits")
    notebooks = {
        "reference": submission(LESSON),
        "floods": with_cells(["print('x' * 100 * 1024)"] * 100),
        "slow": with_cells([f"import time\ntime.sleep({SLOW_S})"]),
    }
    start = time.monotonic()
    grades = grading.grade_notebooks(LESSON, notebooks, folder, extra_args=(
        f"--IsolatedExecute.max_notebook_output_bytes={OUTPUT_CAP}",
        f"--IsolatedExecute.notebook_time_limit={TIME_LIMIT_S}", f"--Execute.timeout={SLOW_S + 30}"))
    took = time.monotonic() - start
    autograded = {name: nbformat.read(folder / "autograded" / name / LESSON / f"{LESSON}.ipynb", as_version=4)
                  for name in notebooks}
    return grades, autograded, took


def total(grades) -> float:
    return sum(g.score for g in grades if not g.bonus)


def test_a_flooding_notebook_keeps_its_grade_and_no_more_output_than_the_cap(graded):
    grades, autograded, _ = graded
    assert total(grades["floods"]) == total(grades["reference"]) > 0
    kept = sum(len(json.dumps(o)) for c in autograded["floods"].cells for o in c.get("outputs", [])
               if not c.metadata.get("nbgrader", {}).get("grade"))
    assert kept <= OUTPUT_CAP + 64 * 1024, kept  # the cap, the notes and the JSON around the text
    assert "у всего ноутбука больше 512 КиБ вывода" in nbformat.writes(autograded["floods"])


def test_past_the_time_limit_no_cell_and_no_check_runs_and_each_says_so(graded):
    grades, autograded, took = graded
    assert total(grades["slow"]) == 0 < total(grades["reference"])
    said = nbformat.writes(autograded["slow"])
    assert NOTEBOOK_TIME_UP_CHECK.format(limit=TIME_LIMIT_S).split(" — ")[0] in said
    # three notebooks one after another; without the limit the slow one alone would run all its checks after the
    # sleep: the limit bounds it to about the limit and one cell
    assert took < 3 * (TIME_LIMIT_S + SLOW_S) + 120, took


def test_the_graders_sockets_refuse_a_huge_message_and_a_long_queue():
    """The grader's memory while a cell prints gigabytes (benchmarks/grader_memory.py: 1 GiB printed took the grader
    3.1 GiB, now 133 MiB): the kernel client IsolatedExecute makes reads through sockets whose context caps one
    message and the queue, so ZeroMQ drops a larger message before the grader holds it (the other tests of this file
    and of tests/test_autograde.py grade through that client)."""
    import zmq

    from autograder.nbgrader import execute

    client = execute.BoundedKernelClient()
    assert client.context.getsockopt(zmq.MAXMSGSIZE) == execute.MAX_KERNEL_MESSAGE_BYTES
    assert client.context.getsockopt(zmq.RCVHWM) == execute.MAX_QUEUED_KERNEL_MESSAGES
    socket = client.context.socket(zmq.SUB)
    try:
        assert socket.getsockopt(zmq.MAXMSGSIZE) == execute.MAX_KERNEL_MESSAGE_BYTES
    finally:
        socket.close(linger=0)
        client.context.destroy(linger=0)
    assert execute.MAX_KERNEL_MESSAGE_BYTES >= 8 * execute.MAX_CELL_OUTPUT_BYTES  # outputs a cell keeps pass whole


def test_the_kernel_keeps_a_little_more_than_the_grader_of_each_cells_print():
    """A cell printing without end sends the grader only
    ``limit`` characters, so no message of the kernel outgrows the grader's sockets' cap and the grader still sees more
    than it keeps, and notes the cut; the next cell starts from zero; IPython's own wrapping of ``write`` around each
    cell leaves the cap in place."""
    from jupyter_client.manager import start_new_kernel

    manager, client = start_new_kernel()
    try:
        def printed(code: str) -> str:
            client.execute(code)
            text = ""
            while True:
                message = client.get_iopub_msg(timeout=30)
                if message["msg_type"] == "stream":
                    text += message["content"]["text"]
                if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
                    return text

        printed("import autograder.isolation.kernel_output as k; k.cap(1000); k.cap(99)")  # once only
        assert printed("for _ in range(50): print('x' * 99)") == ("x" * 99 + "\n") * 10
        assert printed("print('y' * 5000)") == "y" * 1000
        assert printed("print('short')") == "short\n"
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
