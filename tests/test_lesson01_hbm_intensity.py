"""Lesson 01's reference formulas and plot grader, tested directly (no worker, no notebook)."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from autograder.checks import reference, scalars  # noqa: E402
from autograder.lessons.lesson01 import checks as l01  # noqa: E402
from autograder.checks.core import CheckFailed  # noqa: E402


def test_reference_counts_are_the_figures_the_lesson_quotes():
    """Do the formulas give FACTS.md's corrected figures for Qwen3-0.6B in bf16?"""
    assert l01.expected_rmsnorm_bytes(1024) == (10_240, 4_096)
    assert reference.swiglu_traffic(3072) == (30_720, 6_144)
    assert l01.expected_scores_bytes(4096) == 512 * 2**20            # 537 MB per layer
    assert round(l01.expected_scores_bytes(4096) / 1e6) == 537
    assert l01.expected_scores_bytes(4096, heads=1) == 32 * 2**20     # 33.5 MB per head
    assert round(l01.expected_scores_bytes(32768) / 1e9, 1) == 34.4
    five_passes = 5 * 4096 * 4096 * 2
    assert round(five_passes / 1e6) == 168                            # not the seed's 134 (four passes)
    assert l01.expected_attention_traffic(4096, 128) == five_passes + 4 * 4096 * 128 * 2
    assert round(56 * 4096 * 10_240 / 1e9, 2) == 2.35 and round(56 * 4096 * 4_096 / 1e9, 2) == 0.94
    assert round(28 * 4096 * 30_720 / 2**30, 2) == 3.28


def test_ridge_points_of_the_hardware_table():
    """Are the ridge points the ones FACTS.md lists (A100 201/153, H100 295, H200 206)?"""
    ridges = {name: round(l01.ref_ridge(*spec)) for name, spec in l01.GPUS.items()}
    assert ridges == {"A100 40GB": 201, "A100 80GB SXM": 153, "H100 SXM": 295, "H200 SXM": 206}


def test_naive_attention_is_memory_bound_and_the_gemm_is_not():
    """Does the roofline put naive attention (about 50 FLOP/B) below every ridge and the GEMM above?"""
    flops, size = l01.QWEN_OPS["naive attention"]
    assert 49 < flops / size < 51
    for peak, bandwidth in l01.GPUS.values():
        assert l01.ref_bound(flops, size, peak, bandwidth) == "memory"
        assert l01.ref_bound(*l01.QWEN_OPS["GEMM gate_up"], peak, bandwidth) == "compute"


def test_expect_number_is_exact_for_counts_and_names_the_mistake():
    """Are counts compared exactly, bools refused, and a known wrong value named?"""
    scalars.expect_number(536870912.0, 536870912, call="f()", exact=True)
    with pytest.raises(CheckFailed, match="число"):
        scalars.expect_number(True, 1, call="f()", exact=True)
    with pytest.raises(CheckFailed, match="перевёрнут"):
        scalars.expect_number(0.5, 2.0, call="f()", mistakes={"перевёрнут": 0.5})
    with pytest.raises(CheckFailed):
        scalars.expect_number(4097, 4096, call="f()", exact=True)


def roofline_axes(gpu, ops, *, with_ridge=True, log=True, scale=1.0):
    peak, bandwidth = l01.GPUS[gpu]
    ridge = peak / bandwidth
    intensities = [f / b for f, b in ops.values()]
    xs = [min(intensities + [ridge]) / 10, max(intensities + [ridge]) * 10]
    if with_ridge:
        xs.insert(1, ridge)
    fig, ax = plt.subplots()
    ax.plot(xs, [min(peak, x * bandwidth) * scale for x in xs])
    for name, x in zip(ops, intensities):
        ax.scatter([x], [min(peak, x * bandwidth) * scale], label=name)
    if log:
        ax.set_xscale("log")
        ax.set_yscale("log")
    return ax


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_plot_grader_accepts_a_right_plot():
    """Does a roofline through the ridge point with labelled points pass?"""
    assert "H100 SXM" in l01._grade_axes([l01._drawn(roofline_axes("H100 SXM", l01.QWEN_OPS))], "H100 SXM", l01.QWEN_OPS, "c")


@pytest.mark.parametrize("kwargs, phrase", [
    ({"with_ridge": False}, "не среди её вершин"),
    ({"log": False}, "лог-лог"),
    ({"scale": 1e-12}, "TFLOP/s"),
])
def test_plot_grader_names_what_is_wrong(kwargs, phrase):
    """Is a roofline without the ridge vertex, on linear axes or in TFLOP/s refused with the reason?"""
    ax = roofline_axes("H100 SXM", l01.QWEN_OPS, **kwargs)
    with pytest.raises(CheckFailed, match=phrase):
        l01._grade_axes([l01._drawn(ax)], "H100 SXM", l01.QWEN_OPS, "c")


def test_plot_grader_refuses_another_gpus_roof():
    """Is the H100 roof refused when the A100 40GB was asked for?"""
    ax = roofline_axes("H100 SXM", l01.QWEN_OPS)
    with pytest.raises(CheckFailed, match="другого GPU"):
        l01._grade_axes([l01._drawn(ax)], "A100 40GB", l01.QWEN_OPS, "c")


def test_points_on_the_roof_line_itself_do_not_count_as_markers():
    """Must every operator be its own marker, not just a vertex of the roof?"""
    peak, bandwidth = l01.GPUS["H200 SXM"]
    ops = {"A": (1e9, 1e6)}
    xs = [0.1, 1e3, peak / bandwidth, 1e4]
    fig, ax = plt.subplots()
    ax.plot(sorted(xs), [min(peak, x * bandwidth) for x in sorted(xs)], label="A")
    ax.set_xscale("log")
    ax.set_yscale("log")
    with pytest.raises(CheckFailed, match="Нет точки оператора «A»"):
        l01._grade_axes([l01._drawn(ax)], "H200 SXM", ops, "c")
