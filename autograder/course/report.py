"""The class report: one HTML page that shows which idea the class did not get.

Scores come from the class gradebook (``grade.score``: a grader's manual score where there is
one, else the autograder's).  A check *fails* for a student when its test cell scored below its
points.  The gradebook keeps no failure messages (its comments only say "No response."), so the
named mistakes and the check titles are read from the autograded notebooks
(``autograded/<student>/<lesson>/``): each test cell carries its checks' verdicts as data
(:mod:`autograder.checks.verdicts`), a failed one with the mistake :mod:`autograder.checks.mistakes` named.
Nothing here parses text, imports a lesson or reads the source notebooks.
Shares are over the students who submitted that lesson.  The page is laid out by the Jinja2
template ``autograder/templates/class_report.html.j2``.
"""
from __future__ import annotations

import base64
import collections
import dataclasses
import datetime
import io
import statistics
from pathlib import Path
from typing import Iterable

import nbformat

from ..nbgrader import cells
from ..checks import verdicts
from . import late_penalty, status as status_module
from ..checks.core import format_points
from ..nbgrader.gradebook import open_gradebook
from .folder import CourseFolder, load, quiet, require_gradebook, select_lessons

@dataclasses.dataclass(frozen=True)
class CheckStats:
    """One graded test cell across the class."""

    cell: str
    title: str
    points: float
    failed: tuple[str, ...]  # students


@dataclasses.dataclass(frozen=True)
class MistakeStats:
    lesson: str
    mistake: str
    students: tuple[str, ...]
    checks: tuple[str, ...]  # titles of the checks whose message named it


@dataclasses.dataclass(frozen=True)
class LessonStats:
    lesson: str
    max_score: float
    totals: dict[str, float]  # student -> total score
    checks: tuple[CheckStats, ...]
    mistakes: tuple[MistakeStats, ...]
    unread: int  # submissions without an autograded notebook to read messages from
    blank: tuple[str, ...] = ()  # students who left every answer cell as released
    ungraded: tuple[tuple[str, str], ...] = ()  # (student, why): submitted, could not be graded
    not_submitted: tuple[str, ...] = ()  # students of the gradebook without a submission
    unsandboxed: tuple[str, ...] = ()  # graded without the OS sandbox (--no-sandbox, or an older grader)
    late: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)  # student -> (s late, penalty)

    @property
    def students(self) -> int:
        return len(self.totals)

    def share(self, count: int) -> float:
        return count / self.students if self.students else 0.0

    @property
    def attempted(self) -> int:
        """Graded students who started (changed an answer cell): the base of "which check fails"."""
        return len([s for s in self.totals if s not in self.blank])

    def failed_share(self, check: "CheckStats") -> float:
        """Share of the students who started that failed ``check`` (non-starters fail everything
        and would put the first checks of the notebook on top)."""
        failed = len([s for s in check.failed if s not in self.blank])
        return failed / self.attempted if self.attempted else 0.0


# --- reading the course ---------------------------------------------------------------------

def named_mistakes(cell) -> list[tuple[str, str]]:
    """(mistake, check title) for each failed check of a graded cell that named a known mistake
    (autograder.checks.mistakes), read from the verdicts the cell carries as data."""
    found = [(v["mistake"], v["title"]) for v in verdicts.of_cell(cell) if not v["passed"] and v.get("mistake")]
    return list(dict.fromkeys(found))


def is_check_cell(gradebook, grade) -> bool:
    """An autograded test cell: a grade cell that is not also a solution cell (those are
    answers graded by hand)."""
    from nbgrader.api import MissingEntry

    try:
        gradebook.find_solution_cell(grade.name, grade.notebook.name, grade.notebook.assignment.name)
    except MissingEntry:
        return True
    return False


def collect(course: CourseFolder, lesson: str) -> LessonStats:
    """Scores, failed checks and named mistakes of one lesson."""

    titles: dict[str, str] = {}  # test cell -> the title of its check, from the verdicts
    totals: dict[str, float] = {}
    points: dict[str, float] = {}
    failed: dict[str, list[str]] = collections.defaultdict(list)
    named: dict[str, set[str]] = collections.defaultdict(set)
    named_in: dict[str, set[str]] = collections.defaultdict(set)
    unread = 0
    blank, unsandboxed = [], []
    late: dict[str, tuple[float, float]] = {}
    ungraded: list[tuple[str, str]] = []
    with open_gradebook(course.coursedir().db_url) as gradebook:
        assignment = gradebook.find_assignment(lesson)
        max_score = float(assignment.max_score)
        submissions = {s.student.id: s for s in assignment.submissions}
        submitted_dir = course.path(course.coursedir().submitted_directory, ".", lesson).parent
        students = sorted({s.id for s in gradebook.students} | set(submissions)
                          | {p.parent.name for p in submitted_dir.glob(f"*/{lesson}") if p.is_dir()})
        not_submitted = []
        for student in students:
            state = status_module.status(course, lesson, student)
            if state.state is status_module.State.NOT_SUBMITTED:
                not_submitted.append(student)
                continue
            if state.state is status_module.State.UNGRADED:
                ungraded.append((student, state.reason))
                continue
            submission = submissions[student]
            penalty = float(submission.late_submission_penalty or 0.0)
            totals[student] = max(0.0, float(submission.score) - penalty)
            if submission.total_seconds_late > 0:
                late[student] = (float(submission.total_seconds_late), penalty)
            lost = set()
            answers = [c.auto_comment for nb in submission.notebooks for c in nb.comments]
            if answers and all(comment == "No response." for comment in answers):
                blank.append(student)
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    if not is_check_cell(gradebook, grade):
                        continue
                    points[grade.name] = float(grade.max_score)
                    if (grade.score or 0) < grade.max_score:
                        failed[grade.name].append(student)
                        lost.add(grade.name)
            folder = course.path(course.coursedir().autograded_directory, student, lesson)
            notebooks = sorted(folder.glob("*.ipynb"))
            if not notebooks:
                unread += 1
            for path in notebooks:
                graded = nbformat.read(path, as_version=4)
                if graded.metadata.get("autograder", {}).get("sandbox", "off") == "off":
                    unsandboxed.append(student)
                for cell in graded.cells:
                    grade_id = cells.grade_id(cell)
                    found = verdicts.of_cell(cell)
                    if grade_id not in points or not found:
                        continue
                    titles.setdefault(grade_id, found[0]["title"])
                    if grade_id in lost:
                        for mistake, title in named_mistakes(cell):
                            named[mistake].add(student)
                            named_in[mistake].add(title)
    order = list(titles) + [cell for cell in points if cell not in titles]  # notebook order first
    checks = tuple(CheckStats(cell, titles.get(cell, cell), points[cell], tuple(failed[cell]))
                   for cell in order if cell in points)
    mistakes = tuple(sorted((MistakeStats(lesson, m, tuple(sorted(s)), tuple(sorted(named_in[m])))
                             for m, s in named.items()), key=lambda m: (-len(m.students), m.mistake)))
    return LessonStats(lesson, max_score, totals, checks, mistakes, unread, tuple(blank),
                       tuple(ungraded), tuple(not_submitted), tuple(sorted(set(unsandboxed))), late)


def class_stats(folder: Path | str, lessons: Iterable[str] = (), *, only_gpu: bool = False,
                skip_gpu: bool = False) -> list[LessonStats]:
    course = load(folder)
    require_gradebook(course)
    chosen = select_lessons(course.lessons(), lessons, only_gpu=only_gpu, skip_gpu=skip_gpu)
    return [collect(course, lesson) for lesson in chosen]


# --- figures --------------------------------------------------------------------------------

def _png(figure) -> str:
    """The figure as base64 PNG (the page embeds it)."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode()


def lesson_figure(stats: LessonStats) -> str:
    """Left: the distribution of total scores; right: the share of students failing each check."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.ticker import MaxNLocator

    rows = max(len(stats.checks), 3)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 0.9 + 0.32 * rows),
                                      gridspec_kw={"width_ratios": [1, 1.4]})
    scores = np.array(list(stats.totals.values()), dtype=float)
    top = max(stats.max_score, 1.0)
    edges = np.arange(0, np.floor(top) + 2) - 0.5
    left.hist(scores, bins=edges, color="#4c72b0", edgecolor="white")
    if scores.size:
        left.axvline(np.median(scores), color="#c44e52", linestyle="--",
                     label=f"медиана {np.median(scores):g}")
        left.legend(loc="upper left")
    left.set_xlabel(f"балл (из {format_points(stats.max_score)})")
    left.set_ylabel("студентов")
    left.set_title("Распределение баллов")
    left.set_xlim(-0.5, top + 0.5)
    left.yaxis.set_major_locator(MaxNLocator(integer=True))
    left.xaxis.set_major_locator(MaxNLocator(integer=True))

    checks = sorted(stats.checks, key=stats.failed_share)
    shares = [100 * stats.failed_share(c) for c in checks]
    labels = [_wrap(f"{c.title} ({format_points(c.points)} б.)", 60) for c in checks]
    bars = right.barh(range(len(checks)), shares, color=["#c44e52" if s >= 50 else "#dd8452" if s >= 20
                                                         else "#55a868" for s in shares])
    right.set_yticks(range(len(checks)), labels, fontsize=8)
    right.bar_label(bars, [f"{s:.0f} %" for s in shares], padding=3, fontsize=8)
    right.set_xlim(0, 110)
    right.set_xlabel(f"доля не прошедших проверку среди приступивших ({stats.attempted}), %")
    right.set_title("Какие проверки не пройдены")
    fig.suptitle(f"{stats.lesson}, работ: {stats.students}")
    fig.tight_layout()
    return _png(fig)


def _wrap(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


# --- the page -------------------------------------------------------------------------------

def _share(stats: LessonStats, count: int) -> str:
    return f"{count} ({100 * stats.share(count):.0f} %)"


def context(lessons: list[LessonStats], course_name: str = "") -> dict:
    """Everything the page shows, as plain values (templates/class_report.html.j2 lays it out)."""
    worst = sorted(((stats.failed_share(c), stats, c) for stats in lessons for c in stats.checks
                    if stats.failed_share(c) > 0), key=lambda t: -t[0])[:5]
    mistakes = sorted((m for stats in lessons for m in stats.mistakes), key=lambda m: -len(m.students))
    by_lesson = {s.lesson: s for s in lessons}
    overview = []
    for stats in lessons:
        scores = list(stats.totals.values()) or [0.0]
        full = sum(score >= stats.max_score for score in scores)
        overview.append({"lesson": stats.lesson, "graded": stats.students, "ungraded": len(stats.ungraded),
                         "not_submitted": len(stats.not_submitted),
                         "mean": f"{statistics.mean(scores):.1f} из {format_points(stats.max_score)}",
                         "median": f"{statistics.median(scores):g}", "full": _share(stats, full),
                         "blank": _share(stats, len(stats.blank))})
    return {
        "course_name": course_name,
        "now": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "worst": [{"title": c.title, "percent": f"{100 * share:.0f}", "lesson": s.lesson} for share, s, c in worst],
        "mistakes": [{"mistake": m.mistake, "share": _share(by_lesson[m.lesson], len(m.students)),
                      "lesson": m.lesson} for m in mistakes[:5]],
        "ungraded": [{"lesson": stats.lesson, "student": student, "why": why}
                     for stats in lessons for student, why in stats.ungraded],
        "unsandboxed": [{"lesson": stats.lesson, "student": student}
                        for stats in lessons for student in stats.unsandboxed],
        "graded": sum(stats.students for stats in lessons),
        "overview": overview,
        "lessons": [{
            "name": stats.lesson, "students": stats.students, "unread": stats.unread,
            "figure": lesson_figure(stats) if stats.students else "",
            "checks": [{"title": c.title, "cell": c.cell, "points": format_points(c.points),
                        "percent": f"{100 * stats.failed_share(c):.0f}"}
                       for c in sorted(stats.checks, key=lambda c: -stats.failed_share(c))],
            "mistakes": [{"mistake": m.mistake, "checks": "; ".join(m.checks),
                          "share": _share(stats, len(m.students))} for m in stats.mistakes],
        } for stats in lessons],
        "students": student_rows(lessons),
    }


def render(lessons: list[LessonStats], course_name: str = "") -> str:
    """The HTML page (figures embedded as PNG), through the Jinja2 template."""
    import jinja2

    environment = jinja2.Environment(loader=jinja2.PackageLoader("autograder.course", "templates"),
                                     autoescape=True, trim_blocks=True, lstrip_blocks=True,
                                     undefined=jinja2.StrictUndefined)
    return environment.get_template("class_report.html.j2").render(context(lessons, course_name))


def student_rows(lessons: list[LessonStats]) -> list[dict]:
    """One row per student: the score of each lesson, or why there is none."""
    cells: dict[str, dict[str, str]] = collections.defaultdict(dict)
    for stats in lessons:
        for student, total in stats.totals.items():
            notes = []
            if student in stats.blank:
                notes.append("не приступал")
            if student in stats.late:
                notes.append(late_penalty.describe(*stats.late[student]))
            note = f" ({'; '.join(notes)})" if notes else ""
            cells[student][stats.lesson] = f"{total:g} из {format_points(stats.max_score)}{note}"
        for student, why in stats.ungraded:
            cells[student][stats.lesson] = f"не проверена: {why}"
        for student in stats.not_submitted:
            cells[student][stats.lesson] = "не сдана"
    return [{"name": student, "cells": [cells[student].get(s.lesson, "—") for s in lessons]}
            for student in sorted(cells)]


def write_report(folder: Path | str, out: Path | str, lessons: Iterable[str] = (), *,
                 only_gpu: bool = False, skip_gpu: bool = False) -> Path:
    stats = class_stats(folder, lessons, only_gpu=only_gpu, skip_gpu=skip_gpu)
    out = Path(out)
    course = load(folder)
    out.write_text(render(stats, course.coursedir().course_id or course.root.name), encoding="utf-8")
    return out
