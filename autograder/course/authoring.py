"""Lesson sources: ``lessons/NN_name.py`` in jupytext's percent format <-> nbgrader source notebooks.

A lesson is written and reviewed as a text file; ``course release`` builds the nbgrader source
notebook ``solutions/NN_name/NN_name.ipynb`` from it (and from that the student notebook).  The
text carries everything the notebook holds except outputs:

- the notebook metadata (kernelspec, language_info) in the YAML header;
- one ``# %%`` line per cell (``# %% [markdown]`` for text), followed by the cell's metadata as
  ``key=<json>`` pairs: ``nbgrader={...}`` for the cells nbgrader knows (setup, answers, tests);
- a cell's id as ``id="..."`` only where it is not the default: the nbgrader ``grade_id`` for an
  nbgrader cell, ``cell-<index>`` (its position, from 0) for any other cell.

The build is deterministic: the same text gives the same notebook, byte for byte.
"""
from __future__ import annotations

import copy

try:  # an author's tool (the dev extra): a student's or instructor's base install has no jupytext
    import jupytext
except ImportError as error:
    raise ImportError("для course release, check-release и lesson-text нужен jupytext (инструмент автора "
                      "курса): pip install -e '.[dev]' (make делает это сам)") from error
import nbformat

#: jupytext's percent format with a header of the notebook metadata the lessons use, and
#: nothing of jupytext's own (no version numbers that change with the tool).
TEXT_FORMAT = {"extension": ".py", "format_name": "percent",
               "notebook_metadata_filter": "kernelspec,language_info,-jupytext"}


def default_cell_id(cell: nbformat.NotebookNode, index: int) -> str:
    """The id a cell gets when the text source names none: its grade_id, else ``cell-<index>``."""
    grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
    return grade_id if grade_id else f"cell-{index}"


def notebook_from_text(text: str, name: str = "lesson") -> nbformat.NotebookNode:
    """The nbgrader source notebook a text source describes (``name`` is for error messages)."""
    nb = jupytext.reads(text, fmt=TEXT_FORMAT)
    nb.metadata.pop("jupytext", None)
    nb.nbformat, nb.nbformat_minor = 4, 5
    seen: dict[str, int] = {}
    for index, cell in enumerate(nb.cells):
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
        if cell.id != default_cell_id(cell, index):
            cell.metadata = nbformat.from_dict({"id": cell.id, **cell.metadata})
    return jupytext.writes(nb, fmt=TEXT_FORMAT)


def notebook_json(nb: nbformat.NotebookNode) -> str:
    """The notebook file's text exactly as ``nbformat.write`` puts it on disk."""
    return nbformat.writes(nb) + "\n"
