"""Decode attention over a paged KV cache on the GPU: lesson 11's reference kernel beside the baselines.

    python benchmarks/decode_kernels.py [--quick] [--out benchmarks/results/decode_kernels_h200.json]

Measured side by side in one run, CUDA events, median of rounds after warm-up; Qwen3-0.6B heads (Hq=16,
Hkv=8, d=128), page size 16, a shuffled page pool, every sequence of the batch the same length:

* ``kernel``: ``paged_decode_gpu`` of the lesson's solution notebook (split kernel + combine kernel), fp32 cache,
  ``num_splits=None`` (its own choice);
* ``gather_sdpa``: what a user writes today — gather the pages into a contiguous cache, then torch
  ``scaled_dot_product_attention(..., enable_gqa=True)``; fp32 and bf16;
* ``sdpa_contiguous``: SDPA on an already contiguous cache (no gather); fp32 and bf16;
* a sweep of ``num_splits`` at batch 1 (why split-KV exists), per call and as a CUDA graph;
* ``graph``: the kernel's call captured once as a CUDA graph and replayed (as serving engines run decode steps):
  the GPU's own time, without the host's per-call cost (CuPy packing the arguments, the launches, allocations),
  which bounds back-to-back calls of small sizes;
* ``vs copy``: a copy moving the same bytes through DRAM (KV / 2 read, KV / 2 written), as a graph, over the
  kernel's graph time (the faster of the copy's per-call and graph times): the share of what a copy itself reaches
  at that size (its own ramp and tail).

Bandwidth is "effective": the K and V bytes the lengths require divided by the time; its ceiling is the
device-to-device copy bandwidth measured in the same run (bytes read + written per second).  The byte
floor of a baseline is KV bytes / copy bandwidth.  Prints a table and writes JSON with the device, date,
versions and command.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import sys
from pathlib import Path

import numpy as np

try:  # torch before CuPy and the grader: imported after them, torch 2.11 failed to start here (2026-12-01)
    import torch
    import torch.nn.functional as F
    TORCH_ERROR = None
except Exception as error:  # the baselines are left out, and the JSON says why
    torch, TORCH_ERROR = None, f"{type(error).__name__}: {error}"
import cupy as cp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from autograder.gpu.runtime import time_ms  # noqa: E402 - after torch and CuPy (above); CUDA events, median of rounds

LESSON = "11_flash_decoding"
HQ, HKV, D, PAGE = 16, 8, 128, 16
#: num_splits of the batch-1 sweep: powers of two, and the counts whose HKV * splits blocks spread evenly over the H200's
#: 132 SMs (33: two blocks per SM, 66: four, one full wave at the kernel's four blocks per SM; 99, 132: 1.5 and 2 waves).
SWEEP_SPLITS = (1, 2, 4, 8, 16, 32, 33, 64, 66, 99, 128, 132, 256)


def lesson_namespace(source: Path | None) -> dict:
    """The reference answers of the lesson (kernel and wrapper), read from the solution notebook as JSON."""
    ns = {"np": np, "cp": cp, "math": math, "__name__": "decode_bench"}
    if source is not None:
        ns["__file__"] = str(source.resolve())
        exec(compile(source.read_text(encoding="utf-8"), str(source), "exec"), ns)
        return ns
    nb = json.loads((ROOT / "solutions" / LESSON / f"{LESSON}.ipynb").read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade_id") in ("decode_source", "paged_decode_gpu"):
            exec("".join(cell["source"]), ns)
    return ns




def graph_ms(fn, *args) -> float | str:
    """The time of one call replayed as a CUDA graph (what a serving engine does for decode steps): the GPU's
    time with the host's per-call cost (argument packing, launches, allocations) taken out.  A string says why
    the call could not be captured."""
    fn(*args)  # compiled, and the memory pool holds the call's blocks
    cp.cuda.Device().synchronize()
    stream = cp.cuda.Stream(non_blocking=True)
    try:
        with stream:
            stream.begin_capture()
            try:
                fn(*args)
            finally:
                graph = stream.end_capture()
            return time_ms(lambda: graph.launch(stream), repeat=20)
    except Exception as error:  # noqa: BLE001 - reported in the table and the JSON
        return f"{type(error).__name__}: {error}"[:200]


def copy_bandwidth(nbytes: int = 2**31) -> float:
    src = cp.ones(nbytes // 4, dtype=cp.float32)
    dst = cp.empty_like(src)
    ms = time_ms(lambda: dst.__setitem__(Ellipsis, src), repeat=5, rounds=5)
    return 2 * nbytes / (ms * 1e-3)


def same_traffic_copy(kv_bytes: int) -> dict:
    """A device-to-device copy that moves as many bytes through DRAM as the kernel reads (``kv_bytes / 2`` read and
    as many written), per call and as a CUDA graph: at a few tens of MB a copy pays the same ramp and tail as the
    kernel, so this is the ceiling at that size, beside the large copy's bandwidth."""
    src = cp.ones(kv_bytes // 8, dtype=cp.float32)
    dst = cp.empty_like(src)
    out = {"copy_same_traffic_ms": time_ms(lambda: dst.__setitem__(Ellipsis, src)),
           "copy_same_traffic_graph_ms": graph_ms(lambda d, s: d.__setitem__(Ellipsis, s), dst, src)}
    del src, dst
    return out


def same_traffic_copy_ms(row: dict) -> float:
    """The faster of the copy's two times: captured in a graph, a copy of a GB or more ran about 1.5x slower than
    launched by CuPy on the H200 (2026-12-05), and below 600 MB both agreed within a few percent."""
    return min(t for t in (row["copy_same_traffic_ms"], row["copy_same_traffic_graph_ms"]) if isinstance(t, float))


def make_cache(B: int, L: int, seed: int = 0):
    """A shuffled pool of exactly the pages the batch needs, built on the device."""
    rng = cp.random.default_rng(seed)
    n_pages = -(-L // PAGE)
    P = B * n_pages
    k = rng.standard_normal((P, PAGE, HKV, D), dtype=cp.float32)
    v = rng.standard_normal((P, PAGE, HKV, D), dtype=cp.float32)
    table = cp.asarray(np.random.default_rng(seed).permutation(P).astype(np.int32).reshape(B, n_pages))
    q = rng.standard_normal((B, HQ, D), dtype=cp.float32)
    return q, k, v, table, cp.full(B, L, dtype=cp.int32)


def torch_baselines(q, k, v, table, L: int, dtype_name: str) -> dict:
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    tq = torch.as_tensor(q, device="cuda").to(dtype)[:, :, None]              # (B, Hq, 1, d)
    tk = torch.as_tensor(k, device="cuda").to(dtype)                          # (P, page, Hkv, d)
    tv = torch.as_tensor(v, device="cuda").to(dtype)
    tt = torch.as_tensor(table, device="cuda").long()
    B = tt.shape[0]

    def gather(pages):
        return pages[tt].reshape(B, -1, HKV, D)[:, :L].transpose(1, 2)        # (B, Hkv, L, d), contiguous copy

    def gather_sdpa():
        return F.scaled_dot_product_attention(tq, gather(tk), gather(tv), enable_gqa=True)

    ck, cv = gather(tk).contiguous(), gather(tv).contiguous()

    def contiguous():
        return F.scaled_dot_product_attention(tq, ck, cv, enable_gqa=True)

    out = {"gather_sdpa_ms": time_ms(gather_sdpa, repeat=3, rounds=3, warmup=1),
           "sdpa_contiguous_ms": time_ms(contiguous, repeat=5, rounds=3, warmup=1)}
    del ck, cv, tk, tv
    torch.cuda.empty_cache()
    return out


def check_correctness(ns: dict) -> list[str]:
    """The kernel against the grader's float64 oracle on the lesson's hard cases (stale NaN pages included)."""
    from autograder.lessons.lesson11.checks import GPU_SPLITS, GPU_VISIBLE, make_case, oracle

    lines = []
    keys = ("B", "Hq", "Hkv", "d", "page_size", "lengths", "seed", "shared", "q_scale", "keys_away", "stale_nan")
    for c in list(GPU_VISIBLE) + list(GPU_SPLITS):
        inputs = make_case(**{k: c[k] for k in keys if k in c})
        for s in c.get("num_splits", [None, 1, 3, 50]):
            got = cp.asnumpy(ns["paged_decode_gpu"](*(cp.asarray(a) for a in inputs), num_splits=s))
            err = float(np.max(np.abs(got - oracle(*inputs, s or 1))))
            lines.append(f"lengths={c['lengths']} G={c['Hq'] // c['Hkv']} d={c['d']} page={c['page_size']} "
                         f"splits={s}: max error {err:.2e}{'' if np.isfinite(err) and err < 2e-3 else '  WRONG'}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes (a smoke run)")
    parser.add_argument("--source", type=Path, help="a Python file defining DECODE_SRC and paged_decode_gpu "
                                                    "(default: the lesson's solution notebook)")
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--skip", default="", help="B x L configurations left out, comma-separated")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "decode_kernels_h200.json")
    args = parser.parse_args()

    ns = lesson_namespace(args.source)
    fn = ns["paged_decode_gpu"]
    props = cp.cuda.runtime.getDeviceProperties(0)
    device = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    sms = props["multiProcessorCount"]

    for line in check_correctness(ns):
        print(line, flush=True)
    copy = copy_bandwidth()
    print(f"{device}, {sms} SMs; copy bandwidth {copy / 1e9:.0f} GB/s", flush=True)

    batches = (1, 8, 64)
    lengths = (1024, 4096, 8192, 32768)
    if args.quick:
        batches, lengths = (1, 8), (4096, 32768)
    rows = []
    header = (f"{'B':>3} {'L':>6} {'KV MB':>8} {'splits':>6} {'ms':>8} {'GB/s':>6} {'share':>6} {'graph':>6} {'vs copy':>7} "
              f"{'g+sdpa32':>9} {'x floor':>7} {'sdpa32%':>7} {'g+sdpa16':>9} {'x floor':>7} {'sdpa16%':>7} {'speedup':>7}")
    print(header, flush=True)
    skip = {tuple(int(x) for x in item.split("x")) for item in args.skip.split(",") if item}
    use_torch = not args.no_torch and torch is not None
    if not use_torch:
        print(f"no torch baselines: {TORCH_ERROR or '--no-torch'}")
    for B in batches:
        for L in lengths:
            if (B, L) in skip:
                continue
            kv = 2 * B * L * HKV * D * 4
            need = kv * (3 if use_torch else 1) + 2**28   # the cache, torch's gathered fp32 and bf16 copies, slack
            free = cp.cuda.runtime.memGetInfo()[0]
            if need > free:   # e.g. B=64 L=32768 (17 GB of fp32 cache) on a 16 GB T4
                print(f"B={B} L={L}: needs about {need / 1e9:.0f} GB, {free / 1e9:.0f} GB free: left out", flush=True)
                skip.add((B, L))
                continue
            q, k, v, table, lens = make_cache(B, L)
            ms = time_ms(lambda: fn(q, k, v, table, lens))
            row = {"B": B, "L": L, "kv_bytes": kv, "num_splits": ns["choose_splits"](B, HKV, table.shape[1]),
                   "kernel_ms": ms, "kernel_share": kv / (ms * 1e-3) / copy}
            graphed = graph_ms(fn, q, k, v, table, lens)
            row["graph_ms"] = graphed
            if isinstance(graphed, float):
                row["graph_share"] = kv / (graphed * 1e-3) / copy
            row.update(same_traffic_copy(kv))
            if isinstance(graphed, float):
                row["graph_vs_same_traffic_copy"] = same_traffic_copy_ms(row) / graphed
            if use_torch:
                for dt in ("fp32", "bf16"):
                    base = torch_baselines(q, k, v, table, L, dt)
                    kv_dt = kv // (1 if dt == "fp32" else 2)
                    floor_ms = kv_dt / copy * 1e3
                    row[f"gather_sdpa_{dt}_ms"] = base["gather_sdpa_ms"]
                    row[f"gather_sdpa_{dt}_x_floor"] = base["gather_sdpa_ms"] / floor_ms
                    row[f"sdpa_contiguous_{dt}_ms"] = base["sdpa_contiguous_ms"]
                    row[f"sdpa_contiguous_{dt}_share"] = floor_ms / base["sdpa_contiguous_ms"]
                row["speedup_vs_gather_sdpa_fp32"] = row["gather_sdpa_fp32_ms"] / ms
            rows.append(row)
            graph_cell = f"{100 * row['graph_share']:.0f}%" if "graph_share" in row else "n/a"
            vs_copy = row.get("graph_vs_same_traffic_copy")
            vs_copy_cell = f"{100 * vs_copy:.0f}%" if vs_copy is not None else "n/a"
            print(f"{B:>3} {L:>6} {kv / 1e6:>8.0f} {row['num_splits']:>6} {ms:>8.3f} {kv / ms / 1e6:>6.0f} "
                  f"{100 * row['kernel_share']:>5.0f}% "
                  f"{graph_cell:>6} {vs_copy_cell:>7} "
                  + ("" if not use_torch else
                     f"{row['gather_sdpa_fp32_ms']:>9.3f} {row['gather_sdpa_fp32_x_floor']:>7.1f} "
                     f"{100 * row['sdpa_contiguous_fp32_share']:>6.0f}% {row['gather_sdpa_bf16_ms']:>9.3f} "
                     f"{row['gather_sdpa_bf16_x_floor']:>7.1f} {100 * row['sdpa_contiguous_bf16_share']:>6.0f}% "
                     f"{row['speedup_vs_gather_sdpa_fp32']:>6.1f}x"), flush=True)
            del q, k, v, table, lens
            cp.get_default_memory_pool().free_all_blocks()
            if torch is not None:
                torch.cuda.empty_cache()

    sweep = []
    for L in ((32768,) if args.quick else (8192, 32768)):
        q, k, v, table, lens = make_cache(1, L)
        kv = 2 * L * HKV * D * 4
        for s in SWEEP_SPLITS:
            ms = time_ms(lambda: fn(q, k, v, table, lens, num_splits=s))
            graphed = graph_ms(lambda *a: fn(*a, num_splits=s), q, k, v, table, lens)
            sweep.append({"B": 1, "L": L, "num_splits": s, "blocks": s * HKV, "ms": ms,
                          "share": kv / (ms * 1e-3) / copy, "graph_ms": graphed})
            graph_cell = "n/a"
            if isinstance(graphed, float):
                sweep[-1]["graph_share"] = kv / (graphed * 1e-3) / copy
                graph_cell = f"{graphed:.3f} ms, {100 * sweep[-1]['graph_share']:.0f} %"
            print(f"B=1 L={L} num_splits={s:>3} blocks={s * HKV:>5}: {ms:.3f} ms, {100 * sweep[-1]['share']:.0f} % of copy; "
                  f"as a graph {graph_cell}", flush=True)
        del q, k, v, table, lens
        cp.get_default_memory_pool().free_all_blocks()

    versions = {"python": platform.python_version(), "numpy": np.__version__, "cupy": cp.__version__}
    if torch is not None:
        versions["torch"] = torch.__version__
    result = {"device": device, "sm_count": sms, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "command": "python " + " ".join(["benchmarks/decode_kernels.py", *sys.argv[1:]]), "versions": versions,
              "heads": {"Hq": HQ, "Hkv": HKV, "d": D, "page_size": PAGE}, "copy_bandwidth_Bps": copy,
              "rows": rows, "splits_sweep": sweep, "left_out": sorted(f"B={b} L={l}" for b, l in skip),
              "torch_error": TORCH_ERROR}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
