"""Lesson 10: FlashAttention-3 copy/compute overlap on a virtual clock, and FP8 with incoherent processing.

Contracts (the notebook, the bank and instructors rely on them):

* ``makespan_sequential(n_tiles, t_load, t_gemm, t_softmax) -> float``
* ``makespan_pipelined(n_tiles, t_load, t_gemm, t_softmax, stages) -> float``
* ``is_copy_bound(t_load, t_gemm, t_softmax) -> bool``
* ``tensor_utilisation(events) -> float``
* ``pingpong_utilisation(t_gemm, t_softmax, warpgroups) -> float`` (steady state)
* ``overlap_program(n_tiles) -> [(op, tile), ...]`` (the 2-stage softmax/GEMM overlap)
* ``run_program(Q, K, V, program, Bc=64) -> (n_q, d) float32``
* ``quantize_per_block(x, block) -> (float8_e4m3fn (n, d), scales (ceil(n / block),))``
* ``random_hadamard(d, seed) -> (d, d)`` orthogonal, ``incoherent_qk(Q, K, seed) -> (Q H, K H)``

Every expected time comes from :mod:`autograder.fa3sim` on its virtual clock: nothing graded
depends on wall time.
"""
from __future__ import annotations

import dataclasses
import numbers

import ml_dtypes
import numpy as np

from . import fa3sim, reference
from .core import CheckFailed, call_student, check, describe_case
from .fa3sim import Params, ScheduleError
from .inputs import normal
from .mistakes import compare_or_name, failure, identify

E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
E4M3_MAX = 448.0

LOADS = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0)
GEMMS = (0.5, 1.0, 1.5, 2.0)
SOFTMAXES = (0.25, 0.5, 1.0, 2.0, 3.0)


# --- parameter sets ---------------------------------------------------------------------------

def _expand(cases, draw, count: int) -> list[dict]:
    """Explicit cases as they are; ``{"seed": s, "count": c}`` becomes c sets ``draw(rng, case)``."""
    sets = []
    for c in cases:
        if "seed" not in c:
            sets.append(dict(c))
            continue
        rng = np.random.default_rng(c["seed"])
        sets.extend(draw(rng, c) for _ in range(c.get("count", count)))
    return sets


def _param_sets(cases, stages=(2, 3, 4)) -> list[dict]:
    """Pipeline parameter sets: tiles, load/GEMM/softmax times and ring depth."""
    def draw(rng, c):
        p = {"n_tiles": int(rng.integers(1, c.get("n_max", 16) + 1)),
             "t_load": float(rng.choice(LOADS)), "t_gemm": float(rng.choice(GEMMS)),
             "t_softmax": float(rng.choice(SOFTMAXES)), "stages": int(rng.choice(stages))}
        if c.get("strict"):  # copy-bound or compute-bound, never the tie
            if p["t_load"] == 2 * p["t_gemm"] + p["t_softmax"]:
                p["t_load"] += 0.25
        return p

    return _expand(cases, draw, 20)


def _number(got, *, what: str, case: str) -> float:
    if isinstance(got, bool) or not isinstance(got, numbers.Real):
        raise CheckFailed(f"{what} должна вернуть число, а вернула {type(got).__name__} ({case}).")
    value = float(got)
    if not np.isfinite(value):
        raise CheckFailed(f"{what} вернула {value} ({case}).")
    return value


def _call_text(name: str, **params) -> str:
    return f"{name}({describe_case(**params)})"


def _same_value(got: float, wrong) -> bool:
    return abs(got - float(wrong)) <= 1e-9 * max(1.0, abs(float(wrong)))


def _expect_value(got, expected: float, *, call: str, variants: dict, args: tuple, hint: str,
                  source: str = "симулятор") -> None:
    value = _number(got, what=call.split("(")[0], case=call)
    if abs(value - expected) <= 1e-9 * max(1.0, abs(expected)):
        return
    mistake = identify(value, variants, args, match=_same_value)
    raise failure(f"{call} = {value:g}, а {source} даёт {expected:g}.", mistake, then=f"Подсказка: {hint}")


def _simulated(p: dict) -> fa3sim.Trace:
    return fa3sim.run_sequential(Params(p["n_tiles"], p["t_load"], p["t_gemm"], p["t_softmax"], p["stages"]))


# --- makespans --------------------------------------------------------------------------------

def _summed(n, load, gemm, softmax, stages=2):
    return n * (load + 2 * gemm + softmax)


def _overlapped(n, load, gemm, softmax, stages=2):
    c = 2 * gemm + softmax
    return load + c + (n - 1) * max(load, c)


PIPELINE_MISTAKES = {
    "время сложено, а не перекрыто: n·(t_load + 2·t_gemm + t_softmax)": _summed,
    "нет пролога и эпилога: n·max(t_load, c)":
        lambda n, l, g, s, st=2: n * max(l, 2 * g + s),
    "только формула compute-bound случая: t_load + n·c": lambda n, l, g, s, st=2: l + n * (2 * g + s),
    "только формула copy-bound случая: n·t_load + c": lambda n, l, g, s, st=2: n * l + 2 * g + s,
    "на тайл посчитан один GEMM, а их два (Q K^T и P V)":
        lambda n, l, g, s, st=2: l + g + s + (n - 1) * max(l, g + s),
    "softmax считается скрытым под GEMM, но в этом расписании он последователен":
        lambda n, l, g, s, st=2: l + 2 * g + (n - 1) * max(l, 2 * g),
}

SEQUENTIAL_MISTAKES = {
    "забыто время загрузки": lambda n, l, g, s: n * (2 * g + s),
    "на тайл посчитан один GEMM, а их два (Q K^T и P V)": lambda n, l, g, s: n * (l + g + s),
    "загрузка перекрыта с вычислением, а в последовательном цикле её ждут":
        lambda n, l, g, s: _overlapped(n, l, g, s),
    "softmax забыт": lambda n, l, g, s: n * (l + 2 * g),
}


@check("lesson10.makespan_sequential", points=1, title="Makespan последовательного цикла")
def makespan_sequential(makespan_sequential, cases=({"seed": 0, "count": 25},)):
    for p in _param_sets(cases, stages=(1,)):
        p["stages"] = 1
        args = (p["n_tiles"], p["t_load"], p["t_gemm"], p["t_softmax"])
        call = _call_text("makespan_sequential", n_tiles=args[0], t_load=args[1], t_gemm=args[2],
                          t_softmax=args[3])
        got = call_student(makespan_sequential, *args, case=call, what="makespan_sequential")
        _expect_value(got, _simulated(p).makespan, call=call, variants=SEQUENTIAL_MISTAKES, args=args,
                      source="симулятор (кольцо из 1 ячейки: загрузка, потом вычисление)",
                      hint="без перекрытия каждый тайл — загрузка, затем Q K^T, softmax и P V друг за другом.")
    return f"совпало с симулятором на {len(_param_sets(cases, stages=(1,)))} наборах параметров"


@check("lesson10.makespan_pipelined", points=2, title="Makespan конвейера с кольцом из S ≥ 2 ячеек")
def makespan_pipelined(makespan_pipelined, cases=({"seed": 1, "count": 40},)):
    sets = _param_sets(cases, stages=(2, 3, 4))
    for p in sets:
        if p["stages"] < 2:
            continue
        args = (p["n_tiles"], p["t_load"], p["t_gemm"], p["t_softmax"], p["stages"])
        call = _call_text("makespan_pipelined", **p)
        got = call_student(makespan_pipelined, *args, case=call, what="makespan_pipelined")
        _expect_value(got, _simulated(p).makespan, call=call, variants=PIPELINE_MISTAKES, args=args,
                      hint="пока считается тайл j, producer грузит j+1. Первая загрузка и последнее "
                           "вычисление не перекрыты ни с чем, а в середине каждый тайл стоит "
                           "max(t_load, c), c = 2·t_gemm + t_softmax. Нарисуйте plot_gantt для этого случая.")
    return f"совпало с симулятором на {len(sets)} наборах параметров"


@check("lesson10.single_stage", points=1, title="Кольцо из одной ячейки ничего не перекрывает")
def single_stage(makespan_pipelined, cases=({"seed": 2, "count": 12},)):
    sets = _param_sets(cases, stages=(1,))
    for p in sets:
        p["stages"] = 1
        args = (p["n_tiles"], p["t_load"], p["t_gemm"], p["t_softmax"], 1)
        call = _call_text("makespan_pipelined", **p)
        got = call_student(makespan_pipelined, *args, case=call, what="makespan_pipelined")
        _expect_value(got, _simulated(p).makespan, call=call,
                      variants={"кольцо из одной ячейки считается перекрывающим (формула для S ≥ 2)": _overlapped},
                      args=args,
                      hint="с одной ячейкой producer не может грузить тайл j+1, пока тайл j не досчитан "
                           "(ячейка занята до конца P V_j): это последовательный цикл.")
    return f"stages=1 совпало с последовательным циклом на {len(sets)} наборах"


@check("lesson10.copy_bound", points=1, title="Когда цикл упирается в копирование")
def copy_bound(is_copy_bound, cases=({"seed": 3, "count": 30, "strict": True},)):
    sets = _param_sets(cases)
    variants = {
        "сравнение с одним GEMM: t_load > t_gemm + t_softmax": lambda l, g, s: l > g + s,
        "softmax не учтён: t_load > 2·t_gemm": lambda l, g, s: l > 2 * g,
        "знак перепутан": lambda l, g, s: l < 2 * g + s,
    }
    for p in sets:
        args = (p["t_load"], p["t_gemm"], p["t_softmax"])
        call = _call_text("is_copy_bound", t_load=args[0], t_gemm=args[1], t_softmax=args[2])
        got = call_student(is_copy_bound, *args, case=call, what="is_copy_bound")
        if not isinstance(got, (bool, np.bool_)):
            raise CheckFailed(f"{call} должна вернуть True или False, а вернула {type(got).__name__}.")
        expected = args[0] > 2 * args[1] + args[2]
        if bool(got) != expected:
            longer = Params(11, args[0], args[1], args[2], 2)
            step = (fa3sim.run_sequential(longer).makespan
                    - fa3sim.run_sequential(dataclasses.replace(longer, n_tiles=10)).makespan)
            mistake = identify(bool(got), variants, args, match=lambda g, wrong: wrong == g)
            raise failure(
                f"{call} = {bool(got)}, ожидалось {expected}: в симуляторе каждый следующий тайл добавляет "
                f"{step:g} = max(t_load, c), c = 2·t_gemm + t_softmax = {2 * args[1] + args[2]:g}.", mistake,
                then="Подсказка: цикл упирается в копирование, когда загрузка тайла дольше всего, что "
                     "warpgroup делает с ним: t_load > 2·t_gemm + t_softmax.")
    return f"верно на {len(sets)} наборах"


# --- utilisation ------------------------------------------------------------------------------

def _trace_for(case: dict) -> fa3sim.Trace:
    p = Params(case["n_tiles"], case["t_load"], case["t_gemm"], case["t_softmax"], case.get("stages", 2))
    schedule = case.get("schedule", "sequential")
    if schedule == "sequential":
        trace = fa3sim.run_sequential(p)
    elif schedule == "pingpong":
        trace = fa3sim.run_pingpong(p, case.get("warpgroups", 2))
    elif schedule == "overlap":
        trace = fa3sim.simulate(_fa3_overlap_program(p.n_tiles), p)
    else:
        raise ValueError(schedule)
    shift = case.get("shift", 0.0)
    if shift:
        events = tuple(dataclasses.replace(e, start=e.start + shift, end=e.end + shift) for e in trace.events)
        trace = dataclasses.replace(trace, events=events)
    return trace


def _utilisation(events) -> float:
    span = max(e.end for e in events) - min(e.start for e in events)
    return sum(e.duration for e in events if e.unit == "tensor") / span


UTILISATION_MISTAKES = {
    "делите на промежуток от первого до последнего GEMM, а не на весь makespan":
        lambda ev: sum(e.duration for e in ev if e.unit == "tensor")
        / (max(e.end for e in ev if e.unit == "tensor") - min(e.start for e in ev if e.unit == "tensor")),
    "softmax посчитан как работа тензорных ядер":
        lambda ev: sum(e.duration for e in ev if e.unit in ("tensor", "softmax")) / _span(ev),
    "загрузки TMA посчитаны как работа тензорных ядер":
        lambda ev: sum(e.duration for e in ev if e.unit in ("tensor", "tma")) / _span(ev),
    "доля событий, а не доля времени":
        lambda ev: sum(1 for e in ev if e.unit == "tensor") / len(ev),
    "makespan взят как конец последнего события, без вычитания начала первого":
        lambda ev: sum(e.duration for e in ev if e.unit == "tensor") / max(e.end for e in ev),
}


def _span(events) -> float:
    return max(e.end for e in events) - min(e.start for e in events)


UTILISATION_CASES = (
    {"schedule": "sequential", "n_tiles": 6, "t_load": 2.0, "t_gemm": 1.0, "t_softmax": 1.0, "stages": 1},
    {"schedule": "sequential", "n_tiles": 8, "t_load": 5.0, "t_gemm": 1.0, "t_softmax": 0.5, "stages": 2},
    {"schedule": "pingpong", "n_tiles": 8, "t_load": 0.25, "t_gemm": 1.0, "t_softmax": 1.0, "stages": 6,
     "warpgroups": 2},
    {"schedule": "overlap", "n_tiles": 7, "t_load": 0.5, "t_gemm": 1.0, "t_softmax": 1.5, "stages": 3,
     "shift": 10.0},
)


@check("lesson10.tensor_utilisation", points=2, title="Загрузка тензорных ядер по записанным событиям")
def tensor_utilisation(tensor_utilisation, cases=UTILISATION_CASES):
    for c in cases:
        trace = _trace_for(c)
        events = list(trace.events)
        case = describe_case(**c)
        got = call_student(tensor_utilisation, list(events), case=case, what="tensor_utilisation")
        expected = _utilisation(events)
        _expect_value(got, expected, call=f"tensor_utilisation(события расписания {case})",
                      variants=UTILISATION_MISTAKES, args=(events,), source="по событиям симулятора",
                      hint="сумма длительностей событий с unit == 'tensor', делённая на makespan = "
                           "(конец последнего события) − (начало первого события), по всем событиям.")
    return f"верно на {len(cases)} расписаниях"


def _steady_utilisation(t_gemm: float, t_softmax: float, warpgroups: int) -> float:
    """Tensor-core utilisation of ping-pong far from the start: busy time / time per extra tile."""
    def run(n):
        return fa3sim.run_pingpong(Params(n, 0.0, t_gemm, t_softmax, 2 * warpgroups + 2), warpgroups)

    short, long = run(12), run(24)
    return (long.busy("tensor") - short.busy("tensor")) / (long.makespan - short.makespan)


PINGPONG_MISTAKES = {
    "нет ограничения сверху: загрузка больше 100 %": lambda g, s, w: w * 2 * g / (2 * g + s),
    "число warpgroup не учтено": lambda g, s, w: 2 * g / (2 * g + s),
    "softmax считается всегда скрытым: всегда 100 %": lambda g, s, w: 1.0,
    "на итерацию посчитан один GEMM": lambda g, s, w: min(1.0, w * g / (g + s)),
}

PINGPONG_CASES = (
    {"t_gemm": 1.0, "t_softmax": 1.0, "warpgroups": 1},
    {"t_gemm": 1.0, "t_softmax": 1.0, "warpgroups": 2},
    {"t_gemm": 1.0, "t_softmax": 3.0, "warpgroups": 2},
    {"t_gemm": 2.0, "t_softmax": 0.5, "warpgroups": 1},
    {"t_gemm": 0.5, "t_softmax": 2.0, "warpgroups": 2},
)


@check("lesson10.pingpong_utilisation", points=2, title="Ping-pong: загрузка тензорных ядер до и после")
def pingpong_utilisation(pingpong_utilisation, cases=PINGPONG_CASES):
    for c in cases:
        args = (c["t_gemm"], c["t_softmax"], c["warpgroups"])
        call = _call_text("pingpong_utilisation", **c)
        got = call_student(pingpong_utilisation, *args, case=call, what="pingpong_utilisation")
        _expect_value(got, _steady_utilisation(*args), call=call, variants=PINGPONG_MISTAKES, args=args,
                      source="симулятор (установившийся режим, run_pingpong)",
                      hint="за итерацию warpgroup занимает тензорные ядра на 2·t_gemm и ещё t_softmax "
                           "считает softmax; w warpgroup по очереди дают w·2·t_gemm работы на период "
                           "max(2·t_gemm + t_softmax, w·2·t_gemm). Доля не может быть больше 1.")
    return f"совпало с симулятором на {len(cases)} наборах"


# --- the 2-stage softmax/GEMM overlap inside one warpgroup ------------------------------------

def _tile_list(tiles) -> list[int]:
    return list(range(tiles)) if isinstance(tiles, int) else list(tiles)


def _fa3_overlap_program(tiles) -> list[tuple[str, int]]:
    """FA3's intra-warpgroup pipelining: S_{j} = Q K_j^T and P_{j-1} V_{j-1} issued together,
    softmax of tile j runs while the tensor cores compute P_{j-1} V_{j-1}."""
    tiles = _tile_list(tiles)
    program = [("gemm_qk", tiles[0]), ("wait_qk", tiles[0]), ("softmax", tiles[0])]
    for previous, j in zip(tiles, tiles[1:]):
        program += [("gemm_qk", j), ("gemm_pv", previous), ("wait_qk", j), ("softmax", j),
                    ("wait_pv", previous)]
    return program + [("gemm_pv", tiles[-1]), ("wait_pv", tiles[-1])]


def _softmax_first_program(tiles) -> list[tuple[str, int]]:
    """A valid order where P_{j-1} V_{j-1} is issued only after the softmax of tile j."""
    tiles = _tile_list(tiles)
    program = [("gemm_qk", tiles[0]), ("wait_qk", tiles[0]), ("softmax", tiles[0])]
    for previous, j in zip(tiles, tiles[1:]):
        program += [("gemm_qk", j), ("wait_qk", j), ("softmax", j), ("gemm_pv", previous),
                    ("wait_pv", previous)]
    return program + [("gemm_pv", tiles[-1]), ("wait_pv", tiles[-1])]


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
       title="Перекрытие softmax и GEMM внутри warpgroup сокращает makespan")
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


@check("lesson10.quantize_per_block", points=2, title="FP8 e4m3: своя шкала для каждого блока строк")
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
            raise CheckFailed(f"у блока из одних нулей шкала {scales[zero][0]!r} ({case}): деление на неё даст "
                              "NaN. Для amax = 0 возьмите scale = 1.")
        bad = ~zero & ~np.isclose(scales, expected, rtol=1e-5, atol=0)
        if bad.any():
            b = int(np.argmax(bad))
            global_scale = np.abs(x).max() / E4M3_MAX
            if np.allclose(scales[~zero], global_scale, rtol=1e-5):
                why = "одна шкала на весь тензор (amax всего x / 448), а нужна своя для каждого блока"
            elif np.allclose(scales[~zero], E4M3_MAX / amax[~zero], rtol=1e-5):
                why = "шкала перевёрнута: 448 / amax вместо amax / 448"
            elif np.allclose(scales[~zero], amax[~zero] / 57344.0, rtol=1e-5):
                why = "взят максимум e5m2 (57344), а у e4m3fn максимум 448"
            elif np.allclose(scales[~zero], amax[~zero], rtol=1e-5):
                why = "шкала = amax: значения x / scale не используют диапазон e4m3 до 448"
            else:
                why = None
            raise failure(
                f"шкала блока {b} равна {scales[b]:.6g}, ожидалась amax / 448 = {expected[b]:.6g} ({case}).", why,
                otherwise="Подсказка: блок — это строки [b·block, (b+1)·block); amax — максимум |x| по блоку.")
        rows_scale = np.repeat(scales, c["block"])[:x.shape[0], None]
        with np.errstate(all="ignore"):
            scaled = x.astype(np.float64) / rows_scale
            got = xq.astype(np.float64)
        if not np.all(np.isfinite(got)):
            index = tuple(int(i) for i in np.argwhere(~np.isfinite(got))[0])
            raise CheckFailed(f"x_q содержит NaN в позиции {index} ({case}): у e4m3fn нет бесконечности, "
                              "всё больше ~464 превращается в NaN. Делите на шкалу блока, а не умножайте.")
        allowed = np.maximum(2.0 ** -3 * np.abs(scaled), 2.0 ** -9) + 1e-12
        wrong = np.abs(got - scaled) > allowed
        if wrong.any():
            index = tuple(int(i) for i in np.argwhere(wrong)[0])
            raise CheckFailed(f"x_q[{index}] = {got[index]:g}, а x / scale = {scaled[index]:g}: больше одного шага "
                              f"e4m3 ({case}). Подсказка: x_q = (x_блока / scale_блока).astype(float8_e4m3fn).")
    return "шкалы и значения совпали с e4m3 для всех блоков"


def _block_errors(x, deq, block) -> np.ndarray:
    x, deq = x.astype(np.float64), deq.astype(np.float64)
    errors = []
    for b in range(-(-x.shape[0] // block)):
        rows = slice(b * block, (b + 1) * block)
        errors.append(np.linalg.norm(deq[rows] - x[rows]) / np.linalg.norm(x[rows]))
    return np.array(errors)


@check("lesson10.block_beats_tensor", points=1, title="На выбросах поблочная шкала точнее одной на тензор")
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
                f"худшая относительная ошибка блока: поблочно {err_block:.3g}, одна шкала на тензор "
                f"{err_tensor:.3g} ({case}); поблочная должна быть хотя бы вдвое меньше.\n"
                "Подсказка: при одной шкале блок-выброс задаёт amax, и обычные строки попадают в "
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
        expected = Q.astype(np.float64) @ K.astype(np.float64).T
        product = Qh @ Kh.T
        tol = 1e-4 * (1 + np.abs(expected).max())
        error = float(np.abs(product - expected).max())
        if error > tol:
            if np.allclose(product, c["d"] * expected, rtol=1e-3, atol=tol):
                why = f"H не нормирована: Q Kᵀ выросло в d = {c['d']} раз"
            elif np.allclose(Kh, K, atol=1e-6):
                why = "повёрнута только Q, K осталась прежней"
            elif np.allclose(Qh, Q, atol=1e-6):
                why = "повёрнута только K, Q осталась прежней"
            else:
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
