"""benchmarks/tc_wgmma.py, lesson 09's wgmma candidate (issue 30), without a GPU: NVRTC builds every kernel for
sm_90a as the H200 would run it, and the PTX emulator runs them (its wgmma model: autograder/gpu/emulator/ops_wgmma.py,
to be confirmed by ``--selftest`` on the GPU)."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("tc_wgmma", ROOT / "benchmarks" / "tc_wgmma.py")
tc_wgmma = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tc_wgmma)

REGISTERS_PER_SM = 65536     # sm_90
SHARED_PER_BLOCK = 227 * 1024


def test_every_kernel_builds_for_sm_90a_without_spills_or_serialised_wgmma():
    result, notes = tc_wgmma.compiled()
    assert result.ok, result.log[:3000]
    assert notes == []
    flash = {name: res for name, res in result.resources.items() if name.startswith("wgmma_")}
    assert set(flash) == {tc_wgmma.kernel_name(v, d) for v in tc_wgmma.VARIANTS for d in (64, 128)}
    assert {f"selftest_{form}_n{n}" for form in ("ss", "rs") for n in tc_wgmma.SELFTEST_N} <= set(result.resources)
    for name, res in flash.items():
        threads, shared, _ = tc_wgmma.kernel_shape(name)
        assert res.spill_stores == res.spill_loads == 0, name
        assert res.registers * threads <= REGISTERS_PER_SM, f"{name}: a block does not fit on an SM"
        assert shared <= SHARED_PER_BLOCK, name


def test_the_wrappers_number_their_operands_after_the_accumulators():
    text = tc_wgmma.wrappers(sizes=(64,))
    assert "{%0, %1," in text and "%31}, %32, %33, p, 1, 1, 0, 0;" in text          # ss: descriptors, no transpose
    assert "%31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;" in text                    # rs: A registers, B N-major
    assert 'setp.ne.b32 p, %34, 0' in text and 'setp.ne.b32 p, %37, 0' in text


@pytest.fixture(scope="module")
def emulated():
    return tc_wgmma.emulator_runner()


def test_both_wgmma_forms_multiply_exactly_on_the_emulator(emulated, capsys):
    assert tc_wgmma.selftest(np, emulated), capsys.readouterr().out


def test_every_variant_computes_attention_on_the_emulator(emulated):
    shapes = ((200, 64, True), (130, 128, True), (96, 128, False))  # ragged n, several K/V tiles, both masks
    errors = tc_wgmma.check(np, emulated, list(tc_wgmma.VARIANTS), shapes)
    assert all(e <= tc_wgmma.CHECK_TOLERANCE for e in errors.values()), errors


def test_a_wrong_swizzle_in_the_descriptors_reads_bytes_nobody_wrote():
    body = (ROOT / "benchmarks" / "tc_wgmma.cu").read_text(encoding="utf-8")
    wrong = body.replace("(1ull << 62)", "(2ull << 62)")            # 64-byte swizzle; the panels have 128
    assert wrong != body
    run = tc_wgmma.emulator_runner(tc_wgmma.source(cu_text=wrong))
    with pytest.raises(AssertionError, match="uninitialized_shared"):
        tc_wgmma.selftest(np, run)


def test_a_wrong_register_fragment_gives_wrong_products(capsys):
    body = (ROOT / "benchmarks" / "tc_wgmma.cu").read_text(encoding="utf-8")
    wrong = body.replace("a[1] = *reinterpret_cast<const unsigned*>(a_row + 8 * 16 + 2 * t);",
                         "a[1] = *reinterpret_cast<const unsigned*>(a_row + 8 + 2 * t);")   # row g + 8 -> column + 8
    assert wrong != body
    assert not tc_wgmma.selftest(np, tc_wgmma.emulator_runner(tc_wgmma.source(cu_text=wrong)))
    out = capsys.readouterr().out
    assert "selftest rs n=64: " in out and "wrong rows" in out and "selftest ss n=64: ok" in out


def test_a_missing_barrier_before_the_wgmma_is_caught():
    body = (ROOT / "benchmarks" / "tc_wgmma.cu").read_text(encoding="utf-8")
    head, sep, tail = body.partition("void selftest_ss(")
    racy = head + sep + tail.replace("    __syncthreads();\n", "", 1)  # selftest_ss reads other threads' copies
    assert racy != body
    run = tc_wgmma.emulator_runner(tc_wgmma.source(cu_text=racy))
    with pytest.raises(AssertionError, match="race|cp_async"):
        tc_wgmma.selftest(np, run)


def test_reading_the_scores_before_their_wgmma_is_waited_for_fails_the_check():
    body = (ROOT / "benchmarks" / "tc_wgmma.cu").read_text(encoding="utf-8")
    early = body.replace("issue_scores<D, BCT, BR>(s, Qs, Ks + (j & 1) * TILE, wg);\n        wgmma_wait<0>();",
                         "issue_scores<D, BCT, BR>(s, Qs, Ks + (j & 1) * TILE, wg);", 1)   # S read while in flight
    assert early != body
    run = tc_wgmma.emulator_runner(tc_wgmma.source(cu_text=early))
    errors = tc_wgmma.check(np, run, ["wg2_bc64"], ((130, 128, True),))
    assert errors["wg2_bc64"] == float("inf")                   # the accumulators read as NaN


def test_medians_over_runs_take_each_ratio_within_its_run():
    """--runs N: per shape the median time of each kernel and of SDPA, and the median of the per-run ratios (a run
    where the whole GPU was slower moves no ratio); a kernel not timed in every run has no median."""
    import tc_variants

    def run(sdpa_ms, kernel_ms, err):
        return [{"H": 16, "n": 4096, "d": 128, "causal": False, "sdpa_f16_ms": sdpa_ms,
                 "wg1": {"ms": kernel_ms, "x_sdpa": sdpa_ms / kernel_ms, "err": err},
                 "wg2": {"ms": 1.0, "x_sdpa": sdpa_ms, "err": 0.0} if sdpa_ms < 2 else {"error": "failed"}}]

    (row,) = tc_variants.median_rows([run(1.0, 2.0, 1e-4), run(1.5, 2.0, 3e-4), run(2.0, 2.5, 2e-4)])
    flops = 4.0 * 16 * 4096 ** 2 * 128
    assert row["sdpa_f16_ms"] == 1.5 and row["sdpa_f16_tflops"] == pytest.approx(flops / 1.5e9)
    assert row["wg1"]["ms"] == 2.0 and row["wg1"]["x_sdpa"] == 0.75 and row["wg1"]["err"] == 3e-4
    assert row["wg1"]["tflops"] == pytest.approx(flops / 2e9)
    assert "timed in 2 of 3 runs" in row["wg2"]["error"]
    assert "min x" in tc_variants.table({"rows": [row], "variants": {"wg1": None, "wg2": None}, "device": "GPU",
                                         "date": "today", "torch": "t", "cupy": "c"}).splitlines()[3]
