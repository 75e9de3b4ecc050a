"""Lesson 08: FlashAttention forward as a CUDA kernel launched through ``cupy.RawKernel``.

Contract: ``FLASH_SRC`` is CUDA C with ``extern "C"`` kernels ``flash_attention_d64`` and
``flash_attention_d128``; ``flash_attention_gpu(Q, K, V, causal=False, tile_counter=None)`` takes
cupy float32 arrays of shape (H, n, d), d in {64, 128}, and returns a new (H, n, d) float32 array
``softmax(Q K^T / sqrt(d)) V`` per head.  When ``tile_counter`` (a cupy int32 array of one element)
is given, the kernel adds to it the number of (Q tile, K/V tile) pairs it computed: that is how
the grader sees causal tiles being skipped (timing alone cannot show it for slow kernels).
"""
from __future__ import annotations

import numpy as np

from ...gpu import runtime as gpu, nvrtc
from .. import gpu_attention as attention
from ..gpu_attention import CAUSAL, TAILS, VISIBLE  # noqa: F401  (the lesson's cases, tests read them here)
from ...checks import reference
from ...checks.core import check, describe_case
from ...checks.inputs import normal
from ...checks.mistakes import compare_or_name

WHAT = "flash_attention_gpu"

#: The lesson's part of the checks of values (autograder.lessons.gpu_attention.register_checks).
HINTS = {"equivalence": "проверьте перемасштабирование O и l множителем exp(m_old − m_new) при росте "
                        "максимума и деление на l один раз в конце",
         "causal": "ключ j виден запросу i при j ≤ i (позиции в последовательности, а не в тайле)"}
VERDICTS = {"equivalence": lambda error: f"макс. ошибка {error:.2e} (допуск 1e-5 + 1e-5·|O|)",
            "causal": lambda error: f"макс. ошибка {error:.2e}"}

LARGE = [{"H": 2, "n": 256, "d": 64, "seed": 7, "q_scale": 100.0},
         {"H": 1, "n": 256, "d": 128, "seed": 8, "q_scale": 100.0, "causal": True}]
LARGE_TOLERANCE = 2e-3  # float32 logits of size ~100 carry absolute errors ~1e-5 (see the lesson)
CAUSAL_TILE_RATIO = gpu.CAUSAL_TILE_RATIO


def _inputs(H: int, n: int, d: int, seed: int, q_scale: float = 1.0):
    q = normal((H, n, d), seed) * np.float32(q_scale)
    return q, normal((H, n, d), seed + 1), normal((H, n, d), seed + 2)


def sanitizer_inputs(H: int, n: int, d: int, seed: int):
    """Arguments for the run under compute-sanitizer (built in the child process)."""
    return tuple(gpu.device(a) for a in _inputs(H, n, d, seed))


def oracle(q, k, v, causal: bool = False) -> np.ndarray:
    return np.stack([reference.attention(q[h], k[h], v[h], causal) for h in range(q.shape[0])])


def _no_scale(q, k, v, causal=False):
    return oracle(q * np.sqrt(q.shape[-1]), k, v, causal)


def _causal_ignored(q, k, v, causal=False):
    return oracle(q, k, v, False)


def _diagonal_masked(q, k, v, causal=False):
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    s = q @ np.swapaxes(k, 1, 2) / np.sqrt(q.shape[-1])
    n = s.shape[-1]
    s = np.where(np.arange(n)[None, :] < np.arange(n)[:, None], s, -np.inf)  # j < i: the diagonal lost
    return reference.softmax(s) @ v


def _scale_as_python_float(q, k, v, causal=False):
    d = q.shape[-1]
    return oracle(q * (reference.python_float_as_float_parameter(d ** -0.5) * np.sqrt(d)), k, v, causal)


MISTAKES = {
    "нет масштаба 1/sqrt(d) у QKᵀ": _no_scale,
    "causal-маска не применена": _causal_ignored,
    "causal-маска без диагонали (j < i вместо j ≤ i)": _diagonal_masked,
    f"масштаб 1/√d передан в ядро как число Python: {reference.PYTHON_FLOAT_ADVICE}": _scale_as_python_float,
}


def _run(fn, c: dict, *, causal: bool, counter=None):
    host = _inputs(c["H"], c["n"], c["d"], c["seed"], c.get("q_scale", 1.0))
    return attention.run_attention(fn, host, c, causal=causal, counter=counter, what=WHAT)


def _check_case(fn, c: dict, *, causal: bool, counter=None, hint: str = "", **tolerance) -> float:
    inputs, got, case = _run(fn, c, causal=causal, counter=counter)
    variants = {k: v for k, v in MISTAKES.items() if causal or "causal" not in k}
    return compare_or_name(got, oracle(*inputs, causal), inputs=(*inputs, causal), variants=variants,
                           case=case, hint=hint, **tolerance)


@check("lesson08.compiles", points=1, title="Ядра flash_attention_d64/d128 компилируются (NVRTC, без GPU)",
       memory_limit_gib=None, timeout_s=nvrtc.COMPILE_TIMEOUT_S)  # NVRTC and its threads map more than the CPU checks' 4 GiB cap
def compiles(source):
    return nvrtc.compile_check(source, ("flash_attention_d64", "flash_attention_d128"), what="FLASH_SRC")


@gpu.gpu_check("lesson08.large_logits", points=1, title="GPU: Q *= 100 — конечный результат, совпадает",
               emulator_cases=attention.emulator_sized)
def large_logits(flash_attention_gpu, cases=LARGE):
    errors = [_check_case(flash_attention_gpu, c, causal=c.get("causal", False),
                          atol=LARGE_TOLERANCE, rtol=LARGE_TOLERANCE,
                          hint="без вычитания текущего максимума m экспонента логитов порядка сотен (Q·100, "
                               "делённое на √d) переполняет float32 (inf/inf = NaN): считайте exp(s − m_new)") for c in cases]
    return f"макс. ошибка {max(errors):.2e} (допуск {LARGE_TOLERANCE:g}: ошибка float32 растёт с логитами)"


def _compare(got, host, case: str) -> None:
    compare_or_name(gpu.to_host(got, shape=host[0].shape, case=case), oracle(*host), inputs=(*host, False),
                    variants=MISTAKES, case=case)


def _memory(fn, cases) -> str:
    return attention.memory_verdict(fn, cases, inputs=_inputs, compare=_compare, what=WHAT, itemsize=4,
                                    where_s="тайл S живёт в регистрах и разделяемой памяти")


def naive_attention(q, k, v, causal=False):
    """The composition of CuPy operations (S materialised) that FlashAttention replaces."""
    cp = gpu._cp
    s = q @ cp.swapaxes(k, 1, 2) * np.float32(1 / np.sqrt(q.shape[-1]))
    if causal:
        n = q.shape[1]
        s = cp.where(cp.tri(n, dtype=bool), s, cp.float32(-np.inf))
    p = cp.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v


def performance_report(fn, H: int = 16, n: int = 4096, d: int = 64) -> str:
    """Feedback, not graded: causal vs non-causal time, TFLOP/s next to naive CuPy and SDPA."""
    def others(q, k, v, causal):
        yield "наивная CuPy", gpu.time_ms(naive_attention, q, k, v, causal, repeat=3, rounds=3)
        yield "PyTorch SDPA fp32", gpu.sdpa_ms(q, k, v, causal)

    return attention.performance_report(
        fn, _inputs, H, n, d, what=WHAT, others=others,
        note="у быстрого ядра с пропуском тайлов около 0.5–0.7; если все блоки помещаются на GPU за один раз или "
             "ядро медленное, время упирается в самый длинный блок и пропуска не показывает — поэтому "
             "оценивается счётчик тайлов")


attention.register_checks("lesson08", _check_case, _memory, performance_report,
                          hints=HINTS, verdicts=VERDICTS, rows="Br", inputs=f"{__name__}:sanitizer_inputs")


def step2_feedback(fast, step1, H: int = 16, n: int = 4096, d: int = 64) -> str:
    """Step 2 of the lesson, ungraded: is the fast kernel right, and how much faster than step 1?

    Runs in the student's kernel (not a check): the fast kernel is compared with the float64 oracle on
    small cases, then both are timed with CUDA events.
    """
    cp = gpu._cp
    lines = []
    for c in ({"H": 2, "n": 200, "d": 64, "seed": 21}, {"H": 1, "n": 77, "d": 128, "seed": 22, "causal": True}):
        q, k, v = _inputs(c["H"], c["n"], c["d"], c["seed"])
        causal = c.get("causal", False)
        got = cp.asnumpy(fast(cp.asarray(q), cp.asarray(k), cp.asarray(v), causal))
        error = float(np.max(np.abs(got - oracle(q, k, v, causal))))
        ok = bool(np.isfinite(error) and error < 1e-4)
        lines.append(f"{describe_case(**c)}: макс. ошибка {error:.2e} — {'верно' if ok else 'НЕВЕРНО'}")
        if not ok:
            return "Шаг 2: " + "; ".join(lines) + ". Сначала добейтесь верного результата."
    q, k, v = (cp.asarray(a) for a in _inputs(H, n, d, 23))
    for causal in (False, True):
        ms_fast = gpu.time_ms(fast, q, k, v, causal, repeat=3, rounds=3)
        ms_step1 = gpu.time_ms(step1, q, k, v, causal, repeat=1, rounds=3, warmup=1)
        flops = gpu.attention_flops(H, n, d, causal)
        lines.append(f"{'causal' if causal else 'без маски'} (H={H}, n={n}, d={d}): шаг 2 {ms_fast:.2f} мс = "
                     f"{flops / ms_fast / 1e9:.1f} TFLOP/s, шаг 1 {ms_step1:.2f} мс = {flops / ms_step1 / 1e9:.1f} "
                     f"TFLOP/s, ускорение {ms_step1 / ms_fast:.1f}×")
    return "Шаг 2 (не оценивается):\n" + "\n".join(lines)
