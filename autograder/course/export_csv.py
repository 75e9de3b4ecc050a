"""``nbgrader export`` for this course: one CSV row per student and lesson, with its state.

nbgrader's own CSV exporter writes 0.0 both for a student who submitted nothing and for one
whose submission could not be graded, and never sees a submission that failed before reaching
the gradebook.  This one (``c.ExportApp.plugin_class`` in nbgrader_config.py) adds the columns
``status`` (не сдана / сдана, не проверена / проверена) and ``reason``, leaves the scores empty
unless the work is graded, lists every student of the gradebook and every ``submitted/`` folder,
and quotes fields properly (the csv module).  ``course export`` writes this file and, beside it, the Canvas and
Moodle import files made from the same rows (:mod:`autograder.course.lms`).
"""
from __future__ import annotations

import csv
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.plugins.export import ExportPlugin

from . import lms
from . import status as status_module

COLUMNS = ["assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email",
           "lms_user_id", "raw_score", "seconds_late", "late_submission_penalty", "score", "max_score", "status",
           "reason"]


class CourseCsvExport(ExportPlugin):
    """CSV export that tells "not submitted", "not graded (why)" and "graded" apart."""

    def export(self, gradebook: Gradebook) -> None:
        from .folder import load as load_course_folder

        course = load_course_folder(self.parent.coursedir.root)
        dest = self.to or "grades.csv"
        self.log.info("Exporting grades to %s", dest)
        write_rows(dest, rows(course, gradebook, lessons=[str(a) for a in self.assignment],
                              students=[str(s) for s in self.student]))


#: What ``course export`` writes into its folder.
GRADES_FILE, CANVAS_FILE, MOODLE_FILE = "grades.csv", "canvas.csv", "moodle.csv"


def write_rows(dest, found: list[dict]) -> Path:
    with open(dest, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, COLUMNS)
        writer.writeheader()
        writer.writerows(found)
    return Path(dest)


def handed_out(course, gradebook: Gradebook) -> list[str]:
    """The lessons of the gradebook the class has been given: one with a due date, or one somebody submitted
    (``submitted/<student>/<lesson>/``).  ``make release`` puts every lesson into the gradebook; the others were never
    handed out, and their zeros would make columns in an LMS."""
    submitted = course.path(course.coursedir().submitted_directory, ".", ".")
    return sorted(a.name for a in gradebook.assignments
                  if a.duedate is not None or any(p.is_dir() for p in submitted.glob(f"*/{a.name}")))


def export_files(course, out: Path, lessons=()) -> tuple[list[Path], list[str]]:
    """``course export``: grades.csv (this module's columns), canvas.csv and moodle.csv (:mod:`lms`) in ``out``, for
    ``lessons`` or, if none is named, for the lessons :func:`handed_out`; returns the files written and the
    warnings (Russian: lessons left out, students the LMS cannot find, and what to do)."""
    from ..nbgrader.gradebook import open_gradebook

    notes = []
    with open_gradebook(course.coursedir().db_url) as gradebook:
        if not lessons:
            lessons = handed_out(course, gradebook)
            left_out = sorted(a.name for a in gradebook.assignments if a.name not in lessons)
            if not lessons:
                raise ValueError("ни один урок не выдан: нет ни сданных работ, ни срока сдачи в gradebook — "
                                 "экспортировать нечего. Назовите уроки (course export 02_fused_rmsnorm …), "
                                 "чтобы выгрузить их всё равно.")
            if left_out:
                notes.append(f"Не выгружены уроки, которые никто не сдавал и у которых нет срока сдачи: "
                             f"{', '.join(left_out)}. Чтобы выгрузить урок всё равно, назовите его: "
                             f"course export {left_out[0]} …")
        found = rows(course, gradebook, lessons=list(lessons))
    if not found:
        raise ValueError("в gradebook нет ни одного студента и ни одной сданной работы: экспортировать нечего "
                         "(сначала course autograde)")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    grades = lms.class_grades(found)
    canvas, canvas_warnings = lms.canvas_table(grades)
    moodle, moodle_warnings = lms.moodle_table(grades)
    written = [write_rows(out / GRADES_FILE, found), lms.write_table(out / CANVAS_FILE, canvas),
               lms.write_table(out / MOODLE_FILE, moodle)]
    return written, notes + canvas_warnings + moodle_warnings


def rows(course, gradebook: Gradebook, lessons=(), students=()) -> list[dict]:
    submitted_root = course.path(course.coursedir().submitted_directory, ".", ".")
    found = []
    for assignment in gradebook.assignments:
        if lessons and assignment.name not in lessons:
            continue
        people = {s.id: s for s in gradebook.students}
        ids = sorted(set(people) | {p.parent.name for p in submitted_root.glob(f"*/{assignment.name}")
                                    if p.is_dir()})
        for student in ids:
            if students and student not in students:
                continue
            person = people.get(student)
            state = status_module.status(course, assignment.name, student)
            row = {"assignment": assignment.name, "duedate": assignment.duedate or "",
                   "student_id": student, "last_name": getattr(person, "last_name", "") or "",
                   "first_name": getattr(person, "first_name", "") or "",
                   "email": getattr(person, "email", "") or "",
                   "lms_user_id": getattr(person, "lms_user_id", "") or "", "max_score": assignment.max_score,
                   "status": state.state.value, "reason": state.reason, "timestamp": "",
                   "raw_score": "", "seconds_late": "", "late_submission_penalty": "", "score": ""}
            try:
                submission = gradebook.find_submission(assignment.name, student)
            except MissingEntry:
                submission = None
            if submission is not None:
                row["timestamp"] = submission.timestamp or ""
                row["seconds_late"] = round(submission.total_seconds_late or 0.0)
            if submission is not None and state.state is status_module.State.GRADED:
                penalty = submission.late_submission_penalty or 0.0
                row.update(raw_score=submission.score, late_submission_penalty=penalty,
                           score=max(0.0, submission.score - penalty))
            found.append(row)
    return found
