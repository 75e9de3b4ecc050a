"""The one function a test cell calls: ``grade("lesson02.equivalence", fused_rms_norm)``.

In the student's kernel (running a cell or pressing Validate) it packs the objects, runs the
check in a worker and shows the verdict: a line on stdout, or a
:class:`~autograder.checks.core.CheckFailed` with the message.  Under ``nbgrader autograde`` the
cell is not run like this at all: :mod:`autograder.nbgrader.execute` reads the call from the cell's
source and runs the same check from the grader's own process.

A failed check raises wherever something reads the notebook's errors: nbgrader's Validate and
autograde (both set ``NBGRADER_EXECUTION``), the course's own runs (``AUTOGRADER_STRICT``, set by
:class:`~autograder.nbgrader.execute.IsolatedExecute`), a script.  Only in a person's own notebook kernel
(JupyterLab, Colab: an ipykernel shell, neither variable set) does it print the verdict on stderr and
return, so that «Запустить все ячейки» goes on to the plots and the later checks.  That leniency scores
nothing: a graded cell's score never comes from this function (docs/developer.md, "A failed check in the
student's lab").
"""
from __future__ import annotations

import os
import sys

from .checks.core import CheckFailed, CheckResult, format_points, skipped_bonus, skipped_bonus_line
from .isolation.run import PayloadError, pack, run_check

#: Set by nbgrader while autograde ("autograde") and Validate ("validate") run a notebook.
NBGRADER_ENV = "NBGRADER_EXECUTION"
#: Set by the course's own runs of a notebook (IsolatedExecute: autograde, `course check`, `course grade`).
STRICT_ENV = "AUTOGRADER_STRICT"

#: The last line of a failed check in the student's own kernel (it did not raise).
NOT_RAISED = ("(ячейка не остановила «Запустить все ячейки»; в Validate, make test и при оценке "
              "эта проверка — ошибка и 0 баллов)")


def run(check_id: str, *objects, cases: list | None = None) -> CheckResult:
    """Run a check on the given objects and return its result (no printing, no raising)."""
    from .checks.core import get_check

    try:
        payloads = pack(list(objects))
    except PayloadError as error:
        check = get_check(check_id)
        return CheckResult(check_id, check.title, check.points, False, str(error))
    return run_check(check_id, payloads, cases)


def interactive_kernel() -> bool:
    """A person's own notebook kernel: an ipykernel shell that neither nbgrader nor the course runs."""
    if os.environ.get(NBGRADER_ENV) or os.environ.get(STRICT_ENV):
        return False
    zmqshell = sys.modules.get("ipykernel.zmqshell")  # never imported here: a script has none
    if zmqshell is None:
        return False
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return isinstance(get_ipython(), zmqshell.ZMQInteractiveShell)


def grade(check_id: str, *objects, cases: list | None = None) -> None:
    """Run a check and print its verdict; raise CheckFailed when it fails (in a person's own
    notebook kernel: print the failure on stderr instead, see the module's docstring).

    Nothing is returned: a cell ending in ``grade(...)`` shows the verdict line only, not a
    stray ``Out[n]: 1`` (nbgrader scores a test cell without an error full points).
    """
    __tracebackhide__ = True  # IPython: show the message, not the grader's frames
    result = run(check_id, *objects, cases=cases)
    if skipped_bonus(result):
        print(skipped_bonus_line(result))
        return
    if not result.passed:
        if interactive_kernel():
            print(f"{result.summary()}\n{result.message}\n{NOT_RAISED}", file=sys.stderr)
            return
        raise CheckFailed(f"{result.title}\n{result.message}")
    print(result.summary() + (f"\n{result.message}" if result.message else ""))


__all__ = ["grade", "run", "CheckFailed", "format_points"]
