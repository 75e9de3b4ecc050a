"""Does `course export` write files Canvas and Moodle import: one row per student, one column per lesson, the
LMS's identifier columns, and a student who submitted nothing kept apart from one whose work was not graded?

The samples in tests/lms_samples/ are built after each LMS's documentation (the URLs are in its README.md);
the writer's files are held to the same shape by the same reading rules, and the rules are shown to reject a
broken file, so that they cannot pass whatever they are given.
"""
from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.course import lms
from helpers import bare_class
from autograder.course.status import State

SAMPLES = Path(__file__).parent / "lms_samples"
# https://community.canvaslms.com/t5/Instructor-Guide/How-do-I-import-grades-in-the-Gradebook/ta-p/807 and
# canvas-lms app/models/gradebook_importer.rb (tests/lms_samples/README.md)
CANVAS_SAMPLE = SAMPLES / "canvas_gradebook.csv"
# https://docs.moodle.org/311/en/Grade_import and moodle grade/import/csv (tests/lms_samples/README.md)
MOODLE_SAMPLE = SAMPLES / "moodle_grade_import.csv"

LESSONS = {"02_fused_rmsnorm": 12.0, "04_online_softmax": 10.0}


def read(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


def canvas_layout(table: list[list[str]]) -> tuple[list[str], list[str], list[list[str]]]:
    """(assignment columns, their points, student rows) as Canvas's importer reads the file
    (gradebook_importer.rb: header?, update_column_count, check_for_non_student_row); AssertionError otherwise."""
    header, *rest = table
    assert header[0].startswith("Student") and "ID" in header[1], header
    identity = 3
    if header[2] == "SIS User ID" and header[3] == "SIS Login ID":
        identity += 2
    assert "Section" in header[identity - 1], header
    points = [row for row in rest if "Points Possible" in row[0]]
    assert len(points) == 1 and all(cell == "" for cell in points[0][1:identity]), points
    students = [row for row in rest if "Points Possible" not in row[0]]
    assert all(len(row) == len(header) for row in rest), "every row has a cell per column"
    assert all(float(p) >= 0 for p in points[0][identity:])
    return header[identity:], points[0][identity:], students


def moodle_layout(table: list[list[str]]) -> tuple[int, list[list[str]]]:
    """(the index of the "Email address" column, the student rows) as Moodle's CSV import reads them: one header
    row, the same number of cells in every row (load_csv_content refuses others: csvweirdcolumns), every user cell
    filled (an empty or unknown one stops the whole import), every grade empty, '-' or a number."""
    header, *students = table
    email = header.index("Email address")
    assert all(len(row) == len(header) for row in students)
    assert all(row[email] for row in students)
    for row in students:
        for name, value in zip(header, row):
            if not name.startswith(("Feedback", "Отзыв")) and name not in lms.MOODLE_IDENTITY:
                assert value in ("", "-") or float(value) >= 0, (name, value)
    return email, students


def test_the_reading_rules_accept_the_documented_samples_and_reject_broken_files():
    assert canvas_layout(read(CANVAS_SAMPLE))[0] == ["Quiz 1 (23)", "Lab 2 (24)"]
    assert moodle_layout(read(MOODLE_SAMPLE))[0] == 2
    canvas = read(CANVAS_SAMPLE)
    with pytest.raises(AssertionError):
        canvas_layout([row[:4] + row[5:] for row in canvas])  # no Section column
    with pytest.raises(AssertionError):
        canvas_layout([canvas[0]] + canvas[2:])  # no Points Possible row
    moodle = read(MOODLE_SAMPLE)
    with pytest.raises(AssertionError):
        moodle_layout(moodle + [["Nobody", "Known", "", "1", ""]])  # a row Moodle cannot place
    with pytest.raises(ValueError):
        moodle_layout([["First name", "Last name", "Mail", "A"], ["a", "b", "c", "1"]])


def row(student, lesson, state, score="", **person):
    return {"assignment": lesson, "max_score": LESSONS[lesson], "student_id": student,
            "first_name": person.get("first", ""), "last_name": person.get("last", ""),
            "email": person.get("email", ""), "lms_user_id": person.get("lms", ""),
            "status": state.value, "score": score}


def sample_class() -> lms.ClassGrades:
    """ann: graded and not submitted; bob: submitted but not graded, graded with a bonus; cid: no ids at all."""
    ann = dict(first="Анна", last="Иванова", email="ann@example.edu", lms="101")
    bob = dict(first="Bob", last="Stone", email="bob@example.edu", lms="102")
    return lms.class_grades([
        row("ann", "02_fused_rmsnorm", State.GRADED, 11.5, **ann),
        row("ann", "04_online_softmax", State.NOT_SUBMITTED, **ann),
        row("bob", "02_fused_rmsnorm", State.UNGRADED, **bob),
        row("bob", "04_online_softmax", State.GRADED, 13.0, **bob),
        row("cid", "02_fused_rmsnorm", State.GRADED, 0.0),
        row("cid", "04_online_softmax", State.NOT_SUBMITTED),
    ])


def test_canvas_file_has_the_samples_shape_a_row_per_student_and_a_column_per_lesson():
    table, warnings = lms.canvas_table(sample_class())
    sample = read(CANVAS_SAMPLE)
    assert table[0][:5] == sample[0][:5] == lms.CANVAS_IDENTITY
    assert table[1][0] == sample[1][0]  # "    Points Possible", as Canvas writes it
    lessons, points, students = canvas_layout(table)
    assert lessons == list(LESSONS) and [float(p) for p in points] == list(LESSONS.values())
    by_id = {r[1]: r for r in students}
    assert [r[0] for r in students] == ["Иванова, Анна", "Stone, Bob", "cid"]
    # Graded: the score; not submitted: 0 (a zero grade); submitted, not graded: empty (no grade, never 0).
    assert by_id["101"][5:] == ["11.5", "0"]
    assert by_id["102"][5:] == ["", "13"]  # a bonus above the maximum stays: Canvas takes it
    assert len(warnings) == 1 and "cid" in warnings[0] and "nbgrader db student import" in warnings[0]


def test_moodle_file_has_the_samples_identifier_and_feedback_columns_and_leaves_out_who_it_cannot_place():
    table, warnings = lms.moodle_table(sample_class())
    sample = read(MOODLE_SAMPLE)
    email, students = moodle_layout(table)
    assert table[0][email] == sample[0][moodle_layout(sample)[0]] == "Email address"
    assert table[0][3:] == ["02_fused_rmsnorm", "Отзыв: 02_fused_rmsnorm", "04_online_softmax", "Отзыв: 04_online_softmax"]
    assert sample[0][4].endswith(sample[0][3])  # the sample's feedback column follows its grade, as ours do
    rows = {r[email]: r[3:] for r in students}
    assert set(rows) == {"ann@example.edu", "bob@example.edu"}  # cid has no email: a row would stop the import
    assert rows["ann@example.edu"] == ["11.5", "проверена", "0", "не сдана"]
    assert rows["bob@example.edu"] == ["", "сдана, не проверена", "13", "проверена"]
    assert len(warnings) == 1 and warnings[0].startswith("Moodle:") and "cid" in warnings[0]


def test_nobody_missing_an_id_means_no_warning():
    grades = lms.class_grades([row("ann", "02_fused_rmsnorm", State.GRADED, 3, email="a@x", lms="7")])
    assert lms.canvas_table(grades)[1] == [] and lms.moodle_table(grades)[1] == []


# --- `course export` on a class folder ---------------------------------------------------------------------

def class_folder(root: Path) -> Path:
    """A gradebook with one lesson (12 points) and two students; carol's work is in submitted/, not graded."""
    return bare_class(root, {"02_fused_rmsnorm": 12.0},
                      {"alice": dict(first_name="Alice", last_name="Liddell", email="alice@example.edu",
                                     lms_user_id="4711"), "bob": {}},
                      [("carol", "02_fused_rmsnorm")])


def test_course_export_writes_the_three_files_and_says_which_ids_to_fill(tmp_path):
    course = class_folder(tmp_path / "class")
    done = subprocess.run([sys.executable, "-m", "autograder.course.cli", "export", "--out", "out"], cwd=course,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = course / "out"
    assert sorted(p.name for p in out.iterdir()) == ["canvas.csv", "grades.csv", "moodle.csv"]
    _, _, students = canvas_layout(read(out / "canvas.csv"))
    assert {r[0]: (r[1], r[5]) for r in students} == {
        "Liddell, Alice": ("4711", "0"), "bob": ("", "0"), "carol": ("", "")}  # carol: handed in, not graded
    assert [r[2:] for r in moodle_layout(read(out / "moodle.csv"))[1]] == [["alice@example.edu", "0", "не сдана"]]
    grades = {r["student_id"]: r for r in csv.DictReader(open(out / "grades.csv", encoding="utf-8"))}
    assert grades["alice"]["lms_user_id"] == "4711" and grades["carol"]["status"] == State.UNGRADED.value
    warnings = done.stderr.strip().splitlines()
    assert [w.split(":")[0] for w in warnings] == ["Canvas", "Moodle"], done.stderr
    assert all("nbgrader db student import" in w and "Traceback" not in w for w in warnings)


def test_course_export_names_an_unknown_lesson(tmp_path):
    course = class_folder(tmp_path / "class")
    done = subprocess.run([sys.executable, "-m", "autograder.course.cli", "export", "99_nothing"], cwd=course,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Нет в gradebook: 99_nothing" in done.stderr, done.stderr
    assert not (course / "canvas.csv").exists()


def test_course_export_leaves_out_a_lesson_never_handed_out_and_says_so(tmp_path):
    """`make release` puts every lesson into the gradebook; one nobody submitted and without a due date is not
    exported by default (its zeros would become an LMS column), is named in a warning, and is exported when named."""
    course = bare_class(tmp_path / "class", {"02_fused_rmsnorm": 12.0, "03_swiglu": 10.0}, {"alice": {}},
                        [("alice", "02_fused_rmsnorm")])

    def export(*lessons: str) -> tuple[set[str], str]:
        done = subprocess.run([sys.executable, "-m", "autograder.course.cli", "export", *lessons, "--out", "out"],
                              cwd=course, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        exported = {r["assignment"] for r in csv.DictReader(open(course / "out" / "grades.csv", encoding="utf-8"))}
        return exported, done.stderr

    exported, said = export()
    assert exported == {"02_fused_rmsnorm"}
    assert "Не выгружены уроки, которые никто не сдавал и у которых нет срока сдачи: 03_swiglu" in said, said
    assert "course export 03_swiglu" in said
    exported, said = export("02_fused_rmsnorm", "03_swiglu")
    assert exported == {"02_fused_rmsnorm", "03_swiglu"} and "Не выгружены" not in said
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:  # a due date: handed out, nobody submitted
        gradebook.update_or_create_assignment("03_swiglu", duedate="2026-12-01 23:59:00 UTC")
    exported, said = export()
    assert exported == {"02_fused_rmsnorm", "03_swiglu"} and "Не выгружены" not in said
