"""Grading notebooks of this repository's lessons with the real ``nbgrader autograde`` in a scratch course:
``course grade`` (self-study) and the tests' banks; the reference answers, filling a notebook with answers,
reading the grades back and the score tables.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import nbformat

from ..nbgrader.gradebook import open_gradebook
from ..nbgrader import cells
from .nbgrader_cli import nbgrader_batch, new_course
from .paths import ROOT, source_notebook, student_notebook


#: How `course grade NOTEBOOK` runs nbgrader autograde on one's own notebook: in the OS sandbox where there is one,
#: without it otherwise (tests that compare a class's grades with `course grade` grade the same way).
SELF_STUDY_ARGS = ("--IsolatedExecute.sandbox=if-available",)

_SOLUTION_MARKERS = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n?", re.MULTILINE)


def reference_answers(lesson: str, root: Path = ROOT) -> dict[str, str]:
    """The source notebook's answer cells with the solution markers removed: grade_id -> code."""
    nb = nbformat.read(source_notebook(lesson, root), as_version=4)
    return {cells.grade_id(c): _SOLUTION_MARKERS.sub("", c.source) for c in nb.cells if cells.is_answer_cell(c)}


def fill_answers(lesson: str, answers: dict[str, str], root: Path = ROOT) -> nbformat.NotebookNode:
    """The student notebook with the given answer cells (grade_id -> code) filled in."""
    nb = nbformat.read(student_notebook(lesson, root), as_version=4)
    known = set()
    for cell in nb.cells:
        grade_id = cells.grade_id(cell)
        if grade_id in answers:
            cell.source = answers[grade_id]
            known.add(grade_id)
    if set(answers) - known:
        raise KeyError(f"no answer cells {sorted(set(answers) - known)} in {lesson}")
    return nb


@dataclasses.dataclass(frozen=True)
class CellGrade:
    """A graded cell's score; a bonus cell's points are extra credit (its maximum in nbgrader is 0,
    here the bonus points it can earn)."""

    cell: str
    score: float
    max_score: float
    bonus: bool = False


def grade_notebooks(lesson: str, submissions: dict[str, nbformat.NotebookNode], folder: Path,
              root: Path = ROOT, extra_args: tuple[str, ...] = ()) -> dict[str, list[CellGrade]]:
    """Grade notebooks with the real ``nbgrader autograde`` in a scratch course in ``folder``.

    Returns, per student id, the score of every graded cell (nbgrader's own gradebook).
    """
    course = new_course(folder, root, only=[lesson])
    write_submissions(course, lesson, submissions)
    nbgrader_batch([("generate_assignment", lesson, "--force"), ("autograde", lesson, "--force", *extra_args)],
                   cwd=course, scratch=True)
    return read_grades(course, lesson, list(submissions))


def read_grades(course: Path, lesson: str, students: list[str]) -> dict[str, list[CellGrade]]:

    bonus = bonus_cells(lesson, course)
    grades = {}
    with open_gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for student in students:
            notebook = gradebook.find_submission_notebook(lesson, lesson, student)
            grades[student] = [CellGrade(g.name, float(g.score), bonus.get(g.name, float(g.max_score)),
                                         g.name in bonus)
                               for g in sorted(notebook.grades, key=lambda g: g.name)]
    return grades


def bonus_cells(lesson: str, root: Path = ROOT) -> dict[str, float]:
    """Test cells whose checks are all bonus checks -> the extra points they can earn."""
    from ..checks.core import get_check

    found = {}
    for cell in nbformat.read(source_notebook(lesson, root), as_version=4).cells:
        calls = cells.parse_grade_cell(cell.source) if cells.is_test_cell(cell) else None
        checks = {c.check_id: get_check(c.check_id) for c in calls or []}
        if checks and all(check.bonus for check in checks.values()):
            found[cells.grade_id(cell)] = sum(check.points for check in checks.values())
    return found


def verdict_table(graded: nbformat.NotebookNode, grades: list[CellGrade]) -> str:
    """Self-study: every graded cell in notebook order with the words the notebook shows —
    the check titles, the points, and for a failed check its message."""
    from ..checks.core import FAIL_MARK, PASS_MARK, SKIP_MARK
    from ..checks import verdicts as verdicts_module
    from ..nbgrader.execute import FAILED_PREFIX

    scores = {g.cell: g for g in grades}
    lines, total, top, extra = [], 0.0, 0.0, 0.0
    for cell in graded.cells:
        grade_id = cells.grade_id(cell)
        if grade_id not in scores:
            continue
        g = scores.pop(grade_id)
        verdicts = verdicts_module.of_cell(cell)
        titles = list(dict.fromkeys(v["title"] for v in verdicts)) or [grade_id]
        if g.bonus:
            extra += g.score
            skipped = verdicts and all(v.get("skipped") for v in verdicts)
            mark = SKIP_MARK if skipped else PASS_MARK if g.score >= g.max_score else FAIL_MARK
            lines.append(f"{mark} {' / '.join(titles)}: " + ("не выполнен (бонус, необязательно)" if skipped else
                                                             f"+{g.score:g} из {g.max_score:g} (бонус)"))
            if skipped or g.score >= g.max_score:
                continue
        else:
            total, top = total + g.score, top + g.max_score
            mark = PASS_MARK if g.score >= g.max_score else FAIL_MARK
            lines.append(f"{mark} {' / '.join(titles)}: {g.score:g} из {g.max_score:g}")
        if g.score < g.max_score:
            errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
            for error in errors[:1]:
                text = error.get("evalue") or "".join(error.get("traceback", [])).removeprefix(FAILED_PREFIX)
                message = [line for line in str(text).splitlines() if line not in titles]
                lines += ["     " + line for line in message[:12]]
    lines += [f"{FAIL_MARK} {g.cell}: {g.score:g} из {g.max_score:g}" for g in scores.values()]
    lines.append(f"ИТОГО: {total:g} из {top:g}" + (f" и бонус +{extra:g}" if extra else ""))
    return "\n".join(lines)


def score_table(grades: list[CellGrade]) -> str:
    """A plain text table: cell, score, max; and the total."""
    width = max([len(g.cell) for g in grades] + [5])
    lines = [f"{'ячейка':<{width}}  баллы"]
    lines += [f"{g.cell:<{width}}  {g.score:g} / {g.max_score:g}" for g in grades]
    total = sum(g.score for g in grades if not g.bonus)
    top = sum(g.max_score for g in grades if not g.bonus)
    lines.append(f"{'ИТОГО':<{width}}  {total:g} / {top:g}")
    return "\n".join(lines)


def write_submissions(course: Path, lesson: str, submissions: dict[str, nbformat.NotebookNode]) -> None:
    """Put notebooks where ``nbgrader collect`` would: submitted/<student>/<lesson>/<lesson>.ipynb."""
    for student, nb in submissions.items():
        target = course / "submitted" / student / lesson
        target.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, target / f"{lesson}.ipynb")
