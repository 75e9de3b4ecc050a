"""Lesson 11's reference kernel with the merge done by the last block of each (sequence, KV head): one launch.

A candidate for issue 30 (lesson 11 at >= 90 % of copy at B=1, L=32k and >= 70 % at B=1, L=8k), not yet measured
on a GPU. Measure it beside the lesson's reference, in one device call:

    python benchmarks/decode_kernels.py --no-torch --out $OUT/reference.json
    python benchmarks/decode_kernels.py --no-torch --source benchmarks/decode_variant_lastblock.py --out $OUT/lastblock.json

What differs from the solution notebook's DECODE_SRC and paged_decode_gpu: no ``paged_decode_combine`` kernel and
no second launch. Each split block, after writing its part, counts itself in with ``atomicInc`` on a counter of its
(sequence, KV head) (``__threadfence`` first, so that its part is visible to every block); the block that arrives
last merges the parts of its G query heads (``merge_splits``: the sums of merge_partials, read back from L2) and
writes the answer. ``atomicInc`` wraps at num_splits - 1, so the counters are zero again for the next launch; the
wrapper keeps them per device.

Why it should help where the goals are short: the committed figures (decode_kernels_h200.json) show a floor of
about 27 us per call whatever the size (B=1: 0.027 ms at L=1024, 8 MB, whose bytes take 2 us; 0.028 ms at
L=4096), so at L=8192 (0.030-0.043 ms for a 16 us byte floor) a call is bound by its fixed cost: the host's two
launches (CuPy packs 15 and 6 arguments) and three allocations between CUDA events of back-to-back calls, and on
the GPU the combine kernel's own launch and latency-bound run. One launch removes a launch from both sides.
tests/test_lesson11_flash_decoding.py runs it on the PTX emulator against the float64 oracle.
"""
import math
import numpy as np
import cupy as cp

DECODE_SRC = r"""
// Flash-decoding over a paged KV cache (the layout of vLLM's FlashAttention backend), GQA.
// paged_decode_split: one block per (split, KV head, sequence); 4 warps share the split's tokens,
// every warp serves all G query heads of its KV head from one read of each K/V row.
// The last split block of each (sequence, KV head) to finish merges the splits by their lse (merge_splits).
#define NEG_INF __int_as_float(0xff800000)
#define WARPS 4
#define SMEM_FLOATS (WARPS * 8 * (128 + 2))   // the cross-warp merge of the largest instantiation

template <int VEC> struct Vec;
template <> struct Vec<2> { typedef float2 T; };
template <> struct Vec<4> { typedef float4 T; };

template <int VEC> __device__ __forceinline__ void load_vec(float* r, const float* p)
{
    typedef typename Vec<VEC>::T T;
    const T x = __ldg(reinterpret_cast<const T*>(p));
    const float* f = reinterpret_cast<const float*>(&x);
#pragma unroll
    for (int i = 0; i < VEC; ++i) r[i] = f[i];
}

// the K and V rows of tokens base .. base + RUN - 1 of this split (none at or past t1) into registers
template <int D, int RUN>
__device__ __forceinline__ void load_run(float (&kr)[RUN][D / 32], float (&vr)[RUN][D / 32],
                                         const float* __restrict__ k_pages, const float* __restrict__ v_pages,
                                         const int* __restrict__ row_table, int base, int t1, int page_size,
                                         int Hkv, int kvh, int lane)
{
    constexpr int VEC = D / 32;
#pragma unroll
    for (int u = 0; u < RUN; ++u) {
        const int t = base + u;
        if (t < t1) {
            // (2) where token t lives: its page from the block table, then the offset of this lane's VEC
            //     elements of (page, slot, KV head kvh) in the pool (P, page_size, Hkv, D)
            const int page = row_table[t / page_size];
            const size_t row = (((size_t)page * page_size + t % page_size) * Hkv + kvh) * D + lane * VEC;
            load_vec<VEC>(kr[u], k_pages + row);
            load_vec<VEC>(vr[u], v_pages + row);
        }
    }
}

// online softmax of the G query heads over one run of RUN tokens already in registers
template <int GT, int RUN, int VEC>
__device__ __forceinline__ void softmax_run(const float (&qr)[GT][VEC], const float (&kr)[RUN][VEC],
                                            const float (&vr)[RUN][VEC], float (&m)[GT], float (&l)[GT],
                                            float (&acc)[GT][VEC], int base, int t1, int G)
{
#pragma unroll
    for (int g = 0; g < GT; ++g) {
        if (g >= G) break;
        float s[RUN];
        float m_blk = NEG_INF;
#pragma unroll
        for (int u = 0; u < RUN; ++u) {
            float dot = 0.0f;
#pragma unroll
            for (int i = 0; i < VEC; ++i) dot += qr[g][i] * kr[u][i];
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
            s[u] = base + u < t1 ? dot : NEG_INF;
            m_blk = fmaxf(m_blk, s[u]);
        }
        // (3) online softmax over this run (lesson 04): the new max, l and acc rescaled by exp(m - m_new),
        //     then p = exp(s[u] - m_new) added to l and p * v to acc for every token of the run (u with
        //     base + u < t1); skip the others with an if: their vr[u] were never loaded (garbage, maybe NaN),
        //     and 0 * NaN = NaN
        const float m_new = fmaxf(m[g], m_blk);     // finite: the first token of the run is valid
        const float corr = __expf(m[g] - m_new);
        l[g] *= corr;
#pragma unroll
        for (int i = 0; i < VEC; ++i) acc[g][i] *= corr;
#pragma unroll
        for (int u = 0; u < RUN; ++u) {
            if (base + u < t1) {
                const float p = __expf(s[u] - m_new);
                l[g] += p;
#pragma unroll
                for (int i = 0; i < VEC; ++i) acc[g][i] += p * vr[u][i];
            }
        }
        m[g] = m_new;
    }
}

// The last block of a (sequence, KV head) to finish merges the num_splits parts of its G query heads: the
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

template <int D, int GT>
__device__ void split_body(const float* __restrict__ q, const float* __restrict__ k_pages,
                           const float* __restrict__ v_pages, const int* __restrict__ table,
                           const int* __restrict__ lengths, float* __restrict__ o_part,
                           float* __restrict__ lse_part, float* __restrict__ out, unsigned* __restrict__ arrived,
                           int B, int Hq, int Hkv, int G, int page_size,
                           int max_pages, int num_splits, float scale, float* smem)
{
    constexpr int VEC = D / 32;
    constexpr int RUN = GT >= 8 ? 1 : GT >= 4 ? 2 : 4;     // tokens per run: two runs in registers, within 128 registers
    float (*sm_acc)[GT][D] = reinterpret_cast<float (*)[GT][D]>(smem);
    float (*sm_m)[GT] = reinterpret_cast<float (*)[GT]>(smem + WARPS * GT * D);
    float (*sm_l)[GT] = reinterpret_cast<float (*)[GT]>(smem + WARPS * GT * D + WARPS * GT);
    const int split = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int n = lengths[b];
    const int n_pages = (n + page_size - 1) / page_size;
    // (1) this split's pages [p0, p1) and tokens [t0, t1): ceil(n_pages / num_splits) pages per split (the
    //     last splits may be empty), and no token at or past n
    const int per = (n_pages + num_splits - 1) / num_splits;
    const int p0 = min(split * per, n_pages), p1 = min(p0 + per, n_pages);
    const int t0 = p0 * page_size, t1 = min(p1 * page_size, n);   // stale slots past n never read
    const int* row_table = table + (size_t)b * max_pages;

    float qr[GT][VEC], m[GT], l[GT], acc[GT][VEC];
#pragma unroll
    for (int g = 0; g < GT; ++g) {
        const int h = kvh * G + (g < G ? g : 0);
        load_vec<VEC>(qr[g], q + ((size_t)b * Hq + h) * D + lane * VEC);
#pragma unroll
        for (int i = 0; i < VEC; ++i) { qr[g][i] *= scale; acc[g][i] = 0.0f; }
        m[g] = NEG_INF;
        l[g] = 0.0f;
    }
    // Warp w takes the runs that start at t0 + RUN * w, then every WARPS * RUN tokens. Double buffering: while
    // one run is in the softmax, the rows of the next one are already on their way from memory.
    const int step = WARPS * RUN;
    float ka[RUN][VEC], va[RUN][VEC], kb[RUN][VEC], vb[RUN][VEC];
    int base = t0 + warp * RUN;
    load_run<D, RUN>(ka, va, k_pages, v_pages, row_table, base, t1, page_size, Hkv, kvh, lane);
    for (; base < t1; base += 2 * step) {
        load_run<D, RUN>(kb, vb, k_pages, v_pages, row_table, base + step, t1, page_size, Hkv, kvh, lane);
        softmax_run<GT, RUN, VEC>(qr, ka, va, m, l, acc, base, t1, G);
        if (base + step >= t1) break;
        load_run<D, RUN>(ka, va, k_pages, v_pages, row_table, base + 2 * step, t1, page_size, Hkv, kvh, lane);
        softmax_run<GT, RUN, VEC>(qr, kb, vb, m, l, acc, base + step, t1, G);
    }
#pragma unroll
    for (int g = 0; g < GT; ++g) {
        if (lane == 0) { sm_m[warp][g] = m[g]; sm_l[warp][g] = l[g]; }
#pragma unroll
        for (int i = 0; i < VEC; ++i) sm_acc[warp][g][lane * VEC + i] = acc[g][i];
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < G * D; idx += blockDim.x) {
        const int g = idx / D, e = idx % D;
        const size_t head = ((size_t)split * B + b) * Hq + kvh * G + g;
        // (4) merge the WARPS states of head g for element e (the same rule as merge_partials), then write
        //     o_part[head * D + e] = A / L and, once per head, lse_part[head] = M + log L;
        //     an empty split writes o = 0, lse = -inf
        float M = NEG_INF;
        for (int w = 0; w < WARPS; ++w) M = fmaxf(M, sm_m[w][g]);
        float L = 0.0f, A = 0.0f;
        if (M != NEG_INF)
            for (int w = 0; w < WARPS; ++w) {
                const float c = sm_m[w][g] == NEG_INF ? 0.0f : __expf(sm_m[w][g] - M);
                L += sm_l[w][g] * c;
                A += sm_acc[w][g][e] * c;
            }
        o_part[head * D + e] = L > 0.0f ? A / L : 0.0f;       // an empty split: o = 0, lse = -inf
        if (e == 0) lse_part[head] = L > 0.0f ? M + logf(L) : NEG_INF;
    }
    if (num_splits == 1) return;                     // o_part is the answer itself
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
    merge_splits<D>(o_part, lse_part, out, num_splits, B * Hq, b * Hq + kvh * G, G, smem);
}

#define SPLIT_ARGS q, k_pages, v_pages, table, lengths, o_part, lse_part, out, arrived, B, Hq, Hkv, G, page_size, max_pages, num_splits, scale, smem
template <int D>
__device__ void split_by_group(const float* q, const float* k_pages, const float* v_pages, const int* table,
                               const int* lengths, float* o_part, float* lse_part, float* out, unsigned* arrived,
                               int B, int Hq, int Hkv, int G,
                               int page_size, int max_pages, int num_splits, float scale, float* smem)
{
    if (G == 1) split_body<D, 1>(SPLIT_ARGS);
    else if (G == 2) split_body<D, 2>(SPLIT_ARGS);
    else if (G <= 4) split_body<D, 4>(SPLIT_ARGS);
    else split_body<D, 8>(SPLIT_ARGS);
}

extern "C" __global__ void __launch_bounds__(WARPS * 32, 4)
paged_decode_split(const float* q, const float* k_pages, const float* v_pages, const int* table,
                   const int* lengths, float* o_part, float* lse_part, float* out, unsigned* arrived,
                   int B, int Hq, int Hkv, int d,
                   int page_size, int max_pages, int num_splits, float scale)
{
    __shared__ float smem[SMEM_FLOATS];
    const int G = Hq / Hkv;
    if (d == 128) split_by_group<128>(SPLIT_ARGS);
    else split_by_group<64>(SPLIT_ARGS);
}
"""


_decode_kernels = {}   # (source, name) -> cupy.RawKernel, compiled on first use
_sm_count = []


def choose_splits(B, Hkv, max_pages, sm_count=None):
    """num_splits=None: one full wave of blocks (about 4 resident per SM), each split at least 8 pages long."""
    if sm_count is None:
        if not _sm_count:  # the device query is slow: once per process
            _sm_count.append(cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["multiProcessorCount"])
        sm_count = _sm_count[0]
    resident = 4 * sm_count          # 128 threads x 128 registers: 4 blocks fit on one SM
    return int(max(1, min(resident // (B * Hkv), max_pages // 8)))


_arrived = {}   # device -> counters of the split kernel (one per sequence and KV head), zero between launches


def paged_decode_gpu(q, k_pages, v_pages, block_table, lengths, num_splits=None):
    B, Hq, d = q.shape
    P, page_size, Hkv, _ = k_pages.shape
    max_pages = block_table.shape[1]
    if d not in (64, 128) or Hq % Hkv or Hq // Hkv > 8:
        raise ValueError("ядро рассчитано на d = 64 или 128 и G = Hq / Hkv от 1 до 8")
    S = choose_splits(B, Hkv, max_pages) if num_splits is None else int(num_splits)
    key = (DECODE_SRC, "paged_decode_split")
    if key not in _decode_kernels:
        _decode_kernels[key] = cp.RawKernel(*key)
    device = cp.cuda.Device().id
    if device not in _arrived or _arrived[device].size < B * Hkv:
        _arrived[device] = cp.zeros(max(B * Hkv, 1024), dtype=cp.uint32)
    out = cp.empty((B, Hq, d), dtype=cp.float32)
    o_part = out if S == 1 else cp.empty((S, B, Hq, d), dtype=cp.float32)
    lse_part = cp.empty((S, B, Hq), dtype=cp.float32)
    _decode_kernels[key](
        (S, Hkv, B), (128,),
        (q, k_pages, v_pages, block_table, lengths, o_part, lse_part, out, _arrived[device], np.int32(B),
         np.int32(Hq), np.int32(Hkv), np.int32(d), np.int32(page_size), np.int32(max_pages), np.int32(S),
         np.float32(1 / math.sqrt(d))))
    return out
