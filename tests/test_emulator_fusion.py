"""Fused segments (autograder/gpu/emulator/fusion.py) give the bits, findings, issue and FLOP counts of the
instruction-by-instruction closures: every kernel here runs with ``fuse=True`` and ``fuse=False`` and the two runs
must agree exactly, on inputs chosen to hit the fallbacks (float32 rounding midpoints, tiny and subnormal sums,
zeros of both signs, infinities, NaNs, overflow) and on kernels with divergence, exited and padding lanes, and
shared-memory findings (uninitialised reads, races, out of bounds) inside the fused stretches."""
import numpy as np
import pytest

from autograder.gpu import nvrtc
from autograder.gpu.emulator import fusion, launch

pytestmark = pytest.mark.skipif(nvrtc._NVRTC is None, reason="NVRTC is not installed")

D = 32
KERNEL = r'''
#define D 32
extern "C" __global__ void fused(const float* x, const float* y, const float* z, float* out, float* sums,
                                 int mode, int skip, int shift)
{
    __shared__ float ks[4 * D];
    const int t = threadIdx.x, row = blockIdx.x * blockDim.x + t;
    for (int e = t; e < 4 * D; e += blockDim.x)
        if (e != skip) ks[e] = y[blockIdx.x * 4 * D + e];      // skip >= 0: one element never written
    if (mode != 3) __syncthreads();                            // mode 3: a race between the writes and the reads
    if (mode == 2 && t % 5 == 4) return;                       // exited lanes
    float q[D], o[D];
#pragma unroll
    for (int i = 0; i < D; ++i) { q[i] = x[row * D + i]; o[i] = z[row * D + i]; }
    const float a = z[row * D];
    float total = 0.0f;
    for (int j = 0; j < 4; ++j) {
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < D; ++i) s = fmaf(q[i], ks[j * D + i + shift], s);   // a chain of FMAs
        total += s;
        if (mode == 1 && (t + j) % 3 == 0) continue;                              // divergence: masked groups
#pragma unroll
        for (int i = 0; i < D; ++i) o[i] = o[i] * a + s * ks[j * D + i];          // independent mul + FMA
    }
#pragma unroll
    for (int i = 0; i < D; ++i) out[row * D + i] = o[i];
    sums[row] = total;
}
'''


def _values(rng, n, profile):
    if profile == "normal":
        return rng.standard_normal(n).astype(np.float32)
    if profile == "short":  # short mantissas: exact products, sums on float32 rounding midpoints
        return (rng.integers(-64, 64, n) / 8.0 * 2.0 ** rng.integers(-3, 4, n)).astype(np.float32)
    if profile == "midpoint":  # q = 1 + 2^-23, k = 1, 2^-24 - 2^-47, ...: s = fma(q, k, s) has float64 sums on a
        # float32 midpoint that are not exact, (1 + 2^-23) + (2^-24 - 2^-70), where rounding them again is wrong
        if n % (4 * D) == 0 and n // (4 * D) <= 8:  # y (the tiles)
            return np.resize(np.array([1.0, 2.0 ** -24 - 2.0 ** -47], np.float32), n)
        return np.full(n, 1 + 2.0 ** -23, np.float32)
    if profile == "tiny":  # sums near and below 1.2e-38, subnormals, zeros of both signs
        v = rng.choice(np.array([1e-20, -1e-20, 3e-19, 1e-38, -2e-39, 1e-45, 0.0, -0.0, 1.0, 0.5], np.float32), n)
        return (v * rng.integers(1, 4, n)).astype(np.float32)
    if profile == "special":  # infinities, NaNs, overflow
        v = rng.standard_normal(n).astype(np.float32) * np.float32(1e30)
        pick = rng.random(n)
        v[pick < 0.02] = np.inf
        v[(pick >= 0.02) & (pick < 0.04)] = -np.inf
        v[(pick >= 0.04) & (pick < 0.05)] = np.nan
        return v
    raise ValueError(profile)


def _run(ptx, fuse, blocks, threads, x, y, z, mode, skip=-1, shift=0):
    out = np.full(blocks * threads * D, np.nan, np.float32)
    sums = np.full(blocks * threads, np.nan, np.float32)
    r = launch(ptx, "fused", blocks, threads, [x, y, z, out, sums, np.int32(mode), np.int32(skip), np.int32(shift)],
               fuse=fuse)
    findings = [(f.kind, f.message, f.block, f.thread, f.instruction, f.count) for f in r.findings]
    return out.view(np.uint32), sums.view(np.uint32), findings, r.issued, r.flops, r.global_read, r.global_written


@pytest.fixture(scope="module")
def ptx():
    return nvrtc.ptx(KERNEL, arch="compute_75")


@pytest.fixture()
def fused_runs(monkeypatch):
    """How many times a segment ran fused (returned True)."""
    count = [0]
    run = fusion.Segment.run

    def counting(self, mask):
        done = run(self, mask)
        count[0] += done
        return done
    monkeypatch.setattr(fusion.Segment, "run", counting)
    return count


@pytest.mark.parametrize("profile", ["normal", "short", "midpoint", "tiny", "special"])
@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("threads", [64, 40])  # 40: padding lanes in each block's second warp
def test_fused_segments_match_the_closures(ptx, fused_runs, profile, mode, threads):
    rng = np.random.default_rng([len(profile), mode, threads])
    blocks = 3
    x = _values(rng, blocks * threads * D, profile)
    y = _values(rng, blocks * 4 * D, profile)
    z = _values(rng, blocks * threads * D, profile)
    plain = _run(ptx, False, blocks, threads, x, y, z, mode)
    fused_runs[0] = 0
    fused = _run(ptx, True, blocks, threads, x, y, z, mode)
    if profile in ("normal", "short"):
        assert fused_runs[0] > 0  # the fused path ran (with tiny sums or NaNs everywhere, every segment falls back)
    for a, b in zip(plain[:2], fused[:2]):
        assert np.array_equal(a, b)
    assert plain[2:] == fused[2:]
    assert not plain[2]


@pytest.mark.parametrize("mode, skip, shift", [(0, 37, 0), (3, -1, 0), (0, -1, 1), (1, 100, 0)])
def test_fused_segments_report_what_the_closures_report(ptx, mode, skip, shift):
    """An uninitialised element, a race, an out-of-bounds read (shift 1: the last row's last load): the same
    findings, counts and instructions with and without fusion."""
    rng = np.random.default_rng(7)
    blocks, threads = 2, 64
    x, y, z = (_values(rng, k, "normal") for k in (blocks * threads * D, blocks * 4 * D, blocks * threads * D))
    plain = _run(ptx, False, blocks, threads, x, y, z, mode, skip, shift)
    fused = _run(ptx, True, blocks, threads, x, y, z, mode, skip, shift)
    assert plain[2], "the kernel was meant to have a finding"
    assert plain[2:] == fused[2:]
    for a, b in zip(plain[:2], fused[:2]):
        assert np.array_equal(a, b)


def test_the_kernel_has_fusable_segments(ptx):
    from autograder.gpu.emulator.ptx import parse

    kernel = parse(ptx)["fused"]
    plans = fusion.plan_run(kernel, {}, 0, len(kernel.instructions))
    plans = [p for _, _, p in plans if p is not None]
    assert any(p.nsum >= D for p in plans) and any(p.loads for p in plans)
