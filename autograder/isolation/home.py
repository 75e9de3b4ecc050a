"""Each worker's own home: the environment a check runs with, and an empty home folder of its own.

Nothing the grader's or the student's home holds (the CUDA driver's JIT cache, CuPy's compiled kernels,
matplotlib's font list, IPython startup files) reaches a check, and nothing one check writes reaches the
next: every cache and settings variable points into a fresh copy of :func:`home_template`.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import threading

from . import leftovers

#: Environment of the worker: one BLAS thread (deterministic, small address space).
WORKER_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "PYTHONHASHSEED": "0", "MPLBACKEND": "Agg", "PYTHONIOENCODING": "utf-8"}

#: Where programs look for settings and keep caches, relative to the worker's own empty home (a folder of
#: its scratch folder, gone after the check): nothing the grader's or the student's home holds (the CUDA
#: driver's JIT cache, CuPy's compiled kernels, matplotlib's font list, IPython startup files) reaches a
#: check, and nothing one check writes reaches the next.  Each check compiles its kernels afresh.
HOME_VARIABLES = {
    "HOME": "", "XDG_CACHE_HOME": ".cache", "XDG_CONFIG_HOME": ".config", "XDG_DATA_HOME": ".local/share",
    "XDG_STATE_HOME": ".local/state", "XDG_RUNTIME_DIR": ".run",
    "CUDA_CACHE_PATH": ".nv/ComputeCache",      # the driver's JIT cache (PTX -> machine code)
    "CUPY_CACHE_DIR": ".cupy/kernel_cache",     # CuPy's compiled RawKernels
    "MPLCONFIGDIR": ".config/matplotlib",
    "IPYTHONDIR": ".ipython", "JUPYTER_CONFIG_DIR": ".jupyter", "JUPYTER_DATA_DIR": ".local/share/jupyter",
    "TRITON_CACHE_DIR": ".triton/cache", "TORCH_HOME": ".cache/torch", "TORCHINDUCTOR_CACHE_DIR": ".cache/inductor",
    "NUMBA_CACHE_DIR": ".cache/numba", "PYTHONUSERBASE": ".local",
}
#: Of the grader's environment these would point a worker back at files of the grader's own.
DROPPED_VARIABLES = ("MATPLOTLIBRC", "JUPYTER_CONFIG_PATH", "JUPYTER_PATH", "PYTHONSTARTUP")


def home_variables(folder: str) -> dict[str, str]:
    """The environment variables that point a worker's programs at a home in ``folder``."""
    return {name: os.path.join(folder, path) if path else folder for name, path in HOME_VARIABLES.items()}


def private_home(folder: str) -> dict[str, str]:
    """Make ``folder`` a fresh home (a copy of :func:`home_template`); its environment variables."""
    shutil.copytree(home_template(), folder, dirs_exist_ok=True)
    os.chmod(os.path.join(folder, ".run"), 0o700)
    return home_variables(folder)


_TEMPLATE: dict = {}
_TEMPLATE_LOCK = threading.Lock()


def build_home_template(folder: str) -> str:
    """Make ``folder`` a home template: only what this machine's own software writes into an empty home —
    matplotlib's font list, built here so that no check runs ``fc-list`` (a new process, which the guard refuses
    once student code has run) or spends seconds on it.  Nothing in it comes from the grader's or the student's
    home.  Half a second of CPU."""
    os.makedirs(os.path.join(folder, ".run"), mode=0o700, exist_ok=True)
    env = {**worker_environment(), **home_variables(folder)}
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run([sys.executable, "-I", "-c", "import matplotlib.font_manager"], env=env, cwd=folder,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=120)
    return folder


def use_home_template(folder: str) -> None:
    """This process's workers copy their homes from ``folder``, a template another process built
    (:func:`build_home_template`) and removes: ``course autograde`` builds one in its scratch folder for all its
    workers, instead of one in each."""
    with _TEMPLATE_LOCK:
        _TEMPLATE.update(owner=os.getpid(), folder=folder, keep=None)


def home_template() -> str:
    """The home every worker's home is a copy of: the one given to :func:`use_home_template`, else one built once
    per grading process in a temporary folder of its own."""
    with _TEMPLATE_LOCK:
        if _TEMPLATE.get("owner") != os.getpid():
            keep = leftovers.OwnedFolder(leftovers.HOME_TEMPLATE)
            _TEMPLATE.update(owner=os.getpid(), folder=build_home_template(keep.name), keep=keep)
        return _TEMPLATE["folder"]


def worker_environment(base: dict | None = None) -> dict[str, str]:
    """The grader's environment with the worker's own settings, minus what points at the grader's caches
    (the home variables come per check: :func:`private_home`)."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in DROPPED_VARIABLES}
    return {**env, **WORKER_ENV}
