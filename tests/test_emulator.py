"""Does the PTX emulator (autograder.gpu.emulator) compute what the GPU computes?

Small CUDA C kernels (PTX from NVRTC at compute_75 and compute_80, no GPU needed) are run on the emulator and
compared with NumPy: exactly where the operation order is known, within the lessons' tolerances for the
lessons' reference kernels at their graded sizes.
"""
import math

import numpy as np
import pytest

from autograder.gpu import nvrtc
from autograder.gpu.emulator import launch

pytestmark = pytest.mark.skipif(nvrtc._NVRTC is None, reason="NVRTC is not installed")
ARCHS = ["compute_75", "compute_80"]


def run(source, kernel, grid, block, args, shared_bytes=0, arch="compute_75"):
    r = launch(nvrtc.ptx(source, arch=arch), kernel, grid, block, args, shared_bytes)
    assert r.ok, "\n".join(str(f) for f in r.findings)
    assert r.issued > 0
    return r


VECTOR_ADD = r'''
extern "C" __global__ void vadd(const float* a, const float* b, float* c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
'''


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("n", [1, 1000, 4096])
def test_vector_add_with_a_tail_guard(arch, n):
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    c = np.full(n, np.nan, dtype=np.float32)
    a0 = a.copy()
    run(VECTOR_ADD, "vadd", (n + 255) // 256, 256, [a, b, c, np.int32(n)], arch=arch)
    assert np.array_equal(c, a + b)  # float32 addition: bit-equal
    assert np.array_equal(a, a0)  # inputs are written back unchanged


BLOCK_SUM = r'''
extern "C" __global__ void block_sum(const float* x, float* out, int n)
{
    extern __shared__ float s[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) s[threadIdx.x] += s[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}
'''


def tree_sum(v: np.ndarray) -> np.float32:
    """The float32 sum in the tree order of BLOCK_SUM."""
    v = v.astype(np.float32).copy()
    while len(v) > 1:
        half = len(v) // 2
        v = v[:half] + v[half:]
    return v[0]


@pytest.mark.parametrize("arch", ARCHS)
def test_shared_memory_tree_reduction_with_dynamic_shared_memory(arch):
    n, threads = 3000, 128
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    blocks = (n + threads - 1) // threads
    out = np.zeros(blocks, dtype=np.float32)
    run(BLOCK_SUM, "block_sum", blocks, threads, [x, out, np.int32(n)], shared_bytes=threads * 4, arch=arch)
    padded = np.zeros(blocks * threads, np.float32)
    padded[:n] = x
    expected = np.array([tree_sum(padded[k * threads:(k + 1) * threads]) for k in range(blocks)])
    assert np.array_equal(out, expected)


def test_too_little_dynamic_shared_memory_is_out_of_bounds():
    x, out = np.ones(128, np.float32), np.zeros(1, np.float32)
    r = launch(nvrtc.ptx(BLOCK_SUM), "block_sum", 1, 128, [x, out, np.int32(128)], shared_bytes=256)
    assert [f.kind for f in r.findings] == ["shared_oob"]
    assert "динамической 256 Б" in r.findings[0].message


WARP_REDUCE = r'''
extern "C" __global__ void warp_sums(const float* x, float* out, int* lanes_with_data)
{
    float v = x[blockIdx.x * blockDim.x + threadIdx.x];
    for (int offset = 16; offset > 0; offset /= 2)
        v += __shfl_down_sync(0xffffffffu, v, offset);
    unsigned ballot = __ballot_sync(0xffffffffu, x[blockIdx.x * blockDim.x + threadIdx.x] > 0.0f);
    int lane = threadIdx.x & 31;
    if (lane == 0) {
        out[(blockIdx.x * blockDim.x + threadIdx.x) / 32] = v;
        lanes_with_data[(blockIdx.x * blockDim.x + threadIdx.x) / 32] = __popc(ballot);
    }
    float up = __shfl_up_sync(0xffffffffu, x[blockIdx.x * blockDim.x + threadIdx.x], 3);
    float idx = __shfl_sync(0xffffffffu, up, 31 - lane);
    if (__all_sync(0xffffffffu, lane < 32) && __any_sync(0xffffffffu, lane == 7))
        out[64 + blockIdx.x * blockDim.x + threadIdx.x] = idx;
}
'''


@pytest.mark.parametrize("arch", ARCHS)
def test_warp_shuffles_and_votes(arch):
    x = np.random.default_rng(2).standard_normal(64 * 2).astype(np.float32)
    out = np.zeros(64 + 128, np.float32)
    count = np.zeros(4, np.int32)
    run(WARP_REDUCE, "warp_sums", 2, 64, [x, out, count], arch=arch)
    for w in range(4):
        v = x[32 * w:32 * (w + 1)].copy()
        for offset in (16, 8, 4, 2, 1):  # shfl_down: lanes past the end keep their own value
            v = v + np.concatenate([v[offset:], v[32 - offset:]])
        assert out[w] == v[0]
        assert count[w] == int((x[32 * w:32 * (w + 1)] > 0).sum())
        up = np.concatenate([x[32 * w:32 * w + 3], x[32 * w:32 * w + 29]])
        assert np.array_equal(out[64 + 32 * w:64 + 32 * (w + 1)], up[::-1])


ATOMICS = r'''
extern "C" __global__ void atomics(const int* keys, const float* vals, int n, int* hist, float* total,
                                   int* minmax, unsigned* exch, int* cas_count)
{
    __shared__ int local_hist[16];
    if (threadIdx.x < 16) local_hist[threadIdx.x] = 0;
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicAdd(&local_hist[keys[i] & 15], 1);
        atomicAdd(total, vals[i]);
        atomicMin(&minmax[0], keys[i]);
        atomicMax(&minmax[1], keys[i]);
        atomicExch(exch, 7u);
        int old, assumed;                     // an atomicCAS loop: count one per thread
        do { assumed = *((volatile int*)cas_count); old = atomicCAS(cas_count, assumed, assumed + 1); }
        while (old != assumed);
    }
    __syncthreads();
    if (threadIdx.x < 16) atomicAdd(&hist[threadIdx.x], local_hist[threadIdx.x]);
}
'''


@pytest.mark.parametrize("arch", ARCHS)
def test_atomics_global_and_shared(arch):
    n = 700
    rng = np.random.default_rng(3)
    keys = rng.integers(-1000, 1000, n).astype(np.int32)
    vals = rng.integers(-8, 8, n).astype(np.float32)  # small integers: the float sum is exact in any order
    hist, total = np.zeros(16, np.int32), np.zeros(1, np.float32)
    minmax = np.array([2**31 - 1, -2**31], dtype=np.int32)
    exch, cas = np.zeros(1, np.uint32), np.zeros(1, np.int32)
    run(ATOMICS, "atomics", 3, 256, [keys, vals, np.int32(n), hist, total, minmax, exch, cas], arch=arch)
    assert np.array_equal(hist, np.bincount(keys & 15, minlength=16))
    assert total[0] == vals.sum()
    assert list(minmax) == [keys.min(), keys.max()]
    assert exch[0] == 7 and cas[0] == n


DIVERGENT_LOOP = r'''
extern "C" __global__ void collatz(const int* start, int* steps, int* parity, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long v = start[i];
    int k = 0;
    while (v != 1) {
        if (v % 2 == 0) v /= 2;
        else v = 3 * v + 1;
        ++k;
    }
    steps[i] = k;
    if (k % 3 == 0) parity[i] = -k;
    else if (k % 3 == 1) parity[i] = k * 2;
    else parity[i] = k / 2 - 100;
}
'''


def collatz_steps(v: int) -> int:
    k = 0
    while v != 1:
        v = v // 2 if v % 2 == 0 else 3 * v + 1
        k += 1
    return k


@pytest.mark.parametrize("arch", ARCHS)
def test_divergent_if_else_and_a_loop_with_a_different_trip_count_per_thread(arch):
    n = 300
    start = np.arange(1, n + 1, dtype=np.int32)
    steps, parity = np.zeros(n, np.int32), np.zeros(n, np.int32)
    r = run(DIVERGENT_LOOP, "collatz", 3, 128, [start, steps, parity, np.int32(n)], arch=arch)
    expected = np.array([collatz_steps(int(v)) for v in start])
    assert np.array_equal(steps, expected)
    assert np.array_equal(parity, np.where(expected % 3 == 0, -expected, np.where(expected % 3 == 1, 2 * expected,
                                                                                   expected // 2 - 100)))
    assert r.issued > 100  # every distinct path was issued on its own


INTEGERS = r'''
extern "C" __global__ void integers(const int* a, const int* b, long long* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int x = a[i], y = b[i];
    unsigned ux = (unsigned)x, uy = (unsigned)y;
    long long* o = out + 16 * i;
    o[0] = x / y;  o[1] = x % y;  o[2] = ux / uy;  o[3] = ux % uy;
    o[4] = __mulhi(x, y);  o[5] = __umulhi(ux, uy);  o[6] = (long long)x * y;
    o[7] = x << (uy & 31);  o[8] = x >> (uy & 31);  o[9] = ux >> (uy & 31);
    o[10] = __popc(ux);  o[11] = __clz(x);  o[12] = __brev(ux);
    o[13] = min(x, y) ^ max(ux, uy);  o[14] = abs(x) - (~y & 0xff0f);
    o[15] = __byte_perm(ux, uy, 0x5140);
}
'''


def test_integer_division_shifts_bits_and_wide_products():
    n = 200
    rng = np.random.default_rng(4)
    a = rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    b = rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    a[:4] = [7, -7, 7, -7]
    b[:4] = [2, 2, -2, -2]
    b[b == 0] = 3
    out = np.zeros(16 * n, np.int64)
    run(INTEGERS, "integers", 1, 256, [a, b, out, np.int32(n)])
    o = out.reshape(n, 16)
    for i in range(n):
        x, y = int(a[i]), int(b[i])
        ux, uy = x & 0xFFFFFFFF, y & 0xFFFFFFFF
        q = abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)
        wrap = lambda v: ((v + 2**31) % 2**32) - 2**31  # noqa: E731
        expected = [wrap(q), x - q * y, ux // uy, ux % uy, (x * y) >> 32, (ux * uy) >> 32, x * y,
                    wrap(x << (uy & 31)), x >> (uy & 31), ux >> (uy & 31), bin(ux).count("1"),
                    32 - ux.bit_length(), int(f"{ux:032b}"[::-1], 2), wrap(min(x, y) ^ max(ux, uy)),
                    wrap(abs(x) - (~y & 0xFF0F)),
                    None]
        got = list(o[i])
        sel = (ux.to_bytes(4, "little") + uy.to_bytes(4, "little"))
        expected[15] = int.from_bytes(bytes(sel[k] for k in (0, 4, 1, 5)), "little")
        for k in (2, 3, 5, 10, 11, 12, 15):
            got[k] &= 0xFFFFFFFF
        assert got[:15] == [int(v) for v in expected[:15]], i
        assert got[15] == expected[15]


FLOATS = r'''
extern "C" __global__ void floats(const float* a, const float* b, const float* c, float* out, int* ints, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = a[i], y = b[i], z = c[i];
    float* o = out + 12 * i;
    o[0] = __fmaf_rn(x, y, z);  o[1] = __fmaf_rz(x, y, z);  o[2] = __fmaf_rd(x, y, z);  o[3] = __fmaf_ru(x, y, z);
    o[4] = __fdiv_rn(x, y);  o[5] = __fsqrt_rn(fabsf(x));  o[6] = __fadd_rz(x, y);  o[7] = __fmul_ru(x, y);
    o[8] = fminf(x, y);  o[9] = fmaxf(x, z);  o[10] = (float)(double)x * 0.5f;  o[11] = __int2float_rz(ints[i]);
    float* q = out + 12 * n + 6 * i;
    q[0] = __fdiv_rz(x, y);  q[1] = __fdiv_rd(x, y);  q[2] = __fdiv_ru(x, y);
    q[3] = __fsqrt_rz(fabsf(x));  q[4] = __fsqrt_ru(fabsf(x));  q[5] = __frcp_rd(y);
    int* k = ints + n + 4 * i;
    k[0] = __float2int_rn(x * 1000.0f);  k[1] = __float2int_rz(x * 1000.0f);
    k[2] = __float2int_rd(x * 1000.0f);  k[3] = (int)__float2uint_ru(x * 1000.0f);
}
'''


def exact_round(values, mode):
    """Exactly rounded float32 of Python Fractions, by mode (rn rz rd ru)."""
    from fractions import Fraction
    out = []
    for v in values:
        f = np.float32(float(v))  # float() of a Fraction rounds correctly to float64; fix below
        cands = [np.nextafter(f, np.float32(-np.inf)), f, np.nextafter(f, np.float32(np.inf))]
        below = max((c for c in cands if Fraction(float(c)) <= v), key=lambda c: Fraction(float(c)))
        above = min((c for c in cands if Fraction(float(c)) >= v), key=lambda c: Fraction(float(c)))
        if below == above:
            out.append(below)
        elif mode == "rd":
            out.append(below)
        elif mode == "ru":
            out.append(above)
        elif mode == "rz":
            out.append(below if v > 0 else above)
        else:
            db, da = v - Fraction(float(below)), Fraction(float(above)) - v
            if db != da:
                out.append(below if db < da else above)
            else:
                out.append(below if int(np.array(below).view(np.uint32)) % 2 == 0 else above)
    return np.array(out, dtype=np.float32)


@pytest.mark.parametrize("arch", ARCHS)
def test_float_rounding_modes_fma_division_and_conversions(arch):
    from fractions import Fraction
    n = 256
    rng = np.random.default_rng(5)
    a = rng.standard_normal(n).astype(np.float32)
    b = (rng.standard_normal(n) * 1e-3).astype(np.float32)
    c = -(a * b).astype(np.float32)  # cancellation: fma keeps what a separate mul + add loses
    c[::3] = rng.standard_normal(len(c[::3])).astype(np.float32)
    a[0], b[0], c[0] = np.nan, 1.0, 0.0
    ints = np.concatenate([rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32), np.zeros(4 * n, np.int32)])
    out = np.zeros(18 * n, np.float32)
    run(FLOATS, "floats", 1, 256, [a, b, c, out, ints, np.int32(n)], arch=arch)
    q = out[12 * n:].reshape(n, 6)[1:]
    o = out[:12 * n].reshape(n, 12)[1:]
    a1, b1, c1 = a[1:], b[1:], c[1:]
    exact_fma = [Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)) for x, y, z in zip(a1, b1, c1)]
    for k, mode in enumerate(("rn", "rz", "rd", "ru")):
        assert np.array_equal(o[:, k], exact_round(exact_fma, mode)), mode
    assert np.array_equal(o[:, 4], a1 / b1)
    assert np.array_equal(o[:, 5], np.sqrt(np.abs(a1)))
    assert np.array_equal(o[:, 6], exact_round([Fraction(float(x)) + Fraction(float(y)) for x, y in zip(a1, b1)], "rz"))
    assert np.array_equal(o[:, 7], exact_round([Fraction(float(x)) * Fraction(float(y)) for x, y in zip(a1, b1)], "ru"))
    assert np.array_equal(o[:, 8], np.fmin(a1, b1)) and np.array_equal(o[:, 9], np.fmax(a1, c1))
    assert np.array_equal(o[:, 10], a1 * np.float32(0.5))
    assert np.array_equal(o[:, 11], exact_round([Fraction(int(v)) for v in ints[1:n]], "rz"))
    quotients = [Fraction(float(x)) / Fraction(float(y)) for x, y in zip(a[1:], b[1:])]
    for k, mode in enumerate(("rz", "rd", "ru")):
        assert np.array_equal(q[:, k], exact_round(quotients, mode)), mode
    assert np.array_equal(q[:, 5], exact_round([1 / Fraction(float(y)) for y in b[1:]], "rd"))
    for k, mode in ((3, "rz"), (4, "ru")):  # sqrt: r is exact iff r * r == |x|; otherwise the neighbours
        r = q[:, k].astype(np.float64)
        ax = np.abs(a[1:]).astype(np.float64)
        lo = r if mode == "rz" else np.nextafter(q[:, k], np.float32(0)).astype(np.float64)
        hi = np.nextafter(q[:, k], np.float32(np.inf)).astype(np.float64) if mode == "rz" else r
        assert np.all(lo * lo <= ax) and np.all(hi * hi >= ax) and np.all((lo * lo < ax) | (lo == hi) | (r * r == ax))
    assert out[8] == 1.0 and out[9] == 0.0  # fminf(NaN, 1) = 1, fmaxf(NaN, 0) = 0
    assert np.isnan(out[0])
    k = ints[n:].reshape(n, 4)[1:]
    s = (a1 * np.float32(1000)).astype(np.float64)
    assert np.array_equal(k[:, 0], np.rint(s)) and np.array_equal(k[:, 1], np.trunc(s))
    assert np.array_equal(k[:, 2], np.floor(s))
    assert np.array_equal(k[:, 3].view(np.uint32), np.clip(np.ceil(s), 0, None).astype(np.uint32))
    assert ints[n] == 0  # NaN converts to 0


LOCAL_AND_GENERIC = r'''
__device__ __noinline__ float pick(const float* p, int k) { return p[k]; }

extern "C" __global__ void local_generic(const float* x, float* y, int shift)
{
    __shared__ float s[64];
    float a[8];
    for (int k = 0; k < 8; ++k) a[k] = x[threadIdx.x] * k;
    s[threadIdx.x] = x[threadIdx.x] + 1.0f;
    __syncthreads();
    const float* p = (threadIdx.x & 1) ? s : x;       // a generic pointer: shared or global per thread
    y[threadIdx.x] = a[(threadIdx.x + shift) & 7] + p[threadIdx.x ^ 1];
}
'''


@pytest.mark.parametrize("arch", ARCHS)
def test_local_arrays_and_generic_pointers_into_shared_or_global_memory(arch):
    source = LOCAL_AND_GENERIC.replace("__device__ __noinline__ float pick(const float* p, int k) { return p[k]; }", "")
    x = np.random.default_rng(6).standard_normal(64).astype(np.float32)
    y = np.zeros(64, np.float32)
    run(source, "local_generic", 1, 64, [x, y, np.int32(3)], arch=arch)
    t = np.arange(64)
    a = x[t] * ((t + 3) & 7).astype(np.float32)
    p = np.where(t & 1, x[t ^ 1] + np.float32(1), x[t ^ 1])
    assert np.array_equal(y, a + p)


GRID_2D = r'''
extern "C" __global__ void transpose(const double* x, double* y, int rows, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) y[(size_t)c * rows + r] = sqrt(x[(size_t)r * cols + c]) + 1.0 / 3.0;
}
'''


def test_a_2d_grid_with_double_precision():
    rows, cols = 37, 50
    x = np.random.default_rng(7).random((rows, cols))
    y = np.zeros((cols, rows))
    run(GRID_2D, "transpose", ((cols + 15) // 16, (rows + 7) // 8), (16, 8), [x, y, np.int32(rows), np.int32(cols)])
    assert np.array_equal(y, np.sqrt(x).T + 1.0 / 3.0)


def test_scalars_are_passed_by_the_parameter_type_and_arguments_are_checked():
    source = r'''
extern "C" __global__ void scal(float* y, float a, double b, long long c, unsigned char d, short e)
{
    y[0] = a; y[1] = (float)b; y[2] = (float)c; y[3] = d; y[4] = e;
}
'''
    y = np.zeros(5, np.float32)
    run(source, "scal", 1, 1, [y, 1.5, np.float64(2.25), -(2**40), 200, np.int16(-3)])
    assert list(y) == [1.5, 2.25, -(2**40), 200, -3]
    with pytest.raises(ValueError, match="takes 6 arguments"):
        launch(nvrtc.ptx(source), "scal", 1, 1, [y])
    with pytest.raises(TypeError, match="array passed for a .f32"):
        launch(nvrtc.ptx(source), "scal", 1, 1, [y, y, 1.0, 1, 1, 1])
    with pytest.raises(ValueError, match="no kernel 'nope'"):
        launch(nvrtc.ptx(source), "nope", 1, 1, [])



POINTERS = r'''
extern "C" __global__ void shift(const float* x, float* y, int n)
{
    int i = threadIdx.x;
    if (i < n) y[i] = x[i - 1];
}
extern "C" __global__ void copy(const float* x, float* y, int n)
{
    int i = threadIdx.x;
    if (i < n) y[i] = x[i];
}
extern "C" __global__ void overwrite_then_read(float* x, const float* same, float* out, int n)
{
    int i = threadIdx.x;
    x[i] = -1.0f;
    __syncthreads();
    out[i] = same[(i + 1) % n];
}
'''


def test_a_view_is_a_pointer_into_the_memory_of_the_array_it_views():
    """As CuPy passes it: a slice points into its base (reading before it reads the base, writing through it
    writes the base), a transposed view is read in its base's memory order, two views of one array share it."""
    ptx = nvrtc.ptx(POINTERS)
    base = np.arange(8, dtype=np.float32)
    run(POINTERS, "shift", 1, 4, [base[1:5], base[4:8], np.int32(4)])  # y[i] = x[i - 1]: x[-1] is base[0]
    assert base.tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    r = launch(ptx, "shift", 1, 4, [np.arange(4, dtype=np.float32), np.zeros(4, np.float32), np.int32(4)])
    assert [f.kind for f in r.findings] == ["global_oob"] and "args[0] вызова ядра" in str(r.findings[0])

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.zeros(6, np.float32)
    run(POINTERS, "copy", 1, 6, [a.T, y, np.int32(6)])  # the kernel indexes memory, not the view's strides
    assert y.tolist() == a.ravel().tolist() != a.T.ravel().tolist()
    f = np.asfortranarray(a)
    run(POINTERS, "copy", 1, 6, [f, y, np.int32(6)])
    assert y.tolist() == f.ravel(order="F").tolist()
    run(POINTERS, "copy", 1, 3, [f[:, 1], y, np.int32(3)])  # column 1 of a Fortran array: contiguous from 2
    assert y[:3].tolist() == [1, 4, 2]

    x, out = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
    run(POINTERS, "overwrite_then_read", 1, 4, [x, x[:], out, np.int32(4)])  # one allocation: the writes show
    assert out.tolist() == [-1] * 4 and x.tolist() == [-1] * 4
    x = np.arange(4, dtype=np.float32)
    run(POINTERS, "overwrite_then_read", 1, 4, [x, x.copy(), out, np.int32(4)])  # two: they do not
    assert out.tolist() == [1, 2, 3, 0]


# --- the lessons' reference kernels at their graded sizes -----------------------------------------------------

def reference(lesson: str, answer: str, name: str) -> str:
    from autograder.course import grading

    ns = {}
    exec(grading.reference_answers(lesson)[answer], ns)
    return ns[name]


@pytest.fixture(scope="module")
def lesson06():
    return {k: reference("06_cuda_basics", f"{k}_source", f"{k.upper()}_SRC") for k in ("scale_add", "row_sums", "matmul")}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("n", [1 << 16, 1000, 1])
def test_lesson06_scale_add(lesson06, arch, n):
    from autograder.lessons.lesson06 import checks

    a, x, y = checks._vectors(n, 0)
    out = np.full(n, np.nan, np.float32)
    run(lesson06["scale_add"], "scale_add", (n + 255) // 256, 256, [np.float32(a), x, y, out, np.int32(n)], arch=arch)
    assert np.array_equal(out, (np.float32(a) * x + y).astype(np.float32)) or np.allclose(
        out, checks._scale_add_oracle(a, x, y), atol=1e-5, rtol=1e-5)
    assert np.abs(out - checks._scale_add_oracle(a, x, y)).max() <= 1e-5 + 1e-5 * np.abs(y).max() * 4


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("T, D", [(64, 1024), (5, 1000), (3, 37), (2, 5000), (3, 1000)])
def test_lesson06_row_sums(lesson06, arch, T, D):
    from autograder.lessons.lesson06 import checks

    x = checks._rows(T, D, 3)
    out = np.full(T, np.nan, np.float32)
    run(lesson06["row_sums"], "row_sums", T, 256, [x, out, np.int32(T), np.int32(D)], arch=arch)
    expected = checks._row_sums_oracle(x)
    assert np.all(np.abs(out - expected) <= checks._row_tolerance(D) + 1e-5 * np.abs(expected))


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("M, K, N", [(64, 64, 64), (33, 70, 17), (1, 1, 1), (33, 20, 17)])
def test_lesson06_matmul_tiled(lesson06, arch, M, K, N):
    from autograder.lessons.lesson06 import checks

    A, B = checks._matrices(M, K, N, 7)
    C = np.full((M, N), np.nan, np.float32)
    run(lesson06["matmul"], "matmul_tiled", ((N + 15) // 16, (M + 15) // 16), (16, 16),
        [A, B, C, np.int32(M), np.int32(N), np.int32(K)], arch=arch)
    expected = checks._matmul_oracle(A, B)
    assert np.all(np.abs(C - expected) <= 1e-5 + 2e-7 * K + 1e-5 * np.abs(expected))
    # the same float32 operation order as the kernel (one fma per k, k ascending): bit-equal
    acc = np.zeros((M, N), np.float32)
    from autograder.gpu.emulator.ops_float import fma32
    for k in range(K):
        acc = fma32(A[:, k:k + 1], B[k:k + 1, :], acc)
    assert np.array_equal(C, acc)


def rms_launch(T: int, D: int):
    """The reference wrapper's launch (solutions/07_cupy_rmsnorm): grid and block."""
    if D <= 1024:
        return ((T + 7) // 8,), (32, 8)
    return (T,), (min(1024, 32 * math.ceil(D / (32 * 32))),)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("case", [{"T": 4096, "D": 512, "seed": 0}, {"T": 64, "D": 256, "seed": 1, "scale": 0.01, "eps": 1e-2},
                                  {"T": 37, "D": 1000, "seed": 2}, {"T": 5, "D": 4097, "seed": 3},
                                  {"T": 4, "D": 4098, "seed": 4}, {"T": 3, "D": 1000, "seed": 8}])
def test_lesson07_rms_norm(arch, case):
    from autograder.checks import reference as oracle
    from autograder.lessons.lesson07 import checks

    source = reference("07_cupy_rmsnorm", "rmsnorm_source", "RMSNORM_SRC")
    T, D = case["T"], case["D"]
    x, w = checks._inputs(T, D, case["seed"], case.get("scale", 1.0))
    eps = case.get("eps", 1e-6)
    y = np.full_like(x, np.nan)
    grid, block = rms_launch(T, D)
    run(source, "rms_norm", grid, block, [x, w, y, np.int32(T), np.int32(D), np.float32(eps)], arch=arch)
    expected = oracle.rms_norm(x, w, eps)
    assert np.all(np.abs(y - expected) <= 1e-5 + 1e-5 * np.abs(expected))  # the check's tolerance


FORMS = r'''
extern "C" __global__ void forms(const float* a, const float* b, float* out, unsigned short* halves, int* flags,
                                 const double* da, double* dout, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = a[i], y = b[i], r;
    float* o = out + 16 * i;
    asm("add.ftz.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(y));  o[0] = r;
    asm("mul.sat.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(y));  o[1] = r;
    asm("rsqrt.approx.f32 %0, %1;" : "=f"(r) : "f"(fabsf(x)));  o[2] = r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));  o[3] = r;
    asm("lg2.approx.f32 %0, %1;" : "=f"(r) : "f"(fabsf(y)));  o[4] = r;
    asm("rcp.rn.f32 %0, %1;" : "=f"(r) : "f"(y));  o[5] = r;
    asm("div.full.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(y));  o[6] = r;
    o[7] = __saturatef(x);
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(h));  o[8] = r;
    o[9] = sqrtf(fabsf(y)) - copysignf(1.0f, y);
    o[10] = fabsf(-x) + (-y);
    o[11] = (float)(x * (double)y);
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(y));  halves[i] = h;
    int* f = flags + 8 * i;
    f[0] = x < y;  f[1] = !(x < y);  f[2] = x != y;  f[3] = !(x == y);  f[4] = isnan(x);  f[5] = x >= y;
    f[6] = (int)__double2int_rz(da[i] * 1e3);  f[7] = (unsigned)__float2uint_rn(y * 1e6f);
    double d = da[i];
    dout[4 * i + 0] = fma(d, d, -1.0);
    dout[4 * i + 1] = d / 3.0;
    dout[4 * i + 2] = sqrt(fabs(d)) + (double)x;
    dout[4 * i + 3] = (double)(long long)(d * 1e12) + (double)(unsigned long long)(fabs(d) * 1e15);
}
'''


def _ulps(got, exact):
    """Distance in float32 ulps of ``got`` from the float64 ``exact``."""
    spacing = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    return np.abs(got.astype(np.float64) - exact) / spacing


@pytest.mark.parametrize("arch", ARCHS)
def test_ftz_sat_approximate_half_comparison_and_double_forms(arch):
    from fractions import Fraction
    n = 256
    rng = np.random.default_rng(8)
    a = (rng.standard_normal(n) * 4).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    a[:6] = [np.nan, 1e-40, -1e-40, 0.5, 2.0, -0.0]
    b[:6] = [1.0, 1e-40, 0.0, np.nan, 1e-39, 3.0]
    da = rng.standard_normal(n) * 10
    out, halves, flags = np.zeros(16 * n, np.float32), np.zeros(n, np.uint16), np.zeros(8 * n, np.int32)
    dout = np.zeros(4 * n)
    run(FORMS, "forms", 1, 256, [a, b, out, halves, flags, da, dout, np.int32(n)], arch=arch)
    o, f, d = out.reshape(n, 16), flags.reshape(n, 8), dout.reshape(n, 4)
    tiny = np.float32(np.finfo(np.float32).tiny)
    ftz = lambda v: np.where(np.abs(v) < tiny, np.float32(0) * np.sign(v), v)  # noqa: E731
    s = ftz(ftz(a) + ftz(b))
    assert np.array_equal(o[:, 0], s, equal_nan=True)
    assert o[1, 0] == 0.0 and o[4, 0] == 2.0  # subnormal inputs flushed
    m = np.clip(a * b, 0, 1)
    assert np.array_equal(o[:, 1], np.where(np.isnan(m), 0, m))
    ok = np.isfinite(a) & (a != 0)
    assert _ulps(o[ok, 2], 1 / np.sqrt(np.abs(a[ok].astype(np.float64)))).max() <= 2  # the GPU's bound
    fin = np.isfinite(a) & (np.abs(a) > 1e-30)
    assert _ulps(o[fin, 3], np.exp2(a[fin].astype(np.float64))).max() <= 2
    okb = np.isfinite(b) & (np.abs(b) > 1e-30)
    assert np.abs(o[okb, 4] - np.log2(np.abs(b[okb].astype(np.float64)))).max() <= 2 ** -22 * 4
    with np.errstate(divide="ignore", over="ignore"):
        recip = np.float32(1) / b
    assert np.array_equal(o[:, 5], recip, equal_nan=True)
    assert np.array_equal(o[okb, 6], a[okb] / b[okb], equal_nan=True)  # within 2 ulp on a GPU; exact here
    assert np.array_equal(o[:, 7], np.where(np.isnan(a), 0, np.clip(a, 0, 1)))
    assert np.array_equal(o[:, 8], a.astype(np.float16).astype(np.float32), equal_nan=True)
    assert np.array_equal(halves, b.astype(np.float16).view(np.uint16)[:] | np.where(np.isnan(b), halves, 0))
    assert np.array_equal(o[:, 9], np.sqrt(np.abs(b)) - np.copysign(np.float32(1), b), equal_nan=True)
    assert np.array_equal(o[:, 10], np.abs(a) - b, equal_nan=True)
    assert np.array_equal(o[:, 11], (a.astype(np.float64) * b).astype(np.float32), equal_nan=True)
    with np.errstate(invalid="ignore"):
        assert np.array_equal(f[:, 0], a < b) and np.array_equal(f[:, 1], ~(a < b))
        assert np.array_equal(f[:, 2], a != b) and np.array_equal(f[:, 3], ~(a == b))
        assert np.array_equal(f[:, 4], np.isnan(a)) and np.array_equal(f[:, 5], a >= b)
    assert f[0, 1] == 1 and f[0, 0] == 0 and f[3, 2] == 1  # NaN: unordered is true, ordered false
    assert np.array_equal(f[:, 6], np.trunc(da * 1e3).astype(np.int32))
    yy = (b * np.float32(1e6)).astype(np.float64)
    assert np.array_equal(f[:, 7].view(np.uint32), np.clip(np.rint(np.nan_to_num(yy)), 0, 2**32 - 1).astype(np.uint32))
    exact = [float(Fraction(float(v)) * Fraction(float(v)) - 1) for v in da]
    assert np.array_equal(d[:, 0], np.array(exact))  # fma.rn.f64 rounded once
    assert np.array_equal(d[:, 1], da / 3.0)
    assert np.array_equal(d[:, 2], np.sqrt(np.abs(da)) + a.astype(np.float64), equal_nan=True)
    assert np.array_equal(d[:, 3], np.trunc(da * 1e12) + np.trunc(np.abs(da) * 1e15))


ATOMIC_SLOTS = r'''
extern "C" __global__ void slots(int* counter, int* order, unsigned* bits)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int slot = atomicAdd(counter, 1);         // every thread gets its own slot
    order[slot] = i;
    atomicOr(&bits[i / 32], 1u << (i % 32));
    __shared__ unsigned long long wide;
    if (threadIdx.x == 0) wide = 0;
    __syncthreads();
    atomicAdd(&wide, 1ull << 33);
    __syncthreads();
    if (threadIdx.x == 0) atomicAdd((unsigned long long*)(counter + 2), wide);
}
'''


def test_atomics_return_distinct_old_values_in_some_order():
    counter, order, bits = np.zeros(4, np.int32), np.full(600, -1, np.int32), np.zeros(19, np.uint32)
    run(ATOMIC_SLOTS, "slots", 3, 200, [counter, order, bits])
    assert counter[0] == 600 and sorted(order) == list(range(600))
    assert list(bits[:18]) == [0xFFFFFFFF] * 18 and bits[18] == (1 << 24) - 1
    assert counter[2:].view(np.uint64)[0] == 600 << 33


PREDICATED_STORE = r'''
extern "C" __global__ void tail(unsigned* y)
{
    // a predicated store (inline PTX) by position in the warp: the block of 48 threads is emulated as two warps,
    // lanes 16..31 of the second do not exist and must never store (they would store past the end of y)
    unsigned lane, warp;
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    asm("mov.u32 %0, %%warpid;" : "=r"(warp));
    unsigned i = warp * 32 + lane;
    asm volatile("{ .reg .pred p; setp.ge.u32 p, %1, 40; @p st.global.u32 [%0], %1; }" :: "l"(y + (i - 40)), "r"(i));
}
'''


def test_a_predicated_store_in_a_partial_warp_touches_only_threads_that_exist():
    y = np.zeros(8, np.uint32)
    run(PREDICATED_STORE, "tail", 1, 48, [y])
    assert list(y) == list(range(40, 48))


WIDE_INTEGERS = r'''
extern "C" __global__ void wide(const long long* a, const long long* b, long long* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long x = a[i], y = b[i];
    unsigned long long ux = x, uy = y;
    long long* o = out + 8 * i;
    o[0] = x / y;  o[1] = x % y;  o[2] = ux / uy;  o[3] = ux % uy;
    o[4] = __mul64hi(x, y);  o[5] = __umul64hi(ux, uy);  o[6] = x * y + (x >> 7) - (ux >> (uy & 63));
    o[7] = __popcll(ux) + __clzll(x);
}
'''


def test_64_bit_integer_division_high_products_and_shifts():
    n = 128
    rng = np.random.default_rng(9)
    a = rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64)
    b = rng.integers(-2**40, 2**40, n, dtype=np.int64)
    a[:4], b[:4] = [7, -7, 7, -7], [2, 2, -2, -2]
    b[b == 0] = 5
    out = np.zeros(8 * n, np.int64)
    run(WIDE_INTEGERS, "wide", 1, 128, [a, b, out, np.int32(n)])
    o = out.reshape(n, 8)
    m64 = 2**64
    s64 = lambda v: ((v + 2**63) % m64) - 2**63  # noqa: E731
    for i in range(n):
        x, y = int(a[i]), int(b[i])
        ux, uy = x % m64, y % m64
        q = abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)
        expected = [q, x - q * y, s64(ux // uy), s64(ux % uy), (x * y) >> 64, s64((ux * uy) >> 64),
                    s64(x * y + (x >> 7) - (ux >> (uy & 63))), bin(ux).count("1") + (64 - ux.bit_length())]
        assert [int(v) for v in o[i]] == expected, i


WARP_MATCH_REDUX = r'''
extern "C" __global__ void groups(const int* x, unsigned* same, int* sums)
{
    int v = x[threadIdx.x];
    same[threadIdx.x] = __match_any_sync(0xffffffffu, v);
    sums[threadIdx.x] = __reduce_add_sync(0xffffffffu, v) + __reduce_max_sync(0xffffffffu, (unsigned)v);
}
'''


def test_match_any_and_redux_at_compute_80():
    x = np.random.default_rng(10).integers(0, 4, 64).astype(np.int32)
    same, sums = np.zeros(64, np.uint32), np.zeros(64, np.int32)
    run(WARP_MATCH_REDUX, "groups", 1, 64, [x, same, sums], arch="compute_80")
    for w in range(2):
        xs = x[32 * w:32 * (w + 1)]
        for lane in range(32):
            assert same[32 * w + lane] == sum(1 << j for j in range(32) if xs[j] == xs[lane])
        assert np.all(sums[32 * w:32 * (w + 1)] == xs.sum() + xs.max())


BIT_FORMS = r'''
extern "C" __global__ void bits(const unsigned* a, const unsigned* b, unsigned* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned x = a[i], y = b[i], r;
    unsigned* o = out + 8 * i;
    asm("lop3.b32 %0, %1, %2, %3, 0xE8;" : "=r"(r) : "r"(x), "r"(y), "r"(x ^ y));  o[0] = r;   // majority
    o[1] = __funnelshift_l(x, y, i);  o[2] = __funnelshift_rc(x, y, i);
    asm("bfind.u32 %0, %1;" : "=r"(r) : "r"(x >> (i & 31)));  o[3] = r;
    asm("bfind.shiftamt.s32 %0, %1;" : "=r"(r) : "r"((int)x));  o[4] = r;
    o[5] = __sad((int)x, (int)y, 7u);
    asm("add.sat.s32 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));  o[6] = r;
    asm("slct.u32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(y), "r"((int)(x ^ y)));  o[7] = r;
}
'''


def test_lop3_funnel_shifts_bfind_sad_saturating_add_and_slct():
    n = 96
    rng = np.random.default_rng(11)
    a = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    a[0] = 0
    out = np.zeros(8 * n, np.uint32)
    run(BIT_FORMS, "bits", 1, 128, [a, b, out, np.int32(n)])
    o = out.reshape(n, 8)
    s32 = lambda v: v - 2**32 if v >= 2**31 else v  # noqa: E731
    for i in range(n):
        x, y = int(a[i]), int(b[i])
        z = x ^ y
        wide = (y << 32) | x
        top = (x >> (i & 31)).bit_length() - 1
        sx = s32(x)
        msb = (~sx if sx < 0 else sx).bit_length() - 1
        assert o[i, 0] == ((x & y) | (x & z) | (y & z)), i
        assert o[i, 1] == ((wide << (i & 31)) >> 32) & 0xFFFFFFFF
        assert o[i, 2] == (wide >> min(i, 32)) & 0xFFFFFFFF
        assert o[i, 3] == (top if top >= 0 else 0xFFFFFFFF)
        assert o[i, 4] == ((31 - msb) if msb >= 0 else 0xFFFFFFFF)
        assert o[i, 5] == (abs(sx - s32(y)) + 7) & 0xFFFFFFFF
        assert s32(int(o[i, 6])) == max(-2**31, min(2**31 - 1, sx + s32(y)))
        assert o[i, 7] == (x if s32(z) >= 0 else y)


def test_arrays_are_copied_back_and_read_only_inputs_are_left_alone():
    x = np.arange(1000, dtype=np.float32)
    x.setflags(write=False)
    y = np.zeros(1000, np.float32)[::1]
    c = np.full(1000, -1.0, np.float32)
    r = run(VECTOR_ADD, "vadd", 4, 256, [x, y, c, np.int32(1000)])
    assert np.array_equal(c, x) and r.ok


@pytest.mark.parametrize("step, arch, case", [
    ("flash_source", "compute_75", {"H": 1, "n": 70, "d": 64, "seed": 2, "causal": True}),
    ("flash_fast_source", "compute_80", {"H": 2, "n": 256, "d": 64, "seed": 0}),
    ("flash_fast_source", "compute_75", {"H": 1, "n": 77, "d": 128, "seed": 4, "causal": True})])
def test_lesson08_flash_attention_both_steps(step, arch, case):
    """Lesson 08's reference kernels (not yet graded on the emulator): step 1 one thread per query row, step 2
    with cp.async (compute_80) or plain loads (compute_75), launched as the solution's wrappers launch them."""
    from autograder.lessons.lesson08 import checks as l08

    name = {"flash_source": "FLASH_SRC", "flash_fast_source": "FLASH_FAST_SRC"}[step]
    source = reference("08_cupy_flash_attention", step, name)
    H, n, d, causal = case["H"], case["n"], case["d"], case.get("causal", False)
    q, k, v = l08._inputs(H, n, d, case["seed"])
    o, tiles = np.full_like(q, np.nan), np.zeros(1, np.int32)
    args = [q, k, v, o, np.int32(n), np.float32(1 / math.sqrt(d)), np.int32(causal), tiles]
    if step == "flash_source":
        run(source, f"flash_attention_d{d}", ((n + 63) // 64, H), 64, args, arch=arch)
    else:
        shared = 4 * (64 * (d + 4) + 32 * (d + 4) + 32 * d + 32 * (64 + 4))
        run(source, f"flash_attention_d{d}", ((n + 63) // 64, H), 128, args, shared_bytes=shared, arch=arch)
    expected = l08.oracle(q, k, v, causal)
    assert np.all(np.abs(o - expected) <= 1e-5 + 1e-5 * np.abs(expected))
    assert tiles[0] > 0  # the kernel counts the K/V tiles it visited


@pytest.mark.parametrize("arch, case, splits", [("compute_75", 3, 3), ("compute_80", 1, 2)])
def test_lesson11_paged_decode_split_and_combine(arch, case, splits):
    """Lesson 11's reference decode kernels (not yet graded on the emulator) on its GPU cases: the split kernel
    over a shuffled page pool with stale slots, then the combine kernel, as paged_decode_gpu launches them."""
    from autograder.lessons.lesson11 import checks as l11

    source = reference("11_flash_decoding", "decode_source", "DECODE_SRC")
    ptx = nvrtc.ptx(source, arch=arch)
    q, kp, vp, table, lengths = l11._inputs_of(l11.GPU_VISIBLE[case])
    B, Hq, d = q.shape
    _, page_size, Hkv, _ = kp.shape
    out = np.full((B, Hq, d), np.nan, np.float32)
    o_part, lse = np.zeros((splits, B, Hq, d), np.float32), np.zeros((splits, B, Hq), np.float32)
    r = launch(ptx, "paged_decode_split", (splits, Hkv, B), 128,
               [q, kp, vp, table, lengths, o_part, lse, np.int32(B), np.int32(Hq), np.int32(Hkv), np.int32(d),
                np.int32(page_size), np.int32(table.shape[1]), np.int32(splits), np.float32(1 / math.sqrt(d))])
    assert r.ok, [str(f) for f in r.findings]
    r = launch(ptx, "paged_decode_combine", (B * Hq,), (d, 4),
               [o_part, lse, out, np.int32(splits), np.int32(B * Hq), np.int32(d)])
    assert r.ok, [str(f) for f in r.findings]
    expected = l11.oracle(q, kp, vp, table, lengths, splits)
    assert np.all(np.abs(out - expected) <= 1e-5 + 1e-5 * np.abs(expected))


IDS = r'''
extern "C" __global__ void ids(int* out)
{
    int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    int thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int i = block * blockDim.x * blockDim.y * blockDim.z + thread;
    out[4 * i + 0] = blockIdx.x * 100 + blockIdx.y * 10 + blockIdx.z;
    out[4 * i + 1] = threadIdx.x * 100 + threadIdx.y * 10 + threadIdx.z;
    out[4 * i + 2] = gridDim.x * 100 + gridDim.y * 10 + gridDim.z;
    out[4 * i + 3] = blockDim.x * 100 + blockDim.y * 10 + blockDim.z;
}
'''


@pytest.mark.parametrize("lanes", [None, 64])
def test_three_dimensional_grids_and_blocks_in_one_or_many_chunks(lanes):
    # lanes=64: 24 threads per block padded to 32 lanes, two blocks per chunk, six chunks one after another
    grid, block = (2, 3, 2), (4, 2, 3)
    out = np.full(4 * 12 * 24, -1, np.int32)
    r = launch(nvrtc.ptx(IDS), "ids", grid, block, [out], lanes=lanes) if lanes else \
        launch(nvrtc.ptx(IDS), "ids", grid, block, [out])
    assert r.ok
    o = out.reshape(2, 3, 2, 3, 2, 4, 4)  # bz, by, bx, tz, ty, tx, field
    bz, by, bx, tz, ty, tx = np.meshgrid(*(np.arange(k) for k in (2, 3, 2, 3, 2, 4)), indexing="ij")
    assert np.array_equal(o[..., 0], bx * 100 + by * 10 + bz)
    assert np.array_equal(o[..., 1], tx * 100 + ty * 10 + tz)
    assert np.all(o[..., 2] == 232) and np.all(o[..., 3] == 423)


CONTRACTED = r'''
extern "C" __global__ void pairs(const float* a, const float* b, const float* c, float* out)
{
    int i = threadIdx.x;
    float p, s, t;
    asm("mul.f32 %0, %1, %2;" : "=f"(p) : "f"(a[i]), "f"(b[i]));
    asm("add.f32 %0, %1, %2;" : "=f"(s) : "f"(p), "f"(c[i]));       // ptxas fuses: fma(a, b, c)
    out[i] = s;
    asm("mul.f32 %0, %1, %2;" : "=f"(p) : "f"(a[i]), "f"(b[i]));
    asm("sub.f32 %0, %1, %2;" : "=f"(t) : "f"(c[i]), "f"(p));       // c - a*b: fma(-a, b, c)
    out[32 + i] = t;
    asm("mul.rn.f32 %0, %1, %2;" : "=f"(p) : "f"(a[i]), "f"(b[i]));  // .rn: never contracted
    asm("add.f32 %0, %1, %2;" : "=f"(s) : "f"(p), "f"(c[i]));
    out[64 + i] = s;
}
'''


def test_a_mul_feeding_only_an_add_is_contracted_into_one_fma_as_ptxas_does():
    from autograder.gpu.emulator.ops_float import fma32

    rng = np.random.default_rng(12)
    a = rng.standard_normal(32).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    c = -(a * b) + rng.standard_normal(32).astype(np.float32) * np.float32(1e-6)  # cancellation shows the rounding
    out = np.zeros(96, np.float32)
    ptx = nvrtc.ptx(CONTRACTED)
    r = launch(ptx, "pairs", 1, 32, [a, b, c, out])
    assert r.ok
    assert np.array_equal(out[:32], fma32(a, b, c)) and np.array_equal(out[32:64], fma32(-a, b, c))
    assert np.array_equal(out[64:], a * b + c)
    assert not np.array_equal(fma32(a, b, c), a * b + c)  # the inputs do tell the two apart
    launch(ptx, "pairs", 1, 32, [a, b, c, out], contract=False)
    assert np.array_equal(out[:32], a * b + c) and np.array_equal(out[32:64], c - a * b)


BF16 = r'''
extern "C" __global__ void bf16(const float* x, unsigned short* bits, float* back)
{
    unsigned short h;
    float r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x[threadIdx.x]));
    asm("cvt.f32.bf16 %0, %1;" : "=f"(r) : "h"(h));
    bits[threadIdx.x] = h;
    back[threadIdx.x] = r;
}
'''


def test_bf16_conversions_round_to_nearest_even_at_compute_80():
    x = np.random.default_rng(13).standard_normal(64).astype(np.float32)
    x[:4] = [1.0 + 2**-8, 1.0 + 3 * 2**-8, -0.0, np.inf]  # ties go to even
    bits, back = np.zeros(64, np.uint16), np.zeros(64, np.float32)
    run(BF16, "bf16", 1, 64, [x, bits, back], arch="compute_80")
    u = x.view(np.uint32).astype(np.uint64)
    expected = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    assert np.array_equal(bits, expected)
    assert list(back[:4]) == [1.0, 1.0 + 2**-6, 0.0, np.inf] and np.signbit(back[2])
    assert np.array_equal(back, (bits.astype(np.uint32) << 16).view(np.float32))


MORE_FORMS = r'''
extern "C" __global__ void more(const unsigned* a, const float* f, unsigned* out, float* fout, int* total)
{
    int i = threadIdx.x;
    unsigned x = a[i], r;
    int s;
    asm("bfe.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(i % 40), "r"(i % 13));  out[8 * i + 0] = r;
    asm("bfe.s32 %0, %1, %2, %3;" : "=r"(s) : "r"(x), "r"(i % 40), "r"(i % 13));  out[8 * i + 1] = s;
    asm("bfi.b32 %0, %1, %2, %3, %4;" : "=r"(r) : "r"(x), "r"(~x), "r"(i % 40), "r"(i % 13));  out[8 * i + 2] = r;
    asm("activemask.b32 %0;" : "=r"(r));  out[8 * i + 3] = r;
    asm("cnot.b32 %0, %1;" : "=r"(r) : "r"(x & 1));  out[8 * i + 4] = r;
    asm("{ .reg .pred p; testp.finite.f32 p, %1; selp.u32 %0, 1, 0, p; }" : "=r"(r) : "f"(f[i]));  out[8 * i + 5] = r;
    float y;
    asm("sin.approx.f32 %0, %1;" : "=f"(y) : "f"(f[i]));  fout[3 * i + 0] = y;
    asm("cos.approx.f32 %0, %1;" : "=f"(y) : "f"(f[i]));  fout[3 * i + 1] = y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(f[i]));  fout[3 * i + 2] = y;
    asm volatile("red.global.add.s32 [%0], %1;" :: "l"(total), "r"(i));
    if (i < 10) { asm("activemask.b32 %0;" : "=r"(r)); out[8 * i + 6] = r; }
}
'''


def test_bit_fields_activemask_cnot_testp_trigonometry_and_red():
    rng = np.random.default_rng(14)
    a = rng.integers(0, 2**32, 48, dtype=np.uint64).astype(np.uint32)
    f = rng.standard_normal(48).astype(np.float32)
    f[:3] = [np.inf, np.nan, -np.inf]
    out, fout, total = np.zeros(8 * 48, np.uint32), np.zeros(3 * 48, np.float32), np.zeros(1, np.int32)
    run(MORE_FORMS, "more", 1, 48, [a, f, out, fout, total], arch="compute_75")
    o = out.reshape(48, 8)
    for i in range(48):
        x, pos, ln = int(a[i]), i % 40, i % 13
        field = (x >> pos) & ((1 << ln) - 1) if pos < 32 else 0
        assert o[i, 0] == field, i
        eff = max(0, min(ln, 32 - pos))  # PTX: bits past bit 31 and past len are the sign bit
        sbit = (x >> min(pos + ln - 1, 31)) & 1 if ln else 0
        sfield = ((x >> pos) & ((1 << eff) - 1) if pos < 32 else 0) | ((0xFFFFFFFF << eff) & 0xFFFFFFFF if sbit else 0)
        assert o[i, 1] == sfield, i
        mask = (((1 << ln) - 1) << pos) & 0xFFFFFFFF if pos < 32 else 0
        assert o[i, 2] == ((~x & 0xFFFFFFFF) & ~mask) | ((x << pos) & mask), i
        assert o[i, 3] == (0xFFFFFFFF if i < 32 else 0xFFFF)
        assert o[i, 4] == (1 - (x & 1))
        assert o[i, 5] == int(np.isfinite(f[i]))
    assert list(o[:10, 6]) == [0x3FF] * 10  # only the ten lanes inside the if
    fin = np.isfinite(f)
    for k, fn in enumerate((np.sin, np.cos, np.tanh)):
        assert np.allclose(fout.reshape(48, 3)[fin, k], fn(f[fin].astype(np.float64)), atol=2e-6)
    assert total[0] == sum(range(48))


NARROW_AND_PAIRS = r'''
extern "C" __global__ void narrow(const signed char* c, const short* h, const double* d, int* out, double* dout,
                                  unsigned char* bytes)
{
    int i = threadIdx.x;
    out[4 * i + 0] = c[i] * 3;                  // ld.global.s8: sign-extended
    out[4 * i + 1] = h[i] - 7;                  // ld.global.s16
    out[4 * i + 2] = (unsigned char)c[i];       // zero-extended
    out[4 * i + 3] = (int)(signed char)(c[i] * 5);  // cvt to s8: wraps
    bytes[i] = (unsigned char)(c[i] + 100);     // st.global.u8
    dout[i] = __shfl_xor_sync(0xffffffffu, d[i], 5) + (double)__brevll((unsigned long long)i);   // mov.b64 pack / unpack
}
'''


def test_narrow_loads_and_stores_and_a_double_shuffle():
    rng = np.random.default_rng(15)
    c = rng.integers(-128, 128, 32).astype(np.int8)
    h = rng.integers(-2**15, 2**15, 32).astype(np.int16)
    d = rng.standard_normal(32)
    out, dout, by = np.zeros(4 * 32, np.int32), np.zeros(32), np.zeros(32, np.uint8)
    run(NARROW_AND_PAIRS, "narrow", 1, 32, [c, h, d, out, dout, by])
    o = out.reshape(32, 4)
    ci = c.astype(np.int64)
    assert np.array_equal(o[:, 0], ci * 3) and np.array_equal(o[:, 1], h.astype(np.int64) - 7)
    assert np.array_equal(o[:, 2], ci & 0xFF) and np.array_equal(o[:, 3], (ci * 5).astype(np.int8))
    assert np.array_equal(by, ((ci + 100) & 0xFF).astype(np.uint8))
    brev = np.array([float(int(f"{i:064b}"[::-1], 2)) for i in range(32)])
    assert np.array_equal(dout, d[np.arange(32) ^ 5] + brev)


SUB_WARP_SHUFFLES = r'''
extern "C" __global__ void widths(const int* x, int* out)
{
    int v = x[threadIdx.x];
    out[4 * threadIdx.x + 0] = __shfl_down_sync(0xffffffffu, v, 1, 8);
    out[4 * threadIdx.x + 1] = __shfl_up_sync(0xffffffffu, v, 2, 16);
    out[4 * threadIdx.x + 2] = __shfl_xor_sync(0xffffffffu, v, 4, 8);
    out[4 * threadIdx.x + 3] = __shfl_sync(0xffffffffu, v, 3, 4);
}
'''


def test_shuffles_within_sub_warp_segments():
    x = np.arange(100, 132, dtype=np.int32)
    out = np.zeros(4 * 32, np.int32)
    run(SUB_WARP_SHUFFLES, "widths", 1, 32, [x, out])
    o = out.reshape(32, 4)
    lane = np.arange(32)
    down = np.where(lane % 8 + 1 < 8, lane + 1, lane)
    up = np.where(lane % 16 >= 2, lane - 2, lane)
    xor = (lane // 8) * 8 + ((lane % 8) ^ 4)
    idx = (lane // 4) * 4 + 3
    for k, src in enumerate((down, up, xor, idx)):
        assert np.array_equal(o[:, k], x[src]), k


# --- numerics measured on the H200 (tests/golden/emulator/; docs/emulator-golden.md) -----------------------------
_C_TYPES = {np.dtype(np.float32): ("float", "f"), np.dtype(np.float64): ("double", "d"),
            np.dtype(np.uint32): ("unsigned", "r"), np.dtype(np.int32): ("int", "r"),
            np.dtype(np.uint64): ("unsigned long long", "l"), np.dtype(np.int64): ("long long", "l")}


def apply_form(instruction, out_dtype, *inputs, arch="compute_75", **launch_kw):
    """out[i] = the PTX ``instruction`` (operands %0 = the result, %1... = the inputs) of inputs[k][i], each lane
    its own element, as in the golden harness."""
    out_dtype = np.dtype(out_dtype)
    inputs = [np.ascontiguousarray(x) for x in inputs]
    n = len(inputs[0])
    params = ", ".join(f"const {_C_TYPES[x.dtype][0]}* in{k}" for k, x in enumerate(inputs))
    operands = ", ".join(f'"{_C_TYPES[x.dtype][1]}"(in{k}[i])' for k, x in enumerate(inputs))
    ctype, cons = _C_TYPES[out_dtype]
    source = (f'extern "C" __global__ void form({params}, {ctype}* out, int n) {{\n'
              f'    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i >= n) return;\n    {ctype} r;\n'
              f'    asm volatile("{instruction}" : "={cons}"(r) : {operands});\n    out[i] = r;\n}}\n')
    out = np.zeros(n, out_dtype)
    r = launch(nvrtc.ptx(source, arch=arch), "form", (n + 63) // 64, 64, [*inputs, out, np.int32(n)], **launch_kw)
    assert r.ok, "\n".join(str(f) for f in r.findings)
    return out


def bits(x):
    x = np.asarray(x)
    return [hex(int(v)) for v in x.view(np.uint64 if x.itemsize == 8 else np.uint32)]


F32_MAX, F64_MAX = np.finfo(np.float32).max, np.finfo(np.float64).max


def test_directed_rounding_at_overflow_gives_the_largest_finite_value_where_the_mode_rounds_towards_it():
    """IEEE 754 7.4, as the H200 does it: rz always, rm for positive and rp for negative overflow stop at MAX."""
    big = np.array([F64_MAX, -F64_MAX], np.float64)
    for mode, want in (("rz", [F64_MAX, -F64_MAX]), ("rm", [F64_MAX, -np.inf]), ("rp", [np.inf, -F64_MAX]),
                       ("rn", [np.inf, -np.inf])):
        assert bits(apply_form(f"add.{mode}.f64 %0, %1, %2;", np.float64, big, big)) == bits(np.array(want)), mode
        assert bits(apply_form(f"mul.{mode}.f64 %0, %1, %2;", np.float64, big, np.full(2, 2.0))) == \
            bits(np.array(want)), mode
        assert bits(apply_form(f"fma.{mode}.f64 %0, %1, %2, %3;", np.float64, big, np.full(2, 2.0), -big / 4)) == \
            bits(np.array(want)), mode
    tiny = np.array([1.0, -1.0], np.float32)
    sub = np.full(2, np.float32(2.0 ** -149))
    f32 = {"rz": [F32_MAX, -F32_MAX], "rm": [F32_MAX, -np.inf], "rp": [np.inf, -F32_MAX]}
    for mode, want in f32.items():
        assert bits(apply_form(f"div.{mode}.f32 %0, %1, %2;", np.float32, tiny, sub)) == \
            bits(np.array(want, np.float32)), mode
        assert bits(apply_form(f"rcp.{mode}.f32 %0, %1;", np.float32, tiny * sub)) == \
            bits(np.array(want, np.float32)), mode
    # infinities are exact: rz keeps them
    inf = np.array([np.inf, -np.inf])
    assert bits(apply_form("add.rz.f64 %0, %1, %2;", np.float64, inf, np.ones(2))) == bits(inf)


def test_an_exact_zero_sum_is_minus_zero_under_rm_and_subnormal_results_round_at_the_subnormal_ulp():
    x = np.array([1.0, 0.0, -0.0, 0.0, 3.5], np.float64)
    y = np.array([-1.0, -0.0, -0.0, 0.0, -3.5], np.float64)
    want = [-0.0, -0.0, -0.0, 0.0, -0.0]
    assert bits(apply_form("add.rm.f64 %0, %1, %2;", np.float64, x, y)) == bits(np.array(want))
    assert bits(apply_form("add.rm.f32 %0, %1, %2;", np.float32, x.astype(np.float32), y.astype(np.float32))) == \
        bits(np.array(want, np.float32))
    assert bits(apply_form("add.rz.f64 %0, %1, %2;", np.float64, x, y)) == bits(np.array([0.0, 0.0, -0.0, 0.0, 0.0]))
    one = np.ones(5)
    assert bits(apply_form("fma.rm.f64 %0, %1, %2, %3;", np.float64, x, one, y)) == bits(np.array(want))
    assert bits(apply_form("fma.rm.f32 %0, %1, %2, %3;", np.float32, *(v.astype(np.float32) for v in (x, one, y)))) \
        == bits(np.array(want, np.float32))
    # 2^-1074 * 0.5 is a tie between 0 and the smallest subnormal; 2^-1074 * 1.5 lies between 1 and 2 of it
    d = np.array([5e-324, 5e-324, -5e-324], np.float64)
    h = np.array([0.5, 1.5, 0.5], np.float64)
    assert bits(apply_form("mul.rp.f64 %0, %1, %2;", np.float64, d, h)) == bits(np.array([5e-324, 1e-323, -0.0]))
    assert bits(apply_form("mul.rm.f64 %0, %1, %2;", np.float64, d, h)) == bits(np.array([0.0, 5e-324, -5e-324]))
    assert bits(apply_form("mul.rn.f64 %0, %1, %2;", np.float64, d, h)) == bits(np.array([0.0, 1e-323, -0.0]))
    # a product below the subnormal range plus the smallest normal: rm steps to the largest subnormal
    r = apply_form("fma.rm.f64 %0, %1, %2, %3;", np.float64, np.array([5e-324]), np.array([-5e-324]),
                   np.array([2.2250738585072014e-308]))
    assert bits(r) == ["0xfffffffffffff"]


def test_fma_f64_rounds_the_exact_value_once():
    """fma.f64 in every mode against Python fractions, on random and cancelling operands (TwoProd + TwoSum alone
    is one ulp off on some of them: the H200 data had two such in 512)."""
    from fractions import Fraction
    from autograder.gpu.emulator.rounding import F64, round_rational
    rng = np.random.default_rng(31)
    n = 256
    a = rng.standard_normal(n) * 2.0 ** rng.integers(-60, 60, n)
    b = rng.standard_normal(n)
    c = -(a * b) * (1 + rng.standard_normal(n) * 2.0 ** -45)
    c[::4] = rng.standard_normal(len(c[::4]))
    c[1] = -a[1] * b[1]  # exact product cancelled by its rounded value
    a[2], b[2], c[2] = np.array([0xBF4F056154000000, 0x4056685D94000000, 0x996278CC47306A2E],  # the H200 data's
                                np.uint64).view(np.float64)
    for mode in ("rn", "rz", "rm", "rp"):
        got = apply_form(f"fma.{mode}.f64 %0, %1, %2, %3;", np.float64, a, b, c)
        want = [round_rational(Fraction(x) * Fraction(y) + Fraction(z), F64, mode, mode == "rm")
                for x, y, z in zip(a.tolist(), b.tolist(), c.tolist())]
        assert bits(got) == bits(np.array(want)), mode
    assert bits(apply_form("fma.rn.f64 %0, %1, %2, %3;", np.float64, a[2:3], b[2:3], c[2:3])) == ["0xbfb5b8df1d2cbe45"]


def test_saturation_gives_plus_zero_for_minus_zero_and_negative_values():
    x = np.array([-0.0, -1.0, -np.inf, np.nan, 0.25, 2.0, -1e-40], np.float32)
    want = np.array([0.0, 0.0, 0.0, 0.0, 0.25, 1.0, 0.0], np.float32)
    assert bits(apply_form("cvt.sat.f32.f32 %0, %1;", np.float32, x)) == bits(want)
    assert bits(apply_form("mul.rn.sat.f32 %0, %1, %2;", np.float32, x, np.ones(7, np.float32))) == bits(want)
    assert bits(apply_form("add.rn.sat.f32 %0, %1, %2;", np.float32, x, -np.zeros(7, np.float32))) == bits(want)


def test_float_to_integer_nan_and_64_bit_results_as_the_h200():
    """NaN -> 0 from f32 to a 32-bit integer, but the sign-bit pattern from f64 or to a 64-bit integer (unsigned
    too); 64-bit results saturate at the type's limits."""
    f64 = np.array([np.nan, 1.0, 2.5, -2.5, 2.0 ** 63, 2.0 ** 64, -2.0 ** 63 - 4096, 1e300, -np.inf, 4503599627370497.0])
    assert bits(apply_form("cvt.rni.s64.f64 %0, %1;", np.int64, f64)) == \
        bits(np.array([-2 ** 63, 1, 2, -2, 2 ** 63 - 1, 2 ** 63 - 1, -2 ** 63, 2 ** 63 - 1, -2 ** 63, 4503599627370497],
                      np.int64))
    assert bits(apply_form("cvt.rzi.u64.f64 %0, %1;", np.uint64, f64)) == \
        bits(np.array([2 ** 63, 1, 2, 0, 2 ** 63, 2 ** 64 - 1, 0, 2 ** 64 - 1, 0, 4503599627370497], np.uint64))
    assert list(apply_form("cvt.rzi.s32.f64 %0, %1;", np.int32, f64[:4])) == [-2 ** 31, 1, 2, -2]
    assert list(apply_form("cvt.rmi.u32.f64 %0, %1;", np.uint32, f64[:4])) == [2 ** 31, 1, 2, 0]
    f32 = np.array([np.nan, 1.5, -1.5, 2.0 ** 40], np.float32)
    assert list(apply_form("cvt.rni.s32.f32 %0, %1;", np.int32, f32)) == [0, 2, -2, 2 ** 31 - 1]
    assert list(apply_form("cvt.rzi.s64.f32 %0, %1;", np.int64, f32)) == [-2 ** 63, 1, -1, 2 ** 40]
    assert list(apply_form("cvt.rni.u64.f32 %0, %1;", np.uint64, f32)) == [2 ** 63, 2, 0, 2 ** 40]


def test_64_bit_integers_to_float_round_once_in_directed_modes():
    from fractions import Fraction
    from autograder.gpu.emulator.rounding import F32, F64, round_rational
    u = np.array([2 ** 64 - 1, 2 ** 63 + 1, 0xAAAAAAAAAAAAAAAA, 2 ** 53 + 1, 12345], np.uint64)
    s = np.array([2 ** 63 - 1, -2 ** 63, -(2 ** 53) - 1, -3, 2 ** 62 + 2 ** 38 + 1], np.int64)
    for mode in ("rz", "rm", "rp", "rn"):
        for fmt, dt in ((F32, np.float32), (F64, np.float64)):
            for x, t in ((u, "u64"), (s, "s64")):
                got = apply_form(f"cvt.{mode}.{fmt.name}.{t} %0, %1;", dt, x)
                want = np.array([round_rational(Fraction(int(v)), fmt, mode) for v in x], dt)
                assert bits(got) == bits(want), (mode, fmt, t)


def test_div_approx_is_a_times_the_flushed_reciprocal():
    """PTX ISA: div.approx.f32 is a * (1/b); for 2^126 < |b| < 2^128 the result is 0 (or NaN for infinite a)."""
    a = np.array([1.0, -831.7, np.inf, F32_MAX, 2.0 ** -149, -(2.0 ** -126), 6.0, 0.0], np.float32)
    b = np.array([F32_MAX, 1.5e38, F32_MAX, F32_MAX, 2.0 ** -149, 2.0 ** -149, 3.0, 2.0 ** -149], np.float32)
    want = np.array([0.0, -0.0, np.nan, 0.0, 1.0, -(2.0 ** 23), 2.0, 0.0], np.float32)
    got = apply_form("div.approx.f32 %0, %1, %2;", np.float32, a, b)
    assert bits(got[[0, 1, 3, 4, 5, 6, 7]]) == bits(want[[0, 1, 3, 4, 5, 6, 7]]) and np.isnan(got[2])
    got = apply_form("div.approx.ftz.f32 %0, %1, %2;", np.float32, a, b)  # a subnormal b is 0: a / 0
    assert bits(got[[0, 1, 3, 6]]) == bits(want[[0, 1, 3, 6]]) and np.isnan(got[[2, 4, 7]]).all() and got[5] == -np.inf


def test_directed_f64_division_rounds_the_exact_quotient_once():
    """div.rz/rm/rp.f64 against Python fractions: random, exact, overflowing and subnormal quotients."""
    from fractions import Fraction
    from autograder.gpu.emulator.rounding import F64, round_rational
    rng = np.random.default_rng(33)
    x = rng.standard_normal(128) * 2.0 ** rng.integers(-40, 40, 128)
    y = rng.standard_normal(128)
    x[:6] = [6.0, -F64_MAX, F64_MAX, 5e-324, 2.2250738585072014e-308, -1.0]
    y[:6] = [3.0, 0.5, -0.75, 3.0, 2.0 ** 60, F64_MAX]
    for mode in ("rz", "rm", "rp", "rn"):
        got = apply_form(f"div.{mode}.f64 %0, %1, %2;", np.float64, x, y)
        want = [round_rational(Fraction(a) / Fraction(b), F64, mode) for a, b in zip(x.tolist(), y.tolist())]
        assert bits(got) == bits(np.array(want)), mode


def test_a_mul_add_pair_in_one_inline_asm_block_with_a_scoped_register_is_fused():
    """The golden form ``mul.f32+add.f32``: the H200 fused all 512 elements (20 of them differ from mul then add)."""
    from autograder.gpu.emulator.ops_float import fma32
    rng = np.random.default_rng(32)
    a, b = rng.standard_normal(64).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    c = -(a * b) + rng.standard_normal(64).astype(np.float32) * np.float32(1e-6)
    asm = "{ .reg .f32 t; mul.f32 t, %1, %2; add.f32 %0, t, %3; }"
    assert bits(apply_form(asm, np.float32, a, b, c)) == bits(fma32(a, b, c))
    assert bits(apply_form(asm, np.float32, a, b, c, contract=False)) == bits(a * b + c)
    assert bits(fma32(a, b, c)) != bits(a * b + c)


def test_sin_and_cos_approx_reduce_the_argument_as_the_h200():
    """t = x * float32(1/2pi) rounded toward zero, its fraction in 25-bit fixed point, one's complement in the odd
    quarter turns: every zero and its sign as the H200 gave them (golden data and a 274,016-input probe)."""
    x = np.array([np.pi, -np.pi, -0.0, 1e-8, -12.566372, 1e30, 8388609.0, 2.0 ** -149, -(2.0 ** -149)], np.float32)
    s = apply_form("sin.approx.f32 %0, %1;", np.float32, x)
    assert bits(s) == bits(np.array([0.0, -0.0, -0.0, 0.0, -0.0, 0.0, -0.0, 0.0, -0.0], np.float32))
    x = np.array([1.5707964, -1.5707963, -1.5707965, 1e30, -10.995575], np.float32)
    c = apply_form("cos.approx.ftz.f32 %0, %1;", np.float32, x)
    assert bits(c) == bits(np.array([0.0, 0.0, -0.0, 1.0, 0.0], np.float32))
    # near zero the argument is truncated to multiples of 2^-25 turns: sin(x) = 2pi * k * 2^-25
    k = np.array([3.4, -1.08, 58.15])
    s = apply_form("sin.approx.f32 %0, %1;", np.float32, (k * 2 * np.pi * 2.0 ** -25).astype(np.float32))
    assert np.allclose(s, np.trunc(k) * 2 * np.pi * 2.0 ** -25, rtol=1e-6)
    # far outside [-pi, pi] the float32 turn is what is left: 2^23 * float32(1/2pi) is 1335088.375 turns (exact
    # in float32), so sin(2^23) is sin(0.75 pi) (the H200: 0x3f3504f3), not sin(2^23) = 0.432
    assert abs(apply_form("sin.approx.f32 %0, %1;", np.float32, np.array([2.0 ** 23], np.float32))[0]
               - np.sqrt(0.5)) < 1e-6


def test_rcp_approx_ftz_f64_uses_the_high_word():
    x = np.array([0x7FF0000000000001, 0x3FF8000000000000, 0x000FFFFFFFFFFFFF, 0x7FEFFFFFFFFFFFFF, 0x8000000000000001,
                  0x400921FB54442D18], np.uint64).view(np.float64)
    r = apply_form("rcp.approx.ftz.f64 %0, %1;", np.float64, x)
    assert bits(r) == ["0x0", "0x3fe5555500000000", "0x7ff0000000000000", "0x0", "0xfff0000000000000",
                       "0x3fd45f3000000000"]


def test_64_bit_bit_fields_take_the_whole_position_and_length():
    """bfe/bfi.b64 on the H200 use all 32 bits of pos and len (the 32-bit forms only their low bytes, PTX ISA)."""
    a = np.array([0x123456789ABCDEF0, 0x100000000, 0xAAAAAAAAAAAAAAAA, 0x8000000000000001, 0xF0], np.uint64)
    pos = np.array([0x100, 0, 0x101, 0x1F, 4], np.uint32)
    ln = np.array([0xFFFFFFFF, 0x100, 0xF, 0x101, 4], np.uint32)
    assert bits(apply_form("bfe.u64 %0, %1, %2, %3;", np.uint64, a, pos, ln)) == \
        ["0x0", "0x100000000", "0x0", "0x100000000", "0xf"]
    assert bits(apply_form("bfe.s64 %0, %1, %2, %3;", np.int64, a.view(np.int64), pos, ln)) == \
        ["0x0", "0x100000000", "0xffffffffffffffff", "0xffffffff00000000", "0xffffffffffffffff"]
    base = np.array([0x80000000, 0xAAAAAAAAAAAAAAAA, 0x123456789ABCDEF0, 0xFFFFFFFF, 0], np.uint64)
    ins = np.array([0x7FFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFE, 2, 0x100000000, 5], np.uint64)
    pos = np.array([0x3F, 0x101, 8, 0x100, 60], np.uint32)
    ln = np.array([0x100, 0x18, 0x101, 0x40, 8], np.uint32)
    assert bits(apply_form("bfi.b64 %0, %1, %2, %3, %4;", np.uint64, ins, base, pos, ln)) == \
        ["0x8000000080000000", "0xaaaaaaaaaaaaaaaa", "0x2f0", "0xffffffff", "0x5000000000000000"]
    assert list(apply_form("bfe.u32 %0, %1, %2, %3;", np.uint32, np.full(2, 0xF0, np.uint32),
                           np.array([0x104, 4], np.uint32), np.array([0x104, 4], np.uint32))) == [0xF, 0xF]


def test_testp_normal_f32_of_zero_is_true_on_the_h200():
    x = np.array([0.0, -0.0, 1.0, 1e-40, np.inf, np.nan, np.finfo(np.float32).tiny], np.float32)
    got = apply_form("{ .reg .pred p; testp.normal.f32 p, %1; selp.u32 %0, 1, 0, p; }", np.uint32, x)
    assert list(got) == [1, 1, 1, 0, 0, 0, 1]


ATOMIC_SUBNORMALS = r'''
extern "C" __global__ void atomics(float* g, const float* a, float* s_out)
{
    __shared__ float s[8];
    int i = threadIdx.x;
    s[i] = g[i];
    __syncthreads();
    atomicAdd(&s[i], a[i]);
    asm volatile("red.global.add.f32 [%0], %1;" :: "l"(g + i), "f"(a[i]) : "memory");
    __syncthreads();
    s_out[i] = s[i];
}
'''


def test_global_float_atomic_add_flushes_subnormals_and_shared_does_not():
    sub = np.float32(2.0 ** -149)
    g = np.array([sub, -sub, 1.0, sub, 0.0, -0.0, np.float32(1e-39), 3.0], np.float32)
    a = np.array([0.0, 0.0, 0.0, sub, sub, -sub, 0.0, 0.5], np.float32)
    s_out = np.zeros(8, np.float32)
    g0 = g.copy()
    run(ATOMIC_SUBNORMALS, "atomics", 1, 8, [g, a, s_out])
    assert bits(g) == bits(np.array([0.0, 0.0, 1.0, 0.0, 0.0, -0.0, 0.0, 3.5], np.float32))
    assert bits(s_out) == bits((g0 + a).astype(np.float32))


# --- tensor cores, half precision, narrow rounding ---------------------------------------------------

MMA_M16N8K8 = r'''
extern "C" __global__ void mma16(const unsigned* a, const unsigned* b, float* out, int live)
{
    const int l = threadIdx.x;
    if (l >= live) return;
    float d0, d1, d2, d3;
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
                 "{%7, %7, %7, %7};" : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
                 : "r"(a[2 * l]), "r"(a[2 * l + 1]), "r"(b[l]), "f"(0.5f));
    out[4 * l] = d0; out[4 * l + 1] = d1; out[4 * l + 2] = d2; out[4 * l + 3] = d3;
}
'''


def _mma_fragments(A, B):
    """Lane words of m16n8k8's A (16 x 8) and B (8 x 8) f16 fragments (PTX ISA layout)."""
    lane = np.arange(32)
    g, t = lane >> 2, lane & 3
    h = A.astype(np.float16).view(np.uint16).astype(np.uint32)
    hb = B.astype(np.float16).view(np.uint16).astype(np.uint32)
    a = np.stack([h[g, 2 * t] | (h[g, 2 * t + 1] << 16), h[g + 8, 2 * t] | (h[g + 8, 2 * t + 1] << 16)], axis=1)
    b = hb[2 * t, g] | (hb[2 * t + 1, g] << 16)
    return a.reshape(-1).astype(np.uint32), b.astype(np.uint32)


def test_mma_computes_the_product_and_needs_the_whole_warp():
    rng = np.random.default_rng(9)
    A, B = rng.integers(-4, 5, (16, 8)), rng.integers(-4, 5, (8, 8))
    a, b = _mma_fragments(A, B)
    out = np.zeros(128, np.float32)
    run(MMA_M16N8K8, "mma16", 1, 32, [a, b, out, np.int32(32)])
    lane = np.arange(32)
    rows, cols = np.stack([lane >> 2, lane >> 2, (lane >> 2) + 8, (lane >> 2) + 8], 1), \
        np.stack([2 * (lane & 3), 2 * (lane & 3) + 1] * 2, 1)
    assert np.array_equal(out.reshape(32, 4), (A @ B + 0.5)[rows, cols])  # small integers: exact
    for block, live, says in ((32, 20, "20 из 32"), (48, 48, "mma.sync")):  # lanes returned; a warp of 16 threads
        r = launch(nvrtc.ptx(MMA_M16N8K8), "mma16", 1, block, [np.resize(a, 2 * block), np.resize(b, block),
                                                             np.zeros(4 * block, np.float32), np.int32(live)])
        assert [f.kind for f in r.findings] == ["partial_warp_collective"], r.findings
        assert says in r.findings[0].message



def test_exponents_read_from_the_bits_equal_frexps_for_every_tensor_core_format():
    """ops_tensor._exponents_of_finite (the accumulation's fast path) against _exponents (frexp) on every finite f16
    value, on bf16 / f32 extremes, subnormals, zeros of both signs, and on a transposed (strided) view."""
    from autograder.gpu.emulator import ops_tensor

    every_f16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float64)
    every_f16 = every_f16[np.isfinite(every_f16)]
    f32 = np.array([0.0, -0.0, 1e-45, -1e-45, 1.1754942e-38, 1.1754944e-38, 3.4028235e38, -3.4028235e38, 1.0, 0.75],
                   dtype=np.float32).astype(np.float64)
    bf16 = (np.array([2.0 ** -133, 2.0 ** 127 * 1.9921875, 2.0 ** -126], dtype=np.float64))
    for values in (every_f16, f32, bf16, every_f16[:4096].reshape(64, 64).T):
        assert np.array_equal(ops_tensor._exponents_of_finite(values), ops_tensor._exponents(values))

LDMATRIX = r'''
extern "C" __global__ void rows(const unsigned* src, const int* row, unsigned* out, int fill, int sync)
{
    __shared__ __align__(16) unsigned s[64 * 4];
    for (int j = threadIdx.x; j < fill; j += blockDim.x) s[j] = src[j];
    if (sync) __syncthreads();
    unsigned addr = (unsigned)__cvta_generic_to_shared(s) + 16 * row[threadIdx.x];
    unsigned r0, r1, r2, r3;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
    out[4 * threadIdx.x] = r0; out[4 * threadIdx.x + 1] = r1; out[4 * threadIdx.x + 2] = r2;
    out[4 * threadIdx.x + 3] = r3;
}
'''


def _ldmatrix(rows_of_lanes, fill=256, sync=1, threads=32):
    src = np.arange(1000, 1256, dtype=np.uint32)
    row = np.resize(np.asarray(rows_of_lanes, np.int32), threads)
    out = np.zeros(4 * threads, np.uint32)
    r = launch(nvrtc.ptx(LDMATRIX), "rows", 1, threads, [src, row, out, np.int32(fill), np.int32(sync)])
    return r, src, row, out


def test_ldmatrix_goes_through_the_shared_memory_checks():
    r, src, row, out = _ldmatrix(np.random.default_rng(3).permutation(64)[:32])
    assert r.ok, r.findings
    lane = np.arange(32)
    expected = np.stack([src[row[8 * i + lane // 4] * 4 + lane % 4] for i in range(4)], axis=1)
    assert np.array_equal(out.reshape(32, 4), expected)  # register i: row l/4 of matrix i, words l%4
    r, *_ = _ldmatrix(np.where(np.arange(32) == 5, 64, np.arange(32)))  # lane 5 points past the 1024 bytes
    assert [f.kind for f in r.findings] == ["shared_oob"] and r.findings[0].thread == (5, 0, 0)
    r, *_ = _ldmatrix(np.arange(32, 64), fill=128)  # rows 32-63 were never written
    assert [f.kind for f in r.findings] == ["uninitialized_shared"]
    r, *_ = _ldmatrix(np.arange(63, 31, -1), sync=0, threads=64)  # the other warp writes those rows: no barrier
    assert "race" in [f.kind for f in r.findings]


HALF_ATOMIC_AND_MUL24 = r'''
extern "C" __global__ void misc(unsigned* acc, const unsigned* x, const int* a, const int* b, int* out)
{
    const int i = threadIdx.x;
    asm volatile("{ .reg .u64 g; cvta.to.global.u64 g, %0; red.global.add.noftz.f16x2 [g], %1; }"
                 :: "l"(acc + i % 4), "r"(x[i]) : "memory");
    int hi, lo;
    unsigned madu;
    asm("mul24.hi.s32 %0, %1, %2;" : "=r"(hi) : "r"(a[i]), "r"(b[i]));
    asm("mul24.lo.s32 %0, %1, %2;" : "=r"(lo) : "r"(a[i]), "r"(b[i]));
    asm("mad24.lo.u32 %0, %1, %2, %3;" : "=r"(madu) : "r"(a[i]), "r"(b[i]), "r"(7));
    out[3 * i] = hi; out[3 * i + 1] = lo; out[3 * i + 2] = (int)madu;
}
'''


def test_f16x2_atomics_in_lane_order_and_24_bit_products():
    rng = np.random.default_rng(5)
    halves = (rng.standard_normal(128) * 3).astype(np.float16)
    x = halves.view(np.uint16).astype(np.uint32).reshape(64, 2)
    x = (x[:, 0] | (x[:, 1] << 16)).astype(np.uint32)
    acc = np.zeros(4, np.uint32)
    a = rng.integers(-2 ** 31, 2 ** 31, 64).astype(np.int32)
    b = rng.integers(-2 ** 31, 2 ** 31, 64).astype(np.int32)
    out = np.zeros(3 * 64, np.int32)
    run(HALF_ATOMIC_AND_MUL24, "misc", 1, 64, [acc, x, a, b, out])
    expected = np.zeros((4, 2), np.float16)
    for i in range(64):  # lane order; numpy's float16 addition is correctly rounded
        expected[i % 4] = expected[i % 4] + halves.reshape(64, 2)[i]
    assert np.array_equal(acc.view(np.uint16).reshape(4, 2), expected.view(np.uint16))

    def low24(v, signed):
        v = v.astype(np.int64) & 0xFFFFFF
        return np.where(v >= 2 ** 23, v - 2 ** 24, v) if signed else v
    p = low24(a, True) * low24(b, True)
    o = out.reshape(64, 3).astype(np.int64)
    assert np.array_equal(o[:, 0] & 0xFFFFFFFF, (p >> 16) & 0xFFFFFFFF)
    assert np.array_equal(o[:, 1] & 0xFFFFFFFF, p & 0xFFFFFFFF)
    assert np.array_equal(o[:, 2] & 0xFFFFFFFF, (low24(a, False) * low24(b, False) + 7) & 0xFFFFFFFF)


def test_round_to_format_rounds_once_in_every_mode():
    from autograder.gpu.emulator import rounding as rnd

    rng = np.random.default_rng(1)
    x = rng.standard_normal(200_000) * 2.0 ** rng.integers(-30, 18, 200_000)
    x = np.concatenate([x, np.float16(rng.standard_normal(1000)).astype(np.float64) * (1 + 2.0 ** -11)])  # ties
    with np.errstate(over="ignore"):
        assert np.array_equal(rnd.f16_bits(x), x.astype(np.float16).view(np.uint16))  # NumPy rounds f64 -> f16 once
        rn = x.astype(np.float16)
        up, down = np.nextafter(rn, np.float16(np.inf)), np.nextafter(rn, np.float16(-np.inf))
    inside = np.abs(x) < 65504
    for mode, ok in (("rz", lambda r: np.abs(r) <= np.abs(x)), ("rm", lambda r: r <= x), ("rp", lambda r: r >= x)):
        r = rnd.round_to_format(x, rnd.F16, mode)
        assert ok(r)[inside].all(), mode  # on the mode's side of x, and one of the two f16 neighbours of x
        neighbour = (r == rn) | (r == up) | (r == down)
        assert neighbour[inside].all() and (np.abs(r - x) < np.abs(up.astype(np.float64) - down))[inside].all(), mode
    assert rnd.round_to_format(np.array([65520.0, -65520.0]), rnd.F16, "rz").tolist() == [65504.0, -65504.0]
    assert rnd.round_to_format(np.array([2.0 ** -25 * 1.5]), rnd.F16, "rna")[0] == 2.0 ** -24
    assert rnd.tf32_bits(np.array([1 + 2.0 ** -11], np.float32))[0] == np.float32(1 + 2.0 ** -10).view(np.uint32)


@pytest.mark.parametrize("arch, case", [("compute_80", {"H": 1, "n": 77, "d": 128, "seed": 4, "causal": True}),
                                        ("compute_75", {"H": 2, "n": 100, "d": 64, "seed": 2})])
def test_lesson09_tensor_core_kernels(arch, case):
    """Lesson 09's reference kernels (mma.sync, ldmatrix, cp.async at compute_80) as its wrappers launch them
    (the H200's K/V tile BC = 64 at compute_80, the source's sm_75 tile otherwise), within the lesson's bounds."""
    from autograder.lessons.lesson09 import checks as l09

    a, b = l09.mma_inputs(100, 37, 77, 1)
    c = np.full((100, 37), np.nan, np.float32)
    warps = ((100 + 15) // 16) * ((37 + 7) // 8)
    run(reference("09_tensor_cores", "mma_source", "MMA_SRC"), "mma_matmul", ((warps + 3) // 4,), 128,
        [a, b, c, np.int32(100), np.int32(37), np.int32(77)], arch=arch)
    expected, tol = l09.mma_product(a, b)
    assert np.all(np.abs(c - expected) <= tol)
    H, n, d, causal = case["H"], case["n"], case["d"], case.get("causal", False)
    q, k, v = l09._inputs(H, n, d, case["seed"])
    o, tiles = np.full_like(q, np.nan), np.zeros(1, np.int32)
    bc = 64 if arch == "compute_80" else 16  # the source's default below sm_80
    source = (f"#define BC {bc}\n" if arch == "compute_80" else "") + reference("09_tensor_cores", "flash_tc_source",
                                                                            "FLASH_TC_SRC")
    run(source, f"flash_attention_tc_d{d}", (H, (n + 127) // 128), 128,
        [q, k, v, o, np.int32(n), np.float32(1 / math.sqrt(d)), np.int32(causal), tiles],
        shared_bytes=(128 + 4 * bc) * (d + 8) * 2, arch=arch)
    expected, tol = l09.oracle_and_bound(q, k, v, causal)
    assert np.all(np.abs(o - expected) <= tol) and tiles[0] > 0
