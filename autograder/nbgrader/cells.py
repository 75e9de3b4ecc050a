"""The grammar of this course's notebook cells, on nbgrader's own cell metadata.

* an *answer cell* is an nbgrader solution cell (the student writes it);
* a *test cell* is a graded code cell that is not a solution: it holds only
  ``grade("lessonNN.check", name, ..., cases=[...])`` statements (and ``from autograder import grade``),
  the hidden ones between ``### BEGIN HIDDEN TESTS`` and ``### END HIDDEN TESTS``.

Every module that asks "what is this cell" asks here (the Execute step, submission repair,
parallel autograde, ``course grade``, the report, the tests).
"""
from __future__ import annotations

import ast
import dataclasses


def grade_id(cell) -> str | None:
    """The cell's nbgrader grade id; None for a plain cell or broken metadata (a submission may
    carry anything there)."""
    meta = cell.get("metadata", {}).get("nbgrader")
    if not isinstance(meta, dict):
        return None
    value = meta.get("grade_id")
    return value if isinstance(value, str) else None


def is_answer_cell(cell) -> bool:
    from nbgrader.utils import is_solution  # here, not at import: the GPU benchmarks parse cells without nbgrader

    return isinstance(cell.get("metadata", {}).get("nbgrader"), dict) and bool(is_solution(cell))


def is_test_cell(cell) -> bool:
    from nbgrader.utils import is_grade, is_solution

    return (cell.get("cell_type") == "code" and isinstance(cell.get("metadata", {}).get("nbgrader"), dict)
            and bool(is_grade(cell)) and not is_solution(cell))


@dataclasses.dataclass(frozen=True)
class GradeCall:
    """One ``grade(check_id, *names, cases=...)`` statement read from a test cell."""

    check_id: str
    names: tuple[str, ...]
    cases: list | None
    hidden: bool = False  # written between ### BEGIN/END HIDDEN TESTS (students never see it)


HIDDEN_BEGIN, HIDDEN_END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"


def hidden_lines(source: str) -> set[int]:
    hidden, inside = set(), False
    for number, line in enumerate(source.splitlines(), start=1):
        if line.strip() == HIDDEN_BEGIN:
            inside = True
        elif line.strip() == HIDDEN_END:
            inside = False
        elif inside:
            hidden.add(number)
    return hidden


def parse_grade_cell(source: str) -> list[GradeCall] | None:
    """The grade calls of a test cell, or None when the cell holds anything else."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    hidden = hidden_lines(source)
    calls = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "autograder" \
                and [a.name for a in node.names] == ["grade"]:
            continue
        if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
            return None
        call = node.value
        if not (isinstance(call.func, ast.Name) and call.func.id == "grade" and call.args
                and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)
                and all(isinstance(a, ast.Name) for a in call.args[1:])
                and all(k.arg == "cases" for k in call.keywords)):
            return None
        try:
            cases = ast.literal_eval(call.keywords[0].value) if call.keywords else None
        except ValueError:
            return None
        calls.append(GradeCall(call.args[0].value, tuple(a.id for a in call.args[1:]), cases,
                               node.lineno in hidden))
    return calls or None
