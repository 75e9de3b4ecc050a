"""benchmarks/gpu_grading_time.py: its committed H200 tables re-print, and what it calls a sanitizer or a timed check
is what the lessons register as one (the table's split is the one issue 30 reports)."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_grading_time  # noqa: E402


def test_the_committed_tables_reprint_with_every_lesson():
    for path in sorted((ROOT / "benchmarks" / "results").glob("gpu_grading_time_h200*.json")):
        report = json.loads(path.read_text(encoding="utf-8"))
        shown = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_grading_time.py"), "--show", str(path)],
                               capture_output=True, text=True, check=True).stdout
        assert "NVIDIA H200" in shown and shown.count("\n") > 5, shown
        for lesson in report["lessons"]:
            assert lesson["lesson"] in shown


def test_the_split_names_the_sanitizer_and_timed_checks():
    from autograder.checks.core import get_check

    assert gpu_grading_time.kind("lesson06.row_sums_sanitizer") == "sanitizer"
    assert gpu_grading_time.kind("lesson06.scale_add_bounds") == "sanitizer"
    assert gpu_grading_time.kind("lesson11.gpu_speed") == "timed" and gpu_grading_time.kind("lesson07.speed") == "timed"
    assert gpu_grading_time.kind("lesson08.equivalence") == "other" and gpu_grading_time.kind("lesson11.merge") == "other"
    for check_id in ("lesson06.row_sums_sanitizer", "lesson06.scale_add_bounds", "lesson07.sanitizer"):
        assert "memcheck" in get_check(check_id).title, check_id  # what the name says is what the check runs


def test_the_phases_benchmark_takes_every_graded_call_but_the_sanitizer_ones():
    import gpu_check_phases
    from autograder.nbgrader.cells import parse_grade_cell

    for key, lesson in gpu_check_phases.LESSONS.items():
        cells = gpu_check_phases.notebook_cells(lesson)
        every = [(i, n, call) for i, cell in enumerate(cells) if cell["cell_type"] == "code"
                 for n, call in enumerate(parse_grade_cell("".join(cell["source"])) or [])]
        taken = set(gpu_check_phases.grade_calls(lesson, hidden=True))
        assert taken == {(i, n) for i, n, call in every if gpu_grading_time.kind(call.check_id) != "sanitizer"}, key
        visible = set(gpu_check_phases.grade_calls(lesson, hidden=False))
        assert visible < taken and all(not every_call.hidden for i, n, every_call in every if (i, n) in visible)
    fake = {"date": "d", "device": "H200", "command": "c", "lessons": {"07_cupy_rmsnorm": [
        {"cold": {"check": "lesson07.equivalence", "passed": True, "message": "", "wall": 2.0,
                  "phases": {"imports": 0.5, "cuda": 0.2, "cells": 0.3, "check": 0.9}},
         "warm": {"check": "lesson07.equivalence", "passed": True, "message": "", "wall": 1.5,
                  "phases": {"imports": 0.5, "cuda": 0.2, "cells": 0.3, "check": 0.4}}}]}}
    row = next(line for line in gpu_check_phases.table(fake).splitlines() if line.startswith("07_cupy_rmsnorm"))
    assert row.split()[1:5] == ["1", "0.90", "0.40", "0.50"]


def test_the_benchmarks_read_graded_calls_where_nbgrader_is_not_installed():
    """The H200 machine has no nbgrader: reading a notebook's graded calls must not import it."""
    code = ("import sys; sys.modules['nbgrader'] = None; sys.path.insert(0, 'benchmarks'); import gpu_check_phases; "
            "print(len(gpu_check_phases.grade_calls('07_cupy_rmsnorm', hidden=True)))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and int(out.stdout) > 5, out.stderr[-2000:]
