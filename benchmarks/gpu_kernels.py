"""Benchmark of the GPU lessons 06-09: one command, a table, a JSON file.

    python benchmarks/gpu_kernels.py [--out benchmarks/results/gpu_kernels_h200.json] [--quick]
    python benchmarks/gpu_kernels.py --tensor-cores [--out benchmarks/results/gpu_kernels_tc_h200.json]
    python benchmarks/gpu_kernels.py --limits [--out benchmarks/results/gpu_kernels_limits.json] [--quick]

Everything is measured in one process on the current GPU, with CUDA events (median of several
rounds after warm-up):
* device-to-device copy bandwidth (bytes read + written): the practical memory ceiling;
* fused RMSNorm fp32 of solutions/07 vs ``torch.nn.functional.rms_norm`` vs the naive CuPy
  composition, T=65536 with D=4096 and D=1024 (and T=8192, D=4096, the graded shape);
* lesson 06's figures: the device's execution-model facts, the launch latency of an empty kernel
  (and ten CuPy ops against one fused kernel), copy bandwidth with reads 1..64 elements apart;
* FlashAttention fp32 of solutions/08 (step 2, the fast kernel) vs ``torch.nn.functional.scaled_dot_product_attention`` in
  fp32 vs naive CuPy (S materialised), H=16 heads, n=4096 and 16384, d=64 and 128, causal and not;
  step 1 (one thread per query row, the graded skeleton) at n=4096 only (it is slow).
With ``--tensor-cores`` (lesson 09) only this is measured, in one process: FlashAttention on tensor cores
(float16, solutions/09) vs ``scaled_dot_product_attention`` in float16 (the same inputs, the same run), H=16,
n=4096 and 16384, d=64 and 128, causal and not, and lesson 08's fp32 kernel beside it (n=4096, and n=16384 at
d=128 without the mask).  Goals: >= 0.5x SDPA f16 (FlashAttention-2 level) and causal >= 1.7x faster than
non-causal at n=16384.
With ``--limits`` the two goals are measured against their physical limits, side by side: lesson 07's RMSNorm
vs ``rms_norm`` vs the copy (torch's own share of the copy, and the share that 1.35x torch would need: above
100 % the goal is out of reach), and lesson 08's fp32 kernel vs SDPA fp32 (default and EFFICIENT_ATTENTION) at
H=16, n=4096/16384, d=64/128, non-causal, beside the CUDA-core fp32 bound (SMs x 128 lanes x 2 FLOP x clock)
and cuBLAS fp32 with TF32 off on attention's two GEMMs (S = Q K^T, P V) and on one 8192^3 SGEMM.
The kernels are read from the instructor notebooks (their answer cells), so the benchmark always
measures what the course ships.  Goals are the issue's: RMSNorm >= 93 % of the copy at D=4096 (90 % at
D=1024) and >= 1.35x torch; attention >= SDPA fp32; causal >= 1.7x faster than non-causal at n=16384.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RMS_SHAPES = [(65536, 4096), (65536, 1024), (8192, 4096)]
ATTENTION_SHAPES = [(16, n, d, causal) for n in (4096, 16384) for d in (64, 128) for causal in (False, True)]
GOALS = {"rms_pct_of_copy": {4096: 93.0, 1024: 90.0},    # per D, at T=65536
         "rms_vs_torch": 1.35, "attention_vs_sdpa": 1.0, "causal_speedup": 1.7}


def load_answers(lesson: str, namespace: dict) -> dict:
    """Execute the answer cells of the instructor notebook ``solutions/<lesson>/<lesson>.ipynb``."""
    notebook = json.loads((ROOT / "solutions" / lesson / f"{lesson}.ipynb").read_text(encoding="utf-8"))
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code" and cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            exec(compile("".join(cell["source"]), f"<{lesson}>", "exec"), namespace)
    return namespace


class Timer:
    """CUDA-event timing: median over rounds of the mean time of back-to-back calls, in ms.

    The GPU idles at a low clock between measurements (an H200 at 345 MHz) and takes milliseconds to reach full
    speed, so a few warm-up calls of a 0.1 ms kernel measure the ramp, not the kernel: runs of the same RMSNorm
    a minute apart gave 83 % and 91-95 % of copy.  Hence the warm-up lasts at least ``warmup_ms`` of calls and
    every round at least ``min_round_ms`` (``repeat`` is raised to fit); ``warmup`` and ``repeat`` are minimums.
    """

    def __init__(self, cp, torch=None, warmup_ms: float = 100.0, min_round_ms: float = 20.0):
        self.cp, self.torch = cp, torch
        self.warmup_ms, self.min_round_ms = warmup_ms, min_round_ms

    def __call__(self, function, *, repeat: int = 10, rounds: int = 5, warmup: int = 3) -> float:
        calls, start = 0, time.perf_counter()
        while calls < warmup or (time.perf_counter() - start) * 1e3 < self.warmup_ms:
            function()
            calls += 1
            self.synchronize()
        per_call_ms = (time.perf_counter() - start) * 1e3 / calls
        repeat = max(repeat, math.ceil(self.min_round_ms / max(per_call_ms, 1e-3)))
        times = []
        for _ in range(rounds):
            start, end = self.cp.cuda.Event(), self.cp.cuda.Event()
            start.record()
            for _ in range(repeat):
                function()
            end.record()
            end.synchronize()
            times.append(self.cp.cuda.get_elapsed_time(start, end) / repeat)
        return float(np.median(times))

    def synchronize(self):
        self.cp.cuda.Device().synchronize()
        if self.torch is not None:
            self.torch.cuda.synchronize()


def naive_rms_norm(cp, x, w, eps=1e-6):
    return x / cp.sqrt(cp.mean(x * x, axis=-1, keepdims=True) + eps) * w


def naive_attention(cp, q, k, v, causal, max_bytes=4 * 2**30):
    """softmax(Q K^T / sqrt(d)) V with S materialised, over chunks of heads (S <= max_bytes)."""
    H, n, d = q.shape
    out = cp.empty_like(q)
    step = max(1, max_bytes // (n * n * 4))
    mask = cp.tri(n, dtype=bool) if causal else None
    for h in range(0, H, step):
        s = q[h:h + step] @ cp.swapaxes(k[h:h + step], 1, 2) * np.float32(1 / math.sqrt(d))
        if causal:
            s = cp.where(mask, s, cp.float32(-np.inf))
        s = cp.exp(s - s.max(axis=-1, keepdims=True))
        out[h:h + step] = (s / s.sum(axis=-1, keepdims=True)) @ v[h:h + step]
        del s
    return out


def software(cp, torch) -> dict:
    runtime = cp.cuda.runtime
    props = runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    info = {"device": name, "compute_capability": f"{props['major']}.{props['minor']}",
            "multiprocessors": props["multiProcessorCount"],
            "memory_gib": round(props["totalGlobalMem"] / 2**30, 1),
            "python": platform.python_version(), "numpy": np.__version__, "cupy": cp.__version__,
            "cuda_runtime": runtime.runtimeGetVersion(), "cuda_driver": runtime.driverGetVersion()}
    if torch is not None:
        info["torch"] = torch.__version__
    return info


def bench_copy(cp, timer, nbytes=2 * 2**30) -> dict:
    src = cp.random.standard_normal(nbytes // 4, dtype=cp.float32)
    dst = cp.empty_like(src)
    ms = timer(lambda: dst.__setitem__(Ellipsis, src), repeat=10, rounds=5)
    del src, dst
    return {"bytes": nbytes, "ms": ms, "tb_per_s": 2 * nbytes / ms / 1e9}


def bench_rms(cp, torch, timer, fused, copy_tbs, shapes) -> list[dict]:
    rows = []
    for T, D in shapes:
        x = cp.random.standard_normal((T, D), dtype=cp.float32)
        w = (1 + 0.5 * cp.random.standard_normal(D, dtype=cp.float32)).astype(cp.float32)
        bytes_moved = 2 * T * D * 4
        row = {"T": T, "D": D, "bytes": bytes_moved}
        y = fused(x, w, 1e-6)
        ref = naive_rms_norm(cp, x, w)
        row["max_rel_err_vs_naive"] = float(cp.max(cp.abs(y - ref) / (cp.abs(ref) + 1e-3)))
        del y, ref
        # A clean pool before timing: with the naive version's freed temporaries still in it, the wrapper's output
        # lands in a block where the same kernel reached 92 % of copy instead of 96 % (H200, 2026-12-01; the
        # placement of x and y as such made no difference, 96.4-96.5 % at ten offsets; the cause is not known).
        cp.get_default_memory_pool().free_all_blocks()
        row["fused_ms"] = timer(lambda: fused(x, w, 1e-6))
        row["naive_ms"] = timer(lambda: naive_rms_norm(cp, x, w), repeat=5, rounds=3)
        if torch is not None:
            tx, tw = torch.as_tensor(x, device="cuda"), torch.as_tensor(w, device="cuda")
            row["torch_ms"] = timer(lambda: torch.nn.functional.rms_norm(tx, (D,), tw, 1e-6))
            del tx, tw
        for key in ("fused", "naive", "torch"):
            if f"{key}_ms" in row:
                row[f"{key}_tb_per_s"] = bytes_moved / row[f"{key}_ms"] / 1e9
        row["fused_pct_of_copy"] = 100 * row["fused_tb_per_s"] / copy_tbs
        row["speedup_vs_naive"] = row["naive_ms"] / row["fused_ms"]
        if "torch_ms" in row:
            row["speedup_vs_torch"] = row["torch_ms"] / row["fused_ms"]
        rows.append(row)
        del x, w
        cp.get_default_memory_pool().free_all_blocks()
    return rows


def bench_attention(cp, torch, timer, flash, shapes, with_naive=True) -> list[dict]:
    rows = []
    for H, n, d, causal in shapes:
        q, k, v = (cp.random.standard_normal((H, n, d), dtype=cp.float32) for _ in range(3))
        flops = 4.0 * H * n * n * d / (2 if causal else 1)
        slow = n >= 16384
        reps = {"repeat": 2 if slow else 5, "rounds": 3, "warmup": 1 if slow else 2}
        row = {"H": H, "n": n, "d": d, "causal": causal, "flops": flops}
        counter = cp.zeros(1, dtype=cp.int32)
        out = flash(q, k, v, causal=causal, tile_counter=counter)
        row["tiles"] = int(counter.get()[0])
        row["flash_ms"] = timer(lambda: flash(q, k, v, causal=causal), **reps)
        if torch is not None:
            tq, tk, tv = (torch.as_tensor(a, device="cuda")[None] for a in (q, k, v))
            sdpa = lambda: torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)  # noqa: E731
            ref = cp.asarray(sdpa()[0])
            row["max_abs_err_vs_sdpa"] = float(cp.max(cp.abs(out - ref)))
            del ref
            row["sdpa_ms"] = timer(sdpa, **reps)
            del tq, tk, tv
        if with_naive:
            row["naive_ms"] = timer(lambda: naive_attention(cp, q, k, v, causal), **reps)
        for key in ("flash", "sdpa", "naive"):
            if f"{key}_ms" in row:
                row[f"{key}_tflops"] = flops / row[f"{key}_ms"] / 1e9
        if "sdpa_ms" in row:
            row["flash_vs_sdpa"] = row["sdpa_ms"] / row["flash_ms"]
        rows.append(row)
        del q, k, v, out
        cp.get_default_memory_pool().free_all_blocks()
    return rows


def goals(rms: list[dict], attention: list[dict]) -> list[dict]:
    found = []
    for r in rms:
        target = GOALS["rms_pct_of_copy"].get(r["D"])
        if r["T"] != 65536 or target is None:
            continue
        found.append({"goal": f"RMSNorm T={r['T']} D={r['D']}: % of copy", "target": target,
                      "measured": r["fused_pct_of_copy"]})
        if "speedup_vs_torch" in r:
            found.append({"goal": f"RMSNorm T={r['T']} D={r['D']}: x torch rms_norm",
                          "target": GOALS["rms_vs_torch"], "measured": r["speedup_vs_torch"]})
    for r in attention:
        if "flash_vs_sdpa" in r:
            found.append({"goal": f"attention n={r['n']} d={r['d']} {'causal' if r['causal'] else 'full'}: x SDPA fp32",
                          "target": GOALS["attention_vs_sdpa"], "measured": r["flash_vs_sdpa"]})
    for d in sorted({r["d"] for r in attention}):
        pair = {r["causal"]: r for r in attention if r["n"] == 16384 and r["d"] == d}
        if len(pair) == 2:
            found.append({"goal": f"attention n=16384 d={d}: causal speedup", "target": GOALS["causal_speedup"],
                          "measured": pair[False]["flash_ms"] / pair[True]["flash_ms"]})
    for g in found:
        g["met"] = g["measured"] >= g["target"]
    return found


def table(result: dict) -> str:
    lines = [f"{result['software']['device']}  {result['date']}  CuPy {result['software']['cupy']}  "
             f"torch {result['software'].get('torch', '-')}",
             f"copy device->device: {result['copy']['tb_per_s']:.2f} TB/s (read + write)", "",
             "lesson 06: " + ", ".join(f"{k} {v:.2f}" for k, v in result["cuda_basics"]["launch_latency"].items()
                                       if k.endswith("_us")),
             "strided copy GB/s: " + ", ".join(f"stride {k}: {v:.0f}"
                                                for k, v in result["cuda_basics"]["strided_bandwidth_gbs"].items()), "",
             f"{'RMSNorm fp32':<18}{'fused ms':>10}{'TB/s':>7}{'%copy':>7}{'torch ms':>10}{'x torch':>9}"
             f"{'naive ms':>10}{'x naive':>9}"]
    for r in result["rmsnorm"]:
        lines.append(f"T={r['T']:<6} D={r['D']:<6}{r['fused_ms']:>10.3f}{r['fused_tb_per_s']:>7.2f}"
                     f"{r['fused_pct_of_copy']:>7.1f}{r.get('torch_ms', float('nan')):>10.3f}"
                     f"{r.get('speedup_vs_torch', float('nan')):>9.2f}{r['naive_ms']:>10.3f}{r['speedup_vs_naive']:>9.2f}")
    lines += ["", f"{'attention fp32 H=16':<26}{'flash ms':>10}{'TFLOP/s':>9}{'SDPA':>8}{'naive':>8}{'x SDPA':>8}"]
    for r in result["attention"]:
        name = f"n={r['n']} d={r['d']} {'causal' if r['causal'] else 'full'}"
        lines.append(f"{name:<26}{r['flash_ms']:>10.2f}{r['flash_tflops']:>9.1f}"
                     f"{r.get('sdpa_tflops', float('nan')):>8.1f}{r.get('naive_tflops', float('nan')):>8.1f}"
                     f"{r.get('flash_vs_sdpa', float('nan')):>8.2f}")
    for r in result.get("attention_step1", []):
        lines.append(f"step 1 n={r['n']} d={r['d']} {'causal' if r['causal'] else 'full'}: "
                     f"{r['flash_ms']:.2f} ms, {r['flash_tflops']:.2f} TFLOP/s")
    lines += ["", "goals:"]
    for g in result["goals"]:
        lines.append(f"  {'met ' if g['met'] else 'SHORT'} {g['goal']}: {g['measured']:.2f} (target {g['target']:g})")
    return "\n".join(lines)



TC_GOALS = {"tc_vs_sdpa_f16": 0.5, "causal_speedup": 1.7}


def bench_tensor_cores(cp, torch, timer, flash_tc, shapes, flash_fp32=None, fp32_shapes=()) -> list[dict]:
    """Lesson 09's kernel (float16 in and out) next to SDPA float16 on the same inputs; lesson 08's fp32 kernel."""
    rows = []
    for H, n, d, causal in shapes:
        q, k, v = (cp.random.standard_normal((H, n, d), dtype=cp.float32).astype(cp.float16) for _ in range(3))
        flops = 4.0 * H * n * n * d / (2 if causal else 1)
        reps = {"repeat": 5 if n >= 16384 else 10, "rounds": 5, "warmup": 3}
        row = {"H": H, "n": n, "d": d, "causal": causal, "flops": flops, "dtype": "float16"}
        counter = cp.zeros(1, dtype=cp.int32)
        out = flash_tc(q, k, v, causal=causal, tile_counter=counter)
        row["tiles"] = int(counter.get()[0])
        row["tc_ms"] = timer(lambda: flash_tc(q, k, v, causal=causal), **reps)
        if torch is not None:
            tq, tk, tv = (torch.as_tensor(a, device="cuda")[None] for a in (q, k, v))
            sdpa = lambda: torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)  # noqa: E731
            ref = cp.asarray(sdpa()[0])
            row["max_abs_err_vs_sdpa_f16"] = float(cp.max(cp.abs(out.astype(cp.float32) - ref.astype(cp.float32))))
            del ref
            row["sdpa_f16_ms"] = timer(sdpa, **reps)
            row["tc_vs_sdpa_f16"] = row["sdpa_f16_ms"] / row["tc_ms"]
            del tq, tk, tv
        if flash_fp32 is not None and (H, n, d, causal) in fp32_shapes:
            q32, k32, v32 = (a.astype(cp.float32) for a in (q, k, v))
            row["lesson08_fp32_ms"] = timer(lambda: flash_fp32(q32, k32, v32, causal=causal), repeat=2, rounds=3, warmup=1)
            del q32, k32, v32
        for key in ("tc", "sdpa_f16", "lesson08_fp32"):
            if f"{key}_ms" in row:
                row[f"{key}_tflops"] = flops / row[f"{key}_ms"] / 1e9
        rows.append(row)
        del q, k, v, out
        cp.get_default_memory_pool().free_all_blocks()
    return rows


def tc_goals(rows: list[dict]) -> list[dict]:
    found = [{"goal": f"tensor cores n={r['n']} d={r['d']} {'causal' if r['causal'] else 'full'}: x SDPA f16",
              "target": TC_GOALS["tc_vs_sdpa_f16"], "measured": r["tc_vs_sdpa_f16"]}
             for r in rows if "tc_vs_sdpa_f16" in r]
    for d in sorted({r["d"] for r in rows}):
        pair = {r["causal"]: r for r in rows if r["n"] == 16384 and r["d"] == d}
        if len(pair) == 2:
            found.append({"goal": f"tensor cores n=16384 d={d}: causal speedup", "target": TC_GOALS["causal_speedup"],
                          "measured": pair[False]["tc_ms"] / pair[True]["tc_ms"]})
    for g in found:
        g["met"] = g["measured"] >= g["target"]
    return found


def tc_table(result: dict) -> str:
    lines = [f"{result['software']['device']}  {result['date']}  CuPy {result['software']['cupy']}  "
             f"torch {result['software'].get('torch', '-')}", "",
             f"{'attention f16 H=16':<26}{'tc ms':>9}{'TFLOP/s':>9}{'SDPA f16':>10}{'x SDPA':>8}{'L08 fp32':>10}{'tiles':>9}"]
    for r in result["tensor_cores"]:
        name = f"n={r['n']} d={r['d']} {'causal' if r['causal'] else 'full'}"
        lines.append(f"{name:<26}{r['tc_ms']:>9.3f}{r['tc_tflops']:>9.1f}{r.get('sdpa_f16_tflops', float('nan')):>10.1f}"
                     f"{r.get('tc_vs_sdpa_f16', float('nan')):>8.2f}{r.get('lesson08_fp32_tflops', float('nan')):>10.1f}"
                     f"{r['tiles']:>9}")
    lines += ["", "goals:"]
    for g in result["goals"]:
        lines.append(f"  {'met ' if g['met'] else 'SHORT'} {g['goal']}: {g['measured']:.2f} (target {g['target']:g})")
    return "\n".join(lines)


def main_tensor_cores(args, argv, cp, torch) -> int:
    namespace = {"cp": cp, "np": np, "math": math}
    flash_tc = load_answers("09_tensor_cores", dict(namespace))["flash_attention_tc_gpu"]
    flash_fp32 = load_answers("08_cupy_flash_attention", dict(namespace))["flash_attention_fast_gpu"]
    timer = Timer(cp, torch)
    shapes = [(4, 1024, 64, False), (4, 1024, 64, True)] if args.quick else ATTENTION_SHAPES
    fp32_shapes = {s for s in shapes if s[1] <= 4096} | {(16, 16384, 128, False)}
    result = {"command": "python benchmarks/gpu_kernels.py " + " ".join(argv or sys.argv[1:]),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "software": software(cp, torch), "goals_defined": TC_GOALS}
    result["tensor_cores"] = bench_tensor_cores(cp, torch, timer, flash_tc, shapes, flash_fp32, fp32_shapes)
    result["goals"] = tc_goals(result["tensor_cores"])
    out = args.out or str(ROOT / "benchmarks" / "results" / "gpu_kernels_tc.json")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(tc_table(result))
    print(f"\nwritten {out}")
    return 0


LIMITS_ATTENTION_SHAPES = [(16, 4096, 64), (16, 4096, 128), (16, 16384, 128)]
LIMITS_PV_MAX_BYTES = 4 * 2**30     # P of shape (H, n, n) fp32 is materialised only up to this size
LIMITS_SGEMM_SIZE = 8192


def cuda_core_bound(cp) -> dict:
    """Peak fp32 FMA rate of the CUDA cores: SMs x 128 FP32 lanes x 2 FLOP x SM clock."""
    runtime = cp.cuda.runtime
    props = runtime.getDeviceProperties(0)
    clock_khz, source = props.get("clockRate"), 'getDeviceProperties(0)["clockRate"]'
    if not clock_khz:     # CUDA 13 dropped clockRate from cudaDeviceProp; the device attribute remains
        clock_khz = runtime.deviceGetAttribute(getattr(runtime, "cudaDevAttrClockRate", 13), 0)
        source = "deviceGetAttribute(cudaDevAttrClockRate)"
    sms, lanes = props["multiProcessorCount"], 128
    tflops = sms * lanes * 2 * clock_khz * 1e3 / 1e12
    return {"tflops": tflops, "multiprocessors": sms, "fp32_lanes_per_sm": lanes, "flop_per_fma": 2,
            "clock_mhz": clock_khz / 1e3, "clock_source": source,
            "formula": f"{sms} SMs x {lanes} FP32 lanes x 2 FLOP x {clock_khz / 1e3:.0f} MHz = {tflops:.1f} TFLOP/s"}


def bench_sgemm(torch, timer, size) -> dict:
    """One square fp32 matmul through cuBLAS (the caller turns TF32 off): the plain SGEMM rate."""
    a, b = (torch.randn(size, size, device="cuda", dtype=torch.float32) for _ in range(2))
    c = torch.empty(size, size, device="cuda", dtype=torch.float32)
    ms = timer(lambda: torch.mm(a, b, out=c), repeat=5, rounds=5, warmup=2)
    del a, b, c
    torch.cuda.empty_cache()
    flops = 2.0 * size ** 3
    return {"M": size, "N": size, "K": size, "flops": flops, "ms": ms, "tflops": flops / ms / 1e9}


def bench_attention_limits(cp, torch, timer, flash, shapes, bound_tflops) -> list[dict]:
    """Lesson 08's fp32 kernel vs SDPA fp32 (default and EFFICIENT_ATTENTION) vs cuBLAS fp32 on the two GEMMs."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    rows = []
    for H, n, d in shapes:
        tq, tk, tv = (torch.randn(H, n, d, device="cuda", dtype=torch.float32) for _ in range(3))
        q, k, v = (cp.asarray(t) for t in (tq, tk, tv))
        flops = 4.0 * H * n * n * d
        slow = n >= 16384
        reps = {"repeat": 2 if slow else 5, "rounds": 3, "warmup": 1 if slow else 2}
        row = {"H": H, "n": n, "d": d, "causal": False, "flops": flops}
        out = flash(q, k, v, causal=False)
        timer.synchronize()
        sdpa = lambda: torch.nn.functional.scaled_dot_product_attention(tq[None], tk[None], tv[None])  # noqa: E731
        ref = cp.asarray(sdpa()[0])
        row["max_abs_err_vs_sdpa"] = float(cp.max(cp.abs(out - ref)))
        del out, ref
        row["flash_ms"] = timer(lambda: flash(q, k, v, causal=False), **reps)
        row["sdpa_ms"] = timer(sdpa, **reps)
        with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
            row["sdpa_efficient_ms"] = timer(sdpa, **reps)
        # the two GEMMs of attention on CUDA cores (TF32 is off here): S = Q K^T and O = P V
        s = torch.empty(H, n, n, device="cuda", dtype=torch.float32)
        row["gemm_s_flops"] = 2.0 * H * n * n * d
        row["gemm_s_ms"] = timer(lambda: torch.bmm(tq, tk.transpose(1, 2), out=s), **reps)
        del s
        torch.cuda.empty_cache()
        if H * n * n * 4 <= LIMITS_PV_MAX_BYTES:
            p = torch.rand(H, n, n, device="cuda", dtype=torch.float32)
            o = torch.empty(H, n, d, device="cuda", dtype=torch.float32)
            row["gemm_pv_flops"] = 2.0 * H * n * n * d
            row["gemm_pv_ms"] = timer(lambda: torch.bmm(p, tv, out=o), **reps)
            del p, o
        for key in ("flash", "sdpa", "sdpa_efficient"):
            row[f"{key}_tflops"] = flops / row[f"{key}_ms"] / 1e9
            row[f"{key}_pct_of_bound"] = 100 * row[f"{key}_tflops"] / bound_tflops
        for key in ("gemm_s", "gemm_pv"):
            if f"{key}_ms" in row:
                row[f"{key}_tflops"] = row[f"{key}_flops"] / row[f"{key}_ms"] / 1e9
        row["flash_vs_sdpa"] = row["sdpa_ms"] / row["flash_ms"]
        row["flash_vs_sdpa_efficient"] = row["sdpa_efficient_ms"] / row["flash_ms"]
        rows.append(row)
        del q, k, v, tq, tk, tv
        cp.get_default_memory_pool().free_all_blocks()
        torch.cuda.empty_cache()
    return rows


def rms_limits(rms: list[dict], copy_tbs: float) -> None:
    """Add torch's share of copy and the share of copy that GOALS["rms_vs_torch"] x torch would need (in place)."""
    for r in rms:
        if "torch_tb_per_s" in r:
            r["torch_pct_of_copy"] = 100 * r["torch_tb_per_s"] / copy_tbs
            r["vs_torch_goal_needs_pct_of_copy"] = GOALS["rms_vs_torch"] * r["torch_pct_of_copy"]
            r["vs_torch_goal_reachable"] = r["vs_torch_goal_needs_pct_of_copy"] <= 100.0


def limits_goals(rms: list[dict], attention: list[dict]) -> list[dict]:
    """Goals of the --limits mode; RMSNorm x torch says when it needs more than the measured copy."""
    found = []
    for r in rms:
        target = GOALS["rms_pct_of_copy"].get(r["D"])
        if r["T"] != 65536 or target is None:
            continue
        found.append({"goal": f"RMSNorm T={r['T']} D={r['D']}: % of copy", "target": target,
                      "measured": r["fused_pct_of_copy"]})
        if "speedup_vs_torch" in r:
            g = {"goal": f"RMSNorm T={r['T']} D={r['D']}: x torch rms_norm", "target": GOALS["rms_vs_torch"],
                 "measured": r["speedup_vs_torch"]}
            if "vs_torch_goal_needs_pct_of_copy" in r:
                needs = r["vs_torch_goal_needs_pct_of_copy"]
                g["needs_pct_of_copy"] = needs
                g["reachable"] = needs <= 100.0
                g["note"] = (f"needs {needs:.0f} % of copy" + ("" if g["reachable"] else ": out of reach")
                             + f" (torch is at {r['torch_pct_of_copy']:.0f} %)")
            found.append(g)
    for r in attention:
        if r["d"] == 128 and "flash_vs_sdpa" in r:
            gemm = ", ".join(f"{name} {r[key]:.1f} TFLOP/s" if key in r else f"{name} -"
                             for name, key in (("S=QK^T", "gemm_s_tflops"), ("PV", "gemm_pv_tflops")))
            found.append({"goal": f"attention n={r['n']} d={r['d']} full: x SDPA fp32", "target": GOALS["attention_vs_sdpa"],
                          "measured": r["flash_vs_sdpa"],
                          "note": f"SDPA fp32 {r['sdpa_tflops']:.1f} TFLOP/s; cuBLAS fp32 without tensor cores: {gemm}"})
    for g in found:
        g["met"] = g["measured"] >= g["target"]
    return found


def limits_table(result: dict) -> str:
    nan = float("nan")
    bound = result["cuda_core_bound"]
    lines = [f"{result['software']['device']}  {result['date']}  CuPy {result['software']['cupy']}  "
             f"torch {result['software'].get('torch', '-')}",
             f"copy device->device: {result['copy']['tb_per_s']:.2f} TB/s (read + write)", "",
             f"{'RMSNorm fp32':<18}{'L07 TB/s':>9}{'%copy':>7}{'torch TB/s':>11}{'%copy':>7}{'x torch':>9}"
             f"{'1.35x torch needs':>19}"]
    for r in result["rmsnorm"]:
        needs = r.get("vs_torch_goal_needs_pct_of_copy", nan)
        verdict = f"{needs:.0f} % of copy" + ("" if needs <= 100 or needs != needs else " (out of reach)")
        lines.append(f"T={r['T']:<6} D={r['D']:<6}{r['fused_tb_per_s']:>9.2f}{r['fused_pct_of_copy']:>7.1f}"
                     f"{r.get('torch_tb_per_s', nan):>11.2f}{r.get('torch_pct_of_copy', nan):>7.1f}"
                     f"{r.get('speedup_vs_torch', nan):>9.2f}   {verdict}")
    lines += ["", f"CUDA-core fp32 bound: {bound['formula']}",
              f"cuBLAS SGEMM {result['sgemm']['M']}^3 fp32, TF32 off: {result['sgemm']['tflops']:.1f} TFLOP/s "
              f"({100 * result['sgemm']['tflops'] / bound['tflops']:.0f} % of the bound)", "",
              f"{'attention fp32 H=16 full':<22}{'L08 ms':>9}{'TFLOP/s':>9}{'%bound':>8}{'SDPA':>7}{'SDPA eff':>9}"
              f"{'SDPA%bd':>8}{'x SDPA':>8}{'bmm S':>7}{'bmm PV':>8}"]
    for r in result["attention"]:
        lines.append(f"{'n=%d d=%d' % (r['n'], r['d']):<22}{r['flash_ms']:>9.2f}{r['flash_tflops']:>9.1f}"
                     f"{r['flash_pct_of_bound']:>8.1f}{r['sdpa_tflops']:>7.1f}{r['sdpa_efficient_tflops']:>9.1f}"
                     f"{r['sdpa_pct_of_bound']:>8.1f}{r['flash_vs_sdpa']:>8.2f}{r.get('gemm_s_tflops', nan):>7.1f}"
                     f"{r.get('gemm_pv_tflops', nan):>8.1f}")
    lines += ["(TFLOP/s: attention 4*H*n^2*d; bmm S = Q K^T and bmm PV = P V, 2*H*n^2*d each, cuBLAS fp32 TF32 off; "
              "PV only where P fits in 4 GiB)", "", "goals:"]
    for g in result["goals"]:
        lines.append(f"  {'met ' if g['met'] else 'SHORT'} {g['goal']}: {g['measured']:.2f} (target {g['target']:g})"
                     + (f"; {g['note']}" if g.get("note") else ""))
    return "\n".join(lines)


def main_limits(args, argv, cp, torch) -> int:
    if torch is None:
        raise SystemExit("--limits needs torch (torch rms_norm, SDPA and cuBLAS are the references)")
    namespace = {"cp": cp, "np": np, "math": math}
    fused = load_answers("07_cupy_rmsnorm", dict(namespace))["fused_rms_norm_gpu"]
    flash = load_answers("08_cupy_flash_attention", dict(namespace))["flash_attention_fast_gpu"]
    timer = Timer(cp, torch)
    rms_shapes = [(4096, 1024)] if args.quick else RMS_SHAPES
    attention_shapes = [(4, 1024, 64), (4, 1024, 128)] if args.quick else LIMITS_ATTENTION_SHAPES
    result = {"command": "python benchmarks/gpu_kernels.py " + " ".join(argv or sys.argv[1:]),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "software": software(cp, torch), "goals_defined": GOALS}
    result["copy"] = bench_copy(cp, timer)
    result["rmsnorm"] = bench_rms(cp, torch, timer, fused, result["copy"]["tb_per_s"], rms_shapes)
    rms_limits(result["rmsnorm"], result["copy"]["tb_per_s"])
    torch.cuda.empty_cache()
    result["cuda_core_bound"] = cuda_core_bound(cp)
    allow_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        result["tf32_matmul"] = torch.backends.cuda.matmul.allow_tf32
        result["sgemm"] = bench_sgemm(torch, timer, 1024 if args.quick else LIMITS_SGEMM_SIZE)
        result["attention"] = bench_attention_limits(cp, torch, timer, flash, attention_shapes,
                                                     result["cuda_core_bound"]["tflops"])
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allow_tf32
    result["goals"] = limits_goals(result["rmsnorm"], result["attention"])
    out = args.out or str(ROOT / "benchmarks" / "results" / "gpu_kernels_limits.json")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(limits_table(result))
    print(f"\nwritten {out}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None, help="default benchmarks/results/gpu_kernels.json "
                                                     "(--tensor-cores: gpu_kernels_tc.json, "
                                                     "--limits: gpu_kernels_limits.json)")
    parser.add_argument("--quick", action="store_true", help="small shapes only (a smoke test)")
    parser.add_argument("--tensor-cores", action="store_true", help="lesson 09 only: tensor cores vs SDPA f16")
    parser.add_argument("--limits", action="store_true", help="lesson 07 RMSNorm vs torch vs copy and lesson 08 "
                        "fp32 attention vs SDPA fp32 vs the CUDA-core fp32 bound and cuBLAS without TF32")
    args = parser.parse_args(argv)

    import cupy as cp
    try:
        import torch
    except ImportError:
        torch = None
    if args.tensor_cores:
        return main_tensor_cores(args, argv, cp, torch)
    if args.limits:
        return main_limits(args, argv, cp, torch)
    args.out = args.out or str(ROOT / "benchmarks" / "results" / "gpu_kernels.json")
    namespace = {"cp": cp, "np": np, "math": math}
    fused = load_answers("07_cupy_rmsnorm", dict(namespace))["fused_rms_norm_gpu"]
    lesson08 = load_answers("08_cupy_flash_attention", dict(namespace))
    flash, flash_step1 = lesson08["flash_attention_fast_gpu"], lesson08["flash_attention_gpu"]
    sys.path.insert(0, str(ROOT))
    from autograder.lessons.lesson06 import cuda_basics
    timer = Timer(cp, torch)
    rms_shapes = [(4096, 1024)] if args.quick else RMS_SHAPES
    attention_shapes = [(4, 1024, 64, False), (4, 1024, 64, True)] if args.quick else ATTENTION_SHAPES

    result = {"command": "python benchmarks/gpu_kernels.py " + " ".join(argv or sys.argv[1:]),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "software": software(cp, torch), "goals_defined": GOALS}
    result["copy"] = bench_copy(cp, timer)
    result["device_facts"] = cuda_basics.device_facts()
    result["cuda_basics"] = {"date": result["date"][:10], "launch_latency": cuda_basics.launch_latency(),
                             "strided_bandwidth_gbs": cuda_basics.strided_bandwidth()}
    result["rmsnorm"] = bench_rms(cp, torch, timer, fused, result["copy"]["tb_per_s"], rms_shapes)
    result["attention"] = bench_attention(cp, torch, timer, flash, attention_shapes)
    step1_shapes = [s for s in attention_shapes if s[1] <= 4096]
    result["attention_step1"] = bench_attention(cp, None, timer, flash_step1, step1_shapes, with_naive=False)
    result["goals"] = goals(result["rmsnorm"], result["attention"])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(table(result))
    print(f"\nwritten {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
