"""Timing probe for benchmarks/course_grade.py: never imported by the course itself.

The benchmark puts this folder on PYTHONPATH and names a log file in COURSE_BENCH_LOG; every
Python process it starts that is not isolated (nbgrader, the student's kernel; not the check
workers, which run ``python -I``) imports this module first.  It wraps, from the outside, the
functions whose time the table splits up and appends one JSON line per span to the log:

    process    this interpreter, from here to exit (argv says which command; nbgrader: whether it
               ran nbgrader's converters, unlike the ``alembic`` process nbgrader starts)
    converter  nbgrader's BaseConverter.start (GenerateAssignment, Autograde, ...)
    preprocess IsolatedExecute.preprocess: kernel start, all cells, kernel shutdown
    cell       IsolatedExecute.preprocess_cell (one notebook cell; a test cell includes its checks)
    check      IsolatedExecute._run (one check, in its own process)
"""
import atexit
import functools
import importlib.abc
import json
import os
import sys
import time

LOG = os.environ.get("COURSE_BENCH_LOG")


def _record(kind, start, end, **extra):
    with open(LOG, "a") as log:
        log.write(json.dumps({"kind": kind, "pid": os.getpid(), "start": start, "end": end, **extra}) + "\n")


def _timed(kind, function, describe=None):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        start = time.time()
        try:
            return function(*args, **kwargs)
        finally:
            _record(kind, start, time.time(), **(describe(*args, **kwargs) if describe else {}))
    return wrapper


_NBGRADER = []  # set when this process loads nbgrader's converters (not alembic, not a kernel)


def _patch(name, module):
    if name == "nbgrader.converters.base":
        _NBGRADER.append(True)
        cls = module.BaseConverter
        original = cls.start

        def start(self, *args, **kwargs):
            begin = time.time()
            try:
                return original(self, *args, **kwargs)
            finally:
                _record("converter", begin, time.time(), name=type(self).__name__)
        cls.start = start
    elif name == "autograder.nbgrader.execute":
        cls = module.IsolatedExecute
        cls.preprocess = _timed("preprocess", cls.preprocess)
        cls.preprocess_cell = _timed("cell", cls.preprocess_cell,
                                     lambda self, cell, resources, index: {"index": index})
        cls._run = _timed("check", cls._run, lambda self, call, exported: {"check": call.check_id})


_WATCHED = {"nbgrader.converters.base", "autograder.nbgrader.execute"}


class _Finder(importlib.abc.MetaPathFinder):
    """Patches a watched module right after it is executed."""

    def find_spec(self, name, path, target=None):
        if name not in _WATCHED:
            return None
        sys.meta_path.remove(self)
        try:
            from importlib.util import find_spec
            spec = find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            _patch(name, module)
        spec.loader.exec_module = exec_module
        return spec


if LOG and "ipykernel" not in " ".join(getattr(sys, "orig_argv", sys.argv)):
    _BEGIN = time.time()
    sys.meta_path.insert(0, _Finder())
    atexit.register(lambda: _record("process", _BEGIN, time.time(), argv=sys.argv[1:4],
                                    nbgrader=bool(_NBGRADER)))
