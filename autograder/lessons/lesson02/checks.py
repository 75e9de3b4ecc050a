"""Lesson 02: fused RMSNorm — checks of ``fused_rms_norm`` and the bonus ``fused_add_rms_norm``.

Contract: ``fused_rms_norm(x, w, eps=1e-6) -> (T, D) float32`` with
``y = x / sqrt(mean(x**2, axis=-1) + eps) * w`` and no (T, D) temporaries besides the output.
"""
from __future__ import annotations

import numpy as np

from ...checks import reference
from ...checks.core import (CheckFailed, call_student, check, compare, describe_case, require_array,
                            require_unchanged, tolerance)
from ...checks.inputs import normal
from ...checks.memory import Bound, MiB, checked_peak, measure_peak, one_row, peaks_within
from ...checks.mistakes import arrays_close, compare_or_name, failure, identify


VISIBLE = [{"T": 4096, "D": 512, "seed": 0}]


def _case_inputs(T: int, D: int, seed: int, scale: float = 1.0):
    x = normal((T, D), seed, scale)
    w = normal((D,), seed + 1000, 0.5) + np.float32(1.0)
    return x, w


def _run_and_compare(fn, x, w, eps, case, **kwargs):
    got = call_student(fn, x.copy(), w.copy(), eps, case=case, what="fused_rms_norm")
    expected = reference.rms_norm(x, w, eps)
    return compare_or_name(got, expected, inputs=(x, w, eps), variants=reference.RMS_NORM_MISTAKES, case=case, **kwargs)


@check("lesson02.equivalence", points=3, title="Эквивалентность с эталоном float64")
def equivalence(fused_rms_norm, cases=VISIBLE):
    errors = []
    for c in cases:
        x, w = _case_inputs(c["T"], c["D"], c["seed"], c.get("scale", 1.0))
        eps = c.get("eps", 1e-6)
        errors.append(_run_and_compare(fused_rms_norm, x, w, eps, describe_case(**{**c, "eps": eps})))
    return f"макс. ошибка {max(errors):.2e} (допуск 1e-5)"


@check("lesson02.zeros", points=1, title="Нулевые строки дают нули без NaN")
def zeros(fused_rms_norm, cases=({"T": 8, "D": 64, "seed": 3},)):
    for c in cases:
        x, w = _case_inputs(c["T"], c["D"], c["seed"])
        x[0] = 0.0  # one zero row among ordinary ones
        x[-1] = 0.0
        _run_and_compare(fused_rms_norm, x, w, 1e-6, describe_case(**c, zero_rows="0 и -1"),
                         hint="для нулевой строки mean(x²) = 0: без eps под корнем получится 0/0 = NaN")
        all_zero = np.zeros_like(x)
        _run_and_compare(fused_rms_norm, all_zero, w, 1e-6, describe_case(**c, x="все нули"),
                         hint="eps должен стоять под корнем, иначе 0/0 = NaN")


@check("lesson02.large_values", points=1, title="Одна компонента 1e3: без переполнения")
def large_values(fused_rms_norm, cases=({"T": 16, "D": 256, "seed": 4, "big": 1e3},)):
    for c in cases:
        x, w = _case_inputs(c["T"], c["D"], c["seed"])
        x[:, 7] = np.float32(c["big"])
        _run_and_compare(fused_rms_norm, x, w, 1e-6, describe_case(**c),
                         hint="квадраты больших значений должны копиться в float32 (не float16) "
                              "и делиться на D после суммирования")


@check("lesson02.unit_rms", points=1, title="При w = 1 RMS каждой строки равен 1")
def unit_rms(fused_rms_norm, cases=({"T": 64, "D": 1024, "seed": 5},)):
    for c in cases:
        x, _ = _case_inputs(c["T"], c["D"], c["seed"], scale=3.0)
        w = np.ones(c["D"], dtype=np.float32)
        case = describe_case(**c, w="ones")
        got = call_student(fused_rms_norm, x.copy(), w.copy(), 1e-6, case=case, what="fused_rms_norm")
        got = require_array(got, shape=x.shape, dtype="float32", case=case)
        rms = np.sqrt(np.mean(got.astype(np.float64) ** 2, axis=-1))
        worst = int(np.argmax(np.abs(rms - 1.0)))
        if not np.all(np.abs(rms - 1.0) < 1e-4):
            mistake = identify(got, reference.rms_norm(x, w, 1e-6), reference.RMS_NORM_MISTAKES, (x, w, 1e-6),
                               close=arrays_close(*tolerance("float32")))
            raise failure(f"RMS строки {worst} равен {rms[worst]:.6f}, ожидался 1 ± 1e-4 ({case}).", mistake,
                          otherwise="Подсказка: делите x на sqrt(mean(x²) + eps), среднее — по последней оси.")
    return f"наибольшее отклонение RMS от 1: {np.max(np.abs(rms - 1.0)):.1e}"


@check("lesson02.eps_placement", points=1, title="eps под корнем и берётся из аргумента")
def eps_placement(fused_rms_norm, cases=({"T": 32, "D": 128, "seed": 6, "scale": 0.01, "eps": 1e-2},)):
    for c in cases:
        x, w = _case_inputs(c["T"], c["D"], c["seed"], c["scale"])
        _run_and_compare(fused_rms_norm, x, w, c["eps"], describe_case(**c),
                         hint="eps прибавляется к mean(x²) под корнем: sqrt(mean(x²) + eps)")


@check("lesson02.mean_axis", points=1, title="Среднее по D (последняя ось), а не по T")
def mean_axis(fused_rms_norm, cases=({"T": 6, "D": 96, "seed": 7}, {"T": 1, "D": 33, "seed": 8})):
    for c in cases:
        x, w = _case_inputs(c["T"], c["D"], c["seed"])
        x *= np.geomspace(0.5, 50.0, c["T"], dtype=np.float32)[:, None]  # rows of very different scale
        _run_and_compare(fused_rms_norm, x, w, 1e-6, describe_case(**c, rows="разного масштаба"),
                         hint="mean(x², axis=-1, keepdims=True): каждая строка нормируется своим RMS")


@check("lesson02.not_mutated", points=1, title="Входы x и w не изменяются")
def not_mutated(fused_rms_norm, cases=({"T": 64, "D": 256, "seed": 9},)):
    for c in cases:
        x, w = _case_inputs(c["T"], c["D"], c["seed"])
        x_in, w_in = x.copy(), w.copy()
        case = describe_case(**c)
        call_student(fused_rms_norm, x_in, w_in, 1e-6, case=case, what="fused_rms_norm")
        require_unchanged({"x": (x, x_in), "w": (w, w_in)}, case=case, what="функция",
                          hint="Подсказка: операции вида x *= ... или out=x пишут во вход; "
                               "пишите в новый выходной массив.")


@check("lesson02.dtype", points=1, title="Выход float32 формы (T, D)")
def dtype(fused_rms_norm, cases=({"T": 16, "D": 64, "seed": 10},)):
    for c in cases:
        x, w = _case_inputs(c["T"], c["D"], c["seed"])
        for eps in (1e-6, np.float64(1e-5)):
            case = describe_case(**c, eps=f"{type(eps).__name__}({eps:g})")
            got = call_student(fused_rms_norm, x.copy(), w.copy(), eps, case=case, what="fused_rms_norm")
            if type(eps) is np.float64 and type(got) is np.ndarray and got.dtype == np.float64:
                # The one cause there is here: name it (the generic hint would blame code the
                # student may not have written).
                raise CheckFailed(
                    f"результат: dtype float64, ожидался float32 (случай: {case}).\n"
                    "Подсказка: eps пришёл скаляром np.float64 (так его может передать и модель), а NumPy 2 "
                    "при смешивании массива float32 со скаляром numpy float64 повышает результат до float64; "
                    "Python-число (1e-6) тип не меняет. Приведите eps к типу входа: np.float32(eps) "
                    "или x.dtype.type(eps).")
            require_array(got, shape=x.shape, dtype="float32", case=case)


def memory_bound(T: int, D: int) -> int:
    """Allowed tracemalloc peak: the output, 15 % slack and 256 KiB for row-sized temporaries."""
    return int(1.15 * T * D * 4 + 256 * 1024)


@check("lesson02.memory", points=2, title="Пик памяти ≈ размер выхода: нет временных (T, D)")
def memory(fused_rms_norm, cases=({"T": 2048, "D": 1024, "seed": 11},)):
    def measure(c, case) -> Bound:
        x, w = _case_inputs(c["T"], c["D"], c["seed"])
        peak = checked_peak(fused_rms_norm, (x.copy(), w.copy(), 1e-6), lambda: reference.rms_norm(x, w, 1e-6),
                            case=case, what="fused_rms_norm")
        allowed, output = memory_bound(c["T"], c["D"]), x.nbytes
        return one_row(peak, allowed, f"T={c['T']}, D={c['D']}", lambda table: (
            f"пик памяти {peak.mib:.1f} МиБ, допустимо {allowed / MiB:.1f} МиБ "
            f"(выход занимает {output / MiB:.1f} МиБ; {case}).\n"
            f"Это {peak.bytes / output:.1f} размера выхода: значит, создаются временные массивы (T, D), "
            "например x * x или x / rms. Копите сумму квадратов без x² целиком "
            "(np.einsum('td,td->t', x, x) или по блокам строк) и пишите результат в один выходной массив."))

    return peaks_within(cases, measure)


# --- bonus: the residual add fused in -------------------------------------------------------

def _add_not_included(x, residual, w, eps=1e-6):
    return reference.rms_norm(x, w, eps)  # out: the residual is not added before the norm


ADD_MISTAKES = {
    "нормируется x без прибавления residual": _add_not_included,
}


@check("lesson02.add_equivalence", points=2, title="Бонус: fused_add_rms_norm совпадает с эталоном", bonus=True)
def add_equivalence(fused_add_rms_norm, cases=({"T": 512, "D": 384, "seed": 12},)):
    for c in cases:
        x, w = _case_inputs(c["T"], c["D"], c["seed"])
        residual = normal(x.shape, c["seed"] + 1, 2.0)
        case = describe_case(**c)
        x_in = x.copy()
        got = call_student(fused_add_rms_norm, x_in, residual.copy(), w.copy(), 1e-6, case=case,
                           what="fused_add_rms_norm")
        if not (isinstance(got, tuple) and len(got) == 2):
            raise CheckFailed(f"fused_add_rms_norm должна вернуть пару (out, residual), а вернула "
                              f"{type(got).__name__} ({case}).")
        out_expected, h_expected = reference.add_rms_norm(x, residual, w, 1e-6)
        compare_or_name(got[0], out_expected, inputs=(x, residual, w, 1e-6), variants=ADD_MISTAKES,
                        case=case, name="out")
        compare(got[1], h_expected, case=case, name="обновлённый residual (x + residual)")
        if not np.array_equal(x_in, x):
            raise CheckFailed(f"fused_add_rms_norm изменила x ({case}); менять на месте можно только residual.")


@check("lesson02.add_memory", points=1, title="Бонус: fused_add_rms_norm без лишних (T, D) буферов",
       bonus=True)
def add_memory(fused_add_rms_norm, cases=({"T": 2048, "D": 1024, "seed": 13}, {"T": 1024, "D": 2048, "seed": 14})):
    def measure(c, case) -> Bound:
        x, w = _case_inputs(c["T"], c["D"], c["seed"])
        residual = normal(x.shape, c["seed"] + 1)
        peak = measure_peak(fused_add_rms_norm, x.copy(), residual.copy(), w.copy(), 1e-6, case=case,
                            what="fused_add_rms_norm")
        if not (isinstance(peak.result, tuple) and len(peak.result) == 2):
            raise CheckFailed(f"fused_add_rms_norm должна вернуть пару (out, residual) ({case}).")
        out_expected, h_expected = reference.add_rms_norm(x, residual, w, 1e-6)
        compare(peak.result[0], out_expected, case=case, name="out")
        compare(peak.result[1], h_expected, case=case, name="обновлённый residual (x + residual)")
        output = c["T"] * c["D"] * 4
        allowed = 2 * memory_bound(c["T"], c["D"])  # out and, unless updated in place, the new residual
        return one_row(peak, allowed, f"T={c['T']}, D={c['D']}", lambda table: (
            f"пик памяти {peak.mib:.1f} МиБ, допустимо {allowed / MiB:.1f} МиБ = out + residual "
            f"(один (T, D) массив — {output / MiB:.1f} МиБ; {case}). Сумму x + residual запишите "
            "один раз (можно прямо в residual) и нормируйте её без временных (T, D)."))

    return peaks_within(cases, measure)  # every case: the first one's table is not the verdict
