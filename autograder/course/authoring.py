"""Lesson sources: ``lessons/NN_name.py`` in jupytext's percent format <-> nbgrader source notebooks.

A lesson is written and reviewed as a text file; ``course release`` builds the nbgrader source
notebook ``solutions/NN_name/NN_name.ipynb`` from it (and from that the student notebook).  The
text carries everything the notebook holds except outputs:

- the notebook metadata (kernelspec, language_info) in the YAML header;
- one ``# %%`` line per cell (``# %% [markdown]`` for text), followed by the cell's metadata as
  ``key=<json>`` pairs: ``nbgrader={...}`` for the cells nbgrader knows (setup, answers, tests);
- a cell's id as ``id="..."`` only where it is not the default: the nbgrader ``grade_id`` for an
  nbgrader cell, ``cell-<index>`` (its position, from 0) for any other cell.

What another place of the course already says, the text does not repeat; the build writes it:

- a test cell's points (nbgrader ``points``) and its first line ``# Проверка: {title} ({N} б.)``
  (a bonus check: ``(+N б. сверх максимума)`` and 0 points in nbgrader, its points being extra credit)
  come from the check registry (``@check`` in ``autograder/lessons/lessonNN/checks.py``);
- a GPU lesson's Colab badge and install cell come from ``autograder/course/settings.py``: the text holds
  the line ``{{COLAB_BADGE}}`` (in the first markdown cell) and a code cell ``# {{COURSE_INSTALL}}``.

The build is deterministic: the same text gives the same notebook, byte for byte.
"""
from __future__ import annotations

import copy
import re
from pathlib import Path

import nbformat

from . import author_tools, settings

try:  # an author's tool (the dev extra): a student's or instructor's base install has no jupytext
    import jupytext
except ImportError as error:  # RuntimeError: the `course` command says it in one line
    raise RuntimeError(author_tools.message("course release, check-release, lesson-text и publish", ["jupytext"])) \
        from error
from ..checks.core import format_points, get_check
from ..nbgrader.cells import parse_grade_cell

#: jupytext's percent format with a header of the notebook metadata the lessons use, and
#: nothing of jupytext's own (no version numbers that change with the tool).
TEXT_FORMAT = {"extension": ".py", "format_name": "percent",
               "notebook_metadata_filter": "kernelspec,language_info,-jupytext"}


def default_cell_id(cell: nbformat.NotebookNode, index: int) -> str:
    """The id a cell gets when the text source names none: its grade_id, else ``cell-<index>``."""
    grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
    return grade_id if grade_id else f"cell-{index}"


#: The first line of a built test cell (``check_heading``); a text source holds none.
HEADING = "# Проверка: "


def is_test_cell(cell: nbformat.NotebookNode) -> bool:
    nbgrader = cell.metadata.get("nbgrader", {})
    return cell.cell_type == "code" and bool(nbgrader.get("grade")) and not nbgrader.get("solution")


def check_heading(check_id: str) -> str:
    """A test cell's first line: the check's title and points, as the registry has them."""
    check = get_check(check_id)
    points = format_points(check.points)
    return f"{HEADING}{check.title} " + (f"(+{points} б. сверх максимума)" if check.bonus else f"({points} б.)")


def check_points(check_id: str) -> float:
    """A test cell's nbgrader points: the check's points, 0 for a bonus check (extra credit, outside the maximum)."""
    check = get_check(check_id)
    return 0 if check.bonus else check.points


def cell_check(cell: nbformat.NotebookNode, where: str) -> str:
    """The one check a test cell's grade() calls name (the same check visible and hidden counts once)."""
    calls = parse_grade_cell(cell.source)
    if not calls:
        raise ValueError(f"{where}: в ячейке проверки должны быть только вызовы grade(...)")
    ids = sorted({call.check_id for call in calls})
    if len(ids) != 1:
        raise ValueError(f"{where}: в одной ячейке проверки вызывается несколько проверок ({', '.join(ids)}); "
                         f"у каждой проверки своя ячейка")
    return ids[0]


def _build_facts(cell: nbformat.NotebookNode, lesson: str, where: str) -> None:
    """Write into a cell what the registry and settings.py say (points, heading, Colab badge, install cell)."""
    if is_test_cell(cell):
        if cell.source.startswith(HEADING) or "points" in cell.metadata.nbgrader:
            raise ValueError(f"{where}: строку «{HEADING.strip()} ...» и points ячейки проверки пишет сборка из "
                             f"реестра проверок (@check); уберите их из исходника")
        check_id = cell_check(cell, where)
        cell.metadata.nbgrader["points"] = check_points(check_id)
        cell.source = f"{check_heading(check_id)}\n{cell.source}"
    elif cell.cell_type == "markdown" and settings.COLAB_BADGE_MARK in cell.source:
        cell.source = "\n".join(settings.colab_badge(lesson) if line == settings.COLAB_BADGE_MARK else line
                                 for line in cell.source.split("\n"))
    elif cell.cell_type == "code" and cell.source == settings.INSTALL_CELL_MARK:
        cell.source = settings.install_cell()


def _badge_pattern() -> re.Pattern:
    badge = re.escape(settings.colab_badge("LESSONX"))
    return re.compile("^" + badge.replace("LESSONX", r"(?P<lesson>[\w.-]+)", 1).replace("LESSONX", "(?P=lesson)")
                      + "$", re.MULTILINE)


def _strip_facts(cell: nbformat.NotebookNode) -> None:
    """``_build_facts`` undone: what the build writes from the registry and settings.py becomes its placeholder."""
    if is_test_cell(cell):
        cell.metadata.nbgrader.pop("points", None)
        calls = parse_grade_cell(cell.source)
        first, _, rest = cell.source.partition("\n")
        if calls and len({c.check_id for c in calls}) == 1 and first == check_heading(calls[0].check_id):
            cell.source = rest
    elif cell.cell_type == "markdown":
        cell.source = _badge_pattern().sub(settings.COLAB_BADGE_MARK, cell.source)
    elif cell.cell_type == "code" and cell.source == settings.install_cell():
        cell.source = settings.INSTALL_CELL_MARK


def notebook_from_text(text: str, name: str = "lesson", lesson: str | None = None) -> nbformat.NotebookNode:
    """The nbgrader source notebook a text source describes (``name`` is for error messages; ``lesson``, for the
    Colab badge, is the stem of ``name`` unless given)."""
    lesson = lesson or Path(name).stem
    nb = jupytext.reads(text, fmt=TEXT_FORMAT)
    nb.metadata.pop("jupytext", None)
    nb.nbformat, nb.nbformat_minor = 4, 5
    seen: dict[str, int] = {}
    for index, cell in enumerate(nb.cells):
        _build_facts(cell, lesson, f"{name}: ячейка {index}")
        cell.id = str(cell.metadata.pop("id", None) or default_cell_id(cell, index))
        if cell.id in seen:
            raise ValueError(f"{name}: у ячеек {seen[cell.id]} и {index} один и тот же id {cell.id!r}; "
                             f"дайте одной из них другой id=\"...\" в её строке # %%")
        seen[cell.id] = index
    nbformat.validate(nb)
    return nb


def text_from_notebook(nb: nbformat.NotebookNode) -> str:
    """The text source of a notebook (outputs dropped): ``notebook_from_text`` gives it back."""
    nb = copy.deepcopy(nb)
    for index, cell in enumerate(nb.cells):
        _strip_facts(cell)
        if cell.id != default_cell_id(cell, index):
            cell.metadata = nbformat.from_dict({"id": cell.id, **cell.metadata})
    return jupytext.writes(nb, fmt=TEXT_FORMAT)


def notebook_json(nb: nbformat.NotebookNode) -> str:
    """The notebook file's text exactly as ``nbformat.write`` puts it on disk."""
    return nbformat.writes(nb) + "\n"
