"""nbgrader's Execute step, with graded test cells run by the grader instead of the kernel.

A graded test cell of this course holds only ``from autograder import grade`` and calls
``grade("lessonNN.name", obj, ..., cases=[...])`` (tests/test_notebooks.py enforces it).  For
such a cell :class:`IsolatedExecute` does not run the cell's code in the student's kernel: it
asks the kernel only to serialise the named objects, runs each check in a worker process from
the grader's own process (:mod:`autograder.isolation`) and writes the verdict as the cell's
outputs.  Whatever the student's cells did to the kernel — redefined ``grade``, patched numpy
or tracemalloc, silenced tracebacks — cannot reach the score.  Other cells run as usual.
"""
from __future__ import annotations

import ast
import base64
import dataclasses
import json
import os
import tempfile

from nbclient.util import run_sync
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute

from .core import CheckResult, get_check, shorten
from .isolation import run_check


@dataclasses.dataclass(frozen=True)
class GradeCall:
    """One ``grade(check_id, *names, cases=...)`` statement read from a test cell."""

    check_id: str
    names: tuple[str, ...]
    cases: list | None


def parse_grade_cell(source: str) -> list[GradeCall] | None:
    """The grade calls of a test cell, or None when the cell holds anything else."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
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
        calls.append(GradeCall(call.args[0].value, tuple(a.id for a in call.args[1:]), cases))
    return calls or None


EXPORT_CODE = """\
import autograder.export as _autograder_export
_autograder_export.dump({path!r}, {names!r}, globals())
del _autograder_export
"""


def verdict_outputs(results: list[CheckResult]) -> list[NotebookNode]:
    """The cell outputs nbgrader scores: a stdout report and the points, or an error."""
    report = "\n".join(r.summary() + (f"\n{r.message}" if r.passed and r.message else "")
                       for r in results)
    outputs = []
    if report:
        outputs.append(NotebookNode(output_type="stream", name="stdout", text=report + "\n"))
    failed = [r for r in results if not r.passed]
    if failed:
        message = shorten(f"{failed[0].title}\n{failed[0].message}", 4000)
        outputs.append(NotebookNode(output_type="error", ename="CheckFailed", evalue=message,
                                    traceback=["CheckFailed: " + message]))
    else:
        points = results[-1].points
        text = str(int(points)) if float(points).is_integer() else str(points)
        outputs.append(NotebookNode(output_type="execute_result", execution_count=None,
                                    metadata={}, data={"text/plain": text}))
    return outputs


class IsolatedExecute(Execute):
    """Execute that grades this course's test cells from the grader's process."""

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        grade_meta = cell.metadata.get("nbgrader", {})
        calls = None
        if cell.cell_type == "code" and grade_meta.get("grade") and not grade_meta.get("solution"):
            calls = parse_grade_cell(cell.source)
        if calls is None:
            return await super().async_execute_cell(cell, cell_index, execution_count, store_history)

        names = sorted({n for call in calls for n in call.names})
        with tempfile.TemporaryDirectory(prefix="autograder-export-") as folder:
            path = os.path.join(folder, "objects.json")
            source = cell.source
            cell.source = EXPORT_CODE.format(path=path, names=names)
            try:
                await super().async_execute_cell(cell, cell_index, execution_count, store_history=False)
            finally:
                cell.source = source
            exported = _read_export(path)
        cell.outputs = verdict_outputs([_run(call, exported) for call in calls])
        return cell

    # nbclient binds its sync wrapper to the base class's coroutine: rebind it to ours.
    execute_cell = run_sync(async_execute_cell)


def _read_export(path: str) -> dict:
    """JSON only: the file was written by the student's kernel and is not trusted."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _run(call: GradeCall, exported: dict) -> CheckResult:
    check = get_check(call.check_id)
    payloads = []
    for name in call.names:
        entry = exported.get(name)
        if not isinstance(entry, dict):
            return CheckResult(check.id, check.title, check.points, False,
                               f"Не удалось получить `{name}` из ноутбука (ядро не ответило).")
        if "error" in entry:
            return CheckResult(check.id, check.title, check.points, False, str(entry["error"]))
        try:
            payloads.append(base64.b64decode(entry["payload"]))
        except (KeyError, TypeError, ValueError):
            return CheckResult(check.id, check.title, check.points, False,
                               f"Не удалось получить `{name}` из ноутбука.")
    return run_check(call.check_id, payloads, call.cases)


def autograde_preprocessors() -> list:
    """nbgrader's autograde pipeline with Execute replaced by IsolatedExecute."""
    from nbgrader.converters import Autograde

    default = Autograde.class_traits()["autograde_preprocessors"].default()
    return [IsolatedExecute if p is Execute else p for p in default]
