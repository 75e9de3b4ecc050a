"""Verdicts as data: what a graded test cell carries besides the text people read.

The autograde step (:mod:`autograder.nbgrader.execute`) writes, into the metadata of a test cell's
first output, one dict per ``grade(...)`` call under :data:`KEY`::

    {"check_id": "lesson02.memory", "title": "...", "points": 2.0, "passed": false,
     "hidden": false, "mistake": "..." | null, "message": "...", "bonus": false, "skipped": false}

Everything that reads a graded notebook (feedback, bonus points, ``course grade``, the class
report) reads these, never the text.
"""
from __future__ import annotations

KEY = "course_autograder_verdicts"


def of_cell(cell) -> list[dict]:
    """The verdicts a graded cell carries ([] for any other cell, or one graded before verdicts existed)."""
    return [v for output in cell.get("outputs", []) for v in output.get("metadata", {}).get(KEY, [])]


def metadata(verdicts: list[dict]) -> dict:
    """The output metadata that carries ``verdicts``."""
    return {KEY: verdicts}
