"""Lesson 01: HBM traffic, arithmetic intensity and the roofline.

Small functions with exact answers: each check computes the expected value with the private
formulas below (the lesson's reference) and compares exactly (counts) or to 1e-9 relative
(ratios).  Invalid input must raise ValueError.  The roofline plot is graded by the data of the
artists it returns (line vertices, marker positions), never by pixels.
"""
from __future__ import annotations

import dataclasses
import math
import numbers

import numpy as np
import numpy.ma  # noqa: F401  imported by matplotlib when the student's plot function is unpickled; here
import numpy.typing  # noqa: F401  first, so that their import-time introspection of numpy is the grader's

from ...checks import reference
from ...checks.core import CheckFailed, call_student, check, describe_case, plural
from ...checks.mistakes import failure, first_match, identify
from ...checks.scalars import expect_number, fmt, is_number
from ...checks.student_process import in_student, transferable

#: name -> (dense bf16 tensor-core peak, FLOP/s; HBM bandwidth, bytes/s), NVIDIA datasheets.
GPUS = {
    "A100 40GB": (312e12, 1.555e12),
    "A100 80GB SXM": (312e12, 2.039e12),
    "H100 SXM": (989e12, 3.35e12),
    "H200 SXM": (989e12, 4.8e12),
}

# --- the reference formulas ------------------------------------------------------------------

def ref_intensity(flops, bytes_moved):
    return flops / bytes_moved


def ref_ridge(peak_flops, bandwidth):
    return peak_flops / bandwidth


def ref_attainable(intensity, peak_flops, bandwidth):
    return min(peak_flops, intensity * bandwidth)


def ref_time(flops, bytes_moved, peak_flops, bandwidth):
    return max(flops / peak_flops, bytes_moved / bandwidth)


def ref_bound(flops, bytes_moved, peak_flops, bandwidth):
    return "memory" if bytes_moved / bandwidth > flops / peak_flops else "compute"


def expected_rmsnorm_bytes(d, bytes_per_element=2):
    """(naive, fused) bytes per row: 5 passes over d (read x, write x², read x², read x, write y) vs 2."""
    return 5 * d * bytes_per_element, 2 * d * bytes_per_element


def expected_scores_bytes(n, heads=16, bytes_per_element=2):
    return heads * n * n * bytes_per_element


def expected_attention_traffic(n, d, bytes_per_element=2):
    """Total bytes per head of naive attention: five passes over S/P plus Q, K, V read and O written."""
    return 5 * n * n * bytes_per_element + 4 * n * d * bytes_per_element


def expected_gemm(M, N, K, bytes_per_element=2):
    """(FLOPs, bytes) of C = A @ B with A (M, K), B (K, N): 2MNK; read A and B, write C."""
    return 2 * M * N * K, (M * K + K * N + M * N) * bytes_per_element


# --- comparing numbers: autograder.checks.scalars ----------------------------------------------------

def _call_text(name: str, args) -> str:
    def as_typed(a):  # a call is code: 4096, not a grouped 4 096 that reads as two arguments
        return repr(int(a)) if isinstance(a, numbers.Integral) and not isinstance(a, bool) else fmt(a)

    return f"{name}({', '.join(as_typed(a) for a in args)})"


def _call(function, name: str, args) -> tuple:
    """The student's ``name(*args)``: (the call as text, what it returned)."""
    call = _call_text(name, args)
    return call, call_student(function, *args, case=call, what=name)


def _machine(c: dict) -> tuple:
    """(peak FLOP/s, bandwidth) of a case: its ``gpu`` by name (:data:`GPUS`), or its own two numbers."""
    return tuple(GPUS[c["gpu"]]) if "gpu" in c else (c["peak_flops"], c["bandwidth"])


def _pair(got, call: str, case: str) -> tuple:
    if not (isinstance(got, (tuple, list)) and len(got) == 2):
        raise CheckFailed(f"{call} должна вернуть пару (naive, fused), а вернула "
                          f"{type(got).__name__}: {fmt(got)} ({case}).")
    return tuple(got)


# --- roofline functions --------------------------------------------------------------------------

@check("lesson01.arithmetic_intensity", points=1, title="arithmetic_intensity: FLOP на байт")
def arithmetic_intensity(arithmetic_intensity,
                         cases=({"flops": 4096, "bytes_moved": 4096}, {"flops": 8.6e9, "bytes_moved": 1.72e8},
                                {"flops": 0, "bytes_moved": 2048})):
    for c in cases:
        args = (c["flops"], c["bytes_moved"])
        call, got = _call(arithmetic_intensity, "arithmetic_intensity", args)
        expect_number(got, ref_intensity(*args), call=call,
                      mistakes={"перевёрнуто: байты / FLOPs": args[1] / args[0] if args[0] else math.nan},
                      hint="интенсивность = FLOPs / байты.")


@check("lesson01.ridge_point", points=1, title="ridge_point: пик / пропускная способность")
def ridge_point(ridge_point, cases=tuple({"gpu": name} for name in GPUS)):
    details = []
    for c in cases:
        args = _machine(c)
        call, got = _call(ridge_point, "ridge_point", args)
        expect_number(got, ref_ridge(*args), call=call, case=describe_case(**c),
                      mistakes={"ridge point перевёрнут: пропускная способность / пик": args[1] / args[0]},
                      hint="ridge point = peak_flops / bandwidth (FLOP/байт).")
        if "gpu" in c:
            details.append(f"{c['gpu']}: {float(got):.0f}")
    return "ridge point, FLOP/байт — " + ", ".join(details) if details else None


@check("lesson01.attainable_flops", points=1, title="attainable_flops: крыша min(P, I·B)")
def attainable_flops(attainable_flops,
                     cases=({"intensity": 1.0, "gpu": "H100 SXM"}, {"intensity": 1000.0, "gpu": "H100 SXM"},
                            {"intensity": 50.0, "gpu": "A100 80GB SXM"})):
    for c in cases:
        peak, bandwidth = _machine(c)
        args = (c["intensity"], peak, bandwidth)
        call, got = _call(attainable_flops, "attainable_flops", args)
        expect_number(got, ref_attainable(*args), call=call, case=describe_case(**c),
                      mistakes={"max вместо min: крыша не ограничивает": max(peak, args[0] * bandwidth),
                                "забыт потолок вычислений: только I · B": args[0] * bandwidth,
                                "всегда пик, без наклонной части": peak,
                                "I / B вместо I · B": min(peak, args[0] / bandwidth)},
                      hint="достижимая производительность = min(peak_flops, intensity * bandwidth).")


@check("lesson01.roofline_time", points=1, title="roofline_time: max(FLOPs/P, байты/B)")
def roofline_time(roofline_time,
                  cases=({"flops": 4096 * 8192, "bytes_moved": 4096 * 8192, "gpu": "H100 SXM"},
                         {"flops": 5.15e10, "bytes_moved": 7.13e7, "gpu": "H100 SXM"},
                         {"flops": 1e9, "bytes_moved": 0, "gpu": "H200 SXM"})):
    for c in cases:
        peak, bandwidth = _machine(c)
        f, b = c["flops"], c["bytes_moved"]
        args = (f, b, peak, bandwidth)
        call, got = _call(roofline_time, "roofline_time", args)
        expect_number(got, ref_time(*args), call=call, case=describe_case(**c),
                      mistakes={"сумма времён вместо максимума": f / peak + b / bandwidth,
                                "min вместо max: берётся меньшее из времён": min(f / peak, b / bandwidth),
                                "учтены только FLOPs": f / peak, "учтены только байты": b / bandwidth},
                      hint="время снизу = max(flops / peak_flops, bytes_moved / bandwidth), в секундах.")


@check("lesson01.bound_by", points=1, title="bound_by: 'memory' или 'compute'")
def bound_by(bound_by,
             cases=({"flops": 4096, "bytes_moved": 4096, "gpu": "H100 SXM"},
                    {"flops": 5.15e10, "bytes_moved": 7.13e7, "gpu": "H100 SXM"},
                    {"flops": 8.6e9, "bytes_moved": 1.72e8, "gpu": "A100 40GB"})):
    for c in cases:
        peak, bandwidth = _machine(c)
        args = (c["flops"], c["bytes_moved"], peak, bandwidth)
        call, got = _call(bound_by, "bound_by", args)
        expected = ref_bound(*args)
        if not isinstance(got, str) or got != expected:
            intensity, ridge = args[0] / args[1], peak / bandwidth
            hint = ("сравнение перевёрнуто: при интенсивности ниже ridge point оператор ждёт память"
                    if got in ("memory", "compute") else "верните ровно строку 'memory' или 'compute'")
            raise CheckFailed(f"{call}: получено {fmt(got)}, ожидалось {expected!r} ({describe_case(**c)}). "
                              f"Интенсивность {intensity:.3g} FLOP/байт, ridge point {ridge:.3g}.\n"
                              f"Подсказка: {hint}.")


BAD_INPUT = (
    {"function": "arithmetic_intensity", "args": [1e9, -4096], "why": "отрицательные байты"},
    {"function": "arithmetic_intensity", "args": [1e9, 0], "why": "ноль байт"},
    {"function": "ridge_point", "args": [989e12, 0], "why": "нулевая пропускная способность"},
    {"function": "attainable_flops", "args": [10.0, 989e12, 0], "why": "нулевая пропускная способность"},
    {"function": "roofline_time", "args": [1e9, -1, 989e12, 3.35e12], "why": "отрицательные байты"},
    {"function": "bound_by", "args": [1e9, 1e6, 989e12, 0], "why": "нулевая пропускная способность"},
)

ROOFLINE_FUNCTIONS = ("arithmetic_intensity", "ridge_point", "attainable_flops", "roofline_time", "bound_by")


def _outcome(function, args, what: str):
    """Call the student's function and report ('raised', type, message) or ('returned', value)."""

    def probe():
        try:
            return ("returned", function(*args))
        except NotImplementedError:
            raise
        except Exception as error:  # the kind of exception is what this check grades
            return ("raised", type(error).__name__, str(error))

    return call_student(probe, case=_call_text(what, args), what=what)


@check("lesson01.bad_input", points=2, title="Неверный вход: ValueError с понятным сообщением")
def bad_input(arithmetic_intensity, ridge_point, attainable_flops, roofline_time, bound_by, cases=BAD_INPUT):
    functions = dict(zip(ROOFLINE_FUNCTIONS,
                         (arithmetic_intensity, ridge_point, attainable_flops, roofline_time, bound_by)))
    for c in cases:
        name, args = c["function"], tuple(c["args"])
        call = _call_text(name, args)
        outcome = _outcome(functions[name], args, name)
        why = f" ({c['why']})" if c.get("why") else ""
        if outcome[0] == "returned":
            raise CheckFailed(f"{call} должна выбросить ValueError{why}, а вернула {fmt(outcome[1])}.\n"
                              "Подсказка: проверьте аргументы в начале функции, например "
                              "`if bandwidth <= 0: raise ValueError(\"bandwidth должна быть > 0\")`.")
        _, kind, text = outcome
        if kind != "ValueError":
            raise CheckFailed(f"{call} выбросила {kind}: {text}{why}; ожидался ValueError.\n"
                              "Подсказка: не дожидайтесь деления на ноль — проверьте аргументы заранее "
                              "и выбросьте ValueError сами.")
        if not text.strip():
            raise CheckFailed(f"{call} выбросила ValueError без сообщения{why}. "
                              "Напишите, какой аргумент неверен: ValueError(\"bytes_moved должно быть > 0\").")


# --- traffic counts ------------------------------------------------------------------------------

def _count_args(c: dict, *fields: str) -> tuple:
    """A count's arguments: the case's ``fields``, then its ``bytes_per_element`` where it gives one."""
    return tuple(c[f] for f in fields) + ((c["bytes_per_element"],) if "bytes_per_element" in c else ())


def _naive_and_fused(function, name: str, c: dict, field: str, expected, *, naive: tuple, fused: tuple) -> None:
    """``name(c[field], [bytes_per_element])`` returns the pair (naive, fused) of ``expected(*args)``;
    ``naive`` and ``fused`` are each one's (known mistakes, hint)."""
    args = _count_args(c, field)
    case = describe_case(**c)
    call, got = _call(function, name, args)
    for index, (label, value, want, (mistakes, hint)) in enumerate(
            zip(("naive", "fused"), _pair(got, call, case), expected(*args), (naive, fused))):
        expect_number(value, want, call=f"{call}[{index}] ({label})", exact=True, case=case, mistakes=mistakes,
                      hint=hint)


@check("lesson01.rmsnorm_bytes", points=1, title="RMSNorm: байты на строку, naive и fused")
def rmsnorm_bytes(rmsnorm_bytes_per_row, cases=({"d": 1024},)):
    for c in cases:
        d, b = c["d"], c.get("bytes_per_element", 2)
        _naive_and_fused(
            rmsnorm_bytes_per_row, "rmsnorm_bytes_per_row", c, "d", expected_rmsnorm_bytes,
            naive=({"4 прохода вместо 5: забыто повторное чтение x или чтение x²": 4 * d * b,
                    "элементы вместо байт (не умножили на bytes_per_element)": 5 * d,
                    "байты считаются как 4 (float32) вместо bytes_per_element": 5 * d * 4},
                   "наивно 5 проходов по d элементов: read x, write x², read x² (mean), read x, write y."),
            fused=({"fused считает повторное чтение x: на GPU строка лежит в регистрах": 3 * d * b,
                    "элементы вместо байт (не умножили на bytes_per_element)": 2 * d},
                   "fused: прочитать x и записать y — 2 прохода по d элементов."))


@check("lesson01.swiglu_bytes", points=1, title="SwiGLU: байты на токен, naive и fused (GPU)")
def swiglu_bytes(swiglu_bytes_per_token, cases=({"I": 3072},)):
    for c in cases:
        inner, b = c["I"], c.get("bytes_per_element", 2)
        _naive_and_fused(
            swiglu_bytes_per_token, "swiglu_bytes_per_token", c, "I", reference.swiglu_traffic,
            naive=({"3 прохода: посчитаны только записи g, u, h (чтения g и u забыты)": 3 * inner * b,
                    "элементы вместо байт (не умножили на bytes_per_element)": 5 * inner},
                   "наивно: записать g и u (GEMM), прочитать их (epilogue), записать h — 5·I элементов."),
            fused=({"это CPU-вариант с одним GEMM (3·I): на GPU g и u не покидают регистры": 3 * inner * b,
                    "элементы вместо байт (не умножили на bytes_per_element)": inner},
                   "на GPU epilogue применяется до записи: в HBM уходит только h = silu(g)·u, I элементов."))


@check("lesson01.attention_scores_bytes", points=1, title="Матрица S: байты на слой (все головы)")
def attention_scores_bytes(attention_scores_bytes,
                           cases=({"n": 4096, "heads": 16}, {"n": 32768, "heads": 16})):
    for c in cases:
        args, b = _count_args(c, "n", "heads"), c.get("bytes_per_element", 2)
        call, got = _call(attention_scores_bytes, "attention_scores_bytes", args)
        n, h = c["n"], c["heads"]
        expect_number(got, expected_scores_bytes(*args), call=call, exact=True, case=describe_case(**c),
                      mistakes={"n²·d вместо n²: S не зависит от head_dim": h * n * n * 128 * b,
                                "одна голова вместо всех": n * n * b,
                                "элементы вместо байт": h * n * n,
                                "в МБ или МиБ вместо байт": h * n * n * b / 1e6},
                      hint="S = Q·Kᵀ для каждой головы — матрица n × n: heads · n² · bytes_per_element байт.")


ATTENTION_FIVE_PASSES = ("запись S", "чтение S для max", "чтение S для exp", "запись P", "чтение P для PV")


@check("lesson01.naive_attention_traffic", points=1, title="Наивный attention: трафик на голову по проходам")
def naive_attention_traffic(naive_attention_traffic, cases=({"n": 4096, "d": 128},)):
    for c in cases:
        args = _count_args(c, "n", "d")
        call, got = _call(naive_attention_traffic, "naive_attention_traffic", args)
        if not isinstance(got, dict) or not got:
            raise CheckFailed(f"{call} должна вернуть непустой словарь {{название прохода: байты}}, "
                              f"а вернула {type(got).__name__}.")
        n, d, b = c["n"], c["d"], c.get("bytes_per_element", 2)
        for name, value in got.items():
            if not isinstance(name, str) or not name.strip():
                raise CheckFailed(f"{call}: ключи словаря — названия проходов (непустые строки), а есть {name!r}.")
            if not is_number(value) or value < 0:
                raise CheckFailed(f"{call}: проход {name!r} — {fmt(value)}; ожидалось неотрицательное число байт.")
        square = [name for name, value in got.items() if value == n * n * b]
        rest = sum(value for name, value in got.items() if name not in square)
        total = sum(got.values())
        passes = ", ".join(ATTENTION_FIVE_PASSES)
        if len(square) != 5:
            hint = (" Это версия «около 134 МБ на голову», которую часто цитируют: в ней забыт один проход." if len(square) == 4 else "")
            raise CheckFailed(f"{call}: проходов размера n² · {b} = {fmt(n * n * b)} байт — {len(square)} "
                              f"({', '.join(square) or 'ни одного'}); ожидалось 5, каждый отдельной записью: "
                              f"{passes}.{hint}")
        if rest != 4 * n * d * b:
            raise CheckFailed(f"{call}: кроме пяти проходов по S/P насчитано {fmt(rest)} байт, ожидалось "
                              f"{fmt(4 * n * d * b)} = 4 · n · d · {b} (чтение Q, K, V и запись O).")
        expect_number(total, expected_attention_traffic(*args), call=f"сумма {call}", exact=True)


@check("lesson01.gemm_traffic", points=1, title="GEMM: FLOPs и байты")
def gemm_traffic(gemm_traffic, cases=({"M": 4096, "N": 6144, "K": 1024},)):
    for c in cases:
        args = _count_args(c, "M", "N", "K")
        call, got = _call(gemm_traffic, "gemm_traffic", args)
        if not (isinstance(got, (tuple, list)) and len(got) == 2):
            raise CheckFailed(f"{call} должна вернуть пару (flops, bytes), а вернула {type(got).__name__}.")
        M, N, K, b = c["M"], c["N"], c["K"], c.get("bytes_per_element", 2)
        flops, bytes_moved = expected_gemm(*args)
        expect_number(got[0], flops, call=call + "[0] (FLOPs)", exact=True, case=describe_case(**c),
                      mistakes={"M·N·K: умножение и сложение — две операции, FLOPs = 2·M·N·K": M * N * K},
                      hint="каждый из M·N выходов — скалярное произведение длины K: K умножений и K сложений.")
        expect_number(got[1], bytes_moved, call=call + "[1] (bytes)", exact=True, case=describe_case(**c),
                      mistakes={"забыта запись результата C (M·N)": (M * K + K * N) * b,
                                "элементы вместо байт": M * K + K * N + M * N},
                      hint="прочитать A (M·K) и B (K·N), записать C (M·N), умножить на bytes_per_element.")


# --- the roofline plot --------------------------------------------------------------------------

QWEN_OPS = {  # name -> (FLOPs, bytes) for the visible case: Qwen3-0.6B, bf16, T = n = 4096
    "RMSNorm": (4 * 1024, 4 * 1024),
    "SwiGLU epilogue": (5 * 3072, 3 * 3072 * 2),
    "naive attention": (4 * 4096 * 4096 * 128, expected_attention_traffic(4096, 128)),
    "GEMM gate_up": expected_gemm(4096, 6144, 1024),
}

ROOF_REL = 1e-6


def _same_heights(ys, reference) -> bool:
    """The test of a drawn line against a curve: every vertex height finite and within ROOF_REL of the curve's."""
    ys, reference = np.asarray(ys, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    with np.errstate(all="ignore"):
        return bool(len(ys) and ys.shape == reference.shape and np.all(np.isfinite(ys))
                    and np.all(np.abs(ys - reference) <= ROOF_REL * np.abs(reference)))


def _on_curve(xs, ys, curve) -> bool:
    with np.errstate(all="ignore"):
        return _same_heights(ys, curve(xs))


def _roof(peak, bandwidth):
    return lambda xs: np.minimum(peak, xs * bandwidth)


def _line_points(line) -> np.ndarray:
    try:
        xy = np.asarray(line.get_xydata(), dtype=np.float64).reshape(-1, 2)
    except (TypeError, ValueError):
        return np.zeros((0, 2))
    return xy[np.all(np.isfinite(xy), axis=1)]


def _collection_points(collection) -> np.ndarray:
    try:
        xy = np.asarray(collection.get_offsets(), dtype=np.float64).reshape(-1, 2)
    except (TypeError, ValueError, AttributeError):
        return np.zeros((0, 2))
    return xy[np.all(np.isfinite(xy), axis=1)]


def _has_linestyle(line) -> bool:
    return line.get_linestyle() not in ("None", "none", "", " ")


ROOF_HINT = ("Постройте крышу одной ломаной: вершины (x_min, x_min·B), (ridge, P), (x_max, P), "
             "где x_min и x_max охватывают все операторы.")


def _roof_mistake(lines, gpu, peak, bandwidth) -> str | None:
    """Why no line is the roofline: the first known mistake that fits a drawn line (and misses the roof there)."""
    known = {
        "наклонная без крыши: y = I·B без min с пиком": lambda x: x * bandwidth,
        "max вместо min": lambda x: np.maximum(peak, x * bandwidth),
        "ось y в TFLOP/s: по контракту — FLOP/s": lambda x: np.minimum(peak, x * bandwidth) / 1e12,
    }
    known |= {f"крыша другого GPU ({name}), а не {gpu}": _roof(*GPUS[name]) for name in GPUS if name != gpu}
    for line in lines:
        xy = _line_points(line)
        if len(xy) >= 2:
            xs = xy[:, 0]
            mistake = identify(xy[:, 1], _roof(peak, bandwidth)(xs), known, (xs,), close=_same_heights)
            if mistake:
                return mistake
    return None


def _find_roofline(lines, peak, bandwidth, x_low, x_high):
    """The first line whose vertices lie on the roof, include the ridge point and span the operators."""
    ridge = peak / bandwidth
    problems = []
    for line in lines:
        xy = _line_points(line)
        if len(xy) < 2 or not _has_linestyle(line) or not _on_curve(xy[:, 0], xy[:, 1], _roof(peak, bandwidth)):
            continue
        xs = xy[:, 0]
        if not np.any(np.abs(xs - ridge) <= ROOF_REL * ridge):
            problems.append(f"линия лежит на крыше, но ridge point (I = {ridge:.4g}, P = {peak:.4g}) не среди её "
                            "вершин: без этой вершины излом срезается. Добавьте x = ridge_point(P, B) = P / B в массив x.")
        elif not (xs.min() <= x_low and xs.max() >= x_high and xs.min() < ridge < xs.max()):
            problems.append(f"линия лежит на крыше, но охватывает I от {xs.min():.3g} до {xs.max():.3g}, а нужно "
                            f"от {x_low:.3g} до {x_high:.3g} (все операторы и ridge point внутри).")
        else:
            return line, problems
    return None, problems


def _has_point(points, xy) -> bool:
    """Is one of ``points`` (an (N, 2) array, or one point) at ``xy`` within ROOF_REL in both coordinates?"""
    points, xy = np.atleast_2d(np.asarray(points, dtype=np.float64)), np.asarray(xy, dtype=np.float64)
    return bool(len(points) and np.any(np.all(np.abs(points - xy) <= ROOF_REL * np.abs(xy), axis=1)))


def _labels(ax: DrawnAxes) -> list[str]:
    texts = [a.get_label() for a in list(ax.lines) + list(ax.collections)] + list(ax.texts) + list(ax.legend or ())
    return [t for t in texts if isinstance(t, str) and not t.startswith("_")]


@transferable
@dataclasses.dataclass(frozen=True)
class DrawnLine:
    """What the check reads of a matplotlib line (or a collection: its offsets, no line style): the student's
    figure is read where it was drawn, in the student process, and only this comes back to be graded."""

    xy: np.ndarray
    linestyle: str
    label: str

    def get_xydata(self):
        return self.xy

    get_offsets = get_xydata

    def get_linestyle(self) -> str:
        return self.linestyle

    def get_label(self) -> str:
        return self.label


@transferable
@dataclasses.dataclass(frozen=True)
class DrawnAxes:
    """What the check reads of a matplotlib Axes: its lines, collections, texts, legend texts and scales."""

    lines: tuple
    collections: tuple
    texts: tuple
    legend: tuple | None
    xscale: str
    yscale: str

    def get_xscale(self) -> str:
        return self.xscale

    def get_yscale(self) -> str:
        return self.yscale


def _text(value) -> str:
    return value if type(value) is str else ""


def _drawn(ax) -> DrawnAxes:
    lines = tuple(DrawnLine(_line_points(line), _text(line.get_linestyle()), _text(line.get_label()))
                  for line in ax.lines)
    collections = tuple(DrawnLine(_collection_points(c), "None", _text(c.get_label())) for c in ax.collections)
    legend = ax.get_legend()
    return DrawnAxes(lines, collections, tuple(_text(t.get_text()) for t in ax.texts),
                     None if legend is None else tuple(_text(t.get_text()) for t in legend.get_texts()),
                     _text(ax.get_xscale()), _text(ax.get_yscale()))


def _drawn_plot(plot_roofline, gpu: str, ops: dict, case: str) -> list[DrawnAxes]:
    """In the student process: the student's plot drawn and read (matplotlib is imported there when the student's
    function is unpickled, not by the grader: a module the worker imports before student code is guarded, and
    pyplot introspects its own functions)."""
    import matplotlib.pyplot as plt

    plt.switch_backend("Agg")  # resolved by the grader: pyplot inspects the backend on first use
    try:
        result = call_student(plot_roofline, gpu, dict(ops), case=case, what="plot_roofline")
        return [_drawn(ax) for ax in _axes_list(result, case)]
    finally:
        plt.close("all")


def _axes_list(result, case) -> list:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    if isinstance(result, Axes):
        return [result]
    if isinstance(result, Figure) and result.axes:
        return list(result.axes)
    raise CheckFailed(f"plot_roofline должна вернуть matplotlib Axes (или Figure), а вернула "
                      f"{type(result).__name__} ({case}). Подсказка: fig, ax = plt.subplots(); …; return ax.")


def _grade_axes(axes, gpu, ops, case) -> str:
    peak, bandwidth = GPUS[gpu]
    ridge = peak / bandwidth
    intensities = {name: f / b for name, (f, b) in ops.items()}
    x_low, x_high = min([*intensities.values(), ridge]), max([*intensities.values(), ridge])
    roofline, problems, ax = None, [], None
    for candidate in axes:
        roofline, found = _find_roofline(candidate.lines, peak, bandwidth, x_low, x_high)
        problems += found
        if roofline is not None:
            ax = candidate
            break
    if roofline is None:
        if problems:
            raise CheckFailed(f"Крыша {gpu}: {problems[0]} ({case})")
        all_lines = [line for a in axes for line in a.lines]
        raise failure(f"Не найдена линия крыши y = min(P, I·B) для {gpu} (P = {peak:.4g} FLOP/s, "
                      f"B = {bandwidth:.4g} байт/с; {case}). Линий на графике: {len(all_lines)}.",
                      _roof_mistake(all_lines, gpu, peak, bandwidth), otherwise=ROOF_HINT)
    if ax.get_xscale() != "log" or ax.get_yscale() != "log":
        raise CheckFailed(f"Оси {ax.get_xscale()}/{ax.get_yscale()}, а нужна лог-лог шкала ({case}). "
                          "Подсказка: ax.set_xscale('log'); ax.set_yscale('log').")
    points = [_line_points(line) for line in ax.lines if line is not roofline]
    points += [_collection_points(collection) for collection in ax.collections]
    points = np.concatenate(points) if points else np.zeros((0, 2))
    labels = _labels(ax)
    for name, intensity in intensities.items():
        expected = np.array([intensity, min(peak, intensity * bandwidth)])
        if not _has_point(points, expected):
            wrong = {"точка на высоте пика P, а не на крыше": (intensity, peak),
                     "точка на наклонной I·B без min": (intensity, intensity * bandwidth),
                     "по оси x отложены байты/FLOPs (интенсивность перевёрнута)":
                         (1 / intensity, min(peak, bandwidth / intensity)),
                     "ось y в TFLOP/s: по контракту — FLOP/s": (intensity, expected[1] / 1e12)}
            named = first_match(points, expected, wrong, close=_has_point)
            raise failure(
                f"Нет точки оператора «{name}»: ожидалась точка (I, min(P, I·B)) = ({expected[0]:.6g}, "
                f"{expected[1]:.6g}) ({case}); точек на графике, кроме крыши: {len(points)}.", named,
                otherwise="Подсказка: I = flops / bytes, y = attainable_flops(I, P, B); ax.scatter([I], [y], label=name).")
        if not any(name in text for text in labels):
            raise CheckFailed(f"Точка «{name}» на месте, но не подписана ({case}). Передайте label=name "
                              "в scatter/plot (и вызовите legend) или подпишите её через ax.annotate(name, ...).")
    return f"{gpu}: крыша с изломом в I = {ridge:.0f} FLOP/байт и {len(ops)} {plural(len(ops), 'оператор', 'оператора', 'операторов')} на своих местах"


@check("lesson01.roofline_plot", points=3, title="График roofline: координаты крыши и точек")
def roofline_plot(plot_roofline, cases=({"gpu": "H100 SXM", "ops": {k: list(v) for k, v in QWEN_OPS.items()}},)):
    for c in cases:
        gpu = c["gpu"]
        ops = {name: tuple(value) for name, value in c["ops"].items()}
        case = f"gpu={gpu!r}, операторы: {', '.join(ops)}"
        detail = _grade_axes(in_student(_drawn_plot, plot_roofline, gpu, ops, case), gpu, ops, case)
    return detail
