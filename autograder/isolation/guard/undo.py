"""The worker's undo: the namespaces, builtins, signal handlers, timers, threads and gc callbacks the grader
relies on, snapshotted before student code and restored after it (each change reported)."""
from __future__ import annotations

import builtins
import contextlib
import gc
import json
import json.encoder
import os
import signal
import sys
import time
import tracemalloc
import types

import _tracemalloc
import numpy as np

from .state import Tampering, _deny, _state

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
            if issubclass(type(value), type) and value.__flags__ & _HEAP_TYPE and value.__module__ == module.__name__:
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


def trust_grader_changes() -> None:
    """The grader itself replaced some of its functions (a GPU stand-in installed or removed): take the modules
    as they are now as the state to restore after student code.  Never called while student code runs."""
    _watched.clear()
    _watch()


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
    if not _state["gpu"] and _state["threads"] is not None and _threads_left(_state["threads"]):
        problems.append("функция оставила работающие потоки")
    return problems


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
