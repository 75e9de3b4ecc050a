"""The device figures the factual review of 2026-12-01 needed, reproduced in one run (section F of the review).

    python benchmarks/review_measurements.py [--out benchmarks/results/review_measurements_h200.json]
    python benchmarks/review_measurements.py --dry-run     # no GPU: compile every source through NVRTC, run nothing

Five measurements, each a key of the JSON:

* ``mma_sync_peak``: a register-only loop of ``mma.sync.aligned.m16n8k16`` f16 x f16 -> f32 (8 independent
  accumulators per warp, 128-thread blocks, 4 / 8 / 16 blocks per SM), TFLOP/s at 2·16·8·16 FLOP per
  instruction: the ceiling of the instruction lessons 09's kernels use, against the 989 TFLOP/s datasheet figure;
* ``mma_matmul_error``: lesson 09's reference ``mma_matmul`` (m16n8k8, fp32 accumulator) on A, B ~ U[0, 1) f16,
  64 x 64 output, K = 256 / 4096 / 16384: relative error against float64 (mean, max of |error|, share of negative
  errors), beside sequential fp32 round-to-nearest summation of the same 8-term blocks (each block summed exactly,
  then rounded) and the bound K·2^-24 the lesson's tolerance halves;
* ``strided_copy``: 2^26 float32, 256 threads per block, one element per thread: a plain ``y[i] = x[i]`` kernel
  beside lesson 06's permutation kernel (``_STRIDED``, the index computed with 64-bit division) at strides
  1 / 8 / 64, GB/s of bytes read + written;
* ``registers``: registers and local memory per thread of lesson 09's reference ``flash_attention_tc_d64/d128``
  at BC = 64 / 32 / 16 and of lesson 11's ``paged_decode_split`` / ``paged_decode_combine``, as CuPy's
  RawKernel compiles them on this device (``num_regs``, ``local_size_bytes``);
* ``wgmma_target``: whether NVRTC accepts ``wgmma.fence.sync.aligned`` for ``sm_90`` and for ``sm_90a``
  (needs no GPU; repeated here so that the run records the NVRTC of the device machine).

The kernels' sources are read from the solution notebooks (``solutions/09_tensor_cores``,
``solutions/11_flash_decoding``) and from ``autograder.lessons.lesson06.cuda_basics``.  CUDA events, median of
rounds after warm-up.  Prints a table and writes JSON with the device, date, versions and command.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autograder.gpu import nvrtc  # noqa: E402  (this checkout's package, not an installed one)
from autograder.lessons.lesson06 import cuda_basics  # noqa: E402

DATASHEET_F16_TFLOPS = 989.4   # H100 SXM / H200 SXM, dense f16 with fp32 accumulation

MMA_PEAK_SRC = r"""
// Register-only throughput loop: every warp issues ACC independent mma.sync m16n8k16 per iteration.
#define ACC 8
extern "C" __global__ void mma_peak(float* out, int iters)
{
    unsigned a[4], b[2];
    const unsigned seed = threadIdx.x * 2654435761u;
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = (seed >> i) & 0x3c003c00u;   // small f16 values, no overflow
#pragma unroll
    for (int i = 0; i < 2; ++i) b[i] = (seed >> (i + 4)) & 0x3c003c00u;
    float c[ACC][4];
#pragma unroll
    for (int j = 0; j < ACC; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) c[j][e] = 0.0f;
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int j = 0; j < ACC; ++j) {
#if __CUDA_ARCH__ >= 800
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                         "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                         : "+f"(c[j][0]), "+f"(c[j][1]), "+f"(c[j][2]), "+f"(c[j][3])
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
        }
    }
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < ACC; ++j) s += c[j][0] + c[j][1] + c[j][2] + c[j][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;    // keeps the loop alive
}
"""
MMA_PEAK_ACC, MMA_PEAK_BLOCK = 8, 128

PLAIN_COPY_SRC = r"""
extern "C" __global__ void plain_copy(const float* x, float* y, long long n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
"""

WGMMA_FENCE_SRC = r"""
extern "C" __global__ void wgmma_fence_only() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
"""


def notebook_cells(lesson: str, grade_ids: tuple[str, ...]) -> str:
    """The source of the named cells of a solution notebook (the reference answers), in notebook order."""
    nb = json.loads((ROOT / "solutions" / lesson / f"{lesson}.ipynb").read_text(encoding="utf-8"))
    cells = [cell for cell in nb["cells"] if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") in grade_ids]
    return "\n".join("".join(cell["source"]) for cell in cells)


def kernel_sources() -> dict[str, str]:
    """Every CUDA source this script compiles, by name."""
    ns: dict = {}
    exec(notebook_cells("09_tensor_cores", ("mma_source", "flash_tc_source")), ns)
    exec(notebook_cells("11_flash_decoding", ("decode_source",)), ns)
    return {"mma_peak": MMA_PEAK_SRC, "plain_copy": PLAIN_COPY_SRC, "strided_copy": cuda_basics._STRIDED,
            "MMA_SRC": ns["MMA_SRC"], "FLASH_TC_SRC": ns["FLASH_TC_SRC"], "DECODE_SRC": ns["DECODE_SRC"]}


def wgmma_target() -> dict:
    """NVRTC's verdict on wgmma.fence for sm_90 and sm_90a (no GPU needed)."""
    verdict = {}
    for arch in ("sm_90", "sm_90a"):
        result = nvrtc.compile_source(WGMMA_FENCE_SRC, arch=arch)
        verdict[arch] = {"ok": result.ok, "errors": [e.message for e in result.errors][:2]}
    return verdict


def dry_run() -> None:
    """Compile every source for sm_80 and sm_90 through NVRTC (FLASH_TC_SRC at each BC), as the GPU run would."""
    failed = 0
    for name, source in kernel_sources().items():
        variants = [f"#define BC {bc}\n" for bc in (64, 32, 16)] if name == "FLASH_TC_SRC" else [""]
        for prefix in variants:
            for arch in ("sm_80", "sm_90"):
                result = nvrtc.compile_source(prefix + source, arch=arch)
                regs = ", ".join(f"{k}: {v.registers} regs" for k, v in sorted(result.resources.items()))
                label = f"{name} {prefix.strip()}".strip()
                print(f"{label:32} {arch}: {'ok' if result.ok else 'FAILED'}  {regs}")
                if not result.ok:
                    failed += 1
                    print(result.log[:2000])
    print("wgmma.fence:", json.dumps(wgmma_target(), ensure_ascii=False))
    if failed:
        raise SystemExit(f"{failed} compilation(s) failed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="no GPU: compile every source through NVRTC, run nothing")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "review_measurements_h200.json")
    args = parser.parse_args()
    if args.dry_run:
        dry_run()
        return

    import cupy as cp

    from autograder.gpu.runtime import time_ms  # CUDA events, the median of rounds after warm-up

    sources = kernel_sources()
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    device = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    sms = int(props["multiProcessorCount"])
    print(f"{device}, {sms} SM")

    # 1. mma.sync ceiling
    peak = cp.RawKernel(sources["mma_peak"], "mma_peak")
    iters = 4096
    peak_rows = []
    for per_sm in (4, 8, 16):
        blocks = per_sm * sms
        out = cp.empty(blocks * MMA_PEAK_BLOCK, dtype=cp.float32)
        ms = time_ms(lambda: peak((blocks,), (MMA_PEAK_BLOCK,), (out, np.int32(iters))), repeat=3)
        flops = blocks * (MMA_PEAK_BLOCK // 32) * iters * MMA_PEAK_ACC * 2 * 16 * 8 * 16
        tflops = flops / (ms * 1e-3) / 1e12
        peak_rows.append({"blocks_per_sm": per_sm, "ms": ms, "tflops": tflops,
                          "share_of_datasheet": tflops / DATASHEET_F16_TFLOPS})
        print(f"mma.sync m16n8k16 f16->f32, {per_sm:2} blocks/SM: {tflops:6.1f} TFLOP/s "
              f"({100 * tflops / DATASHEET_F16_TFLOPS:.0f} % of {DATASHEET_F16_TFLOPS})")

    # 2. mma_matmul accumulation error
    mma = cp.RawKernel(sources["MMA_SRC"], "mma_matmul")
    rng = np.random.default_rng(0)
    error_rows = []
    M = N = 64
    for K in (256, 4096, 16384):
        a = rng.random((M, K)).astype(np.float16)
        b = rng.random((K, N)).astype(np.float16)
        c = cp.empty((M, N), dtype=cp.float32)
        warps = (M // 16) * (N // 8)
        mma(((warps + 3) // 4,), (128,), (cp.asarray(a), cp.asarray(b), c, np.int32(M), np.int32(N), np.int32(K)))
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        exact = a64 @ b64
        rel_tc = (cp.asnumpy(c).astype(np.float64) - exact) / exact
        acc = np.zeros((M, N), np.float32)
        for k0 in range(0, K, 8):     # blocks of 8 exact products, rounded once, then fp32 RN additions
            acc = (acc + (a64[:, k0:k0 + 8] @ b64[k0:k0 + 8]).astype(np.float32)).astype(np.float32)
        rel_rn = (acc.astype(np.float64) - exact) / exact
        row = {"K": K, "tc_mean": float(rel_tc.mean()), "tc_max_abs": float(np.abs(rel_tc).max()),
               "tc_share_negative": float((rel_tc < 0).mean()), "rn_seq_mean": float(rel_rn.mean()),
               "rn_seq_max_abs": float(np.abs(rel_rn).max()), "bound_K_2^-24": K * 2.0 ** -24}
        error_rows.append(row)
        print(f"mma_matmul K={K:5}: tensor cores mean {row['tc_mean']:+.2e}, max {row['tc_max_abs']:.2e}, "
              f"negative {100 * row['tc_share_negative']:.0f} % | fp32 RN sequential mean {row['rn_seq_mean']:+.1e}, "
              f"max {row['rn_seq_max_abs']:.1e} | K*2^-24 = {row['bound_K_2^-24']:.1e}")

    # 3. strided copy against a plain copy of the same shape
    n = 1 << 26
    x = cp.arange(n, dtype=cp.float32)
    y = cp.empty_like(x)
    grid = ((n + 255) // 256,)
    plain = cp.RawKernel(sources["plain_copy"], "plain_copy")
    strided = cp.RawKernel(sources["strided_copy"], "strided_copy")
    copy_rows = {"plain_copy_GBps": 2 * n * 4 / (time_ms(lambda: plain(grid, (256,), (x, y, np.int64(n)))) * 1e-3) / 1e9}
    copy_rows["cupy_copy_GBps"] = 2 * n * 4 / (time_ms(lambda: y.__setitem__(Ellipsis, x)) * 1e-3) / 1e9
    for stride in (1, 8, 64):
        ms = time_ms(lambda: strided(grid, (256,), (x, y, np.int64(n), np.int32(stride))))
        copy_rows[f"lesson06_stride_{stride}_GBps"] = 2 * n * 4 / (ms * 1e-3) / 1e9
    print("copy, 2^26 float32, 256 threads, one element per thread: " +
          ", ".join(f"{k} {v:.0f}" for k, v in copy_rows.items()))
    del x, y

    # 4. registers as CuPy compiles the reference kernels here
    registers = {}
    for bc in (64, 32, 16):
        for d in (64, 128):
            k = cp.RawKernel(sources["FLASH_TC_SRC"], f"flash_attention_tc_d{d}", options=(f"-DBC={bc}",))
            k.compile()
            registers[f"flash_attention_tc_d{d} BC={bc}"] = {"regs": k.num_regs, "local_bytes": k.local_size_bytes}
    for name in ("paged_decode_split", "paged_decode_combine"):
        k = cp.RawKernel(sources["DECODE_SRC"], name)
        k.compile()
        registers[name] = {"regs": k.num_regs, "local_bytes": k.local_size_bytes,
                           "static_shared_bytes": k.shared_size_bytes}
    for name, row in registers.items():
        print(f"{name:34}: {row}")

    wgmma = wgmma_target()
    print("wgmma.fence:", json.dumps(wgmma, ensure_ascii=False))

    versions = {"python": platform.python_version(), "numpy": np.__version__, "cupy": cp.__version__,
                "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(), "cuda_driver": cp.cuda.runtime.driverGetVersion(),
                "nvrtc": ".".join(map(str, cp.cuda.nvrtc.getVersion()))}
    result = {"what": "device figures of the factual review of 2026-12-01 (section F), cited by lessons 06 and 09",
              "device": device, "sm_count": sms,
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "command": "python " + " ".join(["benchmarks/review_measurements.py", *sys.argv[1:]]),
              "versions": versions, "mma_sync_peak": peak_rows, "mma_matmul_error": error_rows,
              "strided_copy": copy_rows, "registers": registers, "wgmma_target": wgmma}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
