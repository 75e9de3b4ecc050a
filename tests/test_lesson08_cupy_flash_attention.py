"""Lesson 08 on a machine without a GPU (CI): does nbgrader grade the compile check and only it (its run checks are
not on the PTX emulator yet)?"""
import numpy as np
import pytest

from autograder.course import paths as course

from autograder.gpu import runtime as gpu
from autograder.checks import reference
from autograder.lessons.lesson08.checks import CAUSAL, CAUSAL_TILE_RATIO, TAILS, VISIBLE, oracle
from helpers import scores_of_reference_and_untouched

LESSON = "08_cupy_flash_attention"


@pytest.mark.skipif(gpu.gpu_status()[0], reason="with a GPU the run checks score too (tests/test_gpu_lessons.py)")
def test_autograde_without_gpu_scores_the_compile_check_only(tmp_path):
    """Reference: compile points only, every run cell 0; the untouched notebook: 0."""
    scored = scores_of_reference_and_untouched(LESSON, tmp_path)
    assert scored["reference"].pop("test_lesson08_compiles") == 1
    assert set(scored["reference"].values()) == {0}
    assert sum(scored["untouched"].values()) == 0


def test_oracle_is_per_head_attention():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((3, 17, 8)) for _ in range(3))
    for causal in (False, True):
        got = oracle(q, k, v, causal)
        assert np.allclose(got[2], reference.attention(q[2], k[2], v[2], causal))


@pytest.mark.parametrize("br, bc", [(64, 32), (64, 64), (128, 64), (16, 16), (128, 128)])
def test_causal_tile_fraction_is_below_the_bound_for_common_tiles(br, bc):
    """Does a kernel that skips tiles stay under the bound at the graded n=1024 for usual tile sizes?"""
    n = 1024
    full = -(-n // br) * -(-n // bc)
    causal = sum(-(-min(q0 + br, n) // bc) for q0 in range(0, n, br))
    assert causal / full <= CAUSAL_TILE_RATIO


def test_equivalence_and_causal_lengths_divide_by_128_and_tails_do_not():
    assert all(c["n"] % 128 == 0 for c in VISIBLE + CAUSAL)
    assert all(c["n"] % 32 for c in TAILS)


def test_the_cuda_core_limit_paragraph_quotes_the_committed_limits_benchmark():
    """Are the cuBLAS-without-TF32, SDPA fp32 and kernel figures of section 2 those of the committed JSON?"""
    import json

    measured = json.loads((course.ROOT / "benchmarks" / "results" / "gpu_kernels_limits_h200.json").read_text())
    row = next(r for r in measured["attention"] if (r["n"], r["d"]) == (4096, 128))
    text = course.text_source(LESSON).read_text(encoding="utf-8")
    start = text.index("Насколько это реально, показывает cuBLAS")
    paragraph = text[start:text.index("gpu_kernels_limits_h200.json", start)]
    for value in (row["gemm_s_tflops"], row["gemm_pv_tflops"], measured["sgemm"]["tflops"], row["sdpa_tflops"],
                  row["flash_tflops"]):
        assert f"{value:.1f}" in paragraph, value
    assert f"{measured['sgemm']['tflops'] / measured['cuda_core_bound']['tflops']:.0%}".replace("%", " %") in paragraph
    assert f"{row['flash_pct_of_bound']:.0f} %" in paragraph
