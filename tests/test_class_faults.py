"""Grading a class: can a student touch another's grade, can a fault leave a silent wrong grade?

Classes of lesson 02 (tests/class_faults.py) are graded the way an instructor does it (`course autograde`, and
serial `nbgrader autograde` for a sample), with tampered submissions beside honest ones. Every case is compared
cell by cell with a clean run of the honest students: others' grades are identical to it, and a tampered
submission gets the grade its case says while the instructor is told what it did. Kills and faults:
tests/test_class_kills.py.
"""
from __future__ import annotations

import csv

import pytest

from autograder.course import folder as course_folder, autograde as parallel, report, status
from autograder.course import nbgrader_cli
from class_faults import (HONEST, LESSON, clean, grades, honest_class, make_class,  # noqa: F401 - clean: a fixture
                          tampered)


# --- tampering -----------------------------------------------------------------------------

@pytest.fixture(scope="session")  # once per worker: xdist interleaves modules, which would rebuild a module fixture
def tamper(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tamper")
    cases = tampered(folder)
    make_class(folder, {**honest_class(), **{s: (nb, files) for s, (nb, files, _, _) in cases.items()}})
    summary = parallel.autograde(folder, workers=2, progress=False)
    return folder, cases, summary


def test_tampering_changes_no_one_elses_grade(clean, tamper):
    """Are the honest students' grades those of the clean run, whatever the class handed in?"""
    folder, _, _ = tamper
    got = grades(folder)
    assert {s: got[s] for s in HONEST} == clean
    assert not (folder / "PWNED").exists(), "a file beside the notebook ran before the guard"


def test_each_tampered_submission_gets_what_its_case_says(clean, tamper):
    """Shadowing files are ignored, helper modules work, structure is repaired: the grade of the
    honest twin; a notebook that is not JSON is not graded (and not a zero)."""
    folder, cases, summary = tamper
    got = grades(folder)
    for student, (_, _, twin, _) in cases.items():
        if twin is None:
            assert student not in got or all(v is None for v in got[student].values()), student
            state = status.status(course_folder.load(folder), LESSON, student)
            assert state.state is status.State.UNGRADED and "не читается" in state.reason, state
            assert any(o.submission.student == student and not o.ok for o in summary.outcomes)
        else:
            assert got[student] == clean[twin], student


def test_the_instructor_is_told_what_each_submission_did(tamper):
    """Does the run's summary name every anomaly of every tampered student (and none for the honest)?"""
    _, cases, summary = tamper
    kinds = {sub.student: {a.kind for a in found} for sub, found in summary.anomalies.items()}
    for student, (_, _, _, expected) in cases.items():
        assert expected <= kinds.get(student, set()), (student, kinds.get(student))
    for student in HONEST:
        assert not kinds.get(student), (student, kinds[student])
    text = summary.text()
    assert "НЕ ПРОВЕРЕНА broken_json" in text and "numpy.py совпадает по имени с модулем" in text


def test_huge_output_is_cut_in_the_graded_notebook(tamper):
    folder, _, _ = tamper
    graded = folder / "autograded" / "huge_output" / LESSON / f"{LESSON}.ipynb"
    assert graded.stat().st_size < 2 * 2**20


def test_report_and_export_tell_ungraded_from_zero(tamper):
    """The failed submission is in the report as not graded and in the CSV with an empty score;
    a student of the gradebook who handed in nothing is "не сдана"."""
    folder, _, _ = tamper
    nbgrader_cli.nbgrader("db", "student", "add", "absent", cwd=folder)
    out = report.write_report(folder, folder / "report.html")
    page = out.read_text(encoding="utf-8")
    assert "Сданы, но не проверены (1)" in page and "broken_json" in page
    nbgrader_cli.nbgrader("export", "--to", str(folder / "grades.csv"), cwd=folder)
    with open(folder / "grades.csv", newline="", encoding="utf-8") as handle:
        rows = {r["student_id"]: r for r in csv.DictReader(handle)}
    assert rows["broken_json"]["status"] == "сдана, не проверена" and rows["broken_json"]["score"] == ""
    assert rows["absent"]["status"] == "не сдана" and rows["absent"]["score"] == ""
    assert rows["ref_a"]["status"] == "проверена" and float(rows["ref_a"]["score"]) == 15.0
    assert rows["glob[1]"]["status"] == "проверена"
    # `course export`: the same states in the Canvas file, a graded score from the gradebook, 0 for nothing handed in,
    # an empty cell (no grade) for the failed submission.
    from autograder.course import cli

    assert cli.main(["export", "--course", str(folder), "--out", str(folder / "lms")]) == 0
    with open(folder / "lms" / "canvas.csv", newline="", encoding="utf-8") as handle:
        canvas = {r[0]: r[5] for r in list(csv.reader(handle))[2:]}
    assert float(canvas["ref_a"]) == 15.0 and canvas["absent"] == "0" and canvas["broken_json"] == ""


def test_serial_nbgrader_is_protected_the_same_way(clean, tmp_path):
    """The same hostile files through plain `nbgrader autograde` (no --force), one student after another. One honest
    student, ref_a, graded after every hostile one (nbgrader goes by student id): the whole honest class is the
    parallel case's (test_tampering_changes_no_one_elses_grade)."""
    cases = tampered(tmp_path)
    chosen = {s: cases[s][:2] for s in ("numpy_file", "duplicated_test", "glob[1]", "broken_json")}
    assert sorted([*chosen, "ref_a"])[-1] == "ref_a"
    make_class(tmp_path, {"ref_a": honest_class()["ref_a"], **chosen})
    done = nbgrader_cli.nbgrader("autograde", LESSON, cwd=tmp_path, check=False)
    assert "has changed!" not in done.stderr, "honest cells reported as changed: real tampering would drown"
    got = grades(tmp_path)
    assert got["ref_a"] == clean["ref_a"]
    for student in ("numpy_file", "duplicated_test", "glob[1]"):
        assert got[student] == clean["ref_a"], student
    assert not (tmp_path / "PWNED").exists()
