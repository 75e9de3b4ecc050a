"""The course's steps in nbgrader's three pipelines, in order, each beside the nbgrader step it relies on.

``nbgrader_config.py`` sets these lists; nbgrader runs the steps of each in the order given.  Every list is
nbgrader's own default with this course's steps put in; why each goes where it goes is said beside it.
"""
from __future__ import annotations

from nbgrader.converters import Autograde, GenerateFeedback
from nbgrader.preprocessors import Execute, SaveAutoGrades

from .bonus import SaveBonus
from .execute import IsolatedExecute
from .feedback import FeedbackVerdicts
from .feedback_style import WrapLongOutputLines
from .sanitize import SanitizeStructure


def sanitize_preprocessors() -> list:
    """``nbgrader autograde``, before execution: ClearOutput, then :class:`SanitizeStructure`, then the rest.

    The structure must be the gradebook's before nbgrader's own sanitising steps read a cell's metadata
    (a deleted test cell restored, a copied one not graded twice); after ClearOutput, so that a restored cell
    starts as clean as the others."""
    default = list(Autograde.class_traits()["sanitize_preprocessors"].default())
    return [default[0], SanitizeStructure, *default[1:]]


def autograde_preprocessors() -> list:
    """``nbgrader autograde``, execution and scoring: :class:`IsolatedExecute` in Execute's place (the test
    cells run by the grader, the kernel in the sandbox), and :class:`SaveBonus` right after SaveAutoGrades,
    which it corrects (SaveAutoGrades has just written the bonus cell's score as its auto score)."""
    default = Autograde.class_traits()["autograde_preprocessors"].default()
    steps = [IsolatedExecute if p is Execute else p for p in default]
    at = steps.index(SaveAutoGrades) + 1
    return [*steps[:at], SaveBonus, *steps[at:]]


def feedback_preprocessors() -> list:
    """``nbgrader generate_feedback``: GetGrades, then :class:`FeedbackVerdicts` (the test cells' outputs rebuilt
    from the verdicts, hidden tests left out, before any later step renders them), and
    :class:`WrapLongOutputLines` last (its CSS goes into the page the steps before it built)."""
    default = list(GenerateFeedback.class_traits()["preprocessors"].default())
    return [default[0], FeedbackVerdicts, *default[1:], WrapLongOutputLines]
