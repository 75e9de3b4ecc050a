"""Lesson 10 checks: the 2-stage softmax/GEMM overlap program: valid, its makespan, and the math it does not change."""
from __future__ import annotations

import numpy as np

from ...checks import reference
from ...checks.core import CheckFailed, call_student, check, describe_case
from ...checks.inputs import normal
from ...checks.mistakes import compare_or_name
from . import fa3sim
from .fa3sim import Params, ScheduleError
from .common import GEMMS, SOFTMAXES, _expand

# --- the 2-stage softmax/GEMM overlap inside one warpgroup ------------------------------------

def _tile_list(tiles) -> list[int]:
    return list(range(tiles)) if isinstance(tiles, int) else list(tiles)


def _pipelined_program(tiles, *, overlap: bool) -> list[tuple[str, int]]:
    """Tile 0's S = Q K_0^T and softmax, then per tile j: S_j and P_{j-1} V_{j-1}, then the last P V.
    ``overlap`` (FA3's intra-warpgroup pipelining): P_{j-1} V_{j-1} is issued together with S_j, so the
    softmax of tile j runs while the tensor cores compute it; else only after that softmax (a valid order)."""
    tiles = _tile_list(tiles)
    program = [("gemm_qk", tiles[0]), ("wait_qk", tiles[0]), ("softmax", tiles[0])]
    for previous, j in zip(tiles, tiles[1:]):
        pv, softmax = [("gemm_pv", previous)], [("wait_qk", j), ("softmax", j)]
        program += [("gemm_qk", j)] + (pv + softmax if overlap else softmax + pv) + [("wait_pv", previous)]
    return program + [("gemm_pv", tiles[-1]), ("wait_pv", tiles[-1])]


def _fa3_overlap_program(tiles) -> list[tuple[str, int]]:
    """FA3's intra-warpgroup pipelining: S_{j} = Q K_j^T and P_{j-1} V_{j-1} issued together,
    softmax of tile j runs while the tensor cores compute P_{j-1} V_{j-1}."""
    return _pipelined_program(tiles, overlap=True)


def _softmax_first_program(tiles) -> list[tuple[str, int]]:
    """A valid order where P_{j-1} V_{j-1} is issued only after the softmax of tile j."""
    return _pipelined_program(tiles, overlap=False)


def _student_program(overlap_program, n_tiles: int):
    case = f"n_tiles={n_tiles}"
    program = call_student(overlap_program, n_tiles, case=case, what="overlap_program")
    if not isinstance(program, (list, tuple)):
        raise CheckFailed(f"overlap_program({n_tiles}) должна вернуть список пар (операция, тайл), "
                          f"а вернула {type(program).__name__}.")
    try:
        fa3sim.validate_program(program, n_tiles)
        return [(str(op), int(j)) for op, j in program]
    except ScheduleError as error:
        raise CheckFailed(f"overlap_program({n_tiles}) — недопустимая программа: {error}.\n"
                          "Подсказка: результат асинхронного GEMM читают только после wait; в регистрах "
                          "помещаются S/P двух тайлов.") from None


@check("lesson10.overlap_program_valid", points=1, title="Программа с перекрытием допустима")
def overlap_program_valid(overlap_program, cases=({"n_tiles": 1}, {"n_tiles": 2}, {"n_tiles": 6})):
    for c in cases:
        program = _student_program(overlap_program, c["n_tiles"])
        params = Params(c["n_tiles"], 0.5, 1.0, 1.0, 3)
        try:
            fa3sim.simulate(program, params)
        except ScheduleError as error:
            raise CheckFailed(f"overlap_program({c['n_tiles']}) не исполняется симулятором: {error}.") from None
    return "все операции на месте, зависимостей не нарушено"


OVERLAP_CASES = ({"seed": 4, "count": 12},)


def _overlap_sets(cases) -> list[dict]:
    """Parameter sets for the intra-warpgroup overlap: short loads, a 3-stage ring."""
    def draw(rng, c):
        gemm = float(rng.choice(GEMMS))
        return {"n_tiles": int(rng.integers(2, 13)), "t_load": float(rng.choice((0.0, 0.25, 0.5))),
                "t_gemm": gemm, "t_softmax": float(rng.choice(SOFTMAXES)), "stages": 3}

    return _expand(cases, draw, 10)


@check("lesson10.overlap_program_makespan", points=2,
       title="Перекрытие softmax и GEMM внутри варп-группы сокращает makespan")
def overlap_program_makespan(overlap_program, cases=OVERLAP_CASES):
    sets = _overlap_sets(cases)
    gains = []
    for p in sets:
        program = _student_program(overlap_program, p["n_tiles"])
        params = Params(p["n_tiles"], p["t_load"], p["t_gemm"], p["t_softmax"], p["stages"])
        try:
            got = fa3sim.simulate(program, params).makespan
        except ScheduleError as error:
            raise CheckFailed(f"программа не исполняется симулятором ({describe_case(**p)}): {error}.") from None
        target = fa3sim.simulate(_fa3_overlap_program(p["n_tiles"]), params).makespan
        sequential = fa3sim.run_sequential(params).makespan
        if got > target + 1e-9:
            raise CheckFailed(
                f"makespan вашей программы {got:g}, а двухстадийный конвейер FA3 даёт {target:g} "
                f"(последовательная программа: {sequential:g}; {describe_case(**p)}).\n"
                "Подсказка: выпустите Q K_{j}^T и P_{j-1} V_{j-1} вместе, перед softmax тайла j: тогда "
                "softmax тайла j считается, пока тензорные ядра заняты P_{j-1} V_{j-1}. Сравните "
                "plot_gantt ваших событий с последовательной программой.")
        gains.append(sequential / got)
    return f"не хуже FA3 на {len(sets)} наборах; ускорение над последовательной программой до {max(gains):.2f}x"


# --- the math does not depend on the schedule -------------------------------------------------

def _run_program(Q, K, V, program, Bc, *, rescale_in_softmax=False, all_tiles=False, scale=True,
                 normalise=True):
    """Float64 interpreter of a program, with switches that reproduce known mistakes."""
    Q, K, V = (np.asarray(a, np.float64) for a in (Q, K, V))
    if all_tiles:
        program = fa3sim.sequential_program(-(-K.shape[0] // Bc))
    factor = 1 / np.sqrt(Q.shape[1]) if scale else 1.0
    m = np.full(Q.shape[0], -np.inf)
    l = np.zeros(Q.shape[0])
    O = np.zeros((Q.shape[0], V.shape[1]))
    m_O = np.full(Q.shape[0], -np.inf)
    S, P = {}, {}
    for op, j in program:
        rows = slice(j * Bc, (j + 1) * Bc)
        if op == "gemm_qk":
            S[j] = Q @ K[rows].T * factor
        elif op == "softmax":
            m_new = np.maximum(m, S[j].max(axis=1))
            alpha = np.exp(m - m_new)
            p = np.exp(S.pop(j) - m_new[:, None])
            l = l * alpha + p.sum(axis=1)
            if rescale_in_softmax:
                O *= alpha[:, None]
                m_O = m_new
            P[j] = (p, m_new)
            m = m_new
        elif op == "gemm_pv":
            p, m_p = P.pop(j)
            if not rescale_in_softmax:
                O *= np.exp(m_O - m_p)[:, None]
                m_O = m_p
            O += p @ V[rows]
    return O / l[:, None] if normalise else O


RUN_MISTAKES = {
    "O умножается на exp(m_old − m_new) в softmax, до того как к нему добавлен отложенный P V "
    "предыдущего тайла": lambda Q, K, V, prog, Bc: _run_program(Q, K, V, prog, Bc, rescale_in_softmax=True),
    "программа не исполняется: внимание посчитано по всем тайлам K, V":
        lambda Q, K, V, prog, Bc: _run_program(Q, K, V, prog, Bc, all_tiles=True),
    "нет множителя 1/sqrt(d)": lambda Q, K, V, prog, Bc: _run_program(Q, K, V, prog, Bc, scale=False),
    "нет деления на l в конце": lambda Q, K, V, prog, Bc: _run_program(Q, K, V, prog, Bc, normalise=False),
}

PROGRAMS = {
    "sequential": fa3sim.sequential_program,
    "overlap": _fa3_overlap_program,
    "softmax_first": _softmax_first_program,
    "pingpong": fa3sim.pingpong_program,
}


def _check_run(run_program, c: dict) -> float:
    n_q, n_k, d, Bc = c["n_q"], c["n_k"], c["d"], c["Bc"]
    n_tiles = -(-n_k // Bc)
    tiles = c.get("tiles", list(range(n_tiles)))
    program = PROGRAMS[c["program"]](tiles)
    Q = normal((n_q, d), c["seed"], c.get("scale", 1.0))
    K = normal((n_k, d), c["seed"] + 1)
    V = normal((n_k, d), c["seed"] + 2)
    rows = np.concatenate([np.arange(j * Bc, min((j + 1) * Bc, n_k)) for j in tiles])
    expected = reference.attention(Q, K[rows], V[rows])
    case = describe_case(**{k: v for k, v in c.items() if k != "tiles"},
                         **({"tiles": tiles} if "tiles" in c else {}))
    got = call_student(run_program, Q.copy(), K.copy(), V.copy(), list(program), Bc, case=case,
                       what="run_program")
    tol = 1e-4 if c.get("scale", 1.0) > 4 else 2e-5
    return compare_or_name(got, expected, inputs=(Q, K, V, program, Bc), variants=RUN_MISTAKES, case=case,
                           atol=tol, rtol=tol, name="O")


@check("lesson10.program_math", points=2, title="Конвейер не меняет математику: O совпадает с эталоном")
def program_math(run_program, cases=(
        {"program": "sequential", "n_q": 48, "n_k": 256, "d": 32, "Bc": 64, "seed": 0},
        {"program": "overlap", "n_q": 48, "n_k": 256, "d": 32, "Bc": 64, "seed": 1},
        {"program": "overlap", "n_q": 16, "n_k": 200, "d": 16, "Bc": 48, "seed": 2},
        {"program": "overlap", "n_q": 32, "n_k": 128, "d": 64, "Bc": 32, "seed": 3, "scale": 20.0})):
    errors = [_check_run(run_program, c) for c in cases]
    return f"макс. ошибка {max(errors):.1e}"


@check("lesson10.program_math_any_order", points=2,
       title="Любой допустимый порядок операций и любой набор тайлов дают тот же O")
def program_math_any_order(run_program, cases=(
        {"program": "softmax_first", "n_q": 40, "n_k": 320, "d": 32, "Bc": 64, "seed": 10},
        {"program": "overlap", "n_q": 24, "n_k": 256, "d": 32, "Bc": 32, "seed": 11, "tiles": [0, 2, 3, 6]},
        {"program": "pingpong", "n_q": 24, "n_k": 192, "d": 16, "Bc": 64, "seed": 12})):
    errors = [_check_run(run_program, c) for c in cases]
    return f"макс. ошибка {max(errors):.1e}"


