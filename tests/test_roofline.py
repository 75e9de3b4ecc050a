"""The roofline of a student's kernel without a GPU: the emulator's counts of global bytes and FLOPs per launch
(autograder/gpu/emulator/counts.py) and the notebooks' report and plot (autograder/lessons/roofline.py)."""
import contextlib
import io

import matplotlib
import numpy as np
import pytest

from autograder.gpu import emulator, nvrtc, runtime
from autograder.gpu.emulator.counts import flops_per_thread
from autograder.lessons import roofline

matplotlib.use("Agg")

SCALE_ADD = r'''extern "C" __global__ void scale_add(const float* x, const float* y, float* out, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + y[i];
}'''


@pytest.mark.parametrize("opcode, expected", [
    ("fma.rn.f32", (2.0, 0.0)), ("mad.lo.s32", (0.0, 0.0)), ("add.f16x2", (2.0, 0.0)), ("ex2.approx.ftz.f32", (1.0, 0.0)),
    ("mul.rn.f64", (1.0, 0.0)), ("mov.f32", (0.0, 0.0)), ("setp.lt.f32", (0.0, 0.0)), ("cvt.rn.f16.f32", (0.0, 0.0)),
    ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", (0.0, 128.0)),
    ("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32", (0.0, 64.0))])
def test_flops_of_an_instruction_per_thread(opcode, expected):
    assert flops_per_thread(tuple(opcode.split("."))) == expected


def test_a_launch_counts_the_bytes_and_flops_of_the_threads_that_did_the_work():
    n = 1000  # 4 blocks of 256: the 24 threads past n do no load, store or fma
    x, y, out = np.ones(n, np.float32), np.ones(n, np.float32), np.zeros(n, np.float32)
    result = emulator.launch(nvrtc.ptx(SCALE_ADD), "scale_add", (4,), (256,), [x, y, out, np.float32(2), np.int32(n)])
    assert (result.global_read, result.global_written, result.flops, result.tensor_flops) == (8 * n, 4 * n, 2 * n, 0)


def _scale_add(cp, n):
    x = cp.asarray(np.ones(n, np.float32))
    cp.RawKernel(SCALE_ADD, "scale_add")(((n + 255) // 256,), (256,), (x, x, cp.empty_like(x), np.float32(2), np.int32(n)))


def test_show_reports_each_kernel_since_the_last_call_on_both_roofs():
    with runtime.stand_in("T4") as cp:
        roofline.new_launches()
        for _ in range(2):
            _scale_add(cp, 1 << 14)
        with contextlib.redirect_stdout(io.StringIO()) as out:
            roofline.show()
        text = out.getvalue()
        assert "scale_add (запусков: 2)" in text and "интенсивность 0.167 FLOP/байт" in text
        assert "T4: ridge point 25.3 FLOP/байт — ограничено памятью" in text
        assert "H200: ridge point 14 FLOP/байт — ограничено памятью" in text
        with contextlib.redirect_stdout(io.StringIO()) as out:
            roofline.show()
        assert "не запускались" in out.getvalue()


def test_the_least_time_is_the_bytes_at_full_bandwidth_for_a_memory_bound_kernel():
    k = roofline.KernelTraffic("k", 1, 8_000_000, 4_000_000, 2e6, 0.0)
    assert k.least_seconds(roofline.ROOFS["T4"]) == pytest.approx(12e6 / 320e9)
    compute = roofline.KernelTraffic("mma", 1, 1000, 1000, 0.0, 65e9)
    assert compute.least_seconds(roofline.ROOFS["T4"]) == pytest.approx(1e-3)
    assert compute.peak(roofline.ROOFS["H200"]) == 989e12


def test_the_plot_has_a_roof_per_gpu_and_the_kernel_on_each():
    fig = roofline.plot([roofline.KernelTraffic("scale_add", 1, 8000, 4000, 2000.0, 0.0)])
    lines = fig.axes[0].get_lines()
    assert len(lines) == 4  # two roofs, the kernel on each
    labels = [line.get_label() for line in lines]
    assert labels[0] == "T4: 320 ГБ/с, 8.1 TFLOP/s (fp32)" and labels[2] == "H200: 4800 ГБ/с, 67 TFLOP/s (fp32)"
    assert labels[1] == "scale_add" and list(lines[1].get_xdata()) == [pytest.approx(2000 / 12000)]


@pytest.mark.skipif(runtime.gpu_status()[0], reason="on a GPU the lessons time kernels instead")
def test_on_a_machine_with_the_emulator_off_show_says_where_it_works(monkeypatch):
    monkeypatch.setattr(runtime, "emulated", lambda: False)
    with contextlib.redirect_stdout(io.StringIO()) as out:
        roofline.show()
    assert "без GPU" in out.getvalue()


def test_a_timed_kernel_is_placed_under_the_roof_of_the_gpu_it_ran_on(monkeypatch):
    """On a GPU the measurement cells pass (name, seconds, bytes, FLOPs): an RMSNorm at copy speed on the H200
    attains the memory roof at its intensity; on another GPU the H200's roof is the yardstick and it says so."""
    moved = 2 * 16384 * 4096 * 4  # read x, write y
    point = roofline.Measured("rms", moved / 4.8e12, moved, 4 * 16384 * 4096)
    assert point.intensity == 0.5 and point.roof_at_intensity(roofline.ROOFS["H200"]) == 0.5 * 4.8e12
    text = roofline.measured_report([point], "H200")
    assert "4800 ГБ/с" in text and "ограничено памятью" in text and "достигнуто 100%" in text, text
    assert "взята крыша H200" in roofline.measured_report([point], None)
    monkeypatch.setattr(runtime, "emulated", lambda: False)
    monkeypatch.setattr(runtime, "gpu_status", lambda: (True, "NVIDIA H200 (132 SM), CuPy 14.2.0"))
    monkeypatch.setattr("matplotlib.pyplot.show", lambda: None)
    assert roofline.device_roof() == "H200"
    with contextlib.redirect_stdout(io.StringIO()) as out:
        roofline.show(measured=[("rms", moved / 2.4e12, moved, 4 * 16384 * 4096)])
    assert "rms:" in out.getvalue() and "достигнуто 50%" in out.getvalue(), out.getvalue()


def test_a_timed_point_on_the_emulator_says_time_is_not_modelled():
    with runtime.stand_in("T4"):
        with contextlib.redirect_stdout(io.StringIO()) as out:
            roofline.show(measured=[("k", 1e-3, 1e6, 1e6)])
    assert "Эмулятор не моделирует время" in out.getvalue()
