"""The pure parts of benchmarks/gpu_kernels.py (goals, the --limits table), on fake results: no GPU needed."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("gpu_kernels_bench", ROOT / "benchmarks" / "gpu_kernels.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

COPY = 4.0     # TB/s


def rms_row(T, D, fused_tbs, torch_tbs):
    return {"T": T, "D": D, "fused_tb_per_s": fused_tbs, "fused_pct_of_copy": 100 * fused_tbs / COPY,
            "torch_tb_per_s": torch_tbs, "speedup_vs_torch": fused_tbs / torch_tbs, "fused_ms": 1.0,
            "torch_ms": fused_tbs / torch_tbs, "naive_ms": 3.0, "speedup_vs_naive": 3.0}


def attention_row(n, d, flash, sdpa, pv=True):
    row = {"H": 16, "n": n, "d": d, "causal": False, "flash_ms": 1.0, "flash_tflops": flash,
           "flash_pct_of_bound": flash / 0.67, "sdpa_tflops": sdpa, "sdpa_efficient_tflops": sdpa,
           "sdpa_pct_of_bound": sdpa / 0.67, "flash_vs_sdpa": flash / sdpa, "gemm_s_tflops": 50.0}
    if pv:
        row["gemm_pv_tflops"] = 48.0
    return row


def test_rms_targets_are_per_d_in_both_goal_functions():
    rms = [rms_row(65536, 4096, 3.64, 2.0), rms_row(65536, 1024, 3.64, 2.0), rms_row(8192, 4096, 3.0, 2.0)]
    for found in (bench.goals(rms, []), bench.limits_goals(rms, [])):
        pct = {g["goal"]: g for g in found if g["goal"].endswith("% of copy")}
        assert set(pct) == {"RMSNorm T=65536 D=4096: % of copy", "RMSNorm T=65536 D=1024: % of copy"}
        assert pct["RMSNorm T=65536 D=4096: % of copy"]["target"] == 93.0
        assert not pct["RMSNorm T=65536 D=4096: % of copy"]["met"]      # 91 %
        assert pct["RMSNorm T=65536 D=1024: % of copy"]["target"] == 90.0
        assert pct["RMSNorm T=65536 D=1024: % of copy"]["met"]


def test_vs_torch_goal_out_of_reach_when_it_needs_more_than_the_copy():
    rms = [rms_row(65536, 4096, 3.7, 3.6), rms_row(65536, 1024, 3.7, 2.0)]
    bench.rms_limits(rms, COPY)
    assert abs(rms[0]["vs_torch_goal_needs_pct_of_copy"] - 121.5) < 1e-9
    assert not rms[0]["vs_torch_goal_reachable"] and rms[1]["vs_torch_goal_reachable"]
    found = {g["goal"]: g for g in bench.limits_goals(rms, [])}
    far = found["RMSNorm T=65536 D=4096: x torch rms_norm"]
    assert not far["reachable"] and "needs 122 % of copy: out of reach" in far["note"]
    near = found["RMSNorm T=65536 D=1024: x torch rms_norm"]
    assert near["reachable"] and "out of reach" not in near["note"] and near["met"]


def test_limits_table_and_attention_goals():
    rms = [rms_row(65536, 4096, 3.7, 3.6)]
    bench.rms_limits(rms, COPY)
    attention = [attention_row(4096, 64, 30.0, 40.0), attention_row(4096, 128, 36.0, 35.0),
                 attention_row(16384, 128, 30.0, 36.0, pv=False)]
    found = bench.limits_goals(rms, attention)
    att = [g for g in found if g["goal"].startswith("attention")]
    assert [g["met"] for g in att] == [True, False]                      # only d = 128 has a goal
    assert "S=QK^T 50.0 TFLOP/s, PV 48.0 TFLOP/s" in att[0]["note"] and "PV -" in att[1]["note"]
    result = {"software": {"device": "fake", "cupy": "0"}, "date": "today", "copy": {"tb_per_s": COPY},
              "rmsnorm": rms, "attention": attention, "goals": found,
              "cuda_core_bound": {"tflops": 66.9, "formula": "132 SMs x 128 FP32 lanes x 2 FLOP x 1980 MHz = 66.9 TFLOP/s"},
              "sgemm": {"M": 8192, "tflops": 50.0}}
    text = bench.limits_table(result)
    assert "122 % of copy (out of reach)" in text and "SHORT attention n=16384 d=128" in text
    assert "cuBLAS fp32 without tensor cores: S=QK^T" in text and "66.9 TFLOP/s" in text
