"""Banks of submissions that grade the grader: each lesson has one in tests/banks/.

A bank module defines ``LESSON`` (the lesson id), ``CORRECT`` (answers written differently from
the reference, which must still get full marks) and ``WRONG`` (known mistakes, each losing
exactly the checks it names).  Answers replace the reference's answer cells by grade_id; cells
not named keep the reference answer.  The same bank drives the fast in-process check tests and
the end-to-end ``nbgrader autograde`` test.

A wrong entry is asserted exactly (tests/test_banks.py): ``loses``, the checks it fails; ``mistakes``, the
known mistakes its failures name (the verdicts' ``mistake`` field, :mod:`autograder.checks.mistakes`),
empty when none may be named; ``says``, a phrase one of the failure messages contains.
"""
from __future__ import annotations

import ast
import dataclasses
import importlib
import io
import pkgutil
import tokenize

import nbformat

from autograder.course import paths as course

from autograder.course import grading
from autograder.nbgrader.cells import GradeCall, parse_grade_cell


@dataclasses.dataclass(frozen=True)
class Submission:
    """Answers (grade_id -> code) and the checks they must fail (all others pass)."""

    name: str
    answers: dict[str, str]
    loses: frozenset[str] = frozenset()
    says: str | None = None  # a phrase the first failure message of some lost check must contain
    mistakes: frozenset[str] = frozenset()  # exactly the known mistakes its failures name (none: they name none)


def wrong(name: str, answers: dict[str, str], loses, says: str | None = None, *, mistakes=()) -> Submission:
    """A known-wrong submission; ``mistakes``: the known mistake (or the set of them) its failures name."""
    return Submission(name, answers, frozenset(loses), says,
                      frozenset([mistakes] if isinstance(mistakes, str) else mistakes))


def correct(name: str, answers: dict[str, str]) -> Submission:
    return Submission(name, answers)


def reference_code(lesson: str) -> dict[str, str]:
    """The reference answers (grade_id -> code) without their comments, for bank entries to edit: a wrong
    entry is the reference with one edit, so it cannot drift from the lesson's solution."""
    return {cell: without_comments(source) for cell, source in grading.reference_answers(lesson).items()}


def reference_functions(lesson: str) -> dict:
    """The reference answers run into a namespace of their own (``np`` imported): name -> what they define."""
    import numpy as np

    ns = {"np": np}
    for name, source in grading.reference_answers(lesson).items():
        exec(compile(source, f"<{name}>", "exec"), ns)
    return ns


def notebook_function(lesson: str, name: str) -> str:
    """The source of the function ``name`` that a code cell of the lesson's source notebook defines (a demo
    the lesson shows, e.g. its naive version), without comments: a bank entry made of the lesson's own code."""
    nb = nbformat.read(course.source_notebook(lesson), as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue  # a cell with IPython magics defines no function of the bank's
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return without_comments(ast.get_source_segment(cell.source, node) + "\n")
    raise LookupError(f"bank drift: no function {name} in the notebook of {lesson}")


def without_comments(source: str) -> str:
    """``source`` without its comments (found by the tokenizer, never inside a string): a line that was only
    a comment goes, the code before a comment keeps no trailing white space."""
    lines = source.splitlines(keepends=True)
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            row, col = token.start
            lines[row - 1] = lines[row - 1][:col].rstrip() + "\n"
            if not lines[row - 1].strip():
                lines[row - 1] = ""
    return "".join(lines)


def edited(source: str, *edits: tuple[str, str]) -> str:
    """``source`` with each ``(old, new)`` edit made; each ``old`` must stand in it exactly once."""
    for old, new in edits:
        assert source.count(old) == 1, f"bank drift: {old!r} stands {source.count(old)} times in the reference"
        source = source.replace(old, new)
    return source


def banks() -> dict[str, object]:
    """lesson id -> bank module."""
    import banks as package

    found = {}
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"banks.{info.name}")
        found[module.LESSON] = module
    return found


def grade_calls(lesson: str) -> dict[str, list[GradeCall]]:
    """Test cell grade_id -> its grade calls, hidden ones included (from the source notebook)."""
    nb = nbformat.read(course.source_notebook(lesson), as_version=4)
    calls = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and not meta.get("solution"):
            calls[meta["grade_id"]] = parse_grade_cell(cell.source)
    return calls


def cell_id(check_id: str) -> str:
    """The grade_id of the test cell that calls ``check_id`` (the lessons' naming rule)."""
    return "test_" + check_id.replace(".", "_")


def namespace(lesson: str, answers: dict[str, str]) -> dict:
    """Run the notebook's setup and answer cells (not demos or tests) into a fresh namespace."""
    nb = grading.fill_answers(lesson, {**grading.reference_answers(lesson), **answers})
    ns = {"__name__": "__main__"}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and (meta.get("solution") or (meta.get("locked") and not meta.get("grade"))):
            exec(compile(cell.source, f"<{meta['grade_id']}>", "exec"), ns)
    return ns
