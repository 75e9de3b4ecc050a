"""The class report: one HTML page that shows which idea the class did not get.

Scores come from the class gradebook (``grade.score``: a grader's manual score where there is
one, else the autograder's).  A check *fails* for a student when its test cell scored below its
points.  The gradebook keeps no failure messages (its comments only say "No response."), so the
named mistakes are read from the autograded notebooks (``autograded/<student>/<lesson>/``): the
error output of a failed test cell carries the check's message, and
:func:`autograder.mistakes.compare_or_name` ends it with «Похоже на известную ошибку: «…».».
Check titles come from the check registry, through the test cells of the lesson's source.
Shares are over the students who submitted that lesson.
"""
from __future__ import annotations

import base64
import collections
import dataclasses
import datetime
import html
import io
import re
import statistics
from pathlib import Path
from typing import Iterable

import nbformat

from . import status as status_module
from .core import format_points, get_check
from .nbgrader_ext import parse_grade_cell
from .parallel import Course, load_course, quiet, require_gradebook, select_lessons

MISTAKE = re.compile(r"Похоже на известную ошибку: «(.+?)»(?:\.|$)", re.MULTILINE)


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

def named_mistakes(cell) -> list[str]:
    """The known mistakes a test cell's error output names (autograder.mistakes)."""
    found = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            found += MISTAKE.findall(str(output.get("evalue", "")))
    return list(dict.fromkeys(found))


def check_titles(course: Course, lesson: str) -> dict[str, str]:
    """grade_id of each test cell in the lesson's source -> the title of the check it calls."""
    titles = {}
    for path in sorted(course.source(lesson).glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            meta = cell.metadata.get("nbgrader", {})
            if not (meta.get("grade") and not meta.get("solution")):
                continue
            calls = parse_grade_cell(cell.source) or []
            try:
                titles[meta["grade_id"]] = get_check(calls[0].check_id).title if calls else meta["grade_id"]
            except KeyError:
                titles[meta["grade_id"]] = meta["grade_id"]
    return titles


def collect(course: Course, lesson: str) -> LessonStats:
    """Scores, failed checks and named mistakes of one lesson."""
    from nbgrader.api import Gradebook

    titles = check_titles(course, lesson)
    totals: dict[str, float] = {}
    points: dict[str, float] = {}
    failed: dict[str, list[str]] = collections.defaultdict(list)
    named: dict[str, set[str]] = collections.defaultdict(set)
    named_in: dict[str, set[str]] = collections.defaultdict(set)
    unread = 0
    blank = []
    ungraded: list[tuple[str, str]] = []
    with quiet(), Gradebook(course.coursedir().db_url) as gradebook:
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
            totals[student] = float(submission.score)
            lost = set()
            answers = [c.auto_comment for nb in submission.notebooks for c in nb.comments]
            if answers and all(comment == "No response." for comment in answers):
                blank.append(student)
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    if grade.name not in titles:  # manually graded answers are not checks
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
                for cell in nbformat.read(path, as_version=4).cells:
                    grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
                    if grade_id in lost:
                        for mistake in named_mistakes(cell):
                            named[mistake].add(student)
                            named_in[mistake].add(titles[grade_id])
    checks = tuple(CheckStats(cell, titles[cell], points[cell], tuple(failed[cell]))
                   for cell in titles if cell in points)
    mistakes = tuple(sorted((MistakeStats(lesson, m, tuple(sorted(s)), tuple(sorted(named_in[m])))
                             for m, s in named.items()), key=lambda m: (-len(m.students), m.mistake)))
    return LessonStats(lesson, max_score, totals, checks, mistakes, unread, tuple(blank),
                       tuple(ungraded), tuple(not_submitted))


def class_stats(folder: Path | str, lessons: Iterable[str] = (), *, only_gpu: bool = False,
                skip_gpu: bool = False) -> list[LessonStats]:
    course = load_course(folder)
    require_gradebook(course)
    chosen = select_lessons(course.lessons(), lessons, only_gpu=only_gpu, skip_gpu=skip_gpu)
    return [collect(course, lesson) for lesson in chosen]


# --- figures --------------------------------------------------------------------------------

def _png(figure) -> str:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(figure)
    return '<img alt="" src="data:image/png;base64,' + base64.b64encode(buffer.getvalue()).decode() + '">'


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

STYLE = """
body { font-family: sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
td.n { text-align: right; white-space: nowrap; }
img { max-width: 100%; }
.muted { color: #777; }
"""


def _share(stats: LessonStats, count: int) -> str:
    return f"{count} ({100 * stats.share(count):.0f} %)"


def render(lessons: list[LessonStats], course_name: str = "") -> str:
    """The HTML page (figures embedded as PNG)."""
    esc = html.escape
    now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    parts = [f"<!DOCTYPE html><html lang='ru'><head><meta charset='utf-8'>"
             f"<title>Отчёт по классу {esc(course_name)}</title><style>{STYLE}</style></head><body>",
             f"<h1>Отчёт по классу {esc(course_name)}</h1>",
             f"<p class='muted'>{now}. Баллы — из gradebook nbgrader; проверка «не пройдена», если её ячейка "
             "получила меньше своих баллов; доли — от сдавших урок (включая тех, кто не приступал: "
             "все ячейки ответов как в выданном ноутбуке). Известные ошибки — из сообщений "
             "проверок в autograded-ноутбуках («Похоже на известную ошибку: …»).</p>"]

    worst = sorted(((stats.failed_share(c), stats, c) for stats in lessons for c in stats.checks
                    if stats.failed_share(c) > 0), key=lambda t: -t[0])[:5]
    mistakes = sorted((m for stats in lessons for m in stats.mistakes), key=lambda m: -len(m.students))
    by_lesson = {s.lesson: s for s in lessons}
    parts.append("<h2>Главное</h2>")
    if worst:
        parts.append("<p>Чаще всего не пройдены (доля среди приступивших к уроку):</p><ol>")
        parts += [f"<li>{esc(c.title)} — <b>{100 * share:.0f} %</b> ({esc(s.lesson)})</li>"
                  for share, s, c in worst]
        parts.append("</ol>")
    if mistakes:
        parts.append("<p>Самые частые известные ошибки:</p><ol>")
        parts += [f"<li>«{esc(m.mistake)}» — <b>{_share(by_lesson[m.lesson], len(m.students))}</b> "
                  f"({esc(m.lesson)})</li>" for m in mistakes[:5]]
        parts.append("</ol>")
    ungraded = [(stats.lesson, student, why) for stats in lessons for student, why in stats.ungraded]
    if ungraded:
        parts.append(f"<p><b>Сданы, но не проверены ({len(ungraded)})</b> — их баллов нет ни в отчёте, "
                     "ни в экспорте (это не ноль): повторите <code>course autograde</code> или посмотрите "
                     "<code>autograde_errors/</code>.</p><ul>")
        parts += [f"<li>{esc(student)} ({esc(lesson)}): {esc(why)}</li>" for lesson, student, why in ungraded]
        parts.append("</ul>")
    if not worst and not mistakes:
        graded = sum(stats.students for stats in lessons)
        parts.append("<p>Все проверенные работы прошли все проверки.</p>" if graded else
                     "<p>Проверенных работ нет.</p>")

    parts.append("<h2>Уроки</h2><table><tr><th>урок</th><th>проверено</th><th>не проверено</th>"
                 "<th>не сдали</th><th>средний балл</th>"
                 "<th>медиана</th><th>полный балл</th><th>не приступали</th></tr>")
    for stats in lessons:
        scores = list(stats.totals.values()) or [0.0]
        mean, median = statistics.mean(scores), statistics.median(scores)
        full = sum(score >= stats.max_score for score in scores)
        parts.append(f"<tr><td>{esc(stats.lesson)}</td><td class='n'>{stats.students}</td>"
                     f"<td class='n'>{len(stats.ungraded)}</td><td class='n'>{len(stats.not_submitted)}</td>"
                     f"<td class='n'>{mean:.1f} из {format_points(stats.max_score)}</td>"
                     f"<td class='n'>{median:g}</td><td class='n'>{_share(stats, full)}</td>"
                     f"<td class='n'>{_share(stats, len(stats.blank))}</td></tr>")
    parts.append("</table>")

    for stats in lessons:
        parts.append(f"<h2>{esc(stats.lesson)}</h2>")
        if not stats.students:
            parts.append("<p class='muted'>Нет проверенных работ.</p>")
            continue
        parts.append(lesson_figure(stats))
        parts.append("<table><tr><th>проверка</th><th>баллы</th><th>не прошли (из приступивших)</th></tr>")
        for check in sorted(stats.checks, key=lambda c: -stats.failed_share(c)):
            parts.append(f"<tr><td>{esc(check.title)} <span class='muted'>{esc(check.cell)}</span></td>"
                         f"<td class='n'>{format_points(check.points)}</td>"
                         f"<td class='n'>{100 * stats.failed_share(check):.0f} %</td></tr>")
        parts.append("</table>")
        if stats.mistakes:
            parts.append("<table><tr><th>известная ошибка</th><th>в проверках</th><th>студентов</th></tr>")
            parts += [f"<tr><td>{esc(m.mistake)}</td><td>{esc('; '.join(m.checks))}</td>"
                      f"<td class='n'>{_share(stats, len(m.students))}</td></tr>" for m in stats.mistakes]
            parts.append("</table>")
        else:
            parts.append("<p class='muted'>Известных ошибок в сообщениях нет.</p>")
        if stats.unread:
            parts.append(f"<p class='muted'>У {stats.unread} работ нет ноутбука в autograded/: "
                         "их ошибки не прочитаны (баллы учтены).</p>")
    parts += student_table(lessons)
    parts.append("</body></html>")
    return "\n".join(parts)


def student_table(lessons: list[LessonStats]) -> list[str]:
    """One row per student: the score of each lesson, or why there is none."""
    esc = html.escape
    cells: dict[str, dict[str, str]] = collections.defaultdict(dict)
    for stats in lessons:
        for student, total in stats.totals.items():
            note = " (не приступал)" if student in stats.blank else ""
            cells[student][stats.lesson] = f"{total:g} из {format_points(stats.max_score)}{note}"
        for student, why in stats.ungraded:
            cells[student][stats.lesson] = f"не проверена: {why}"
        for student in stats.not_submitted:
            cells[student][stats.lesson] = "не сдана"
    if not cells:
        return []
    rows = ["<h2>Студенты</h2><table><tr><th>студент</th>"
            + "".join(f"<th>{esc(s.lesson)}</th>" for s in lessons) + "</tr>"]
    for student in sorted(cells):
        rows.append(f"<tr><td>{esc(student)}</td>"
                    + "".join(f"<td>{esc(cells[student].get(s.lesson, '—'))}</td>" for s in lessons) + "</tr>")
    rows.append("</table>")
    return rows


def write_report(folder: Path | str, out: Path | str, lessons: Iterable[str] = (), *,
                 only_gpu: bool = False, skip_gpu: bool = False) -> Path:
    stats = class_stats(folder, lessons, only_gpu=only_gpu, skip_gpu=skip_gpu)
    out = Path(out)
    course = load_course(folder)
    out.write_text(render(stats, course.coursedir().course_id or course.root.name), encoding="utf-8")
    return out
