"""Lesson 08: its oracle, cases and tile-counter bound; on a machine without a GPU (CI), nbgrader grades the reference
on the PTX emulator (at the emulator's sizes) with full marks."""
import numpy as np
import pytest

from autograder.course import paths as course

from autograder.gpu import runtime as gpu
from autograder.checks import reference
from autograder.checks.core import all_checks
from autograder.lessons import gpu_attention
from autograder.lessons.lesson08.checks import CAUSAL, CAUSAL_TILE_RATIO, TAILS, VISIBLE, oracle
from helpers import scores_of_reference_and_untouched

LESSON = "08_cupy_flash_attention"


@pytest.mark.skipif(gpu.gpu_status()[0], reason="with a GPU the run checks score too (tests/test_gpu_lessons.py)")
def test_autograde_without_gpu_gives_the_reference_full_marks_on_the_emulator(tmp_path):
    """Reference: every cell full marks, the run checks on the emulator (no timed check in this lesson); the
    untouched notebook: 0."""
    scored = scores_of_reference_and_untouched(LESSON, tmp_path)
    points = {f"test_{k.replace('.', '_')}": c.points for k, c in all_checks("lesson08.").items()}
    assert scored["reference"] == points
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


@pytest.mark.parametrize("br, bc", [(64, 32), (64, 64), (128, 64), (64, 128), (16, 16), (128, 128)])
def test_causal_tile_fraction_is_below_the_bound_at_the_emulators_length_and_masking_alone_is_not(br, bc):
    """At the emulator's n = 256 the bound is looser (fewer tiles); a skipping kernel with any usual tiles stays
    under it, one that only masks (every pair computed: 1.0) does not."""
    n = gpu_attention.EMULATOR_CAUSAL_SKIP_N
    full = -(-n // br) * -(-n // bc)
    causal = sum(-(-min(q0 + br, n) // bc) for q0 in range(0, n, br))
    assert causal / full <= gpu.causal_tile_bound(n) < 1.0
    assert gpu.causal_tile_bound(1024) <= 0.62 and gpu.causal_tile_bound(2048) == CAUSAL_TILE_RATIO


@pytest.mark.parametrize("source", ["08_cupy_flash_attention.py", "09_tensor_cores.py"])
def test_the_check_list_quotes_the_tile_bounds_the_check_uses(source):
    """The lessons' «Проверки» lists state the bound of the tile counter on a GPU and on the emulator: the
    numbers the check itself uses (runtime.causal_tile_bound)."""
    text = (course.ROOT / "lessons" / source).read_text(encoding="utf-8")
    line = next(part for part in text.split("# - ") if part.startswith("causal пропускает тайлы"))
    n = gpu_attention.EMULATOR_CAUSAL_SKIP_N
    assert f"не больше {CAUSAL_TILE_RATIO:g} " in line
    assert f"n = {n}" in line and f"до {gpu.causal_tile_bound(n):.3g}" in line


def test_the_emulators_cases_are_the_checks_own_cases_made_small():
    """Same seeds, d, masks and scales; at most two heads; n at most 256 plus the case's own tail past a multiple of
    128 (a partial tile stays partial, a multiple of 128 stays one); small cases unchanged."""
    hidden = [{"H": 3, "n": 512, "d": 128, "seed": 101}, {"H": 1, "n": 1024, "d": 64, "seed": 102},
              {"H": 1, "n": 500, "d": 64, "seed": 104, "causal": True}, {"H": 1, "n": 2, "d": 64, "seed": 105},
              {"H": 1, "n": 384, "d": 64, "seed": 108, "q_scale": 100.0, "causal": True}]
    small = gpu_attention.emulator_sized(hidden)
    assert [(c["H"], c["n"]) for c in small] == [(2, 256), (1, 256), (1, 372), (1, 2), (1, 256)]
    for big, c in zip(hidden, small):
        assert {k: v for k, v in c.items() if k not in ("H", "n")} == {k: v for k, v in big.items() if k not in ("H", "n")}
        assert (c["n"] % 128 == 0) == (big["n"] % 128 == 0)
    assert gpu_attention.emulator_sized(VISIBLE + TAILS) == VISIBLE + TAILS
    assert gpu_attention.emulator_sized_causal_skip([{"H": 2, "n": 2048, "d": 128, "seed": 110}]) == \
        [{"H": 1, "n": 256, "d": 128, "seed": 110}]


def test_every_run_check_of_the_lesson_runs_on_the_emulator_at_its_sizes():
    sized = {k: c.function.emulator_cases for k, c in all_checks("lesson08.").items() if c.needs_gpu}
    assert sized == {"lesson08.equivalence": gpu_attention.emulator_sized, "lesson08.tails": gpu_attention.emulator_sized,
                     "lesson08.causal": gpu_attention.emulator_sized, "lesson08.large_logits": gpu_attention.emulator_sized,
                     "lesson08.memory": gpu_attention.emulator_sized, "lesson08.sanitizer": gpu_attention.emulator_sized,
                     "lesson08.causal_skip": gpu_attention.emulator_sized_causal_skip}


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
