"""The audit hook (PEP 578): what student code may not open, write, start, signal, import or reach."""
from __future__ import annotations

import os
import sys
import types
from importlib.machinery import ModuleSpec

from .state import PACKAGE_DIR, REPOSITORY, _deny, _state, _student_now

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


def refuses_writing(path: str) -> bool:
    """Whether the guard of this process would refuse opening ``path`` for writing now (to the grader's own code
    too, once student code has run): what code that may run then asks before it writes."""
    return _state["mode"] is not None and _restricted() and _write_protected(os.path.abspath(path))


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
        if path and path.startswith("/proc/") and path.endswith("/clear_refs") and _student_now():
            _deny("при проверке нельзя сбрасывать счётчики памяти процесса")  # the memory check reads them
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
