"""Without a GPU: do sample entries of the GPU banks (06, 07, 08, 09, 11) show on the PTX emulator what they show
on the H200 — the right ones pass every value check with no finding, the known-wrong ones lose their value checks
or show their fault (a race, an out-of-bounds access) as a finding?

Visible and hidden cases of a few value checks per entry; every entry and every value check, beside the H200's
outputs, is
``benchmarks/emulator_vs_h200.py`` (results in ``benchmarks/results/emulator_vs_h200.json``).
"""
from __future__ import annotations

import pytest

import emulated_banks as eb
import test_gpu_lessons as banks
from autograder.gpu import nvrtc

pytestmark = pytest.mark.skipif(nvrtc._NVRTC is None, reason="NVRTC (cuda-bindings) is not installed")

#: lesson -> entry -> the value checks it runs (None: all), visible and hidden cases; lessons 08, 09 and 11 (their
#: cases take seconds each on the emulator): the visible cases of one or two checks.
SAMPLE = {
    banks.L06: {"reference": None, "scale_add_illegal_address": None, "row_sums_missing_syncthreads": None,
                "matmul_no_zero_fill": None},
    banks.L07: {"reference": None, "no_tail_guard": None, "missing_syncthreads": None, "eps_outside_root": None,
                "reads_past_the_end_masked": None},
    banks.L08: {"reference": ("lesson08.tails",), "step1_no_barrier_after_load": ("lesson08.tails",),
                "no_rescale_of_O": ("lesson08.tails",)},
    banks.L09: {"reference": ("lesson09.mma_matmul", "lesson09.tails"), "matmul_rows_g_and_g8_swapped":
                ("lesson09.mma_matmul",), "missing_barrier_after_tile_lands": ("lesson09.tails",),
                "V_without_trans": ("lesson09.tails",)},
    banks.L11: {"reference": ("lesson11.gpu_equivalence",), "stale_slots_read": ("lesson11.gpu_equivalence",),
                "no_scale": ("lesson11.gpu_equivalence",)},
}
VISIBLE_ONLY = {banks.L08, banks.L09, banks.L11}


@pytest.mark.parametrize("lesson,name", [(lesson, name) for lesson, names in SAMPLE.items() for name in names])
def test_bank_entry_shows_on_the_emulator_what_it_shows_on_a_gpu(lesson, name):
    entry = next(e for e in banks.BANKS[lesson]() if e.name == name)
    checks = SAMPLE[lesson][name]
    calls = eb.run_entry(lesson, name, emulated=True, checks=checks, hidden=lesson not in VISIBLE_ONLY)
    problem = eb.disagreement(lesson, entry, calls, checks)
    assert problem is None, f"{lesson} {name}: {problem}\n" + "\n".join(
        f"  {c.check_id}: {'pass' if c.passed else 'FAIL'} {c.message[:200]} {[k for k, _ in c.findings]}"
        for c in calls)


def _side_by_side() -> dict:
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "emulator_vs_h200.json"
    return json.loads(path.read_text(encoding="utf-8"))


def test_the_committed_h200_side_by_side_agrees_entry_by_entry():
    """benchmarks/results/emulator_vs_h200.json, as measured on the H200: every row is an entry of today's banks;
    the GPU lost what the bank says (its value checks; the ones it may lose aside); the emulator showed the same;
    for an entry that loses no value check both sides' outputs are within the lesson's tolerance of each other."""
    report = _side_by_side()
    entries = {(lesson, e.name): e for lesson, make in banks.BANKS.items() for e in make()}
    assert report["of"] == len(entries) and report["rows"], "the report names another bank: run the benchmark again"
    for row in report["rows"]:
        key = (row["lesson"], row["entry"])
        assert key in entries, f"{key}: not an entry of today's banks; run benchmarks/emulator_vs_h200.py --missing"
        entry = entries[key]
        assert "error" not in row, f"{key}: {row.get('error')}"
        assert row["emulator_shows_what_the_gpu_shows"], f"{key}: {row['difference']}"
        if "gpu" in row:  # entries that never end run on the emulator only
            gpu_lost = set(row["gpu"]["lost"])
            # a fault that kills the CUDA context (illegal address) fails every later check of the same process
            # with the same CUDARuntimeError; the grader runs each check in its own worker, so only the first counts
            dead = [c for c in eb.VALUE_CHECKS[row["lesson"]]
                    if row["gpu"]["failures"].get(c, "").startswith("CUDARuntimeError")]
            gpu_lost -= set(dead[1:])
            expected = eb.expected_value_losses(row["lesson"], entry)
            assert expected - set(dead[1:]) <= gpu_lost <= set(entry.loses) | set(entry.may_lose), \
                (key, sorted(gpu_lost))
            if not expected and row["max_distance_in_tolerances"] is not None:
                assert row["max_distance_in_tolerances"] <= 1.0, key


# --- the whole grading without a GPU (issue 27): every check, as a check's worker runs it -------------------

#: Entries graded live here, every check with its hidden cases (seconds each); every entry of every GPU bank is in
#: benchmarks/results/gpu_banks_without_gpu.json.
GRADED_SAMPLE = [(banks.L06, "reference"), (banks.L06, "scale_add_cupy_composition"),
                 (banks.L06, "row_sums_missing_syncthreads"), (banks.L07, "reads_past_the_end_masked"),
                 (banks.L07, "naive_cupy_composition"), (banks.L09, "matmul_rows_g_and_g8_swapped")]


@pytest.mark.parametrize("lesson,name", GRADED_SAMPLE)
def test_graded_without_a_gpu_an_entry_loses_what_it_loses_on_a_gpu(lesson, name):
    entry = next(e for e in banks.BANKS[lesson]() if e.name == name)
    lost = eb.graded_losses(lesson, name)
    problem = eb.graded_disagreement(lesson, entry, lost)
    assert problem is None, f"{lesson} {name}: {problem}\n" + "\n".join(f"  {c}: {m[:200]}" for c, m in lost.items())


def test_the_committed_grading_without_a_gpu_agrees_entry_by_entry():
    """benchmarks/results/gpu_banks_without_gpu.json: every entry of today's GPU banks, graded as without a GPU,
    lost what it loses on a GPU (its bank's `loses`, proven on the H200), by the rule of graded_disagreement."""
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "gpu_banks_without_gpu.json"
    report = json.loads(path.read_text(encoding="utf-8"))
    entries = {(lesson, e.name): e for lesson, make in banks.BANKS.items() for e in make()}
    rows = {(r["lesson"], r["entry"]): r for r in report["rows"]}
    assert set(rows) == set(entries), ("run benchmarks/gpu_banks_without_gpu.py: entries without a row "
                                       f"{sorted(set(entries) - set(rows))}, rows of no entry {sorted(set(rows) - set(entries))}")
    for key, row in rows.items():
        assert "error" not in row, f"{key}: {row['error']}"
        assert row["gpu_loses"] == sorted(entries[key].loses), f"{key}: the bank changed; run the benchmark again"
        assert eb.graded_disagreement(key[0], entries[key], row["without_gpu_loses"]) is None, (key, row)


def test_the_committed_emulator_bounds_run_agrees_entry_by_entry():
    """benchmarks/results/emulator_bounds_banks.json (AUTOGRADER_GPU_BOUNDS=emulator's branch, on the CPU): every entry
    of today's GPU banks of 06-09 lost exactly the bounds-and-races checks it loses under compute-sanitizer on the
    H200, in the words the bank expects, and a rerun is asked for when a bank changed."""
    import json
    import sys
    from pathlib import Path

    benchmarks = Path(__file__).resolve().parent.parent / "benchmarks"
    sys.path.insert(0, str(benchmarks))
    import emulator_bounds_banks as ebb

    path = benchmarks / "results" / "emulator_bounds_banks.json"
    report = json.loads(path.read_text(encoding="utf-8"))
    entries = {(lesson, e.name): e for lesson in ebb.LESSONS.values() for e in banks.BANKS[lesson]()}
    rows = {(r["lesson"], r["entry"]): r for r in report["rows"]}
    assert set(rows) == set(entries), ("run benchmarks/emulator_bounds_banks.py --out "
                                       "benchmarks/results/emulator_bounds_banks.json: entries without a row "
                                       f"{sorted(set(entries) - set(rows))}, rows of no entry {sorted(set(rows) - set(entries))}")
    for key, row in rows.items():
        expected = sorted(c for c in entries[key].loses if ebb.bounds_check(c))
        assert row["gpu_loses"] == expected, f"{key}: the bank changed; run the benchmark again"
        assert row["says"] == entries[key].says, f"{key}: the bank's words changed; run the benchmark again"
        assert row["agrees"] and set(expected) <= set(row["emulator_loses"]), (key, row)
