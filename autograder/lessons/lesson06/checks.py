"""Lesson 06: CUDA basics through CuPy - three small kernels, each with its own checks.

Contract (float32, CuPy arrays in, a NEW CuPy array out, inputs unchanged, any size >= 1):

* ``SCALE_ADD_SRC`` with ``extern "C" __global__ void scale_add(float a, const float* x, const float* y,
  float* out, int n)``; ``scale_add_gpu(a, x, y)`` -> ``a * x + y`` for 1-D x, y;
* ``ROW_SUMS_SRC`` with ``row_sums(const float* x, float* out, int T, int D)``; ``row_sums_gpu(x)`` ->
  the (T,) row sums of a (T, D) array (one block per row: a shared-memory tree, then a warp shuffle);
* ``MATMUL_SRC`` with ``matmul_tiled(const float* A, const float* B, float* C, int M, int N, int K)``;
  ``matmul_tiled_gpu(A, B)`` -> ``A @ B`` for (M, K) x (K, N) with shared-memory tiles.

Per kernel: it compiles (NVRTC, sm_75/80/90, no GPU needed); it matches a float64 oracle, tails
included; inputs stay unchanged and nothing but the output is allocated on the device; and
compute-sanitizer finds no out-of-bounds access (memcheck) and, where shared memory is used, no
race (racecheck).  Every run of student code goes through :func:`autograder.gpu.runtime.run_student`:
new allocations are NaN-filled and guarded, so an element left unwritten or a write past the end
fails even when the values would look right.
"""
from __future__ import annotations

import numpy as np

from ...gpu import runtime as gpu, nvrtc
from ...checks.core import CheckFailed, check, describe_case, require_unchanged
from ...gpu.sanitizer import sanitizer_verdict
from ...checks.inputs import normal
from ...checks.mistakes import compare_or_name

MiB = 2**20
EXTRA_BYTES = 4096  # device memory beyond the output a kernel call may take (CuPy's own bookkeeping)


# --- inputs and oracles ----------------------------------------------------------------------

def _vectors(n: int, seed: int):
    a = np.float32(np.random.default_rng(seed + 7).uniform(-2.0, 2.0))
    return a, normal((n,), seed), normal((n,), seed + 1)


def _rows(T: int, D: int, seed: int):
    return normal((T, D), seed)


def _matrices(M: int, K: int, N: int, seed: int):
    return normal((M, K), seed), normal((K, N), seed + 1)


def scale_add_inputs(n: int, seed: int):
    a, x, y = _vectors(n, seed)
    return a, gpu.device(x), gpu.device(y)


def row_sums_inputs(T: int, D: int, seed: int):
    return (gpu.device(_rows(T, D, seed)),)


def matmul_inputs(M: int, K: int, N: int, seed: int):
    return tuple(gpu.device(m) for m in _matrices(M, K, N, seed))


def _scale_add_oracle(a, x, y):
    return np.float64(a) * x.astype(np.float64) + y


def _row_sums_oracle(x):
    return x.astype(np.float64).sum(axis=1)


def _matmul_oracle(A, B):
    return A.astype(np.float64) @ B.astype(np.float64)


# Known mistakes, computed by the grader on the same input (see autograder.checks.mistakes).
SCALE_ADD_MISTAKES = {
    "a·y + x вместо a·x + y": lambda a, x, y: np.float64(a) * y + x,
    "a не умножено: x + y": lambda a, x, y: x.astype(np.float64) + y,
}


def _first_warp_only(x):
    return x[:, :32].astype(np.float64).sum(axis=1)


def _without_tail(block: int):
    return lambda x: x[:, : (x.shape[1] // block) * block].astype(np.float64).sum(axis=1)


ROW_SUMS_MISTAKES = {
    "сложены только первые 32 элемента строки (один варп)": _first_warp_only,
    "хвост строки потерян: сложены только полные проходы блока из 256 потоков": _without_tail(256),
    "хвост строки потерян: сложены только полные проходы блока из 128 потоков": _without_tail(128),
    "сумма по столбцам, а не по строкам": lambda x: x.astype(np.float64).sum(axis=0)[: x.shape[0]],
}
MATMUL_MISTAKES = {
    "B транспонирована: A @ Bᵀ": lambda A, B: A.astype(np.float64) @ B.astype(np.float64).T,
}


def _tile_tail_mistakes(tile: int):
    def dropped(A, B):
        k = (A.shape[1] // tile) * tile
        return A[:, :k].astype(np.float64) @ B[:k].astype(np.float64)
    return dropped


for _tile in (16, 32):
    MATMUL_MISTAKES[f"последний неполный тайл по K ({_tile}) не учтён"] = _tile_tail_mistakes(_tile)


# --- one table of kernels ---------------------------------------------------------------------

#: Per kernel: the student's wrapper (``what``), the source's name, its kernels, and the tails of its
#: checks' titles: what equivalence shows, the inputs the memory check keeps, and the run under
#: compute-sanitizer (the check id's tail, its timeout, title and whether racecheck runs too).
RACES = ("sanitizer", 150, "без выходов за границы и гонок (memcheck, racecheck)", True)
KERNELS = {
    "scale_add": dict(what="scale_add_gpu", source="SCALE_ADD_SRC", kernels=("scale_add",),
                      matches="совпадает с эталоном, любое n ≥ 1", inputs="входы",
                      sanitizer=("bounds", 120, "не выходит за границы массивов (compute-sanitizer memcheck)",
                                 False)),
    "row_sums": dict(what="row_sums_gpu", source="ROW_SUMS_SRC", kernels=("row_sums",),
                     matches="совпадает с эталоном (D меньше и больше блока)", inputs="вход", sanitizer=RACES),
    "matmul": dict(what="matmul_tiled_gpu", source="MATMUL_SRC", kernels=("matmul_tiled",),
                   matches="совпадает с A @ B (формы не кратны тайлу)", inputs="входы", sanitizer=RACES),
}


def _run_scale_add(fn, c: dict) -> float:
    a, x, y = _vectors(c["n"], c["seed"])
    case = describe_case(**c, a=round(float(a), 4))
    got = gpu.run_student(fn, a, gpu.device(x), gpu.device(y), case=case, what="scale_add_gpu")
    got = gpu.to_host(got, shape=x.shape, case=case)
    return compare_or_name(got, _scale_add_oracle(a, x, y), inputs=(a, x, y), variants=SCALE_ADD_MISTAKES,
                           case=case, hint="out[i] = a * x[i] + y[i] для каждого i < n; блоков — (n + B − 1) // B, "
                           "и в ядре `if (i < n)`")


def _row_tolerance(D: int) -> float:
    return 1e-5 + 2e-7 * D  # float32 partial sums: the error grows with the number of terms


def _run_row_sums(fn, c: dict) -> float:
    x = _rows(c["T"], c["D"], c["seed"])
    case = describe_case(**c)
    got = gpu.run_student(fn, gpu.device(x), case=case, what="row_sums_gpu")
    got = gpu.to_host(got, shape=(c["T"],), case=case)
    return compare_or_name(got, _row_sums_oracle(x), inputs=(x,), variants=ROW_SUMS_MISTAKES, case=case,
                           atol=_row_tolerance(c["D"]), rtol=1e-5,
                           hint="каждый поток суммирует j = tid, tid + blockDim.x, … пока j < D; затем дерево в "
                                "__shared__ с __syncthreads() на каждом шаге и __shfl_xor_sync в последнем варпе")


def _run_matmul(fn, c: dict) -> float:
    A, B = _matrices(c["M"], c["K"], c["N"], c["seed"])
    case = describe_case(**c)
    got = gpu.run_student(fn, gpu.device(A), gpu.device(B), case=case, what="matmul_tiled_gpu")
    got = gpu.to_host(got, shape=(c["M"], c["N"]), case=case)
    return compare_or_name(got, _matmul_oracle(A, B), inputs=(A, B), variants=MATMUL_MISTAKES, case=case,
                           atol=1e-5 + 2e-7 * c["K"], rtol=1e-5,
                           hint="тайлы A и B за краем матрицы загружайте нулями (row < M, k < K, col < N), "
                                "цикл по тайлам — (K + TILE − 1) // TILE раз, запись C только при row < M и col < N")


RUN = {"scale_add": _run_scale_add, "row_sums": _run_row_sums, "matmul": _run_matmul}

VISIBLE = {
    "scale_add": [{"n": 1 << 16, "seed": 0}, {"n": 1000, "seed": 1}, {"n": 1, "seed": 2}],
    "row_sums": [{"T": 64, "D": 1024, "seed": 3}, {"T": 5, "D": 1000, "seed": 4}, {"T": 3, "D": 37, "seed": 5},
                 {"T": 2, "D": 5000, "seed": 6}],
    "matmul": [{"M": 64, "K": 64, "N": 64, "seed": 7}, {"M": 33, "K": 70, "N": 17, "seed": 8},
               {"M": 1, "K": 1, "N": 1, "seed": 9}],
}
MEMORY_CASES = {"scale_add": [{"n": 1 << 20, "seed": 10}], "row_sums": [{"T": 1024, "D": 1000, "seed": 11}],
                "matmul": [{"M": 256, "K": 96, "N": 200, "seed": 12}]}
SANITIZER_CASES = {"scale_add": [{"n": 1000, "seed": 13}], "row_sums": [{"T": 3, "D": 1000, "seed": 14}],
                   "matmul": [{"M": 33, "K": 20, "N": 17, "seed": 15}]}
INPUTS = {"scale_add": ("scale_add_inputs", ("n", "seed"), _vectors),
          "row_sums": ("row_sums_inputs", ("T", "D", "seed"), _rows),
          "matmul": ("matmul_inputs", ("M", "K", "N", "seed"), _matrices)}


def _equivalence(kernel: str, fn, cases) -> str:
    errors = [RUN[kernel](fn, c) for c in cases]
    return f"макс. ошибка {max(errors):.2e}; случаи: " + "; ".join(describe_case(**c) for c in cases)


def _memory(kernel: str, fn, cases) -> str:
    what = KERNELS[kernel]["what"]
    name, params, build = INPUTS[kernel]
    for c in cases:
        host = build(*(c[p] for p in params))
        host = host if isinstance(host, tuple) else (host,)
        if kernel == "scale_add":
            a, host = host[0], host[1:]
        devices = [gpu.device(h) for h in host]
        args = ([a] if kernel == "scale_add" else []) + devices
        case = describe_case(**c)
        with gpu.DeviceAllocations() as seen:
            got = gpu.run_student(fn, *args, case=case, what=what)
        shape = (host[0].shape if kernel == "scale_add" else (host[0].shape[0],) if kernel == "row_sums"
                 else (host[0].shape[0], host[1].shape[1]))
        gpu.to_host(got, shape=shape, case=case)
        require_unchanged({n: (h, d.get()) for n, h, d in zip("xy" if kernel == "scale_add" else
                                                              ("x",) if kernel == "row_sums" else "AB",
                                                              host, devices)},
                          case=case, what=what,
                          hint="ядро должно писать только в новый выходной массив (cp.empty(...)), а не во вход.")
        output = int(np.prod(shape)) * 4
        if seen.total - output > EXTRA_BYTES:
            raise CheckFailed(
                f"на устройстве выделено {seen.total / MiB:.2f} МиБ за вызов ({len(seen.sizes)} выделений), а выход "
                f"занимает {output / MiB:.2f} МиБ ({case}).\nПодсказка: результат собран из операций CuPy "
                "(каждая — своё ядро и свой временный массив), или обёртка копирует вход (cp.ascontiguousarray, "
                "astype) или создаёт промежуточный буфер. Ядро читает входы и пишет только выход.")
    return f"входы не изменились; выделен только выход ({output / MiB:.2f} МиБ)"


def _sanitizer(kernel: str, fn, cases, *, races: bool) -> str:
    name, params, _ = INPUTS[kernel]
    return sanitizer_verdict(fn, f"{__name__}:{name}", cases, lambda c: RUN[kernel](fn, c), races=races,
                             params=params)


# --- the checks -------------------------------------------------------------------------------

def _named(function, name: str):
    function.__name__ = function.__qualname__ = name
    return function


def _register(kernel: str, spec: dict) -> None:
    """The four checks of ``kernel``: ``lesson06.{kernel}_compiles`` (NVRTC, no GPU), then on the GPU
    ``lesson06.{kernel}`` (equivalence), ``lesson06.{kernel}_memory`` and its run under compute-sanitizer."""
    shown = spec["kernels"][0]
    sanitizer_id, sanitizer_timeout, sanitizer_title, races = spec["sanitizer"]

    def compiles(source):
        return nvrtc.compile_check(source, spec["kernels"], what=spec["source"])

    def equivalence(fn, cases=VISIBLE[kernel]):
        return _equivalence(kernel, fn, cases)

    def memory(fn, cases=MEMORY_CASES[kernel]):
        return _memory(kernel, fn, cases)

    def sanitizer(fn, cases=SANITIZER_CASES[kernel]):
        return _sanitizer(kernel, fn, cases, races=races)

    check(f"lesson06.{kernel}_compiles", points=1,
          title=f"Ядро {shown} компилируется (NVRTC, sm_75/80/90, без GPU)",
          memory_limit_gib=None, timeout_s=nvrtc.COMPILE_TIMEOUT_S)(_named(compiles, f"{kernel}_compiles"))
    gpu.gpu_check(f"lesson06.{kernel}", points=2, title=f"GPU: {shown} {spec['matches']}")(
        _named(equivalence, kernel))
    gpu.gpu_check(f"lesson06.{kernel}_memory", points=1,
                  title=f"GPU: {shown} не меняет {spec['inputs']} и выделяет только выход")(
        _named(memory, f"{kernel}_memory"))
    gpu.gpu_check(f"lesson06.{kernel}_{sanitizer_id}", points=1, timeout_s=sanitizer_timeout,
                  title=f"GPU: {shown} {sanitizer_title}")(_named(sanitizer, f"{kernel}_{sanitizer_id}"))


for _kernel, _spec in KERNELS.items():
    _register(_kernel, _spec)
