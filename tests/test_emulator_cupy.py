"""Does the CuPy stand-in (autograder.gpu.emulated_cupy) behave as CuPy does where a student's code can tell, and
refuse clearly where it cannot?"""
import numpy as np
import pytest

from autograder.gpu import emulated_cupy as ecp
from autograder.gpu import nvrtc

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
    with pytest.raises(ecp.EmulatedFault, match="past_the_end остановлено эмулятором GPU.*аргумент № 1"):
        ecp.RawKernel(SCALE, "past_the_end")((1,), (8,), (x, y, np.int32(8)))


def test_the_device_is_a_t4_unless_told_otherwise():
    assert ecp.cuda.Device().attributes["MultiProcessorCount"] == 40
    assert ecp.cuda.runtime.getDeviceProperties(0)["major"] == 7
    with ecp.installed("H200") as cupy:
        assert cupy.cuda.Device().attributes["MaxSharedMemoryPerBlockOptin"] == 227 * 1024
    assert ecp.cuda.Device().attributes["MaxSharedMemoryPerBlockOptin"] == 64 * 1024


def test_more_dynamic_shared_memory_than_the_gpu_has_is_refused():
    kernel = ecp.RawKernel(SCALE, "scale")
    kernel.max_dynamic_shared_size_bytes = 100 * 1024
    with pytest.raises(ecp.EmulatedFault, match="max_dynamic_shared_size_bytes"):
        kernel((1,), (1,), (ecp.zeros(1, ecp.float32), ecp.zeros(1, ecp.float32), np.float32(1), np.int32(1)))


def test_events_record_but_time_is_not_measured():
    start, end = ecp.cuda.Event(), ecp.cuda.Event()
    start.record()
    end.record()
    end.synchronize()
    with pytest.raises(NotImplementedError, match="время на эмуляторе GPU не измеряется"):
        ecp.cuda.get_elapsed_time(start, end)


def test_random_inputs_are_device_arrays_of_the_dtype_asked_for():
    q = ecp.random.standard_normal((2, 3), dtype=ecp.float32)
    assert isinstance(q, ecp.ndarray) and q.shape == (2, 3) and q.dtype == np.float32
    assert ecp.random.randn(4).shape == (4,) and ecp.random.rand(2, 2).dtype == np.float64


def test_what_the_stand_in_lacks_is_named_not_faked():
    with pytest.raises(AttributeError, match="эмулятор GPU не поддерживает cupy.fft"):
        ecp.fft  # noqa: B018 - the attribute access is the test
