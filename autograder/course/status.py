"""Where each submission of a class stands: not submitted, submitted but not graded (why), graded.

One answer for every tool: ``course autograde`` decides what to (re)grade from it, the class
report and the CSV export show it.  A submission is *graded* only when the gradebook holds a
score for every automatically graded cell AND its autograded notebook carries the outputs of its
test cells; anything less (a run killed between nbgrader writing the notebook and the grades, a
submission nbgrader failed on) is *not graded*, never a zero.  Why grading failed is kept in
``autograde_errors/<lesson>__<student>.log`` by ``course autograde`` (first line: the reason).
"""
from __future__ import annotations

import os

import dataclasses
import enum
from pathlib import Path

from ..nbgrader import submission as submission_module
from ..nbgrader.gradebook import open_gradebook
from .folder import CourseFolder, Submission
from ..nbgrader.execute import OUTPUT_CUT_MIME
from ..nbgrader.autograde import incomplete_grading, read_notebook

ERROR_LOGS = "autograde_errors"


class State(enum.Enum):
    NOT_SUBMITTED = "не сдана"
    UNGRADED = "сдана, не проверена"
    GRADED = "проверена"


@dataclasses.dataclass(frozen=True)
class Status:
    state: State
    reason: str = ""  # why not graded (Russian)

    def __str__(self) -> str:
        return f"{self.state.value}: {self.reason}" if self.reason else self.state.value


def error_log(course_root: Path, lesson: str, student: str) -> Path:
    return Path(course_root) / ERROR_LOGS / f"{lesson}__{student}.log"


def write_error_log(course_root: Path, lesson: str, student: str, reason: str, log: str) -> None:
    path = error_log(course_root, lesson, student)
    path.parent.mkdir(exist_ok=True)
    path.write_text(f"ОШИБКА: {reason}\n\n{log}", encoding="utf-8")


def clear_error_log(course_root: Path, lesson: str, student: str) -> None:
    error_log(course_root, lesson, student).unlink(missing_ok=True)


def recorded_error(course_root: Path, lesson: str, student: str) -> str:
    """The reason ``course autograde`` recorded for a failed submission ("" when none)."""
    path = error_log(course_root, lesson, student)
    try:
        with open(path, encoding="utf-8") as handle:
            first = handle.readline().strip()
    except OSError:
        return ""
    return first.removeprefix("ОШИБКА: ")


def status(course, lesson: str, student: str) -> Status:
    """The state of one student's work on one lesson in a course (:class:`course_folder.CourseFolder`)."""
    submitted = course.path(course.coursedir().submitted_directory, student, lesson)
    if not submission_module.notebooks_in(submitted):
        return Status(State.NOT_SUBMITTED)
    graded = course.path(course.coursedir().autograded_directory, student, lesson)
    names = [p.name for p in submission_module.notebooks_in(submitted)]
    if not all((graded / name).exists() for name in names):
        return Status(State.UNGRADED, recorded_error(course.root, lesson, student) or "ещё не проверялась")
    missing = incomplete_grading(course.coursedir().db_url, lesson, student, [str(graded / n) for n in names])
    if missing:
        why = recorded_error(course.root, lesson, student)
        return Status(State.UNGRADED, f"проверка не завершена ({missing})" + (f"; {why}" if why else ""))
    return Status(State.GRADED)


def anomalies(course, lesson: str, student: str) -> list[submission_module.Anomaly]:
    """What the instructor should know of a submission: extra files, repaired structure, cut output."""


    coursedir = course.coursedir()
    submitted = course.path(coursedir.submitted_directory, student, lesson)
    notebooks = submission_module.notebooks_in(submitted)
    found = submission_module.link_anomalies(submitted) if submitted.is_dir() else []
    linked = {os.path.join(submitted, name) for name, _ in submission_module.links_in(submitted)} \
        if submitted.is_dir() else set()
    notebooks = [p for p in notebooks if str(p) not in linked]  # never read through a link
    found += submission_module.extra_files(submitted, {p.name for p in notebooks} | {os.path.basename(p)
                                                                                    for p in linked})
    with open_gradebook(coursedir.db_url) as gradebook:
        for path in notebooks:
            invalid = submission_module.is_valid_notebook(path)
            if invalid:
                found.append(submission_module.Anomaly("invalid_notebook", f"{path.name}: {invalid}"))
                continue
            try:
                cells = submission_module.source_cells(gradebook, path.stem, lesson)
            except Exception:
                found.append(submission_module.Anomaly("extra_file", f"ноутбук {path.name} не входит в урок"))
                continue
            found += submission_module.repair(read_notebook(str(path)), cells)
    graded = course.path(coursedir.autograded_directory, student, lesson)
    for path in submission_module.notebooks_in(graded):
        try:
            nb = read_notebook(str(path))
        except Exception:
            continue
        cut = sum(1 for c in nb.cells for o in c.get("outputs", []) if OUTPUT_CUT_MIME in o.get("data", {}))
        if cut:
            found.append(submission_module.Anomaly("output_cut", f"обрезан слишком большой вывод ячеек: {cut}"))
        found += attempts(nb)
    return found


#: What a graded notebook's outputs say the submission's code tried: kind -> (the words its verdicts carry, what
#: the instructor reads).
ATTEMPTS = {
    "tampering": ("Нарушение правил проверки", "код нарушал правила проверки (guard)"),
    "process_ended": ("Процесс с вашим кодом завершился", "код завершал процесс проверки (os._exit, сигнал)"),
    "hidden_memory": ("в обход NumPy", "память выделялась в обход tracemalloc (mmap, ctypes)"),
    "notebook_time_limit": ("время на проверку ноутбука", "истекло время на проверку ноутбука"),
}


def attempts(nb) -> list[submission_module.Anomaly]:
    """What the submission's code tried, read from its graded notebook: one line per kind, with the cells it was in."""
    found = []
    for kind, (words, what) in ATTEMPTS.items():
        cells = [c.metadata.get("nbgrader", {}).get("grade_id") or f"ячейка {i + 1}" for i, c in enumerate(nb.cells)
                 if any(words in _output_text(o) for o in c.get("outputs", []))]
        if cells:
            found.append(submission_module.Anomaly(kind, f"{what}: {', '.join(cells[:5])}"
                                                         + (f" и ещё {len(cells) - 5}" if len(cells) > 5 else "")))
    return found


def _output_text(output) -> str:
    data = output.get("data", {})
    return "\n".join(str(part) for part in (output.get("text", ""), output.get("evalue", ""),
                                            data.get("text/plain", ""), data.get("text/markdown", "")))


def pending(course: CourseFolder, submissions: list[Submission], force: bool = False) -> list[Submission]:
    """Those to grade: not graded to the end (:func:`autograder.course.status.status`), submitted again
    since they were graded (nbgrader's own rule), or all with ``force``."""
    if force:
        return list(submissions)
    coursedir = course.coursedir()
    todo = []
    for sub in submissions:
        if status(course, sub.lesson, sub.student).state is not State.GRADED:
            todo.append(sub)
            continue
        new = coursedir.get_existing_timestamp(str(course.submitted(sub)))
        old = coursedir.get_existing_timestamp(str(course.autograded(sub)))
        if new is not None and old is not None and new > old:
            todo.append(sub)
    return todo
