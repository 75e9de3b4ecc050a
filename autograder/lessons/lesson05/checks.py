"""Lesson 05: FlashAttention — checks of ``flash_attention`` and ``flash_attention_v2``.

Contract (both functions): ``f(Q, K, V, Br=64, Bc=64, causal=False) -> (n, d) float32`` with
``softmax(Q Kᵀ / sqrt(d)) V`` (causal: query i sees keys j <= i), computed tile by tile without
(n, n) arrays; inputs are not changed.  ``flash_attention`` may use any loop order (FA-1: outer
over K/V blocks); ``flash_attention_v2`` runs the FA-2 order, outer loop over Q blocks.

Each function has its own five checks (equivalence, memory, causal work, stability, contract);
``flash_attention_v2`` has one more (loop order).  The work and order checks observe the tile
products through :mod:`autograder.lessons.lesson05.tracing`; the student never reports a count.
"""
from __future__ import annotations

import numpy as np
import numpy.random  # noqa: F401  loaded before student code runs: the guard refuses lazy imports after

from ...checks import reference
from ...checks.core import (CheckFailed, call_student, check, describe_case, require_array,
                            require_unchanged)
from ...checks.inputs import normal
from ...checks.memory import Bound, MiB, measure_peak, peaks_within
from ...checks.student_process import in_student
from ...checks.mistakes import compare_or_name
from .tracing import expected_tiles, observe_tiles

EPS32 = float(np.finfo(np.float32).eps)


# --- inputs ---------------------------------------------------------------------------------

def case_inputs(n: int, d: int, seed: int, kind: str = "normal"):
    """Q, K, V of shape (n, d), float32, from seeds ``seed``, ``seed + 1``, ``seed + 2``.

    ``kind``: "normal"; "Q*100" (logits about 100x larger); "K=-100Q" (every query's score with
    itself is about -100 d / sqrt(d): a row whose visible logits are all large and negative).
    """
    Q, K, V = normal((n, d), seed), normal((n, d), seed + 1), normal((n, d), seed + 2)
    if kind == "Q*100":
        Q *= np.float32(100)
    elif kind == "K=-100Q":
        K = Q * np.float32(-100)
    elif kind != "normal":
        raise ValueError(kind)
    return Q, K, V


def naive_attention(Q, K, V, causal=False):
    """The naive float32 version the memory check compares with: S and P materialised."""
    d = Q.shape[1]
    S = (Q @ K.T) * np.float32(1 / np.sqrt(d))
    if causal:
        S = np.where(reference.causal_mask(*S.shape), S, np.float32(-np.inf))
    P = np.exp(S - S.max(axis=1, keepdims=True))
    return (P / P.sum(axis=1, keepdims=True)) @ V


# --- known mistakes -------------------------------------------------------------------------

def _skipped(i0: int, i1: int, j0: int, Br: int, Bc: int, mistake: str | None) -> bool:
    """Whether a causal run skips the tile of rows i0..i1-1 and the K-block starting at j0."""
    if mistake == "skip_diagonal_block":
        return j0 >= i0
    if mistake == "skip_by_first_row":
        return j0 > i0
    if mistake == "skip_by_block_index":
        return j0 // Bc > i0 // Br
    return j0 >= i1  # the block lies entirely above the diagonal


def simulate(Q, K, V, Br, Bc, causal, mistake: str):
    """A float32 tiled run with one known mistake, to recognise it in a student's output.

    Rows are independent, so the loop order does not change the output: one order serves all.
    """
    if mistake not in _SIMULATED:
        raise ValueError(f"unknown mistake {mistake!r}")
    n, d = Q.shape
    n_k = K.shape[0]
    scale = {"no_scale": np.float32(1), "scale_1_over_d": np.float32(1 / d)}.get(
        mistake, np.float32(1 / np.sqrt(d)))
    rows_done = n - n % Br if mistake == "q_tail_dropped" else n
    cols_done = n_k - n_k % Bc if mistake == "k_tail_dropped" else n_k
    O = np.zeros((n, d), dtype=np.float32)
    for i0 in range(0, rows_done, Br):
        i1 = min(i0 + Br, n)
        m = np.full(i1 - i0, 0 if mistake == "m_starts_at_zero" else -np.inf, dtype=np.float32)
        l = np.zeros(i1 - i0, dtype=np.float32)
        acc = np.zeros((i1 - i0, d), dtype=np.float32)
        for j0 in range(0, cols_done, Bc):
            j1 = min(j0 + Bc, n_k)
            if causal and _skipped(i0, i1, j0, Br, Bc, mistake):
                continue
            S = (Q[i0:i1] @ K[j0:j1].T) * scale
            rows, cols = np.arange(i0, i1)[:, None], np.arange(j0, j1)[None, :]
            if mistake == "local_mask":
                rows, cols = rows - i0, cols - j0
            hidden = cols >= rows if mistake == "diagonal_masked" else cols > rows
            if causal and mistake != "mask_after_max":
                S = np.where(hidden, np.float32(-np.inf), S)
            m_block = S.max(axis=1)
            if causal and mistake == "mask_after_max":
                S = np.where(hidden, np.float32(-np.inf), S)
            m_new = m_block if mistake == "max_of_block_only" else np.maximum(m, m_block)
            corr = np.exp(m_new - m) if mistake == "correction_inverted" else np.exp(m - m_new)
            P = np.exp(S - (m if mistake == "p_with_old_max" else m_new)[:, None])
            l = (l if mistake == "l_not_rescaled" else l * corr) + P.sum(axis=1)
            acc = (acc if mistake == "acc_not_rescaled" else acc * corr[:, None]) + P @ V[j0:j1]
            if mistake in ("divide_inside", "divide_inside_and_after"):
                acc = acc / l[:, None]
            if mistake != "m_not_updated":
                m = m_new
        O[i0:i1] = acc if mistake == "divide_inside" else acc / l[:, None]
    return O


#: mistake -> description (Russian), in the order they are tried.
_SIMULATED = {
    "divide_inside": "деление на l внутри цикла: acc нормируется на каждом шаге, а пересчёт "
                     "exp(m_old − m_new) считает его ненормированным",
    "divide_inside_and_after": "деление на l внутри цикла (и ещё раз после него)",
    "l_not_rescaled": "l не домножается на exp(m_old − m_new) при росте максимума",
    "acc_not_rescaled": "acc не домножается на exp(m_old − m_new) при росте максимума",
    "correction_inverted": "коэффициент пересчёта перевёрнут: exp(m_new − m_old) вместо exp(m_old − m_new)",
    "p_with_old_max": "P = exp(S − m) считается со старым максимумом, до обновления m",
    "max_of_block_only": "m_new = max по блоку, без max(m_old, ·): старый максимум забыт",
    "m_not_updated": "m не обновляется (забыто m = m_new): acc и l каждый раз обнуляются множителем 0",
    "no_scale": "нет масштаба 1/√d: S = Q Kᵀ",
    "scale_1_over_d": "масштаб 1/d вместо 1/√d",
    "k_tail_dropped": "хвост K/V не обработан: последние n mod Bc ключей пропущены",
    "q_tail_dropped": "хвост Q не обработан: последние n mod Br строк не посчитаны",
    "diagonal_masked": "замаскирована и диагональ (j ≥ i вместо j > i): строка 0 не видит ни одного ключа",
    "local_mask": "causal-маска строится по локальным индексам блока, а не по глобальным i и j",
    "skip_diagonal_block": "пропущен и диагональный блок (условие пропуска j0 ≥ i0 — ошибка на единицу)",
    "skip_by_first_row": "блок пропускается по первой строке блока Q (j0 > i0), а нужна последняя: "
                         "j0 > i0 + Br − 1",
    "skip_by_block_index": "блоки пропускаются по номерам (j > i): верно только при Br = Bc",
    "mask_after_max": "маска накладывается после max: m учитывает скрытые (будущие) скоры",
    "m_starts_at_zero": "m стартует с 0, а не с −inf: при логитах ≪ 0 все exp обнуляются, 0/0 = NaN",
}

MISTAKES = {description: (lambda Q, K, V, Br, Bc, causal, _m=name: simulate(Q, K, V, Br, Bc, causal, _m))
            for name, description in _SIMULATED.items()}

#: The same mistakes in FA-1's words, where they differ: FA-1 keeps O normalised in «HBM» and divides by l on
#: every step by design, so what goes wrong there is the rescaling of the stored O, not «acc».
_SIMULATED_FA1 = {
    **_SIMULATED,
    "divide_inside": "O хранится уже поделённым на l, а при пересчёте умножается только на exp(m_old − m_new): "
                     "нужно O_new = (l_old · exp(m_old − m_new) · O_old + P V) / l_new",
    "divide_inside_and_after": "O хранится уже поделённым на l на каждом шаге, и после цикла делится на l ещё раз",
}
MISTAKES_FA1 = {description: (lambda Q, K, V, Br, Bc, causal, _m=name: simulate(Q, K, V, Br, Bc, causal, _m))
                for name, description in _SIMULATED_FA1.items()}
#: The known mistakes of each function.
MISTAKES_OF = {"flash_attention": MISTAKES_FA1, "flash_attention_v2": MISTAKES}


# --- running the student's function ---------------------------------------------------------

def _call(fn, name: str, Q, K, V, Br: int, Bc: int, causal: bool, case: str):
    return call_student(fn, Q.copy(), K.copy(), V.copy(), Br=Br, Bc=Bc, causal=causal,
                        case=case, what=name)


def _values(got, n: int, d: int, case: str, name: str) -> np.ndarray:
    """The output as float32 for value checks (its dtype is the contract check's business)."""
    if isinstance(got, np.ndarray) and type(got) is not np.ndarray:
        got = got.view(np.ndarray)
    if isinstance(got, np.ndarray) and got.dtype == np.float64:
        got = got.astype(np.float32)
    return require_array(got, shape=(n, d), dtype="float32", case=case, name=f"результат {name}")


#: Said when the output has NaN/inf: no variant can be named from a value without numbers, and in
#: this lesson both ways of getting one start in the first block, where m_old = −inf.
NAN_HINT = ("NaN/inf возникают, когда exp получает +inf: в первом блоке m_old = −inf, поэтому множитель "
            "пересчёта — exp(m_old − m_new) (он равен 0), а P = exp(S − m_new) считается уже с новым "
            "максимумом; проверьте оба.")


def _compare_named(got, Q, K, V, c: dict, causal: bool, case: str, *, atol=None, hint: str = "",
                   name: str = "flash_attention_v2"):
    """Compare with the float64 oracle; on a mismatch name the known mistake the output matches."""
    with np.errstate(all="ignore"):
        if not hint and not np.isfinite(got).all():
            hint = NAN_HINT
    return compare_or_name(got, reference.attention(Q, K, V, causal=causal), inputs=(Q, K, V, c["Br"], c["Bc"], causal),
                           variants=MISTAKES_OF[name], case=case, atol=atol, hint=hint)


# --- the checks, shared by both functions ---------------------------------------------------

EQUIVALENCE_CASES = [
    {"n": 256, "d": 64, "Br": 32, "Bc": 32, "causal": False, "seed": 0},
    {"n": 256, "d": 64, "Br": 32, "Bc": 32, "causal": True, "seed": 3},
    {"n": 100, "d": 32, "Br": 7, "Bc": 13, "causal": False, "seed": 6},
    {"n": 100, "d": 32, "Br": 7, "Bc": 13, "causal": True, "seed": 9},
    {"n": 100, "d": 32, "Br": 13, "Bc": 7, "causal": True, "seed": 10},
]


def _equivalence(fn, name: str, cases) -> str:
    worst = 0.0
    for c in cases:
        Q, K, V = case_inputs(c["n"], c["d"], c["seed"])
        case = describe_case(**c)
        got = _values(_call(fn, name, Q, K, V, c["Br"], c["Bc"], c["causal"], case),
                      c["n"], c["d"], case, name)
        worst = max(worst, _compare_named(got, Q, K, V, c, c["causal"], case, name=name))
    return f"макс. ошибка {worst:.1e} (допуск 1e-5 + 1e-5·|x|) на {len(cases)} случаях"


MEMORY_CASES = [{"n": 1024, "d": 64, "Br": 32, "Bc": 32, "seed": 12}]


def _memory(fn, name: str, cases) -> str:
    def measure(c, case) -> Bound:
        n, d = c["n"], c["d"]
        Q, K, V = case_inputs(n, d, c["seed"])
        naive = measure_peak(naive_attention, Q, K, V, case=case, what="наивная версия")
        allowed = naive.bytes // 10
        peak = measure_peak(fn, Q.copy(), K.copy(), V.copy(), Br=c["Br"], Bc=c["Bc"], causal=False,
                            case=case, what=name)
        got = _values(peak.result, n, d, case, name)
        if not np.any(got):
            raise CheckFailed(f"{name} вернула одни нули ({case}): память функции, которая не считает "
                              "attention, не измеряется.")

        def too_much(table: str) -> str:
            square = n * n * 4
            cause = (f"Пик не меньше одной матрицы (n, n) float32 ({square / MiB:.1f} МиБ): похоже, "
                     "S или P создаются целиком (например, Q @ K.T)." if peak.bytes >= square else
                     "Матрицы (n, n) нет, но лишнего много: не копируйте Q, K, V целиком "
                     "(например, Q.astype(np.float64) или Q * scale для всего Q) — "
                     "приводите и масштабируйте только блоки.")
            return (f"пик памяти {name}: {peak.mib:.2f} МиБ, допустимо {allowed / MiB:.2f} МиБ — в 10 раз "
                    f"меньше пика наивной версии ({naive.mib:.1f} МиБ; {case}).\n{cause}\n" + table)

        return Bound(peak, allowed, [("наивная (S и P целиком)", naive.bytes, naive.bytes), (name, peak.bytes, allowed)],
                     too_much)

    return peaks_within(cases, measure)


WORK_CASES = [{"n": 256, "d": 64, "Br": 32, "Bc": 32, "seed": 15}]

LOST_TRACE = ("Проверка вызывает функцию с Q и K особого типа (подкласс numpy.ndarray), который "
              "запоминает, из каких строк Q и K получен каждый блок, и отмечает каждое произведение "
              "блока Q на блок K. {what} Скорее всего, Q или K превращены в обычный массив: "
              "np.asarray(Q), np.array(Q), копирование в заранее созданный буфер. Режьте Q, K, V "
              "напрямую (Q[i0:i0 + Br], K[j0:j0 + Bc]) и не преобразуйте их целиком.")


def text_grid(tiles: np.ndarray) -> str:
    """The tile grid as text: ■ computed, · skipped; rows are Q-blocks, columns K-blocks."""
    return "\n".join("  " + " ".join("■" if t else "·" for t in row) for row in tiles)


def _observe(fn, name: str, Q, K, V, Br: int, Bc: int, causal: bool, case: str):
    """The tiles ``fn`` computes, observed where the student's code runs (the traced Q and K live there)."""
    return in_student(_observe_here, fn, name, Q, K, V, Br, Bc, causal, case)


def _observe_here(fn, name: str, Q, K, V, Br: int, Bc: int, causal: bool, case: str):
    def call(function, *args, **kwargs):
        try:
            return call_student(function, *args, case=case, what=name, **kwargs)
        except CheckFailed as failure:
            raise CheckFailed(f"{failure}\n(В этой проверке Q и K — подкласс numpy.ndarray, "
                              "отслеживающий блоки; обычные операции NumPy с ним работают.)") from None

    return observe_tiles(fn, Q.copy(), K.copy(), V.copy(), Br=Br, Bc=Bc, causal=causal, call=call)


def _work_problem(observation, expected: np.ndarray, causal: bool) -> str | None:
    """What is wrong with the computed tiles, in words; None when they are exactly right."""
    tiles = observation.tiles
    Tr, Tc = tiles.shape
    if observation.count == 0:
        return LOST_TRACE.format(what="Она не увидела ни одного произведения блока Q на блок K.")
    spanning = [(q, k) for q, k in observation.products
                if np.unique(k // observation.Bc).size > 1 or np.unique(q // observation.Br).size > 1]
    extra, missing = tiles & ~expected, expected & ~tiles
    if causal and extra.any():
        if spanning:
            q_rows, k_rows = spanning[0]
            return (f"замечено произведение строк Q {q_rows.min()}..{q_rows.max()} на строки K "
                    f"{k_rows.min()}..{k_rows.max()} — больше одного блока Br × Bc сразу "
                    "(например, Q[i0:i0 + Br] @ K.T): так блоки над диагональю не пропустить.")
        if tiles.all():
            return (f"при causal=True посчитаны все блоки ({Tr * Tc} из {Tr * Tc}): блоки целиком над диагональю тоже "
                    "умножаются, а потом маскируются. Пропускайте их: блок K, начинающийся со столбца j0, "
                    "не нужен строкам i0..i0 + Br − 1, если j0 > i0 + Br − 1.")
        diagonal_next = np.zeros_like(tiles)
        for i in range(Tr):
            nxt = np.flatnonzero(expected[i] == 0)
            if nxt.size:
                diagonal_next[i, nxt[0]] = True
        if not (extra & ~diagonal_next).any():
            return ("на строках блоков посчитан лишний блок сразу за диагональю: ошибка на единицу "
                    "в условии пропуска (нужно пропускать блок, когда j0 > i0 + Br − 1, то есть "
                    "j0 ≥ i0 + Br).")
        cells = ", ".join(map(str, [tuple(map(int, x)) for x in np.argwhere(extra)][:8]))
        return (f"посчитаны лишние блоки над диагональю (номер блока Q, номер блока K): {cells}. "
                "Пропускайте блок, если его первый столбец j0 больше последней строки блока Q.")
    if missing.any():
        cells = ", ".join(map(str, [tuple(map(int, x)) for x in np.argwhere(missing)][:8]))
        rows, cols = np.nonzero(missing)
        if observation.n_q % observation.Br and (rows == Tr - 1).all():
            return (f"не посчитан последний, неполный блок Q (строки {(Tr - 1) * observation.Br}.."
                    f"{observation.n_q - 1}): хвост Q не обработан. Цикл range(0, n, Br) доходит до "
                    "хвоста сам, а срез Q[i0:i0 + Br] обрезается по краю.")
        if observation.n_k % observation.Bc and (cols == Tc - 1).all():
            return (f"не посчитан последний, неполный блок K/V (строки K {(Tc - 1) * observation.Bc}.."
                    f"{observation.n_k - 1}): хвост K/V не обработан.")
        if causal and not (missing & ~np.eye(Tr, Tc, dtype=bool)).any() and Tr == Tc:
            return (f"не посчитаны диагональные блоки {cells}: условие пропуска срабатывает на единицу "
                    "раньше, и строки теряют ключи j ≤ i.")
        return (f"не посчитаны нужные блоки (номер блока Q, номер блока K): {cells}.\n"
                + LOST_TRACE.format(what="Если в вашем коде эти блоки считаются, значит, проверка "
                                         "не увидела их произведения."))
    return None


def _causal_work(fn, name: str, cases) -> str:
    lines = []
    for c in cases:
        n, d, Br, Bc = c["n"], c["d"], c["Br"], c["Bc"]
        Q, K, V = case_inputs(n, d, c["seed"])
        counts = {}
        for causal in (False, True):
            case = describe_case(**c, causal=causal)
            observation = _observe(fn, name, Q, K, V, Br, Bc, causal, case)
            expected = expected_tiles(n, n, Br, Bc, causal)
            problem = _work_problem(observation, expected, causal)
            if problem:
                raise CheckFailed(
                    f"{name}, {case}: посчитано блоков Q·Kᵀ {observation.count} из {expected.size}, "
                    f"нужно {int(expected.sum())}.\n{problem}"
                    + (f"\nПосчитанные блоки (■; строки — блоки Q, столбцы — блоки K):\n"
                       f"{text_grid(observation.tiles)}" if observation.count else ""))
            counts[causal] = (observation.count, expected.size, observation.tiles)
        full, total, _ = counts[False]
        causal_count, _, tiles = counts[True]
        lines.append(f"n={n}, Br={Br}, Bc={Bc}: без маски {full} из {total} блоков, causal {causal_count} "
                     f"из {total} ({causal_count / total:.3f} = (N+1)/2N при N={tiles.shape[0]}, "
                     "а не половина)" if Br == Bc and n % Br == 0 else
                     f"n={n}, Br={Br}, Bc={Bc}: без маски {full} из {total} блоков, causal {causal_count} "
                     f"из {total}")
    return "\n".join(lines) + "\n" + text_grid(tiles)


STABILITY_CASES = [
    {"n": 128, "d": 64, "Br": 32, "Bc": 32, "causal": False, "seed": 18, "inputs": "Q*100"},
    {"n": 128, "d": 64, "Br": 32, "Bc": 32, "causal": True, "seed": 21, "inputs": "Q*100"},
    {"n": 128, "d": 64, "Br": 32, "Bc": 32, "causal": True, "seed": 24, "inputs": "K=-100Q"},
]


def stability_tolerance(Q, K, V) -> float:
    """atol for large logits: float32 rounding of a logit L is about eps·L, and it moves the output
    by about that much times |V|.  Measured errors of correct float32 code stay below 0.25 of this."""
    logits = np.abs(Q.astype(np.float64) @ K.T.astype(np.float64)).max() / np.sqrt(Q.shape[1])
    return 1e-5 + EPS32 * float(logits) * float(np.abs(V).max())


def _stability(fn, name: str, cases) -> str:
    lines = []
    for c in cases:
        Q, K, V = case_inputs(c["n"], c["d"], c["seed"], c["inputs"])
        case = describe_case(**c)
        atol = stability_tolerance(Q, K, V)
        got = _values(_call(fn, name, Q, K, V, c["Br"], c["Bc"], c["causal"], case),
                      c["n"], c["d"], case, name)
        hint = ("все экспоненты должны считаться от текущего максимума: exp(S − m_new) ≤ 1, "
                "m стартует с −inf, маска — до max")
        error = _compare_named(got, Q, K, V, c, c["causal"], case, atol=atol, hint=hint, name=name)
        lines.append(f"{c['inputs']}, causal={c['causal']}: ошибка {error:.1e}, допуск {atol:.1e}")
    return "\n".join(lines)


CONTRACT_CASES = [{"n": 96, "d": 16, "Br": 32, "Bc": 16, "seed": 27}]


def _contract(fn, name: str, cases) -> str:
    for c in cases:
        n, d = c["n"], c["d"]
        Q, K, V = case_inputs(n, d, c["seed"])
        for causal in (False, True):
            case = describe_case(**c, causal=causal)
            inputs = (Q.copy(), K.copy(), V.copy())
            got = call_student(fn, *inputs, Br=c["Br"], Bc=c["Bc"], causal=causal, case=case, what=name)
            require_unchanged(dict(zip("QKV", zip((Q, K, V), inputs))), case=case, what=name,
                              hint=lambda label: f"Срез {label}[i0:i0 + B] — это view: {label}i *= scale или "
                                                 f"np.multiply(..., out={label}i) пишут прямо в {label}. "
                                                 f"Масштабируйте копию: {label}i = {label}[i0:i0 + B] * scale.")
            require_array(got, shape=(n, d), dtype="float32", case=case, name=f"результат {name}")
            if not np.any(got):
                raise CheckFailed(f"{name} вернула одни нули ({case}).")
    return "входы не изменены, выход (n, d) float32"


# --- lesson05 registrations -----------------------------------------------------------------

#: The checks both functions get, each as (id after ``fa1_``/``fa2_``, points, title after the function's
#: name, the check's body, its cases).
SHARED_CHECKS = [
    ("equivalence", 3, "совпадает с эталоном float64", _equivalence, EQUIVALENCE_CASES),
    ("memory", 2, "пик памяти в 10 раз ниже наивного", _memory, MEMORY_CASES),
    ("causal_work", 2, "causal пропускает блоки над диагональю", _causal_work, WORK_CASES),
    ("stability", 2, "большие логиты (Q·100, K = −100·Q)", _stability, STABILITY_CASES),
    ("contract", 1, "входы не меняются, выход float32", _contract, CONTRACT_CASES),
]


def _shared_check(prefix: str, name: str, suffix: str, body, default_cases):
    """``lesson05.{prefix}_{suffix}``: ``body`` run on the student's ``name``."""
    def run(function, cases=default_cases):
        return body(function, name, cases)

    run.__name__ = run.__qualname__ = f"{prefix}_{suffix}"
    return run


for _prefix, _name in (("fa1", "flash_attention"), ("fa2", "flash_attention_v2")):
    for _suffix, _points, _title, _body, _cases in SHARED_CHECKS:
        check(f"lesson05.{_prefix}_{_suffix}", points=_points, title=f"{_name}: {_title}")(
            _shared_check(_prefix, _name, _suffix, _body, _cases))


ORDER_CASES = [{"n": 128, "d": 32, "Br": 32, "Bc": 32, "seed": 30}]


@check("lesson05.fa2_loop_order", points=1, title="flash_attention_v2: внешний цикл по блокам Q (FA-2)")
def fa2_loop_order(flash_attention_v2, cases=ORDER_CASES):
    name = "flash_attention_v2"
    for c in cases:
        Q, K, V = case_inputs(c["n"], c["d"], c["seed"])
        case = describe_case(**c, causal=False)
        observation = _observe(flash_attention_v2, name, Q, K, V, c["Br"], c["Bc"], False, case)
        order = observation.q_block_order()
        if not order:
            raise CheckFailed(f"{name}, {case}: " + LOST_TRACE.format(
                what="Она не увидела ни одного произведения блока Q на блок K."))
        if -1 in order:
            raise CheckFailed(f"{name}, {case}: одно произведение захватывает несколько блоков Q сразу; "
                              "в FA-2 каждое произведение — блок Q (Br строк) на блок K (Bc строк).")
        runs = [order[0]] + [b for a, b in zip(order, order[1:]) if b != a]
        if len(runs) != len(set(runs)):
            shown = " → ".join(map(str, runs[:12])) + (" → …" if len(runs) > 12 else "")
            raise CheckFailed(
                f"{name}, {case}: блоки Q обрабатываются вперемешку: {shown}.\n"
                "Это порядок FA-1 (внешний цикл по блокам K/V, внутренний — по блокам Q). В FA-2 внешний "
                "цикл идёт по блокам Q: блок Q берётся один раз, проходит все нужные блоки K/V, "
                "и его строки O записываются один раз, после одного деления на l.")
    return f"блоки Q идут по порядку: {' → '.join(map(str, runs))}"
