"""``course export``: the class's grades as files an LMS imports: a Canvas gradebook CSV and a Moodle grade-import CSV.

One row per student, one column per lesson, both built from the rows of :func:`autograder.course.export_csv.rows`
(which knows each submission's state).  What a cell holds, and why (each LMS's own rule, docs/instructor.md):

===================  ==========================  =================================================================
state                cell                        what the LMS does with it
===================  ==========================  =================================================================
graded               the score (late penalty     a grade
                     taken off, bonus kept)
not submitted        ``0``                       a zero grade, counted in the totals
submitted, not       empty                       no grade (Canvas: the cell is emptied, left out of the current
graded                                           score; Moodle: ``''`` and ``-`` are "no grade"), never a zero
===================  ==========================  =================================================================

Canvas (the gradebook export/import format: app/models/gradebook_importer.rb of canvas-lms): the header
``Student, ID, SIS User ID, SIS Login ID, Section, <lesson>...``, then the ``Points Possible`` row (a lesson
column matched by title, or created with these points).  A student is found by ``ID`` (Canvas's user id:
nbgrader's ``lms_user_id``), else by name ("Last, First"); without an id the import page asks which student.

Moodle (Grades > Import > CSV file; grade/import/csv/classes/load_data.php): free headers, mapped by hand on the
preview page; the student is found by the column mapped to "Email address".  A row whose email is empty or
unknown stops the whole import, so a student without an email is left out (and named in a warning).  Each
lesson has a feedback column beside its grade (the state in words, and how late with what penalty), so the two
kinds of empty grade differ there.
"""
from __future__ import annotations

import csv
import dataclasses
from pathlib import Path
from typing import Iterable

from ..checks.core import format_points
from . import late_penalty
from .status import State

CANVAS_IDENTITY = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
#: The first cell of Canvas's second row (its own export writes it so; the importer looks for the words).
CANVAS_POINTS_POSSIBLE = "    Points Possible"
MOODLE_IDENTITY = ["First name", "Last name", "Email address"]
MOODLE_FEEDBACK = "Отзыв: {lesson}"
#: What `nbgrader db student import` needs to fill the ids in (its columns are the gradebook's Student fields).
FILL_IDS = ("заполните их в gradebook: nbgrader db student import students.csv (колонки id,first_name,last_name,"
            "email,lms_user_id; docs/instructor.md, «Оценки в Canvas и Moodle»)")


@dataclasses.dataclass(frozen=True)
class Person:
    """A student as the gradebook knows them (nbgrader's Student: id, names, email, lms_user_id)."""

    id: str
    first_name: str = ""
    last_name: str = ""
    email: str = ""
    lms_user_id: str = ""

    @property
    def sortable_name(self) -> str:
        """"Last, First" as Canvas writes its Student column (the id where the gradebook has no name)."""
        names = [name for name in (self.last_name, self.first_name) if name]
        return ", ".join(names) or self.id


@dataclasses.dataclass(frozen=True)
class Grade:
    state: State
    score: float | None = None  # only when graded
    late: str = ""  # how late and what it cost (late_penalty.describe); "" on time

    @property
    def feedback(self) -> str:
        """The state in words, and the lateness where there was one (Moodle's feedback column)."""
        return f"{self.state.value}; {self.late}" if self.late else self.state.value


@dataclasses.dataclass
class ClassGrades:
    """The class as the LMS files need it: lessons (with their maximum), students, one grade per pair."""

    lessons: dict[str, float]  # lesson -> max score
    people: list[Person]
    grades: dict[tuple[str, str], Grade]  # (student, lesson) -> grade

    def cell(self, student: str, lesson: str) -> str:
        grade = self.grades.get((student, lesson), Grade(State.NOT_SUBMITTED))
        if grade.state is State.GRADED:
            return format_points(round(grade.score, 2))
        return "0" if grade.state is State.NOT_SUBMITTED else ""


def class_grades(rows: Iterable[dict]) -> ClassGrades:
    """The rows of :func:`autograder.course.export_csv.rows` (one per student and lesson) as one table."""
    lessons: dict[str, float] = {}
    people: dict[str, Person] = {}
    grades: dict[tuple[str, str], Grade] = {}
    for row in rows:
        lessons[row["assignment"]] = float(row["max_score"])
        people[row["student_id"]] = Person(row["student_id"], row["first_name"], row["last_name"], row["email"],
                                           row.get("lms_user_id", ""))
        state = State(row["status"])
        graded = state is State.GRADED
        late = late_penalty.describe(float(row.get("seconds_late") or 0),
                                     float(row.get("late_submission_penalty") or 0) if graded else None)
        grades[(row["student_id"], row["assignment"])] = Grade(state, float(row["score"]) if graded else None, late)
    return ClassGrades(dict(sorted(lessons.items())), sorted(people.values(), key=lambda p: p.id), grades)


def canvas_table(grades: ClassGrades) -> tuple[list[list[str]], list[str]]:
    """(the rows of Canvas's gradebook CSV, the warning when some students have no Canvas id)."""
    table = [CANVAS_IDENTITY + list(grades.lessons),
             [CANVAS_POINTS_POSSIBLE] + [""] * (len(CANVAS_IDENTITY) - 1)
             + [format_points(points) for points in grades.lessons.values()]]
    for person in grades.people:
        table.append([person.sortable_name, person.lms_user_id, "", "", ""]
                     + [grades.cell(person.id, lesson) for lesson in grades.lessons])
    without = [p.id for p in grades.people if not p.lms_user_id]
    warnings = [f"Canvas: у студентов без lms_user_id ({_some(without)}) строка есть, но Canvas найдёт их только по "
                f"имени «Фамилия, Имя» или спросит на странице импорта; {FILL_IDS}"] if without else []
    return table, warnings


def moodle_table(grades: ClassGrades) -> tuple[list[list[str]], list[str]]:
    """(the rows of the Moodle grade-import CSV, the warning when students without an email were left out)."""
    header = list(MOODLE_IDENTITY)
    for lesson in grades.lessons:
        header += [lesson, MOODLE_FEEDBACK.format(lesson=lesson)]
    table = [header]
    for person in grades.people:
        if not person.email:
            continue
        row = [person.first_name, person.last_name, person.email]
        for lesson in grades.lessons:
            grade = grades.grades.get((person.id, lesson), Grade(State.NOT_SUBMITTED))
            row += [grades.cell(person.id, lesson), grade.feedback]
        table.append(row)
    without = [p.id for p in grades.people if not p.email]
    warnings = [f"Moodle: студенты без email не записаны ({_some(without)}): Moodle находит студента по email, а "
                f"строка с пустым или чужим email отменяет весь импорт; {FILL_IDS}"] if without else []
    return table, warnings


def _some(ids: list[str], shown: int = 5) -> str:
    more = f" и ещё {len(ids) - shown}" if len(ids) > shown else ""
    return f"{len(ids)}: {', '.join(ids[:shown])}{more}"


def write_table(path: Path, table: list[list[str]]) -> Path:
    """UTF-8 CSV with a comma, quoted where needed (both LMSs read it; Excel's own BOM is not needed)."""
    path = Path(path)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(table)
    return path
