"""The course's late-submission penalty: nbgrader's ``AssignLatePenalties`` asks this plugin (nbgrader_config.py,
``c.AssignLatePenalties.plugin_class``) for each late notebook, in ``nbgrader autograde`` and ``course autograde``.

A share of the notebook's score (its bonus included) for each day late, a started day counted whole, after a grace period, up to a cap:

    c.LatePenalty.percent_per_day = 10     # 0 (the default): late work is flagged, and loses nothing
    c.LatePenalty.grace_minutes = 15       # submitted up to 15 min after the due date: not late
    c.LatePenalty.max_percent = 100        # never more than the whole score

The penalty is kept in the gradebook (nbgrader's ``late_submission_penalty``); ``course export`` writes the score
with it taken off, and ``grades.csv`` and the class report say how late and how much.
"""
from __future__ import annotations

import math

from nbgrader.plugins import LateSubmissionPlugin
from traitlets import Float

DAY_SECONDS = 24 * 3600


class LatePenalty(LateSubmissionPlugin):
    """``percent_per_day`` of the score for each started day past the due date and ``grace_minutes``."""

    percent_per_day = Float(0.0, min=0.0, help="Percent of the score taken off per started day late.").tag(config=True)
    grace_minutes = Float(0.0, min=0.0, help="Minutes after the due date that are not late.").tag(config=True)
    max_percent = Float(100.0, min=0.0, max=100.0, help="The most a late notebook loses, in percent.").tag(config=True)

    def late_submission_penalty(self, student_id: str, score: float, total_seconds_late: float) -> float | None:
        return penalty(score, total_seconds_late, self.percent_per_day, self.grace_minutes, self.max_percent)


def days_late(total_seconds_late: float, grace_minutes: float = 0.0) -> int:
    """Started days past the due date and the grace period (0 within it)."""
    late = total_seconds_late - 60 * grace_minutes
    return math.ceil(late / DAY_SECONDS) if late > 0 else 0


def penalty(score: float, total_seconds_late: float, percent_per_day: float, grace_minutes: float = 0.0,
            max_percent: float = 100.0) -> float | None:
    """Points taken off a notebook of ``score`` submitted ``total_seconds_late`` late; None where nothing is."""
    days = days_late(total_seconds_late, grace_minutes)
    if not days or not percent_per_day or score <= 0:
        return None
    return round(score * min(max_percent, percent_per_day * days) / 100.0, 4)


def describe(total_seconds_late: float, penalty_points: float | None) -> str:
    """How late, and what it cost (``penalty_points`` None: not known, the work is not graded), as the report and the
    LMS feedback say it ("" for work on time)."""
    if not total_seconds_late or total_seconds_late <= 0:
        return ""
    hours = total_seconds_late / 3600
    late = f"{hours / 24:.1f} дн." if hours >= 24 else f"{hours:.1f} ч" if hours >= 1 else \
        f"{max(1, round(total_seconds_late / 60))} мин"
    cost = "" if penalty_points is None else f", штраф {penalty_points:g}" if penalty_points else ", без штрафа"
    return f"сдана с опозданием на {late}{cost}"
