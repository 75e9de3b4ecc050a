"""Does the FA3 simulator keep its promises: exact makespans, recorded events, hazards refused?"""
import dataclasses
import itertools
import time

import matplotlib
import numpy as np
import pytest

from autograder.lessons.lesson10 import fa3sim
from autograder.lessons.lesson10.fa3sim import Params, ScheduleError, simulate
from autograder.lessons.lesson10.program import _fa3_overlap_program, _softmax_first_program

matplotlib.use("Agg")

GRID = list(itertools.product([1, 2, 7], [0.5, 2.0, 3.0, 6.0], [0.5, 1.0], [0.5, 1.0, 2.5], [1, 2, 3, 5]))


@pytest.mark.parametrize("n, load, gemm, softmax, stages", GRID)
def test_sequential_program_makespan_has_the_closed_form(n, load, gemm, softmax, stages):
    """Is the makespan n(t_load + c) for one slot and t_load + c + (n-1) max(t_load, c) for more?"""
    c = 2 * gemm + softmax
    expected = n * (load + c) if stages == 1 else load + c + (n - 1) * max(load, c)
    assert fa3sim.run_sequential(Params(n, load, gemm, softmax, stages)).makespan == pytest.approx(expected)


def test_every_load_gemm_and_softmax_is_recorded_once():
    """Does a run record one load, two GEMMs and one softmax per tile and warpgroup?"""
    trace = fa3sim.run_pingpong(Params(5, 0.5, 1.0, 1.0, 6), warpgroups=2)
    kinds = sorted((e.kind, e.tile, e.warpgroup) for e in trace.events)
    expected = sorted((k, j, w) for k in ("load", "gemm_qk", "gemm_pv", "softmax") for j in range(5) for w in range(2))
    assert kinds == expected


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_resources_are_respected(stages):
    """Do GEMMs never overlap, follow their load, and does the ring never hold more than S tiles?"""
    params = Params(9, (0.5, 3.0, 1.0, 4.0, 0.25, 2.0, 1.0, 5.0, 0.5), 1.0, 1.5, stages)
    traces = [fa3sim.run_sequential(params)]
    if stages >= 2:  # with one slot the overlap program deadlocks (tested below)
        traces.append(simulate(_fa3_overlap_program(9), params))
    for trace in traces:
        gemms = sorted(trace.select("tensor"), key=lambda e: e.start)
        assert all(a.end <= b.start + 1e-12 for a, b in zip(gemms, gemms[1:]))
        loads = {e.tile: e for e in trace.select("tma")}
        pv = {e.tile: e for e in trace.events if e.kind == "gemm_pv"}
        for e in gemms:
            assert e.start >= loads[e.tile].end
        for j in range(stages, 9):  # the load of tile j reuses the slot of tile j - stages
            assert loads[j].start >= pv[j - stages].end
            assert loads[j].slot == loads[j - stages].slot


def test_same_input_same_events_and_no_wall_clock(monkeypatch):
    """Are two runs identical, and does a run never read the wall clock?"""
    params = Params(12, 1.5, 1.0, 1.0, 3)
    first = fa3sim.run_pingpong(params, 2)

    def forbidden(*args):
        raise AssertionError("the simulator read the wall clock")

    for name in ("time", "perf_counter", "monotonic", "process_time", "time_ns", "perf_counter_ns"):
        monkeypatch.setattr(time, name, forbidden)
    assert fa3sim.run_pingpong(params, 2) == first


@pytest.mark.parametrize("warpgroups", [1, 2, 3])
@pytest.mark.parametrize("gemm, softmax", [(1.0, 0.5), (1.0, 1.0), (1.0, 3.0), (0.5, 4.0), (2.0, 1.0)])
def test_pingpong_steady_utilisation_is_min_1_of_work_over_chain(warpgroups, gemm, softmax):
    """Far from the start, is the tensor-core share min(1, w 2g / (2g + s)), with or without the barrier?"""
    for barriers in (True, False):
        def run(n):
            return fa3sim.run_pingpong(Params(n, 0.0, gemm, softmax, 2 * warpgroups + 2), warpgroups, barriers)

        short, long = run(10), run(20)
        steady = (long.busy("tensor") - short.busy("tensor")) / (long.makespan - short.makespan)
        assert steady == pytest.approx(min(1.0, warpgroups * 2 * gemm / (2 * gemm + softmax)))


@pytest.mark.parametrize("gemm, softmax, load", [(1.0, 0.5, 0.0), (1.0, 1.0, 0.25), (1.0, 3.0, 1.0), (2.0, 1.0, 0.5)])
def test_fa3_overlap_program_makespan(gemm, softmax, load):
    """With three slots, is the 2-stage program's makespan t_load + g + s + (n-1)(g + max(g, s)) + g?"""
    n = 10
    params = Params(n, load, gemm, softmax, 3)
    expected = load + gemm + softmax + (n - 1) * (gemm + max(gemm, softmax)) + gemm
    assert simulate(_fa3_overlap_program(n), params).makespan == pytest.approx(expected)
    assert simulate(_fa3_overlap_program(n), params).makespan < fa3sim.run_sequential(params).makespan


def test_two_slots_expose_the_load_under_the_overlap_program():
    """Does the lesson's observation hold: with two slots the overlap program waits for loads?"""
    two, three = (simulate(_fa3_overlap_program(8), Params(8, 1.0, 1.0, 1.0, s)).makespan for s in (2, 3))
    assert (two, three) == (24.0, 18.0)


def test_a_deeper_ring_absorbs_jittery_loads():
    """With rare slow loads, does each extra slot shorten the makespan down to the compute bound?"""
    rng = np.random.default_rng(6)
    loads = tuple(float(t) for t in rng.choice([0.5, 1.0, 1.5, 9.0], size=40, p=[0.3, 0.3, 0.3, 0.1]))
    spans = [fa3sim.run_sequential(Params(40, loads, 1.0, 1.0, s)).makespan for s in (1, 2, 3, 4, 6)]
    assert spans == sorted(spans, reverse=True) and spans[0] > spans[1] > spans[2]
    assert spans[-1] == pytest.approx(loads[0] + 40 * 3.0)


BAD_PROGRAMS = {
    "softmax before wait": ([("gemm_qk", 0), ("softmax", 0), ("wait_qk", 0), ("gemm_pv", 0), ("wait_pv", 0)],
                            "S_0 ещё не посчитан"),
    "pv before softmax": ([("gemm_qk", 0), ("wait_qk", 0), ("gemm_pv", 0), ("softmax", 0), ("wait_pv", 0)],
                          "P_0 ещё нет"),
    "missing wait": ([("gemm_qk", 0), ("wait_qk", 0), ("softmax", 0), ("gemm_pv", 0)], "нет операции 'wait_pv'"),
    "duplicate": ([("gemm_qk", 0), ("gemm_qk", 0)], "уже была на шаге 1"),
    "unknown op": ([("load", 0)], "неизвестная операция"),
    "three tiles in registers": (fa3sim.sequential_program(0) + [("gemm_qk", 0), ("gemm_qk", 1), ("gemm_qk", 2)],
                                 "только двух тайлов"),
    "out of order": ([("gemm_qk", 1), ("gemm_qk", 0)], "по порядку"),
    "not pairs": ([("gemm_qk",)], "список пар"),
}


@pytest.mark.parametrize("name", BAD_PROGRAMS)
def test_invalid_programs_are_refused_with_a_reason(name):
    """Is each hazard refused with a message that names it?"""
    program, phrase = BAD_PROGRAMS[name]
    with pytest.raises(ScheduleError, match=phrase):
        fa3sim.validate_program(program)


def test_missing_tiles_and_deadlocks_are_refused():
    """Does the simulator refuse a program without all tiles, and report a barrier that never opens?"""
    with pytest.raises(ScheduleError, match="нет операций для тайлов"):
        simulate(fa3sim.sequential_program(2), Params(3, 1.0, 1.0, 1.0, 2))
    stuck = [("sync", -1), ("sync", -1)] + fa3sim.sequential_program(1)
    with pytest.raises(ScheduleError, match="deadlock"):
        simulate(stuck, Params(1, 1.0, 1.0, 1.0, 2))
    with pytest.raises(ScheduleError, match="deadlock.*ячеек"):  # Q K_1^T needs a second slot
        simulate(_fa3_overlap_program(3), Params(3, 1.0, 1.0, 1.0, 1))


@pytest.mark.parametrize("builder", [fa3sim.sequential_program, _fa3_overlap_program, _softmax_first_program,
                                     fa3sim.pingpong_program])
def test_program_builders_are_valid_for_any_tile_list(builder):
    """Are the package's programs valid for 1..9 tiles and for a subset of tiles?"""
    for n in range(1, 10):
        assert fa3sim.validate_program(builder(n), n) == list(range(n))
    assert fa3sim.validate_program(builder([0, 2, 5])) == [0, 2, 5]


def test_trace_utilisation_and_shifted_makespan():
    """Does Trace measure from the first start, and count softmax per warpgroup?"""
    trace = fa3sim.run_pingpong(Params(4, 0.5, 1.0, 1.0, 4), 2)
    shifted = dataclasses.replace(trace, events=tuple(
        dataclasses.replace(e, start=e.start + 7, end=e.end + 7) for e in trace.events))
    assert shifted.makespan == pytest.approx(trace.makespan)
    assert shifted.utilisation("tensor") == pytest.approx(trace.utilisation("tensor"))
    assert 0 < trace.utilisation("softmax") <= 1


def test_gantt_draws_a_bar_per_event():
    """Does plot_gantt draw one bar per event, on one lane per unit?"""
    import matplotlib.pyplot as plt

    trace = fa3sim.run_pingpong(Params(3, 0.5, 1.0, 1.0, 4), 2)
    fig = fa3sim.plot_gantt(trace.events)
    ax = fig.axes[0]
    assert len(ax.patches) == len(trace.events)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["TMA (producer)", "тензорные ядра", "WG0: softmax",
                                                           "WG1: softmax"]
    plt.close(fig)
    fig = fa3sim.plot_traces({"a": trace, "b": fa3sim.run_sequential(Params(3, 1.0, 1.0, 1.0, 1))})
    assert len(fig.axes) == 2
    plt.close(fig)
