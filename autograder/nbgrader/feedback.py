"""``nbgrader generate_feedback``: what a student sees of the graded test cells (hidden tests stay hidden).
"""
from __future__ import annotations

from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor

from ..checks import verdicts as verdicts_module
from .cells import HIDDEN_BEGIN, HIDDEN_END, hidden_lines, is_test_cell
from ..checks.core import FAIL_MARK, PASS_MARK, SKIP_MARK, shorten
from .execute import failure_output


def feedback_outputs(verdicts: list[dict]) -> list[NotebookNode]:
    """What a student's feedback shows for a test cell: visible checks in full, hidden ones only
    as passed or not (no cases, seeds or shapes), each check once."""
    lines, failure = [], None
    shown = [v for v in verdicts if not v["hidden"]]
    secret = [v for v in verdicts if v["hidden"]]
    for v in shown:  # a failed one is told by the error below, once
        if v["passed"]:
            lines.append(f"{PASS_MARK} {v['title']}")
        elif v.get("skipped"):
            lines.append(f"{SKIP_MARK} {v['title']}: не выполнен (бонус, необязательно)")
        elif failure is None:
            failure = f"{v['title']}\n{v['message']}"
    if secret:
        failed_secret = [v for v in secret if not v["passed"] and not v.get("skipped")]
        if failed_secret:
            lines.append(f"{FAIL_MARK} Скрытые случаи (другие размеры и seed): не пройдены")
            if failure is None:
                failure = (f"{failed_secret[0]['title']}\nНе пройден скрытый случай; его параметры не "
                           "показываются. Проверьте решение на других размерах, хвостах и крайних значениях.")
        else:
            lines.append(f"{PASS_MARK} Скрытые случаи (другие размеры и seed): пройдены")
    outputs = [NotebookNode(output_type="display_data", data={"text/plain": "\n".join(lines)}, metadata={})]
    if failure is not None:
        outputs.append(failure_output(shorten(failure, 4000)))
    return outputs


class FeedbackVerdicts(NbGraderPreprocessor):
    """``nbgrader generate_feedback``: hidden tests stay hidden.

    nbgrader's own feedback shows the test cells as graded, hidden tests and their cases (seeds,
    shapes) included.  Here each test cell's source loses its hidden block, its outputs are
    rebuilt from the verdicts kept as data (:func:`feedback_outputs`), and no cell carries an
    execution count (the graded run's counts mean nothing to the student).
    """

    def preprocess(self, nb, resources):
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            cell.execution_count = None
            for output in cell.get("outputs", []):
                if "execution_count" in output:
                    output["execution_count"] = None
            if not is_test_cell(cell):
                continue
            cell.source = _without_hidden(cell.source)
            verdicts = verdicts_module.of_cell(cell)
            if verdicts:
                cell.outputs = feedback_outputs(verdicts)
            else:  # no verdicts (an old notebook, a restored cell): show no outputs that may leak
                cell.outputs = [o for o in cell.get("outputs", []) if o.get("output_type") != "error"] \
                    if not hidden_lines(cell.source) else []
        return nb, resources


def _without_hidden(source: str) -> str:
    hidden = hidden_lines(source)
    kept = [line for number, line in enumerate(source.splitlines(), start=1)
            if number not in hidden and line.strip() not in (HIDDEN_BEGIN, HIDDEN_END)]
    return "\n".join(kept).rstrip()
