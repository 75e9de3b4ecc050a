"""What student code may not do inside the worker, and the undo of what it did anyway.

* an audit hook refuses, while student code runs, to open notebooks or the instructor's
  ``solutions/`` / ``source/`` folders and to import ``autograder`` (the oracles are not a
  solution);
* the namespaces checks rely on (numpy, builtins, tracemalloc, the ``autograder`` modules) are
  snapshot before a student call and restored after it; a change is reported as tampering.
"""
from __future__ import annotations

import builtins
import contextlib
import os
import sys
import tracemalloc

import numpy as np

_state = {"student": False, "installed": False}

_FORBIDDEN_DIRS = (os.sep + "solutions" + os.sep, os.sep + "source" + os.sep)


class Tampering(Exception):
    """Student code changed the grader's environment."""


def _audit(event: str, args: tuple) -> None:
    if not _state["student"]:
        return
    if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.path.abspath(os.fsdecode(args[0]))
        if path.endswith(".ipynb") or any(d in path for d in _FORBIDDEN_DIRS) or path.endswith("gradebook.db"):
            raise PermissionError(f"при проверке решению нельзя читать файл {path}")
    elif event == "import" and args and str(args[0]).split(".")[0] == "autograder":
        raise ImportError("решению нельзя импортировать autograder: эталоны — не решение")


def install() -> None:
    """Add the audit hook (once per process; audit hooks cannot be removed)."""
    if not _state["installed"]:
        sys.addaudithook(_audit)
        _state["installed"] = True


def _watched() -> dict[str, dict]:
    spaces = {"numpy": vars(np), "numpy.linalg": vars(np.linalg), "builtins": vars(builtins),
              "tracemalloc": vars(tracemalloc)}
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] == "autograder" and module is not None:
            spaces[name] = vars(module)
    return spaces


@contextlib.contextmanager
def student_code():
    """Run the block as student code: guarded, and with the watched namespaces restored."""
    spaces = _watched()
    snapshot = {name: dict(space) for name, space in spaces.items()}
    hidden = {name: sys.modules.pop(name) for name in list(sys.modules)
              if name.split(".")[0] == "autograder"}
    previous = _state["student"]
    _state["student"] = True
    try:
        yield
    finally:
        _state["student"] = previous
        sys.modules.update(hidden)
        changed = []
        for name, space in spaces.items():
            before = snapshot[name]
            if space.keys() != before.keys() or any(space[k] is not v for k, v in before.items()):
                changed.append(name)
                space.clear()
                space.update(before)
        if changed:
            raise Tampering("функция подменила объекты модулей " + ", ".join(sorted(changed))
                            + " — при проверке это запрещено")
