"""Lesson 07 on a machine without a GPU (CI): does nbgrader grade the compile check and only it?"""
import nbformat
import pytest

from autograder import course, gpu

LESSON = "07_cupy_rmsnorm"


@pytest.mark.skipif(gpu.gpu_status()[0], reason="with a GPU the run checks score too (tests/test_gpu_lessons.py)")
def test_autograde_without_gpu_scores_the_compile_check_only(tmp_path):
    """Reference: compile points only, every run cell 0 saying "нужен GPU"; untouched and broken: 0."""
    reference = course.reference_answers(LESSON)
    broken = dict(reference, rmsnorm_source=reference["rmsnorm_source"].replace("return v;", "return v"))
    grades = course.grade_notebooks(LESSON, {
        "reference": course.fill_answers(LESSON, reference),
        "broken": course.fill_answers(LESSON, broken),
        "untouched": nbformat.read(course.student_notebook(LESSON), as_version=4)}, tmp_path)
    scored = {student: {g.cell: g.score for g in cells} for student, cells in grades.items()}
    assert scored["reference"].pop("test_lesson07_compiles") == 1
    assert set(scored["reference"].values()) == {0}
    assert sum(scored["broken"].values()) == 0 and sum(scored["untouched"].values()) == 0
    feedback = (tmp_path / "autograded" / "reference" / LESSON / f"{LESSON}.ipynb").read_text()
    assert "нужен GPU" in feedback


def test_sizes_of_the_cases_do_what_the_lesson_says():
    """Equivalence cases divide by 256 and 4; every tail case breaks one of them."""
    from autograder.lessons.lesson07_cupy_rmsnorm import TAILS, VISIBLE
    assert all(c["D"] % 256 == 0 for c in VISIBLE)
    assert all(c["D"] % 256 or c["D"] % 4 for c in TAILS)
    assert any(c["D"] % 4 == 2 for c in TAILS)  # rows that are not 16-byte aligned
