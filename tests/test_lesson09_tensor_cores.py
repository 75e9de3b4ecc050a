"""Lesson 09 without a GPU (CI): do its kernels compile everywhere, and are its tolerances right?"""
import math

import nbformat
import numpy as np
import pytest

from autograder.course import paths as course

from autograder.course import settings
from autograder.gpu import runtime as gpu, nvrtc
from autograder.checks.core import CheckFailed
from autograder.lessons.lesson09 import checks as l09
from helpers import FULL, scores_of_reference_and_untouched

LESSON = "09_tensor_cores"
KERNELS = {"mma_source": ("MMA_SRC", ("mma_matmul",)),
           "flash_tc_source": ("FLASH_TC_SRC", ("flash_attention_tc_d64", "flash_attention_tc_d128"))}


def _bank_kernels():
    """(entry, cell, source, right) of every distinct kernel source in the lesson-09 GPU bank."""
    import test_gpu_lessons as banks  # the bank module is skipped without a GPU, its builders are plain code

    reference = banks.answers_of(banks.source_path(LESSON))
    found = {}
    for entry in banks.bank_09():
        if entry.name == "untouched":
            continue
        for cell, code in {**reference, **entry.answers}.items():
            if cell in KERNELS:
                ns = {}
                exec(code, ns)
                found.setdefault(ns[KERNELS[cell][0]], (entry.name, cell, not entry.loses))
    return [(name, cell, source, right) for source, (name, cell, right) in found.items()]


@pytest.mark.parametrize("name, cell, source, right", _bank_kernels(),
                         ids=lambda x: x if isinstance(x, str) and len(x) < 60 else "")
def test_bank_kernels_compile_for_every_target(name, cell, source, right):
    """Does every bank kernel (right or wrong) compile for sm_75, sm_80 and sm_90, except the compile error,
    and do the right ones compile without register spills?  `make test` compiles the wrong ones for sm_75 only
    (the T4's path: no cp.async, 64 KiB of shared memory; the emulator runs them there too), `make test-full` for
    all three."""
    variable, kernels = KERNELS[cell]
    if "compile_error" in name:
        with pytest.raises(CheckFailed, match="строка"):
            nvrtc.compile_check(source, kernels, what=variable)
        return
    if not (right or FULL):
        nvrtc.compile_check(source, kernels, what=variable, archs=nvrtc.ARCHS[:1])
        return
    detail = nvrtc.compile_check(source, kernels, what=variable)
    assert "sm_75" in detail
    if right:  # the compile check reports spills for sm_75 and sm_90
        assert "вытеснение" not in detail


def test_reference_kernels_keep_barriers_out_of_branches():
    nb = nbformat.read(course.source_notebook(LESSON), as_version=4)
    kernels = [c.source for c in nb.cells if c.cell_type == "code" and "__global__" in c.source]
    assert len(kernels) == 2 and all(nvrtc.barriers_in_branches(source) == [] for source in kernels)


@pytest.mark.skipif(gpu.gpu_status()[0], reason="with a GPU the run checks score too (tests/test_gpu_lessons.py)")
def test_autograde_without_gpu_gives_the_reference_full_marks_on_the_emulator(tmp_path):
    """Reference: every cell full marks, mma_matmul and the attention checks run on the PTX emulator (the attention
    checks at the emulator's sizes); the untouched notebook: 0."""
    from autograder.checks.core import all_checks

    scored = scores_of_reference_and_untouched(LESSON, tmp_path)
    assert scored["reference"] == {f"test_{k.replace('.', '_')}": c.points for k, c in all_checks("lesson09.").items()}
    assert sum(scored["untouched"].values()) == 0


# --- tolerances: a model of the kernel's arithmetic passes, known-wrong arithmetic does not ----------

def _tc_model(q, k, v, causal=False, bc=64, p_dtype=np.float16, acc_dtype=np.float32, rescale=True):
    """What the reference kernel computes per head: fp32 S, m, l, O; P rounded to f16; O rounded to f16."""
    out = []
    for h in range(q.shape[0]):
        n, d = q.shape[1:]
        q32, k32, v32 = (a[h].astype(np.float32) for a in (q, k, v))
        m = np.full((n, 1), -np.inf, np.float32)
        l = np.zeros((n, 1), np.float32)
        o = np.zeros((n, d), acc_dtype)
        for k0 in range(0, n, bc):
            s = q32 @ k32[k0:k0 + bc].T / np.float32(np.sqrt(d))
            if causal:
                s = np.where(np.arange(k0, k0 + s.shape[1])[None, :] <= np.arange(n)[:, None], s, -np.inf)
            m_new = np.maximum(m, s.max(axis=1, keepdims=True))
            use = np.where(np.isfinite(m_new), m_new, 0)
            alpha, p = np.exp(m - use), np.exp(s - use)
            l = l * alpha + p.sum(axis=1, keepdims=True)
            pv = p.astype(p_dtype).astype(np.float32) @ v32[k0:k0 + bc]
            o = ((o * alpha if rescale else o) + pv).astype(acc_dtype)
            m = m_new
        out.append((o.astype(np.float32) / l).astype(np.float16))
    return np.stack(out)


CASES = [dict(c, causal=False) for c in l09.VISIBLE] + [dict(c, causal=True) for c in l09.CAUSAL] + \
        [dict(c, causal=c.get("causal", False)) for c in l09.TAILS]


@pytest.mark.parametrize("c", CASES, ids=lambda c: f"n{c['n']}d{c['d']}{'c' if c['causal'] else ''}")
def test_model_of_the_reference_kernel_is_within_the_tolerance(c):
    q, k, v = l09._inputs(c["H"], c["n"], c["d"], c["seed"])
    worst = l09._compare(_tc_model(q, k, v, c["causal"]), (q, k, v), c["causal"], case="model")
    assert worst < 0.5  # well inside: the bound is a worst case


def test_O_not_rescaled_is_caught():
    """O not rescaled by 2^(m_old - m_new): caught on the visible equivalence case.

    (O accumulated in float16 between tiles is NOT caught by attention's tolerance: one rounding per tile of 64
    keys stays inside 2 u16 (P|V| + |O|).  float16 accumulation is graded on the matmul, where it is caught.)"""
    c = l09.VISIBLE[0]
    q, k, v = l09._inputs(c["H"], c["n"], c["d"], c["seed"])
    with pytest.raises(CheckFailed, match="не совпадает"):
        l09._compare(_tc_model(q, k, v, rescale=False), (q, k, v), False, case="model")


@pytest.mark.parametrize("name, variant", [("нет масштаба", l09._no_scale), ("causal-маска не применена", l09._causal_ignored),
                                           ("без .trans", l09._v_not_transposed)])
def test_known_mistakes_are_named(name, variant):
    c = l09.CAUSAL[0]
    q, k, v = l09._inputs(c["H"], c["n"], c["d"], c["seed"])
    got = variant(q, k, v, True)[0].astype(np.float16)
    with pytest.raises(CheckFailed) as failed:
        l09._compare(got, (q, k, v), True, case="model")
    assert name in str(failed.value) and failed.value.mistake


def _f16_accumulated_matmul(a, b):
    c = np.zeros((a.shape[0], b.shape[1]), np.float16)
    for k0 in range(0, a.shape[1], 8):
        c = (c.astype(np.float32) + a[:, k0:k0 + 8].astype(np.float32) @ b[k0:k0 + 8].astype(np.float32)).astype(np.float16)
    return c.astype(np.float32)


@pytest.mark.parametrize("c", l09.MMA_VISIBLE + [{"M": 130, "N": 200, "K": 257, "seed": 101}])
def test_matmul_tolerance_separates_fp32_from_f16_accumulation(c):
    a, b = l09.mma_inputs(c["M"], c["N"], c["K"], c["seed"])
    exact = a.astype(np.float64) @ b.astype(np.float64)
    fp32 = a.astype(np.float32) @ b.astype(np.float32)
    assert np.all(np.abs(fp32 - exact) <= l09.mma_bound(a, b))
    f16 = _f16_accumulated_matmul(a, b)
    assert np.all(np.abs(f16 - exact) <= l09.f16_accumulation_bound(a, b))
    if c["K"] >= 16:  # one k-step is exact in either precision before the final rounding
        assert np.any(np.abs(f16 - exact) > l09.mma_bound(a, b))


def test_matmul_mistakes_are_named():
    a, b = l09.mma_inputs(100, 37, 77, 1)
    for name, variant in l09.MMA_MISTAKES.items():
        wrong = variant(a, b)[0].astype(np.float32)
        assert l09._named(wrong, l09.mma_product(a, b), l09.MMA_MISTAKES, (a, b)) == name


@pytest.mark.parametrize("br, bc", [(64, 64), (128, 64), (64, 32), (128, 128)])
def test_causal_tile_fraction_is_below_the_bound(br, bc):
    n = 1024
    full = -(-n // br) * -(-n // bc)
    causal = sum(-(-min(q0 + br, n) // bc) for q0 in range(0, n, br))
    assert causal / full <= l09.CAUSAL_TILE_RATIO


def test_run_checks_need_a_gpu_and_say_so_without_one():
    """Does every run check of lesson 09 need a GPU, run without the address-space cap, and (without a GPU)
    fail with 0 points instead of passing, on the emulator?"""
    from autograder.checks.core import all_checks
    from autograder.notebook import run

    checks = all_checks("lesson09.")
    assert set(checks) == {"lesson09.mma_compiles", "lesson09.mma_matmul", "lesson09.flash_compiles",
                           "lesson09.equivalence", "lesson09.tails", "lesson09.causal", "lesson09.memory",
                           "lesson09.causal_skip", "lesson09.sanitizer"}
    for check_id, check in checks.items():
        assert check.needs_gpu == (not check_id.endswith("compiles")), check_id
        if check.needs_gpu:
            assert check.memory_limit_gib is None
            if not gpu.gpu_status()[0]:
                result = run(check_id, lambda *a, **k: None)
                assert not result.passed and result.score == 0, check_id
                assert "проверено на эмуляторе GPU" in result.message, (check_id, result.message)


def test_notebooks_open_in_colab_and_install_from_the_course_repository():
    """Do both notebooks carry the Colab link and install from settings.COURSE_REPOSITORY, as lessons 06-08 do?"""
    import re

    for path in (course.source_notebook(LESSON), course.student_notebook(LESSON)):
        cells = nbformat.read(path, as_version=4).cells
        assert settings.colab_url(LESSON) in cells[0].source
        assert f'COURSE_REPOSITORY = "{settings.COURSE_REPOSITORY}"' in cells[1].source
        assert re.search(r'find_spec\("autograder"\) is None', cells[1].source)


def test_the_lesson_quotes_the_committed_tensor_core_benchmark():
    """Section 7's table and the prediction cell's figures are the committed H200 run, rounded as printed."""
    import json
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    rows = json.loads((root / "benchmarks/results/gpu_kernels_tc_h200.json").read_text())["tensor_cores"]
    measured = {(r["n"], r["d"], r["causal"]): r for r in rows}
    text = (root / "lessons/09_tensor_cores.py").read_text(encoding="utf-8")
    table = re.findall(r"^# \| (\d+) \| (\d+) \| (нет|да) \| ([\d.]+) \| (\d+) \| (\d+) \| ([\d.]+)× \| ([\d.]+|—) \|$",
                       text, re.MULTILINE)
    assert len(table) == len(measured) == 8
    for n, d, causal, ms, tflops, sdpa, ratio, fp32 in table:
        r = measured[(int(n), int(d), causal == "да")]
        assert math.isclose(float(ms), r["tc_ms"], rel_tol=0.01), (n, d, causal)
        assert int(tflops) == round(r["tc_tflops"]) and int(sdpa) == round(r["sdpa_f16_tflops"]), (n, d, causal)
        assert float(ratio) == round(r["tc_vs_sdpa_f16"], 2), (n, d, causal)
        if fp32 != "—":
            assert float(fp32) == round(r["lesson08_fp32_tflops"], 1), (n, d, causal)
    quoted = re.search(r'H200_MEASURED_TFLOPS = \{"урок 08, fp32": ([\d.]+), "урок 09, f16": ([\d.]+)\}', text)
    big = measured[(16384, 128, False)]
    assert (float(quoted[1]), float(quoted[2])) == (round(big["lesson08_fp32_tflops"], 1), round(big["tc_tflops"], 1))


def test_the_wgmma_figures_of_section_7_are_the_committed_runs():
    """Section 7's sentence on the wgmma reference (benchmarks/tc_wgmma.cu): at n = 16384, d = 128, non-causal, the
    range of its two variants wg2_bc128 and wg2_bc64 over both committed H200 runs, the lesson's kernel in the same
    runs, their ratios to SDPA f16 and the speedup over the lesson's kernel, as rounded in the text."""
    import json
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    text = (root / "lessons/09_tensor_cores.py").read_text(encoding="utf-8")
    quoted = re.search(r"дали (\d+)–(\d+) TFLOP/s против\n#   (\d+)–(\d+) у ядра урока — ([\d.]+)–([\d.]+) от SDPA f16", text)
    assert quoted, "section 7's wgmma sentence changed: update this test with it"
    kernel, lesson, ratio, speedup = [], [], [], []
    for name in ("tc_wgmma_h200.json", "tc_wgmma_h200_again.json"):
        rows = json.loads((root / "benchmarks/results" / name).read_text())["rows"]
        (row,) = [r for r in rows if (r["n"], r["d"], r["causal"]) == (16384, 128, False)]
        lesson.append(row["lesson"]["tflops"])
        for variant in ("wg2_bc128", "wg2_bc64"):
            kernel.append(row[variant]["tflops"])
            ratio.append(row[variant]["x_sdpa"])
            speedup.append(row[variant]["tflops"] / row["lesson"]["tflops"])
    assert [int(x) for x in quoted.groups()[:4]] == [round(min(kernel)), round(max(kernel)), round(min(lesson)),
                                                     round(max(lesson))]
    assert [float(x) for x in quoted.groups()[4:]] == [round(min(ratio), 2), round(max(ratio), 2)]
    assert "около 1.2–1.3×" in text and 1.15 <= min(speedup) and max(speedup) < 1.35
