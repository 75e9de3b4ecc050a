"""The class gradebook's one writer: a submission graded elsewhere (a worker's scratch course, another machine)
is recorded by nbgrader's own code.

The course's Autograde converter runs in the class course with its execution steps replaced by
:class:`ReplayAutograded`, which hands over the executed notebook (after checking that its cells are the ones
nbgrader just sanitised).  nbgrader then does all it does after execution — SaveAutoGrades (scores from the
outputs through ``determine_grade``), late penalties, the ``autograded/`` copy — in the class gradebook, one
submission at a time, and every recorded score is read back and compared with the grading's own.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import re
import shutil
import sqlite3
from pathlib import Path
import nbformat
from nbgrader.converters import Autograde
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import SaveAutoGrades
from nbgrader.preprocessors.base import NbGraderPreprocessor
from nbgrader.utils import capture_log
from traitlets import Unicode
from traitlets.config import Config

from ..nbgrader import cells
from ..nbgrader.autograde import CourseAutograde
from . import status as status_module
from ..nbgrader.gradebook import open_gradebook
from .folder import CourseFolder, Submission, quiet


def backup_sqlite(source: Path, target: Path) -> None:
    """A consistent copy of a sqlite database (the backup API waits out writers)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.closing(sqlite3.connect(source)) as src, \
            contextlib.closing(sqlite3.connect(target)) as dst:
        src.backup(dst)


class ReplayAutograded(NbGraderPreprocessor):
    """Stands in for nbgrader's execution steps: the notebook as another course executed it."""

    directory = Unicode("", help="An autograded/ folder: <student>/<assignment>/<notebook>.ipynb, "
                                 "written by `nbgrader autograde` in another copy of the course.").tag(config=True)

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        path = Path(self.directory) / info["student"] / info["assignment"] / f"{info['notebook']}.ipynb"
        if not path.exists():
            raise FileNotFoundError(f"нет проверенного ноутбука {path}")
        graded = nbformat.read(path, as_version=nbformat.NO_CONVERT)
        difference = first_difference(nb, graded)
        if difference:
            raise ValueError(f"{path} проверен не по этой сданной работе: {difference}")
        return graded, resources


def first_difference(sanitised, graded) -> str | None:
    """Where an executed notebook's cells differ from the sanitised submission (None: same)."""
    if len(sanitised.cells) != len(graded.cells):
        return f"в нём {len(graded.cells)} ячеек вместо {len(sanitised.cells)}"
    for index, (mine, theirs) in enumerate(zip(sanitised.cells, graded.cells)):
        ids = [cells.grade_id(c) for c in (mine, theirs)]
        if mine.cell_type != theirs.cell_type or mine.source != theirs.source or ids[0] != ids[1]:
            return f"отличается ячейка {index} ({ids[0] or mine.cell_type})"
    return None


def replay_config(course: CourseFolder, directory: Path) -> Config:
    """The course's config with the steps before SaveAutoGrades replaced by the replay."""
    config = copy.deepcopy(course.config)
    steps = list(config.Autograde.get("autograde_preprocessors")
                 or Autograde.class_traits()["autograde_preprocessors"].default())
    names = [s if isinstance(s, str) else f"{s.__module__}.{s.__name__}" for s in steps]
    saving = [i for i, (s, n) in enumerate(zip(steps, names))
              if (isinstance(s, type) and issubclass(s, SaveAutoGrades)) or n.endswith(".SaveAutoGrades")]
    if not saving:
        raise ValueError("Autograde.autograde_preprocessors has no SaveAutoGrades: nothing records grades")
    config.Autograde.autograde_preprocessors = [ReplayAutograded] + steps[saving[0]:]
    config.ReplayAutograded.directory = str(directory)
    return config


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One submission's result: scores per (notebook, cell) when recorded, else the error."""

    submission: Submission
    scores: dict[tuple[str, str], float] | None
    error: str = ""
    log: str = ""

    @property
    def ok(self) -> bool:
        return self.scores is not None and not self.error


def run_autograde(config: Config, sub: Submission) -> dict:
    """nbgrader's Autograde converter for one submission, in-process: {success, log, error}."""
    coursedir = CourseDirectory(config=config, assignment_id=sub.lesson, student_id=sub.student)
    converter = CourseAutograde(coursedir=coursedir, config=config)
    converter.force = True
    converter.create_student = True
    with quiet():
        return capture_log(converter)


def auto_scores(db_url: str, sub: Submission) -> dict[tuple[str, str], float]:
    """(notebook, cell) -> auto_score of a submission, from a gradebook."""
    with open_gradebook(db_url) as gradebook:
        submission = gradebook.find_submission(sub.lesson, sub.student)
        return {(nb.name, g.name): g.auto_score for nb in submission.notebooks for g in nb.grades}


def recorded_scores(course: CourseFolder, sub: Submission) -> dict[tuple[str, str], float]:
    """What the class gradebook holds for a submission now ({} if it was never graded)."""
    from nbgrader.api import MissingEntry

    try:
        return {cell: score for cell, score in auto_scores(course.coursedir().db_url, sub).items()
                if score is not None}
    except MissingEntry:
        return {}


def changed_verdicts(before: dict, after: dict, graded_notebook: Path) -> tuple[list[str], int]:
    """The test cells whose score a new grading changed: ("cell: old → new", ...), and how many more changed only
    because their checks need a GPU (timed, or not run on the emulator), which a grading without one scores 0."""
    from ..checks.core import get_check
    from ..gpu.runtime import scores_without_gpu

    needs_gpu = set()
    for cell in nbformat.read(graded_notebook, as_version=4).cells:
        calls = cells.parse_grade_cell(cell.source) if cells.grade_id(cell) else None
        if calls and not all(scores_without_gpu(get_check(c.check_id)) for c in calls):
            needs_gpu.add(cells.grade_id(cell))
    listed, by_design = [], 0
    for (notebook, cell), old in sorted(before.items()):
        new = after.get((notebook, cell))
        if new is None or new == old:
            continue
        if cell in needs_gpu:
            by_design += 1
        else:
            listed.append(f"{cell}: {old:g} → {new:g}")
    return listed, by_design


def record(course: CourseFolder, sub: Submission, directory: Path,
           expected: dict[tuple[str, str], float] | None = None) -> Outcome:
    """Record one submission autograded in ``directory`` into the class gradebook (one writer)."""
    done = run_autograde(replay_config(course, directory), sub)
    log = done.get("log", "")
    if not done["success"]:
        return Outcome(sub, None, last_error(done), log)
    scores = auto_scores(course.coursedir().db_url, sub)
    if expected is not None and scores != expected:
        return Outcome(sub, scores, f"в gradebook записано {scores}, проверка дала {expected}", log)
    return Outcome(sub, scores, "", log)


def last_error(done: dict) -> str:
    """The most telling line of a failed nbgrader run: the exception raised inside it."""
    lines = [line.strip() for line in (done.get("log", "") + "\n" + done.get("error", "")).splitlines()]
    lines = [line for line in lines if line]
    raised = [line for line in lines if re.match(r"^[\w.]+(Error|Exception): ", line)
              and "NbGraderException" not in line]
    errors = [line for line in lines if "[ERROR]" in line]
    return (raised or errors or lines or ["неизвестная ошибка nbgrader"])[-1][:500]


@dataclasses.dataclass
class Summary:
    outcomes: list[Outcome]
    skipped: int
    seconds: float
    workers: int
    anomalies: dict[Submission, list] = dataclasses.field(default_factory=dict)
    stopped: str = ""  # the signal that stopped the run early ("" when it ran to the end)
    not_started: int = 0
    sandboxed: bool = True  # graded in the OS sandbox (False: --no-sandbox)
    #: course merge: per submission graded before, the cells whose verdict the merged grading changed, and how
    #: many changed only because they need a GPU (changed_verdicts)
    changed: dict[Submission, tuple[list[str], int]] = dataclasses.field(default_factory=dict)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.ok]

    def text(self) -> str:
        lines = []
        if self.stopped:
            lines.append(f"Остановлено ({self.stopped}): записано {len(self.outcomes) - len(self.failed)}, "
                         f"не начато или прервано {self.not_started}; записанное в gradebook сохранено, "
                         "повторный запуск проверит остальное.")
        elif not self.outcomes:
            lines.append(f"Нечего записывать: новых работ нет (уже проверено: {self.skipped}; "
                         "перепроверить все — --force).")
        else:
            done = len(self.outcomes) - len(self.failed)
            lines.append(f"Проверено и записано в gradebook: {done} из {len(self.outcomes)} "
                         f"за {self.seconds:.0f} с ({self.workers} проц.); уже проверенных пропущено: {self.skipped}.")
        if not self.sandboxed and self.outcomes:
            lines.append("  Без песочницы (--no-sandbox): код студентов выполнялся с правами проверяющего.")
        lines += [f"  НЕ ПРОВЕРЕНА {o.submission}: {o.error}" for o in self.failed]
        if any(o.log for o in self.failed):
            lines.append(f"  Журналы nbgrader этих работ — в {ERROR_LOGS}/.")
        differing = {sub: cells_ for sub, (cells_, _) in sorted(self.changed.items(), key=lambda kv: str(kv[0]))
                     if cells_}
        if differing:
            lines.append("Вердикты, которые эта проверка изменила (записаны новые; прежние — с другой машины, например "
                         "с эмулятора GPU): сверьте ячейки — при проверке на GPU верен его вердикт.")
            lines += [f"  {sub}: " + "; ".join(cells_) for sub, cells_ in differing.items()]
        by_design = sum(n for _, n in self.changed.values())
        if by_design:
            lines.append(f"  Ещё {by_design} яч. изменились, потому что их проверкам нужен GPU (скорость; запуски, "
                         "которые эмулятор пока не выполняет): без GPU они получают 0.")
        noted = {sub: found for sub, found in sorted(self.anomalies.items(), key=lambda kv: str(kv[0])) if found}
        if noted:
            lines.append("Особенности работ (баллы за них не снимались, если не сказано иное):")
            for sub, found in noted.items():
                lines.append(f"  {sub}: " + "; ".join(str(a) for a in found))
        return "\n".join(lines)


def record_graded(course: CourseFolder, sub: Submission, folder: str, scores, error: str, log: str) -> Outcome:
    if scores is None:
        return Outcome(sub, None, error, log)
    outcome = record(course, sub, Path(folder), expected=scores)
    shutil.rmtree(Path(folder) / sub.student / sub.lesson, ignore_errors=True)
    return outcome


ERROR_LOGS = status_module.ERROR_LOGS


def keep_logs(course: CourseFolder, outcomes: list[Outcome]) -> None:
    """Why each failed submission failed, and nbgrader's log of it: autograde_errors/.  A
    submission recorded since loses its old log."""
    for outcome in outcomes:
        sub = outcome.submission
        if outcome.ok:
            status_module.clear_error_log(course.root, sub.lesson, sub.student)
        else:
            status_module.write_error_log(course.root, sub.lesson, sub.student, outcome.error, outcome.log)
