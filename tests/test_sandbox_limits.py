"""A submission's sandboxes as a whole are bounded by its cgroup (autograder/isolation/cgroup.py; issue 53's costs).

A check's student code writes 1 GiB into the sandbox's private ``/tmp`` (a tmpfs that bubblewrap 0.8 cannot cap, in
files under the 64 MiB a file may have), or starts processes with native code (``_posixsubprocess``, past the
guard) until it cannot: inside a group of 384 MiB and 32 processes neither gets past the group's limit, whoever the
user (root is exempt from RLIMIT_NPROC).  Control: the same code in the same sandbox without the group writes all
of it and starts every process it asks for.
"""
from __future__ import annotations

import sys
import tempfile

import cloudpickle
import pytest

from autograder.isolation import cgroup, sandbox
from autograder.isolation import run as isolation
from autograder.isolation.run import run_check
from helpers import student

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bubblewrap is Linux-only"),
              pytest.mark.skipif(not sandbox.available(), reason="see tests/test_sandbox_attacks.py::"
                                                                 "test_the_sandbox_is_available"),
              pytest.mark.skipif(not cgroup.status()[0], reason=f"no cgroup here: {cgroup.status()[1]}")]

MEMORY = 384 * 2**20
PROCESSES = 32

FILLS_TMP = """
def fused_rms_norm(x, w, eps=1e-6):
    chunk = b"x" * (32 << 20)
    for i in range(32):  # 1 GiB in 32 files of 32 MiB
        with open("/tmp/fill-%d" % i, "wb") as handle:
            handle.write(chunk)
    raise ValueError("WROTE 1 GiB")
"""

STARTS_PROCESSES = """
def fused_rms_norm(x, w, eps=1e-6):
    import _posixsubprocess, os
    argv = [b"/bin/sleep", b"30"]
    started = 0
    for _ in range(100):
        rd, wr = os.pipe()
        common = (argv, [argv[0]], True, (), None, None, -1, -1, -1, -1, -1, -1, rd, wr, True, True)
        try:
            try:
                _posixsubprocess.fork_exec(*common, -1, None, None, None, -1, None, False)
            except TypeError:
                _posixsubprocess.fork_exec(*common, -1, None, None, None, -1, None)
            started += 1
        except OSError:
            break
        finally:
            os.close(rd)
            os.close(wr)
    raise ValueError("STARTED%dSTARTED" % started)
"""


def run_in(box, source: str):
    with isolation.sandboxed(box):
        return run_check("lesson02.equivalence", [cloudpickle.dumps(student(source))], fork=False)


@pytest.fixture
def boxes(tmp_path):
    group = cgroup.create(MEMORY, PROCESSES)
    assert group is not None, cgroup.status()
    scratch = tempfile.mkdtemp(prefix="autograder-sandbox-", dir=tmp_path)
    try:
        yield sandbox.Sandbox(scratch=scratch, cgroup=group), sandbox.Sandbox(scratch=scratch), group
    finally:
        cgroup.remove(group)


def test_the_private_tmp_is_bounded_by_the_groups_memory(boxes):
    capped, uncapped, group = boxes
    result = run_in(capped, FILLS_TMP)
    assert not result.passed and "WROTE 1 GiB" not in result.message and "SIGKILL" in result.message, result
    assert group.peak_memory() <= MEMORY
    control = run_in(uncapped, FILLS_TMP)
    assert "WROTE 1 GiB" in control.message, control


def test_processes_stop_at_the_groups_limit_for_root_too(boxes):
    capped, uncapped, _ = boxes
    result = run_in(capped, STARTS_PROCESSES)
    started = int(result.message.split("STARTED")[1])
    assert started < PROCESSES, result.message
    control = run_in(uncapped, STARTS_PROCESSES)
    assert int(control.message.split("STARTED")[1]) == 100, control.message
