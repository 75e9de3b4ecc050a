"""Speed of the PTX emulator (autograder.gpu.emulator) on the graded cases of lessons 06, 07, 08, 09 and 11.

    python benchmarks/emulator_speed.py [--arch compute_75] [--repeat 1] [--lessons 06,07,08,09,11] [--sm-count 132]

Every case of the lessons' checks (06: equivalence, tails, memory, sanitizer; 07: visible and tails; 08 steps 1
and 2: equivalence, tails, causal, large logits; 11: the GPU checks' equivalence and num_splits cases) is launched
as the reference wrapper of the solution notebook launches it (grid, block, arguments), with the checks' own
inputs.  Prints a table: kernel, case, instruction issues (steps of the emulator: one per executed group of
lanes), seconds (best of ``--repeat``, PTX made beforehand; wall clock and this process's CPU time), issues per
second (by CPU time), and whether the result is within the lesson's tolerance; the last line sums them up.
Lesson 08 step 1 is the reference ``FLASH_SRC`` (one thread per query row), step 2 ``FLASH_FAST_SRC`` (cp.async
only at ``--arch compute_80`` and above).  Lesson 11 is ``paged_decode_split`` then, when it splits,
``paged_decode_combine`` (one row: both launches); ``num_splits=None`` is the wrapper's ``choose_splits`` for a
GPU of ``--sm-count`` SMs.  Lesson 09 (:func:`cases09`) is ``MMA_SRC`` (mma.sync m16n8k8) on the matmul cases and
``FLASH_TC_SRC`` (mma.sync, ldmatrix, cp.async at compute_80) on the attention cases.  Lessons 08 and 11 are not yet graded on the emulator: measured to see how far the 2 s
goal is.  No GPU needed.  The machine is shared (2 cores, other jobs): wall-clock figures are ±50 % or worse, CPU
time is steadier; check ``uptime`` first.
"""
from __future__ import annotations

import argparse
import gc
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autograder.checks import reference as oracle  # noqa: E402
from autograder.course import grading  # noqa: E402
from autograder.gpu import nvrtc  # noqa: E402
from autograder.gpu.emulator import launch  # noqa: E402
from autograder.lessons.lesson06 import checks as l06  # noqa: E402
from autograder.lessons.lesson07 import checks as l07  # noqa: E402


def source(lesson: str, answer: str, name: str) -> str:
    ns: dict = {}
    exec(grading.reference_answers(lesson)[answer], ns)
    return ns[name]


def cases06():
    for kind in ("VISIBLE", "MEMORY_CASES", "SANITIZER_CASES"):
        table = getattr(l06, kind)
        for c in table["scale_add"]:
            a, x, y = l06._vectors(c["n"], c["seed"])
            n = c["n"]
            out = np.empty(n, np.float32)
            yield ("scale_add", f"n={n}", ("06_cuda_basics", "scale_add_source", "SCALE_ADD_SRC"), "scale_add",
                   (n + 255) // 256, 256, [np.float32(a), x, y, out, np.int32(n)],
                   lambda out=out, a=a, x=x, y=y: np.all(np.abs(out - l06._scale_add_oracle(a, x, y)) <= 1e-5 + 1e-5 * np.abs(l06._scale_add_oracle(a, x, y))))
        for c in table["row_sums"]:
            T, D = c["T"], c["D"]
            x = l06._rows(T, D, c["seed"])
            out = np.empty(T, np.float32)
            yield ("row_sums", f"T={T}, D={D}", ("06_cuda_basics", "row_sums_source", "ROW_SUMS_SRC"), "row_sums",
                   T, 256, [x, out, np.int32(T), np.int32(D)],
                   lambda out=out, x=x, D=D: np.all(np.abs(out - l06._row_sums_oracle(x)) <= l06._row_tolerance(D) + 1e-5 * np.abs(l06._row_sums_oracle(x))))
        for c in table["matmul"]:
            M, K, N = c["M"], c["K"], c["N"]
            A, B = l06._matrices(M, K, N, c["seed"])
            C = np.empty((M, N), np.float32)
            yield ("matmul_tiled", f"M={M}, K={K}, N={N}", ("06_cuda_basics", "matmul_source", "MATMUL_SRC"),
                   "matmul_tiled", ((N + 15) // 16, (M + 15) // 16), (16, 16),
                   [A, B, C, np.int32(M), np.int32(N), np.int32(K)],
                   lambda C=C, A=A, B=B, K=K: np.all(np.abs(C - l06._matmul_oracle(A, B)) <= 1e-5 + 2e-7 * K + 1e-5 * np.abs(l06._matmul_oracle(A, B))))


def cases07():
    table = list(l07.VISIBLE) + list(l07.TAILS) + [{"T": 64, "D": 2048, "seed": 6}, {"T": 4096, "D": 1024, "seed": 7},
                                                   {"T": 3, "D": 1000, "seed": 8}]
    for c in table:
        T, D = c["T"], c["D"]
        x, w = l07._inputs(T, D, c["seed"], c.get("scale", 1.0))
        eps = c.get("eps", 1e-6)
        y = np.empty_like(x)
        if D <= 1024:
            grid, block = ((T + 7) // 8,), (32, 8)
        else:
            grid, block = (T,), (min(1024, 32 * math.ceil(D / (32 * 32))),)
        yield ("rms_norm", f"T={T}, D={D}", ("07_cupy_rmsnorm", "rmsnorm_source", "RMSNORM_SRC"), "rms_norm", grid,
               block, [x, w, y, np.int32(T), np.int32(D), np.float32(eps)],
               lambda y=y, x=x, w=w, eps=eps: np.all(np.abs(y - oracle.rms_norm(x, w, eps)) <= 1e-5 + 1e-5 * np.abs(oracle.rms_norm(x, w, eps))))


def cases08():
    from autograder.lessons.lesson08 import checks as l08

    table = [(c, False) for c in l08.VISIBLE] + [(c, c.get("causal", False)) for c in l08.TAILS] + \
        [(c, True) for c in l08.CAUSAL] + [(c, c.get("causal", False)) for c in l08.LARGE]
    for c, causal in table:
        H, n, d = c["H"], c["n"], c["d"]
        q, k, v = l08._inputs(H, n, d, c["seed"], c.get("q_scale", 1.0))
        o = np.empty_like(q)
        tol = l08.LARGE_TOLERANCE if c.get("q_scale") else 1e-5
        label = f"H={H}, n={n}, d={d}{', causal' if causal else ''}{', q×100' if c.get('q_scale') else ''}"
        yield ("flash (08.1)", label,
               ("08_cupy_flash_attention", "flash_source", "FLASH_SRC"), f"flash_attention_d{d}", ((n + 63) // 64, H),
               64, [q, k, v, o, np.int32(n), np.float32(1 / math.sqrt(d)), np.int32(causal), np.zeros(1, np.int32)],
               lambda o=o, q=q, k=k, v=v, causal=causal, tol=tol: np.all(
                   np.abs(o - l08.oracle(q, k, v, causal)) <= tol + tol * np.abs(l08.oracle(q, k, v, causal))))
        o2 = np.empty_like(q)
        shared = 4 * (64 * (d + 4) + 32 * (d + 4) + 32 * d + 32 * (64 + 4))
        yield ("flash (08.2)", label,
               ("08_cupy_flash_attention", "flash_fast_source", "FLASH_FAST_SRC"), f"flash_attention_d{d}",
               ((n + 63) // 64, H), 128,
               [q, k, v, o2, np.int32(n), np.float32(1 / math.sqrt(d)), np.int32(causal), np.zeros(1, np.int32)],
               lambda o=o2, q=q, k=k, v=v, causal=causal, tol=tol: np.all(
                   np.abs(o - l08.oracle(q, k, v, causal)) <= tol + tol * np.abs(l08.oracle(q, k, v, causal))),
               shared)


def cases09(arch: str):
    """Lesson 09's reference kernels as its wrappers launch them: mma_matmul on the matmul check's cases, the
    tensor-core FlashAttention on the attention cases (visible, tails, causal) with the H200's K/V tile
    (BC = 64; compute_75 builds take the source's sm_75 default, BC = 16)."""
    from autograder.lessons import gpu_attention
    from autograder.lessons.lesson09 import checks as l09

    for c in l09.MMA_VISIBLE:
        M, N, K = c["M"], c["N"], c["K"]
        a, b = l09.mma_inputs(M, N, K, c["seed"])
        out = np.full((M, N), np.nan, np.float32)
        warps = ((M + 15) // 16) * ((N + 7) // 8)
        yield ("mma_matmul", f"M={M}, N={N}, K={K}", ("09_tensor_cores", "mma_source", "MMA_SRC"), "mma_matmul",
               ((warps + 3) // 4,), 128, [a, b, out, np.int32(M), np.int32(N), np.int32(K)],
               lambda out=out, a=a, b=b: np.all(np.abs(out - l09.mma_product(a, b)[0]) <= l09.mma_product(a, b)[1]))
    bc = 64 if arch >= "compute_80" else None
    table = [(c, False) for c in gpu_attention.VISIBLE] + [(c, c.get("causal", False)) for c in gpu_attention.TAILS] \
        + [(c, True) for c in gpu_attention.CAUSAL]
    for c, causal in table:
        H, n, d = c["H"], c["n"], c["d"]
        q, k, v = l09._inputs(H, n, d, c["seed"])
        o = np.full_like(q, np.nan)
        tile = bc or 16  # the source's sm_75 default
        shared = (128 + 4 * tile) * (d + 8) * 2
        yield ("flash_tc", f"H={H}, n={n}, d={d}{', causal' if causal else ''}",
               ("09_tensor_cores", "flash_tc_source", "FLASH_TC_SRC", f"#define BC {bc}\n" if bc else ""),
               f"flash_attention_tc_d{d}", (H, (n + 127) // 128), 128,
               [q, k, v, o, np.int32(n), np.float32(1 / math.sqrt(d)), np.int32(causal), np.zeros(1, np.int32)],
               lambda o=o, q=q, k=k, v=v, causal=causal: np.all(
                   np.abs(o - l09.oracle_and_bound(q, k, v, causal)[0]) <= l09.oracle_and_bound(q, k, v, causal)[1]),
               shared)


def cases11(sm_count: int):
    from autograder.lessons.lesson11 import checks as l11

    ns: dict = {"cp": None, "np": np, "math": math}
    exec(grading.reference_answers("11_flash_decoding")["paged_decode_gpu"], ns)
    where = ("11_flash_decoding", "decode_source", "DECODE_SRC")
    table = [(c, None) for c in l11.GPU_VISIBLE] + [(c, s) for c in l11.GPU_SPLITS for s in c["num_splits"]]
    for c, num_splits in table:
        q, kp, vp, bt, lengths = l11._inputs_of(c)
        B, Hq, d = q.shape
        _, page_size, Hkv, _ = kp.shape
        max_pages = bt.shape[1]
        S = ns["choose_splits"](B, Hkv, max_pages, sm_count) if num_splits is None else int(num_splits)
        out = np.empty((B, Hq, d), np.float32)
        o_part = out if S == 1 else np.empty((S, B, Hq, d), np.float32)
        lse = np.empty((S, B, Hq), np.float32)
        launches = [("paged_decode_split", (S, Hkv, B), 128,
                     [q, kp, vp, bt, lengths, o_part, lse, np.int32(B), np.int32(Hq), np.int32(Hkv), np.int32(d),
                      np.int32(page_size), np.int32(max_pages), np.int32(S), np.float32(1 / math.sqrt(d))], 0)]
        if S > 1:
            launches.append(("paged_decode_combine", (B * Hq,), (d, 4),
                             [o_part, lse, out, np.int32(S), np.int32(B * Hq), np.int32(d)], 0))
        large = c.get("q_scale", 1.0) > 1 or c.get("keys_away")
        tol = l11.LARGE_TOLERANCE if large else 1e-5
        lens = "/".join(str(n) for n in c["lengths"])
        label = f"B={B}, Hq={Hq}, Hkv={Hkv}, d={d}, L={lens}, S={S}"
        want = l11.oracle(q, kp, vp, bt, lengths, S)
        yield ("decode (11)", label, where, launches,
               lambda out=out, want=want, tol=tol: np.all(np.abs(out - want) <= tol + tol * np.abs(want)))


def _launches(case):
    """(kernel, label, where, [(name, grid, block, args, shared)], check) of a case of any generator above."""
    if isinstance(case[3], list):
        return case
    kernel, label, where, name, grid, block, kargs, check = case[:8]
    return kernel, label, where, [(name, grid, block, kargs, case[8] if len(case) > 8 else 0)], check


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="compute_75")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--lessons", default="06,07,08,09,11", help="comma-separated lessons to run (default: all)")
    ap.add_argument("--lesson08", action="store_true", help="(kept for old command lines: lesson 08 now runs by "
                                                             "default)")
    ap.add_argument("--sm-count", type=int, default=132, help="SMs of the GPU lesson 11's choose_splits assumes "
                                                              "(default: an H200's 132)")
    args = ap.parse_args(argv)
    lessons = set(args.lessons.split(","))
    generators = {"06": cases06, "07": cases07, "08": cases08, "09": lambda: cases09(args.arch),
                  "11": lambda: cases11(args.sm_count)}
    ptx_cache: dict = {}
    rows = []
    for lesson in sorted(generators):
        if lesson not in lessons:
            continue
        for case in generators[lesson]():
            kernel, label, where, launches, check = _launches(case)
            if where not in ptx_cache:
                prefix = where[3] if len(where) > 3 else ""  # a #define the wrapper passes as -D
                ptx_cache[where] = nvrtc.ptx(prefix + source(*where[:3]), arch=args.arch)
            best, cpu, ok, issued = None, None, True, 0
            for _ in range(args.repeat):
                gc.collect()
                t0, c0 = time.perf_counter(), time.process_time()
                results = [launch(ptx_cache[where], name, grid, block, kargs, shared)
                           for name, grid, block, kargs, shared in launches]
                dt, dc = time.perf_counter() - t0, time.process_time() - c0
                best = dt if best is None else min(best, dt)
                cpu = dc if cpu is None else min(cpu, dc)
                ok = all(r.ok for r in results)
                issued = sum(r.issued for r in results)
            rows.append((kernel, label, issued, best, cpu, issued / max(cpu, 1e-9), ok and bool(check())))
    width = max([30] + [len(r[1]) for r in rows])
    print(f"PTX {args.arch}; seconds: best of {args.repeat}, launch() including parsing and compiling the PTX")
    print(f"{'kernel':<14} {'case':<{width}} {'issues':>8} {'wall s':>8} {'CPU s':>8} {'issues/s':>9}  ok")
    for kernel, label, issued, sec, cpu, rate, ok in rows:
        print(f"{kernel:<14} {label:<{width}} {issued:>8} {sec:>8.3f} {cpu:>8.3f} {rate:>9.0f}  {'yes' if ok else 'NO'}")
    total_cpu = sum(r[4] for r in rows)
    print(f"{'total':<14} {'':<{width}} {sum(r[2] for r in rows):>8} {sum(r[3] for r in rows):>8.3f} "
          f"{total_cpu:>8.3f} {sum(r[2] for r in rows) / max(total_cpu, 1e-9):>9.0f}")
    return 0 if all(r[6] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
