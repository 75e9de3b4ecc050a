"""The failures a check raises, shared by the checks and the student process that runs the student's code.

:mod:`autograder.checks.core` re-exports them; :mod:`autograder.checks.student_process` needs them without the
registry.
"""
from __future__ import annotations

import signal
from pathlib import Path

#: The package's folder: frames from here are the grader's, left out of what a student's exception shows.
_PACKAGE_DIR = str(Path(__file__).resolve().parent.parent) + "/"


class CheckFailed(AssertionError):
    """A graded property does not hold; the message is meant for the student (Russian)."""

    def _render_traceback_(self) -> list[str]:
        """IPython shows this instead of a traceback: the grader's frames tell a student nothing.

        The same one entry that an autograded cell shows (nbgrader_ext).
        """
        return [f"Проверка не пройдена: {self}"]


def restated(failure: CheckFailed, text: str) -> CheckFailed:
    """``failure`` with the message ``text`` (a layer that adds to a failure's words): what it says about the
    failure besides its words (a mistake's name, a stub left alone, not gradable here) is kept."""
    again = CheckFailed(text)
    for name in ("mistake", "not_started", "not_gradable"):
        if hasattr(failure, name):
            setattr(again, name, getattr(failure, name))
    return again


class GraderFault(Exception):
    """The grader itself could not run part of a check (e.g. the run under compute-sanitizer was lost
    before the student's code started).  The worker reports it as a grader fault, not as a failure:
    the check runs again, and a submission whose check still cannot run is left ungraded, never zero.
    Student code never raises it into a check: :func:`call_student` turns every exception of
    student code into a :class:`CheckFailed`."""


class ExplainedError(Exception):
    """An error the grader's own code raises inside a student's call (the GPU stand-in stopping a kernel), with a
    message written for the student: :func:`call_student` keeps it whole (up to :data:`MAX_MESSAGE_CHARS`) where it
    cuts any other exception's text at 500 characters."""


MAX_MESSAGE_CHARS = 1500


def shorten(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    text = str(text)
    return text if len(text) <= limit else text[: limit - 40] + f"\n… (обрезано, всего {len(text)} символов)"


#: What each signal that ends a check's process usually means, for the student.
SIGNAL_MEANINGS = {
    "SIGSEGV": "обращение к недопустимой памяти (segfault)",
    "SIGKILL": "процесс убит (скорее всего, не хватило памяти: у работы есть и общий предел — на все её процессы "
               "и /tmp вместе)",
    "SIGABRT": "аварийное завершение (abort)",
}


def signal_name(number: int) -> str:
    """``SIGKILL`` for 9; the number itself for one Python does not name."""
    return signal.Signals(number).name if number in signal.Signals._value2member_map_ else str(number)


def signal_meaning(name: str) -> str:
    """What the signal ``name`` usually means (:data:`SIGNAL_MEANINGS`), else «процесс завершён сигналом»."""
    return SIGNAL_MEANINGS.get(name, "процесс завершён сигналом")
