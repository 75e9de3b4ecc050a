"""Lesson 09 FlashAttention-on-tensor-cores variants vs the lesson's kernel and SDPA f16 (issue 15 experiment).

    python benchmarks/tc_variants.py --compile        # NVRTC sm_75/80/90: registers, spills (no GPU)
    python benchmarks/tc_variants.py [--only a,b] [--out f.json]   # check vs SDPA f16 and time, 8 shapes, H=16
    python benchmarks/tc_variants.py --show benchmarks/results/tc_variants_h200.json   # the stored runs' tables

Variants are instances of benchmarks/tc_variants.cu (self-contained; "lesson" is the lesson's FLASH_TC_SRC as it is now):
MT m16 tiles per warp (rows per warp 16*MT), NW warps, BC keys per K/V tile, Q fragments in registers or not,
minimum blocks per SM for __launch_bounds__.
"""
from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHAPES = [(16, n, d, c) for n in (4096, 16384) for d in (64, 128) for c in (False, True)]
# name: (MT, NW, BC at d=64, BC at d=128, QREG at d=64, QREG at d=128, min blocks d64, min blocks d128, STAGES)
# STAGES 0: the lesson's pipeline (one K and one V buffer, four barriers per tile);
# STAGES >= 2: STAGES buffers of K and V, loads of tile j + STAGES - 1 issued at the top of tile j, one barrier per tile.
VARIANTS = {
    # run 1 (the lesson's pipeline, STAGES 0)
    "mt2_bc64_32": (2, 4, 64, 32, False, False, 1, 1, 0),
    "mt2_bc32_32": (2, 4, 32, 32, False, False, 1, 1, 0),
    "mt2_qreg_bc64_32": (2, 4, 64, 32, True, False, 1, 1, 0),
    "mt2_bc64_32_mb3": (2, 4, 64, 32, False, False, 3, 1, 0),
    "mt2_nw2_bc64_32": (2, 2, 64, 32, False, False, 1, 1, 0),
    "mt2_nw8_bc64_32": (2, 8, 64, 32, False, False, 1, 1, 0),
    # run 2
    "mt2_bc64_64": (2, 4, 64, 64, False, False, 1, 1, 0),
    "p2_qreg_bc64_32": (2, 4, 64, 32, True, False, 1, 1, 2),
    "p3_qreg_bc64_32": (2, 4, 64, 32, True, False, 1, 1, 3),
    "p2_bc64_64": (2, 4, 64, 64, False, False, 1, 1, 2),
    "p2_mt1_bc64_64": (1, 4, 64, 64, False, False, 1, 1, 2),
    "p2_mt1_bc64_32": (1, 4, 64, 32, False, False, 1, 1, 2),
    "p2_nw8_qreg_bc64_32": (2, 8, 64, 32, True, False, 1, 1, 2),
}
# session 21, flash_s (FMA-folded scale, cvt.rn.f16x2; the rest chosen by FLAGS, see tc_variants.cu):
# name: (MT, NW, BC d64, BC d128, STAGES d64, STAGES d128, min blocks d64, min blocks d128, FLAGS); STAGES 1 = the
# lesson's old pipeline; FLAGS 1 swizzled shared memory (else padded rows), 2 masked/unmasked softmax compiled apart,
# 4 conditional O rescale, 8 P V m16-outer, 16 S m16-outer, 32 four-chain max/sum, 64 one edge branch for both m16
# tiles, 128 division-free tile loads. s2_pad_tree_outer_fast became the lesson's kernel.
FLASH_S_VARIANTS = {
    "s1_bc64": (2, 4, 64, 64, 1, 1, 2, 2, 3),
    "s2_bc64": (2, 4, 64, 64, 2, 2, 2, 2, 3),
    "s2_bc64_d128s1": (2, 4, 64, 64, 2, 1, 2, 2, 3),
    "s1_bc64_mb1": (2, 4, 64, 64, 1, 1, 1, 1, 3),
    "s2_bc32_128": (2, 4, 64, 32, 2, 2, 2, 2, 3),
    "s3_bc64_d64": (2, 4, 64, 64, 3, 2, 2, 2, 3),
    # run 4
    "s2_pad_split": (2, 4, 64, 64, 2, 2, 2, 2, 2),
    "s2_swz_pred": (2, 4, 64, 64, 2, 2, 2, 2, 1),
    "s2_pad_pred": (2, 4, 64, 64, 2, 2, 2, 2, 0),
    "s2_swz_split_crs": (2, 4, 64, 64, 2, 2, 2, 2, 7),
    "s2_pad_pred_crs": (2, 4, 64, 64, 2, 2, 2, 2, 4),
    "s2_pad_pred_pvmt": (2, 4, 64, 64, 2, 2, 2, 2, 8),
    "s2_pad_pred_smt": (2, 4, 64, 64, 2, 2, 2, 2, 16),
    "s2_pad_pred_mb3": (2, 4, 64, 64, 2, 2, 3, 2, 0),
    # run 5
    "s2_pad_split_tree": (2, 4, 64, 64, 2, 2, 2, 2, 2 | 32),
    "s2_pad_tree_outer": (2, 4, 64, 64, 2, 2, 2, 2, 2 | 32 | 64),
    "s2_pad_tree_outer_fast": (2, 4, 64, 64, 2, 2, 2, 2, 2 | 32 | 64 | 128),
    "s2_pad_split_fast": (2, 4, 64, 64, 2, 2, 2, 2, 2 | 128),
    "s2_pad_outer": (2, 4, 64, 64, 2, 2, 2, 2, 2 | 64),
    "s1_pad_tree_outer_fast": (2, 4, 64, 64, 1, 1, 2, 2, 2 | 32 | 64 | 128),
    "s2_swz_tree_outer_fast": (2, 4, 64, 64, 2, 2, 2, 2, 1 | 2 | 32 | 64 | 128),
    "s1_swz_tree_outer_fast": (2, 4, 64, 64, 1, 1, 2, 2, 1 | 2 | 32 | 64 | 128),
}
T4_SHARED = 64 * 1024  # the most dynamic shared memory a block may have on sm_75


def shared_bytes(br: int, bc: int, d: int, stages: int, pad: int = 8) -> int:
    return (br + 2 * max(stages, 1) * bc) * (d + pad) * 2


def lesson_source() -> str:
    text = (ROOT / "lessons" / "09_tensor_cores.py").read_text(encoding="utf-8")
    return re.search(r'FLASH_TC_SRC = r"""(.*?)"""', text, re.S).group(1)


def variant_source() -> tuple[str, dict]:
    """One source with every variant's kernels; returns it and {(variant, d): (kernel name, BR, BC)}."""
    body = (ROOT / "benchmarks" / "tc_variants.cu").read_text(encoding="utf-8")
    names = {}
    for v, (mt, nw, bc64, bc128, q64, q128, mb64, mb128, stages) in VARIANTS.items():
        for d, bc, q, mb in ((64, bc64, q64, mb64), (128, bc128, q128, mb128)):
            name = f"v_{v}_d{d}"
            body += (f'\nextern "C" __global__ void __launch_bounds__({32 * nw}, {mb})\n{name}(const f16* Q, const f16* K, '
                     f"const f16* V, f16* O, int n, float scale, int causal, int* tile_counter)\n"
                     f"{{ flash_{'p' if stages else 'v'}<{d}, {nw}, {mt}, {bc}, {'true' if q else 'false'}"
                     f"{f', {stages}' if stages else ''}>(Q, K, V, O, n, scale, causal, tile_counter); }}\n")
            names[(v, d)] = (name, 16 * mt * nw, bc, 32 * nw, stages, 8)
    for v, (mt, nw, bc64, bc128, st64, st128, mb64, mb128, flags) in FLASH_S_VARIANTS.items():
        for d, bc, st, mb in ((64, bc64, st64, mb64), (128, bc128, st128, mb128)):
            name = f"v_{v}_d{d}"
            body += (f'\nextern "C" __global__ void __launch_bounds__({32 * nw}, {mb})\n{name}(const f16* Q, const f16* K, '
                     f"const f16* V, f16* O, int n, float scale, int causal, int* tile_counter)\n"
                     f"{{ flash_s<{d}, {nw}, {mt}, {bc}, {st}, {flags}>(Q, K, V, O, n, scale, causal, tile_counter); }}\n")
            names[(v, d)] = (name, 16 * mt * nw, bc, 32 * nw, st, 0 if flags & 1 else 8)
    return body, names


def measure_shapes(cp, torch, timer, lesson, launchers: dict) -> list[dict]:
    """The eight SHAPES, H = 16: SDPA f16, the lesson's kernel and each candidate (``launchers[name](d)`` gives a
    ``run(q, k, v, causal)``), each checked against SDPA's output and timed in the same run; one row per shape."""
    rows = []
    for H, n, d, causal in SHAPES:
        q, k, v = (cp.random.standard_normal((H, n, d), dtype=cp.float32).astype(cp.float16) for _ in range(3))
        flops = 4.0 * H * n * n * d / (2 if causal else 1)
        reps = {"repeat": 5 if n >= 16384 else 10, "rounds": 5, "warmup": 3}
        tq, tk, tv = (torch.as_tensor(a, device="cuda")[None] for a in (q, k, v))
        sdpa = lambda: torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)  # noqa: E731
        ref = cp.asarray(sdpa()[0]).astype(cp.float32)
        row = {"H": H, "n": n, "d": d, "causal": causal, "sdpa_f16_ms": timer(sdpa, **reps)}
        cands = {"lesson": lambda: lesson(q, k, v, causal=causal)}
        for name, make in launchers.items():
            run = make(d)
            cands[name] = (lambda run=run: run(q, k, v, causal))
        for name, fn in cands.items():
            try:
                err = float(cp.max(cp.abs(fn().astype(cp.float32) - ref)))
                ms = timer(fn, **reps)
                row[name] = {"ms": ms, "tflops": flops / ms / 1e9, "x_sdpa": row["sdpa_f16_ms"] / ms, "err": err}
            except Exception as e:  # noqa: BLE001 - one candidate failing leaves the others' figures
                row[name] = {"error": repr(e)[:200]}
        row["sdpa_f16_tflops"] = flops / row["sdpa_f16_ms"] / 1e9
        rows.append(row)
        print(f"done n={n} d={d} causal={causal}", flush=True)
        del q, k, v, tq, tk, tv, ref
        cp.get_default_memory_pool().free_all_blocks()
    return rows


def compile_report() -> int:
    sys.path.insert(0, str(ROOT))
    from autograder.gpu.nvrtc import compile_source
    body, names = variant_source()
    kernels = {name: (br, bc, d, st, pad) for (v, d), (name, br, bc, nt, st, pad) in names.items()}
    kernels.update({f"flash_attention_tc_d{d}": (128, 64, d, 2) for d in (64, 128)})
    for arch in ("sm_75", "sm_80", "sm_90"):
        for label, src in (("lesson", lesson_source()), ("variants", body)):
            r = compile_source(src, arch=arch)
            if not r.ok:
                print(arch, label, "FAILED\n", r.log[:3000])
                return 1
            for k, res in sorted(r.resources.items()):
                smem = shared_bytes(*kernels[k]) if k in kernels else 0
                print(f"{arch} {k:<32} regs {res.registers:4d} spill st/ld {res.spill_stores:3d}/{res.spill_loads:3d}  "
                      f"shared {smem / 1024:5.1f} KiB{'' if smem <= T4_SHARED else '  (over the T4 limit)'}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--only", default=None, help="comma-separated variant names")
    ap.add_argument("--show", default=None, help="print the table of a stored JSON (its runs) and exit")
    args = ap.parse_args(argv)
    if args.compile:
        return compile_report()
    if args.show:
        stored = json.loads(Path(args.show).read_text())
        print("\n\n".join(table(run) for run in stored.get("runs", [stored])))
        return 0
    import math
    import numpy as np
    import torch  # before CuPy
    import cupy as cp
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_kernels import Timer, load_answers
    timer = Timer(cp, torch)
    lesson = load_answers("09_tensor_cores", {"cp": cp, "np": np, "math": math})["flash_attention_tc_gpu"]
    body, names = variant_source()
    module = cp.RawModule(code=body, options=("-std=c++17",))
    chosen = [v for v in [*VARIANTS, *FLASH_S_VARIANTS] if args.only is None or v in args.only.split(",")]

    def launcher(v, d):
        name, br, bc, nt, stages, pad = names[(v, d)]
        shared = shared_bytes(br, bc, d, stages, pad)
        kernel = module.get_function(name)
        kernel.max_dynamic_shared_size_bytes = shared

        def run(q, k, v_, causal, counter=None):
            H, n, _ = q.shape
            o = cp.empty_like(q)
            kernel((H, (n + br - 1) // br), (nt,), (q, k, v_, o, np.int32(n), np.float32(1 / math.sqrt(d)),
                   np.int32(causal), counter if counter is not None else cp.zeros(1, cp.int32)), shared_mem=shared)
            return o
        return run

    rows = measure_shapes(cp, torch, timer, lesson, {name: (lambda d, name=name: launcher(name, d)) for name in chosen})
    result = {"command": "python benchmarks/tc_variants.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "torch": torch.__version__,
              "cupy": cp.__version__, "variants": {v: {**VARIANTS, **FLASH_S_VARIANTS}[v] for v in chosen}, "rows": rows}
    print(table(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


def median_rows(runs: list[list[dict]]) -> list[dict]:
    """The rows of several runs of :func:`measure_shapes` (same shapes, same kernels) as one: per shape the median
    time of SDPA f16 and of each kernel, and each kernel's median ratio to SDPA (ratios are taken within a run, so
    a run where the GPU was slower for both moves neither); the largest error of any run."""
    import statistics

    merged = []
    for shape_rows in zip(*runs):
        first = shape_rows[0]
        flops = 4.0 * first["H"] * first["n"] ** 2 * first["d"] / (2 if first["causal"] else 1)
        row = {key: first[key] for key in ("H", "n", "d", "causal")}
        row["sdpa_f16_ms"] = statistics.median(r["sdpa_f16_ms"] for r in shape_rows)
        row["sdpa_f16_tflops"] = flops / row["sdpa_f16_ms"] / 1e9
        kernels = [k for k, v in first.items() if isinstance(v, dict)]
        for name in kernels:
            timed = [r[name] for r in shape_rows if "ms" in r.get(name, {})]
            if len(timed) < len(shape_rows):
                row[name] = {"error": f"timed in {len(timed)} of {len(shape_rows)} runs"}
                continue
            ms = statistics.median(c["ms"] for c in timed)
            row[name] = {"ms": ms, "tflops": flops / ms / 1e9, "x_sdpa": statistics.median(c["x_sdpa"] for c in timed),
                         "err": max(c["err"] for c in timed)}
        merged.append(row)
    return merged


def table(result: dict) -> str:
    """TFLOP/s and the ratio to SDPA f16 per shape (columns) for each kernel (rows); min ratio, causal speedup."""
    rows = result["rows"]
    names = ["lesson"] + list(result["variants"])
    shape = lambda r: f"{r['n'] // 1024}k/{r['d']}/{'c' if r['causal'] else 'f'}"  # noqa: E731
    lines = [f"{result['device']}  {result['date']}  torch {result['torch']}  CuPy {result['cupy']}",
             "TFLOP/s (ratio to SDPA f16); columns n/d/full-or-causal, H = 16", "",
             f"{'kernel':<22}" + "".join(f"{shape(r):>14}" for r in rows) + f"{'min x':>7}{'causal sp. 16k d64/d128':>25}",
             f"{'SDPA f16':<22}" + "".join(f"{r['sdpa_f16_tflops']:>14.1f}" for r in rows)]
    for name in names:
        cells, ratios = "", []
        for r in rows:
            c = r.get(name, {})
            if "ms" in c:
                cells += f"{c['tflops']:>7.1f} ({c['x_sdpa']:.2f})"
                ratios.append(c["x_sdpa"])
            else:
                cells += f"{'error':>14}"
        speedup = []
        for d in (64, 128):
            pair = {r["causal"]: r.get(name, {}).get("ms") for r in rows if r["n"] == 16384 and r["d"] == d}
            if len(pair) == 2 and None not in pair.values():
                speedup.append(f"{pair[False] / pair[True]:.2f}")
        errors = max((r[name]["err"] for r in rows if "err" in r.get(name, {})), default=float("nan"))
        lines.append(f"{name:<22}{cells}{min(ratios, default=float('nan')):>7.2f}{'/'.join(speedup):>25}"
                     f"   max|err| vs SDPA {errors:.0e}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
