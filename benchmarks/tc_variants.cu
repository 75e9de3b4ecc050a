// Variants of lesson 09's FlashAttention kernel (issue 15 experiments). The helpers below are those of the
// lesson's kernel before session 21 (16 rows per warp, one K and one V buffer), kept here so that every variant
// still builds; the lesson's kernel today is s2_pad_tree_outer_fast.
// MT m16 tiles (16 query rows each) per warp: every K/V B fragment from ldmatrix feeds MT * 2 MMAs.
// QREG: Q's A fragments stay in registers for the whole loop (loaded once).

// FlashAttention forward on tensor cores (mma.sync), float16 inputs, float32 accumulators.
// A block of NW warps owns BR = 16 * NW query rows of one head; warp w owns rows 16w .. 16w + 15.
// K/V tiles of BC = 64 rows stream through shared memory; S, P, m, l and O live in registers
// as mma fragments: lane = 4 * g + t holds rows g and g + 8 of its warp's 16 rows.
#define BC 64
#define NEG_INF (-__int_as_float(0x7f800000))   // -infinity (NVRTC has no math.h)
typedef unsigned short f16;                      // the 16 bits of an IEEE half (no cuda_fp16.h needed)

// ---- fragment helpers (given) -----------------------------------------------------------
__device__ __forceinline__ unsigned pack_f16x2(float lo, float hi)
{
    // two floats -> one 32-bit register of two halves, lo in the low 16 bits (round to nearest)
    unsigned short a, b;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(a) : "f"(lo));
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(b) : "f"(hi));
    return (unsigned)a | ((unsigned)b << 16);
}

__device__ __forceinline__ float fast_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));   // 2^x; 2^-inf = 0
    return y;
}

// C (16x8, fp32) += A (16x8, f16, row) * B (8x8, f16, col): exists from sm_75 (T4) on
__device__ __forceinline__ void mma_m16n8k8(float c[4], unsigned a0, unsigned a1, unsigned b0)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a0), "r"(a1), "r"(b0));
}

// C (16x8, fp32) += A (16x16) * B (16x8): one m16n8k16 from sm_80 (A100) on, two m16n8k8 on sm_75
__device__ __forceinline__ void mma_m16n8k16(float c[4], const unsigned a[4], const unsigned b[2])
{
#if __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    mma_m16n8k8(c, a[0], a[1], b[0]);   // k 0..7
    mma_m16n8k8(c, a[2], a[3], b[1]);   // k 8..15
#endif
}

// four 8x8 f16 matrices from shared memory; lanes 8i .. 8i+7 give the row addresses of matrix i,
// and register i of lane 4g + t receives row g, columns 2t and 2t+1 of matrix i (.trans: transposed)
__device__ __forceinline__ void ldmatrix_x4(unsigned r[4], const f16* row)
{
    const unsigned address = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(address));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned r[4], const f16* row)
{
    const unsigned address = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(address));
}

// copies global -> shared 16 bytes at a time; cp.async (sm_80+) does it without registers
#if __CUDA_ARCH__ >= 800
__device__ __forceinline__ void copy16(f16* dst, const f16* src, bool valid)
{
    const unsigned address = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(address), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void wait_all_but_last_copy() { asm volatile("cp.async.wait_group 1;\n" ::); }
#else
__device__ __forceinline__ void copy16(f16* dst, const f16* src, bool valid)
{
    *reinterpret_cast<uint4*>(dst) = valid ? *reinterpret_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
}
__device__ __forceinline__ void commit_copies() {}
__device__ __forceinline__ void wait_all_but_last_copy() {}
#endif

// rows row0 .. row0 + ROWS - 1 of a (n, D) matrix into a tile with a padded row stride (zeros past n)
template <int D, int NT, int ROWS = BC>
__device__ __forceinline__ void load_tile(f16* tile, const f16* src, int row0, int n)
{
    constexpr int CHUNKS = D / 8, STRIDE = D + 8;          // 16-byte pieces per row; padded stride
    for (int c = threadIdx.x; c < ROWS * CHUNKS; c += NT) {
        const int r = c / CHUNKS, col = (c % CHUNKS) * 8, g = row0 + r;
        copy16(tile + r * STRIDE + col, src + (size_t)(g < n ? g : 0) * D + col, g < n);
    }
}

template <int D, int NW, int MT, int BCT, bool QREG>
__device__ __forceinline__ void flash_v(const f16* __restrict__ Q, const f16* __restrict__ K,
                                        const f16* __restrict__ V, f16* __restrict__ O,
                                        int n, float scale, int causal, int* tile_counter)
{
    constexpr int BR = 16 * MT * NW, NT = 32 * NW;
    constexpr int STRIDE = D + 8, DK = D / 16, SN = BCT / 8, PK = BCT / 16, ON = D / 8;
    extern __shared__ uint4 shared16[];
    f16* Qs = reinterpret_cast<f16*>(shared16);
    f16* Ks = Qs + BR * STRIDE;
    f16* Vs = Ks + BCT * STRIDE;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BR;
    const size_t head = (size_t)blockIdx.x * n * D;
    Q += head; K += head; V += head; O += head;
    const int wr = 16 * MT * warp;                       // the warp's first row in the Q tile
    const float scale_log2 = scale * 1.4426950408889634f;

    const int kv_end = causal ? min(n, q0 + BR) : n;
    const int tiles = (kv_end + BCT - 1) / BCT;
    load_tile<D, NT, BR>(Qs, Q, q0, n);
    load_tile<D, NT, BCT>(Ks, K, 0, n);
    commit_copies();
    load_tile<D, NT, BCT>(Vs, V, 0, n);
    commit_copies();

    float o[MT][ON][4];
    float m[MT][2], l[MT][2];
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        #pragma unroll
        for (int nn = 0; nn < ON; ++nn)
            o[mt][nn][0] = o[mt][nn][1] = o[mt][nn][2] = o[mt][nn][3] = 0.0f;
        m[mt][0] = m[mt][1] = NEG_INF;
        l[mt][0] = l[mt][1] = 0.0f;
    }
    unsigned qr[QREG ? MT : 1][QREG ? DK : 1][4];
    if (QREG) {
        wait_all_but_last_copy();
        __syncthreads();
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            #pragma unroll
            for (int kk = 0; kk < DK; ++kk)
                ldmatrix_x4(qr[QREG ? mt : 0][QREG ? kk : 0], Qs + (wr + 16 * mt + (lane & 15)) * STRIDE + 16 * kk + ((lane >> 4) << 3));
    }

    for (int j = 0; j < tiles; ++j) {
        const int k0 = j * BCT;
        wait_all_but_last_copy();
        __syncthreads();

        float s[MT][SN][4];
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            #pragma unroll
            for (int nn = 0; nn < SN; ++nn)
                s[mt][nn][0] = s[mt][nn][1] = s[mt][nn][2] = s[mt][nn][3] = 0.0f;
        #pragma unroll
        for (int kk = 0; kk < DK; ++kk) {
            unsigned qa[MT][4];
            #pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                if (QREG) {
                    #pragma unroll
                    for (int i = 0; i < 4; ++i) qa[mt][i] = qr[QREG ? mt : 0][QREG ? kk : 0][i];
                } else {
                    ldmatrix_x4(qa[mt], Qs + (wr + 16 * mt + (lane & 15)) * STRIDE + 16 * kk + ((lane >> 4) << 3));
                }
            }
            #pragma unroll
            for (int nn = 0; nn < SN; nn += 2) {
                unsigned kb[4];
                ldmatrix_x4(kb, Ks + (8 * nn + (lane & 7) + ((lane >> 4) << 3)) * STRIDE + 16 * kk + ((lane >> 3) & 1) * 8);
                #pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma_m16n8k16(s[mt][nn], qa[mt], kb);
                    mma_m16n8k16(s[mt][nn + 1], qa[mt], kb + 2);
                }
            }
        }
        __syncthreads();
        if (j + 1 < tiles) load_tile<D, NT, BCT>(Ks, K, k0 + BCT, n);
        commit_copies();

        const bool edge = k0 + BCT > n || (causal && k0 + BCT - 1 > q0);
        unsigned pa[MT][PK][4];
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            const int r0 = q0 + wr + 16 * mt + g, r1 = r0 + 8;
            float mx0 = NEG_INF, mx1 = NEG_INF;
            #pragma unroll
            for (int nn = 0; nn < SN; ++nn) {
                #pragma unroll
                for (int e = 0; e < 4; ++e) {
                    float v = s[mt][nn][e] * scale_log2;
                    const int key = k0 + 8 * nn + 2 * t + (e & 1), row = e < 2 ? r0 : r1;
                    if (edge && (key >= n || (causal && key > row))) v = NEG_INF;
                    s[mt][nn][e] = v;
                    if (e < 2) mx0 = fmaxf(mx0, v); else mx1 = fmaxf(mx1, v);
                }
            }
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
            const float mn0 = fmaxf(m[mt][0], mx0), mn1 = fmaxf(m[mt][1], mx1);
            const float mu0 = mn0 == NEG_INF ? 0.0f : mn0, mu1 = mn1 == NEG_INF ? 0.0f : mn1;
            const float alpha0 = fast_exp2(m[mt][0] - mu0), alpha1 = fast_exp2(m[mt][1] - mu1);
            m[mt][0] = mn0;
            m[mt][1] = mn1;
            float sum0 = 0.0f, sum1 = 0.0f;
            #pragma unroll
            for (int nn = 0; nn < SN; ++nn) {
                s[mt][nn][0] = fast_exp2(s[mt][nn][0] - mu0); sum0 += s[mt][nn][0];
                s[mt][nn][1] = fast_exp2(s[mt][nn][1] - mu0); sum0 += s[mt][nn][1];
                s[mt][nn][2] = fast_exp2(s[mt][nn][2] - mu1); sum1 += s[mt][nn][2];
                s[mt][nn][3] = fast_exp2(s[mt][nn][3] - mu1); sum1 += s[mt][nn][3];
            }
            l[mt][0] = l[mt][0] * alpha0 + sum0;
            l[mt][1] = l[mt][1] * alpha1 + sum1;
            #pragma unroll
            for (int nn = 0; nn < ON; ++nn) {
                o[mt][nn][0] *= alpha0; o[mt][nn][1] *= alpha0;
                o[mt][nn][2] *= alpha1; o[mt][nn][3] *= alpha1;
            }
            #pragma unroll
            for (int kk = 0; kk < PK; ++kk) {
                pa[mt][kk][0] = pack_f16x2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                pa[mt][kk][1] = pack_f16x2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                pa[mt][kk][2] = pack_f16x2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                pa[mt][kk][3] = pack_f16x2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
        }
        wait_all_but_last_copy();
        __syncthreads();

        #pragma unroll
        for (int kk = 0; kk < PK; ++kk) {
            #pragma unroll
            for (int nn = 0; nn < ON; nn += 2) {
                unsigned vb[4];
                ldmatrix_x4_trans(vb, Vs + (16 * kk + (lane & 15)) * STRIDE + 8 * nn + ((lane >> 4) << 3));
                #pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma_m16n8k16(o[mt][nn], pa[mt][kk], vb);
                    mma_m16n8k16(o[mt][nn + 1], pa[mt][kk], vb + 2);
                }
            }
        }
        __syncthreads();
        if (j + 1 < tiles) load_tile<D, NT, BCT>(Vs, V, k0 + BCT, n);
        commit_copies();
    }

    #pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        const int r0 = q0 + wr + 16 * mt + g, r1 = r0 + 8;
        float l0 = l[mt][0], l1 = l[mt][1];
        l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
        l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
        l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
        l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
        const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
        #pragma unroll
        for (int nn = 0; nn < ON; ++nn) {
            const int c = 8 * nn + 2 * t;
            if (r0 < n) *reinterpret_cast<unsigned*>(O + (size_t)r0 * D + c) = pack_f16x2(o[mt][nn][0] * inv0, o[mt][nn][1] * inv0);
            if (r1 < n) *reinterpret_cast<unsigned*>(O + (size_t)r1 * D + c) = pack_f16x2(o[mt][nn][2] * inv1, o[mt][nn][3] * inv1);
        }
    }
    if (tile_counter != nullptr && threadIdx.x == 0)
        atomicAdd(tile_counter, tiles);
}

template <int N> __device__ __forceinline__ void wait_copies()
{
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N));
#endif
}

template <int D, int NW, int MT, int BCT, bool QREG, int STAGES>
__device__ __forceinline__ void flash_p(const f16* __restrict__ Q, const f16* __restrict__ K,
                                        const f16* __restrict__ V, f16* __restrict__ O,
                                        int n, float scale, int causal, int* tile_counter)
{
    constexpr int BR = 16 * MT * NW, NT = 32 * NW;
    constexpr int STRIDE = D + 8, DK = D / 16, SN = BCT / 8, PK = BCT / 16, ON = D / 8;
    extern __shared__ uint4 shared16[];
    f16* Qs = reinterpret_cast<f16*>(shared16);
    f16* Ks = Qs + BR * STRIDE;
    f16* Vs = Ks + STAGES * BCT * STRIDE;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BR;
    const size_t head = (size_t)blockIdx.x * n * D;
    Q += head; K += head; V += head; O += head;
    const int wr = 16 * MT * warp;                       // the warp's first row in the Q tile
    const float scale_log2 = scale * 1.4426950408889634f;

    const int kv_end = causal ? min(n, q0 + BR) : n;
    const int tiles = (kv_end + BCT - 1) / BCT;
    load_tile<D, NT, BR>(Qs, Q, q0, n);
    #pragma unroll
    for (int st = 0; st < STAGES - 1; ++st) {        // tiles 0 .. STAGES - 2, one group each (Q in the first)
        if (st < tiles) {
            load_tile<D, NT, BCT>(Ks + st * BCT * STRIDE, K, st * BCT, n);
            load_tile<D, NT, BCT>(Vs + st * BCT * STRIDE, V, st * BCT, n);
        }
        commit_copies();
    }

    float o[MT][ON][4];
    float m[MT][2], l[MT][2];
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        #pragma unroll
        for (int nn = 0; nn < ON; ++nn)
            o[mt][nn][0] = o[mt][nn][1] = o[mt][nn][2] = o[mt][nn][3] = 0.0f;
        m[mt][0] = m[mt][1] = NEG_INF;
        l[mt][0] = l[mt][1] = 0.0f;
    }
    unsigned qr[QREG ? MT : 1][QREG ? DK : 1][4];
    if (QREG) {
        wait_copies<STAGES - 2>();
        __syncthreads();
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            #pragma unroll
            for (int kk = 0; kk < DK; ++kk)
                ldmatrix_x4(qr[QREG ? mt : 0][QREG ? kk : 0], Qs + (wr + 16 * mt + (lane & 15)) * STRIDE + 16 * kk + ((lane >> 4) << 3));
    }

    for (int j = 0; j < tiles; ++j) {
        const int k0 = j * BCT;
        wait_copies<STAGES - 2>();                      // tile j has landed
        __syncthreads();                                // ... for all; every warp is done with tile j - 1
        {
            const int jn = j + STAGES - 1, b = jn % STAGES;
            if (jn < tiles) {
                load_tile<D, NT, BCT>(Ks + b * BCT * STRIDE, K, jn * BCT, n);
                load_tile<D, NT, BCT>(Vs + b * BCT * STRIDE, V, jn * BCT, n);
            }
            commit_copies();
        }
        const f16* Kt = Ks + (j % STAGES) * BCT * STRIDE;
        const f16* Vt = Vs + (j % STAGES) * BCT * STRIDE;

        float s[MT][SN][4];
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            #pragma unroll
            for (int nn = 0; nn < SN; ++nn)
                s[mt][nn][0] = s[mt][nn][1] = s[mt][nn][2] = s[mt][nn][3] = 0.0f;
        #pragma unroll
        for (int kk = 0; kk < DK; ++kk) {
            unsigned qa[MT][4];
            #pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                if (QREG) {
                    #pragma unroll
                    for (int i = 0; i < 4; ++i) qa[mt][i] = qr[QREG ? mt : 0][QREG ? kk : 0][i];
                } else {
                    ldmatrix_x4(qa[mt], Qs + (wr + 16 * mt + (lane & 15)) * STRIDE + 16 * kk + ((lane >> 4) << 3));
                }
            }
            #pragma unroll
            for (int nn = 0; nn < SN; nn += 2) {
                unsigned kb[4];
                ldmatrix_x4(kb, Kt + (8 * nn + (lane & 7) + ((lane >> 4) << 3)) * STRIDE + 16 * kk + ((lane >> 3) & 1) * 8);
                #pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma_m16n8k16(s[mt][nn], qa[mt], kb);
                    mma_m16n8k16(s[mt][nn + 1], qa[mt], kb + 2);
                }
            }
        }

        const bool edge = k0 + BCT > n || (causal && k0 + BCT - 1 > q0);
        unsigned pa[MT][PK][4];
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            const int r0 = q0 + wr + 16 * mt + g, r1 = r0 + 8;
            float mx0 = NEG_INF, mx1 = NEG_INF;
            #pragma unroll
            for (int nn = 0; nn < SN; ++nn) {
                #pragma unroll
                for (int e = 0; e < 4; ++e) {
                    float v = s[mt][nn][e] * scale_log2;
                    const int key = k0 + 8 * nn + 2 * t + (e & 1), row = e < 2 ? r0 : r1;
                    if (edge && (key >= n || (causal && key > row))) v = NEG_INF;
                    s[mt][nn][e] = v;
                    if (e < 2) mx0 = fmaxf(mx0, v); else mx1 = fmaxf(mx1, v);
                }
            }
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
            const float mn0 = fmaxf(m[mt][0], mx0), mn1 = fmaxf(m[mt][1], mx1);
            const float mu0 = mn0 == NEG_INF ? 0.0f : mn0, mu1 = mn1 == NEG_INF ? 0.0f : mn1;
            const float alpha0 = fast_exp2(m[mt][0] - mu0), alpha1 = fast_exp2(m[mt][1] - mu1);
            m[mt][0] = mn0;
            m[mt][1] = mn1;
            float sum0 = 0.0f, sum1 = 0.0f;
            #pragma unroll
            for (int nn = 0; nn < SN; ++nn) {
                s[mt][nn][0] = fast_exp2(s[mt][nn][0] - mu0); sum0 += s[mt][nn][0];
                s[mt][nn][1] = fast_exp2(s[mt][nn][1] - mu0); sum0 += s[mt][nn][1];
                s[mt][nn][2] = fast_exp2(s[mt][nn][2] - mu1); sum1 += s[mt][nn][2];
                s[mt][nn][3] = fast_exp2(s[mt][nn][3] - mu1); sum1 += s[mt][nn][3];
            }
            l[mt][0] = l[mt][0] * alpha0 + sum0;
            l[mt][1] = l[mt][1] * alpha1 + sum1;
            #pragma unroll
            for (int nn = 0; nn < ON; ++nn) {
                o[mt][nn][0] *= alpha0; o[mt][nn][1] *= alpha0;
                o[mt][nn][2] *= alpha1; o[mt][nn][3] *= alpha1;
            }
            #pragma unroll
            for (int kk = 0; kk < PK; ++kk) {
                pa[mt][kk][0] = pack_f16x2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                pa[mt][kk][1] = pack_f16x2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                pa[mt][kk][2] = pack_f16x2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                pa[mt][kk][3] = pack_f16x2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
        }
        #pragma unroll
        for (int kk = 0; kk < PK; ++kk) {
            #pragma unroll
            for (int nn = 0; nn < ON; nn += 2) {
                unsigned vb[4];
                ldmatrix_x4_trans(vb, Vt + (16 * kk + (lane & 15)) * STRIDE + 8 * nn + ((lane >> 4) << 3));
                #pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma_m16n8k16(o[mt][nn], pa[mt][kk], vb);
                    mma_m16n8k16(o[mt][nn + 1], pa[mt][kk], vb + 2);
                }
            }
        }
    }

    #pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        const int r0 = q0 + wr + 16 * mt + g, r1 = r0 + 8;
        float l0 = l[mt][0], l1 = l[mt][1];
        l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
        l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
        l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
        l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
        const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
        #pragma unroll
        for (int nn = 0; nn < ON; ++nn) {
            const int c = 8 * nn + 2 * t;
            if (r0 < n) *reinterpret_cast<unsigned*>(O + (size_t)r0 * D + c) = pack_f16x2(o[mt][nn][0] * inv0, o[mt][nn][1] * inv0);
            if (r1 < n) *reinterpret_cast<unsigned*>(O + (size_t)r1 * D + c) = pack_f16x2(o[mt][nn][2] * inv1, o[mt][nn][3] * inv1);
        }
    }
    if (tile_counter != nullptr && threadIdx.x == 0)
        atomicAdd(tile_counter, tiles);
}

// ---- session 21: swizzled shared memory (no padding), scale folded into one FMA before ex2,
// masked and unmasked softmax as two instances, P packed with cvt.rn.f16x2.f32 on sm_80+.
// Tile row of D halves = D / 8 chunks of 16 bytes; chunk c of row r is stored at chunk c ^ (r & 7).
// FLAGS: 1 swizzled layout (else rows padded by 8 halves), 2 masked/unmasked softmax as two instances (else one,
// predicated), 4 O rescaled only when a row max of the warp changed, 8 P V with the m16 tiles outermost,
// 16 S = Q K^T with the m16 tiles outermost (K fragments loaded once per m16 tile)
template <int D, int FLAGS>
__device__ __forceinline__ int swz(int row, int chunk)
{
    return (FLAGS & 1) ? row * D + ((chunk ^ (row & 7)) << 3) : row * (D + 8) + (chunk << 3);
}

__device__ __forceinline__ unsigned pack_p(float lo, float hi)
{
#if __CUDA_ARCH__ >= 800
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));   // hi -> upper half, lo -> lower
    return r;
#else
    return pack_f16x2(lo, hi);
#endif
}

template <int D, int NT, int ROWS, int FLAGS>
__device__ __forceinline__ void load_tile_swz(f16* tile, const f16* src, int row0, int n)
{
    constexpr int CHUNKS = D / 8;
    #pragma unroll
    for (int c = threadIdx.x; c < ROWS * CHUNKS; c += NT) {
        const int r = c / CHUNKS, ch = c % CHUNKS, g = row0 + r;
        copy16(tile + swz<D, FLAGS>(r, ch), src + (size_t)(g < n ? g : 0) * D + ch * 8, g < n);
    }
}

// FLAGS 128: the same copy with the thread's column fixed and rows NT / CHUNKS apart (no division in the loop)
template <int D, int NT, int ROWS, int FLAGS>
__device__ __forceinline__ void load_tile_fast(f16* tile, const f16* src, int row0, int n)
{
    constexpr int CHUNKS = D / 8, STEP = NT / CHUNKS, TD = (FLAGS & 1) ? D : D + 8;
    static_assert(NT % CHUNKS == 0 && (ROWS * CHUNKS) % NT == 0, "tile shape");
    const int ch = threadIdx.x % CHUNKS, r = threadIdx.x / CHUNKS;
    const f16* from = src + (size_t)(row0 + r) * D + ch * 8;
    #pragma unroll
    for (int i = 0; i < ROWS / STEP; ++i) {
        const int rr = r + i * STEP, g = row0 + rr;
        f16* to = (FLAGS & 1) ? tile + rr * D + ((ch ^ (rr & 7)) << 3) : tile + rr * TD + ch * 8;
        copy16(to, g < n ? from + (size_t)i * STEP * D : src, g < n);
    }
}

// one online-softmax step on the S fragments of one m16 tile; m in raw score units
template <bool MASK, bool CRS, bool TREE, int SN, int ON, int PK>
__device__ __forceinline__ void softmax_step(float (&s)[SN][4], float (&m)[2], float (&l)[2], float (&o)[ON][4],
                                             unsigned (&pa)[PK][4], int k0, int r0, int n, int causal, float sl, int t,
                                             bool edge)
{
    float mx0 = NEG_INF, mx1 = NEG_INF;
    #pragma unroll
    for (int nn = 0; nn < SN; ++nn) {
        #pragma unroll
        for (int e = 0; e < 4; ++e) {
            if (MASK && edge) {
                const int key = k0 + 8 * nn + 2 * t + (e & 1), row = e < 2 ? r0 : r0 + 8;
                if (key >= n || (causal && key > row)) s[nn][e] = NEG_INF;
            }
        }
        if (!TREE) {
            mx0 = fmaxf(mx0, fmaxf(s[nn][0], s[nn][1]));
            mx1 = fmaxf(mx1, fmaxf(s[nn][2], s[nn][3]));
        }
    }
    if (TREE) {   // four independent chains of SN instead of one of 2 SN
        float a[4] = {s[0][0], s[0][1], s[0][2], s[0][3]};
        #pragma unroll
        for (int nn = 1; nn < SN; ++nn)
            #pragma unroll
            for (int e = 0; e < 4; ++e) a[e] = fmaxf(a[e], s[nn][e]);
        mx0 = fmaxf(a[0], a[1]);
        mx1 = fmaxf(a[2], a[3]);
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float mn0 = fmaxf(m[0], mx0), mn1 = fmaxf(m[1], mx1);
    const float mu0 = MASK && mn0 == NEG_INF ? 0.0f : mn0 * sl, mu1 = MASK && mn1 == NEG_INF ? 0.0f : mn1 * sl;
    const float alpha0 = fast_exp2(fmaf(m[0], sl, -mu0)), alpha1 = fast_exp2(fmaf(m[1], sl, -mu1));
    m[0] = mn0;
    m[1] = mn1;
    float sum0 = 0.0f, sum1 = 0.0f;
    if (TREE) {
        float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        #pragma unroll
        for (int nn = 0; nn < SN; ++nn)
            #pragma unroll
            for (int e = 0; e < 4; ++e) {
                s[nn][e] = fast_exp2(fmaf(s[nn][e], sl, e < 2 ? -mu0 : -mu1));
                a[e] += s[nn][e];
            }
        sum0 = a[0] + a[1];
        sum1 = a[2] + a[3];
    } else {
    #pragma unroll
    for (int nn = 0; nn < SN; ++nn) {
        s[nn][0] = fast_exp2(fmaf(s[nn][0], sl, -mu0)); sum0 += s[nn][0];
        s[nn][1] = fast_exp2(fmaf(s[nn][1], sl, -mu0)); sum0 += s[nn][1];
        s[nn][2] = fast_exp2(fmaf(s[nn][2], sl, -mu1)); sum1 += s[nn][2];
        s[nn][3] = fast_exp2(fmaf(s[nn][3], sl, -mu1)); sum1 += s[nn][3];
    }
    }
    l[0] = l[0] * alpha0 + sum0;
    l[1] = l[1] * alpha1 + sum1;
    if (!CRS || __any_sync(0xffffffffu, alpha0 != 1.0f || alpha1 != 1.0f)) {
        #pragma unroll
        for (int nn = 0; nn < ON; ++nn) {
            o[nn][0] *= alpha0; o[nn][1] *= alpha0;
            o[nn][2] *= alpha1; o[nn][3] *= alpha1;
        }
    }
    #pragma unroll
    for (int kk = 0; kk < PK; ++kk) {
        pa[kk][0] = pack_p(s[2 * kk][0], s[2 * kk][1]);
        pa[kk][1] = pack_p(s[2 * kk][2], s[2 * kk][3]);
        pa[kk][2] = pack_p(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pa[kk][3] = pack_p(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
}

// STAGES 1: the lesson's pipeline (one K and one V buffer, four barriers per tile);
// STAGES >= 2: STAGES K/V buffers, tile j + STAGES - 1 requested at the top of tile j, one barrier per tile.
template <int D, int NT, int ROWS, int FLAGS>
__device__ __forceinline__ void load_any(f16* tile, const f16* src, int row0, int n)
{
    if (FLAGS & 128) load_tile_fast<D, NT, ROWS, FLAGS>(tile, src, row0, n);
    else load_tile_swz<D, NT, ROWS, FLAGS>(tile, src, row0, n);
}

template <int D, int NW, int MT, int BCT, int STAGES, int FLAGS>
__device__ __forceinline__ void flash_s(const f16* __restrict__ Q, const f16* __restrict__ K,
                                        const f16* __restrict__ V, f16* __restrict__ O,
                                        int n, float scale, int causal, int* tile_counter)
{
    constexpr int BR = 16 * MT * NW, NT = 32 * NW;
    constexpr int DK = D / 16, SN = BCT / 8, PK = BCT / 16, ON = D / 8;
    extern __shared__ uint4 shared16[];
    f16* Qs = reinterpret_cast<f16*>(shared16);
    constexpr int TD = (FLAGS & 1) ? D : D + 8;     // row stride of a tile
    f16* Ks = Qs + BR * TD;
    f16* Vs = Ks + STAGES * BCT * TD;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BR;
    const size_t head = (size_t)blockIdx.x * n * D;
    Q += head; K += head; V += head; O += head;
    const int wr = 16 * MT * warp;
    const float sl = scale * 1.4426950408889634f;

    const int kv_end = causal ? min(n, q0 + BR) : n;
    const int tiles = (kv_end + BCT - 1) / BCT;
    load_any<D, NT, BR, FLAGS>(Qs, Q, q0, n);
    if (STAGES == 1) {
        load_any<D, NT, BCT, FLAGS>(Ks, K, 0, n);
        commit_copies();
        load_any<D, NT, BCT, FLAGS>(Vs, V, 0, n);
        commit_copies();
    } else {
        #pragma unroll
        for (int st = 0; st < STAGES - 1; ++st) {
            if (st < tiles) {
                load_any<D, NT, BCT, FLAGS>(Ks + st * BCT * TD, K, st * BCT, n);
                load_any<D, NT, BCT, FLAGS>(Vs + st * BCT * TD, V, st * BCT, n);
            }
            commit_copies();
        }
    }

    float o[MT][ON][4];
    float m[MT][2], l[MT][2];
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        #pragma unroll
        for (int nn = 0; nn < ON; ++nn)
            o[mt][nn][0] = o[mt][nn][1] = o[mt][nn][2] = o[mt][nn][3] = 0.0f;
        m[mt][0] = m[mt][1] = NEG_INF;
        l[mt][0] = l[mt][1] = 0.0f;
    }

    for (int j = 0; j < tiles; ++j) {
        const int k0 = j * BCT;
        const f16* Kt = Ks + (STAGES == 1 ? 0 : (j % STAGES) * BCT * TD);
        const f16* Vt = Vs + (STAGES == 1 ? 0 : (j % STAGES) * BCT * TD);
        if (STAGES == 1) {
            wait_all_but_last_copy();
            __syncthreads();
        } else {
            wait_copies<STAGES - 2>();
            __syncthreads();
            const int jn = j + STAGES - 1, b = jn % STAGES;
            if (jn < tiles) {
                load_any<D, NT, BCT, FLAGS>(Ks + b * BCT * TD, K, jn * BCT, n);
                load_any<D, NT, BCT, FLAGS>(Vs + b * BCT * TD, V, jn * BCT, n);
            }
            commit_copies();
        }

        float s[MT][SN][4];
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            #pragma unroll
            for (int nn = 0; nn < SN; ++nn)
                s[mt][nn][0] = s[mt][nn][1] = s[mt][nn][2] = s[mt][nn][3] = 0.0f;
        if (FLAGS & 16) {
            #pragma unroll
            for (int mt = 0; mt < MT; ++mt)
                #pragma unroll
                for (int kk = 0; kk < DK; ++kk) {
                    unsigned qa[4];
                    ldmatrix_x4(qa, Qs + swz<D, FLAGS>(wr + 16 * mt + (lane & 15), 2 * kk + (lane >> 4)));
                    #pragma unroll
                    for (int nn = 0; nn < SN; nn += 2) {
                        unsigned kb[4];
                        ldmatrix_x4(kb, Kt + swz<D, FLAGS>(8 * nn + (lane & 7) + ((lane >> 4) << 3), 2 * kk + ((lane >> 3) & 1)));
                        mma_m16n8k16(s[mt][nn], qa, kb);
                        mma_m16n8k16(s[mt][nn + 1], qa, kb + 2);
                    }
                }
        } else {
        #pragma unroll
        for (int kk = 0; kk < DK; ++kk) {
            unsigned qa[MT][4];
            #pragma unroll
            for (int mt = 0; mt < MT; ++mt)
                ldmatrix_x4(qa[mt], Qs + swz<D, FLAGS>(wr + 16 * mt + (lane & 15), 2 * kk + (lane >> 4)));
            #pragma unroll
            for (int nn = 0; nn < SN; nn += 2) {
                unsigned kb[4];
                ldmatrix_x4(kb, Kt + swz<D, FLAGS>(8 * nn + (lane & 7) + ((lane >> 4) << 3), 2 * kk + ((lane >> 3) & 1)));
                #pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma_m16n8k16(s[mt][nn], qa[mt], kb);
                    mma_m16n8k16(s[mt][nn + 1], qa[mt], kb + 2);
                }
            }
        }
        }
        if (STAGES == 1) {
            __syncthreads();
            if (j + 1 < tiles) load_any<D, NT, BCT, FLAGS>(Ks, K, k0 + BCT, n);
            commit_copies();
        }

        const bool edge = k0 + BCT > n || (causal && k0 + BCT - 1 > q0 + wr);
        unsigned pa[MT][PK][4];
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            const int r0 = q0 + wr + 16 * mt + g;
            constexpr bool CRS = (FLAGS & 4) != 0, TREE = (FLAGS & 32) != 0;
            if (FLAGS & 64) break;
            if (!(FLAGS & 2)) softmax_step<true, CRS, TREE>(s[mt], m[mt], l[mt], o[mt], pa[mt], k0, r0, n, causal, sl, t, edge);
            else if (edge) softmax_step<true, CRS, TREE>(s[mt], m[mt], l[mt], o[mt], pa[mt], k0, r0, n, causal, sl, t, true);
            else softmax_step<false, CRS, TREE>(s[mt], m[mt], l[mt], o[mt], pa[mt], k0, r0, n, causal, sl, t, false);
        }
        if (FLAGS & 64) {   // one branch for all m16 tiles: their softmax steps share a basic block
            constexpr bool CRS = (FLAGS & 4) != 0, TREE = (FLAGS & 32) != 0;
            if (edge) {
                #pragma unroll
                for (int mt = 0; mt < MT; ++mt)
                    softmax_step<true, CRS, TREE>(s[mt], m[mt], l[mt], o[mt], pa[mt], k0, q0 + wr + 16 * mt + g, n, causal, sl, t, true);
            } else {
                #pragma unroll
                for (int mt = 0; mt < MT; ++mt)
                    softmax_step<false, CRS, TREE>(s[mt], m[mt], l[mt], o[mt], pa[mt], k0, q0 + wr + 16 * mt + g, n, causal, sl, t, false);
            }
        }
        if (STAGES == 1) {
            wait_all_but_last_copy();
            __syncthreads();
        }
        if (FLAGS & 8) {
            #pragma unroll
            for (int mt = 0; mt < MT; ++mt)
                #pragma unroll
                for (int kk = 0; kk < PK; ++kk)
                    #pragma unroll
                    for (int nn = 0; nn < ON; nn += 2) {
                        unsigned vb[4];
                        ldmatrix_x4_trans(vb, Vt + swz<D, FLAGS>(16 * kk + (lane & 15), nn + (lane >> 4)));
                        mma_m16n8k16(o[mt][nn], pa[mt][kk], vb);
                        mma_m16n8k16(o[mt][nn + 1], pa[mt][kk], vb + 2);
                    }
        } else {
        #pragma unroll
        for (int kk = 0; kk < PK; ++kk) {
            #pragma unroll
            for (int nn = 0; nn < ON; nn += 2) {
                unsigned vb[4];
                ldmatrix_x4_trans(vb, Vt + swz<D, FLAGS>(16 * kk + (lane & 15), nn + (lane >> 4)));
                #pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma_m16n8k16(o[mt][nn], pa[mt][kk], vb);
                    mma_m16n8k16(o[mt][nn + 1], pa[mt][kk], vb + 2);
                }
            }
        }
        }
        if (STAGES == 1) {
            __syncthreads();
            if (j + 1 < tiles) load_any<D, NT, BCT, FLAGS>(Vs, V, k0 + BCT, n);
            commit_copies();
        }
    }

    #pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        const int r0 = q0 + wr + 16 * mt + g, r1 = r0 + 8;
        float l0 = l[mt][0], l1 = l[mt][1];
        l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
        l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
        l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
        l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
        const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
        #pragma unroll
        for (int nn = 0; nn < ON; ++nn) {
            const int c = 8 * nn + 2 * t;
            if (r0 < n) *reinterpret_cast<unsigned*>(O + (size_t)r0 * D + c) = pack_p(o[mt][nn][0] * inv0, o[mt][nn][1] * inv0);
            if (r1 < n) *reinterpret_cast<unsigned*>(O + (size_t)r1 * D + c) = pack_p(o[mt][nn][2] * inv1, o[mt][nn][3] * inv1);
        }
    }
    if (tile_counter != nullptr && threadIdx.x == 0)
        atomicAdd(tile_counter, tiles);
}
