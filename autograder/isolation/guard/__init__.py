"""What student code may not do on the grader's machine, and the undo of what it did anyway.

Student code runs in two places while a notebook is graded:

* **the check worker** (:mod:`autograder.isolation.worker`), or for a CPU check the student process it forks
  (:mod:`autograder.checks.student_process`, which inherits this guard): the student's objects are unpickled
  and called by a check.  :func:`install` adds an audit hook (PEP 578) and :func:`student_code` marks the
  stretches where student code runs.  There, and in any thread the student started, the hook
  refuses to read notebooks, the instructor's ``solutions/`` / ``source/`` and the gradebook; to
  import ``autograder`` or re-import ``tracemalloc``; to reach stack frames, the garbage
  collector's object lists, ``ctypes`` (CPU checks), ``sys.settrace`` or another audit hook; to
  rewrite the code or defaults of functions, or the attributes of classes, that existed before
  student code ran; to start processes or signal other ones.  A refusal is recorded, so catching
  the exception does not help.  After each call the namespaces the grader relies on (numpy,
  builtins, tracemalloc, json, os, the ``autograder`` modules) are compared with what they were,
  restored, and any change is reported, as are signal handlers and threads left behind; the
  tracemalloc functions that would reset a measurement raise while student code runs.
* **the student's kernel under** ``nbgrader autograde`` (:mod:`autograder.nbgrader.execute`):
  :func:`install_kernel` caps the kernel's memory and adds a hook that refuses to read notebooks,
  solutions and the gradebook, to write into the course, the grader's code or the Python
  environment, to start processes and to signal other processes.

An audit hook is a speed bump, not a sandbox: code that reaches native memory (a C extension,
``ctypes`` where it is allowed) can undo any of this.  What holds under grading is the OS sandbox both
run in (:mod:`autograder.isolation.sandbox`); this guard keeps honest mistakes and casual tampering from costing or
earning points.
"""
from __future__ import annotations

import _thread
import contextlib
import gc
import os
import resource
import signal
import sys
import tracemalloc

import _tracemalloc

from .audit import _audit, _configure_files, allow_grader_program
from .state import PACKAGE_DIR, REPOSITORY, Tampering, _state, loaded_modules, refused_to_grader
from .undo import (_STUBS, _restore_builtins, _restore_gc, _signal_handlers, _thread_count, _undo, _watch,
                   trust_grader_changes)

__all__ = ["PACKAGE_DIR", "REPOSITORY", "Tampering", "allow_grader_program", "cap_resources", "describe",
           "grader_thread", "install", "install_kernel", "refused_to_grader", "student_code", "verify"]


# --- the worker ------------------------------------------------------------------------------

def install(*, gpu: bool = False, secret_dirs=(), write_protected=()) -> None:
    """Worker: add the audit hook and remember the state student code must not change.

    Call once, after the check is imported and before any student object is unpickled.
    """
    if _state["mode"] is not None:
        return
    modules = [module for _, module in loaded_modules() if hasattr(module, "__dict__")]
    _configure_files(secret_dirs, write_protected)
    _state.update(mode="worker", main_thread=_thread.get_ident(), gpu=gpu,
                  module_dicts=frozenset(id(vars(m)) for m in modules),
                  type_ids=frozenset(id(v) for m in modules for v in list(vars(m).values())
                                     if issubclass(type(v), type)),  # not isinstance: it reads __class__
                  signals=_signal_handlers(), threads=_thread_count())
    _watch()
    sys.addaudithook(_audit)


@contextlib.contextmanager
def student_code():
    """Run the block as student code: guarded, then everything it changed restored and reported."""
    _watch()
    violations = len(_state["violations"])
    hidden = {name: sys.modules.pop(name) for name in list(sys.modules)
              if name.split(".")[0] == "autograder"}
    for space in (vars(tracemalloc), vars(_tracemalloc)):
        space.update(_STUBS)
    gc_state = gc.get_threshold(), gc.isenabled(), list(gc.callbacks)
    previous = _state["student"]
    _state["student"] = _state["tainted"] = True
    try:
        yield
    finally:
        builtins_changed = _restore_builtins()  # first: the code below calls builtins
        _state["student"] = previous
        sys.modules.update(hidden)
        problems = _undo(builtins_changed) + _state["violations"][violations:]
        if _restore_gc(*gc_state):
            problems.append("функция подключила обработчик сборщика мусора")
        if problems:
            raise Tampering("; ".join(dict.fromkeys(problems)) + " — при проверке это запрещено")


@contextlib.contextmanager
def grader_thread():
    """For the block, the calling thread is the grader's own, not student code's (any thread but the main one
    counts as student code otherwise): a check's helper thread that starts a grader program (compute-sanitizer)."""
    ident = _thread.get_ident()
    _state["grader_threads"].add(ident)
    try:
        yield
    finally:
        _state["grader_threads"].discard(ident)


def verify() -> str | None:
    """Worker, before it replies: has student code (a finalizer, a thread) changed anything since?"""
    if _state["mode"] != "worker" or not _state["tainted"]:
        return None
    builtins_changed = _restore_builtins()
    _watch()
    problems = _undo(builtins_changed)
    return "; ".join(problems) + " — при проверке это запрещено" if problems else None


def describe(error: BaseException) -> tuple[str, str]:
    """The name and message of a student's exception, computed as student code (its __str__ is)."""
    name, text = "исключение", "(сообщение не удалось получить)"
    with student_code():
        try:
            name, text = type(error).__name__, str(error)
        except BaseException:  # noqa: BLE001 - a __str__ that raises is the student's problem
            pass
    if type(name) is not str or type(text) is not str:
        return "исключение", "(сообщение не строка)"
    return name, text


# --- limits shared by the worker and the kernel ----------------------------------------------

def cap_resources(memory_gib: float | None, file_mib: float | None = None, processes: int | None = None) -> None:
    """Cap the address space (MemoryError instead of the OOM killer), the size of one file and the
    processes of this user (in a sandbox: :func:`autograder.isolation.sandbox.process_limit`)."""
    limits = []
    if memory_gib:
        limits.append((resource.RLIMIT_AS, int(memory_gib * 2**30)))
    if file_mib:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-large write fails, it does not kill
        limits.append((resource.RLIMIT_FSIZE, int(file_mib * 2**20)))
    if processes:
        limits.append((resource.RLIMIT_NPROC, int(processes)))
    for kind, limit in limits:
        _, hard = resource.getrlimit(kind)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(kind, (limit, hard))


# --- the student's kernel under autograde ----------------------------------------------------

def install_kernel(*, memory_gib: float | None, secret_dirs=(), write_protected=(),
                   submission_dir: str | None = None, processes: int | None = None) -> None:
    """Kernel under autograde: cap memory, keep the course's secrets and code out of reach.

    The kernel was started in an empty folder, so that nothing the student submitted beside the
    notebook (a ``numpy.py``, an ``autograder.py``) could be imported before this runs.  Only now
    does it move into ``submission_dir``, which goes to the END of ``sys.path``: a helper module
    of the student's is importable, a file named like an installed module never shadows it.
    Writing stays allowed in the submission folder and outside the course.
    """
    if _state["mode"] is not None:
        return
    if submission_dir is not None:
        start = os.path.abspath(os.getcwd())
        sys.path[:] = [p for p in sys.path if p not in ("", ".") and os.path.abspath(p) != start]
        os.chdir(submission_dir)
        sys.path.append(os.path.abspath(submission_dir))
    cap_resources(memory_gib, 1024, processes)
    _configure_files(secret_dirs, write_protected)
    _state["mode"] = "kernel"
    sys.addaudithook(_audit)
