"""Helpers that several test modules share (those of the banks are in tests/bank.py, fixtures in conftest.py)."""
from __future__ import annotations

import ast
import textwrap

import nbformat
import numpy as np

from autograder.course import grading
from autograder.course import paths as course


def student(source: str, name: str = "fused_rms_norm", **constants):
    """A function defined as a notebook cell defines it (module __main__, numpy imported, ``constants`` set)."""
    namespace = {"__name__": "__main__", "np": np, **constants}
    exec(compile(textwrap.dedent(source), "<student>", "exec"), namespace)
    return namespace[name]


def reported_facts(message: str) -> dict:
    """What a reporting student function saw: the dict it raised as ``"FACTS" + repr(facts) + "FACTS"``."""
    return ast.literal_eval(message.split("FACTS")[1])


def without_demonstrations(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook with its demonstration cells (the code cells nbgrader does not track) emptied: what a student
    hands in who deleted them, graded exactly as the whole notebook.  The class-level tests (faults, isolation,
    attacks, parallel grading) grade dozens of lesson-02 notebooks and are not about its demonstrations, which
    take 3.5 of the 8 s a lesson-02 notebook takes to grade (its 128 MiB peak demo, its timing sweep)."""
    for cell in nb.cells:
        if cell.cell_type == "code" and "nbgrader" not in cell.metadata:
            cell.source = ""
    return nb


def submission(lesson: str, answers: dict | None = None) -> nbformat.NotebookNode:
    """The student notebook of ``lesson`` with the reference answers, ``answers`` over them, without its
    demonstrations (:func:`without_demonstrations`)."""
    return without_demonstrations(grading.fill_answers(lesson, {**grading.reference_answers(lesson), **(answers or {})}))


def untouched_submission(lesson: str) -> nbformat.NotebookNode:
    """The student notebook as released, without its demonstrations: a student who handed in nothing."""
    return without_demonstrations(nbformat.read(course.student_notebook(lesson), as_version=4))


def scores_of_reference_and_untouched(lesson: str, tmp_path) -> dict[str, dict[str, float]]:
    """nbgrader's grades of the reference and of the untouched student notebook: student -> {test cell: score}."""
    grades = grading.grade_notebooks(lesson, {
        "reference": grading.fill_answers(lesson, grading.reference_answers(lesson)),
        "untouched": nbformat.read(course.student_notebook(lesson), as_version=4)}, tmp_path)
    return {name: {g.cell: g.score for g in cells} for name, cells in grades.items()}
