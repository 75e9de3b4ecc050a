"""Does the real `nbgrader autograde` give bank submissions exactly the score they should?

One scratch course per lesson: generate_assignment, then autograde the reference answers and the
untouched student notebook (whole, but where another test does: WHOLE_ELSEWHERE), correct rewrites and known mistakes (without the lesson's
demonstrations), and read nbgrader's gradebook.
Also: generate_feedback and export run on the result (of lessons 02 and 11; every lesson's in `make test-full`).  `make test` grades a sample of each bank
(the first correct rewrite and the first mistake; tests/test_banks.py checks every entry in-process); `make test-full` (COURSE_FULL_AUTOGRADE=1) sends every entry through nbgrader.
"""
import csv

import nbformat
import pytest

from autograder.course import paths as course

from autograder.course import grading, nbgrader_cli
from autograder.gpu import runtime as gpu
from autograder.checks.core import get_check
from bank import Submission, banks, cell_id, grade_calls
from helpers import FULL, without_demonstrations

LESSONS = sorted(banks())
#: Where the rest of the instructor's pipeline (generate_feedback, export) runs on the graded course: a NumPy
#: lesson and the lesson with a GPU part (7 s a lesson, the same nbgrader code for every one; `make test-full`: all).
PIPELINE_LESSONS = {"02_fused_rmsnorm", "11_flash_decoding"}
#: Lessons whose reference and untouched notebooks another test grades whole through nbgrader (its GPU part on the
#: emulator): here, in `make test`, the reference goes without its demonstrations, like the bank entries, and the
#: untouched notebook is left to that test (lesson 11's demonstrations: a minute of a loaded CI machine).
WHOLE_ELSEWHERE = {"11_flash_decoding": "tests/test_lesson11_flash_decoding.py"}


@pytest.mark.parametrize("lesson", LESSONS)
def test_autograde_scores_every_submission_as_the_bank_says(lesson, tmp_path):
    bank = banks()[lesson]
    reference = grading.reference_answers(lesson)
    entries = [Submission("reference", {})] + (bank.CORRECT + bank.WRONG if FULL
                                               else bank.CORRECT[:1] + bank.WRONG[:1])
    # The reference and the untouched notebook are graded whole, demonstrations and all, as students hand them
    # in; the bank entries without the demonstrations (a student may delete them: the verdicts are the same), which
    # are most of a notebook's grading time in some lessons (lesson 10's simulations) and not what they test.
    whole = FULL or lesson not in WHOLE_ELSEWHERE
    submissions = {s.name: grading.fill_answers(lesson, {**reference, **s.answers}) if s.name == "reference" and whole
                   else without_demonstrations(grading.fill_answers(lesson, {**reference, **s.answers}))
                   for s in entries}
    if whole:
        submissions["untouched"] = nbformat.read(course.student_notebook(lesson), as_version=4)

    # A lesson with a NumPy part and a GPU part (11): without a GPU its GPU cells would run on the PTX emulator,
    # seconds per cell for every submission; here the emulator is off and they score 0 for everyone ("нужен GPU").
    # The reference's GPU part on the emulator: tests/test_lesson11_flash_decoding.py; the bank's GPU entries: on a
    # GPU machine (tests/test_gpu_lessons.py) and on the emulator (tests/test_emulator_banks.py).
    grades = grading.grade_notebooks(lesson, submissions, tmp_path, extra_args=("--IsolatedExecute.gpu_emulator=False",))
    gpu_cells = set() if gpu.gpu_status()[0] else {
        cell for cell, calls in grade_calls(lesson).items() if any(get_check(c.check_id).needs_gpu for c in calls)}

    problems = []
    for entry in entries:
        lost = {g.cell for g in grades[entry.name] if g.score != g.max_score}
        expected = {cell_id(check) for check in entry.loses} | gpu_cells
        if lost != expected:
            graded = nbformat.read(tmp_path / "autograded" / entry.name / lesson / f"{lesson}.ipynb", as_version=4)
            problems.append(f"{entry.name}: lost {sorted(lost)}, expected {sorted(expected)}; what it was told:\n"
                            + grading.verdict_table(graded, grades[entry.name]))
        partial = [g for g in grades[entry.name] if 0 < g.score < g.max_score]
        if partial:
            problems.append(f"{entry.name}: partial scores {partial}")
    untouched = grades.get("untouched", ())
    if sum(g.score for g in untouched) != 0:
        problems.append(f"untouched notebook scored {grading.score_table(untouched)}")
    if whole:  # the reference, demonstrations and all, ran without an error and wrote nothing to stderr (which
        graded = nbformat.read(tmp_path / "autograded" / "reference" / lesson / f"{lesson}.ipynb", as_version=4)
        for cell in graded.cells:  # scores 0 in a test cell under nbgrader, and tells a student of a problem)
            for output in cell.get("outputs", []):
                if output.output_type == "error" or (output.output_type == "stream" and output.name == "stderr"):
                    problems.append(f"reference: {output.get('ename', 'stderr')} in the cell\n{cell.source[:300]}\n"
                                    f"{output.get('evalue') or output.get('text', '')[:500]}")
    assert not problems, "\n".join(problems)

    # The rest of the instructor's pipeline runs on the same course.
    if not (FULL or lesson in PIPELINE_LESSONS):
        return
    nbgrader_cli.nbgrader("generate_feedback", lesson, "--force", cwd=tmp_path)
    assert (tmp_path / "feedback" / "reference" / lesson / f"{lesson}.html").exists()
    nbgrader_cli.nbgrader("export", "--to", str(tmp_path / "grades.csv"), cwd=tmp_path)
    with open(tmp_path / "grades.csv", encoding="utf-8") as handle:
        rows = {row["student_id"]: row for row in csv.DictReader(handle)}
    total = sum(g.max_score for g in grades["reference"] if g.cell not in gpu_cells)
    assert float(rows["reference"]["score"]) == total
    assert "untouched" not in submissions or float(rows["untouched"]["score"]) == 0
