"""The nbgrader course on disk: lessons, releasing student notebooks, grading submissions.

A lesson is written as a text file, ``lessons/NN_name.py`` (:mod:`autograder.course.authoring`);
``release`` builds nbgrader's source notebook ``solutions/NN_name/NN_name.ipynb`` from it and,
with ``nbgrader generate_assignment``, the student notebook ``notebooks/NN_name/NN_name.ipynb``.
Both built notebooks are committed.  The text sources live outside ``solutions/``: nbgrader
copies every file of a source folder into the student release.

Everything here drives the real ``nbgrader`` command line, with the environment's ``bin`` on
PATH (nbgrader shells out to ``alembic``).  Grading happens in a scratch course folder built
from ``nbgrader_config.py`` and ``solutions/``, so the repository's own gradebook is untouched.
"""
from __future__ import annotations

import dataclasses
import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

from ..nbgrader.gradebook import open_gradebook
from ..nbgrader import cells

ROOT = Path(__file__).resolve().parents[2]  # the repository: autograder/course/paths.py
TEXT_SOURCES = "lessons"
SOLUTIONS = "solutions"
RELEASE = "notebooks"
#: Files of notebooks/ that are not built from a lesson but go to the students as they are.
RELEASE_FILES = ("GLOSSARY.md",)


def lessons(root: Path = ROOT) -> list[str]:
    """Lesson (= nbgrader assignment) ids: the folders of solutions/, in order."""
    return sorted(p.name for p in (root / SOLUTIONS).iterdir() if (p / f"{p.name}.ipynb").exists())


def text_lessons(root: Path = ROOT) -> list[str]:
    """Lessons written as text sources: lessons/NN_name.py, in order."""
    return sorted(p.stem for p in (root / TEXT_SOURCES).glob("*.py"))


def text_source(lesson: str, root: Path = ROOT) -> Path:
    return root / TEXT_SOURCES / f"{lesson}.py"


def source_notebook(lesson: str, root: Path = ROOT) -> Path:
    """nbgrader's source notebook of a lesson (answers and hidden tests), built from its text source."""
    return root / SOLUTIONS / lesson / f"{lesson}.ipynb"


def student_notebook(lesson: str, root: Path = ROOT) -> Path:
    return root / RELEASE / lesson / f"{lesson}.ipynb"


def nbgrader_env() -> dict[str, str]:
    """The environment for nbgrader: this interpreter's bin first on PATH (for alembic)."""
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    return env


def nbgrader(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``nbgrader ARGS`` in the course folder ``cwd``; raise with its log on failure."""
    command = [str(Path(sys.executable).parent / "nbgrader"), *args]
    done = subprocess.run(command, cwd=cwd, env=nbgrader_env(), capture_output=True, text=True)
    if check and (done.returncode != 0 or "[ERROR]" in done.stderr):
        raise RuntimeError(f"nbgrader {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return done


def nbgrader_batch(commands: list[tuple[str, ...]], cwd: Path, check: bool = True,
                   scratch: bool = False) -> subprocess.CompletedProcess:
    """Run several ``nbgrader`` command lines one after another in one Python process
    (:mod:`autograder.nbgrader.batch`): nbgrader's start-up is paid once.  ``scratch``: ``cwd``
    is a throwaway course, whose gradebook need not survive a power cut."""
    command = [sys.executable, "-m", "autograder.nbgrader.batch", *(["--scratch"] if scratch else []),
               json.dumps([list(c) for c in commands])]
    done = subprocess.run(command, cwd=cwd, env=nbgrader_env(), capture_output=True, text=True)
    if check and (done.returncode != 0 or "[ERROR]" in done.stderr):
        names = " && ".join(" ".join(c) for c in commands)
        raise RuntimeError(f"nbgrader {names} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return done


def new_course(folder: Path, root: Path = ROOT, only: list[str] | None = None) -> Path:
    """A scratch course in ``folder``: the config and the sources of ``only`` (or all) lessons."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(root / "nbgrader_config.py", folder / "nbgrader_config.py")
    for lesson in only or lessons(root):
        shutil.copytree(root / SOLUTIONS / lesson, folder / SOLUTIONS / lesson,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    return folder


def build_source_notebook(lesson: str, root: Path = ROOT) -> Path:
    """Write solutions/<lesson>/<lesson>.ipynb from the text source lessons/<lesson>.py."""
    from .authoring import notebook_from_text

    text = text_source(lesson, root)
    if not text.exists():
        raise ValueError(f"у урока {lesson} нет исходника {TEXT_SOURCES}/{lesson}.py")
    nb = notebook_from_text(text.read_text(encoding="utf-8"), name=f"{TEXT_SOURCES}/{lesson}.py")
    path = source_notebook(lesson, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def release(root: Path = ROOT, only: list[str] | None = None) -> list[Path]:
    """Build solutions/ from the text sources in lessons/, then notebooks/ from solutions/ (nbgrader)."""
    written = []
    for lesson in only or text_lessons(root):
        written.append(build_source_notebook(lesson, root))
        nbgrader("generate_assignment", lesson, "--force", cwd=root)
        written.append(student_notebook(lesson, root))
    return written


def stale_release(root: Path = ROOT) -> list[str]:
    """Built notebooks (solutions/ and notebooks/) that differ from a fresh build of lessons/;
    empty when both are current."""
    problems = []
    sources = text_lessons(root)
    with tempfile.TemporaryDirectory(prefix="course-release-") as scratch:
        course = new_course(Path(scratch), root)
        shutil.copytree(root / TEXT_SOURCES, course / TEXT_SOURCES)
        release(course)
        for lesson in sources:
            redo = f"выполните `make release` (урок правят в {TEXT_SOURCES}/{lesson}.py, а не в ноутбуках)"
            for fresh, committed in ((source_notebook(lesson, course), source_notebook(lesson, root)),
                                     (student_notebook(lesson, course), student_notebook(lesson, root))):
                name = committed.relative_to(root)
                if not committed.exists():
                    problems.append(f"{lesson}: нет {name}: выполните `make release`")
                elif not filecmp.cmp(fresh, committed, shallow=False):
                    problems.append(f"{lesson}: {name} не совпадает с тем, что собирается из {TEXT_SOURCES}/{lesson}.py: {redo}")
            built = {p.name for p in (course / RELEASE / lesson).iterdir()}
            committed_files = {p.name for p in (root / RELEASE / lesson).glob("*") if not p.name.startswith(".")}
            problems += [f"{lesson}: {RELEASE}/{lesson}/{name} не собирается `make release` (лишний файл)"
                         for name in sorted(committed_files - built)]
    problems += [f"{name}: у {SOLUTIONS}/{name} нет исходника {TEXT_SOURCES}/{name}.py"
                 for name in lessons(root) if name not in sources]
    released = {p.parent.name for p in (root / RELEASE).glob("*/*.ipynb")}
    problems += [f"{name}: у {RELEASE}/{name} нет исходника {TEXT_SOURCES}/{name}.py"
                 for name in sorted(released - set(sources))]
    return problems


# --- submissions ----------------------------------------------------------------------------

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
    from ..nbgrader.ext import FAILED_PREFIX

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


# --- grading many submissions (autograder/course_folder.py, autograder/parallel.py) --------------------------------------

def is_gpu_lesson(lesson: str) -> bool:
    """A lesson graded on a GPU machine (and merged into the class gradebook): one of its checks
    needs a CUDA GPU (``Check.needs_gpu``).  A folder with no lesson module is not one."""
    from ..checks.core import lesson_checks

    try:
        checks = lesson_checks(lesson)
    except KeyError:
        return False
    return any(check.needs_gpu for check in checks.values())


def write_submissions(course: Path, lesson: str, submissions: dict[str, nbformat.NotebookNode]) -> None:
    """Put notebooks where ``nbgrader collect`` would: submitted/<student>/<lesson>/<lesson>.ipynb."""
    for student, nb in submissions.items():
        target = course / "submitted" / student / lesson
        target.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, target / f"{lesson}.ipynb")
