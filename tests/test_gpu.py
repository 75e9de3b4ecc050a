"""Does the GPU lessons' machinery work where CI runs (no GPU): NVRTC compiles, the run checks on the PTX emulator,
clear "нужен GPU" where they cannot run there?"""
import re

import nbformat
import numpy as np
import pytest

from autograder.course import paths as course

from autograder.course import grading
from autograder.course import settings
from autograder.gpu import runtime as gpu, nvrtc
from autograder.checks.core import CheckFailed, all_checks
from autograder.notebook import run

import test_gpu_lessons as banks  # the GPU banks: skipped without a GPU, their builders are plain code
from helpers import FULL

HAS_GPU = gpu.gpu_status()[0]
GPU_LESSONS = {"06_cuda_basics": ("SCALE_ADD_SRC", ("scale_add",)),
               "07_cupy_rmsnorm": ("RMSNORM_SRC", ("rms_norm",)),
               "08_cupy_flash_attention": ("FLASH_SRC", ("flash_attention_d64", "flash_attention_d128")),
               "11_flash_decoding": ("DECODE_SRC", ("paged_decode_split", "paged_decode_combine"))}

GOOD = 'extern "C" __global__ void k(float* y, int n) { if (threadIdx.x < n) y[threadIdx.x] = 1.0f; }'


def reference_source(lesson: str) -> str:
    ns = {}
    exec(grading.reference_answers(lesson)[{"06_cuda_basics": "scale_add_source", "07_cupy_rmsnorm": "rmsnorm_source",
                                           "08_cupy_flash_attention": "flash_source",
                                           "11_flash_decoding": "decode_source"}[lesson]], ns)
    return ns[GPU_LESSONS[lesson][0]]


@pytest.mark.parametrize("lesson", sorted(GPU_LESSONS))
def test_reference_kernels_compile_without_a_gpu(lesson):
    """Do the reference kernels compile with NVRTC here, and does ptxas report their registers?"""
    name, kernels = GPU_LESSONS[lesson]
    result = nvrtc.compile_source(reference_source(lesson))
    assert result.ok, result.log
    for kernel in kernels:
        r = result.resources[kernel]
        assert 0 < r.registers <= 255, r
    detail = nvrtc.compile_check(reference_source(lesson), kernels, what=name)
    assert "регистр" in detail


def test_compile_error_names_line_column_and_hint():
    """Does a missing semicolon come back with its line, column, the code and a Russian hint?"""
    source = 'extern "C" __global__ void k(float* y)\n{\n    float a = 1.0f\n    y[0] = a;\n}\n'
    result = nvrtc.compile_source(source)
    assert not result.ok
    assert (result.errors[0].line, result.errors[0].column) == (4, 5)
    message = nvrtc.format_errors(result, source)
    assert "строка 4, столбец 5" in message and "y[0] = a;" in message and "точки с запятой" in message


def test_lowercase_builtin_gets_its_hint():
    source = 'extern "C" __global__ void k(float* y)\n{\n    y[threadidx.x] = 1.0f;\n}\n'
    message = nvrtc.format_errors(nvrtc.compile_source(source), source)
    assert "строка 3, столбец 7" in message and "threadIdx" in message


def test_ptx_is_made_without_a_gpu_with_line_info_and_errors_are_the_compile_checks():
    """nvrtc.ptx: the PTX of a virtual architecture, .loc lines on; a broken source raises the compile check's message."""
    text = nvrtc.ptx('extern "C" __global__ void twice(float* x, int n) {\n'
                     '    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) x[i] *= 2.f;\n}\n',
                     arch="compute_80")
    assert ".target sm_80" in text and ".visible .entry twice(" in text
    assert re.search(r"\.loc\s+1 3 ", text) and "ld.global.f32" in text
    with pytest.raises(CheckFailed, match="строка 1"):
        nvrtc.ptx('extern "C" __global__ void k() { oops; }')


def test_ptxas_error_without_line_is_reported():
    """Is too much static shared memory (a ptxas error, no line number) still explained?"""
    source = 'extern "C" __global__ void k(float* y)\n{\n    __shared__ float s[20000];\n' \
             '    s[threadIdx.x] = 1.0f; __syncthreads(); y[threadIdx.x] = s[threadIdx.x ^ 1];\n}\n'
    result = nvrtc.compile_source(source)
    assert not result.ok
    assert "extern __shared__" in nvrtc.format_errors(result, source)


def test_resources_are_parsed_from_the_ptxas_log():
    result = nvrtc.compile_source(GOOD)
    assert result.ok and result.resources["k"].registers > 0


@pytest.mark.parametrize("source, says", [
    ("# ВАШ КОД ЗДЕСЬ\nraise NotImplementedError()", "заглушки"),
    ('__global__ void rms_norm(float* y) { y[0] = 1.0f; }', 'extern "C"'),
    (GOOD, "rms_norm"),
    (42, "строкой"),
])
def test_compile_check_refuses_stubs_and_missing_kernels(source, says):
    """Are the untouched stub, a kernel without extern "C" and a wrong name each refused clearly?"""
    result = run("lesson07.compiles", source)
    assert not result.passed and says in result.message


def test_gpu_checks_are_registered_without_memory_cap():
    """Does every run check of lessons 06-08 need a GPU and run without the address-space cap?"""
    checks = {**all_checks("lesson06."), **all_checks("lesson07."), **all_checks("lesson08.")}
    run_checks = {k: c for k, c in checks.items() if not k.endswith("compiles")}
    assert len(run_checks) == 22
    assert all(c.needs_gpu and c.memory_limit_gib is None for c in run_checks.values())
    assert not any(c.needs_gpu for k, c in checks.items() if k.endswith("compiles"))


def test_every_compile_check_has_the_compile_time_limit():
    """A correct kernel once scored 0 on a loaded CI machine: lesson 11's compile check outlasted the 30 s of a
    default check: every compile check has the compile limit (nvrtc.COMPILE_TIMEOUT_S)."""
    compile_checks = {k: c for k, c in all_checks().items() if k.endswith("compiles")}
    assert len(compile_checks) == 8
    slow = {k: c.timeout_s for k, c in compile_checks.items() if c.timeout_s != nvrtc.COMPILE_TIMEOUT_S}
    assert not slow, slow


RUN_CHECKS = {**all_checks("lesson06."), **all_checks("lesson07."), **all_checks("lesson08."), **all_checks("lesson09."),
              **all_checks("lesson11.")}


#: The GPU lessons' check prefixes (``lesson06``...), for the tests below: one lesson each, marked as its bank
#: (a check per worker process, ~1 s each), so that `make test-fast` runs them for the lessons touched.
RUN_CHECK_LESSONS = sorted({check_id.split(".")[0] for check_id in RUN_CHECKS})


def _lesson_marks(prefix: str):
    return pytest.param(prefix, marks=[pytest.mark.bank, pytest.mark.lesson(n=prefix[-2:])], id=prefix)


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU: the run checks really run")
@pytest.mark.parametrize("prefix", [_lesson_marks(p) for p in RUN_CHECK_LESSONS])
def test_run_checks_without_a_gpu_and_the_emulator_off_fail_with_zero_points_and_say_so(monkeypatch, prefix):
    """Emulator off (an instructor's choice): is every run check a clear failure ("нужен GPU", 0 points)?"""
    monkeypatch.setenv(gpu.EMULATOR_ENV, "0")  # the check workers inherit it
    for check_id, check in RUN_CHECKS.items():
        if check.needs_gpu and check_id.startswith(prefix + "."):
            result = run(check_id, lambda *a, **k: None)
            assert not result.passed and result.score == 0, check_id
            assert result.message.startswith("нужен GPU") and "выключен" not in result.message, result.message


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU: the run checks really run")
@pytest.mark.parametrize("prefix", [_lesson_marks(p) for p in RUN_CHECK_LESSONS])
def test_run_checks_without_a_gpu_run_on_the_emulator_except_timed_ones(prefix):
    """Emulator on (the default): a wrapper that returns nothing fails on the emulator, saying so; a timed check
    fails with «нужен GPU» and says why; none passes."""
    seen = set()
    for check_id, check in RUN_CHECKS.items():
        if not check.needs_gpu or not check_id.startswith(prefix + "."):
            continue
        result = run(check_id, lambda *a, **k: None)
        assert not result.passed and result.score == 0 and not result.grader_fault, check_id
        if check.function.on_emulator:
            assert gpu.scores_without_gpu(check)
            assert "проверено на эмуляторе GPU" in result.message, (check_id, result.message)
            seen.add("emulator")
        else:
            assert not gpu.scores_without_gpu(check)
            assert result.message == gpu.TIMED_WITHOUT_GPU.format(why=gpu.gpu_status()[1]), (check_id, result.message)
            seen.add("timed")
    assert "emulator" in seen
    assert {k for k, c in RUN_CHECKS.items() if c.needs_gpu and not c.function.on_emulator} == {
        "lesson07.speed", "lesson11.gpu_speed"}
    if prefix in ("lesson07", "lesson11"):
        assert "timed" in seen


@pytest.mark.parametrize("lesson", sorted(GPU_LESSONS))
def test_notebooks_open_in_colab_and_install_from_the_course_repository(lesson):
    """Do both notebooks carry the Colab link and install from settings.COURSE_REPOSITORY (one constant)?"""
    for path in (course.source_notebook(lesson), course.student_notebook(lesson)):
        cells = nbformat.read(path, as_version=4).cells
        assert settings.colab_url(lesson) in cells[0].source
        assert settings.colab_badge(lesson) in cells[0].source.split("\n")
        install = cells[1].source
        assert install == settings.install_cell()
        assert f'COURSE_REPOSITORY = "{settings.COURSE_REPOSITORY}"' in install
        assert re.search(r'find_spec\("autograder"\) is None', install)


# --- every reference and bank kernel of the GPU lessons, for every target (CI has no GPU) --------------

_SOURCE_CELLS = {"scale_add_source": ("SCALE_ADD_SRC", ("scale_add",)),
                 "row_sums_source": ("ROW_SUMS_SRC", ("row_sums",)),
                 "matmul_source": ("MATMUL_SRC", ("matmul_tiled",)),
                 "rmsnorm_source": ("RMSNORM_SRC", ("rms_norm",)),
                 "flash_source": ("FLASH_SRC", ("flash_attention_d64", "flash_attention_d128")),
                 "flash_fast_source": ("FLASH_FAST_SRC", ("flash_attention_d64", "flash_attention_d128")),
                 "decode_source": ("DECODE_SRC", ("paged_decode_split", "paged_decode_combine"))}


def _kernel_sources(lesson: str, answers: dict[str, str], entry: str, found: dict) -> None:
    """Add the kernel sources of one set of answer cells to ``found``: text -> (entry, variable, kernels)."""
    for cell, code in answers.items():
        if cell in _SOURCE_CELLS:
            ns = {}
            exec(code, ns)
            name, kernels = _SOURCE_CELLS[cell]
            found.setdefault(ns[name], (f"{lesson}:{entry}", name, kernels))


def _bank_sources(lesson: str, *, reference_only: bool = False) -> dict[str, tuple[str, str, tuple[str, ...]]]:
    """Distinct kernel sources of one GPU lesson's reference and (unless ``reference_only``) bank:
    text -> (entry, variable, kernels); compile errors left out."""
    reference = banks.answers_of(banks.source_path(lesson))
    found = {}
    _kernel_sources(lesson, reference, "reference", found)
    if not reference_only:
        for entry in banks.BANKS[lesson]():
            if entry.name not in ("untouched",) and "compile_error" not in entry.name:
                _kernel_sources(lesson, {**reference, **entry.answers}, entry.name, found)
    return found


@pytest.mark.bank  # one lesson's bank (its kernels): `make test-fast` keeps it for the lessons touched only
@pytest.mark.parametrize("arch", nvrtc.ARCHS)
@pytest.mark.parametrize("lesson", sorted(set(banks.BANKS) - {banks.L09}))  # lesson 09's bank: none of these cells
def test_every_gpu_kernel_compiles(lesson, arch):
    """Do the reference kernels of this GPU lesson compile for the T4, the A100 and the H100/H200, and, in `make
    test-full`, every bank kernel for the two ends, sm_75 (the T4: the fewest features, 64 KiB of shared memory) and
    sm_90?  (The A100's sm_80 adds nothing a bank entry's one wrong line could break that neither end shows; a
    student's kernel is still compiled for all three by the compile check.)  `make test` leaves the bank kernels to
    the banks themselves: the emulator's sample (tests/test_emulator_banks.py) compiles its entries for compute_75,
    and the committed runs of every entry without a GPU and on the H200 are compared with today's banks.

    Through the test session's compile cache (``nvrtc.cached_compile``: exactly what a compile gives), which
    the banks and the compile checks fill with the same kernels; one test per arch, so that the slow ones
    (lessons 08 and 11: 1-2.5 s a compile) spread over the workers."""
    sources = _bank_sources(lesson, reference_only=not (FULL and arch in (nvrtc.ARCHS[0], nvrtc.ARCHS[-1])))
    assert sources
    for source, (entry, name, kernels) in sources.items():
        result = nvrtc.cached_compile(source, arch=arch)
        assert result.ok, f"{entry} ({name}) for {arch}:\n{result.log[:2000]}"
        assert set(kernels) <= set(result.resources), (entry, arch, sorted(result.resources))


UNGUARDED_CP_ASYNC = r'''
extern "C" __global__ void k(const float* x, float* y)
{
    __shared__ float4 tile[32];
    const unsigned address = (unsigned)__cvta_generic_to_shared(&tile[threadIdx.x]);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, 16;\n" :: "r"(address), "l"(x + 4 * threadIdx.x));
    asm volatile("cp.async.wait_all;\n" ::);
    __syncthreads();
    y[threadIdx.x] = tile[threadIdx.x].x;
}
'''


def test_cp_async_without_guard_is_named_for_sm75():
    """Does a kernel with unguarded cp.async fail the compile check, naming sm_75 and how to guard it?"""
    from autograder.checks.core import CheckFailed

    with pytest.raises(CheckFailed) as failure:
        nvrtc.compile_check(UNGUARDED_CP_ASYNC, ("k",), what="SRC")
    text = str(failure.value)
    assert "sm_75 (T4" in text and "хотя для sm_80, sm_90 компилируется" in text
    assert "cp.async" in text and "__CUDA_ARCH__ >= 800" in text
    guarded = UNGUARDED_CP_ASYNC.replace("    const unsigned", "#if __CUDA_ARCH__ >= 800\n    const unsigned").replace(
        '    asm volatile("cp.async.wait_all;\\n" ::);',
        '    asm volatile("cp.async.wait_all;\\n" ::);\n#else\n    tile[threadIdx.x] = reinterpret_cast<const float4*>(x)[threadIdx.x];\n#endif')
    assert "компилируется для sm_75, sm_80, sm_90" in nvrtc.compile_check(guarded, ("k",), what="SRC")


def fake_sanitizer(tmp_path, *, summary: str, run_worker: bool = True):
    """A stand-in compute-sanitizer: records its command line, writes ``summary`` to its log file and
    (``run_worker``) runs the command after its options, as the real tool runs its target."""
    calls = tmp_path / "calls.txt"
    fake = tmp_path / "compute-sanitizer"
    fake.write_text("#!/bin/sh\n"
                    f"echo \"$@\" >> {calls}\n"
                    "while [ \"$1\" != --log-file ]; do shift; done\n"
                    f"echo '{summary}' > \"$2\"\n"
                    "shift 4\n"  # --log-file PATH --print-limit N
                    + ('exec "$@"\n' if run_worker else ""))
    fake.chmod(0o755)
    return str(fake), calls


RMS_INPUTS = "autograder.lessons.lesson07.checks:sanitizer_inputs"


@pytest.mark.skipif(gpu.gpu_status()[0], reason="checks what a machine without a GPU answers")
def test_sanitizer_runs_a_worker_through_the_workers_protocol(tmp_path, monkeypatch):
    """Without a GPU: the stand-in tool starts the worker (python -I -m autograder.isolation.worker) with the
    padding for memcheck only, and the worker's nonce-signed verdict comes back (here: no GPU).  memcheck and
    racecheck start side by side; memcheck's verdict is the one read first."""
    from autograder.gpu import sanitizer

    fake, calls = fake_sanitizer(tmp_path, summary="========= ERROR SUMMARY: 0 errors")
    monkeypatch.setattr(sanitizer, "_SANITIZER", fake)
    with pytest.raises(CheckFailed, match="запуск под compute-sanitizer --tool memcheck не удался: нужен GPU"):
        sanitizer.sanitizer_check(len, RMS_INPUTS, {"T": 1, "D": 1, "seed": 0}, "T=1", races=True)
    (memcheck,) = [line for line in calls.read_text().splitlines() if "--tool memcheck" in line]
    (racecheck,) = [line for line in calls.read_text().splitlines() if "--tool racecheck" in line]
    assert f"--tool memcheck --padding {sanitizer.SANITIZER_PADDING_BYTES}" in memcheck
    assert memcheck.endswith("-I -m autograder.isolation.worker")
    assert "--padding" not in racecheck and racecheck.endswith("-I -m autograder.isolation.worker")
    monkeypatch.setattr(sanitizer, "_SANITIZER", fake_sanitizer(tmp_path, summary="")[0])
    with pytest.raises(CheckFailed, match="нужен GPU"):
        sanitizer.sanitize(len, RMS_INPUTS, {"T": 1, "D": 1, "seed": 0}, tool="racecheck")
    assert "--padding" not in calls.read_text().splitlines()[-1]


def test_sanitizer_errors_in_the_log_are_the_verdict(tmp_path, monkeypatch):
    from autograder.gpu import sanitizer

    fake, _ = fake_sanitizer(tmp_path, summary="========= ERROR SUMMARY: 3 errors")
    monkeypatch.setattr(sanitizer, "_SANITIZER", fake)
    with pytest.raises(CheckFailed, match="memcheck нашёл выход за границы массивов: 3 ошибок"):
        sanitizer.sanitizer_check(len, RMS_INPUTS, {"T": 1, "D": 1, "seed": 0}, "T=1", races=False)


def test_memchecks_findings_come_first_when_both_tools_find_faults(tmp_path, monkeypatch):
    """The two tools run side by side, but the verdict reads memcheck's report first, as when they ran in turn."""
    from autograder.gpu import sanitizer

    fake = tmp_path / "compute-sanitizer"
    fake.write_text("#!/bin/sh\n"
                    "tool=$2\n"
                    "while [ \"$1\" != --log-file ]; do shift; done\n"
                    "if [ \"$tool\" = memcheck ]; then echo '========= ERROR SUMMARY: 2 errors' > \"$2\"; "
                    "else echo '========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)' > \"$2\"; fi\n"
                    "shift 4\n"
                    'exec "$@"\n')
    fake.chmod(0o755)
    monkeypatch.setattr(sanitizer, "_SANITIZER", str(fake))
    with pytest.raises(CheckFailed, match="memcheck нашёл выход за границы массивов: 2 ошибок"):
        sanitizer.sanitizer_check(len, RMS_INPUTS, {"T": 1, "D": 1, "seed": 0}, "T=1", races=True)


ROW_SUMS_WRAPPER = """
def row_sums_gpu(x):
    T, D = x.shape
    out = cp.empty(T, dtype=cp.float32)
    cp.RawKernel(SOURCE, KERNEL)((T,), (256,), (x, out, np.int32(D)))
    return out
"""


def row_sums_function(source: str, kernel: str):
    """A student's ``row_sums_gpu`` whose ``cp`` is the emulator's stand-in (it pickles as ``cupy``)."""
    from autograder.gpu import emulated_cupy

    space = {"cp": emulated_cupy, "np": np, "SOURCE": source, "KERNEL": kernel, "__name__": "__main__"}
    exec(ROW_SUMS_WRAPPER, space)
    return space["row_sums_gpu"]


@pytest.mark.parametrize("pose", ["T4", "H200"])
def test_the_emulator_can_answer_for_compute_sanitizer_on_a_gpu_machine(pose):
    """AUTOGRADER_GPU_BOUNDS=emulator: a case of a bounds-and-races check runs in a worker of its own on the emulator
    posing as the nearest GPU it knows, from the student's function packed before it ran on the GPU.  The kernel
    without its barrier (lesson 06's demonstration, right values by luck) fails with the race named; with the barrier
    it passes, and so does the reference's."""
    from autograder.gpu import sanitizer
    from autograder.isolation import run as isolation
    from autograder.lessons.lesson06 import cuda_basics

    source, kernel, _ = cuda_basics.BUGGY_KERNELS["row_sums без барьера"]
    fixed = source.replace("    partial[threadIdx.x] = s;\n", "    partial[threadIdx.x] = s;\n    __syncthreads();\n")
    assert fixed != source
    inputs, case = "autograder.lessons.lesson06.checks:row_sums_inputs", {"T": 3, "D": 1000, "seed": 14}
    payload = isolation.pack([row_sums_function(source, kernel)])
    with pytest.raises(CheckFailed, match=f"(?s)эмулятор GPU \\({pose}\\) вместо compute-sanitizer.*гонка в разделяемой памяти"):
        sanitizer.emulator_check(payload, inputs, case, "T=3, D=1000", pose=pose)
    payload = isolation.pack([row_sums_function(fixed, kernel)])
    assert "ни одного обращения за границы" in sanitizer.emulator_check(payload, inputs, case, "T=3, D=1000", pose=pose)


def test_a_function_that_fails_only_on_the_emulator_leaves_the_case_to_compute_sanitizer():
    """Its values passed on the GPU, so an error on the emulator proves nothing (a notebook's cache of real CuPy
    kernels, say): emulator_check says so (None) and the check asks compute-sanitizer; a finding still fails."""
    from autograder.gpu import emulated_cupy, sanitizer
    from autograder.isolation import run as isolation

    space = {"cp": emulated_cupy, "__name__": "__main__"}
    exec("def row_sums_gpu(x):\n    raise TypeError('a real CuPy kernel cannot take this array')\n", space)
    inputs, case = "autograder.lessons.lesson06.checks:row_sums_inputs", {"T": 3, "D": 1000, "seed": 14}
    assert sanitizer.emulator_check(isolation.pack([space["row_sums_gpu"]]), inputs, case, "T=3", pose="T4") is None


def test_a_check_worker_may_start_the_emulators_run_after_student_code_ran():
    """In a GPU check's worker the guard is on and student code has run (the case's values) when the emulator's run
    starts: the grader may start that worker (a new Python process), as it may start compute-sanitizer."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import sys
        sys.path.insert(0, "tests")
        from test_gpu import row_sums_function
        from autograder.gpu import sanitizer
        from autograder.isolation import guard, run as isolation
        from autograder.lessons.lesson06 import cuda_basics
        source, kernel, _ = cuda_basics.BUGGY_KERNELS["row_sums без барьера"]
        payload = isolation.pack([row_sums_function(source.replace("s;\\n    //", "s;\\n    __syncthreads();\\n    //"), kernel)])
        guard.install(gpu=True)
        with guard.student_code():
            pass
        print(sanitizer.emulator_check(payload, "autograder.lessons.lesson06.checks:row_sums_inputs",
                                       {"T": 3, "D": 1000, "seed": 14}, "T=3", pose="T4"))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=course.ROOT)
    assert "эмулятор GPU (T4): ни одного обращения за границы" in done.stdout, done.stdout + done.stderr[-2000:]


def test_the_bounds_tool_is_the_emulator_unless_compute_sanitizer_is_asked_for(monkeypatch):
    from autograder.gpu import sanitizer

    monkeypatch.delenv(sanitizer.BOUNDS_ENV, raising=False)
    assert sanitizer.bounds_tool() == "emulator"
    monkeypatch.setenv(sanitizer.BOUNDS_ENV, " Compute-Sanitizer ")
    assert sanitizer.bounds_tool() == "compute-sanitizer"
    monkeypatch.setenv(sanitizer.BOUNDS_ENV, "emulator")
    assert sanitizer.bounds_tool() == "emulator"


def test_a_sanitizer_run_lost_before_the_students_code_is_a_grader_fault(tmp_path, monkeypatch):
    """The tool ends without starting the worker: retried once, then GraderFault (never the student's 0)."""
    from autograder.gpu import sanitizer
    from autograder.checks.core import GraderFault

    fake, calls = fake_sanitizer(tmp_path, summary="========= ERROR SUMMARY: 0 errors", run_worker=False)
    monkeypatch.setattr(sanitizer, "_SANITIZER", fake)
    with pytest.raises(GraderFault, match="не дошёл до вашего кода"):
        sanitizer.sanitizer_check(len, RMS_INPUTS, {"T": 1, "D": 1, "seed": 0}, "T=1", races=False)
    assert len(calls.read_text().splitlines()) == 2  # the first run and its one retry


def test_missing_sanitizer_fails_the_check_and_says_how_it_scores(monkeypatch):
    from autograder.gpu import sanitizer

    monkeypatch.setattr(sanitizer, "_SANITIZER", None)
    with pytest.raises(CheckFailed, match="не найден compute-sanitizer.*0 баллов"):
        sanitizer.sanitizer_check(len, "x:y", {}, "T=1", races=False)


BARRIERS = '''
// if (x) { __syncthreads(); }   <- a comment, not code
extern "C" __global__ void k(float* p) {
  __shared__ float s[32];
  if (threadIdx.x < 16) {
      s[threadIdx.x] = 1;
      __syncthreads();
  }
  for (int i = 0; i < 4; ++i) { s[0] += 1; __syncthreads(); }
  if (threadIdx.x == 0) __syncthreads();
  else { p[0] = s[1]; }
  if (threadIdx.x == 0) p[1] = 2;
  __syncthreads();
  if (threadIdx.x == 0) { p[2] = 3; } else { if (p[0] > 0) { __syncthreads(); } }
}
'''


def test_a_barrier_inside_if_is_named_by_the_compile_check():
    """NVRTC compiles __syncthreads() inside if silently; the compile check passes but warns with the line
    (a barrier in a loop or after an if is fine)."""
    assert nvrtc.barriers_in_branches(BARRIERS) == [7, 10, 14]
    message = nvrtc.compile_check(BARRIERS, ("k",), what="SRC")
    assert message.count("__syncthreads() внутри if/else") == 3 and "строка 7:" in message


@pytest.mark.parametrize("lesson", ["06_cuda_basics", "07_cupy_rmsnorm", "08_cupy_flash_attention"])
def test_reference_kernels_keep_barriers_out_of_branches(lesson):
    nb = nbformat.read(course.source_notebook(lesson), as_version=4)
    kernels = [c.source for c in nb.cells if c.cell_type == "code" and "__global__" in c.source]
    assert kernels and all(nvrtc.barriers_in_branches(source) == [] for source in kernels)
