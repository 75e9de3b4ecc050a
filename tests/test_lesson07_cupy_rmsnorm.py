"""Lesson 07 on a machine without a GPU (CI): does nbgrader grade every check on the PTX emulator but the timed one?"""
import nbformat
import pytest

from autograder.course import paths as course

from autograder.course import grading
from autograder.gpu import runtime as gpu

LESSON = "07_cupy_rmsnorm"


@pytest.mark.skipif(gpu.gpu_status()[0], reason="with a GPU the run checks score too (tests/test_gpu_lessons.py)")
def test_autograde_without_gpu_scores_everything_but_the_timed_check_on_the_emulator(tmp_path):
    """Reference: full marks on the PTX emulator but the speed cell (0, saying it needs a GPU); a kernel that does
    not compile and the untouched notebook: 0."""
    reference = grading.reference_answers(LESSON)
    broken = dict(reference, rmsnorm_source=reference["rmsnorm_source"].replace("return v;", "return v"))
    grades = grading.grade_notebooks(LESSON, {
        "reference": grading.fill_answers(LESSON, reference),
        "broken": grading.fill_answers(LESSON, broken),
        "untouched": nbformat.read(course.student_notebook(LESSON), as_version=4)}, tmp_path)
    scored = {student: {g.cell: g.score for g in cells} for student, cells in grades.items()}
    maxima = {g.cell: g.max_score for g in grades["reference"]}
    assert scored["reference"].pop("test_lesson07_speed") == 0
    assert all(score == maxima[cell] for cell, score in scored["reference"].items()), scored["reference"]
    assert sum(scored["broken"].values()) == 0 and sum(scored["untouched"].values()) == 0
    feedback = (tmp_path / "autograded" / "reference" / LESSON / f"{LESSON}.ipynb").read_text()
    assert "проверено на эмуляторе GPU" in feedback and "измеряет время" in feedback


def test_sizes_of_the_cases_do_what_the_lesson_says():
    """Equivalence cases divide by 256 and 4; every tail case breaks one of them."""
    from autograder.lessons.lesson07.checks import TAILS, VISIBLE
    assert all(c["D"] % 256 == 0 for c in VISIBLE)
    assert all(c["D"] % 256 or c["D"] % 4 for c in TAILS)
    assert any(c["D"] % 4 == 2 for c in TAILS)  # rows that are not 16-byte aligned


def test_the_limits_paragraph_quotes_the_committed_limits_benchmark():
    """Section 2's paragraph on the limits run quotes benchmarks/results/gpu_kernels_limits_h200.json."""
    import json

    measured = json.loads((course.ROOT / "benchmarks" / "results" / "gpu_kernels_limits_h200.json").read_text())
    rows = {(r["T"], r["D"]): r for r in measured["rmsnorm"]}
    long_row, short_row = rows[(65536, 4096)], rows[(65536, 1024)]
    text = course.text_source("07_cupy_rmsnorm").read_text(encoding="utf-8")
    start = text.index("То же эталонное ядро в замере у предела")
    paragraph = text[start:text.index("# Наивная версия", start)]
    for quoted in (f"{long_row['fused_pct_of_copy']:.1f} % копирования при D = 4096",
                   f"{short_row['fused_pct_of_copy']:.1f} % при D = 1024",
                   f"{long_row['speedup_vs_torch']:.2f}× и {short_row['speedup_vs_torch']:.2f}× от torch",
                   f"{short_row['torch_pct_of_copy']:.0f} % копирования",
                   f"{short_row['vs_torch_goal_needs_pct_of_copy']:.0f} %."):
        assert quoted in paragraph, quoted
