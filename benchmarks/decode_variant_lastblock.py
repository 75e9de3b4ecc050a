"""Lesson 11's reference kernel with the merge done by the last block of each (sequence, KV head): one launch.

A candidate for issue 30 (lesson 11 at >= 90 % of copy at B=1, L=32k and >= 70 % at B=1, L=8k). Measured on the
H200 (results/decode_lastblock_h200.json, results/decode_kernels_h200.txt): it saves the host a launch (0.032 ->
0.022 ms per call at small sizes) but is no faster on the GPU (as a CUDA graph 0.027 ms at B=1 L=8k against the
lesson's 0.025), so it reaches neither goal and stays out of the lesson. Measure it beside the lesson's reference:

    python benchmarks/decode_kernels.py --no-torch --out $OUT/reference.json
    python benchmarks/decode_kernels.py --no-torch --source benchmarks/decode_variant_lastblock.py --out $OUT/lastblock.json

What differs from the solution notebook's DECODE_SRC and paged_decode_gpu: no ``paged_decode_combine`` kernel and
no second launch. Each split block, after writing its part, counts itself in with ``atomicInc`` on a counter of its
(sequence, KV head) (``__threadfence`` first, so that its part is visible to every block); the block that arrives
last merges the parts of its G query heads (``merge_splits``: the sums of merge_partials, read back from L2) and
writes the answer. ``atomicInc`` wraps at num_splits - 1, so the counters are zero again for the next launch; the
wrapper keeps them per device.

Why it was expected to help (before the CUDA-graph column showed the GPU's own time): the committed figures (decode_kernels_h200.json) show a floor of
about 27 us per call whatever the size (B=1: 0.027 ms at L=1024, 8 MB, whose bytes take 2 us; 0.028 ms at
L=4096), so at L=8192 (0.030-0.043 ms for a 16 us byte floor) a call is bound by its fixed cost: the host's two
launches (CuPy packs 15 and 6 arguments) and three allocations between CUDA events of back-to-back calls, and on
the GPU the combine kernel's own launch and latency-bound run. One launch removes a launch from both sides.
Made from the solution notebook's DECODE_SRC by the edits below (each must apply once: a changed lesson says
which did not). tests/test_lesson11_flash_decoding.py runs it on the PTX emulator against the float64 oracle.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import cupy as cp
import numpy as np

SOLUTION = Path(__file__).resolve().parent.parent / "solutions" / "11_flash_decoding" / "11_flash_decoding.ipynb"

#: The last block of a (sequence, KV head) merges its num_splits parts: inserted before split_body.
MERGE_SPLITS = r"""// The last block of a (sequence, KV head) to finish merges the num_splits parts of its G query heads: the
// sums of merge_partials, read back from o_part and lse_part (L2: other blocks wrote them), written to out.
template <int D>
__device__ void merge_splits(const float* __restrict__ o_part, const float* __restrict__ lse_part,
                             float* __restrict__ out, int S, int rows, int row0, int G, float* smem)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float* sm_M = smem;                 // [8] the largest lse of each head
    float* sm_L = smem + 8;             // [8] the sum of the weights
    float* sm_A = smem + 16;            // [ways][cols * 4] partial sums of the weighted parts
    for (int g = warp; g < G; g += WARPS) {
        float M = NEG_INF, L = 0.0f;
        for (int s = lane; s < S; s += 32) M = fmaxf(M, __ldcg(lse_part + (size_t)s * rows + row0 + g));
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
        if (M != NEG_INF)
            for (int s = lane; s < S; s += 32) {
                const float lse = __ldcg(lse_part + (size_t)s * rows + row0 + g);
                L += lse == NEG_INF ? 0.0f : __expf(lse - M);
            }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) L += __shfl_xor_sync(0xffffffffu, L, off);
        if (lane == 0) { sm_M[g] = M; sm_L[g] = L; }
    }
    __syncthreads();
    const int cols = G * D / 4;                                  // float4 columns of the G heads
    const int ways = cols >= WARPS * 32 ? 1 : WARPS * 32 / cols;  // threads that share a column's parts
    for (int idx = threadIdx.x; idx < cols * ways; idx += blockDim.x) {
        const int col = idx % cols, y = idx / cols, g = col * 4 / D, e = col * 4 % D;
        const float M = sm_M[g];
        float4 A = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (M != NEG_INF) {
#pragma unroll 4
            for (int s = y; s < S; s += ways) {
                const float lse = __ldcg(lse_part + (size_t)s * rows + row0 + g);
                const float w = lse == NEG_INF ? 0.0f : __expf(lse - M);
                const float4 o = __ldcg(reinterpret_cast<const float4*>(o_part + ((size_t)s * rows + row0 + g) * D + e));
                A.x += w * o.x; A.y += w * o.y; A.z += w * o.z; A.w += w * o.w;
            }
        }
        reinterpret_cast<float4*>(sm_A)[y * cols + col] = A;
    }
    __syncthreads();
    for (int col = threadIdx.x; col < cols; col += blockDim.x) {
        const int g = col * 4 / D, e = col * 4 % D;
        float4 A = reinterpret_cast<float4*>(sm_A)[col];
        for (int y = 1; y < ways; ++y) {
            const float4 a = reinterpret_cast<float4*>(sm_A)[y * cols + col];
            A.x += a.x; A.y += a.y; A.z += a.z; A.w += a.w;
        }
        const float L = sm_L[g], r = L > 0.0f ? 1.0f / L : 0.0f;
        reinterpret_cast<float4*>(out + (size_t)(row0 + g) * D)[e / 4] = make_float4(A.x * r, A.y * r, A.z * r, A.w * r);
    }
}

"""

#: Appended to split_body: count the block in; the last one merges.
LAST_BLOCK_MERGES = r"""    if (num_splits == 1) return;                     // o_part is the answer itself
    // The last of the num_splits blocks of (b, kvh) to get here merges them: every thread's writes are made
    // visible to the whole GPU first (__threadfence), then one thread counts the block in. atomicInc wraps at
    // num_splits - 1, so the counter is back at 0 for the next launch.
    __shared__ int is_last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) is_last = atomicInc(arrived + (size_t)b * Hkv + kvh, num_splits - 1) == num_splits - 1;
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    merge_splits<D>(o_part, lse_part, out, num_splits, B * Hq, b * Hq + kvh * G, G, smem);"""

#: (old, new): each applied exactly once to the solution's DECODE_SRC.
EDITS = (
    ("template <int D, int GT>\n__device__ void split_body(",
     MERGE_SPLITS + "template <int D, int GT>\n__device__ void split_body("),
    ("                           float* __restrict__ lse_part, int B, int Hq, int Hkv, int G, int page_size,",
     "                           float* __restrict__ lse_part, float* __restrict__ out, unsigned* __restrict__ arrived,\n"
     "                           int B, int Hq, int Hkv, int G, int page_size,"),
    ("    }\n}\n\n#define SPLIT_ARGS", "    }\n" + LAST_BLOCK_MERGES + "\n}\n\n#define SPLIT_ARGS"),
    ("#define SPLIT_ARGS q, k_pages, v_pages, table, lengths, o_part, lse_part, B,",
     "#define SPLIT_ARGS q, k_pages, v_pages, table, lengths, o_part, lse_part, out, arrived, B,"),
    ("                               const int* lengths, float* o_part, float* lse_part, int B, int Hq, int Hkv, int G,",
     "                               const int* lengths, float* o_part, float* lse_part, float* out, unsigned* arrived,\n"
     "                               int B, int Hq, int Hkv, int G,"),
    ("                   const int* lengths, float* o_part, float* lse_part, int B, int Hq, int Hkv, int d,",
     "                   const int* lengths, float* o_part, float* lse_part, float* out, unsigned* arrived,\n"
     "                   int B, int Hq, int Hkv, int d,"),
)


def _solution_cells() -> dict[str, str]:
    cells = json.loads(SOLUTION.read_text(encoding="utf-8"))["cells"]
    return {c["metadata"].get("nbgrader", {}).get("grade_id"): "".join(c["source"]) for c in cells}


def _edited(source: str) -> str:
    for old, new in EDITS:
        if source.count(old) != 1:
            raise ValueError(f"the lesson's DECODE_SRC changed: {old[:60]!r} is there {source.count(old)} times")
        source = source.replace(old, new)
    return source[:source.index("#define COMBINE_WAYS")].rstrip() + "\n"   # no combine kernel


_namespace = {"cp": cp, "np": np, "math": math}
exec(_solution_cells()["decode_source"], _namespace)
SOLUTION_SRC = _namespace["DECODE_SRC"]   # the lesson's kernels, as the solution notebook has them
DECODE_SRC = _edited(SOLUTION_SRC)
exec(_solution_cells()["paged_decode_gpu"], _namespace)   # choose_splits, as the lesson's
choose_splits = _namespace["choose_splits"]

def make_paged_decode_gpu(source: str):
    """The one-launch wrapper of a DECODE_SRC made with these edits (``source``): its kernel and counters per device."""
    kernels = {}   # device -> the split kernel, compiled on first use
    arrived = {}   # device -> counters of the split kernel (one per sequence and KV head), zero between launches

    def paged_decode_gpu(q, k_pages, v_pages, block_table, lengths, num_splits=None):
        B, Hq, d = q.shape
        P, page_size, Hkv, _ = k_pages.shape
        max_pages = block_table.shape[1]
        if d not in (64, 128) or Hq % Hkv or Hq // Hkv > 8:
            raise ValueError("the kernel takes d = 64 or 128 and G = Hq / Hkv from 1 to 8")
        S = choose_splits(B, Hkv, max_pages) if num_splits is None else int(num_splits)
        device = cp.cuda.Device().id
        if device not in kernels:
            kernels[device] = cp.RawKernel(source, "paged_decode_split")
        if device not in arrived or arrived[device].size < B * Hkv:
            arrived[device] = cp.zeros(max(B * Hkv, 1024), dtype=cp.uint32)
        out = cp.empty((B, Hq, d), dtype=cp.float32)
        o_part = out if S == 1 else cp.empty((S, B, Hq, d), dtype=cp.float32)
        lse_part = cp.empty((S, B, Hq), dtype=cp.float32)
        kernels[device](
            (S, Hkv, B), (128,),
            (q, k_pages, v_pages, block_table, lengths, o_part, lse_part, out, arrived[device], np.int32(B),
             np.int32(Hq), np.int32(Hkv), np.int32(d), np.int32(page_size), np.int32(max_pages), np.int32(S),
             np.float32(1 / math.sqrt(d))))
        return out

    return paged_decode_gpu


paged_decode_gpu = make_paged_decode_gpu(DECODE_SRC)
