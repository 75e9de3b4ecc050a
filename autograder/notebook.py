"""The one function a test cell calls: ``grade("lesson02.equivalence", fused_rms_norm)``.

In the student's kernel (running a cell or pressing Validate) it packs the objects, runs the
check in a worker and shows the verdict: a line on stdout and the score as the cell's value,
or a :class:`~autograder.checks.core.CheckFailed` with the message.  Under ``nbgrader autograde`` the
cell is not run like this at all: :mod:`autograder.nbgrader.execute` reads the call from the cell's
source and runs the same check from the grader's own process.
"""
from __future__ import annotations

from .checks.core import CheckFailed, CheckResult, format_points, skipped_bonus, skipped_bonus_line
from .isolation.run import PayloadError, pack, run_check


def run(check_id: str, *objects, cases: list | None = None) -> CheckResult:
    """Run a check on the given objects and return its result (no printing, no raising)."""
    from .checks.core import get_check

    try:
        payloads = pack(list(objects))
    except PayloadError as error:
        check = get_check(check_id)
        return CheckResult(check_id, check.title, check.points, False, str(error))
    return run_check(check_id, payloads, cases)


def grade(check_id: str, *objects, cases: list | None = None) -> None:
    """Run a check and print its verdict; raise CheckFailed when it fails.

    Nothing is returned: a cell ending in ``grade(...)`` shows the verdict line only, not a
    stray ``Out[n]: 1`` (nbgrader scores a test cell without an error full points).
    """
    __tracebackhide__ = True  # IPython: show the message, not the grader's frames
    result = run(check_id, *objects, cases=cases)
    if skipped_bonus(result):
        print(skipped_bonus_line(result))
        return
    if not result.passed:
        raise CheckFailed(f"{result.title}\n{result.message}")
    print(result.summary() + (f"\n{result.message}" if result.message else ""))


__all__ = ["grade", "run", "CheckFailed", "format_points"]
