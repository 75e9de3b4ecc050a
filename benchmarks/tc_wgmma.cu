// Lesson 09's FlashAttention forward on Hopper's warpgroup MMA (wgmma, sm_90a): a candidate for issue 30
// (>= 400 TFLOP/s at n = 16384, d = 128, non-causal on the H200), beside the lesson's mma.sync kernel, which
// stays the T4 / sm_80 path and the students' skeleton. benchmarks/tc_wgmma.py prepends the wgmma wrappers
// (wgmma_ss<N>, wgmma_rs<N>: one operand list per N) and instantiates the kernels; it also says how to run it.
//
// A block of NWG warpgroups (128 threads each) owns BR = 64 * NWG query rows of one head; warpgroup w owns rows
// 64w .. 64w + 63, and inside it warp v rows 16v .. 16v + 15, lane 4g + t rows g and g + 8 of those (the
// accumulator layout of wgmma m64nNk16: element (row, col) of an n8 column tile j is register 4j + 2 * (row is
// g + 8) + (col is odd), col = 8j + 2t (+1)).
// Every operand in shared memory is stored in 128-byte-swizzled "panels" of 64 half columns: row r of a panel is
// 128 bytes at r * 128, its 16-byte chunk c at ((c ^ (r & 7)) * 16); a tile of D columns is D / 64 panels, one
// after the other, each 1024-byte aligned. S = Q K^T reads Q and K K-major from shared memory (both descriptors);
// O += P V takes P from registers (the S accumulators converted to f16 are exactly wgmma's A fragments) and V
// N-major (imm-trans-b = 1) from the same kind of panels.
// K/V tiles of BC rows stream through shared memory with cp.async: tile j + 1 is requested at the top of tile j,
// one barrier per tile. flash_wgmma runs the two products and the softmax one after another; flash_wgmma_overlap
// runs the softmax of tile j while O += P V of tile j - 1 is in flight (FlashAttention-3's intra-warpgroup overlap).
#define NEG_INF (-__int_as_float(0x7f800000))
typedef unsigned short f16;
typedef unsigned long long u64;

__device__ __forceinline__ unsigned pack_f16x2(float lo, float hi)
{
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));   // hi in the upper 16 bits
    return r;
}

__device__ __forceinline__ float fast_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ unsigned smem_address(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// A shared-memory matrix descriptor, 128-byte swizzle: start address, leading and stride byte offsets (>> 4).
__device__ __forceinline__ u64 descriptor(unsigned address, unsigned leading, unsigned stride)
{
    return (u64)((address & 0x3FFFF) >> 4) | ((u64)(leading >> 4) << 16) | ((u64)(stride >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait()   // until at most N committed groups are in flight
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory");
}
// keeps the compiler from moving reads or writes of accumulator registers across a wgmma fence or wait
template <int R> __device__ __forceinline__ void fence_registers(float (&r)[R])
{
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(r[i]) :: "memory");
}
template <int K> __device__ __forceinline__ void fence_fragments(unsigned (&r)[K][4])
{
#pragma unroll
    for (int i = 0; i < K; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(r[i][j]) :: "memory");
}

__device__ __forceinline__ void copy16(unsigned dst, const f16* src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void wait_copies() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
// the async proxy (wgmma) sees what the generic proxy (cp.async, st.shared) wrote
__device__ __forceinline__ void fence_async_proxy() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// rows row0 .. row0 + ROWS - 1 of a (n, D) matrix into ROWS-row swizzled panels at `tile` (zeros past n)
template <int D, int NT, int ROWS>
__device__ __forceinline__ void load_panels(unsigned tile, const f16* src, int row0, int n)
{
    constexpr int CHUNKS = D / 8, COUNT = ROWS * CHUNKS;
#pragma unroll
    for (int i = 0; i < (COUNT + NT - 1) / NT; ++i) {
        const int e = threadIdx.x + i * NT;
        if (COUNT % NT != 0 && e >= COUNT) break;
        const int r = e / CHUNKS, cc = e % CHUNKS, g = row0 + r;
        const unsigned dst = tile + (cc >> 3) * (ROWS * 128) + r * 128 + (((cc & 7) ^ (r & 7)) << 4);
        copy16(dst, src + (size_t)(g < n ? g : 0) * D + cc * 8, g < n);
    }
}

// S = Q K^T of one warpgroup's 64 rows and a K tile of BCT keys at Kt: D / 16 k-steps, a k-step 32 bytes into a
// panel (four per panel); issued and committed, not waited for.
template <int D, int BCT, int BR>
__device__ __forceinline__ void issue_scores(float (&s)[BCT / 2], unsigned Qs, unsigned Kt, int wg)
{
    wgmma_fence();
    fence_registers(s);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        const unsigned k_bytes = (kk & 3) * 32;
        const u64 a = descriptor(Qs + (kk >> 2) * (BR * 128) + wg * 64 * 128 + k_bytes, 16, 1024);
        const u64 b = descriptor(Kt + (kk >> 2) * (BCT * 128) + k_bytes, 16, 1024);
        wgmma_ss<BCT>(s, a, b, kk > 0);
    }
    wgmma_commit();
}

// O += P V with P in registers and a V tile of BCT keys at Vt: BCT / 16 k-steps of 16 keys = 2048 bytes of a V
// panel; V's D / 64 panels are BCT * 128 apart. Issued and committed, not waited for.
template <int D, int BCT>
__device__ __forceinline__ void issue_pv(float (&o)[D / 2], const unsigned (&p)[BCT / 16][4], unsigned Vt)
{
    wgmma_fence();
    fence_registers(o);
#pragma unroll
    for (int kk = 0; kk < BCT / 16; ++kk)
        wgmma_rs<D>(o, p[kk], descriptor(Vt + kk * 16 * 128, BCT * 128, 1024));
    wgmma_commit();
}

// The online softmax of one tile's scores: masks (keys past n, and with `causal` keys after the row) where `edge`,
// the rows' running max m and sum l (rows a: registers 4j, 4j + 1; b: 4j + 2, 4j + 3; a quad's four lanes share a
// row), P as wgmma A fragments, and the factors the O accumulators must be rescaled by.
// The scores are masked into a copy: writing the accumulator registers of a wgmma while another is in flight
// makes ptxas serialise every wgmma of the kernel (its warning C7515).
template <int BCT>
__device__ __forceinline__ void softmax_tile(const float (&scores)[BCT / 2], unsigned (&p)[BCT / 16][4], int kv0,
                                             int n, int causal, bool edge, int row_a, int row_b, float sl, float& m_a,
                                             float& m_b, float& l_a, float& l_b, float& corr_a, float& corr_b)
{
    constexpr int SN = BCT / 8;
    const int t = threadIdx.x & 3;
    float s[BCT / 2];
#pragma unroll
    for (int i = 0; i < BCT / 2; ++i) s[i] = scores[i];
    if (edge) {
#pragma unroll
        for (int jt = 0; jt < SN; ++jt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int col = kv0 + 8 * jt + 2 * t + e;
                if (col >= n || (causal && col > row_a)) s[4 * jt + e] = NEG_INF;
                if (col >= n || (causal && col > row_b)) s[4 * jt + 2 + e] = NEG_INF;
            }
    }
    float mx_a = NEG_INF, mx_b = NEG_INF;
#pragma unroll
    for (int jt = 0; jt < SN; ++jt) {
        mx_a = fmaxf(mx_a, fmaxf(s[4 * jt], s[4 * jt + 1]));
        mx_b = fmaxf(mx_b, fmaxf(s[4 * jt + 2], s[4 * jt + 3]));
    }
#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
        mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, off));
        mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, off));
    }
    const float new_a = fmaxf(m_a, mx_a * sl), new_b = fmaxf(m_b, mx_b * sl);   // finite: key 0 <= every row
    corr_a = fast_exp2(m_a - new_a);
    corr_b = fast_exp2(m_b - new_b);
    m_a = new_a; m_b = new_b;
    l_a *= corr_a; l_b *= corr_b;
#pragma unroll
    for (int jt = 0; jt < SN; ++jt) {
        const float p0 = fast_exp2(fmaf(s[4 * jt], sl, -new_a)), p1 = fast_exp2(fmaf(s[4 * jt + 1], sl, -new_a));
        const float p2 = fast_exp2(fmaf(s[4 * jt + 2], sl, -new_b)), p3 = fast_exp2(fmaf(s[4 * jt + 3], sl, -new_b));
        l_a += p0 + p1; l_b += p2 + p3;
        p[jt >> 1][(jt & 1) * 2] = pack_f16x2(p0, p1);       // A fragment of k-step jt / 2: rows a, then b,
        p[jt >> 1][(jt & 1) * 2 + 1] = pack_f16x2(p2, p3);   // columns 2t (+1), then 8 + 2t (+1)
    }
}

template <int D>
__device__ __forceinline__ void rescale(float (&o)[D / 2], float corr_a, float corr_b)
{
#pragma unroll
    for (int jt = 0; jt < D / 8; ++jt) {
        o[4 * jt] *= corr_a; o[4 * jt + 1] *= corr_a;
        o[4 * jt + 2] *= corr_b; o[4 * jt + 3] *= corr_b;
    }
}

// O / l of rows a and b into the output (rows past n are not written)
template <int D>
__device__ __forceinline__ void store_rows(f16* O, const float (&o)[D / 2], float l_a, float l_b, int row_a,
                                           int row_b, int n)
{
    const int t = threadIdx.x & 3;
#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
        l_a += __shfl_xor_sync(0xffffffffu, l_a, off);
        l_b += __shfl_xor_sync(0xffffffffu, l_b, off);
    }
    const float inv_a = 1.0f / l_a, inv_b = 1.0f / l_b;
#pragma unroll
    for (int jt = 0; jt < D / 8; ++jt) {
        const int col = 8 * jt + 2 * t;
        if (row_a < n) *reinterpret_cast<unsigned*>(O + (size_t)row_a * D + col) = pack_f16x2(o[4 * jt] * inv_a, o[4 * jt + 1] * inv_a);
        if (row_b < n) *reinterpret_cast<unsigned*>(O + (size_t)row_b * D + col) = pack_f16x2(o[4 * jt + 2] * inv_b, o[4 * jt + 3] * inv_b);
    }
}

// Where a block's tiles and rows are: Q (64 * NWG rows), then the K tiles, then the V tiles, in 1024-byte-aligned
// shared memory; warpgroup wg, and this thread's two rows a and b; the K/V tiles the block's rows need. Requests
// the block's Q and its head's first K and V tiles.
template <int D, int BCT, int NWG>
struct Block {
    unsigned Qs, Ks, Vs;
    int wg, q0, row_a, row_b, wg_first_row, tiles;
    size_t head;                                                 // this block's head: offset of its (n, D)
    __device__ __forceinline__ Block(int n, int causal, const f16* Q, const f16* K, const f16* V)
    {
        extern __shared__ __align__(1024) unsigned char shared_bytes[];
        Qs = (smem_address(shared_bytes) + 1023) & ~1023u;
        Ks = Qs + 64 * NWG * D * 2;
        Vs = Ks + 2 * BCT * D * 2;                               // two K tiles
        wg = threadIdx.x >> 7;
        q0 = (gridDim.y - 1 - blockIdx.y) * 64 * NWG;          // the longest causal rows first
        wg_first_row = q0 + 64 * wg;
        row_a = wg_first_row + 16 * ((threadIdx.x >> 5) & 3) + ((threadIdx.x & 31) >> 2);
        row_b = row_a + 8;
        const int kv_end = causal ? min(n, q0 + 64 * NWG) : n;
        tiles = (kv_end + BCT - 1) / BCT;
        head = (size_t)blockIdx.x * n * D;
        load_panels<D, 128 * NWG, 64 * NWG>(Qs, Q + head, q0, n);
        load_panels<D, 128 * NWG, BCT>(Ks, K + head, 0, n);
        load_panels<D, 128 * NWG, BCT>(Vs, V + head, 0, n);
        commit_copies();
    }
};

// The plain kernel: per tile S = Q K^T, wait, softmax, O += P V, wait. K/V tiles in two stages (K0 K1 V0 V1).
template <int D, int BCT, int NWG>
__device__ __forceinline__ void flash_wgmma(const f16* __restrict__ Q, const f16* __restrict__ K,
                                            const f16* __restrict__ V, f16* __restrict__ O,
                                            int n, float scale, int causal)
{
    constexpr int BR = 64 * NWG, NT = 128 * NWG;
    constexpr unsigned TILE = BCT * D * 2;
    const Block<D, BCT, NWG> b(n, causal, Q, K, V);      // Q, K0 and V0 requested
    Q += b.head; K += b.head; V += b.head; O += b.head;
    const unsigned Qs = b.Qs, Ks = b.Ks, Vs = b.Vs;
    const int wg = b.wg, row_a = b.row_a, row_b = b.row_b, wg_first_row = b.wg_first_row, tiles = b.tiles;
    const int wg_last_row = wg_first_row + 63;
    const float sl = scale * 1.4426950408889634f;        // scores in log2 units: exp(x s) = 2^(x s log2 e)

    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
    float m_a = NEG_INF, m_b = NEG_INF, l_a = 0.0f, l_b = 0.0f;

    for (int j = 0; j < tiles; ++j) {
        wait_copies();          // this thread's copies of tile j (and Q) have landed
        fence_async_proxy();
        __syncthreads();        // everyone's have; and everyone is done with tile j - 1's buffers
        if (j + 1 < tiles) {
            const unsigned stage = ((j + 1) & 1) * TILE;
            load_panels<D, NT, BCT>(Ks + stage, K, (j + 1) * BCT, n);
            load_panels<D, NT, BCT>(Vs + stage, V, (j + 1) * BCT, n);
            commit_copies();
        }
        const int kv0 = j * BCT;
        if (causal && kv0 > wg_last_row) continue;   // the whole tile is above this warpgroup's diagonal
        float s[BCT / 2];
        issue_scores<D, BCT, BR>(s, Qs, Ks + (j & 1) * TILE, wg);
        wgmma_wait<0>();
        fence_registers(s);
        unsigned p[BCT / 16][4];
        float corr_a, corr_b;
        softmax_tile<BCT>(s, p, kv0, n, causal, kv0 + BCT > n || (causal && kv0 + BCT - 1 > wg_first_row),
                          row_a, row_b, sl, m_a, m_b, l_a, l_b, corr_a, corr_b);
        rescale<D>(o, corr_a, corr_b);
        issue_pv<D, BCT>(o, p, Vs + (j & 1) * TILE);
        wgmma_wait<0>();
        fence_registers(o);
    }
    store_rows<D>(O, o, l_a, l_b, row_a, row_b, n);
}

// FlashAttention-3's intra-warpgroup overlap: the softmax of tile j runs while O += P(j-1) V(j-1) is in flight.
// Per tile: issue S(j) = Q K(j)^T, issue O += P(j-1) V(j-1), wait for S(j) (one group may stay in flight), softmax
// of S(j) into a second set of P registers, wait for O, rescale it. K tiles in two stages, V tiles in three (V(j-1)
// is read while V(j+1) lands), one barrier per tile as in the plain kernel.
template <int D, int BCT, int NWG>
__device__ __forceinline__ void flash_wgmma_overlap(const f16* __restrict__ Q, const f16* __restrict__ K,
                                                    const f16* __restrict__ V, f16* __restrict__ O,
                                                    int n, float scale, int causal)
{
    constexpr int BR = 64 * NWG, NT = 128 * NWG;
    constexpr unsigned TILE = BCT * D * 2;
    const Block<D, BCT, NWG> b(n, causal, Q, K, V);      // Q, K0 and V0 requested
    Q += b.head; K += b.head; V += b.head; O += b.head;
    const unsigned Qs = b.Qs, Ks = b.Ks, Vs = b.Vs;
    const int wg = b.wg, row_a = b.row_a, row_b = b.row_b, wg_first_row = b.wg_first_row, tiles = b.tiles;
    const int wg_last_row = wg_first_row + 63;
    const float sl = scale * 1.4426950408889634f;        // scores in log2 units: exp(x s) = 2^(x s log2 e)
    const int wg_tiles = causal ? min(tiles, wg_last_row / BCT + 1) : tiles;   // tiles this warpgroup needs

    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
    float m_a = NEG_INF, m_b = NEG_INF, l_a = 0.0f, l_b = 0.0f, corr_a, corr_b;
    float s[BCT / 2];
    unsigned p[BCT / 16][4];

    wait_copies();
    fence_async_proxy();
    __syncthreads();
    if (tiles > 1) {
        load_panels<D, NT, BCT>(Ks + TILE, K, BCT, n);
        load_panels<D, NT, BCT>(Vs + TILE, V, BCT, n);
        commit_copies();
    }
    issue_scores<D, BCT, BR>(s, Qs, Ks, wg);
    wgmma_wait<0>();
    fence_registers(s);
    softmax_tile<BCT>(s, p, 0, n, causal, BCT > n || (causal && BCT - 1 > wg_first_row), row_a, row_b, sl,
                      m_a, m_b, l_a, l_b, corr_a, corr_b);   // O is zero: nothing to rescale

    for (int j = 1; j < tiles; ++j) {
        wait_copies();          // tile j has landed (this thread's copies, then everyone's)
        fence_async_proxy();
        __syncthreads();        // and every warpgroup is done with K(j - 1) and V(j - 2)
        if (j + 1 < tiles) {
            load_panels<D, NT, BCT>(Ks + ((j + 1) & 1) * TILE, K, (j + 1) * BCT, n);
            load_panels<D, NT, BCT>(Vs + ((j + 1) % 3) * TILE, V, (j + 1) * BCT, n);
            commit_copies();
        }
        if (j - 1 >= wg_tiles) continue;             // past this warpgroup's diagonal: nothing left to do
        const int kv0 = j * BCT;
        const bool scores = j < wg_tiles;
        if (scores) issue_scores<D, BCT, BR>(s, Qs, Ks + (j & 1) * TILE, wg);
        issue_pv<D, BCT>(o, p, Vs + ((j - 1) % 3) * TILE);
        if (scores) {
            wgmma_wait<1>();                          // S(j) is in; O += P(j-1) V(j-1) may still run
            fence_registers(s);
            unsigned p_next[BCT / 16][4];
            softmax_tile<BCT>(s, p_next, kv0, n, causal, kv0 + BCT > n || (causal && kv0 + BCT - 1 > wg_first_row),
                              row_a, row_b, sl, m_a, m_b, l_a, l_b, corr_a, corr_b);
            wgmma_wait<0>();
            fence_registers(o);
            fence_fragments(p);
            rescale<D>(o, corr_a, corr_b);
#pragma unroll
            for (int kk = 0; kk < BCT / 16; ++kk)
#pragma unroll
                for (int r = 0; r < 4; ++r) p[kk][r] = p_next[kk][r];
        } else {
            wgmma_wait<0>();
            fence_registers(o);
        }
    }
    if (wg_tiles == tiles) {                          // the last tile's O += P V
        issue_pv<D, BCT>(o, p, Vs + ((tiles - 1) % 3) * TILE);
        wgmma_wait<0>();
        fence_registers(o);
    }
    store_rows<D>(O, o, l_a, l_b, row_a, row_b, n);
}

// Checks of the two wgmma forms alone (benchmarks/tc_wgmma.py --selftest): C (64 x N, f32) = A (64 x 16) B with
// A, B f16 row-major in global memory. ss: A K-major and B given as (N, 16) K-major, both through panels, as
// S = Q K^T uses them. rs: A in registers, B (16, N) N-major through panels, as O += P V uses them.
template <int N>
__device__ __forceinline__ void selftest_store(float* C, const float (&c)[N / 2])
{
    const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int jt = 0; jt < N / 8; ++jt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            C[(16 * warp + g + 8 * (e >> 1)) * N + 8 * jt + 2 * t + (e & 1)] = c[4 * jt + e];
}

template <int N>
__device__ __forceinline__ void selftest_ss(const f16* A, const f16* Bt, float* C)
{
    extern __shared__ __align__(1024) unsigned char shared_bytes[];
    const unsigned base = (smem_address(shared_bytes) + 1023) & ~1023u;
    const unsigned As = base, Bs = base + 64 * 128;          // a k-step reads 32 bytes of each panel row
    load_panels<16, 128, 64>(As, A, 0, 64);
    load_panels<16, 128, N>(Bs, Bt, 0, N);
    commit_copies();
    wait_copies();
    fence_async_proxy();
    __syncthreads();
    float c[N / 2];
    wgmma_fence();
    fence_registers(c);
    wgmma_ss<N>(c, descriptor(As, 16, 1024), descriptor(Bs, 16, 1024), 0);
    wgmma_commit();
    wgmma_wait<0>();
    fence_registers(c);
    selftest_store<N>(C, c);
}

template <int N>
__device__ __forceinline__ void selftest_rs(const f16* A, const f16* B, float* C)
{
    extern __shared__ __align__(1024) unsigned char shared_bytes[];
    const unsigned base = (smem_address(shared_bytes) + 1023) & ~1023u;
    load_panels<N, 128, 16>(base, B, 0, 16);
    commit_copies();
    wait_copies();
    fence_async_proxy();
    __syncthreads();
    const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const f16* a_row = A + (16 * warp + g) * 16;
    unsigned a[4];
    a[0] = *reinterpret_cast<const unsigned*>(a_row + 2 * t);
    a[1] = *reinterpret_cast<const unsigned*>(a_row + 8 * 16 + 2 * t);
    a[2] = *reinterpret_cast<const unsigned*>(a_row + 8 + 2 * t);
    a[3] = *reinterpret_cast<const unsigned*>(a_row + 8 * 16 + 8 + 2 * t);
    float c[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; ++i) c[i] = 0.0f;
    wgmma_fence();
    fence_registers(c);
    wgmma_rs<N>(c, a, descriptor(base, 16 * 128, 1024));
    wgmma_commit();
    wgmma_wait<0>();
    fence_registers(c);
    selftest_store<N>(C, c);
}
