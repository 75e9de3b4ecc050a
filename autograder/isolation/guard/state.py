"""The guard's state in this process, its refusal and its exception (the other guard modules share them)."""
from __future__ import annotations

import _thread
import importlib.util
import os
import sys

_state = {
    "mode": None,          # None, "worker" or "kernel"
    "student": False,      # the main thread is running student code
    "tainted": False,      # student code has run in this process: its hooks may run at any time
    "main_thread": None,
    "grader_threads": set(),       # other threads of the grader's own (grader_thread): not student code
    "gpu": False,          # a GPU check: native libraries (ctypes) and driver threads are expected
    "module_dicts": frozenset(),   # ids of module namespaces present before student code
    "type_ids": frozenset(),       # ids of classes present before student code
    "violations": [],
    "secret": (),                  # folders student code may not read
    "write_protected": (),         # folders student code may not change...
    "write_allowed": (),           # ... except these
    "signals": {},                 # handlers at install (none before: nothing to restore)
    "threads": None,               # threads at install (None before: not counted)
}

#: The repository checkout this package lives in (its solutions/ are the instructor's).
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # autograder/
REPOSITORY = os.path.dirname(PACKAGE_DIR)


def loaded_modules() -> list[tuple[str, object]]:
    """``sys.modules`` less what is not a loaded module: ``None``, and the placeholders of
    :class:`importlib.util.LazyLoader`, whose first attribute access imports the module (CuPy 14 puts ``cupyx``
    there so).  The grader looking at one must not be what imports it: with the GPU stand-in as ``cupy``
    (:func:`autograder.gpu.runtime.stand_in`) that import runs real CuPy code against the stand-in and fails."""
    lazy = getattr(importlib.util, "_LazyModule", None)
    return [(name, module) for name, module in list(sys.modules.items())
            if module is not None and (lazy is None or type(module) is not lazy)]


class Tampering(Exception):
    """Student code changed, or tried to reach, the grader's environment."""


def _student_now() -> bool:
    """Student code is running right now (the main thread in a student call, or its threads)."""
    ident = _thread.get_ident()
    return _state["student"] or (ident != _state["main_thread"] and ident not in _state["grader_threads"])


def _deny(message: str, error: type[Exception] = PermissionError):
    if _state["mode"] == "kernel" or _student_now():  # a refusal caught by the student still counts
        _state["violations"].append(message)
        raise error(message)
    refusal = error(message)
    refusal.autograder_refused_grader = message  # the check's own code was stopped: see refused_to_grader
    raise refusal


def refused_to_grader(error: BaseException) -> str | None:
    """The guard's reason when ``error``, the exception that ended a check, is a refusal of the check's own
    code rather than of the student's (the grader's defect, reported as a grader fault); else None.
    Only the guard's own exception types are read, through their ``__dict__``: no student code runs here."""
    if type(error) not in (PermissionError, ImportError, Tampering):
        return None
    reason = error.__dict__.get("autograder_refused_grader")
    return reason if type(reason) is str else None
