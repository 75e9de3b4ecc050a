"""Fill the test session's NVRTC cache with the GPU lessons' reference kernels while the tests start.

    python tests/nvrtc_prefill.py CACHE_FOLDER

tests/conftest.py starts it in the background when a run collects end-to-end or bank tests of a GPU lesson.  Those
tests compile the same reference kernels again and again: the compile checks for three architectures (lesson 11's:
3 s each on one core) and the PTX the emulator runs, in every check's fresh process; the first to need one would
each compile it at once, since the costliest tests all start together.  Here each reference kernel is compiled once,
in the order the tests need them, through the cache's own functions (autograder/gpu/nvrtc.py: entries named by the
compiler, the options and the whole source, a lock per entry that the tests wait on), so the tests read them: the
in-process ones and, read-only inside the OS sandbox, the nbgrader runs.

How: each GPU lesson's reference answers run as its bank's namespace on the emulator posing as a T4 (the sandbox's
and the suite's device); each compile check runs as it is; each other GPU check runs its visible cases until the
first kernel launch, which makes the PTX and stops.  One prefill per cache at a time (a lock); a second one exits.
Nothing here decides a test's result: a kernel not prefilled is compiled by the test that needs it.
"""
from __future__ import annotations

import fcntl
import os
import sys


class _Made(Exception):
    """A launch reached: its PTX is in the cache."""


def prefill(lessons) -> None:
    import contextlib
    import io

    import test_gpu_lessons as banks
    from autograder.checks.core import get_check
    from autograder.gpu import emulated_cupy, runtime

    def compile_only(kernel, *args, **kwargs):
        emulated_cupy._ptx_of(kernel.code, kernel.options, emulated_cupy._device_profile[0])
        raise _Made

    emulated_cupy.RawKernel.__call__ = compile_only
    for lesson in lessons:
        with runtime.stand_in("T4"), contextlib.redirect_stdout(io.StringIO()):
            space = banks.namespace(lesson, {})
            done = set()
            for check_id, names, cases in banks.grade_calls(lesson):
                check = get_check(check_id)
                if cases is not None or check_id in done or not (check.needs_gpu or check_id.endswith("compiles")):
                    continue
                done.add(check_id)
                with contextlib.suppress(Exception):
                    if check.needs_gpu:
                        runtime.run_check_on_emulator(check.function, *[space[n] for n in names])
                    else:
                        check.function(*[space[n] for n in names])


#: The GPU lessons, the slowest to compile first (as tests/conftest.py's cost_rank starts their tests).
LESSONS = ("11_flash_decoding", "08_cupy_flash_attention", "09_tensor_cores", "07_cupy_rmsnorm", "06_cuda_basics")


def main(folder: str) -> int:
    with open(os.path.join(folder, "prefill.lock"), "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return 0  # another worker's prefill runs
        from autograder.isolation.sandbox import NVRTC_CACHE_ENV

        os.environ[NVRTC_CACHE_ENV] = folder  # before nvrtc is imported: it reads the variable then
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        prefill(LESSONS)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
