"""``course release``: each lesson's text source (``lessons/NN_name.py``) built into the nbgrader source notebook
(``solutions/``) and the student notebook (``notebooks/``, nbgrader generate_assignment); ``check-release``
finds what is stale.
"""
from __future__ import annotations

import filecmp
import shutil
import tempfile
from pathlib import Path

import nbformat

from .nbgrader_cli import nbgrader_batch, new_course
from .paths import (RELEASE, ROOT, SOLUTIONS, TEXT_SOURCES, lessons, source_notebook, student_notebook,
                    text_lessons, text_source)


def build_source_notebook(lesson: str, root: Path = ROOT) -> Path:
    """Write solutions/<lesson>/<lesson>.ipynb from the text source lessons/<lesson>.py."""
    from .authoring import notebook_from_text

    text = text_source(lesson, root)
    if not text.exists():
        raise ValueError(f"у урока {lesson} нет исходника {TEXT_SOURCES}/{lesson}.py")
    nb = notebook_from_text(text.read_text(encoding="utf-8"), name=f"{TEXT_SOURCES}/{lesson}.py")
    path = source_notebook(lesson, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def release(root: Path = ROOT, only: list[str] | None = None, scratch: bool = False) -> list[Path]:
    """Build solutions/ from the text sources in lessons/, then notebooks/ from solutions/ (nbgrader's
    generate_assignment for every lesson, in one process: :func:`nbgrader_batch`)."""
    chosen = only or text_lessons(root)
    sources = [build_source_notebook(lesson, root) for lesson in chosen]
    if chosen:
        nbgrader_batch([("generate_assignment", lesson, "--force") for lesson in chosen], cwd=root, scratch=scratch)
    return [path for lesson, source in zip(chosen, sources) for path in (source, student_notebook(lesson, root))]


def stale_release(root: Path = ROOT) -> list[str]:
    """Built notebooks (solutions/ and notebooks/) that differ from a fresh build of lessons/;
    empty when both are current."""
    problems = []
    sources = text_lessons(root)
    with tempfile.TemporaryDirectory(prefix="course-release-") as scratch:
        course = new_course(Path(scratch), root)
        shutil.copytree(root / TEXT_SOURCES, course / TEXT_SOURCES)
        release(course, scratch=True)
        for lesson in sources:
            redo = f"выполните `make release` (урок правят в {TEXT_SOURCES}/{lesson}.py, а не в ноутбуках)"
            for fresh, committed in ((source_notebook(lesson, course), source_notebook(lesson, root)),
                                     (student_notebook(lesson, course), student_notebook(lesson, root))):
                name = committed.relative_to(root)
                if not committed.exists():
                    problems.append(f"{lesson}: нет {name}: выполните `make release`")
                elif not filecmp.cmp(fresh, committed, shallow=False):
                    problems.append(f"{lesson}: {name} не совпадает с тем, что собирается из {TEXT_SOURCES}/{lesson}.py: {redo}")
            built = {p.name for p in (course / RELEASE / lesson).iterdir()}
            committed_files = {p.name for p in (root / RELEASE / lesson).glob("*") if not p.name.startswith(".")}
            problems += [f"{lesson}: {RELEASE}/{lesson}/{name} не собирается `make release` (лишний файл)"
                         for name in sorted(committed_files - built)]
    problems += [f"{name}: у {SOLUTIONS}/{name} нет исходника {TEXT_SOURCES}/{name}.py"
                 for name in lessons(root) if name not in sources]
    released = {p.parent.name for p in (root / RELEASE).glob("*/*.ipynb")}
    problems += [f"{name}: у {RELEASE}/{name} нет исходника {TEXT_SOURCES}/{name}.py"
                 for name in sorted(released - set(sources))]
    return problems
