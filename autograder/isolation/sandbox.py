"""The OS sandbox (bubblewrap) around every process that runs a student's code under grading.

The audit hook of :mod:`autograder.isolation.guard` is a speed bump: code that reaches native memory — ``ctypes``
(allowed to GPU checks), ``_posixsubprocess.fork_exec``, a compiled extension the student ships — leaves
it.  What holds is the kernel's view of the machine, made with ``bwrap`` (Debian/Ubuntu package
``bubblewrap``, the sandbox of Flatpak), one sandbox per submission:

* the filesystem read-only; writable only the sandbox's own folder (:attr:`Sandbox.scratch`: for the kernel its
  start folder, export files and sockets; for a check its folder and home, and nothing of another check's or of
  the kernel's), for the kernel a private copy of the submission folder at the submission's own path, and a
  private ``/tmp``;
* not visible at all (an empty folder in their place): the course folders (gradebook, ``solutions/``,
  ``submitted/``, ``autograded/``, other submissions), the grader's home (``~/.ipython``, ``~/.local``,
  ``~/.jupyter``, caches), ``/tmp``, ``/var/tmp``, ``/run``, ``/dev/shm`` and the grader's TMPDIR wherever it is
  (node-local scratch on Slurm: the other sandboxes' folders, the reply files of the checks); what the grader's
  programs need from inside them (the Python installation, the ``autograder`` package) comes back read-only;
* new PID, IPC, UTS, cgroup, user and network namespaces (no network at all; the grader's processes
  invisible), ``--die-with-parent`` (a killed grader leaves nothing running), ``--new-session`` (no
  terminal to inject into);
* GPU checks get the NVIDIA device nodes and nothing more;
* where the grader may make one, all of a submission's sandboxes run in one cgroup (:mod:`autograder.isolation.cgroup`):
  their memory together, the private ``/tmp`` included, and their processes, root's too, are capped.

Data still flows the way it did: the student's objects and the verdicts through the worker protocol
(:mod:`autograder.isolation.run`), the kernel's messages through jupyter_client's ``ipc`` transport (sockets in
the scratch folder); the grader's own process alone writes the gradebook.
"""
from __future__ import annotations

import dataclasses
import functools
import glob
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import tempfile

from . import cgroup as cgroup_module

#: Folders every sandbox hides besides the course folders and the grader's home.
ALWAYS_HIDDEN = ("/tmp", "/var/tmp", "/run")
#: The private /tmp of a sandbox, where bubblewrap can cap it (--size needs bubblewrap 0.9).
TMP_SIZE_BYTES = 1024 * 2**20
#: Processes (threads count) the grader's user may have while a sandboxed process runs: a fork bomb
#: stops there.  Not enforced for root, which the kernel exempts from RLIMIT_NPROC.
MAX_PROCESSES = 4096

INSTALL_HINT = ("Установите bubblewrap: `sudo apt-get install bubblewrap` (Debian/Ubuntu), `sudo dnf install "
                "bubblewrap` (Fedora); нужны включённые пользовательские пространства имён "
                "(sysctl kernel.unprivileged_userns_clone=1 или user.max_user_namespaces > 0). На macOS и "
                "Windows песочницы нет: проверяйте класс на Linux (в том числе в контейнере с --privileged "
                "или с разрешённым unshare).")


@dataclasses.dataclass(frozen=True)
class Sandbox:
    """One submission's sandbox."""

    scratch: str                          # host folder, bound read-write at the same path
    hidden: tuple[str, ...] = ()          # course folders to hide, besides ALWAYS_HIDDEN and the home
    submission: str | None = None         # the submission folder as the kernel sees it ...
    submission_copy: str | None = None    # ... backed by this private copy
    gpu: bool = False                     # the NVIDIA device nodes
    cgroup: "cgroup_module.Group | None" = None  # the submission's cgroup: memory and processes as a whole

    def with_gpu(self, gpu: bool) -> "Sandbox":
        return dataclasses.replace(self, gpu=gpu)


#: Where bubblewrap is, when not ``bwrap`` on PATH (``AUTOGRADER_BWRAP=/nonexistent``: as if missing).
BWRAP_ENV = "AUTOGRADER_BWRAP"


def bwrap_path() -> str | None:
    chosen = os.environ.get(BWRAP_ENV)
    if chosen:
        return chosen if os.access(chosen, os.X_OK) else None
    return shutil.which("bwrap")


@functools.lru_cache(maxsize=1)
def status() -> tuple[bool, str]:
    """(True, version) where bubblewrap can make a sandbox here, else (False, why not) in Russian."""
    if not sys.platform.startswith("linux"):
        return False, f"песочница bubblewrap есть только в Linux (здесь {sys.platform})"
    program = bwrap_path()
    if program is None:
        return False, "не найдена программа bwrap (пакет bubblewrap)"
    try:
        done = subprocess.run([program, "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--unshare-all",
                               "--die-with-parent", "--new-session", "--", "/bin/true"],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as error:
        return False, f"bwrap не запускается: {error}"
    if done.returncode != 0:
        return False, f"bwrap не может создать песочницу: {(done.stderr or '').strip()[:300]}"
    version = subprocess.run([program, "--version"], capture_output=True, text=True).stdout.strip()
    return True, version or "bubblewrap"


def available() -> bool:
    return status()[0]


@functools.lru_cache(maxsize=1)
def _version() -> tuple[int, ...]:
    text = subprocess.run([bwrap_path(), "--version"], capture_output=True, text=True).stdout.split()[-1:]
    try:
        return tuple(int(part) for part in text[0].split("."))
    except (IndexError, ValueError):
        return (0,)


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def needed_paths() -> list[str]:
    """What the grader's processes read inside a sandbox: the Python installation, its packages and this
    package (an editable install lives in the course folder), the CUDA libraries CuPy found — each where it
    really is and where it is named (a ``.venv`` that is a link to a folder elsewhere is run by the link's
    path: both must be there)."""
    from . import guard

    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, guard.PACKAGE_DIR,
             os.path.dirname(os.path.abspath(sys.executable)), os.path.dirname(os.path.realpath(sys.executable)),
             *sysconfig.get_paths().values(), *site.getsitepackages()}
    paths = [p for p in paths if os.path.exists(p)]
    return sorted({os.path.realpath(p) for p in paths} | {os.path.abspath(p) for p in paths})


#: The variable naming the test session's NVRTC cache (autograder/gpu/nvrtc.py, ``cached_compile``; only
#: tests/conftest.py sets it): where a sandbox is given it, its folder comes back read-only, so that the test
#: session's nbgrader runs read the kernels the session compiled before and never write there.
NVRTC_CACHE_ENV = "AUTOGRADER_NVRTC_CACHE"


#: What a sandbox keeps of the environment it is given (names, or prefixes ending in "_"): the rest of the
#: grader's environment (tokens, keys, paths into its home) never reaches student code.
PASSED_ENVIRONMENT = ("PATH", "LANG", "LANGUAGE", "LC_", "TZ", "TERM", "HOME", "XDG_", "CUDA_", "CUPY_", "NVIDIA_",
                      "LD_LIBRARY_PATH", "AUTOGRADER_", "OPENBLAS_", "OMP_", "MKL_", "PYTHONHASHSEED",
                      "PYTHONIOENCODING", "PYTHONUSERBASE", "MPLBACKEND", "MPLCONFIGDIR", "IPYTHONDIR", "JUPYTER_",
                      "JPY_", "TRITON_", "TORCH_HOME", "TORCHINDUCTOR_", "NUMBA_")


def passed_environment(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items()
            if any(k == name or (name.endswith("_") and k.startswith(name)) for name in PASSED_ENVIRONMENT)}


def gpu_devices() -> list[str]:
    """This machine's NVIDIA device nodes (none: no GPU can be used here, GPU checks run on the emulator)."""
    return sorted(glob.glob("/dev/nvidia*") + glob.glob("/dev/nvidia-caps/*"))


def command(sandbox: Sandbox, argv: list[str], *, env: dict[str, str], cwd: str) -> list[str]:
    """``argv`` as bubblewrap runs it in ``sandbox``, with exactly the environment ``env``, in ``cwd``."""
    home = os.path.realpath(os.path.expanduser("~"))
    hidden = [os.path.realpath(p) for p in (*ALWAYS_HIDDEN, tempfile.gettempdir(), home, *sandbox.hidden)
              if os.path.isdir(p)]
    hidden = [p for p in dict.fromkeys(hidden) if p != "/"]
    args = [bwrap_path(), "--ro-bind", "/", "/"]
    for folder in sorted(hidden, key=len):  # outer folders first: an inner one is hidden inside it
        args += ["--tmpfs", folder] if folder != "/tmp" or _version() < (0, 9) else \
            ["--size", str(TMP_SIZE_BYTES), "--tmpfs", folder]
    cache = env.get(NVRTC_CACHE_ENV)
    cache = [cache] if cache and os.path.isabs(cache) and os.path.isdir(cache) else []
    for path in [*needed_paths(), *cache]:  # back, read-only, where a hidden folder covered them (never a folder
        covered = any(_inside(path, folder) for folder in hidden)  # that holds a hidden one)
        if covered and not any(_inside(folder, path) for folder in hidden):
            args += ["--ro-bind", os.path.realpath(path), path]
    args += ["--proc", "/proc", "--dev", "/dev"]
    if sandbox.gpu:
        for device in gpu_devices():
            args += ["--dev-bind", device, device]
    args += ["--bind", sandbox.scratch, sandbox.scratch]
    if sandbox.submission and sandbox.submission_copy:
        args += ["--bind", sandbox.submission_copy, sandbox.submission]
    for folder in hidden:  # the empty folders in their place are read-only too (mount points made above)
        if folder != "/tmp":
            args += ["--remount-ro", folder]
    args += ["--unshare-all", "--die-with-parent", "--new-session", "--clearenv"]
    for name, value in passed_environment(env).items():
        args += ["--setenv", name, value]
    return cgroup_module.enter(sandbox.cgroup, [*args, "--chdir", cwd, "--", *argv])


def process_limit() -> int:
    """RLIMIT_NPROC for a sandbox: the grader's user's processes and threads now, plus :data:`MAX_PROCESSES`
    (the limit counts every process of the user, the grader's own included)."""
    uid, count = os.getuid(), 0
    for task in glob.glob("/proc/[0-9]*/task/[0-9]*"):
        try:
            count += os.stat(task).st_uid == uid
        except OSError:
            pass
    return count + MAX_PROCESSES
