"""Write nbgrader source notebooks from Python: cells with the right nbgrader metadata.

For course authors only.  ``solutions/*/*.ipynb`` are the source of truth; this helper just
spares hand-writing nbgrader metadata and keeps every graded cell in the one form that
:mod:`autograder.nbgrader_ext` understands (the points come from the check registry).
"""
from __future__ import annotations

import nbformat

from .core import format_points, get_check

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


class SourceNotebook:
    """An nbgrader source notebook being built cell by cell."""

    def __init__(self) -> None:
        self.nb = nbformat.v4.new_notebook()
        self.nb.metadata["kernelspec"] = KERNELSPEC
        self.nb.metadata["language_info"] = {"name": "python"}
        self._ids: set[str] = set()

    def _add(self, cell, grade_id: str | None = None, **nbgrader):
        if grade_id is not None:
            if grade_id in self._ids:
                raise ValueError(f"duplicate grade_id {grade_id}")
            self._ids.add(grade_id)
            cell.metadata["nbgrader"] = {"grade_id": grade_id, "schema_version": 3, "task": False, **nbgrader}
        cell.id = grade_id.replace(".", "-") if grade_id else f"cell-{len(self.nb.cells)}"
        self.nb.cells.append(cell)

    def markdown(self, text: str) -> None:
        self._add(nbformat.v4.new_markdown_cell(text.strip("\n")))

    def code(self, source: str) -> None:
        """An ordinary cell (demos, plots): runs, not graded, editable."""
        self._add(nbformat.v4.new_code_cell(source.strip("\n")))

    def setup(self, source: str, grade_id: str = "setup") -> None:
        """A read-only cell the student runs as is (imports, given helpers)."""
        self._add(nbformat.v4.new_code_cell(source.strip("\n")), grade_id,
                  grade=False, locked=True, solution=False)

    def solution(self, grade_id: str, source: str) -> None:
        """An answer cell: code between ### BEGIN/END SOLUTION is replaced by the stub."""
        self._add(nbformat.v4.new_code_cell(source.strip("\n")), grade_id,
                  grade=False, locked=False, solution=True)

    def test(self, check_id: str, *names: str, hidden_cases: list | None = None) -> None:
        """A graded test cell calling one registered check; hidden cases only in the source."""
        check = get_check(check_id)
        args = ", ".join([repr(check_id), *names])
        lines = [f"# Проверка: {check.title} ({format_points(check.points)} б.)",
                 "from autograder import grade", f"grade({args})"]
        if hidden_cases:
            lines += ["### BEGIN HIDDEN TESTS", f"grade({args}, cases={hidden_cases!r})",
                      "### END HIDDEN TESTS"]
        grade_id = "test_" + check_id.replace(".", "_")
        self._add(nbformat.v4.new_code_cell("\n".join(lines)), grade_id,
                  grade=True, locked=True, solution=False, points=check.points)

    def write(self, path: str) -> None:
        nbformat.validate(self.nb)
        nbformat.write(self.nb, path)
