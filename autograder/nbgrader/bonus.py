"""Bonus checks: their points are extra credit, outside a lesson's maximum.
"""
from __future__ import annotations

from nbgrader.preprocessors import NbGraderPreprocessor

from .gradebook import open_gradebook
from ..checks import verdicts as verdicts_module
from .cells import grade_id, is_test_cell


def bonus_points(verdicts: list[dict]) -> float:
    """Extra credit a test cell earned: each bonus check once, if every call of it passed."""
    checks: dict[str, tuple[float, bool]] = {}
    for v in verdicts:
        if v.get("bonus"):
            points, ok = checks.get(v["check_id"], (v["points"], True))
            checks[v["check_id"]] = (points, ok and v["passed"] is True)
    return float(sum(points for points, ok in checks.values() if ok))


class SaveBonus(NbGraderPreprocessor):
    """After SaveAutoGrades: a bonus test cell is worth 0 points in nbgrader (so it is not in the
    maximum) and its passed bonus checks become the grade's extra credit."""

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        with open_gradebook(info["db_url"]) as gradebook:
            for cell in nb.cells:
                if not is_test_cell(cell):
                    continue
                verdicts = verdicts_module.of_cell(cell)
                if not any(v.get("bonus") for v in verdicts):
                    continue
                grade = gradebook.find_grade(grade_id(cell), info["notebook"],
                                             info["assignment"], info["student"])
                grade.extra_credit = bonus_points(verdicts)
            gradebook.db.commit()
        return nb, resources
