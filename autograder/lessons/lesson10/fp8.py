"""Lesson 10 checks: FP8 e4m3 per-block quantisation and incoherent processing (random Hadamard)."""
from __future__ import annotations

import numpy as np

from ...checks.core import CheckFailed, call_student, check, describe_case
from ...checks.inputs import normal
from ...checks.mistakes import failure, first_match
from .common import E4M3, E4M3_MAX

# --- FP8: per-block quantisation --------------------------------------------------------------

def _quantize_block_reference(x, block):
    """(x_q, scales): one scale amax/448 per block of ``block`` rows (1.0 for an all-zero block)."""
    x = np.asarray(x, np.float32)
    n_blocks = -(-x.shape[0] // block)
    scales = np.ones(n_blocks, np.float32)
    xq = np.empty(x.shape, E4M3)
    for b in range(n_blocks):
        rows = slice(b * block, (b + 1) * block)
        amax = float(np.abs(x[rows]).max())
        if amax > 0:
            scales[b] = np.float32(amax / E4M3_MAX)
        xq[rows] = (x[rows] / scales[b]).astype(E4M3)
    return xq, scales


def _quantize_tensor_reference(x):
    amax = float(np.abs(x).max())
    scale = np.float32(amax / E4M3_MAX) if amax > 0 else np.float32(1.0)
    return (np.asarray(x, np.float32) / scale).astype(E4M3), scale


def _block_input(c: dict) -> np.ndarray:
    """Rows in blocks of very different magnitude (and an all-zero block when asked)."""
    n, d, block = c["n"], c["d"], c["block"]
    x = normal((n, d), c["seed"])
    n_blocks = -(-n // block)
    magnitudes = np.geomspace(c.get("low", 1e-2), c.get("high", 1e2), n_blocks)
    np.random.default_rng(c["seed"] + 7).shuffle(magnitudes)
    x *= np.repeat(magnitudes, block)[:n, None].astype(np.float32)
    if "zero_block" in c:
        x[c["zero_block"] * block:(c["zero_block"] + 1) * block] = 0.0
    if "outlier_block" in c:
        x[c["outlier_block"] * block:(c["outlier_block"] + 1) * block] *= np.float32(c["outlier"])
    return x


def _student_quantized(quantize_per_block, x, block, case):
    got = call_student(quantize_per_block, x.copy(), block, case=case, what="quantize_per_block")
    if not (isinstance(got, tuple) and len(got) == 2):
        raise CheckFailed(f"quantize_per_block должна вернуть пару (x_q, scales), а вернула "
                          f"{type(got).__name__} ({case}).")
    xq, scales = got
    if type(xq) is not np.ndarray or xq.shape != x.shape:
        raise CheckFailed(f"x_q должен быть numpy.ndarray формы {x.shape}, а получено "
                          f"{type(xq).__name__} {getattr(xq, 'shape', '')} ({case}).")
    if xq.dtype != E4M3:
        hint = {"float8_e5m2": " В FA3 Q, K и V все в e4m3 (e5m2 — больший диапазон, но 2 бита мантиссы)."}
        raise CheckFailed(f"x_q: dtype {xq.dtype}, ожидался float8_e4m3fn ({case})."
                          + hint.get(str(xq.dtype), " Переведите x / scale в ml_dtypes.float8_e4m3fn через .astype."))
    n_blocks = -(-x.shape[0] // block)
    try:
        scales = np.asarray(scales, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise CheckFailed(f"scales не превращаются в массив чисел ({case}).") from None
    if scales.shape != (n_blocks,):
        raise CheckFailed(f"scales: {scales.size} чисел, а нужно по одному на блок из {block} строк: "
                          f"{n_blocks} ({case}).")
    return xq, scales


@check("lesson10.quantize_per_block", points=2, title="FP8 e4m3: свой масштаб для каждого блока строк")
def quantize_per_block(quantize_per_block, cases=(
        {"n": 256, "d": 64, "block": 64, "seed": 0},
        {"n": 200, "d": 32, "block": 64, "seed": 1, "zero_block": 1})):
    for c in cases:
        x = _block_input(c)
        case = describe_case(**c)
        xq, scales = _student_quantized(quantize_per_block, x, c["block"], case)
        _, expected = _quantize_block_reference(x, c["block"])
        expected = expected.astype(np.float64)
        amax = np.array([np.abs(x[b * c["block"]:(b + 1) * c["block"]]).max() for b in range(len(expected))],
                        dtype=np.float64)
        zero = amax == 0
        if zero.any() and not (np.all(np.isfinite(scales[zero])) and np.all(scales[zero] > 0)):
            raise CheckFailed(f"у блока из одних нулей масштаб {scales[zero][0]!r} ({case}): деление на него даст "
                              "NaN. Для amax = 0 возьмите scale = 1.")
        def same_scales(value, reference) -> bool:  # the blocks that are not all zero, to 1e-5
            return bool(np.all(np.isclose(value[~zero], reference[~zero], rtol=1e-5, atol=0)))

        if not same_scales(scales, expected):
            b = int(np.argmax(~zero & ~np.isclose(scales, expected, rtol=1e-5, atol=0)))
            with np.errstate(all="ignore"):
                known = {
                    "один масштаб на весь тензор (amax всего x / 448), а нужен свой для каждого блока":
                        np.full_like(expected, np.abs(x).max() / E4M3_MAX),
                    "масштаб перевёрнут: 448 / amax вместо amax / 448": E4M3_MAX / amax,
                    "взят максимум e5m2 (57344), а у e4m3fn максимум 448": amax / 57344.0,
                    "масштаб = amax: значения x / scale не используют диапазон e4m3 до 448": amax,
                }
            why = first_match(scales, expected, known, close=same_scales)
            raise failure(
                f"масштаб блока {b} равен {scales[b]:.6g}, ожидалась amax / 448 = {expected[b]:.6g} ({case}).", why,
                otherwise="Подсказка: блок — это строки [b·block, (b+1)·block); amax — максимум |x| по блоку.")
        rows_scale = np.repeat(scales, c["block"])[:x.shape[0], None]
        with np.errstate(all="ignore"):
            scaled = x.astype(np.float64) / rows_scale
            got = xq.astype(np.float64)
        if not np.all(np.isfinite(got)):
            index = tuple(int(i) for i in np.argwhere(~np.isfinite(got))[0])
            raise CheckFailed(f"x_q содержит NaN в позиции {index} ({case}): у e4m3fn нет бесконечности, "
                              "всё больше ~464 превращается в NaN. Делите на масштаб блока, а не умножайте.")
        allowed = np.maximum(2.0 ** -3 * np.abs(scaled), 2.0 ** -9) + 1e-12
        wrong = np.abs(got - scaled) > allowed
        if wrong.any():
            index = tuple(int(i) for i in np.argwhere(wrong)[0])
            raise CheckFailed(f"x_q[{index}] = {got[index]:g}, а x / scale = {scaled[index]:g}: больше одного шага "
                              f"e4m3 ({case}). Подсказка: x_q = (x_блока / scale_блока).astype(float8_e4m3fn).")
    return "масштабы и значения совпали с e4m3 для всех блоков"


def _block_errors(x, deq, block) -> np.ndarray:
    x, deq = x.astype(np.float64), deq.astype(np.float64)
    errors = []
    for b in range(-(-x.shape[0] // block)):
        rows = slice(b * block, (b + 1) * block)
        errors.append(np.linalg.norm(deq[rows] - x[rows]) / np.linalg.norm(x[rows]))
    return np.array(errors)


@check("lesson10.block_beats_tensor", points=1, title="На выбросах поблочный масштаб точнее одного на тензор")
def block_beats_tensor(quantize_per_block, cases=(
        {"n": 256, "d": 64, "block": 64, "seed": 20, "low": 1.0, "high": 1.0, "outlier_block": 1,
         "outlier": 3e4},)):
    for c in cases:
        x = _block_input(c)
        case = describe_case(**c)
        xq, scales = _student_quantized(quantize_per_block, x, c["block"], case)
        deq_block = xq.astype(np.float64) * np.repeat(scales, c["block"])[:x.shape[0], None]
        tq, tscale = _quantize_tensor_reference(x)
        deq_tensor = tq.astype(np.float64) * float(tscale)
        err_block = _block_errors(x, deq_block, c["block"]).max()
        err_tensor = _block_errors(x, deq_tensor, c["block"]).max()
        if not np.isfinite(err_block) or err_block > 0.5 * err_tensor:
            raise CheckFailed(
                f"худшая относительная ошибка блока: поблочно {err_block:.3g}, один масштаб на тензор "
                f"{err_tensor:.3g} ({case}); поблочная должна быть хотя бы вдвое меньше.\n"
                "Подсказка: при одном масштабе блок-выброс задаёт amax, и обычные строки попадают в "
                "субнормальные числа e4m3 (шаг 2^-9), где теряется точность. Шкала на блок это исправляет.")
    return f"худшая ошибка блока: поблочно {err_block:.3g}, на тензор {err_tensor:.3g}"


# --- FP8: incoherent processing ---------------------------------------------------------------

def _sylvester(d: int) -> np.ndarray:
    h = np.ones((1, 1))
    while h.shape[0] < d:
        h = np.block([[h, h], [h, -h]])
    return h


@check("lesson10.hadamard", points=2, title="Случайная матрица Адамара ортогональна")
def hadamard(random_hadamard, cases=({"d": 16, "seed": 0}, {"d": 128, "seed": 1})):
    for c in cases:
        d, seed = c["d"], c["seed"]
        case = describe_case(**c)
        H = call_student(random_hadamard, d, seed, case=case, what="random_hadamard")
        if type(H) is not np.ndarray or H.shape != (d, d) or H.dtype.kind != "f":
            raise CheckFailed(f"random_hadamard({d}, {seed}) должна вернуть numpy.ndarray ({d}, {d}) из float, "
                              f"а вернула {type(H).__name__} {getattr(H, 'shape', '')} {getattr(H, 'dtype', '')}.")
        H64 = H.astype(np.float64)
        if np.allclose(np.abs(H64), 1.0, atol=1e-6) and d > 1:
            raise failure(f"элементы H равны ±1 ({case}): H Hᵀ = {d}·I, а не I.",
                          "матрица Адамара не нормирована: нет множителя 1/√d",
                          then=f"Тогда Q Kᵀ после поворота увеличится в {d} раз.")
        if not np.allclose(np.abs(H64), 1 / np.sqrt(d), atol=1e-6):
            index = tuple(int(i) for i in np.argwhere(~np.isclose(np.abs(H64), 1 / np.sqrt(d), atol=1e-6))[0])
            raise CheckFailed(f"H[{index}] = {H64[index]:.6g}, а у нормированной матрицы Адамара все элементы "
                              f"±1/√d = ±{1 / np.sqrt(d):.6g} ({case}).")
        gram = H64 @ H64.T
        error = float(np.abs(gram - np.eye(d)).max())
        if error > 1e-5:
            raise CheckFailed(f"H Hᵀ отличается от единичной матрицы на {error:.3g} ({case}). Подсказка: "
                              "строите по Сильвестру H_2k = [[H, H], [H, −H]] и умножаете столбцы на случайные ±1.")
        again = call_student(random_hadamard, d, seed, case=case, what="random_hadamard")
        if not (type(again) is np.ndarray and np.array_equal(again, H)):
            raise CheckFailed(f"два вызова random_hadamard({d}, {seed}) дали разные матрицы: знаки должны "
                              "зависеть только от seed (np.random.default_rng(seed)).")
        if d >= 8:
            other = call_student(random_hadamard, d, seed + 1, case=case, what="random_hadamard")
            plain = _sylvester(d) / np.sqrt(d)
            if type(other) is np.ndarray and np.array_equal(other, H):
                same_as_plain = np.allclose(H64, plain)
                raise CheckFailed(f"random_hadamard({d}, {seed}) и random_hadamard({d}, {seed + 1}) совпали: "
                                  "нет случайных знаков."
                                  + (" Это обычная матрица Сильвестра; умножьте её столбцы на ±1 из "
                                     "np.random.default_rng(seed)." if same_as_plain else ""))
    return "ортогональна, элементы ±1/√d, знаки задаются seed"


def _outlier_qk(c: dict) -> tuple[np.ndarray, np.ndarray]:
    n, d, seed = c["n"], c["d"], c["seed"]
    Q, K = normal((n, d), seed), normal((n, d), seed + 1)
    rng = np.random.default_rng(seed + 2)
    for X in (Q, K):  # a few large entries, as in outlier features of LLM activations
        rows = rng.choice(n, size=max(2, n // 16), replace=False)
        cols = rng.integers(0, d, size=rows.size)
        X[rows, cols] = rng.choice([-1.0, 1.0], size=rows.size) * c.get("outlier", 40.0)
    return Q, K


def _same_product(value, reference) -> bool:
    """The test of a product of rotated matrices: within 1e-4 · (1 + max |reference|) everywhere."""
    return float(np.abs(value - reference).max()) <= 1e-4 * (1 + np.abs(reference).max())


@check("lesson10.qk_unchanged", points=2, title="Поворот H не меняет Q Kᵀ и размазывает выбросы")
def qk_unchanged(incoherent_qk, cases=({"n": 64, "d": 128, "seed": 0},)):
    for c in cases:
        Q, K = _outlier_qk(c)
        case = describe_case(**c)
        got = call_student(incoherent_qk, Q.copy(), K.copy(), c["seed"], case=case, what="incoherent_qk")
        if not (isinstance(got, tuple) and len(got) == 2):
            raise CheckFailed(f"incoherent_qk должна вернуть пару (Q H, K H), а вернула {type(got).__name__} ({case}).")
        for name, arr, like in (("Q H", got[0], Q), ("K H", got[1], K)):
            if type(arr) is not np.ndarray or arr.shape != like.shape or arr.dtype.kind != "f":
                raise CheckFailed(f"{name}: ожидался numpy.ndarray {like.shape} из float, получено "
                                  f"{type(arr).__name__} {getattr(arr, 'shape', '')} ({case}).")
        Qh, Kh = (a.astype(np.float64) for a in got)
        Q64, K64 = Q.astype(np.float64), K.astype(np.float64)
        expected = Q64 @ K64.T
        product = Qh @ Kh.T
        tol = 1e-4 * (1 + np.abs(expected).max())
        error = float(np.abs(product - expected).max())
        if not _same_product(product, expected):
            why = first_match(product, expected, {f"H не нормирована: Q Kᵀ выросло в d = {c['d']} раз": c["d"] * expected},
                              close=_same_product)
            if why is None and np.allclose(Kh, K, atol=1e-6):
                why = "повёрнута только Q, K осталась прежней"
            elif why is None and np.allclose(Qh, Q, atol=1e-6):
                why = "повёрнута только K, Q осталась прежней"
            elif why is None and _same_product(Qh @ Qh.T, Q64 @ Q64.T) and _same_product(Kh @ Kh.T, K64 @ K64.T):
                # each is turned by an orthogonal matrix (its Gram matrix kept), but not by the same one
                why = "Q и K умножены на разные матрицы (нужна одна и та же H, из одного seed)"
            raise failure(f"(Q H)(K H)ᵀ отличается от Q Kᵀ на {error:.3g} при допуске {tol:.2g} ({case}).", why,
                          then="Подсказка: (Q H)(K H)ᵀ = Q H Hᵀ Kᵀ = Q Kᵀ только при H Hᵀ = I.")
        ratio_q = np.abs(Qh).max() / np.abs(Q).max()
        ratio_k = np.abs(Kh).max() / np.abs(K).max()
        if max(ratio_q, ratio_k) > 0.5:
            raise CheckFailed(f"после поворота max|Q H| / max|Q| = {ratio_q:.2f}, max|K H| / max|K| = {ratio_k:.2f} "
                              f"({case}): выбросы не размазаны. Подсказка: умножайте на случайную матрицу Адамара, "
                              "а не на единичную (или перестановку).")
    return f"Q Kᵀ сохранилось (ошибка {error:.1e}); выбросы: max|Q H| / max|Q| = {ratio_q:.2f}"
