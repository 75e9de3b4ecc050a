"""Lesson 04: online softmax — checks of the (m, l, acc) state and its four functions.

Contract, for one query row with value vectors of length d:

* ``online_softmax_init(d) -> (m, l, acc)`` with ``m = -inf``, ``l = 0``, ``acc = zeros(d)``;
* ``online_softmax_update(state, s_block, v_block) -> state``: scores ``(B,)``, values ``(B, d)``;
* ``online_softmax_finalize(state) -> (d,)``: ``acc / l``;
* ``merge_states(a, b) -> state``: the state of both parts together.

The state is a tuple ``(m, l, acc)``: ``m`` and ``l`` numbers, ``acc`` an ndarray of shape (d,).
After any set of blocks it must hold the invariant ``m = max s``, ``l = Σ exp(s − m)``,
``acc = Σ exp(s − m) v`` over the scores seen so far (``-inf``, 0, 0 while none is finite).
The checks compare states with these definitions, computed directly in float64.
"""
from __future__ import annotations

import numpy as np
import numpy.random  # noqa: F401  loaded before student code runs: the guard refuses lazy imports after

from ...checks.core import CheckFailed, call_student, check, describe_case
from ...checks.mistakes import failure, first_match

RTOL, ATOL = 1e-7, 1e-9


# --- the state by definition ----------------------------------------------------------------

def expected_state(scores, values) -> tuple[float, float, np.ndarray]:
    """(m, l, acc) of the scores seen so far, straight from the invariant."""
    scores = np.asarray(scores, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    d = values.shape[1]
    if scores.size == 0 or not np.isfinite(scores).any():
        return -np.inf, 0.0, np.zeros(d)
    m = float(scores.max())
    weights = np.exp(scores - m)
    return m, float(weights.sum()), weights @ values


def softmax_average(scores, values) -> np.ndarray:
    """softmax(scores) @ values in float64 (the answer finalize must give)."""
    _, l, acc = expected_state(scores, values)
    return acc / l


def read_state(state, d: int, *, case: str, what: str) -> tuple[float, float, np.ndarray]:
    """The student's state as (m, l, acc) floats and a float64 (d,) array, or a clear failure."""
    if not isinstance(state, (tuple, list)) or len(state) != 3:
        raise CheckFailed(f"{what} должна вернуть состояние — кортеж (m, l, acc), а вернула "
                          f"{type(state).__name__} ({case}).")
    m, l, acc = state
    numbers = []
    for name, x in (("m", m), ("l", l)):
        try:
            array = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError):
            array = None
        if array is None or array.size != 1:
            raise CheckFailed(f"{what}: {name} в состоянии должно быть одним числом, а получено "
                              f"{type(x).__name__} {np.shape(x)} ({case}).")
        numbers.append(float(array.reshape(-1)[0]))
    if not isinstance(acc, np.ndarray) or acc.shape != (d,):
        raise CheckFailed(f"{what}: acc в состоянии должен быть numpy-массивом формы ({d},), а получено "
                          f"{type(acc).__name__} {np.shape(acc)} ({case}).")
    return numbers[0], numbers[1], acc.astype(np.float64)


def _close(got: float | np.ndarray, want: float | np.ndarray, *, nan_ok: bool = False) -> bool:
    """Equal within RTOL/ATOL, infinities exactly; NaN only where ``want`` has NaN and ``nan_ok``."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return False
    if nan_ok and np.array_equal(np.isnan(got), np.isnan(want)):
        got, want = np.nan_to_num(got, nan=0.0, posinf=np.inf, neginf=-np.inf), \
            np.nan_to_num(want, nan=0.0, posinf=np.inf, neginf=-np.inf)
    if np.isnan(got).any() or np.isnan(want).any():
        return False
    infinite = np.isinf(want) | np.isinf(got)
    if np.any(got[infinite] != want[infinite]):
        return False
    with np.errstate(all="ignore"):
        finite_ok = np.abs(got - want) <= ATOL + RTOL * np.abs(want)
    return bool(np.all(infinite | finite_ok))


def _fmt(state) -> str:
    m, l, acc = state
    shown = np.array2string(np.asarray(acc), precision=5, threshold=6, edgeitems=2)
    return f"m={m:.6g}, l={l:.6g}, acc={shown}"


NAN_STATE_HINT = ("В состоянии NaN: скорее всего, exp(−inf − (−inf)) = exp(nan) на полностью замаскированном "
                  "блоке — либо m ещё −inf (пока все увиденные скоры −inf, состояние должно оставаться "
                  "(−inf, 0, 0)), либо сумма блока считается от его собственного максимума m_blk = −inf. "
                  "Блок, в котором все скоры −inf, ничего не добавляет.")


def _check_state(got, want, *, case: str, step: str, mistake: str | None = None, hint: str = "") -> None:
    """Raise unless the student's state equals the invariant's state; name ``mistake`` or else give the hints."""
    bad = [name for name, g, w in zip(("m", "l", "acc"), got, want) if not _close(g, w)]
    if not bad:
        return
    nan = any(np.isnan(np.asarray(x, dtype=np.float64)).any() for x in got)
    hints = "\n".join(h for h in (NAN_STATE_HINT if nan else "", hint) if h)
    raise failure(f"состояние {step} неверно ({case}): не совпадает {', '.join(bad)}.\n"
                  f"ожидалось: {_fmt(want)}\nполучено:  {_fmt(got)}", mistake, otherwise=hints)


# --- known mistakes of one update step, predicted from the state before it ------------------

def update_mistakes(before, s, v) -> dict[str, tuple]:
    """Description -> the state a known-wrong update gives from the correct state ``before``."""
    m0, l0, acc0 = before
    with np.errstate(all="ignore"):
        m_blk = float(np.max(s))
        m_new = max(m0, m_blk)
        corr, inverted = np.exp(m0 - m_new), np.exp(m_new - m0)
        p, p_blk, p_old = np.exp(s - m_new), np.exp(s - m_blk), np.exp(s - m0)
        l_new, acc_new = l0 * corr + p.sum(), acc0 * corr + p @ v
        return {
            "l не домножается на exp(m_old − m_new)": (m_new, l0 + p.sum(), acc_new),
            "acc не домножается на exp(m_old − m_new)": (m_new, l_new, acc0 + p @ v),
            "коэффициент перевёрнут: exp(m_new − m_old) вместо exp(m_old − m_new)":
                (m_new, l0 * inverted + p.sum(), acc0 * inverted + p @ v),
            "m_new = max блока, без max(m_old, ·)":
                (m_blk, l0 * np.exp(m0 - m_blk) + p_blk.sum(), acc0 * np.exp(m0 - m_blk) + p_blk @ v),
            "сумма блока посчитана от m_blk, но не домножена на exp(m_blk − m_new)":
                (m_new, l0 * corr + p_blk.sum(), acc0 * corr + p_blk @ v),
            "P = exp(s − m) со старым максимумом, до обновления m":
                (m_new, l0 * corr + p_old.sum(), acc0 * corr + p_old @ v),
            "m не обновляется (осталось m_old)": (m0, l_new, acc_new),
            "acc делится на l внутри update (деление должно быть одно, в finalize)":
                (m_new, l_new, acc_new / l_new),
        }


def _same_state(state, reference) -> bool:
    """The state test of :func:`_check_state` as a matcher: m, l and acc all close (NaN matches NaN)."""
    return all(_close(x, w, nan_ok=True) for x, w in zip(state, reference))


def _update_mistake(got, want, before, s, v) -> str | None:
    """The known mistake of one update step from ``before`` that the student's state (m, l, acc) matches
    (``want``: the right state after it)."""
    if not np.isfinite(s).any():  # a fully masked block: every variant predicts NaN, none is named
        return None
    return first_match(got, want, update_mistakes(before, s, v), close=_same_state)


# --- running the student's functions --------------------------------------------------------

def _init(init, d: int, case: str):
    state = call_student(init, d, case=case, what="online_softmax_init")
    read_state(state, d, case=case, what="online_softmax_init")
    return state


def _update(update, state, s, v, case: str):
    return call_student(update, state, s.copy(), v.copy(), case=case, what="online_softmax_update")


def _finalize(finalize, state, d: int, case: str) -> np.ndarray:
    out = call_student(finalize, state, case=case, what="online_softmax_finalize")
    if not isinstance(out, np.ndarray) or out.shape != (d,):
        raise CheckFailed(f"online_softmax_finalize должна вернуть массив формы ({d},), а вернула "
                          f"{type(out).__name__} {np.shape(out)} ({case}).")
    return out.astype(np.float64)


def _check_result(got: np.ndarray, want: np.ndarray, *, case: str, hint: str = "") -> None:
    if not _close(got, want):
        raise CheckFailed(
            f"online_softmax_finalize: результат {np.array2string(got, precision=6, threshold=6)}, "
            f"ожидался softmax(s) @ v = {np.array2string(want, precision=6, threshold=6)} ({case})."
            + ("\nВ результате NaN: l = 0 — все exp обнулились (m должен быть максимумом увиденных скоров)."
               if np.isnan(got).any() else "") + (f"\n{hint}" if hint else ""))


def run_blocks(init, update, scores, values, bounds, *, case: str, check_each: bool = True):
    """Feed the blocks ``scores[a:b]`` in the given order, checking the invariant after each one."""
    d = values.shape[1]
    state = _init(init, d, case)
    seen = np.zeros(0, dtype=int)
    for number, (a, b) in enumerate(bounds, 1):
        want_before = expected_state(scores[seen], values[seen])
        before = read_state(state, d, case=case, what="online_softmax_update")
        state = _update(update, state, scores[a:b], values[a:b], case)
        seen = np.concatenate([seen, np.arange(a, b)])
        if check_each:
            got = read_state(state, d, case=case, what="online_softmax_update")
            want = expected_state(scores[seen], values[seen])
            mistake = None
            if all(_close(x, y) for x, y in zip(before, want_before)):
                mistake = _update_mistake(got, want, want_before, scores[a:b], values[a:b])
            _check_state(got, want, case=case, step=f"после блока {number} (элементы {a}..{b - 1})",
                         mistake=mistake)
    return state


def random_bounds(n: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    """A random split of range(n) into consecutive non-empty blocks of random sizes."""
    cuts = sorted(set(rng.integers(1, n, size=rng.integers(0, n)).tolist())) if n > 1 else []
    edges = [0, *cuts, n]
    return list(zip(edges[:-1], edges[1:]))


def random_row(rng: np.random.Generator, n: int, d: int, spread: float = 3.0):
    offset = rng.choice([-20.0, -5.0, 0.0, 5.0])  # some rows entirely negative: m must not stick at 0
    return offset + spread * rng.standard_normal(n), rng.standard_normal((n, d))


def blocks_match(functions, scores, values, bounds, *, case: str, hint: str = "") -> None:
    """``functions`` (init, update, finalize) fed the blocks in order (the invariant after each, run_blocks)
    end with softmax(scores) @ values."""
    init, update, finalize = functions
    state = run_blocks(init, update, scores, values, bounds, case=case)
    _check_result(_finalize(finalize, state, values.shape[1], case), softmax_average(scores, values),
                  case=case, hint=hint)


def random_blocks(functions, cases, *, shuffled: bool) -> str:
    """Random rows split into random blocks (:func:`blocks_match` on each), fed in order or ``shuffled``:
    per case its seed and number of trials; n in [1, 40) (in [2, 40) when shuffled), d in [1, 6)."""
    for c in cases:
        rng = np.random.default_rng(c["seed"])
        for trial in range(c["trials"]):
            n, d = int(rng.integers(2 if shuffled else 1, 40)), int(rng.integers(1, 6))
            scores, values = random_row(rng, n, d)
            bounds = random_bounds(n, rng)
            if shuffled:
                bounds = [bounds[i] for i in rng.permutation(len(bounds))]
                shown = {"порядок_блоков": bounds}
            else:
                shown = {"блоки": [b - a for a, b in bounds]}
            blocks_match(functions, scores, values, bounds,
                         case=describe_case(seed=c["seed"], проба=trial, n=n, d=d, **shown),
                         hint="Блоки пришли не по порядку: результат от этого зависеть не должен." if shuffled else "")
    return f"{sum(c['trials'] for c in cases)} случайных {'порядков' if shuffled else 'разбиений'}"


# --- checks ---------------------------------------------------------------------------------

@check("lesson04.init", points=1, title="online_softmax_init: пустое состояние (−inf, 0, 0)")
def init(online_softmax_init, cases=({"d": 3},)):
    for c in cases:
        case = describe_case(**c)
        m, l, acc = read_state(call_student(online_softmax_init, c["d"], case=case, what="online_softmax_init"),
                               c["d"], case=case, what="online_softmax_init")
        if m != -np.inf:
            raise CheckFailed(f"начальное m = {m:g}, а должно быть −inf ({case}). С m = 0 строка, у которой "
                              "все скоры ≪ 0 (например −1e4), даст exp(s − 0) = 0 для всех s, l = 0 и 0/0 = NaN; "
                              "с −inf первый же блок задаёт настоящий максимум.")
        if l != 0 or np.any(acc != 0):
            raise CheckFailed(f"начальные l = {l:g}, acc = {acc} — должны быть 0 и нули ({case}): "
                              "пустая сумма.")
    return "m = −inf, l = 0, acc = 0"


WORKED_SCORES = {0: [2, 4, 1, 3, 0, 5, 2, 1], 1: [7, 1, 2, 0, 3, 2, 1, 0]}
WORKED_ANSWERS = {0: 4.805467, 1: 1.141442}


@check("lesson04.worked_example", points=2, title="Разобранный пример: 8 скоров, блоки по 4, ответ 4.8055")
def worked_example(online_softmax_init, online_softmax_update, online_softmax_finalize, cases=(0, 1)):
    values = np.arange(1.0, 9.0).reshape(8, 1)
    lines = []
    for row in cases:
        scores = np.asarray(WORKED_SCORES[row], dtype=np.float64)
        case = f"строка {row}: s = {WORKED_SCORES[row]}, v = 1..8, блоки [0:4] и [4:8]"
        state = run_blocks(online_softmax_init, online_softmax_update, scores, values, [(0, 4), (4, 8)],
                           case=case)
        got = _finalize(online_softmax_finalize, state, 1, case)
        want = softmax_average(scores, values)
        _check_result(got, want, case=case, hint="finalize возвращает acc / l: одно деление в самом конце.")
        m, l, acc = read_state(state, 1, case=case, what="online_softmax_update")
        lines.append(f"строка {row}: m = {m:g}, l = {l:.5f}, acc = {acc[0]:.5f}, O = {got[0]:.5f}")
    return "\n".join(lines)


@check("lesson04.update_step", points=2, title="online_softmax_update: один шаг из заданного состояния")
def update_step(online_softmax_update, cases=({"seed": 0, "d": 4},)):
    steps = 0
    for c in cases:
        rng = np.random.default_rng(c["seed"])
        d = c["d"]
        prefix, block = rng.normal(0, 2, 6), rng.normal(0, 2, 5)
        v_prefix, v_block = rng.standard_normal((6, d)), rng.standard_normal((5, d))
        situations = {
            "первый блок (состояние пустое)": (np.zeros(0), np.zeros((0, d)), block),
            "максимум растёт": (prefix, v_prefix, block + 4.0),
            "максимум не растёт": (prefix, v_prefix, block - 4.0),
            "часть скоров блока −inf (маска)": (prefix, v_prefix, np.where(np.arange(5) % 2 == 0, -np.inf, block + 3)),
            "блок из одного скора": (prefix, v_prefix, block[:1] + 6.0),
        }
        for label, (seen, v_seen, s) in situations.items():
            v = v_block[:s.size]
            case = describe_case(**c, шаг=label)
            before = expected_state(seen, v_seen)
            given = (before[0], before[1], before[2].copy())
            got = read_state(call_student(online_softmax_update, given, s.copy(), v.copy(), case=case,
                                          what="online_softmax_update"),
                             d, case=case, what="online_softmax_update")
            want = expected_state(np.concatenate([seen, s]), np.concatenate([v_seen, v]))
            _check_state(got, want, case=case, step="после шага", mistake=_update_mistake(got, want, before, s, v),
                         hint="Шаг: m_new = max(m, max(s)); c = exp(m − m_new); l = l·c + Σ exp(s − m_new); "
                              "acc = acc·c + exp(s − m_new) @ v.")
            steps += 1
    return f"{steps} шагов совпали с определением состояния"


@check("lesson04.block_sizes", points=1, title="Любые размеры блоков: инвариант после каждого блока")
def block_sizes(online_softmax_init, online_softmax_update, online_softmax_finalize,
                cases=({"seed": 1, "trials": 25},)):
    return random_blocks((online_softmax_init, online_softmax_update, online_softmax_finalize), cases,
                         shuffled=False)


@check("lesson04.block_order", points=1, title="Любой порядок блоков даёт тот же результат")
def block_order(online_softmax_init, online_softmax_update, online_softmax_finalize,
                cases=({"seed": 2, "trials": 20},)):
    return random_blocks((online_softmax_init, online_softmax_update, online_softmax_finalize), cases,
                         shuffled=True)


@check("lesson04.masked_blocks", points=1, title="Полностью замаскированные блоки (−inf) до и после настоящих")
def masked_blocks(online_softmax_init, online_softmax_update, online_softmax_finalize,
                  cases=({"seed": 3, "d": 3},)):
    for c in cases:
        rng = np.random.default_rng(c["seed"])
        d = c["d"]
        real = rng.normal(0, 2, 8)
        layouts = {
            "маска, данные, маска": [None, real[:4], None, real[4:], None],
            "две маски подряд в начале": [None, None, real],
            "маска в конце": [real, None],
        }
        for label, blocks in layouts.items():
            scores = np.concatenate([np.full(3, -np.inf) if b is None else b for b in blocks])
            values = rng.standard_normal((scores.size, d))
            edges = np.cumsum([0] + [3 if b is None else b.size for b in blocks])
            blocks_match((online_softmax_init, online_softmax_update, online_softmax_finalize), scores, values,
                         list(zip(edges[:-1], edges[1:])), case=describe_case(**c, блоки=label))
    return "замаскированные блоки не меняют состояние и не дают NaN"


@check("lesson04.huge_logits", points=1, title="Логиты порядка ±1e4: без переполнения и NaN")
def huge_logits(online_softmax_init, online_softmax_update, online_softmax_finalize,
                cases=({"seed": 4, "d": 3, "n": 12, "block": 4},)):
    for c in cases:
        rng = np.random.default_rng(c["seed"])
        n, d, size = c["n"], c["d"], c["block"]
        rows = {
            "s = 1e4·N(0, 1)": 1e4 * rng.standard_normal(n),
            "s = 1e4 + N(0, 1)": 1e4 + rng.standard_normal(n),
            "s = −1e4 + N(0, 1)": -1e4 + rng.standard_normal(n),
            "возрастающие: 0, 1e3, 2e3, …": 1e3 * np.arange(n, dtype=np.float64),
        }
        for label, scores in rows.items():
            values = rng.standard_normal((n, d))
            bounds = [(a, min(a + size, n)) for a in range(0, n, size)]
            blocks_match((online_softmax_init, online_softmax_update, online_softmax_finalize), scores, values,
                         bounds, case=describe_case(**c, скоры=label),
                         hint="Все экспоненты — от текущего максимума: exp(s − m) ≤ 1 и "
                              "exp(m_old − m_new) ≤ 1, поэтому переполнения нет при любых логитах.")
    return "±1e4 без inf и NaN"


@check("lesson04.merge", points=2, title="merge_states: два частичных состояния = одно общее")
def merge(online_softmax_init, online_softmax_update, merge_states, cases=({"seed": 5, "trials": 15},)):
    def state_of(scores, values, case):
        bounds = random_bounds(scores.size, rng) if scores.size else []
        return run_blocks(online_softmax_init, online_softmax_update, scores, values, bounds, case=case,
                          check_each=False)

    def merged(a, b, d, case):
        return read_state(call_student(merge_states, a, b, case=case, what="merge_states"), d, case=case,
                          what="merge_states")

    for c in cases:
        rng = np.random.default_rng(c["seed"])
        for trial in range(c["trials"]):
            n, d = int(rng.integers(2, 30)), int(rng.integers(1, 5))
            scores, values = random_row(rng, n, d)
            cut = int(rng.integers(0, n + 1))  # 0 and n: one part is empty
            case = describe_case(seed=c["seed"], проба=trial, n=n, d=d, разрез=cut)
            a = state_of(scores[:cut], values[:cut], case)
            b = state_of(scores[cut:], values[cut:], case)
            want = expected_state(scores, values)
            hint = ("Приведите обе части к общему максимуму m = max(m_a, m_b): l = l_a·exp(m_a − m) + "
                    "l_b·exp(m_b − m), так же acc.")
            _check_state(merged(a, b, d, case), want, case=case, step="merge_states(a, b)", hint=hint)
            _check_state(merged(b, a, d, case), want, case=case, step="merge_states(b, a)", hint=hint)
        d = 3
        empty = call_student(online_softmax_init, d, case="пустые состояния", what="online_softmax_init")
        empty2 = call_student(online_softmax_init, d, case="пустые состояния", what="online_softmax_init")
        _check_state(merged(empty, empty2, d, "две пустые части"), (-np.inf, 0.0, np.zeros(d)),
                     case="обе части полностью замаскированы", step="merge_states(пусто, пусто)",
                     hint="exp(m_a − m) при m_a = m = −inf — это exp(nan): пока m = −inf, складывать нечего.")
        scores, values = random_row(rng, 12, d)
        parts = [(0, 5), (5, 7), (7, 12)]
        states = [state_of(scores[a:b], values[a:b], "три части") for a, b in parts]
        three = read_state(call_student(merge_states, call_student(merge_states, states[0], states[1],
                                                                   case="три части", what="merge_states"),
                                        states[2], case="три части", what="merge_states"),
                           d, case="три части", what="merge_states")
        _check_state(three, expected_state(scores, values), case="три части 0..4, 5..6, 7..11",
                     step="merge(merge(a, b), c)")
    return "части любой длины, в любом порядке, пустые и три подряд"
