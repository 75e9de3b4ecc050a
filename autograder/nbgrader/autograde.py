"""nbgrader's Autograde converter as this course runs it (``nbgrader autograde`` and ``course autograde``).
"""
from __future__ import annotations

import contextlib
import glob
import os
import shutil
import tempfile
from nbgrader.api import MissingEntry
from nbgrader.converters import Autograde
from nbgrader.converters.base import NbGraderException

from . import submission
from .gradebook import open_gradebook
from .cells import grade_id, is_test_cell
from .execute import IsolatedExecute, SANDBOX_OFF, SandboxMissing, require_sandbox
from .pipeline import autograde_preprocessors


class CourseAutograde(Autograde):
    """nbgrader's Autograde converter with two holes closed.

    * A submission counts as done only when it is graded: one whose autograded notebook exists
      but whose grades are missing in the gradebook or whose test cells carry no outputs (a run
      killed between nbgrader writing the notebook and the grades) is graded again, not skipped.
    * Student ids with glob characters (``[``, ``*``, ``?``) are found (nbgrader globs the
      submission folder's own path and finds nothing).
    """

    def start(self) -> None:
        """Refuse to grade without the sandbox unless told (IsolatedExecute.sandbox), before anything runs.
        (A converter that runs no student code — course autograde's record of a notebook graded elsewhere,
        course.record.ReplayAutograded — needs none.)"""
        steps = self.config.Autograde.get("autograde_preprocessors") or autograde_preprocessors()
        if not any(step is IsolatedExecute or step == f"{IsolatedExecute.__module__}.IsolatedExecute" for step in steps):
            return super().start()
        mode = self.config.IsolatedExecute.get("sandbox", IsolatedExecute.class_traits()["sandbox"].default())
        try:
            require_sandbox(mode)
        except SandboxMissing as error:
            self.log.error("%s", error)
            raise NbGraderException(str(error)) from None
        if mode == "off":
            self.log.warning(SANDBOX_OFF)
        super().start()

    def init_assignment(self, assignment_id: str, student_id: str) -> None:
        """A submission is read without following links (:mod:`autograder.nbgrader.submission`): one whose notebook is
        a link is not graded (nbgrader records the failure; ``course status`` says why), other links are left out —
        nbgrader's own copy would follow them, bringing whatever they point at (the gradebook, ``/etc/shadow``)
        into ``autograded/``."""
        source = super()._format_source(assignment_id, student_id)
        linked = submission.linked_notebook(source) if os.path.isdir(source) else None
        if linked:
            self.log.error("autograder: %s/%s: %s", student_id, assignment_id, linked)
            raise NbGraderException(linked)
        if os.path.isdir(source) and submission.links_in(source):
            clean = tempfile.mkdtemp(prefix="autograder-unlinked-")
            self._unlinked[(assignment_id, student_id)] = os.path.join(clean, "submission")
            for anomaly in submission.copy_without_links(source, self._unlinked[(assignment_id, student_id)]):
                self.log.warning("autograder: %s/%s: %s", student_id, assignment_id, anomaly)
        super().init_assignment(assignment_id, student_id)

    def _format_source(self, assignment_id: str, student_id: str, escape: bool = False) -> str:
        unlinked = getattr(self, "_unlinked", {}).get((assignment_id, student_id))
        return unlinked if unlinked and not escape else super()._format_source(assignment_id, student_id, escape)

    def convert_notebooks(self) -> None:
        self._unlinked: dict[tuple[str, str], str] = {}
        try:
            super().convert_notebooks()
        finally:
            for folder in self._unlinked.values():
                shutil.rmtree(os.path.dirname(folder), ignore_errors=True)

    def init_notebooks(self) -> None:
        pattern = self._format_source(self.coursedir.assignment_id, self.coursedir.student_id)
        literal = self._format_source(glob.escape(self.coursedir.assignment_id),
                                      glob.escape(self.coursedir.student_id))
        folders = set(glob.glob(pattern)) | set(glob.glob(literal))
        self.assignments = {}
        for folder in sorted(folders):
            found = glob.glob(os.path.join(glob.escape(folder), self.coursedir.notebook_id + ".ipynb"))
            if found:
                self.assignments[folder] = found
        if not self.assignments:
            super().init_notebooks()  # nbgrader's own message and "did you mean"

    def init_destination(self, assignment_id: str, student_id: str) -> bool:
        if super().init_destination(assignment_id, student_id):
            return True
        dest = os.path.normpath(self._format_dest(assignment_id, student_id))
        missing = incomplete_grading(self.coursedir.db_url, assignment_id, student_id,
                                     [os.path.join(dest, os.path.basename(n)) for n in self.notebooks])
        if not missing:
            return False
        self.log.warning("autograder: %s/%s was not graded to the end (%s): grading it again",
                         student_id, assignment_id, missing)
        for notebook in self.notebooks:
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(dest, os.path.basename(notebook)))
        return True


def incomplete_grading(db_url: str, lesson: str, student: str, graded_notebooks: list[str]) -> str | None:
    """Why a submission that has autograded notebooks is not completely graded (None: it is)."""
    for path in graded_notebooks:
        try:
            nb = read_notebook(path)
        except Exception:
            return f"не читается {os.path.basename(path)}"
        empty = [grade_id(c) for c in nb.cells if is_test_cell(c) and not c.get("outputs")]
        if empty:
            return f"нет вывода в ячейках {', '.join(empty[:3])}"
    with open_gradebook(db_url) as gradebook:
        try:
            found = gradebook.find_submission(lesson, student)
        except MissingEntry:
            return "нет записи в gradebook"
        for notebook in found.notebooks:
            solutions = {c.name for c in notebook.notebook.solution_cells}
            unscored = [g.name for g in notebook.grades
                        if g.auto_score is None and g.cell.cell_type == "code" and g.name not in solutions]
            if unscored:
                return f"нет баллов за {', '.join(unscored[:3])}"
    return None


def read_notebook(path: str):
    import nbformat

    return nbformat.read(path, as_version=nbformat.NO_CONVERT)


def use_course_autograde() -> None:
    """Make ``nbgrader autograde`` in this course use :class:`CourseAutograde` (called from
    nbgrader_config.py: nbgrader offers no setting for the converter class)."""
    from nbgrader.apps import autogradeapp

    autogradeapp.Autograde = CourseAutograde
