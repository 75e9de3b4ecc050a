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
