"""Late work: nbgrader marks a submission late from its timestamp.txt and the assignment's due date; the penalty is
the course's (autograder/course/late_penalty.py, nbgrader_config.py).  Is it applied by `course autograde`, kept in
the gradebook and shown in grades.csv, the Moodle feedback and the class report?"""
from __future__ import annotations

import csv

import pytest
from nbgrader.api import Gradebook

from autograder.course import autograde as parallel, export_csv, folder as course_folder, late_penalty, report
from class_faults import LESSON, REFERENCE, make_class, notebook

DUE = "2026-12-01 12:00:00 UTC"


@pytest.mark.parametrize("seconds, percent, grace, expected", [
    (0, 10, 0, None), (1, 10, 0, 1.2), (86400, 10, 0, 1.2), (86401, 10, 0, 2.4), (2.5 * 86400, 10, 0, 3.6),
    (600, 10, 15, None), (20 * 86400, 10, 0, 12.0), (3 * 86400, 0, 0, None), (40 * 86400, 10, 0, 12.0)])
def test_a_share_of_the_score_per_started_day_after_the_grace_period_up_to_the_cap(seconds, percent, grace, expected):
    assert late_penalty.penalty(12.0, seconds, percent, grace) == expected


def test_how_late_is_said_in_days_hours_or_minutes():
    assert late_penalty.describe(0, None) == ""
    assert late_penalty.describe(90, 0.0) == "сдана с опозданием на 2 мин, без штрафа"
    assert late_penalty.describe(90, None) == "сдана с опозданием на 2 мин"  # not graded: its penalty is unknown
    assert late_penalty.describe(5400, 0.0) == "сдана с опозданием на 1.5 ч, без штрафа"
    assert late_penalty.describe(2.5 * 86400, 3.6) == "сдана с опозданием на 2.5 дн., штраф 3.6"


def test_course_autograde_applies_the_penalty_and_every_export_shows_it(tmp_path):
    folder = make_class(tmp_path / "class", {
        "ontime": (notebook(REFERENCE), {"timestamp.txt": "2026-12-01 11:00:00 UTC"}),
        "late": (notebook(REFERENCE), {"timestamp.txt": "2026-12-04 00:00:00 UTC"})})  # 2.5 days late: 3 started
    with (folder / "nbgrader_config.py").open("a") as config:
        config.write("\nc.LatePenalty.percent_per_day = 10\n")
    with course_folder.quiet(), Gradebook(f"sqlite:///{folder / 'gradebook.db'}") as gradebook:
        gradebook.update_or_create_assignment(LESSON, duedate=DUE)
        for student in ("ontime", "late"):  # Moodle finds a student by email: without one, no row
            gradebook.update_or_create_student(student, email=f"{student}@example.edu")
    summary = parallel.autograde(folder, [LESSON], workers=2, progress=False)
    assert all(o.ok for o in summary.outcomes), summary.outcomes
    with course_folder.quiet(), Gradebook(f"sqlite:///{folder / 'gradebook.db'}") as gradebook:
        found = {s: gradebook.find_submission(LESSON, s) for s in ("ontime", "late")}
        scores = {s: (sub.score, sub.late_submission_penalty, sub.total_seconds_late) for s, sub in found.items()}
    full = scores["ontime"][0]
    assert scores["ontime"][1:] == (0.0, 0.0) and full > 0, scores
    assert scores["late"][0] == full and scores["late"][1] == pytest.approx(0.3 * full) \
        and scores["late"][2] == 2.5 * 86400, scores

    export_csv.export_files(course_folder.load(folder), tmp_path / "out")
    rows = {r["student_id"]: r for r in csv.DictReader(open(tmp_path / "out" / "grades.csv", encoding="utf-8"))}
    assert (rows["late"]["seconds_late"], float(rows["late"]["score"])) == ("216000", pytest.approx(0.7 * full))
    assert rows["ontime"]["seconds_late"] == "0"
    said = f"сдана с опозданием на 2.5 дн., штраф {0.3 * full:g}"
    moodle = {r["Email address"]: r for r in csv.DictReader(open(tmp_path / "out" / "moodle.csv", encoding="utf-8"))}
    assert moodle["late@example.edu"][f"Отзыв: {LESSON}"] == f"проверена; {said}", moodle
    assert moodle["ontime@example.edu"][f"Отзыв: {LESSON}"] == "проверена", moodle
    cells = {row["name"]: row["cells"][0] for row in report.student_rows(report.class_stats(folder, [LESSON]))}
    assert cells["late"].startswith(f"{0.7 * full:g} из ") and cells["late"].endswith(f" ({said})"), cells
    assert "опоздани" not in cells["ontime"], cells
