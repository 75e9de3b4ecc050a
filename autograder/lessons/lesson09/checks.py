"""Lesson 09: matrix products and FlashAttention on tensor cores (``mma.sync``) through ``cupy.RawKernel``.

Contracts:
* ``MMA_SRC`` holds ``extern "C"`` kernel ``mma_matmul``; ``mma_matmul_gpu(A, B)`` takes cupy float16
  arrays (M, K) and (K, N), any sizes, and returns a new (M, N) float32 array ``A B`` (fp32 accumulation).
* ``FLASH_TC_SRC`` holds ``flash_attention_tc_d64`` and ``flash_attention_tc_d128``;
  ``flash_attention_tc_gpu(Q, K, V, causal=False, tile_counter=None)`` takes cupy float16 arrays (H, n, d),
  d in {64, 128}, and returns a new (H, n, d) float16 array ``softmax(Q K^T / sqrt(d)) V`` per head; the
  ``tile_counter`` contract is lesson 08's (pairs of (Q tile, K/V tile) computed, added by the kernel).

Tolerances are derived from 16-bit rounding, not tuned: the inputs are exact float16 numbers, so the only
errors a right kernel makes are (matmul) fp32 accumulation, bounded by ``K u32 (|A| |B|)`` per element,
and (attention) P rounded to float16 before P V and O rounded to float16 at the end, bounded by
``u16 (P |V|) + u16 |O|`` with u16 = 2^-11 (the relative rounding error of float16).  Each bound gets a
factor 2 of slack for fp32 logits, ``ex2.approx`` and the tensor cores' own accumulation order.
"""
from __future__ import annotations

import numpy as np

from ...gpu import runtime as gpu, nvrtc
from .. import gpu_attention as attention
from ..gpu_attention import CAUSAL, TAILS, VISIBLE  # noqa: F401  (the lesson's cases, tests read them here)
from ...checks import reference
from ...checks.core import CheckFailed, check, describe_case, first_wrong, nonfinite_failure
from ...checks.inputs import normal
from ...checks.mistakes import failure, identify

WHAT_MMA = "mma_matmul_gpu"
WHAT = "flash_attention_tc_gpu"
U16 = 2.0**-11   # float16 unit roundoff (10 stored mantissa bits)
U32 = 2.0**-24   # float32 unit roundoff

MMA_VISIBLE = [{"M": 64, "N": 64, "K": 64, "seed": 0}, {"M": 100, "N": 37, "K": 77, "seed": 1},
               {"M": 1, "N": 5, "K": 3, "seed": 2}]

#: The lesson's part of the checks of values (autograder.lessons.gpu_attention.register_checks).
HINTS = {"equivalence": "проверьте оба MMA (фрагменты K без .trans, V — с .trans), перемасштабирование "
                        "O и l множителем 2^(m_old − m_new) и сборку фрагментов P из s[2kk] и s[2kk + 1]",
         "causal": "ключ j виден запросу i при j ≤ i: у элемента e фрагмента s[nn] ключ "
                   "k0 + 8·nn + 2t + (e & 1), строка r0 (e < 2) или r0 + 8"}
VERDICTS = {"equivalence": lambda worst: f"худшая ошибка — {worst:.2f} от допуска 2·2⁻¹¹·(P·|V| + |O|)",
            "causal": lambda worst: f"худшая ошибка — {worst:.2f} от допуска"}

CAUSAL_TILE_RATIO = gpu.CAUSAL_TILE_RATIO


# --- matmul -----------------------------------------------------------------------------------

def mma_inputs(M: int, N: int, K: int, seed: int):
    return normal((M, K), seed, dtype=np.float16), normal((K, N), seed + 1, dtype=np.float16)


def mma_bound(a, b) -> np.ndarray:
    """Per element: what fp32 accumulation of exact f16 products may cost, 2 K u32 (|A| |B|) (x2 slack)."""
    a, b = np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64))
    return 2 * max(a.shape[1], 16) * U32 * (a @ b) + 1e-6


def f16_accumulation_bound(a, b) -> np.ndarray:
    """Per element: what a float16 accumulator costs at most, one rounding per k-step of 8 (x2 slack)."""
    a, b = np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64))
    steps = -(-a.shape[1] // 8)
    return 2 * steps * U16 * (a @ b) + 1e-3


def mma_product(a, b) -> tuple[np.ndarray, np.ndarray]:
    """A B in float64 and its tolerance :func:`mma_bound`: a reference as the comparison takes it."""
    return a.astype(np.float64) @ b.astype(np.float64), mma_bound(a, b)


def _k_rounded_down(a, b):
    k = a.shape[1] // 8 * 8
    return mma_product(a[:, :k], b[:k])


def _rows_g_and_g8_swapped(a, b):
    c, tol = mma_product(a, b)
    rows = np.arange(c.shape[0]) ^ 8            # row g <-> g + 8 inside each 16-row tile
    ok = rows < c.shape[0]
    out, out_tol = np.zeros_like(c), np.full_like(tol, 1e-6)  # a row with no partner stays 0
    out[ok], out_tol[ok] = c[rows[ok]], tol[rows[ok]]
    return out, out_tol


def _b_fragment_transposed(a, b):
    # b0 loaded as B[g][2t], B[g][2t+1] (row of B instead of column): only square 8x8 blocks make sense
    m, k = a.shape
    n = b.shape[1]
    bt = np.zeros((-(-k // 8) * 8, -(-n // 8) * 8))
    bp = np.zeros_like(bt)
    bp[:k, :n] = b
    for k0 in range(0, bt.shape[0], 8):
        for n0 in range(0, bt.shape[1], 8):
            bt[k0:k0 + 8, n0:n0 + 8] = bp[k0:k0 + 8, n0:n0 + 8].T
    return mma_product(a, bt[:k, :n])


#: Known mistakes of the matmul: description -> (A B as the mistaken kernel computes it, its tolerance).
MMA_MISTAKES = {
    "последний неполный шаг по K (K mod 8 столбцов) потерян": _k_rounded_down,
    "строки g и g + 8 фрагмента A (или C) перепутаны": _rows_g_and_g8_swapped,
    "фрагмент B загружен по строкам B, а не по столбцам (B[g][2t] вместо B[2t][g])": _b_fragment_transposed,
}
#: Not a named mistake: an error within what a float16 accumulator costs is not a value the grader can
#: compute (the tensor cores' rounding inside a step is their own), so it is said as a hint.
F16_ACCUMULATION_HINT = ("Ошибка не больше той, что даёт накопление C во float16 (mma …f16.f16.f16.f16): "
                         "проверьте, что C накапливается во float32 (…f32.f16.f16.f32).")


def compare_bound(got, expected, tol, *, case: str, hint: str = "", name: str = "результат") -> float:
    """Raise CheckFailed unless |got - expected| <= tol elementwise (tol an array); the max error."""
    with np.errstate(all="ignore"):
        got64 = got.astype(np.float64)
        bad_values = ~np.isfinite(got64)
        if bad_values.any():
            raise nonfinite_failure(got, expected, bad_values, case=case, hint=hint, name=name)
        error = np.abs(got64 - expected)
        bad = error > tol
    if bad.any():
        worst = tuple(int(i) for i in np.unravel_index(np.argmax(error / tol), error.shape))
        raise CheckFailed(
            f"{name} не совпадает с эталоном float64 (случай: {case}).\n"
            f"Макс. ошибка {float(error.max()):.3g}; в худшем элементе {worst} ошибка {float(error[worst]):.3g} "
            f"при допуске {float(tol[worst]):.3g} (допуск из округления до 16 бит, см. урок); неверных элементов "
            f"{int(bad.sum())} из {bad.size}.\n" + first_wrong(got64, expected, bad, hint))
    return float(error.max()) if error.size else 0.0


def _within(value, reference) -> bool:
    """:func:`compare_bound`'s test as the matcher's ``close``: ``reference`` is a pair (float64 value, its
    tolerance), ``value`` a plain ndarray (or such a pair: its value), finite and within the tolerance."""
    value = value[0] if isinstance(value, tuple) else value
    expected, tol = reference
    if type(value) is not np.ndarray or value.shape != expected.shape:
        return False
    with np.errstate(all="ignore"):
        value = value.astype(np.float64)
        return bool(np.all(np.isfinite(value)) and np.all(np.abs(value - expected) <= tol))


def _named(got, expected, variants, inputs):
    """The known mistake ``got`` shows: ``expected`` and every variant's output are (value, tolerance)
    pairs, so a variant is matched by the tolerance the comparison would give it."""
    return identify(got, expected, variants, inputs, close=_within)


@check("lesson09.mma_compiles", points=1, title="Ядро mma_matmul компилируется (NVRTC, sm_75/80/90, без GPU)",
       memory_limit_gib=None, timeout_s=nvrtc.COMPILE_TIMEOUT_S)
def mma_compiles(source):
    return nvrtc.compile_check(source, ("mma_matmul",), what="MMA_SRC")


@gpu.gpu_check("lesson09.mma_matmul", points=2, title="GPU: mma_matmul_gpu = A·B (fp32-накопление, любые M, N, K)")
def mma_matmul(mma_matmul_gpu, cases=MMA_VISIBLE):
    worst = 0.0
    for c in cases:
        a, b = mma_inputs(c["M"], c["N"], c["K"], c["seed"])
        case = describe_case(**c)
        got = gpu.run_student(mma_matmul_gpu, gpu.device(a), gpu.device(b), case=case, what=WHAT_MMA)
        got = gpu.to_host(got, shape=(c["M"], c["N"]), case=case)
        expected, tol = mma_product(a, b)
        try:
            compare_bound(got, expected, tol, case=case,
                          hint="проверьте раскладку фрагментов (a0: строка g, столбцы 2t и 2t+1; a1: строка g + 8; "
                               "b0: строки 2t и 2t+1 столбца g) и нули за краями матриц")
        except CheckFailed as mismatch:
            error = np.abs(got.astype(np.float64) - expected)
            mistake = _named(got, (expected, tol), MMA_MISTAKES, (a, b))
            f16 = np.all(np.isfinite(error)) and np.all(error <= f16_accumulation_bound(a, b))
            if mistake is None and not f16:
                raise
            raise failure(str(mismatch), mistake, otherwise=F16_ACCUMULATION_HINT) from None
        worst = max(worst, float(np.max(np.abs(got - expected) / tol)) if got.size else 0.0)
    return f"совпадает на {len(cases)} случаях; худшая ошибка — {worst:.2f} от допуска 2·K·2⁻²⁴·(|A|·|B|)"


# --- attention --------------------------------------------------------------------------------

def _inputs(H: int, n: int, d: int, seed: int):
    return tuple(normal((H, n, d), seed + i, dtype=np.float16) for i in range(3))


def sanitizer_inputs(H: int, n: int, d: int, seed: int):
    """Arguments for the run under compute-sanitizer (built in the child process)."""
    return tuple(gpu.device(a) for a in _inputs(H, n, d, seed))


def _probabilities(q, k, causal: bool) -> np.ndarray:
    q, k = q.astype(np.float64), k.astype(np.float64)
    s = q @ np.swapaxes(k, 1, 2) / np.sqrt(q.shape[-1])
    if causal:
        s = np.where(reference.causal_mask(s.shape[1], s.shape[2]), s, -np.inf)
    return reference.softmax(s)


def oracle(q, k, v, causal: bool = False) -> np.ndarray:
    return _probabilities(q, k, causal) @ v.astype(np.float64)


def _attention(p, v) -> tuple[np.ndarray, np.ndarray]:
    """P V in float64 and its tolerance 2 u16 (P |V|) + 2 u16 |O| (see the module)."""
    v64 = v.astype(np.float64)
    out = p @ v64
    return out, 2 * U16 * (p @ np.abs(v64)) + 2 * U16 * np.abs(out) + 1e-6


def oracle_and_bound(q, k, v, causal: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The float64 result and the per-element tolerance 2 u16 (P |V|) + 2 u16 |O| (see the module)."""
    return _attention(_probabilities(q, k, causal), v)


# Known mistakes of the attention kernel: each gives (output, tolerance) of the attention it computes.

def _no_scale(q, k, v, causal=False):
    return oracle_and_bound(q.astype(np.float64) * np.sqrt(q.shape[-1]), k, v, causal)


def _causal_ignored(q, k, v, causal=False):
    return oracle_and_bound(q, k, v, False)


def _diagonal_masked(q, k, v, causal=False):
    q, k = q.astype(np.float64), k.astype(np.float64)
    s = q @ np.swapaxes(k, 1, 2) / np.sqrt(q.shape[-1])
    n = s.shape[-1]
    s = np.where(np.arange(n)[None, :] < np.arange(n)[:, None], s, -np.inf)  # j < i: the diagonal lost
    return _attention(reference.softmax(s), v)


def _v_not_transposed(q, k, v, causal=False):
    # ldmatrix without .trans on V: each 8x8 block of V arrives transposed
    vt = v.astype(np.float64).copy()
    H, n, d = vt.shape
    for r0 in range(0, n - n % 8, 8):
        for c0 in range(0, d, 8):
            vt[:, r0:r0 + 8, c0:c0 + 8] = np.swapaxes(vt[:, r0:r0 + 8, c0:c0 + 8], 1, 2)
    return oracle_and_bound(q, k, vt, causal)


MISTAKES = {
    "нет масштаба 1/sqrt(d) у QKᵀ": _no_scale,
    "causal-маска не применена": _causal_ignored,
    "causal-маска без диагонали (j < i вместо j ≤ i)": _diagonal_masked,
    "V загружен ldmatrix без .trans (блоки 8×8 транспонированы)": _v_not_transposed,
}


def _run(fn, c: dict, *, causal: bool, counter=None):
    return attention.run_attention(fn, _inputs(c["H"], c["n"], c["d"], c["seed"]), c, causal=causal,
                                   counter=counter, what=WHAT, dtype=np.float16)


def _check_case(fn, c: dict, *, causal: bool, counter=None, hint: str = "") -> float:
    inputs, got, case = _run(fn, c, causal=causal, counter=counter)
    return _compare(got, inputs, causal, case=case, hint=hint)


def _compare(got, inputs, causal: bool, *, case: str, hint: str = "") -> float:
    expected, tol = oracle_and_bound(*inputs, causal)
    try:
        compare_bound(got, expected, tol, case=case, hint=hint)
    except CheckFailed as mismatch:
        variants = {k: v for k, v in MISTAKES.items() if causal or "causal" not in k}
        mistake = _named(got, (expected, tol), variants, (*inputs, causal))
        if mistake is None:
            raise
        raise failure(str(mismatch), mistake) from None
    return float(np.max(np.abs(got.astype(np.float64) - expected) / tol))


@check("lesson09.flash_compiles", points=1,
       title="Ядра flash_attention_tc_d64/d128 компилируются (NVRTC, sm_75/80/90, без GPU)", memory_limit_gib=None,
       timeout_s=nvrtc.COMPILE_TIMEOUT_S)
def flash_compiles(source):
    return nvrtc.compile_check(source, ("flash_attention_tc_d64", "flash_attention_tc_d128"), what="FLASH_TC_SRC")


def _memory(fn, cases) -> str:
    def compare(got, host, case):
        _compare(gpu.to_host(got, shape=host[0].shape, case=case, dtype=np.float16), host, False, case=case)

    return attention.memory_verdict(fn, cases, inputs=_inputs, compare=compare, what=WHAT, itemsize=2,
                                    where_s="фрагменты S и P живут в регистрах варпа")


def performance_report(fn, H: int = 16, n: int = 4096, d: int = 64) -> str:
    """Feedback, not graded: TFLOP/s next to SDPA in float16 and in float32 (lesson 08's level)."""
    def others(q, k, v, causal):
        for dtype, label in (("float16", "SDPA f16"), ("float32", "SDPA fp32 (уровень ядра урока 08)")):
            yield label, gpu.sdpa_ms(q, k, v, causal, dtype)

    return attention.performance_report(fn, _inputs, H, n, d, what=WHAT, others=others,
                                        note="с пропуском тайлов у быстрого ядра около 0.5–0.7; оценивается "
                                             "счётчик тайлов, а не время")


attention.register_checks("lesson09", _check_case, _memory, performance_report,
                          hints=HINTS, verdicts=VERDICTS, rows="BR", inputs=f"{__name__}:sanitizer_inputs")
