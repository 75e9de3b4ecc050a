"""What student code may not do on the grader's machine, and the undo of what it did anyway.

Student code runs in two places while a notebook is graded:

* **the check worker** (:mod:`autograder.isolation.worker`): the student's objects are unpickled and called
  by a check.  :func:`install` adds an audit hook (PEP 578) and :func:`student_code` marks the
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
import builtins
import contextlib
import gc
import json
import json.encoder
import os
import resource
import signal
import sys
import time
import tracemalloc
import types
from importlib.machinery import ModuleSpec

import _tracemalloc
import numpy as np

_state = {
    "mode": None,          # None, "worker" or "kernel"
    "student": False,      # the main thread is running student code
    "tainted": False,      # student code has run in this process: its hooks may run at any time
    "main_thread": None,
    "gpu": False,          # a GPU check: native libraries (ctypes) and driver threads are expected
    "module_dicts": frozenset(),   # ids of module namespaces present before student code
    "type_ids": frozenset(),       # ids of classes present before student code
    "violations": [],
    "secret": (),                  # folders student code may not read
    "write_protected": (),         # folders student code may not change...
    "write_allowed": (),           # ... except these
}

#: The repository checkout this package lives in (its solutions/ are the instructor's).
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # autograder/, this room's parent
REPOSITORY = os.path.dirname(PACKAGE_DIR)

_FRAME_ATTRIBUTES = {"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back", "f_globals",
                     "f_locals", "f_builtins"}
_FUNCTION_ATTRIBUTES = {"__code__", "__defaults__", "__kwdefaults__", "__globals__"}
_FRAMES = {"sys._getframe", "sys._current_frames", "sys._current_exceptions",
           "sys._getframemodulename"}
_INTROSPECTION = {"gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys.settrace",
                  "sys.setprofile", "sys.addaudithook"}
_PROCESSES = ("os.system", "os.exec", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn",
              "subprocess.Popen", "pty.spawn", "os.startfile")
_SIGNALS = ("os.kill", "os.killpg", "signal.pthread_kill")
_FILE_CHANGES = ("os.remove", "os.rename", "os.rmdir", "os.truncate", "os.chmod", "os.chown",
                 "os.link", "os.symlink", "os.mkdir", "os.utime", "shutil.rmtree")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class Tampering(Exception):
    """Student code changed, or tried to reach, the grader's environment."""


def _student_now() -> bool:
    """Student code is running right now (the main thread in a student call, or its threads)."""
    return _state["student"] or _thread.get_ident() != _state["main_thread"]


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


def _no_frames(what: str):
    """Frames are refused with ValueError ("stack not that deep"), which namedtuple, typing and
    enum catch and fall back from; not a violation, since nothing was reached."""
    raise ValueError(f"при проверке нельзя обращаться к кадрам стека ({what})")


def _restricted() -> bool:
    # Once student code has run, its finalizers, __str__ and other hooks can run at any time,
    # so the restrictions stay on for the rest of the worker's life (frames and imports aside:
    # the grader's own code needs them).
    return _state["mode"] == "kernel" or _state["tainted"] or _student_now()


def _inside(path: str, roots) -> bool:
    return any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def _secret(path: str) -> bool:
    return (path.endswith((".ipynb", "gradebook.db")) or _inside(path, _state["secret"])
            or (path.startswith("/proc/") and path.endswith(("/mem", "/clear_refs"))))


def _write_protected(path: str) -> bool:
    return _inside(path, _state["write_protected"]) and not _inside(path, _state["write_allowed"])


def _path(value) -> str | None:
    """Audit events carry paths already converted to str/bytes; nothing else is a path here."""
    if type(value) in (str, bytes):
        return os.path.abspath(os.fsdecode(value))
    return None


def _writes(args: tuple) -> bool:
    mode = args[1] if len(args) > 1 else None
    flags = args[2] if len(args) > 2 else 0
    if isinstance(mode, str):
        return any(c in mode for c in "wax+")
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


def _protected_function(obj) -> bool:
    """A function of a module that existed before student code ran (the grader's, numpy's...)."""
    return type(obj) is types.FunctionType and id(obj.__globals__) in _state["module_dicts"]


_GRADER_PROGRAMS: set = set()


def allow_grader_program(path: str) -> None:
    """Let checks start ``path`` even after student code ran (call before student code runs)."""
    if _state["mode"] is None or not _restricted():
        _GRADER_PROGRAMS.add(os.path.realpath(path))


def _grader_program(args: tuple) -> bool:
    argv = args[1] if len(args) > 1 else None
    program = args[0] if args and args[0] else (argv[0] if isinstance(argv, (list, tuple)) and argv else None)
    return program is not None and os.path.realpath(os.fsdecode(program)) in _GRADER_PROGRAMS


def _importing() -> bool:
    """A module is being imported: library code (collections.namedtuple...) reads frames then.

    Unpickling a student's function imports the modules it references (matplotlib...).
    """
    for module in list(sys.modules.values()):
        if type(module) is types.ModuleType:  # plain types only: no student code in the hook
            spec = module.__dict__.get("__spec__")
            if type(spec) is ModuleSpec and spec.__dict__.get("_initializing") is True:
                return True
    return False


def _audit(event: str, args: tuple) -> None:
    if _state["mode"] is None or not _restricted():
        return
    if event == "open" and args:
        path = _path(args[0])
        if path and _secret(path):
            _deny(f"при проверке нельзя открывать файл {path}")
        if path and _writes(args) and _write_protected(path):
            _deny(f"при проверке нельзя писать в {path}")
    elif event == "sqlite3.connect" and args:
        path = _path(args[0])
        if path and _secret(path):
            _deny(f"при проверке нельзя открывать базу {path}")
    elif event in _FILE_CHANGES:
        for value in args:
            path = _path(value)
            if path and (_secret(path) or _write_protected(path)):
                _deny(f"при проверке нельзя изменять {path}")
    elif event.startswith(_PROCESSES):
        if event == "subprocess.Popen" and not _student_now() and _grader_program(args):
            return  # e.g. compute-sanitizer started by a GPU check after the student's call
        _deny("при проверке нельзя запускать процессы")
    elif event in _SIGNALS:
        if args and args[0] != os.getpid():
            _deny("при проверке нельзя посылать сигналы другим процессам")
    elif _state["mode"] == "kernel":
        return  # the rest guards the worker: the kernel is the student's own program
    elif event == "import" and args:
        if not _student_now():
            return  # the grader's own lazy imports
        name = str(args[0])
        if name.split(".")[0] == "autograder":
            _deny("решению нельзя импортировать autograder: эталоны — не решение", ImportError)
        if name in ("tracemalloc", "_tracemalloc"):
            _deny("при проверке нельзя заново импортировать tracemalloc", ImportError)
    elif event in _FRAMES:
        if _student_now() and not _importing():
            _no_frames(event)
    elif event in _INTROSPECTION:
        _deny(f"при проверке нельзя вызывать {event}")
    elif event.startswith("ctypes.") and not _state["gpu"]:
        _deny("при проверке нельзя пользоваться ctypes")
    elif event == "object.__getattr__" and len(args) >= 2 and _student_now():
        if args[1] in _FRAME_ATTRIBUTES and not _importing():
            _no_frames(args[1])
        if args[1] in _FUNCTION_ATTRIBUTES and _protected_function(args[0]) and not _importing():
            _deny(f"при проверке нельзя читать {args[1]} функций проверки и библиотек")
    elif event in ("object.__setattr__", "object.__delattr__") and len(args) >= 2:
        target = args[0]
        if isinstance(target, type) and id(target) in _state["type_ids"]:
            _deny(f"при проверке нельзя менять класс {target.__qualname__}")
        if args[1] in _FUNCTION_ATTRIBUTES and _protected_function(target):
            _deny(f"при проверке нельзя подменять {args[1]} функций проверки и библиотек")


def _configure_files(secret_dirs, write_protected) -> None:
    """Folders to keep secret and to keep unchanged (the working folder inside them excepted)."""
    import site
    import sysconfig

    paths = sysconfig.get_paths()
    secret = [os.path.join(REPOSITORY, "solutions"), os.path.join(REPOSITORY, "source"), *secret_dirs]
    protected = [PACKAGE_DIR, sys.prefix, sys.base_prefix, paths["purelib"], paths["platlib"],
                 paths["stdlib"], *site.getsitepackages(), *write_protected]
    _state.update(secret=tuple(os.path.abspath(p) for p in secret),
                  write_protected=tuple(os.path.abspath(p) for p in protected),
                  write_allowed=(os.path.abspath(os.getcwd()),))


# --- the worker ------------------------------------------------------------------------------

_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class defined in Python, whose attributes can be set


def _namespaces() -> dict[str, tuple]:
    """name -> (namespace, owner): modules the grader relies on and the classes they define."""
    modules = {"numpy": np, "numpy.linalg": np.linalg, "tracemalloc": tracemalloc,
               "_tracemalloc": _tracemalloc, "json": json, "json.encoder": json.encoder, "os": os}
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] == "autograder" and type(module) is types.ModuleType:
            modules[name] = module
    spaces = {}
    for name, module in modules.items():
        spaces[name] = (vars(module), module)
        for value in list(vars(module).values()):
            if isinstance(value, type) and value.__flags__ & _HEAP_TYPE and value.__module__ == module.__name__:
                spaces[f"{name}.{value.__qualname__}"] = (vars(value), value)
    return spaces


def _lazy_submodule(key: str, value) -> bool:
    """``np.random`` appearing in numpy's namespace on first use is an import, not tampering."""
    return type(value) is types.ModuleType and getattr(value, "__name__", "").endswith("." + key)


def _code_like(value) -> bool:
    return callable(value) or type(value) is types.ModuleType


class _Watched:
    """A module's or a class's namespace and the state it must be in whenever student code is
    not running."""

    def __init__(self, name: str, space, owner):
        self.owner = owner
        self.grader = name.split(".")[0] == "autograder"
        self.snapshot = dict(space)

    @property
    def space(self):
        return vars(self.owner)

    def _set(self, key, value) -> None:
        if isinstance(self.owner, type):
            setattr(self.owner, key, value)
        else:
            self.space[key] = value

    def _delete(self, key) -> None:
        if isinstance(self.owner, type):
            delattr(self.owner, key)
        else:
            del self.space[key]

    def accept_trusted_changes(self) -> None:
        """Between student calls the grader may import submodules and update its own data."""
        for key, value in list(self.space.items()):
            old = self.snapshot.get(key, _MISSING)
            if value is not old and (_lazy_submodule(key, value) or (
                    self.grader and not _code_like(value) and not _code_like(old))):
                self.snapshot[key] = value

    def restore(self, stubs: dict) -> bool:
        """Undo any other change; True when there was one (our own stubs aside)."""
        space = self.space
        tampered = False
        for key in [k for k in space if k not in self.snapshot]:
            if _lazy_submodule(key, space[key]):
                self.snapshot[key] = space[key]
            else:
                tampered = True
                self._delete(key)
        for key, value in self.snapshot.items():
            current = space.get(key, _MISSING)
            if current is not value:
                tampered = tampered or stubs.get(key) is not current
                self._set(key, value)
        return tampered


_MISSING = object()
_watched: dict[str, _Watched] = {}
_RESETTING = ("start", "stop", "clear_traces", "reset_peak")


def _stub(name: str):
    def refuse(*args, **kwargs):
        _deny(f"при проверке нельзя вызывать tracemalloc.{name}(): это сбивает измерение памяти",
              Tampering)
    return refuse


_STUBS = {name: _stub(name) for name in _RESETTING}


def install(*, gpu: bool = False, secret_dirs=(), write_protected=()) -> None:
    """Worker: add the audit hook and remember the state student code must not change.

    Call once, after the check is imported and before any student object is unpickled.
    """
    if _state["mode"] is not None:
        return
    modules = [m for m in list(sys.modules.values()) if m is not None and hasattr(m, "__dict__")]
    _configure_files(secret_dirs, write_protected)
    _state.update(mode="worker", main_thread=_thread.get_ident(), gpu=gpu,
                  module_dicts=frozenset(id(vars(m)) for m in modules),
                  type_ids=frozenset(id(v) for m in modules for v in list(vars(m).values())
                                     if isinstance(v, type)),
                  signals=_signal_handlers(), threads=_thread_count())
    _watch()
    sys.addaudithook(_audit)


def _watch() -> None:
    for name, (space, owner) in _namespaces().items():
        watched = _watched.get(name)
        if watched is None or watched.owner is not owner:
            _watched[name] = _Watched(name, space, owner)
        else:
            watched.accept_trusted_changes()


def _signal_handlers() -> dict:
    handlers = {}
    for number in signal.valid_signals():
        with contextlib.suppress(ValueError, OSError):
            handlers[number] = signal.getsignal(number)
    return handlers


def _thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading
        return threading.active_count()


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


def _restore_builtins() -> bool:
    """Put builtins back without calling a single builtin (they may be the student's now)."""
    space, snapshot = builtins.__dict__, _BUILTINS
    if space.keys() == snapshot.keys():
        for key, value in snapshot.items():
            if space[key] is not value:
                break
        else:
            return False
    space.clear()
    space.update(snapshot)
    return True


_BUILTINS = dict(builtins.__dict__)


def _undo(builtins_changed: bool = False) -> list[str]:
    """Restore what student code changed; say what it was."""
    problems = []
    changed = sorted(name for name, w in _watched.items() if w.restore(_STUBS))
    if builtins_changed:
        changed.insert(0, "builtins")
    if changed:
        problems.append("функция подменила объекты в " + ", ".join(changed))
    if _restore_signals():
        problems.append("функция поменяла обработчики сигналов или таймеры")
    if not _state["gpu"] and _threads_left(_state["threads"]):
        problems.append("функция оставила работающие потоки")
    return problems


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


def _restore_gc(threshold, enabled, callbacks) -> bool:
    """Thresholds and enabling are restored quietly; a callback of the student's is tampering."""
    gc.set_threshold(*threshold)
    (gc.enable if enabled else gc.disable)()
    if gc.callbacks != callbacks:
        gc.callbacks[:] = callbacks
        return True
    return False


def _restore_signals() -> bool:
    changed = False
    for number, handler in _state["signals"].items():
        with contextlib.suppress(ValueError, OSError, TypeError):
            if signal.getsignal(number) is not handler:
                signal.signal(number, handler)
                changed = True
    for timer in (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF):
        if signal.getitimer(timer) != (0.0, 0.0):
            signal.setitimer(timer, 0)
            changed = True
    return changed


def _threads_left(before: int) -> bool:
    deadline = time.monotonic() + 0.5  # a joined thread may take a moment to leave /proc
    while _thread_count() > before:
        if time.monotonic() > deadline:
            return True
        time.sleep(0.01)
    return False


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
