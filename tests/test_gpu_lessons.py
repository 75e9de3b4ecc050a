"""On a GPU: do lessons 06, 07, 08, 09 and 11 grade right — the solutions fully, known-wrong kernels exactly?

Skipped without a GPU (CI has none); run it on a CUDA machine with CuPy:
``python -m pytest tests/test_gpu_lessons.py -v``.  With ``AUTOGRADER_FORCE_PTX_ARCH=75`` every kernel is
built as compute_75 PTX and JIT-compiled by the driver: on an H200 that proves the T4 (sm_75) path.  It needs no nbgrader: notebooks are read as
JSON and every check runs through :func:`autograder.notebook.run`, in its worker process, as
under ``nbgrader autograde``.  Set ``GPU_TEST_REPORT=path.json`` to keep every verdict.

An out-of-bounds read that leaves the output right is caught by memcheck only (its ``--padding``
after every allocation makes a read past K that lands in V an error too).
A missing ``__syncthreads()`` is caught deterministically by racecheck; whether the race also
corrupts the output on a given run is luck, so those entries may lose the value checks too
(``may_lose``) — everything else must lose exactly its checks.
"""
from __future__ import annotations

import ast
import concurrent.futures
import dataclasses
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from autograder.gpu import runtime as gpu
from autograder.isolation.run import pack, run_check
from autograder.notebook import run

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not gpu.gpu_status()[0],
                                reason=f"GPU-проверки уроков 06–09 и 11 требуют GPU и CuPy ({gpu.gpu_status()[1]})")


# --- notebooks as JSON (no nbformat needed on a bare GPU machine) ---------------------------

def cells(path: Path) -> list[dict]:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    for cell in notebook["cells"]:
        if isinstance(cell["source"], list):
            cell["source"] = "".join(cell["source"])
    return notebook["cells"]


def meta(cell: dict) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def source_path(lesson: str) -> Path:
    return ROOT / "solutions" / lesson / f"{lesson}.ipynb"


def answers_of(path: Path) -> dict[str, str]:
    return {meta(c)["grade_id"]: c["source"] for c in cells(path) if meta(c).get("solution")}


def grade_calls(lesson: str) -> list[tuple[str, tuple[str, ...], list | None]]:
    """Every grade(...) call of the source notebook's test cells, hidden ones included."""
    calls = []
    for cell in cells(source_path(lesson)):
        if not (meta(cell).get("grade") and not meta(cell).get("solution")):
            continue
        for node in ast.parse(cell["source"]).body:
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                call = node.value
                cases = ast.literal_eval(call.keywords[0].value) if call.keywords else None
                calls.append((call.args[0].value, tuple(a.id for a in call.args[1:]), cases))
    return calls


def namespace(lesson: str, answers: dict[str, str]) -> dict:
    """Run the setup cell and the answer cells (reference answers replaced by ``answers``)."""
    ns = {"__name__": "__main__"}
    for cell in cells(source_path(lesson)):
        m = meta(cell)
        if cell["cell_type"] == "code" and (m.get("solution") or (m.get("locked") and not m.get("grade"))):
            code = answers.get(m["grade_id"], cell["source"])
            exec(compile(code, f"<{m['grade_id']}>", "exec"), ns)
    return ns


# --- banks ----------------------------------------------------------------------------------

#: What both answers of the bounds check (AUTOGRADER_GPU_BOUNDS: compute-sanitizer's memcheck, the emulator) say
#: about a read or write past an array; a silent one only they catch must be named with these words.
OUT_OF_BOUNDS = "выход за границы"


@dataclasses.dataclass(frozen=True)
class Entry:
    name: str
    answers: dict
    loses: frozenset = frozenset()
    may_lose: frozenset = frozenset()
    says: str | None = None
    hangs: bool = False
    #: Checks this entry loses graded without a GPU and passes on one, each for a reason its entry's comment gives
    #: (the emulator sees what the GPU hides); only these may differ (tests/emulated_banks.graded_disagreement).
    also_loses_without_gpu: frozenset = frozenset()


def reference_and_untouched(lesson: str, loses, cells=None) -> list[Entry]:
    """The first two entries of every GPU bank: the reference (full marks) and the untouched student notebook
    (its stubs lose ``loses``); ``cells``: only those answer cells of the untouched notebook."""
    untouched = answers_of(ROOT / "notebooks" / lesson / f"{lesson}.ipynb")
    if cells is not None:
        untouched = {k: v for k, v in untouched.items() if k in cells}
    return [Entry("reference", {}), Entry("untouched", untouched, loses, says="заглушки")]


def replace(text: str, old: str, new: str) -> str:
    assert old in text, f"bank drift: {old!r} not in the reference answer"
    return text.replace(old, new)


def barrier_dropped_after(line: str, indent: str = "        ") -> tuple[str, str]:
    """The edit that drops the ``__syncthreads();`` standing on the line after ``line`` (a race for racecheck)."""
    return f"{line}\n{indent}__syncthreads();", line


def edited(text: str, *edits: tuple[str, str]) -> str:
    """``text`` with each ``(old, new)`` edit made in turn (:func:`replace`)."""
    for old, new in edits:
        text = replace(text, old, new)
    return text


# Lesson 06 -----------------------------------------------------------------------------------
L06 = "06_cuda_basics"
SA_C, SA, SA_MEM, SA_B = (f"lesson06.{n}" for n in ("scale_add_compiles", "scale_add", "scale_add_memory",
                                                     "scale_add_bounds"))
RS_C, RS, RS_MEM, RS_S = (f"lesson06.{n}" for n in ("row_sums_compiles", "row_sums", "row_sums_memory",
                                                     "row_sums_sanitizer"))
MM_C, MM, MM_MEM, MM_S = (f"lesson06.{n}" for n in ("matmul_compiles", "matmul", "matmul_memory",
                                                     "matmul_sanitizer"))
SA_GPU, RS_GPU, MM_GPU = frozenset({SA, SA_MEM, SA_B}), frozenset({RS, RS_MEM, RS_S}), frozenset({MM, MM_MEM, MM_S})

SCALE_ADD_IF = r'''
SCALE_ADD_SRC = r"""
extern "C" __global__ void scale_add(float a, const float* x, const float* y, float* out, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + y[i];
}
"""
'''
ROW_SUMS_SHARED_ONLY = r'''
ROW_SUMS_SRC = r"""
extern "C" __global__ void row_sums(const float* x, float* out, int T, int D)
{
    __shared__ float partial[256];
    float s = 0.0f;
    for (int j = threadIdx.x; j < D; j += blockDim.x) s += x[(size_t)blockIdx.x * D + j];
    partial[threadIdx.x] = s;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}
"""
'''


def bank_06() -> list[Entry]:
    ref = answers_of(source_path(L06))
    sa_src, sa_wrap = ref["scale_add_source"], ref["scale_add_gpu"]
    rs_src, mm_src, mm_wrap = ref["row_sums_source"], ref["matmul_source"], ref["matmul_tiled_gpu"]
    tile32 = {"matmul_source": replace(mm_src, "#define TILE 16", "#define TILE 32"),
              "matmul_tiled_gpu": replace(replace(replace(mm_wrap, "(N + 15) // 16", "(N + 31) // 32"),
                                                  "(M + 15) // 16", "(M + 31) // 32"), "(16, 16)", "(32, 32)")}

    def row_sums(*edits: tuple[str, str]) -> dict:
        return {"row_sums_source": edited(rs_src, *edits)}

    def matmul(*edits: tuple[str, str]) -> dict:
        return {"matmul_source": edited(mm_src, *edits)}

    return [
        *reference_and_untouched(L06, SA_GPU | RS_GPU | MM_GPU | {SA_C, RS_C, MM_C}),
        Entry("if_guard_instead_of_grid_stride", {"scale_add_source": SCALE_ADD_IF}),
        Entry("row_sums_shared_tree_only", {"row_sums_source": ROW_SUMS_SHARED_ONLY}),
        Entry("matmul_tile_32", tile32),
        Entry("skips_last_partial_block", {"scale_add_source": SCALE_ADD_IF, "scale_add_gpu": replace(
            sa_wrap, "blocks = (n + threads - 1) // threads", "blocks = max(n // threads, 1)")},
              {SA, SA_MEM, SA_B}, says="NaN"),  # the hidden memory case has n % 256 != 0
        Entry("writes_past_the_end", {"scale_add_source": replace(
            SCALE_ADD_IF, "if (i < n) out[i] = a * x[i] + y[i];", "out[i] = a * x[i] + y[i];")},
              {SA, SA_MEM, SA_B}, says="за пределы"),
        Entry("scale_add_cupy_composition", {"scale_add_gpu": "def scale_add_gpu(a, x, y):\n    return x * np.float32(a) + y\n"},
              {SA_MEM}, says="выделено"),
        Entry("scale_add_swapped", {"scale_add_source": replace(sa_src, "out[i] = a * x[i] + y[i];", "out[i] = a * y[i] + x[i];")},
              {SA, SA_B}, says="a·y + x"),
        Entry("scale_add_in_place", {"scale_add_gpu": replace(replace(
            sa_wrap, "(np.float32(a), x, y, out, np.int32(n))", "(np.float32(a), x, y, y, np.int32(n))"), "return out", "return y")},
              {SA_MEM}, says="изменила вход y"),
        Entry("scale_add_illegal_address", {"scale_add_source": replace(
            sa_src, "out[i] = a * x[i] + y[i];", "out[(size_t)i * 100000000] = a * x[i] + y[i];")},
              SA_GPU, says="illegal address"),
        Entry("scale_add_compile_error", {"scale_add_source": replace(sa_src, "out[i] = a * x[i] + y[i];", "out[i] = a * x[i] + y[i]")},
              SA_GPU | {SA_C}, says="строка"),
        # Issue 59: code written as CuPy is used, not as the stand-in once accepted it; each must get one verdict on
        # the GPU and on the laptop (benchmarks/gpu_banks_without_gpu.py)
        Entry("scale_add_python_scalars", {"scale_add_gpu": replace(
            sa_wrap, "(np.float32(a), x, y, out, np.int32(n))", "(float(a), x, y, out, n)")},
              {SA, SA_B}),  # a float64's low half as the kernel's float a: garbage on both
        Entry("scale_add_data_ptr", {"scale_add_gpu": replace(
            sa_wrap, "(np.float32(a), x, y, out, np.int32(n))",
            "(np.float32(a), x.data.ptr, y.data.ptr, out.data.ptr, np.int32(n))")}),
        Entry("scale_add_contiguous_inputs_and_constants", {"scale_add_gpu": replace(
            sa_wrap, "    n = x.size\n", "    x, y = cp.ascontiguousarray(x), cp.ascontiguousarray(y)  # no copy: already\n"
                                      "    assert a not in (cp.inf, -cp.inf) and cp.pi > 3 and cp.newaxis is None\n"
                                      "    n = x.size\n")}),
        Entry("row_sums_warp_stage_in_shared_memory_without_syncwarp", row_sums((
            "        float v = partial[threadIdx.x];\n"
            "        for (int offset = 16; offset > 0; offset /= 2)\n"
            "            v += __shfl_xor_sync(0xffffffffu, v, offset);\n"
            "        if (threadIdx.x == 0)\n"
            "            out[t] = v;",
            "        volatile float* p = partial;\n"
            "        for (int offset = 16; offset > 0; offset /= 2)\n"
            "            p[threadIdx.x] += p[threadIdx.x + offset];\n"
            "        if (threadIdx.x == 0)\n"
            "            out[t] = p[0];")),
              may_lose={RS_S}),  # right values on the H100; the emulator (the default bounds tool, and the only one
        # without a GPU) finds the hazard inside one warp and says __syncwarp() (test_emulator_findings); racecheck
        # (AUTOGRADER_GPU_BOUNDS=compute-sanitizer) does not see it
        Entry("row_sums_warp_stage_in_shared_memory_with_syncwarp", row_sums((
            "        float v = partial[threadIdx.x];\n"
            "        for (int offset = 16; offset > 0; offset /= 2)\n"
            "            v += __shfl_xor_sync(0xffffffffu, v, offset);\n"
            "        if (threadIdx.x == 0)\n"
            "            out[t] = v;",
            "        for (int offset = 16; offset > 0; offset /= 2) {\n"
            "            float other = partial[threadIdx.x + offset];\n"
            "            __syncwarp();\n"
            "            partial[threadIdx.x] += other;\n"
            "            __syncwarp();\n"
            "        }\n"
            "        if (threadIdx.x == 0)\n"
            "            out[t] = partial[0];"))),
        Entry("row_sums_half_the_partials_stored", row_sums((
            "    partial[threadIdx.x] = s;", "    if (threadIdx.x < 128) partial[threadIdx.x] = s;")),
              {RS, RS_S}, also_loses_without_gpu=frozenset({RS_MEM})),
        # the other half of partial[] is never written: garbage on the GPU, where the memory check's cases passed;
        # without one that check's values are wrong too, the emulator naming the unwritten read first
        # (benchmarks/results/gpu_banks_without_gpu.json)
        Entry("row_sums_early_return_before_the_barrier", row_sums((
            "    float s = 0.0f;", "    if (threadIdx.x >= D) return;   // no work: but the barriers below wait\n"
                                  "    float s = 0.0f;")),
              may_lose={RS}),  # D < 256 (hidden cases): partial[D..255] unwritten: garbage on the H100, or not
        Entry("row_sums_missing_syncthreads", row_sums(barrier_dropped_after("partial[threadIdx.x] += partial[threadIdx.x + half];")),
              {RS_S}, may_lose=RS_GPU, says="в разделяемой памяти"),  # racecheck's and the emulator's words (AUTOGRADER_GPU_BOUNDS)
        Entry("row_sums_first_warp_only", row_sums(
            ("for (int half = blockDim.x / 2; half >= 32; half /= 2) {", "for (int half = 0; half >= 32; half /= 2) {")),
              {RS, RS_S}, says="не совпадает"),
        Entry("row_sums_loses_the_tail", row_sums((
            "for (int j = threadIdx.x; j < D; j += blockDim.x)",
            "for (int j = threadIdx.x; j < (D / (int)blockDim.x) * (int)blockDim.x; j += blockDim.x)")),
              {RS, RS_S}, says="хвост строки потерян"),
        Entry("matmul_no_zero_fill", matmul(
            ("(row < M && ka < K) ? A[(size_t)row * K + ka] : 0.0f", "A[(size_t)row * K + ka]"),
            ("(kb < K && col < N) ? B[(size_t)kb * N + col] : 0.0f", "B[(size_t)kb * N + col]")),
              {MM, MM_S}, may_lose={MM_MEM}, says="NaN"),  # it reads the guard bytes (NaN) past A
        Entry("matmul_missing_second_sync", matmul(barrier_dropped_after("acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];")),
              {MM_S}, may_lose=MM_GPU, says="в разделяемой памяти"),  # racecheck's and the emulator's words (AUTOGRADER_GPU_BOUNDS)
        Entry("matmul_drops_last_k_tile", matmul(
            ("for (int k0 = 0; k0 < K; k0 += TILE) {", "for (int k0 = 0; k0 + TILE <= K; k0 += TILE) {")),
              {MM, MM_S}, says="последний неполный тайл"),
        Entry("matmul_no_store_guard", matmul(
            ("    if (row < M && col < N)\n        C[(size_t)row * N + col] = acc;", "    C[(size_t)row * N + col] = acc;")),
              {MM, MM_MEM, MM_S}, says="за пределы"),
        Entry("matmul_B_transposed", matmul(("B[(size_t)kb * N + col]", "B[(size_t)col * K + kb]")),
              {MM, MM_S}, says="транспонирована"),
    ]


# Lesson 07 -----------------------------------------------------------------------------------
L07 = "07_cupy_rmsnorm"
C07 = "lesson07.compiles"
EQ07, TAILS07, NM07, MEM07, SAN07, SPEED07 = (f"lesson07.{n}" for n in
                                              ("equivalence", "tails", "not_mutated", "memory", "sanitizer", "speed"))
GPU07 = frozenset({EQ07, TAILS07, NM07, MEM07, SAN07, SPEED07})

SCALAR_RMS = r'''
RMSNORM_SRC = r"""
extern "C" __global__
void rms_norm(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
              int T, int D, float eps)
{
    __shared__ float partial[256];
    const float* xr = x + (size_t)blockIdx.x * D;
    float* yr = y + (size_t)blockIdx.x * D;
    float s = 0.0f;
    for (int i = threadIdx.x; i < D; i += blockDim.x) s += xr[i] * xr[i];
    partial[threadIdx.x] = s;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    const float inv = rsqrtf(partial[0] / D + eps);
    for (int i = threadIdx.x; i < D; i += blockDim.x) yr[i] = xr[i] * inv * w[i];
}
"""
'''
SCALAR_WRAPPER = '''
def fused_rms_norm_gpu(x, w, eps=1e-6):
    T, D = x.shape
    y = cp.empty_like(x)
    cp.RawKernel(RMSNORM_SRC, "rms_norm")((T,), (256,), (x, w, y, np.int32(T), np.int32(D), np.float32(eps)))
    return y
'''
WARP_PER_ROW = r'''
RMSNORM_SRC = r"""
extern "C" __global__
void rms_norm(const float* x, const float* w, float* y, int T, int D, float eps)
{
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= T) return;
    const float* xr = x + (size_t)row * D;
    float s = 0.0f;
    for (int i = lane; i < D; i += 32) s += xr[i] * xr[i];
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    const float inv = 1.0f / sqrtf(s / D + eps);
    for (int i = lane; i < D; i += 32) y[(size_t)row * D + i] = xr[i] * inv * w[i];
}
"""
'''
WARP_WRAPPER = '''
def fused_rms_norm_gpu(x, w, eps=1e-6):
    T, D = x.shape
    y = cp.empty_like(x)
    kernel = cp.RawKernel(RMSNORM_SRC, "rms_norm")
    kernel(((T + 7) // 8,), (256,), (x, w, y, np.int32(T), np.int32(D), np.float32(eps)))
    return y
'''
ONE_THREAD_PER_ROW = r'''
RMSNORM_SRC = r"""
extern "C" __global__
void rms_norm(const float* x, const float* w, float* y, int T, int D, float eps)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= T) return;
    const float* xr = x + (size_t)row * D;
    float s = 0.0f;
    for (int i = 0; i < D; ++i) s += xr[i] * xr[i];
    const float inv = rsqrtf(s / D + eps);
    for (int i = 0; i < D; ++i) y[(size_t)row * D + i] = xr[i] * inv * w[i];
}
"""
'''
ONE_THREAD_WRAPPER = '''
def fused_rms_norm_gpu(x, w, eps=1e-6):
    T, D = x.shape
    y = cp.empty_like(x)
    cp.RawKernel(RMSNORM_SRC, "rms_norm")(((T + 255) // 256,), (256,), (x, w, y, np.int32(T), np.int32(D), np.float32(eps)))
    return y
'''


#: The scalar kernel with its wrapper: a right answer, and the base of the wrong ones that edit the kernel only.
SCALAR = {"rmsnorm_source": SCALAR_RMS, "fused_rms_norm_gpu": SCALAR_WRAPPER}


def bank_07() -> list[Entry]:
    ref = answers_of(source_path(L07))
    src, wrap = ref["rmsnorm_source"], ref["fused_rms_norm_gpu"]

    def kernel(code: str) -> dict:
        return {"rmsnorm_source": code}

    return [
        *reference_and_untouched(L07, GPU07 | {C07}),
        Entry("scalar_tree_reduction", SCALAR),
        Entry("warp_per_row", {"rmsnorm_source": WARP_PER_ROW, "fused_rms_norm_gpu": WARP_WRAPPER}),
        Entry("reference_block_of_256_per_row", {"fused_rms_norm_gpu": replace(replace(
            wrap, "threads = min(1024, 32 * math.ceil(D / (32 * 32)))", "threads = 256"),
            "if D <= 1024:", "if False:")}),
        Entry("no_tail_guard", {**SCALAR, "rmsnorm_source": replace(replace(
            SCALAR_RMS, "for (int i = threadIdx.x; i < D; i += blockDim.x) s += xr[i] * xr[i];",
            "for (int k = 0; k < D / (int)blockDim.x; ++k) { int i = threadIdx.x + k * blockDim.x; s += xr[i] * xr[i]; }"),
            "for (int i = threadIdx.x; i < D; i += blockDim.x) yr[i] = xr[i] * inv * w[i];",
            "for (int k = 0; k < D / (int)blockDim.x; ++k) { int i = threadIdx.x + k * blockDim.x; yr[i] = xr[i] * inv * w[i]; }")},
            {TAILS07, SAN07}, says="NaN"),  # the tail of y stays as the grader filled it: NaN; D=1000 under the sanitizer too
        Entry("float4_without_alignment_check", kernel(replace(
            src, "const bool aligned = (D % 4 == 0) && ((((size_t)x | (size_t)w | (size_t)y) & 15) == 0);",
            "const bool aligned = true;")), {TAILS07, SAN07}, says="misaligned"),  # hidden sanitizer case D=4097
        Entry("missing_syncthreads", {**SCALAR, "rmsnorm_source": replace(
            SCALAR_RMS, "partial[threadIdx.x] = s;\n    __syncthreads();", "partial[threadIdx.x] = s;")},
            {SAN07}, may_lose=GPU07),  # here the race corrupts the output too (seen on an H200)
        Entry("eps_outside_root", kernel(replace(  # both paths of the kernel
            src, "const float inv_rms = rsqrtf(row_sum(sum_sq) / D + eps);",
            "const float inv_rms = 1.0f / (sqrtf(row_sum(sum_sq) / D) + eps);")),
            {EQ07, TAILS07}, says="eps прибавлен вне корня"),  # a tail case has rows of tiny RMS
        Entry("no_weight", {**SCALAR, "rmsnorm_source": replace(
            SCALAR_RMS, "yr[i] = xr[i] * inv * w[i];", "yr[i] = xr[i] * inv;")}, GPU07, says="забыли умножить на вес"),
        Entry("only_first_warp_summed", kernel(replace(
            src, "for (int i = 0; i < warps; ++i)                       // same order in every thread\n        total += partial[i];",
            "total = partial[0];")), GPU07, says="не совпадает"),
        Entry("one_thread_per_row", {"rmsnorm_source": ONE_THREAD_PER_ROW, "fused_rms_norm_gpu": ONE_THREAD_WRAPPER},
              {SPEED07}, says="ускорение"),
        Entry("naive_cupy_composition", {"fused_rms_norm_gpu": '''
def fused_rms_norm_gpu(x, w, eps=1e-6):
    return x / cp.sqrt(cp.mean(x * x, axis=-1, keepdims=True) + eps) * w
'''}, {MEM07, SPEED07}, says="выделено"),
        Entry("in_place_mutates_input", {"fused_rms_norm_gpu": replace(
            replace(wrap, "(x, w, y, np.int32(T)", "(x, w, x, np.int32(T)"), "return y", "return x")},
            {NM07}, says="изменила вход x"),
        Entry("illegal_address", {**SCALAR, "rmsnorm_source": replace(
            SCALAR_RMS, "yr[i] = xr[i] * inv * w[i];", "y[(size_t)blockIdx.x * D * 100000 + i] = xr[i] * inv * w[i];")},
            GPU07, says="illegal address"),
        Entry("never_ends", {**SCALAR, "rmsnorm_source": replace(
            SCALAR_RMS, "__shared__ float partial[256];", "__shared__ float partial[256];\n    while (true) __nanosleep(1000);")},
            GPU07, says="не завершилась", hangs=True),
        Entry("compile_error", kernel(replace(src, "return v;", "return v")), GPU07 | {C07}, says="строка"),
        Entry("skips_last_partial_block", {"rmsnorm_source": WARP_PER_ROW, "fused_rms_norm_gpu": replace(
            WARP_WRAPPER, "kernel(((T + 7) // 8,), (256,)", "kernel((max(T // 8, 1),), (256,)")},
              {EQ07, TAILS07}, says="NaN"),  # hidden equivalence and tails cases have T % 8 != 0
        Entry("writes_past_the_end", {**SCALAR, "rmsnorm_source": replace(
            SCALAR_RMS, "for (int i = threadIdx.x; i < D; i += blockDim.x) yr[i] = xr[i] * inv * w[i];",
            "for (int i = threadIdx.x; i < D; i += blockDim.x) yr[i] = xr[i] * inv * w[i];\n"
            "    if (blockIdx.x == T - 1 && threadIdx.x == 0) yr[D] = 0.0f;")}, GPU07, says="за пределы"),
        # the loop rounds D up to the block and masks the value: right answer, but the last row reads past x
        Entry("reads_past_the_end_masked", {**SCALAR, "rmsnorm_source": replace(
            SCALAR_RMS, "for (int i = threadIdx.x; i < D; i += blockDim.x) s += xr[i] * xr[i];",
            "for (int b = 0; b < D; b += blockDim.x) { const int i = b + threadIdx.x; const float v = xr[i]; "
            "s += i < D ? v * v : 0.0f; }")}, {SAN07}, says=OUT_OF_BOUNDS,
              also_loses_without_gpu=frozenset({TAILS07})),  # the emulator's exact bounds stop the stray read that a
        # GPU's allocation granularity hides
        # eps passed as a Python float: CuPy sends a double, the kernel's `float eps` reads its low word (-3.1e-19 for
        # 1e-6, 89129 for 0.01); the GPU's verdict is predicted from that (not yet run on one: issue 59)
        Entry("eps_as_python_float", {**SCALAR, "fused_rms_norm_gpu": replace(
            SCALAR_WRAPPER, "np.int32(D), np.float32(eps)))", "np.int32(D), eps))")}, {EQ07, TAILS07},
              says="число Python"),
    ]


# Lesson 08 -----------------------------------------------------------------------------------
L08 = "08_cupy_flash_attention"
C08 = "lesson08.compiles"
EQ08, TAILS08, CAUSAL08, LARGE08, MEM08, SKIP08, SAN08 = (
    f"lesson08.{n}" for n in ("equivalence", "tails", "causal", "large_logits", "memory", "causal_skip", "sanitizer"))
GPU08 = frozenset({EQ08, TAILS08, CAUSAL08, LARGE08, MEM08, SKIP08, SAN08})

SIMPLE_FLASH = r'''
FLASH_SRC = r"""
// One thread per query row; K/V tiles of 32 rows staged in shared memory with plain loads.
template <int D>
__device__ void simple_flash(const float* Q, const float* K, const float* V, float* O,
                             int n, float scale, int causal, int* tile_counter)
{
    __shared__ float Ks[32 * D];
    __shared__ float Vs[32 * D];
    const size_t head = (size_t)blockIdx.y * n * D;
    Q += head; K += head; V += head; O += head;
    const int q0 = blockIdx.x * 64;
    const int row = q0 + threadIdx.x;
    float q[D], o[D];
    for (int t = 0; t < D; ++t) { q[t] = row < n ? Q[(size_t)row * D + t] * scale : 0.0f; o[t] = 0.0f; }
    float m = -__int_as_float(0x7f800000), l = 0.0f;
    const int kv_end = causal ? min(q0 + 64, n) : n;
    int tiles = 0;
    for (int k0 = 0; k0 < kv_end; k0 += 32) {
        for (int e = threadIdx.x; e < 32 * D; e += blockDim.x) {
            const int r = k0 + e / D;
            Ks[e] = r < n ? K[(size_t)r * D + e % D] : 0.0f;
            Vs[e] = r < n ? V[(size_t)r * D + e % D] : 0.0f;
        }
        __syncthreads();
        for (int j = 0; j < 32 && k0 + j < n; ++j) {
            if (causal && k0 + j > row) break;
            float s = 0.0f;
            for (int t = 0; t < D; ++t) s += q[t] * Ks[j * D + t];
            const float m_new = fmaxf(m, s);
            const float alpha = __expf(m - m_new), p = __expf(s - m_new);
            l = l * alpha + p;
            for (int t = 0; t < D; ++t) o[t] = o[t] * alpha + p * Vs[j * D + t];
            m = m_new;
        }
        __syncthreads();
        ++tiles;
    }
    if (row < n)
        for (int t = 0; t < D; ++t) O[(size_t)row * D + t] = o[t] / l;
    if (threadIdx.x == 0 && tile_counter) atomicAdd(tile_counter, tiles);
}

extern "C" __global__ void flash_attention_d64(const float* Q, const float* K, const float* V, float* O,
                                               int n, float scale, int causal, int* tile_counter)
{ simple_flash<64>(Q, K, V, O, n, scale, causal, tile_counter); }

extern "C" __global__ void flash_attention_d128(const float* Q, const float* K, const float* V, float* O,
                                                int n, float scale, int causal, int* tile_counter)
{ simple_flash<128>(Q, K, V, O, n, scale, causal, tile_counter); }
"""
'''
SIMPLE_WRAPPER = '''
def flash_attention_gpu(Q, K, V, causal=False, tile_counter=None):
    H, n, d = Q.shape
    O = cp.empty_like(Q)
    if tile_counter is None:
        tile_counter = cp.zeros(1, dtype=cp.int32)
    kernel = cp.RawKernel(FLASH_SRC, f"flash_attention_d{d}")
    kernel(((n + 63) // 64, H), (64,), (Q, K, V, O, np.int32(n), np.float32(d ** -0.5), np.int32(causal), tile_counter))
    return O
'''


#: The one-thread-per-row kernel with its wrapper: a right answer, and the base of wrong ones.
SIMPLE = {"flash_source": SIMPLE_FLASH, "flash_attention_gpu": SIMPLE_WRAPPER}


def bank_08() -> list[Entry]:
    ref = answers_of(source_path(L08))
    step1, step1_wrap = ref["flash_source"], ref["flash_attention_gpu"]
    # step 2 (the fast kernel) graded as if it were the answer: the older wrong entries patch it
    src = ref["flash_fast_source"].replace("FLASH_FAST_SRC", "FLASH_SRC")
    wrap = ref["flash_attention_fast_gpu"].replace("flash_attention_fast_gpu", "flash_attention_gpu").replace(
        "FLASH_FAST_SRC", "FLASH_SRC")

    def kernel(code: str) -> dict:
        return {"flash_source": code, "flash_attention_gpu": wrap}

    def step1_kernel(code: str) -> dict:
        return {"flash_source": code}

    return [
        *reference_and_untouched(L08, GPU08 | {C08}),
        Entry("one_thread_per_row", SIMPLE),
        Entry("step2_fast_kernel", {"flash_source": src, "flash_attention_gpu": wrap}),
        Entry("step1_no_barrier_after_load", step1_kernel(replace(
            step1, "            Vs[e] = r < n ? V[(size_t)r * D + e % D] : 0.0f;\n        }\n        __syncthreads();",
            "            Vs[e] = r < n ? V[(size_t)r * D + e % D] : 0.0f;\n        }")),
            {SAN08}, may_lose=GPU08, says="в разделяемой памяти"),  # racecheck's and the emulator's words (AUTOGRADER_GPU_BOUNDS)
        Entry("step1_causal_loop_to_the_end", step1_kernel(replace(
            step1, "const int kv_end = causal ? min(q0 + BR, n) : n;", "const int kv_end = n;")), {SKIP08}, says="доля"),
        Entry("step1_no_counter", step1_kernel(replace(
            step1, "        atomicAdd(tile_counter, tiles);", "        ;")), {SKIP08}, says="счётчик"),
        Entry("step1_skips_last_partial_block", {"flash_attention_gpu": replace(
            step1_wrap, "kernel(((n + 63) // 64, H), (64,),", "kernel((max(n // 64, 1), H), (64,),")},
              {TAILS08, SAN08}, says="NaN"),  # the sanitizer's cases have n = 100, 77 too
        Entry("step1_writes_past_the_end", step1_kernel(replace(
            step1, "    if (active)\n        for (int t = 0; t < D; ++t)", "    for (int t = 0; t < D; ++t)")),
              {TAILS08, SAN08}, may_lose={LARGE08}, says="за пределы"),
        # K/V rows >= n loaded without the guard: those keys are never used, but the last tile reads past K, V
        Entry("step1_loads_rows_past_n", step1_kernel(replace(replace(
            step1, "Ks[e] = r < n ? K[(size_t)r * D + e % D] : 0.0f;", "Ks[e] = K[(size_t)r * D + e % D];"),
            "Vs[e] = r < n ? V[(size_t)r * D + e % D] : 0.0f;", "Vs[e] = V[(size_t)r * D + e % D];")),
              {SAN08}, says=OUT_OF_BOUNDS, also_loses_without_gpu=frozenset({TAILS08})),  # exact bounds, as in 07
        # the scale as a Python float: CuPy sends a double (each argument through a pointer of its own, so the later
        # ones stay in place), the kernel's `float scale` reads its low word: 0 for d = 64 (uniform attention), 3e23
        # for d = 128; the GPU's verdict is predicted from that (not yet run on one: issue 59)
        Entry("scale_as_python_float", {**SIMPLE, "flash_attention_gpu": replace(
            SIMPLE_WRAPPER, "np.float32(d ** -0.5)", "d ** -0.5")}, GPU08, says="число Python"),
        Entry("missing_syncthreads_after_staging", {**SIMPLE, "flash_source": replace(
            SIMPLE_FLASH, "            Vs[e] = r < n ? V[(size_t)r * D + e % D] : 0.0f;\n        }\n        __syncthreads();",
            "            Vs[e] = r < n ? V[(size_t)r * D + e % D] : 0.0f;\n        }")},
            {SAN08}, may_lose=GPU08, says="в разделяемой памяти"),  # racecheck's and the emulator's words (AUTOGRADER_GPU_BOUNDS)
        Entry("S_materialised", {"flash_source": src, "flash_attention_gpu": replace(
            wrap, "    O = cp.empty_like(Q)\n", "    O = cp.empty_like(Q)\n    S = cp.empty((H, n, n), dtype=cp.float32)\n")},
            {MEM08}, says="Матрица S"),
        Entry("causal_without_skipping", kernel(replace(
            src, "const int kv_end = causal ? min(q0 + BR, n) : n;", "const int kv_end = n;")),
            {SKIP08}, says="доля"),
        Entry("no_scale", kernel(replace(src, "const float scale_log2 = scale * 1.4426950408889634f;",
                                         "const float scale_log2 = 1.4426950408889634f;")),
              GPU08, says="нет масштаба 1/sqrt(d)"),
        Entry("no_max_subtraction", kernel(replace(replace(
            src, "const float m_use = m_new == NEG_INF ? 0.0f : m_new;   // a row with no key yet",
            "const float m_use = 0.0f;"), "const float alpha = exp2f(m[i] - m_use);", "const float alpha = 1.0f;")),
            {LARGE08}, says="NaN"),
        Entry("no_tail_guard", kernel(replace(replace(
            src, "const bool valid = g < n;", "const bool valid = true;"),
            "if (edge && (col >= n || (causal && col > row))) v = NEG_INF;",
            "if (edge && causal && col > row) v = NEG_INF;")), {TAILS08, SAN08}, says="NaN"),  # K/V rows past n: guard NaN
        Entry("diagonal_masked", kernel(replace(
            src, "if (edge && (col >= n || (causal && col > row))) v = NEG_INF;",
            "if (edge && (col >= n || (causal && col >= row))) v = NEG_INF;")),
            {CAUSAL08, TAILS08, LARGE08, SKIP08}, says="NaN"),
        Entry("no_rescale_of_O", kernel(replace(
            src, "for (int t = 0; t < 4 * G; ++t) o[i][t] *= alpha;", "")), GPU08, says="не совпадает"),
        Entry("illegal_address", kernel(replace(
            src, "*reinterpret_cast<float4*>(O + (size_t)row * D + 4 * tx + 32 * g) =",
            "*reinterpret_cast<float4*>(O + (size_t)row * D * 1000000 + 4 * tx + 32 * g) =")),
            GPU08, says="illegal address"),
        Entry("never_ends", kernel(replace(
            src, "const int tx = threadIdx.x & 7, ty = threadIdx.x >> 3;",
            "const int tx = threadIdx.x & 7, ty = threadIdx.x >> 3;\n    while (true) __nanosleep(1000);")),
            GPU08, says="не завершилась", hangs=True),
        Entry("compile_error", kernel(replace(src, "float m[4], l[4];", "float m[4], l[4]")),
              GPU08 | {C08}, says="строка"),
    ]


# Lesson 09 -----------------------------------------------------------------------------------
L09 = "09_tensor_cores"
MC09, MM09, FC09 = "lesson09.mma_compiles", "lesson09.mma_matmul", "lesson09.flash_compiles"
EQ09, TAILS09, CAUSAL09, MEM09, SKIP09, SAN09 = (
    f"lesson09.{n}" for n in ("equivalence", "tails", "causal", "memory", "causal_skip", "sanitizer"))
GPU09 = frozenset({EQ09, TAILS09, CAUSAL09, MEM09, SKIP09, SAN09})


def bank_09() -> list[Entry]:
    ref = answers_of(source_path(L09))
    mma, mma_wrap = ref["mma_source"], ref["mma_matmul_gpu"]
    src, wrap = ref["flash_tc_source"], ref["flash_attention_tc_gpu"]

    def kernel(code: str) -> dict:
        return {"flash_tc_source": code}

    softmax_rescale = "        o[nn][0] *= alpha0; o[nn][1] *= alpha0;\n        o[nn][2] *= alpha1; o[nn][3] *= alpha1;"
    return [
        *reference_and_untouched(L09, GPU09 | {MM09, MC09, FC09}),
        # right, written differently: m16n8k8 only (the sm_75 path everywhere), plain loads instead of cp.async,
        # a matmul launched with one warp per block
        # (with the T4's default tile, BC = 16: two m16n8k8 per MMA need more registers)
        Entry("m16n8k8_everywhere", kernel(replace(replace(
            src, '#if __CUDA_ARCH__ >= 800\n    asm volatile("mma.sync.aligned.m16n8k16', '#if 0\n    asm volatile("mma.sync.aligned.m16n8k16'),
            "#if __CUDA_ARCH__ >= 800\n#define BC 64", "#if 0\n#define BC 64"))),
        Entry("no_cp_async", kernel(replace(
            src, "#if __CUDA_ARCH__ >= 800\n__device__ __forceinline__ void copy16", "#if 0\n__device__ __forceinline__ void copy16"))),
        Entry("matmul_one_warp_per_block", {"mma_matmul_gpu": replace(
            mma_wrap, "kernel(((warps + 3) // 4,), (128,),", "kernel((warps,), (32,),")}),
        # the K/V tile sizes the wrapper picks on GPUs with less shared memory (RTX 30xx/40xx: 32 at d = 128;
        # T4: 16 at d = 128), run here
        Entry("bc32_as_on_99_KiB", {"flash_attention_tc_gpu": replace(
            wrap, "bc = next(b for b in (64, 32, 16) if", "bc = next(b for b in (32, 16) if")}),
        Entry("bc16_as_on_T4", {"flash_attention_tc_gpu": replace(
            wrap, "bc = next(b for b in (64, 32, 16) if", "bc = next(b for b in (16,) if")}),
        # wrong
        Entry("matmul_f16_accumulation", {"mma_source": replace(replace(replace(
            mma, '"mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\\n"\n'
                 '                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a0), "r"(a1), "r"(b0));',
            '"mma.sync.aligned.m16n8k8.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3}, {%4}, {%0,%1};\\n"\n'
            '                 : "+r"(acc[0]), "+r"(acc[1]) : "r"(a0), "r"(a1), "r"(b0));\n'
            '    unsigned short h[4] = {(unsigned short)acc[0], (unsigned short)(acc[0] >> 16),\n'
            '                           (unsigned short)acc[1], (unsigned short)(acc[1] >> 16)};\n'
            '    for (int e = 0; e < 4; ++e) asm("cvt.f32.f16 %0, %1;" : "=f"(c[e]) : "h"(h[e]));'),
            "__device__ __forceinline__ void mma_m16n8k8(float c[4], unsigned a0, unsigned a1, unsigned b0)\n{",
            "__device__ __forceinline__ void mma_m16n8k8(float c[4], unsigned acc[2], unsigned a0, unsigned a1, unsigned b0)\n{"),
            "        mma_m16n8k8(c, a0, a1, b0);", "        mma_m16n8k8(c, acc, a0, a1, b0);").replace(
            "    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};", "    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};\n    unsigned acc[2] = {0u, 0u};")},
              {MM09}, says="float16"),
        Entry("matmul_last_k_step_lost", {"mma_source": replace(
            mma, "for (int k0 = 0; k0 < K; k0 += 8) {", "for (int k0 = 0; k0 + 8 <= K; k0 += 8) {")},
              {MM09}, says="последний неполный шаг"),
        Entry("matmul_rows_g_and_g8_swapped", {"mma_source": replace(
            mma, "mma_m16n8k8(c, a0, a1, b0);", "mma_m16n8k8(c, a1, a0, b0);")}, {MM09}, says="g + 8"),
        Entry("matmul_no_store_guard", {"mma_source": replace(
            mma, "        if (row < M && col < N)\n            C[(size_t)row * N + col] = c[e];",
            "        C[(size_t)row * N + col] = c[e];")}, {MM09}, says="за пределы"),
        Entry("P_fragment_index_swapped", kernel(replace(replace(
            src, "pa[kk][1] = pack_f16x2(s[2 * kk][2], s[2 * kk][3]);", "pa[kk][1] = pack_f16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);"),
            "pa[kk][2] = pack_f16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);", "pa[kk][2] = pack_f16x2(s[2 * kk][2], s[2 * kk][3]);")),
              GPU09, says="не совпадает"),
        Entry("V_without_trans", kernel(replace(
            src, "ldmatrix_x4_trans(vb, Vt", "ldmatrix_x4(vb, Vt")), GPU09, says="не совпадает"),
        Entry("O_not_rescaled", kernel(replace(src, softmax_rescale, "")), GPU09, says="не совпадает"),
        Entry("l_not_rescaled", kernel(replace(src, "l[0] = l[0] * alpha0 + (sum[0] + sum[1]);", "l[0] = l[0] + (sum[0] + sum[1]);")),
              GPU09, says="не совпадает"),
        Entry("no_scale", kernel(replace(src, "const float scale_log2 = scale * 1.4426950408889634f;",
                                         "const float scale_log2 = 1.4426950408889634f;")),
              GPU09, says="нет масштаба 1/sqrt(d)"),
        Entry("missing_barrier_after_tile_lands", kernel(replace(
            src, "(this thread's copies) ...\n        __syncthreads();", "(this thread's copies) ...")),
              {SAN09}, may_lose=GPU09, says="в разделяемой памяти"),  # racecheck's and the emulator's words (AUTOGRADER_GPU_BOUNDS)
        Entry("keys_past_n_not_masked", kernel(replace(
            src, "if (key >= n || (causal && key > row)) s[nn][e] = NEG_INF;",
            "if (causal && key > row) s[nn][e] = NEG_INF;")), {TAILS09, SAN09}, says="не совпадает"),
        Entry("no_load_guard", kernel(replace(
            src, "copy16(tile + row * STRIDE + col, src + (size_t)(g < n ? g : 0) * D + col, g < n);",
            "copy16(tile + row * STRIDE + col, src + (size_t)g * D + col, true);")), {TAILS09, SAN09}, says="NaN"),
        Entry("diagonal_masked", kernel(replace(
            src, "if (key >= n || (causal && key > row)) s[nn][e] = NEG_INF;",
            "if (key >= n || (causal && key >= row)) s[nn][e] = NEG_INF;")),
              {CAUSAL09, TAILS09, SKIP09}, says="NaN"),
        Entry("causal_without_skipping", kernel(replace(
            src, "const int kv_end = causal ? min(n, q0 + BR) : n;", "const int kv_end = n;")), {SKIP09}, says="доля"),
        Entry("no_counter", kernel(replace(src, "        atomicAdd(tile_counter, tiles);", "        ;")),
              {SKIP09}, says="счётчик"),
        Entry("skips_last_partial_block", {"flash_attention_tc_gpu": replace(
            wrap, "kernel((H, (n + br - 1) // br), (128,),", "kernel((H, max(n // br, 1)), (128,),")},
              {TAILS09}, says="NaN"),   # the sanitizer's n = 77 fits in one block of 128 rows
        Entry("S_materialised", {"flash_attention_tc_gpu": replace(
            wrap, "    O = cp.empty_like(Q)\n", "    O = cp.empty_like(Q)\n    S = cp.empty((H, n, n), dtype=cp.float32)\n")},
              {MEM09}, says="Матрица S"),
        Entry("S_of_one_m16_tile_only", kernel(replace(
            src, "for (int mt = 0; mt < MT; ++mt) {\n                    mma_m16n8k16(s[mt][nn], qa[mt], kb);",
            "for (int mt = 0; mt < 1; ++mt) {\n                    mma_m16n8k16(s[mt][nn], qa[mt], kb);")),
              GPU09, says="не совпадает"),
        Entry("next_tile_into_the_current_buffer", kernel(replace(replace(
            src, "load_tile<D, BC>(Ks + ((j + 1) & 1) * BC * STRIDE", "load_tile<D, BC>(Ks + (j & 1) * BC * STRIDE"),
            "load_tile<D, BC>(Vs + ((j + 1) & 1) * BC * STRIDE", "load_tile<D, BC>(Vs + (j & 1) * BC * STRIDE")),
              GPU09, says="не совпадает"),
        Entry("compile_error", kernel(replace(src, "unsigned pa[MT][PK][4];", "unsigned pa[MT][PK][4]")),
              GPU09 | {FC09}, says="строка"),
    ]


# Lesson 11 (its NumPy part has its own bank: tests/banks/bank_11_flash_decoding.py) --------------------
L11 = "11_flash_decoding"
C11 = "lesson11.gpu_compiles"
EQ11, SPLITS11, MEM11, BOUNDS11, SPEED11 = (f"lesson11.gpu_{n}" for n in ("equivalence", "splits", "memory", "bounds",
                                                                           "speed"))
GPU11 = frozenset({EQ11, SPLITS11, MEM11, BOUNDS11, SPEED11})


def bank_11() -> list[Entry]:
    ref = answers_of(source_path(L11))
    src, wrap = ref["decode_source"], ref["paged_decode_gpu"]

    def kernel(*edits: tuple[str, str]) -> dict:
        return {"decode_source": edited(src, *edits)}

    return [
        *reference_and_untouched(L11, GPU11 | {C11}, cells=("decode_source", "paged_decode_gpu")),
        Entry("combine_even_for_one_split", {"paged_decode_gpu": replace(
            wrap, "o_part = out if S == 1 else cp.empty(", "o_part = cp.empty(").replace("    if S > 1:\n", "    if True:\n")}),
        Entry("block_table_ignored", kernel(("const int page = i < TABLE_SLOTS ? sm_pages[i] : row_table[t / page_size];",
                                             "const int page = t / page_size;")), GPU11, says="таблица страниц"),
        # hole (2)'s slice of the block table in shared memory: sm_pages[i] is page p0 + i of the sequence
        Entry("slice_indexed_without_p0", kernel(("const int i = t / page_size - p0;", "const int i = t / page_size;")),
              GPU11 - {BOUNDS11}),  # the bounds case's splits start at page 0: p0 = 0 hides it there
        Entry("slice_without_fallback", kernel((
            "const int page = i < TABLE_SLOTS ? sm_pages[i] : row_table[t / page_size];",
            "const int page = sm_pages[i];")), {SPLITS11}),   # only gpu_splits has a split of over 512 pages
        Entry("fallback_at_the_slice_index", kernel((
            "const int page = i < TABLE_SLOTS ? sm_pages[i] : row_table[t / page_size];",
            "const int page = i < TABLE_SLOTS ? sm_pages[i] : row_table[i];")), {SPLITS11}, says="не совпадает"),
        Entry("gqa_modulo", kernel(("const int h = kvh * G + (g < G ? g : 0);", "const int h = (g < G ? g : 0) * Hkv + kvh;"),
                                   ("* Hq + kvh * G + g;", "* Hq + g * Hkv + kvh;")), GPU11, says="h % Hkv"),
        Entry("stale_slots_read", kernel(("t1 = min(p1 * page_size, n);", "t1 = p1 * page_size;")),
              GPU11 - {SPEED11}, says="устаревшие слоты"),  # the speed cases' lengths are whole pages
        Entry("newest_position_dropped", kernel(("t1 = min(p1 * page_size, n);", "t1 = min(p1 * page_size, n - 1);")),
              GPU11, says="потеряна последняя позиция"),
        Entry("no_scale", kernel(("qr[g][i] *= scale;", "qr[g][i] *= 1.0f;")), GPU11, says="не совпадает"),
        Entry("combine_without_max", kernel(("const float w = lse == NEG_INF ? 0.0f : __expf(lse - M);",
                                             "const float w = lse == NEG_INF ? 0.0f : __expf(lse);"),
                                            ("out[(size_t)row * d + e] = L > 0.0f ? A / L : 0.0f;",
                                             "out[(size_t)row * d + e] = A / L;")), {SPLITS11}, says="NaN"),
        Entry("empty_split_gives_nan", kernel(("o_part[head * D + e] = L > 0.0f ? A / L : 0.0f;", "o_part[head * D + e] = A / L;"),
                                              ("lse == NEG_INF ? 0.0f : __expf(lse - M);", "__expf(lse - M);")),
              GPU11 - {BOUNDS11}, says="NaN"),  # num_splits=None leaves groups empty too (not in the bounds case)
        Entry("contiguous_copy", {"paged_decode_gpu": replace(
            wrap, "    out = cp.empty((B, Hq, d), dtype=cp.float32)\n",
            "    out = cp.empty((B, Hq, d), dtype=cp.float32)\n    k_pages = cp.ascontiguousarray(k_pages[block_table])\n"
            "    v_pages = cp.ascontiguousarray(v_pages[block_table])\n"
            "    k_pages, v_pages = k_pages.reshape(-1, page_size, Hkv, d), v_pages.reshape(-1, page_size, Hkv, d)\n"
            "    block_table = cp.arange(B * max_pages, dtype=cp.int32).reshape(B, max_pages)\n")},
              {MEM11, SPEED11}, says="выделено"),  # the gather reads and writes the cache once more: slow too
        Entry("never_splits", {"paged_decode_gpu": replace(
            wrap, "S = choose_splits(B, Hkv, max_pages) if num_splits is None else int(num_splits)",
            "S = 1 if num_splits is None else int(num_splits)")}, {SPEED11}, says="не меньше 50"),
        Entry("illegal_address", kernel(("out[(size_t)row * d + e] =", "out[(size_t)row * d * 100000000 + e] ="),
                                        ("o_part[head * D + e] =", "o_part[head * D * 100000000 + e] =")),
              GPU11, says="illegal address"),
        # Issue 59: a race is the bounds-and-races check's on the GPU and without one (one mapping from finding to
        # check); the values it spoils on a GPU, or not, may cost the others there
        Entry("merge_overwrites_the_table_too_early", kernel((
            "    __syncthreads();   // every warp is done with sm_pages: the merge overwrites them\n", "")),
              {BOUNDS11}, may_lose=GPU11 - {BOUNDS11}, says="гонка"),
        Entry("table_read_before_it_is_written", kernel((
            "sm_pages[i] = row_table[p0 + i];\n    __syncthreads();\n", "sm_pages[i] = row_table[p0 + i];\n")),
              {BOUNDS11}, may_lose=GPU11 - {BOUNDS11}),
        Entry("compile_error", kernel(("const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;",
                                       "const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5")),
              GPU11 | {C11}, says="строка"),
    ]


BANKS = {L06: bank_06, L07: bank_07, L08: bank_08, L09: bank_09, L11: bank_11}
TIMED = {SPEED07, SPEED11}  # graded by timing: run alone, after the rest
#: Mixed lessons: only their GPU checks here (the NumPy part's bank runs without a GPU, tests/test_banks.py).
GPU_PART = {L11: lambda check_id: check_id.startswith("lesson11.gpu_")}
HANG_TIMEOUT_S = 20  # the never-ending kernels: the same timeout path as a check's own, only shorter


# --- running ----------------------------------------------------------------------------------

#: ``GPU_BANK_CHECKS=lesson07.sanitizer,lesson08.sanitizer`` runs only those checks of each entry (and
#: skips the never-ending kernels, whose timeout path is the same for every check): a short run
#: after one check changed.  Expectations are compared on the selected checks only.
ONLY = frozenset(filter(None, os.environ.get("GPU_BANK_CHECKS", "").split(",")))
#: ``GPU_BANK_ENTRIES=reference,untouched`` runs only those entries of each bank.
ONLY_ENTRIES = frozenset(filter(None, os.environ.get("GPU_BANK_ENTRIES", "").split(",")))
#: checks run at a time (each in its own worker process); the timed ones always run alone.
WORKERS = int(os.environ.get("GPU_BANK_WORKERS", "8"))


def run_bank(lesson: str) -> list[dict]:
    calls = [c for c in grade_calls(lesson) if (not ONLY or c[0] in ONLY) and GPU_PART.get(lesson, bool)(c[0])]
    entries = [e for e in BANKS[lesson]() if (not ONLY or not e.hangs) and (not ONLY_ENTRIES or e.name in ONLY_ENTRIES)]
    if ONLY:
        entries = [dataclasses.replace(e, loses=e.loses & ONLY, may_lose=e.may_lose & ONLY,
                                       says=e.says if e.loses and e.loses <= ONLY else None) for e in entries]
    spaces = {e.name: namespace(lesson, e.answers) for e in entries}
    jobs = [(e, call) for e in entries for call in calls]
    verdicts: dict[tuple[str, str], list] = {}
    faults: list[str] = []

    def one(job):
        entry, (check_id, names, cases) = job
        started = time.time()
        objects = [spaces[entry.name][n] for n in names]
        if entry.hangs:
            result = run_check(check_id, pack(objects), cases, timeout_s=HANG_TIMEOUT_S)
        else:
            result = run(check_id, *objects, cases=cases)
        return entry.name, check_id, result.passed, result.message, time.time() - started

    def collect(selected, workers):
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            for name, check_id, passed, message, seconds in pool.map(one, selected):
                verdicts.setdefault((name, check_id), []).append((passed, message, round(seconds, 1)))
                print(f"  {name:<34} {check_id:<22} {'pass' if passed else 'FAIL'} {seconds:5.1f}s"
                      + ("" if passed else "  " + message.replace(chr(10), " ")[:160]), flush=True)
                if not passed and message.startswith("Сбой проверяющей системы") and not faults:
                    faults.append(message)  # the first grader fault whole, with the machine's state
                    print(f"GRADER FAULT (first, whole):\n{message}\nfree in {tempfile.gettempdir()}: "
                          f"{shutil.disk_usage(tempfile.gettempdir()).free / 2**30:.1f} GiB", flush=True)

    collect([j for j in jobs if not j[0].hangs and j[1][0] not in TIMED], WORKERS)
    collect([j for j in jobs if not j[0].hangs and j[1][0] in TIMED], 1)
    collect([j for j in jobs if j[0].hangs], 1)  # one at a time: after the first timeout the rest fail at once
    report = []
    for entry in entries:
        mine = {c: v for (n, c), v in verdicts.items() if n == entry.name}
        lost = {c for c, runs in mine.items() if not all(p for p, _, _ in runs)}
        messages = {c: next(m for p, m, _ in runs if not p) for c, runs in mine.items() if c in lost}
        report.append({"entry": entry.name, "lost": sorted(lost), "expected": sorted(entry.loses),
                       "may_lose": sorted(entry.may_lose), "says": entry.says, "messages": messages,
                       "seconds": {c: [s for _, _, s in runs] for c, runs in mine.items()},
                       "passed_details": {c: runs[-1][1][:300] for c, runs in mine.items() if c not in lost}})
    return report


def problems_of(report: list[dict]) -> list[str]:
    problems = []
    for r in report:
        lost, expected, may = set(r["lost"]), set(r["expected"]), set(r["may_lose"])
        if not (expected <= lost <= expected | may):
            problems.append(f"{r['entry']}: lost {sorted(lost)}, expected {sorted(expected)}"
                            + (f" (+ maybe {sorted(may - expected)})" if may else "")
                            + "\n    " + "\n    ".join(f"{c}: {m[:300]}" for c, m in r["messages"].items()))
        elif r["says"] and not any(r["says"] in m for m in r["messages"].values()):
            problems.append(f"{r['entry']}: no message says {r['says']!r}: {r['messages']}")
    return problems


@pytest.mark.parametrize("lesson", sorted(BANKS))
def test_bank_loses_exactly_its_checks(lesson):
    """Does the reference pass everything, and each known-wrong kernel lose exactly its checks?"""
    report = run_bank(lesson)
    out = os.environ.get("GPU_TEST_REPORT")
    if out:
        Path(out).with_name(f"{Path(out).stem}_{lesson}.json").write_text(
            json.dumps(report, indent=1, ensure_ascii=False), encoding="utf-8")
    for r in report:
        print(f"{r['entry']:<34} lost {r['lost']}")
    problems = problems_of(report)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("lesson", sorted(BANKS))
def test_solution_notebook_demos_run_top_to_bottom(lesson, monkeypatch):
    """Do the instructor's notebook's cells (install, setup, answers, demos) run in order without an error?

    The graded cells are skipped here: the bank's "reference" entry runs every one of them.
    """
    import matplotlib
    matplotlib.use("Agg")
    monkeypatch.chdir(source_path(lesson).parent)
    ns = {"__name__": "__main__"}
    for cell in cells(source_path(lesson)):
        if cell["cell_type"] == "code" and not meta(cell).get("grade"):
            exec(compile(cell["source"], f"<{meta(cell).get('grade_id', 'cell')}>", "exec"), ns)


def test_lesson11_numpy_checks_pass_the_reference_on_a_gpu_machine():
    """Lesson 11 mixes NumPy checks (4 GiB address-space cap) with GPU checks in one module; the bank above runs only
    the GPU part.  On a GPU machine the NumPy part must grade too: on a 16-core H200 host NVRTC's first compilation
    at the module's import once mapped 13 GB and every NumPy check of the lesson was a grader fault
    (benchmarks/results/gpu_grading_time.txt)."""
    calls = [c for c in grade_calls(L11) if not GPU_PART[L11](c[0])]
    assert calls, "lesson 11 has NumPy checks"
    space = namespace(L11, {})
    failed = {}
    for check_id, names, cases in calls:
        result = run(check_id, *[space[n] for n in names], cases=cases)
        if not result.passed:
            failed[check_id] = result.message[:300]
    assert not failed, failed


def test_gpu_checks_are_forked_by_a_server_that_never_initialised_cuda():
    """A GPU check starts as a fork of a fork server (a new worker spent 1.25 s before its first kernel on the H200,
    benchmarks/results/gpu_grading_time.txt): the server imported CuPy and the lesson but never initialised CUDA, and
    its children run the reference's kernels on the GPU, one after another, each with a CUDA context of its own: in
    the student process each worker (the judge, which never initialises CUDA either) forks."""
    import cloudpickle

    from autograder.isolation import fork_server

    def reports_its_parent(*args, **kwargs):
        import os
        judge = os.getppid()
        with open(f"/proc/{judge}/stat") as stat:
            server = int(stat.read().rsplit(")", 1)[1].split()[1])
        raise ValueError(f"PARENT{server}PARENT")

    result = run_check(EQ07, [cloudpickle.dumps(reports_its_parent)])
    server = fork_server.SERVER["server"]  # no sandbox here: one server for every check
    assert f"PARENT{server.process.pid}PARENT" in result.message, result.message
    space = namespace(L07, {})
    calls = [c for c in grade_calls(L07) if c[0] in (EQ07, TAILS07, NM07, MEM07)]
    failed = {check_id: r.message[:300] for check_id, names, cases in calls
              if not (r := run(check_id, *[space[n] for n in names], cases=cases)).passed}
    assert not failed, failed
    assert fork_server.SERVER["server"] is server and not server.dead()
    maps = Path(f"/proc/{server.process.pid}/maps").read_text()
    descriptors = [os.readlink(f"/proc/{server.process.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{server.process.pid}/fd")]
    assert "/dev/nvidia" not in maps and not any(d.startswith("/dev/nvidia") for d in descriptors), "CUDA in the server"
