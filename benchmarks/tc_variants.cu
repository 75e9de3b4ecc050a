// Variants of lesson 09's FlashAttention kernel (helpers are prepended from the lesson's FLASH_TC_SRC).
// MT m16 tiles (16 query rows each) per warp: every K/V B fragment from ldmatrix feeds MT * 2 MMAs.
// QREG: Q's A fragments stay in registers for the whole loop (loaded once).
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
