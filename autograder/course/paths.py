"""This repository's lessons on disk: their text sources, the notebooks built from them, which need a GPU.

A lesson is written as a text file, ``lessons/NN_name.py`` (:mod:`autograder.course.authoring`); ``course release``
(:mod:`autograder.course.release`) builds nbgrader's source notebook ``solutions/NN_name/NN_name.ipynb`` from it and
the student notebook ``notebooks/NN_name/NN_name.ipynb``.  Both built notebooks are committed.  The text sources
live outside ``solutions/``: nbgrader copies every file of a source folder into the student release.
"""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository: autograder/course/paths.py
TEXT_SOURCES = "lessons"
SOLUTIONS = "solutions"
RELEASE = "notebooks"
#: Files of notebooks/ that are not built from a lesson but go to the students as they are.
RELEASE_FILES = ("GLOSSARY.md",)


def checkout(cwd: Path | None = None) -> Path:
    """The course checkout a command works on: the repository this package sits in (an editable install), else the
    current folder (the package installed elsewhere, the command run in a clone of the course)."""
    if (ROOT / SOLUTIONS).is_dir():
        return ROOT
    return Path(cwd or Path.cwd()).resolve()


def lessons(root: Path = ROOT) -> list[str]:
    """Lesson (= nbgrader assignment) ids: the folders of solutions/, in order."""
    return sorted(p.name for p in (root / SOLUTIONS).iterdir() if (p / f"{p.name}.ipynb").exists())


def text_lessons(root: Path = ROOT) -> list[str]:
    """Lessons written as text sources: lessons/NN_name.py, in order."""
    return sorted(p.stem for p in (root / TEXT_SOURCES).glob("*.py"))


def text_source(lesson: str, root: Path = ROOT) -> Path:
    return root / TEXT_SOURCES / f"{lesson}.py"


def source_notebook(lesson: str, root: Path = ROOT) -> Path:
    """nbgrader's source notebook of a lesson (answers and hidden tests), built from its text source."""
    return root / SOLUTIONS / lesson / f"{lesson}.ipynb"


def student_notebook(lesson: str, root: Path = ROOT) -> Path:
    return root / RELEASE / lesson / f"{lesson}.ipynb"


def is_gpu_lesson(lesson: str) -> bool:
    """A lesson graded on a GPU machine (and merged into the class gradebook): one of its checks
    needs a CUDA GPU (``Check.needs_gpu``).  A folder with no lesson module is not one."""
    from ..checks.core import lesson_checks

    try:
        checks = lesson_checks(lesson)
    except KeyError:
        return False
    return any(check.needs_gpu for check in checks.values())
