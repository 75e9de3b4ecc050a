"""Does the CuPy stand-in (autograder.gpu.emulated_cupy) behave as CuPy does where a student's code can tell, and
refuse clearly where it cannot?"""
import numpy as np
import pytest

from autograder.gpu import emulated_cupy as ecp
from autograder.gpu import nvrtc
from autograder.gpu.runtime import run_on_emulator, stand_in

pytestmark = pytest.mark.skipif(nvrtc._NVRTC is None, reason="NVRTC is not installed")

SCALE = r'''
extern "C" __global__ void scale(const float* x, float* y, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
extern "C" __global__ void past_the_end(const float* x, float* y, int n)
{
    int i = threadIdx.x;
    y[i] = x[i];
}
'''


def test_arrays_default_to_float64_and_new_ones_hold_nan_as_on_the_gpu_checks():
    assert ecp.empty(3).dtype == ecp.zeros(3).dtype == ecp.ones(3).dtype == np.float64  # CuPy's default
    assert np.isnan(ecp.empty((2, 2), dtype=ecp.float32)).all()
    x = ecp.asarray(np.arange(4, dtype=np.float32))
    assert isinstance(x, ecp.ndarray) and ecp.asnumpy(x).tolist() == [0, 1, 2, 3]
    assert type(ecp.asnumpy(x)) is np.ndarray and type(x.get()) is np.ndarray


def test_a_raw_kernel_runs_on_the_emulator_and_writes_through_a_view():
    ecp.reset()
    x = ecp.asarray(np.arange(10, dtype=np.float32))
    y = ecp.zeros(10, dtype=ecp.float32)
    kernel = ecp.RawKernel(SCALE, "scale")
    kernel((1,), (8,), (x[2:], y[2:], np.float32(3), np.int32(8)))  # slices: pointers into x and y
    assert y.get().tolist() == [0, 0] + [3.0 * v for v in range(2, 10)]
    assert [name for name, _ in ecp.LAUNCHES] == ["scale"] and ecp.findings() == []


def test_an_out_of_bounds_access_stops_the_kernel_as_a_cuda_error_would():
    x, y = ecp.asarray(np.ones(4, np.float32)), ecp.empty(8, dtype=ecp.float32)
    with pytest.raises(ecp.EmulatedFault, match=r"past_the_end остановлено эмулятором GPU.*args\[0\] вызова ядра(?s:.*)Что сделать: проверьте формулу индекса") as fault:
        ecp.RawKernel(SCALE, "past_the_end")((1,), (8,), (x, y, np.int32(8)))
    assert "До этого" not in str(fault.value)  # a plain out-of-bounds read: no earlier cause to name


GARBAGE_INDEX = r'''
extern "C" __global__ void gather(const float* x, float* y)
{
    __shared__ int idx[64];
    if (threadIdx.x < 32) idx[threadIdx.x] = threadIdx.x;   // half of the table: the other half is garbage
    __syncthreads();
    y[threadIdx.x] = x[idx[threadIdx.x]];
}
'''


def test_a_fault_names_the_garbage_read_that_led_to_it():
    """An index read from shared memory nobody wrote faults where it is used (a global read out of bounds); the
    message says so, and points at the read of garbage, which is where the bug is."""
    x, y = ecp.asarray(np.ones(64, np.float32)), ecp.empty(64, dtype=ecp.float32)
    with pytest.raises(ecp.EmulatedFault) as fault:
        ecp.RawKernel(GARBAGE_INDEX, "gather")((1,), (64,), (x, y))
    text = str(fault.value)
    assert "остановлено эмулятором GPU" in text and "args[0]" in text
    assert "До этого эмулятор заметил:" in text and "в которую никто не писал" in text, text
    assert text.index("Что сделать: проверьте формулу индекса") < text.index("До этого"), text


def test_a_checks_message_keeps_the_faults_explanation_whole():
    """A student's exception text is cut at 500 characters in a check's message; the stand-in's fault, written for
    the student and longer than that with its cause, is kept whole."""
    from autograder.checks.core import CheckFailed, call_student

    def student_function():
        x, y = ecp.asarray(np.ones(64, np.float32)), ecp.empty(64, dtype=ecp.float32)
        ecp.RawKernel(GARBAGE_INDEX, "gather")((1,), (64,), (x, y))

    def long_error():
        raise ValueError("x" * 2000)

    with pytest.raises(CheckFailed) as failure:
        call_student(student_function, case="64 потока")
    assert "До этого эмулятор заметил:" in str(failure.value) and "обрезано" not in str(failure.value)
    with pytest.raises(CheckFailed, match="обрезано, всего 2000 символов"):
        call_student(long_error, case="1")


def test_the_device_is_a_t4_unless_told_otherwise():
    assert ecp.cuda.Device().attributes["MultiProcessorCount"] == 40
    assert ecp.cuda.runtime.getDeviceProperties(0)["major"] == 7
    with stand_in("H200") as cupy:
        assert cupy.cuda.Device().attributes["MaxSharedMemoryPerBlockOptin"] == 227 * 1024
    assert ecp.cuda.Device().attributes["MaxSharedMemoryPerBlockOptin"] == 64 * 1024


def test_more_dynamic_shared_memory_than_the_gpu_has_is_refused():
    kernel = ecp.RawKernel(SCALE, "scale")
    kernel.max_dynamic_shared_size_bytes = 100 * 1024
    with pytest.raises(ecp.CUDADriverError, match="CUDA_ERROR_INVALID_VALUE(?s:.*)max_dynamic_shared_size_bytes"):
        kernel((1,), (1,), (ecp.zeros(1, ecp.float32), ecp.zeros(1, ecp.float32), np.float32(1), np.int32(1)))


def test_events_record_but_time_is_not_measured():
    start, end = ecp.cuda.Event(), ecp.cuda.Event()
    start.record()
    end.record()
    end.synchronize()
    with pytest.raises(ecp.NotEmulated, match="время на эмуляторе GPU не измеряется"):
        ecp.cuda.get_elapsed_time(start, end)


def test_random_inputs_are_device_arrays_of_the_dtype_asked_for():
    q = ecp.random.standard_normal((2, 3), dtype=ecp.float32)
    assert isinstance(q, ecp.ndarray) and q.shape == (2, 3) and q.dtype == np.float32
    assert ecp.random.randn(4).shape == (4,) and ecp.random.rand(2, 2).dtype == np.float64


def test_what_the_stand_in_lacks_is_named_not_faked():
    with pytest.raises(AttributeError, match="эмулятор GPU не поддерживает cupy.fft"):
        ecp.fft  # noqa: B018 - the attribute access is the test


# --- grading on the stand-in (issue 27): allocations, findings failing a check, pickling, choosing `cp` ----------

RACE = r'''
extern "C" __global__ void reverse_without_barrier(const float* x, float* y)
{
    __shared__ float tile[64];
    tile[threadIdx.x] = x[threadIdx.x];
    y[threadIdx.x] = tile[63 - threadIdx.x];   // no __syncthreads(): another warp's element may not be there yet
}
'''


def test_device_allocations_count_new_arrays_not_views():
    """The memory checks' counter on the stand-in: every array the stand-in allocates (constructors, copies,
    results of arithmetic), never a view or a slice."""
    x = ecp.asarray(np.ones((4, 8), np.float32))
    with ecp.DeviceAllocations() as seen:
        y = ecp.empty_like(x)          # 128 B
        x[1:3], x.T, x.reshape(-1), y.view(np.uint8)
        z = x * 2                      # a temporary, as CuPy's elementwise result: 128 B
        ecp.asarray(np.zeros(5, np.float64))  # 40 B, counted once
        ecp.asarray(x)                 # already on the device: nothing
    assert seen.sizes == [128, 128, 40] and seen.total == 296 and seen.largest == 128
    assert seen.damaged_guards() == [] and z.shape == (4, 8)
    with ecp.DeviceAllocations() as nothing:
        pass
    assert nothing.total == 0 and nothing.largest == 0


def test_a_racy_kernel_fails_the_bounds_check_and_only_it_as_on_a_gpu():
    """Lockstep hides the race in the values.  One mapping from finding to check, as on a GPU (where the emulator
    is the bounds tool too): the bounds-and-races check (fail_on_findings) fails, says where and what to do; a value
    check whose values are right passes and says what the emulator saw and which check counts it."""
    from autograder.checks.core import CheckFailed
    from autograder.gpu.runtime import fail_on_findings

    def values():
        x = ecp.asarray(np.arange(64, dtype=np.float32))
        y = ecp.empty(64, dtype=ecp.float32)
        ecp.RawKernel(RACE, "reverse_without_barrier")((1,), (64,), (x, y))
        assert y.get().tolist() == list(range(63, -1, -1))  # right, by the emulator's order of threads
        return "значения верны"

    def bounds():
        values()
        fail_on_findings()
        return "без гонок"

    verdict = run_on_emulator(values)
    assert verdict.startswith("значения верны") and "race" in verdict and "проверке границ и гонок" in verdict
    with pytest.raises(CheckFailed) as failure:
        run_on_emulator(bounds)
    text = str(failure.value)
    assert "Эмулятор GPU нашёл" in text and "__syncthreads()" in text and text.endswith(f"({ecp.EMULATED})")
    assert not ecp.ACTIVE  # the stand-in is put back


def test_a_check_on_the_emulator_says_so_in_every_verdict():
    from autograder.checks.core import CheckFailed

    def passes():
        ecp.RawKernel(SCALE, "scale")((1,), (4,), (ecp.zeros(4, dtype=ecp.float32), ecp.empty(4, dtype=ecp.float32),
                                                  np.float32(2), np.int32(4)))
        return "совпадает"

    def stops():
        ecp.RawKernel(SCALE, "past_the_end")((1,), (8,), (ecp.zeros(4, dtype=ecp.float32),
                                                          ecp.empty(8, dtype=ecp.float32), np.int32(8)))

    assert run_on_emulator(passes) == f"совпадает ({ecp.EMULATED})"
    with pytest.raises(CheckFailed, match=r"(?s)past_the_end остановлено эмулятором GPU.*Что сделать: .*\(проверено на эмуляторе GPU\)$"):
        run_on_emulator(stops)


def test_what_a_notebook_holds_pickles_as_a_reference_to_cupy_never_to_the_grader():
    """A student's function that uses `cp`, a kernel or a device array at the notebook's top level reach the check's
    worker by the name `cupy` (which the worker gives the stand-in), as with CuPy: the guard refuses student objects
    that import the grader."""
    import pickle

    import cloudpickle

    with stand_in():
        kernel, array = ecp.RawKernel(SCALE, "scale"), ecp.zeros(3, dtype=ecp.float32)
        for obj in (ecp, kernel, array, ecp.cuda.Device()):
            data = cloudpickle.dumps(obj)
            assert b"autograder" not in data and b"cupy" in data, obj
        assert pickle.loads(cloudpickle.dumps((ecp, kernel, array)))[0] is ecp


@pytest.mark.parametrize("emulator", ["1", "0"])
def test_the_notebooks_cp_is_the_stand_in_without_a_gpu_unless_the_emulator_is_off(emulator):
    """runtime.choose_cupy in a fresh process (it installs the stand-in for good): one line says which."""
    import os
    import subprocess
    import sys

    from autograder.gpu import runtime

    if runtime.gpu_status()[0]:
        pytest.skip("this machine has a GPU: `cp` is CuPy")
    code = ("from autograder.gpu.runtime import choose_cupy, gpu_status\ncp = choose_cupy()\n"
            "print('CP', None if cp is None else cp.__name__, gpu_status()[0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True,
                         env={**os.environ, runtime.EMULATOR_ENV: emulator}).stdout
    line, chosen = out.strip().splitlines()
    if emulator == "1":
        assert "ядра запускаются на эмуляторе GPU" in line and chosen == "CP autograder.gpu.emulated_cupy False"
    else:
        assert "эмулятор GPU выключен" in line and chosen == "CP None False"


def test_nothing_the_emulator_runs_during_a_launch_imports_the_grader():
    """A launch runs inside the student's call, where the guard refuses imports of the grader's package (they
    would be the student's): the emulator's modules import each other at their top only (forms() runs outside)."""
    import ast
    from pathlib import Path

    from autograder.gpu import emulator

    late = []
    for path in sorted(Path(emulator.__file__).parent.glob("*.py")):
        for function in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) and function.name != "forms":
                for node in ast.walk(function):
                    if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("autograder")):
                        late.append(f"{path.name}:{node.lineno} in {function.name}")
    assert late == []


def test_a_source_is_compiled_once_per_process_however_many_kernel_objects_a_wrapper_makes(monkeypatch):
    """As CuPy's kernel cache: a wrapper that builds its RawKernel inside the function pays NVRTC once; another
    source, other options or another architecture compile anew."""
    made = []
    real = nvrtc.ptx
    monkeypatch.setattr(nvrtc, "ptx", lambda code, **kw: made.append((code, kw)) or real(code, **kw))
    monkeypatch.setattr(ecp, "_PTX", {})
    x, y = ecp.asarray(np.ones(8, np.float32)), ecp.empty(8, dtype=ecp.float32)
    for _ in range(3):
        ecp.RawKernel(SCALE, "scale")((1,), (8,), (x, y, np.float32(2), np.int32(8)))
    ecp.RawKernel(SCALE, "scale", options=("-DUNUSED=1",))((1,), (8,), (x, y, np.float32(2), np.int32(8)))
    assert len(made) == 2 and y.get().tolist() == [2.0] * 8


# --- what the stand-in cannot run is not gradable here, never a 0 (issue 59) --------------------------------

def test_what_the_stand_in_cannot_run_is_reported_as_not_gradable_never_as_a_failure():
    from autograder.checks.core import CheckFailed, call_student

    def wrapper():
        start = ecp.cuda.Event()
        return ecp.cuda.get_elapsed_time(start, start)

    with pytest.raises(CheckFailed, match="не проверено на случае c1: эмулятор GPU не поддерживает "
                                          "cupy.cuda.get_elapsed_time(?s:.*)не ошибка в вашем коде") as failure:
        call_student(wrapper, case="c1", what="обёртка")
    assert failure.value.not_gradable is True
    assert "выбросила исключение" not in str(failure.value)


def test_a_gpu_check_on_the_emulator_that_meets_a_limitation_is_a_grader_fault():
    """Through the real worker: the check is left ungraded (a grader fault, run again, then reported as not
    graded), not scored 0; a GPU grader would grade it."""
    from autograder.gpu import runtime
    from autograder.lessons.lesson06 import checks  # noqa: F401 - registers lesson06.*
    from autograder.notebook import run

    if runtime.gpu_status()[0]:
        pytest.skip("a GPU grades it: the stand-in is not used")
    namespace = {"np": np}
    exec("def scale_add_gpu(a, x, y):\n"
         "    import cupy as cp\n"
         "    event = cp.cuda.Event()\n"
         "    cp.cuda.get_elapsed_time(event, event)\n"
         "    return a * x + y\n", namespace)
    result = run("lesson06.scale_add", namespace["scale_add_gpu"])
    assert result.grader_fault and not result.passed, result.message
    assert "не поддерживает cupy.cuda.get_elapsed_time" in result.message


def test_the_worker_believes_not_gradable_only_from_the_stand_in():
    """A student process could claim «not gradable» for any failure; the worker believes it only where that process
    said, before any student code existed there, that it runs the stand-in (runtime.prepare_gpu_check), or for a
    run that poses the stand-in on purpose; never a GPU check on a GPU, nor a CPU check."""
    from autograder.checks.core import get_check
    from autograder.gpu import sanitizer
    from autograder.isolation import worker

    class Judge:
        def __init__(self, facts):
            self.facts = facts

        def prepared(self):
            return self.facts

    gpu_check, cpu_check = get_check("lesson07.equivalence"), get_check("lesson02.equivalence")
    posed = get_check(sanitizer.EMULATOR_RUNS["T4"])
    on_stand_in, on_gpu = Judge((False, "GPU нет", True)), Judge((True, "NVIDIA H100", False))
    assert worker._on_the_gpu_stand_in(gpu_check, on_stand_in) is True
    assert worker._on_the_gpu_stand_in(gpu_check, on_gpu) is False
    assert worker._on_the_gpu_stand_in(gpu_check, Judge(None)) is False
    assert worker._on_the_gpu_stand_in(cpu_check, on_stand_in) is False
    assert worker._on_the_gpu_stand_in(posed, Judge(None)) is True


def test_the_memory_pool_counts_live_device_arrays_in_cupys_512_byte_units():
    import gc
    gc.collect()
    pool = ecp.get_default_memory_pool()
    before = pool.used_bytes()
    x = ecp.zeros(1000, dtype=ecp.float32)  # 4000 bytes: 8 units of 512
    view, made = x[10:], x + 1
    assert pool.used_bytes() - before == 2 * 4096 and pool.total_bytes() == pool.used_bytes()
    del made
    assert pool.used_bytes() - before == 4096  # a view is no allocation: x stays while the view lives
    del x, view
    gc.collect()
    assert pool.used_bytes() == before and pool.n_free_blocks() == 0
