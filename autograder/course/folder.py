"""An instructor's nbgrader course folder (a class): its config, lessons, submissions, gradebook.

``autograder.course.paths`` is this repository (lesson sources, release, self-study grading);
this module is a course folder made from it (``course new``) where a class hands in work.
Used by ``course autograde`` (:mod:`autograder.course.autograde`), the status of each submission
(:mod:`autograder.course.status`), the report and the CSV export.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import warnings
import zlib
from pathlib import Path
from typing import Iterable

from nbgrader.coursedir import CourseDirectory
from traitlets.config import Config

from ..nbgrader.gradebook import open_gradebook, quiet
from .paths import is_gpu_lesson

DEFAULT_STRUCTURE = os.path.join("{nbgrader_step}", "{student_id}", "{assignment_id}")


@dataclasses.dataclass(frozen=True)
class Submission:
    lesson: str
    student: str

    def __str__(self) -> str:
        return f"{self.student}/{self.lesson}"


@dataclasses.dataclass
class CourseFolder:
    """An nbgrader course folder and its config (read as ``nbgrader`` reads it there)."""

    root: Path
    config: Config

    def coursedir(self, **traits) -> CourseDirectory:
        return CourseDirectory(config=copy.deepcopy(self.config), **traits)

    def path(self, step: str, student: str, lesson: str) -> Path:
        return Path(self.coursedir().format_path(step, student, lesson))

    def submitted(self, sub: Submission) -> Path:
        return self.path(self.coursedir().submitted_directory, sub.student, sub.lesson)

    def autograded(self, sub: Submission) -> Path:
        return self.path(self.coursedir().autograded_directory, sub.student, sub.lesson)

    def source(self, lesson: str) -> Path:
        return self.path(self.coursedir().source_directory, ".", lesson)

    @property
    def db_path(self) -> Path:
        return Path(self.coursedir().db_url[len("sqlite:///"):])

    def lessons(self) -> list[str]:
        """Assignments known to the gradebook (``nbgrader generate_assignment`` was run)."""
        if not self.db_path.exists():
            return []
        with open_gradebook(self.coursedir().db_url) as gradebook:
            return sorted(a.name for a in gradebook.assignments)


def load(folder: Path | str) -> CourseFolder:
    """The course in ``folder`` with its nbgrader config; sqlite paths made absolute."""
    from nbgrader.apps.nbgraderapp import NbGraderApp

    folder = Path(folder).resolve()
    if not (folder / "nbgrader_config.py").exists():
        raise ValueError(f"В {folder} нет nbgrader_config.py: укажите папку курса (--course).")
    app = NbGraderApp()
    with _cwd(folder), quiet():
        app.load_config_file()
    config = copy.deepcopy(app.config)
    if "AutogradeApp" in config:  # nbgrader's legacy name, merged as AutogradeApp does
        config.Autograde.merge(config.AutogradeApp)
    root = folder / config.CourseDirectory.get("root", ".")
    config.CourseDirectory.root = str(root.resolve())
    db_url = CourseDirectory(config=config).db_url
    if not db_url.startswith("sqlite:///"):
        raise ValueError(f"Параллельная автопроверка работает с sqlite-gradebook, а не с {db_url}.")
    config.CourseDirectory.db_url = "sqlite:///" + str(root.resolve() / db_url[len("sqlite:///"):])
    if CourseDirectory(config=config).directory_structure != DEFAULT_STRUCTURE:
        raise ValueError("Нужна стандартная CourseDirectory.directory_structure nbgrader.")
    return CourseFolder(root.resolve(), config)


def require_gradebook(course: CourseFolder) -> None:
    """Stop with the command that creates it when the course has no gradebook yet."""
    if not course.db_path.exists():
        found = len(list(course.path(course.coursedir().submitted_directory, ".", ".").glob("*/*/*.ipynb")))
        raise ValueError(f"В {course.root} нет {course.db_path.name}"
                         + (f" (а в submitted/ лежит работ: {found})" if found else "")
                         + ": его создаёт `make release` (или `nbgrader generate_assignment УРОК` для каждого "
                         "урока). Студентов добавлять не нужно: автопроверка добавит их сама.")


def select_lessons(known: Iterable[str], named: Iterable[str] = (), *, only_gpu: bool = False,
                   skip_gpu: bool = False) -> list[str]:
    """The lessons to grade: ``named`` (or all ``known``), then only or without the GPU ones."""
    known, named = sorted(known), list(named)
    unknown = [lesson for lesson in named if lesson not in known]
    if unknown:
        raise ValueError(f"Нет в gradebook: {', '.join(unknown)} (сначала nbgrader generate_assignment); "
                         f"есть: {', '.join(known) or 'ничего'}.")
    chosen = named or known
    if only_gpu:
        chosen = [lesson for lesson in chosen if is_gpu_lesson(lesson)]
    if skip_gpu:
        chosen = [lesson for lesson in chosen if not is_gpu_lesson(lesson)]
    return chosen


def find_submissions(course: CourseFolder, lessons: Iterable[str], students: Iterable[str] = ()) -> list[Submission]:
    """Every ``submitted/<student>/<lesson>/`` holding a notebook, sorted."""
    wanted = set(students)
    submitted = course.path(course.coursedir().submitted_directory, ".", ".")
    found = []
    for lesson in lessons:
        for folder in submitted.glob(f"*/{lesson}"):
            student = folder.parent.name
            if any(folder.glob("*.ipynb")) and (not wanted or student in wanted):
                found.append(Submission(lesson, student))
    return sorted(found, key=lambda s: (s.lesson, s.student))


def shard(submissions: list[Submission], index: int, count: int) -> list[Submission]:
    """Shard ``index`` of ``count`` (1-based): the same split on every machine (crc32, not hash())."""
    if not 1 <= index <= count:
        raise ValueError(f"Шард {index}/{count}: номер должен быть от 1 до {count}.")
    return [s for s in submissions if zlib.crc32(str(s).encode()) % count == index - 1]


@contextlib.contextmanager
def _cwd(folder: Path):
    previous = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(previous)


