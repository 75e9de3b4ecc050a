"""``nbgrader export`` for this course: one CSV row per student and lesson, with its state.

nbgrader's own CSV exporter writes 0.0 both for a student who submitted nothing and for one
whose submission could not be graded, and never sees a submission that failed before reaching
the gradebook.  This one (``c.ExportApp.plugin_class`` in nbgrader_config.py) adds the columns
``status`` (не сдана / сдана, не проверена / проверена) and ``reason``, leaves the scores empty
unless the work is graded, lists every student of the gradebook and every ``submitted/`` folder,
and quotes fields properly (the csv module).
"""
from __future__ import annotations

import csv

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.plugins.export import ExportPlugin

from . import status as status_module

COLUMNS = ["assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email",
           "raw_score", "late_submission_penalty", "score", "max_score", "status", "reason"]


class CourseCsvExport(ExportPlugin):
    """CSV export that tells "not submitted", "not graded (why)" and "graded" apart."""

    def export(self, gradebook: Gradebook) -> None:
        from .folder import load as load_course_folder

        course = load_course_folder(self.parent.coursedir.root)
        dest = self.to or "grades.csv"
        self.log.info("Exporting grades to %s", dest)
        with open(dest, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, COLUMNS)
            writer.writeheader()
            for row in rows(course, gradebook, lessons=[str(a) for a in self.assignment],
                            students=[str(s) for s in self.student]):
                writer.writerow(row)


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
                   "email": getattr(person, "email", "") or "", "max_score": assignment.max_score,
                   "status": state.state.value, "reason": state.reason, "timestamp": "",
                   "raw_score": "", "late_submission_penalty": "", "score": ""}
            try:
                submission = gradebook.find_submission(assignment.name, student)
            except MissingEntry:
                submission = None
            if submission is not None:
                row["timestamp"] = submission.timestamp or ""
            if submission is not None and state.state is status_module.State.GRADED:
                penalty = submission.late_submission_penalty or 0.0
                row.update(raw_score=submission.score, late_submission_penalty=penalty,
                           score=max(0.0, submission.score - penalty))
            found.append(row)
    return found
