"""Does the PTX emulator (autograder.gpu.emulator) report what a GPU would fault on or leave undefined?

Each test runs a small faulty CUDA C kernel (PTX from NVRTC, no GPU needed) and asserts the finding's kind,
where it happened (block, thread, CUDA source line) and what its Russian message says; the same kernel with
the fault fixed gives no finding (so the detector is not merely noisy).
"""
import numpy as np
import pytest

from autograder.gpu import emulated_cupy as ecp

from autograder.gpu import nvrtc
from autograder.gpu.emulator import launch

pytestmark = pytest.mark.skipif(nvrtc._NVRTC is None, reason="NVRTC is not installed")


def line_of(source: str, text: str) -> int:
    """The 1-based line of ``source`` holding ``text``."""
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


def kinds(result) -> list[str]:
    return [f.kind for f in result.findings]


NO_TAIL_GUARD = r'''
extern "C" __global__ void twice(const float* x, float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = 2.0f * x[i];   // no `if (i < n)`
}
'''


@pytest.mark.parametrize("arch", ["compute_75", "compute_80"])
def test_a_read_past_the_end_of_an_array_names_the_array_the_bytes_the_thread_and_the_line(arch):
    n = 77
    x, y = np.arange(n, dtype=np.float32), np.zeros(n, dtype=np.float32)
    r = launch(nvrtc.ptx(NO_TAIL_GUARD, arch=arch), "twice", 3, 32, [x, y, np.int32(n)])
    assert not r.ok
    (f,) = r.findings
    assert f.kind == "global_oob"
    assert f.block == (2, 0, 0) and f.thread == (13, 0, 0)  # i = 77: the first element past the end
    assert f.line == line_of(NO_TAIL_GUARD, "y[i] = 2.0f")
    assert "чтение 4 Б" in f.message and "args[0] вызова ядра" in f.message and "на 0 Б за концом" in f.message
    assert "float32[77], 308 Б" in f.message
    assert "ld.global" in f.instruction
    # the run stopped at the faulting load, as a GPU stops the kernel: the store after it never ran
    assert not y.any()


def test_the_same_kernel_in_bounds_has_no_finding():
    n = 96
    x, y = np.arange(n, dtype=np.float32), np.zeros(n, dtype=np.float32)
    r = launch(nvrtc.ptx(NO_TAIL_GUARD), "twice", 3, 32, [x, y, np.int32(n)])
    assert r.ok and np.array_equal(y, 2 * x)


def test_a_write_landing_in_the_gap_after_an_array_is_caught_even_when_another_array_follows():
    source = r'''
extern "C" __global__ void poke(float* a, float* b, int k)
{
    if (threadIdx.x == 0) a[k] = 1.0f;
}
'''
    a, b = np.zeros(10, dtype=np.float32), np.zeros(10, dtype=np.float32)
    r = launch(nvrtc.ptx(source), "poke", 1, 32, [a, b, np.int32(12)])
    (f,) = r.findings
    assert f.kind == "global_oob" and "запись 4 Б" in f.message and "на 8 Б за концом" in f.message
    assert not b.any() and not a.any()
    r = launch(nvrtc.ptx(source), "poke", 1, 32, [a, b, np.int32(-1)])
    assert r.findings[0].kind == "global_oob" and "до начала массива" in r.findings[0].message


SHARED_OOB = r'''
extern "C" __global__ void shift(const float* x, float* y)
{
    __shared__ float s[32];
    s[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    y[threadIdx.x] = s[threadIdx.x + 1];   // thread 31 reads s[32]
}
'''


def test_a_shared_read_past_the_array_is_reported_with_the_shared_size():
    x, y = np.arange(32, dtype=np.float32), np.zeros(32, dtype=np.float32)
    r = launch(nvrtc.ptx(SHARED_OOB), "shift", 1, 32, [x, y])
    (f,) = r.findings
    assert f.kind == "shared_oob" and f.thread == (31, 0, 0) and f.block == (0, 0, 0)
    assert f.line == line_of(SHARED_OOB, "s[threadIdx.x + 1]")
    assert "смещение 128 Б" in f.message and "128 Б разделяемой памяти" in f.message


RACE = r'''
extern "C" __global__ void rotate(const float* x, float* y)
{
    __shared__ float s[256];
    s[threadIdx.x] = x[threadIdx.x];
    SYNC
    y[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}
'''


@pytest.mark.parametrize("threads", [256, 32])
def test_a_missing_syncthreads_is_a_race_although_the_values_come_out_right(threads):
    x, y = np.arange(threads, dtype=np.float32), np.zeros(threads, dtype=np.float32)
    source = RACE.replace("SYNC", "")
    r = launch(nvrtc.ptx(source), "rotate", 1, threads, [x, y])
    assert np.array_equal(y, np.roll(x, -1))  # lockstep hides it: only the finding can fail the check
    # across warps it needs __syncthreads(); inside the one warp of 32 threads __syncwarp() (issue 59)
    assert kinds(r) == (["race"] if threads > 32 else ["warp_race"])
    f = r.findings[0]
    assert f.line == line_of(source, "y[threadIdx.x] = s[")
    assert "гонка в разделяемой памяти" in f.message and "partial" not in f.message and "s, байт" in f.message
    assert f"строка {line_of(source, 's[threadIdx.x] = x')}" in f.message  # the other access's line


@pytest.mark.parametrize("sync, threads", [("__syncthreads();", 256), ("__syncwarp();", 32)])
def test_a_barrier_or_a_warp_sync_orders_the_accesses(sync, threads):
    x, y = np.arange(threads, dtype=np.float32), np.zeros(threads, dtype=np.float32)
    r = launch(nvrtc.ptx(RACE.replace("SYNC", sync)), "rotate", 1, threads, [x, y])
    assert r.ok, [str(f) for f in r.findings]
    assert np.array_equal(y, np.roll(x, -1))


def test_syncwarp_does_not_order_threads_of_different_warps():
    x, y = np.arange(64, dtype=np.float32), np.zeros(64, dtype=np.float32)
    r = launch(nvrtc.ptx(RACE.replace("SYNC", "__syncwarp();")), "rotate", 1, 64, [x, y])
    assert kinds(r) == ["race"]
    assert r.findings[0].thread == (31, 0, 0)  # lane 31 reads s[32], written by warp 1


def test_write_after_read_in_one_epoch_is_a_race():
    source = r'''
extern "C" __global__ void war(float* y)
{
    __shared__ float s[64];
    s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    float v = s[63 - threadIdx.x];
    s[threadIdx.x] = v;          // overwrites what another thread reads: needs a barrier before
    __syncthreads();
    y[threadIdx.x] = s[threadIdx.x];
}
'''
    y = np.zeros(64, dtype=np.float32)
    r = launch(nvrtc.ptx(source), "war", 1, 64, [y])
    assert kinds(r) == ["race"]
    assert r.findings[0].line == line_of(source, "s[threadIdx.x] = v;")
    assert "пишет в s" in r.findings[0].message and "читал" in r.findings[0].message


DIVERGENT_BARRIER = r'''
extern "C" __global__ void halves(const float* x, float* y)
{
    __shared__ float s[64];
    if (x[threadIdx.x] > 0.0f) {
        s[threadIdx.x] = 1.0f;
        __syncthreads();
        y[threadIdx.x] = s[threadIdx.x ^ 1];
    } else {
        s[threadIdx.x] = -1.0f;
        __syncthreads();
        y[threadIdx.x] = -s[threadIdx.x ^ 1];
    }
}
'''


def test_syncthreads_inside_a_divergent_if_is_reported():
    x = np.where(np.arange(64) % 3 == 0, 1.0, -1.0).astype(np.float32)
    y = np.zeros(64, dtype=np.float32)
    r = launch(nvrtc.ptx(DIVERGENT_BARRIER), "halves", 1, 64, [x, y])
    assert "divergent_barrier" in kinds(r)
    f = r.findings[kinds(r).index("divergent_barrier")]
    assert "разных __syncthreads()" in f.message and f.block == (0, 0, 0)
    assert str(line_of(DIVERGENT_BARRIER, "__syncthreads();")) in f.message
    # uniform data: every thread takes the same branch, no finding
    r = launch(nvrtc.ptx(DIVERGENT_BARRIER), "halves", 1, 64, [np.ones(64, np.float32), y])
    assert r.ok and np.all(y == 1)


def test_syncthreads_after_some_threads_returned_is_reported():
    source = r'''
extern "C" __global__ void early(const float* x, float* y, int n)
{
    __shared__ float s[64];
    if (threadIdx.x >= n) return;
    s[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    y[threadIdx.x] = s[n - 1 - threadIdx.x];
}
'''
    x, y = np.arange(64, dtype=np.float32), np.zeros(64, dtype=np.float32)
    r = launch(nvrtc.ptx(source), "early", 1, 64, [x, y, np.int32(40)])
    assert kinds(r) == ["barrier_after_exit"]
    assert "уже вышли из ядра" in r.findings[0].message and r.findings[0].line == line_of(source, "__syncthreads")
    assert np.array_equal(y[:40], x[:40][::-1])
    assert launch(nvrtc.ptx(source), "early", 1, 64, [x, y, np.int32(64)]).ok


HALF_WARP_SHUFFLE = r'''
extern "C" __global__ void half(const float* x, float* y)
{
    float v = x[threadIdx.x];
    if (threadIdx.x < 16)
        v += __shfl_xor_sync(0xffffffffu, v, 1);   // the mask names 32 lanes, 16 arrive
    y[threadIdx.x] = v;
}
'''


def test_a_shuffle_reached_by_half_a_warp_is_reported():
    x, y = np.arange(32, dtype=np.float32), np.zeros(32, dtype=np.float32)
    r = launch(nvrtc.ptx(HALF_WARP_SHUFFLE), "half", 1, 32, [x, y])
    assert kinds(r) == ["partial_warp_collective"]
    f = r.findings[0]
    assert f.line == line_of(HALF_WARP_SHUFFLE, "__shfl_xor_sync") and f.thread == (0, 0, 0)
    assert "только 16 из 32" in f.message
    fixed = HALF_WARP_SHUFFLE.replace("0xffffffffu", "0x0000ffffu")
    r = launch(nvrtc.ptx(fixed), "half", 1, 32, [x, y])
    assert r.ok, [str(f) for f in r.findings]
    assert np.array_equal(y[:16], x[:16] + x[np.arange(16) ^ 1]) and np.array_equal(y[16:], x[16:])


def test_a_shuffle_reading_a_lane_that_does_not_exist_is_reported():
    source = r'''
extern "C" __global__ void partial(const float* x, float* y)
{
    float v = x[threadIdx.x];
    v += __shfl_down_sync(0xffffffffu, v, 8);
    y[threadIdx.x] = v;
}
'''
    x, y = np.arange(48, dtype=np.float32), np.zeros(48, dtype=np.float32)
    r = launch(nvrtc.ptx(source), "partial", 1, 48, [x, y])  # warp 1 has lanes 0..15 only
    assert kinds(r) == ["partial_warp_collective"]
    assert r.findings[0].thread == (40, 0, 0) and "дорожки 16" in r.findings[0].message


def test_a_read_of_shared_memory_nobody_wrote_is_reported():
    source = r'''
extern "C" __global__ void holes(float* y)
{
    __shared__ float s[64];
    if (threadIdx.x < 32) s[threadIdx.x] = 1.0f;
    __syncthreads();
    y[threadIdx.x] = s[threadIdx.x];
}
'''
    y = np.zeros(64, dtype=np.float32)
    r = launch(nvrtc.ptx(source), "holes", 1, 64, [y])
    assert kinds(r) == ["uninitialized_shared"]
    f = r.findings[0]
    assert f.thread == (32, 0, 0) and f.line == line_of(source, "y[threadIdx.x] = s[")
    assert "неинициализированной" in f.message and "s, байт 128" in f.message
    assert np.isnan(y[32:]).all()  # the emulator's garbage is NaN (0xFF bytes), never a silent zero


def test_an_opcode_the_emulator_does_not_know_is_a_clean_unsupported_finding():
    source = r'''
extern "C" __global__ void groups(const int* x, unsigned* y)
{
    int r;
    asm("dp4a.s32.s32 %0, %1, %1, %1;" : "=r"(r) : "r"(x[threadIdx.x]));   // not implemented (yet)
    y[threadIdx.x] = r;
}
'''
    x, y = np.zeros(32, dtype=np.int32), np.zeros(32, dtype=np.uint32)
    r = launch(nvrtc.ptx(source), "groups", 1, 32, [x, y])
    (f,) = r.findings
    assert f.kind == "unsupported" and "dp4a" in f.instruction and "только на GPU" in f.message
    assert not y.any()  # stopped there: nothing after it ran


def test_an_endless_loop_stops_with_a_timeout():
    source = r'''
extern "C" __global__ void spin(volatile int* flag)
{
    while (flag[0] == 0) { }
}
'''
    r = launch(nvrtc.ptx(source), "spin", 1, 32, [np.zeros(1, np.int32)], max_issues=5000)
    assert kinds(r) == ["timeout"]


def test_a_misaligned_vector_load_is_reported():
    source = r'''
extern "C" __global__ void vec(const float* x, float* y, int off)
{
    float4 v = *reinterpret_cast<const float4*>(x + off);
    y[threadIdx.x] = v.x + v.w;
}
'''
    x, y = np.arange(16, dtype=np.float32), np.zeros(32, dtype=np.float32)
    r = launch(nvrtc.ptx(source), "vec", 1, 32, [x, y, np.int32(1)])
    assert kinds(r) == ["misaligned"]
    r = launch(nvrtc.ptx(source), "vec", 1, 32, [x, y, np.int32(4)])
    assert r.ok and np.all(y == 4 + 7)


def test_two_threads_writing_different_values_to_one_global_address_is_a_race():
    source = r'''
extern "C" __global__ void last_wins(const float* x, float* y, int same)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[same ? 0 : i / 2] = same ? 1.0f : x[i];   // pairs of threads share one element
}
'''
    x, y = np.arange(128, dtype=np.float32), np.zeros(64, dtype=np.float32)
    r = launch(nvrtc.ptx(source), "last_wins", 2, 64, [x, y, np.int32(0)])
    assert kinds(r) == ["global_race"]
    f = r.findings[0]
    assert "массив args[1] вызова ядра, байт 0" in f.message and f.thread == (0, 0, 0) and "поток (1, 0, 0) блока (0, 0, 0)" in f.message
    # every thread writing the same value: the outcome does not depend on the order, no finding
    r = launch(nvrtc.ptx(source), "last_wins", 2, 64, [x, y, np.int32(1)])
    assert r.ok and y[0] == 1.0


# --- the lessons' reference kernels with one classic bug each ----------------------------------------------------

def lesson06(name: str) -> str:
    from autograder.course import grading

    ns = {}
    exec(grading.reference_answers("06_cuda_basics")[f"{name}_source"], ns)
    return ns[f"{name.upper()}_SRC"]


def test_row_sums_without_the_barrier_in_its_tree_is_a_race():
    good = lesson06("row_sums")
    tree_barrier = "        __syncthreads();\n    }"
    assert good.count(tree_barrier) == 1
    bad = good.replace(tree_barrier, "    }")
    T, D = 3, 1000
    x = np.random.default_rng(0).standard_normal((T, D)).astype(np.float32)
    out = np.zeros(T, np.float32)
    r = launch(nvrtc.ptx(bad), "row_sums", T, 256, [x, out, np.int32(T), np.int32(D)])
    assert "race" in kinds(r)
    f = r.findings[kinds(r).index("race")]
    assert f.line == line_of(bad, "partial[threadIdx.x] += partial[threadIdx.x + half]") and "partial" in f.message
    assert launch(nvrtc.ptx(good), "row_sums", T, 256, [x, out, np.int32(T), np.int32(D)]).ok


def lesson06_matmul_without(line: str, instead: str, A, B):
    """Lesson 06's matmul with ``line`` replaced by ``instead``, run on A @ B: (its source, the result, C)."""
    good = lesson06("matmul")
    assert line in good
    bad = good.replace(line, instead)
    (M, K), N = A.shape, B.shape[1]
    C = np.zeros((M, N), np.float32)
    r = launch(nvrtc.ptx(bad), "matmul_tiled", ((N + 15) // 16, (M + 15) // 16), (16, 16),
               [A, B, C, np.int32(M), np.int32(N), np.int32(K)])
    return bad, r, C


def test_matmul_without_the_second_barrier_overwrites_a_tile_still_being_read():
    rng = np.random.default_rng(1)
    A, B = rng.standard_normal((33, 70)).astype(np.float32), rng.standard_normal((70, 17)).astype(np.float32)
    _, r, C = lesson06_matmul_without("        __syncthreads();                               // everyone is done",
                                      "        //", A, B)
    assert np.allclose(C, A.astype(np.float64) @ B, atol=1e-4)  # lockstep: the values are still right
    assert "race" in kinds(r) and set(kinds(r)) <= {"race", "warp_race"}
    assert any("пишет в" in f.message and "читал" in f.message for f in r.findings)  # write after read
    message = ecp.findings_message(r.findings)
    assert "__syncthreads()" in message and "__syncwarp()" not in message  # the barrier orders the warp too


def test_matmul_without_the_edge_guard_on_the_tile_load_reads_past_the_array():
    bad, r, _ = lesson06_matmul_without("(row < M && ka < K) ? A[(size_t)row * K + ka] : 0.0f",
                                        "A[(size_t)row * K + ka]", np.ones((33, 70), np.float32),
                                        np.ones((70, 17), np.float32))
    (f,) = r.findings
    assert f.kind == "global_oob" and "args[0] вызова ядра" in f.message and "float32[33×70]" in f.message
    assert f.line == line_of(bad, "As[threadIdx.y][threadIdx.x] =")


CP_ASYNC = r'''
extern "C" __global__ void stage(const float4* x, float4* y, int zero_fill_from)
{
    __shared__ float4 s[32];
    unsigned dst = (unsigned)__cvta_generic_to_shared(&s[threadIdx.x]);
    unsigned bytes = threadIdx.x < zero_fill_from ? 16 : 0;   // src-size 0: the copy writes zeros
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(dst), "l"(x + threadIdx.x), "r"(bytes));
    asm volatile("cp.async.commit_group;");
    WAIT
    __syncthreads();
    y[threadIdx.x] = s[31 - threadIdx.x];
}
'''


def test_cp_async_lands_at_its_wait_and_a_read_before_it_is_reported():
    x = np.arange(32 * 4, dtype=np.float32).reshape(32, 4)
    y = np.zeros((32, 4), np.float32)
    good = CP_ASYNC.replace("WAIT", 'asm volatile("cp.async.wait_group 0;");')
    r = launch(nvrtc.ptx(good, arch="compute_80"), "stage", 1, 32, [x, y, np.int32(24)])
    assert r.ok, [str(f) for f in r.findings]
    expected = np.where(np.arange(32)[:, None] < 24, x, 0)[::-1]
    assert np.array_equal(y, expected)
    bad = CP_ASYNC.replace("WAIT", "")
    r = launch(nvrtc.ptx(bad, arch="compute_80"), "stage", 1, 32, [x, y, np.int32(32)])
    assert "cp_async_pending" in kinds(r)
    f = r.findings[kinds(r).index("cp_async_pending")]
    assert f.line == line_of(bad, "y[threadIdx.x] = s[31 - threadIdx.x]") and "cp.async.wait_group" in f.message


@pytest.mark.parametrize("body, says", [
    ('printf("%d\\n", threadIdx.x); y[threadIdx.x] = 1.0f;', "не умеет разбирать этот PTX"),
    ("y[threadIdx.x] = twice(y[threadIdx.x]);", "не умеет разбирать этот PTX"),
    ("table[threadIdx.x] = 1.0f; y[threadIdx.x] = table[31 - threadIdx.x];", "не умеет выполнять инструкцию")])
def test_printf_calls_and_device_globals_are_clean_unsupported_findings(body, says):
    source = ('__device__ __noinline__ float twice(float x) { return 2.0f * x; }\n__device__ float table[32];\n'
              'extern "C" __global__ void k(float* y) { ' + body + ' }\n')
    y = np.zeros(32, np.float32)
    r = launch(nvrtc.ptx(source), "k", 1, 32, [y])
    assert kinds(r) == ["unsupported"] and says in r.findings[0].message and "только на GPU" in r.findings[0].message
    assert not y.any()


WARP_STAGE = r'''
extern "C" __global__ void warp_sum(const float* x, float* out)
{
    __shared__ float partial[64];
    partial[threadIdx.x] = x[threadIdx.x];
    partial[threadIdx.x + 32] = 0.0f;
    __syncthreads();
    for (int offset = 16; offset > 0; offset /= 2) {
        float other = partial[threadIdx.x + offset];
        SYNC
        partial[threadIdx.x] += other;
        SYNC
    }
    if (threadIdx.x == 0) out[0] = partial[0];
}
'''


def test_a_warp_synchronous_reduction_needs_syncwarp_and_says_so():
    """Issue 59: reads by other lanes ordered before the writer's __syncwarp() are no race, though the writer read its
    own element since; without __syncwarp() it is a race inside one warp, and the advice names __syncwarp()."""
    x, out = np.arange(32, dtype=np.float32), np.zeros(1, np.float32)
    good = launch(nvrtc.ptx(WARP_STAGE.replace("SYNC", "__syncwarp();")), "warp_sum", 1, 32, [x, out])
    assert good.ok, [str(f) for f in good.findings]
    assert out[0] == x.sum()
    bad = launch(nvrtc.ptx(WARP_STAGE.replace("SYNC", "")), "warp_sum", 1, 32, [x, out])
    assert kinds(bad) == ["warp_race"]
    message = ecp.findings_message(bad.findings)
    assert "__syncwarp()" in message and "__shfl" in message and "нужен __syncthreads()" not in message
