"""Lesson 03: fused SwiGLU — checks of ``fused_swiglu`` and of the byte count per token.

Contract: ``fused_swiglu(x, W_gate_up) -> (T, I) float32`` with ``W_gate_up = [W_gate | W_up]`` of
shape (D, 2I), gate in the first I columns: ``silu(x @ W_gate) * (x @ W_up)`` computed from one
GEMM, the epilogue on views of its output, silu without overflow, and a tracemalloc peak of at
most the GEMM output plus the result.
"""
from __future__ import annotations

import numpy as np

from ...checks import reference
from ...checks.core import CheckFailed, call_student, check, describe_case, require_array, require_unchanged
from ...checks.inputs import normal
from ...checks.memory import Bound, MiB, checked_peak, one_row, peaks_within
from ...checks.mistakes import compare_or_name
from ...checks.scalars import expect_number


def _halves(x, w_gate_up):
    x = np.asarray(x, np.float64)
    i = w_gate_up.shape[1] // 2
    return x @ np.asarray(w_gate_up[:, :i], np.float64), x @ np.asarray(w_gate_up[:, i:], np.float64)


def _sigmoid(z):
    return np.exp(np.minimum(z, 0)) / (1 + np.exp(-np.abs(z)))


def _swapped(x, w):
    g, u = _halves(x, w)
    return reference.silu(u) * g


def _sigmoid_not_silu(x, w):
    g, u = _halves(x, w)
    return _sigmoid(g) * u


def _no_activation(x, w):
    g, u = _halves(x, w)
    return g * u


def _silu_of_both(x, w):
    g, u = _halves(x, w)
    return reference.silu(g) * reference.silu(u)


def _relu(x, w):
    g, u = _halves(x, w)
    return np.maximum(g, 0) * u


def _no_up(x, w):
    g, _ = _halves(x, w)
    return reference.silu(g)


def _minus_sign(x, w):
    g, u = _halves(x, w)
    return g * _sigmoid(-g) * u


MISTAKES = {
    "gate и up перепутаны: silu(u) · g (gate — первые I столбцов W_gate_up)": _swapped,
    "sigmoid вместо silu: sigmoid(g) · u (silu(g) = g · sigmoid(g))": _sigmoid_not_silu,
    "нет активации: g · u": _no_activation,
    "silu применена к обеим половинам": _silu_of_both,
    "ReLU вместо silu": _relu,
    "забыли умножить на u: вернули silu(g)": _no_up,
    "знак в сигмоиде: g · sigmoid(-g)": _minus_sign,
}

VISIBLE = ({"T": 256, "D": 1024, "I": 3072, "seed": 0},)


def _case_inputs(T: int, D: int, I: int, seed: int, scale: float = 1.0):
    """x ~ N(0, scale²) and W_gate_up ~ N(0, 1/D): g and u are of the order of ``scale``."""
    x = normal((T, D), seed, scale)
    w = normal((D, 2 * I), seed + 1000, 1.0 / np.sqrt(D))
    return x, w


def _oracle(x, w):
    i = w.shape[1] // 2
    return reference.swiglu(x, w[:, :i], w[:, i:])


def _tolerance(scale: float) -> dict:
    # float32 GEMM over D terms against float64: the error grows with |g| · |u| ~ scale².
    return {"atol": 1e-4 * max(1.0, scale) ** 2, "rtol": 1e-4}


@check("lesson03.equivalence", points=3, title="fused_swiglu совпадает с эталоном float64")
def equivalence(fused_swiglu, cases=VISIBLE):
    errors = []
    for c in cases:
        x, w = _case_inputs(c["T"], c["D"], c["I"], c["seed"], c.get("scale", 1.0))
        case = describe_case(**c)
        got = call_student(fused_swiglu, x.copy(), w.copy(), case=case, what="fused_swiglu")
        errors.append(compare_or_name(got, _oracle(x, w), inputs=(x, w), variants=MISTAKES, case=case,
                                      **_tolerance(c.get("scale", 1.0))))
    return f"макс. ошибка {max(errors):.2e} (допуск 1e-4)"


def _call_strict(fused_swiglu, x, w, case):
    """Run the student's function with NumPy's overflow and invalid-operation flags raising."""

    def probe():
        with np.errstate(over="raise", invalid="raise"):
            try:
                return "ok", fused_swiglu(x, w)
            except FloatingPointError as error:
                return "fpe", str(error)

    return call_student(probe, case=case, what="fused_swiglu")


@check("lesson03.large_inputs", points=2, title="Большие |g|: silu без переполнения, без inf/NaN")
def large_inputs(fused_swiglu, cases=({"T": 64, "D": 512, "I": 256, "seed": 1, "scale": 300.0},)):
    for c in cases:
        x, w = _case_inputs(c["T"], c["D"], c["I"], c["seed"], c["scale"])
        case = describe_case(**c)
        status, got = _call_strict(fused_swiglu, x.copy(), w.copy(), case)
        if status == "fpe":
            raise CheckFailed(
                f"fused_swiglu переполняется при |g| до {3 * c['scale']:.0f} ({case}): NumPy сообщает «{got}».\n"
                "В float32 exp(z) = inf уже при z > 88.7. Подсказка: exp(-g) при большом отрицательном g и exp(g) "
                "при большом положительном переполняются; np.where вычисляет ОБЕ ветви на всех элементах. "
                "Устойчивая форма: sigmoid(g) = exp(min(g, 0)) / (1 + exp(-|g|)) — показатели экспонент ≤ 0.")
        compare_or_name(got, _oracle(x, w), inputs=(x, w), variants=MISTAKES, case=case,
                        hint="silu(g) при g → -∞ стремится к 0, при g → +∞ — к g; inf/NaN значит переполнение",
                        **_tolerance(c["scale"]))


@check("lesson03.not_mutated", points=1, title="Входы x и W_gate_up не изменяются")
def not_mutated(fused_swiglu, cases=({"T": 32, "D": 256, "I": 128, "seed": 2},)):
    for c in cases:
        x, w = _case_inputs(c["T"], c["D"], c["I"], c["seed"])
        x[0] *= 100.0  # a row of large activations: clipping x "against overflow" would change it
        x_in, w_in = x.copy(), w.copy()
        case = describe_case(**c, row_0="×100")
        call_student(fused_swiglu, x_in, w_in, case=case, what="fused_swiglu")
        require_unchanged({"x": (x, x_in), "W_gate_up": (w, w_in)}, case=case, what="fused_swiglu",
                          hint="Подсказка: на месте (out=..., *=, np.clip(..., out=x)) можно менять только "
                               "собственный выход GEMM, а не входы.")


@check("lesson03.dtype", points=1, title="Выход float32 формы (T, I)")
def dtype(fused_swiglu, cases=({"T": 5, "D": 48, "I": 40, "seed": 3},)):
    for c in cases:
        x, w = _case_inputs(c["T"], c["D"], c["I"], c["seed"])
        case = describe_case(**c)
        got = call_student(fused_swiglu, x.copy(), w.copy(), case=case, what="fused_swiglu")
        require_array(got, shape=(c["T"], c["I"]), dtype="float32", case=case)


def memory_bound(T: int, I: int) -> int:
    """Allowed tracemalloc peak: the GEMM output (T, 2I) plus the result (T, I), float32, 15 % + 256 KiB slack."""
    return int(1.15 * (T * 2 * I + T * I) * 4 + 256 * 1024)


@check("lesson03.memory", points=2, title="Пик памяти ≤ выход GEMM + результат: нет копий g и u")
def memory(fused_swiglu, cases=({"T": 512, "D": 1024, "I": 3072, "seed": 4},)):
    def measure(c, case) -> Bound:
        x, w = _case_inputs(c["T"], c["D"], c["I"], c["seed"])
        peak = checked_peak(fused_swiglu, (x.copy(), w.copy()), lambda: _oracle(x, w), case=case, what="fused_swiglu",
                            **_tolerance(1.0))
        allowed, block = memory_bound(c["T"], c["I"]), c["T"] * c["I"] * 4
        return one_row(peak, allowed, f"T={c['T']}, D={c['D']}, I={c['I']}", lambda table: (
            f"пик памяти {peak.mib:.1f} МиБ, допустимо {allowed / MiB:.1f} МиБ = выход GEMM (T, 2I) "
            f"{2 * block / MiB:.1f} МиБ + результат (T, I) {block / MiB:.1f} МиБ + запас ({case}).\n"
            f"Это {peak.bytes / block:.1f} массива (T, I): кроме выхода GEMM и результата живут ещё "
            f"{max(peak.bytes / block - 3, 0):.1f}. Вероятно, копии g и u (.copy(), np.concatenate, "
            "индексация списком) или цепочка временных массивов в silu. Берите g и u срезами-видами "
            "выхода GEMM и считайте epilogue на месте (out=..., *=): половину g можно использовать как "
            "рабочий буфер, когда g больше не нужен."))

    return peaks_within(cases, measure)


# --- bytes per token ------------------------------------------------------------------------

TRAFFIC_KEYS = ("naive", "merged", "fused")


@check("lesson03.traffic", points=1, title="Байты на токен: naive, merged (CPU), fused (GPU)")
def traffic(swiglu_traffic_per_token, cases=({"I": 3072},)):
    for c in cases:
        args = (c["I"],) + ((c["bytes_per_element"],) if "bytes_per_element" in c else ())
        call = f"swiglu_traffic_per_token({', '.join(str(a) for a in args)})"
        got = call_student(swiglu_traffic_per_token, *args, case=call, what="swiglu_traffic_per_token")
        if not isinstance(got, dict) or set(got) != set(TRAFFIC_KEYS):
            keys = sorted(map(str, got)) if isinstance(got, dict) else type(got).__name__
            raise CheckFailed(f"{call} должна вернуть словарь с ключами {list(TRAFFIC_KEYS)}, а вернула {keys}.")
        naive, fused = reference.swiglu_traffic(*args)
        b = args[1] if len(args) > 1 else 2
        I = c["I"]
        case = describe_case(**c)
        expect_number(got["naive"], naive, call=call + "['naive']", case=case, exact=True,
                      hint="два GEMM пишут g и u, epilogue читает оба и пишет h: 5·I элементов "
                           "(то же число, что naive в swiglu_bytes_per_token из урока 01).")
        expect_number(got["fused"], fused, call=call + "['fused']", case=case, exact=True,
                      hint="на GPU epilogue работает в регистрах: в HBM уходит только h, I элементов "
                           "(fused из урока 01).")
        expect_number(got["merged"], naive, call=call + "['merged']", case=case, exact=True,
                      mistakes={"один GEMM не убирает промежуточный [g, u]: он записан (2I) и прочитан "
                                "обратно (2I), плюс запись h (I) — 5·I, а не 3·I": 3 * I * b},
                      hint="один GEMM по [W_gate | W_up] всё равно пишет [g, u] в память, а epilogue читает "
                           "его обратно: байты те же, что у naive; экономится запуск ядра.")
