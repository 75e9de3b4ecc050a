"""Lesson 10 checks: makespans of the sequential and pipelined loops, copy-bound, tensor-core utilisation (ping-pong)."""
from __future__ import annotations

import dataclasses

import numpy as np

from ...checks.core import CheckFailed, call_student, check, describe_case
from ...checks.mistakes import failure, identify
from . import fa3sim
from .fa3sim import Params
from .program import _fa3_overlap_program
from .common import _call_text, _expect_value, _param_sets, _simulated

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
            mistake = identify(bool(got), expected, variants, args, close=lambda value, reference: value == reference)
            raise failure(
                f"{call} = {bool(got)}, ожидалось {expected}: в симуляторе каждый следующий тайл добавляет "
                f"{step:g} = max(t_load, c), c = 2·t_gemm + t_softmax = {2 * args[1] + args[2]:g}.", mistake,
                then="Подсказка: цикл упирается в копирование, когда загрузка тайла дольше всего, что "
                     "варп-группа делает с ним: t_load > 2·t_gemm + t_softmax.")
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
    "число варп-групп не учтено": lambda g, s, w: 2 * g / (2 * g + s),
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
                      hint="за итерацию варп-группа занимает тензорные ядра на 2·t_gemm и ещё t_softmax "
                           "считает softmax; w варп-групп по очереди дают w·2·t_gemm работы на период "
                           "max(2·t_gemm + t_softmax, w·2·t_gemm). Доля не может быть больше 1.")
    return f"совпало с симулятором на {len(cases)} наборах"


