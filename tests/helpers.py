"""Helpers that several test modules share (those of the banks are in tests/bank.py, fixtures in conftest.py)."""
from __future__ import annotations

import ast
import os
import textwrap

import nbformat
import numpy as np
import pytest

from autograder.course import grading
from autograder.course import paths as course


#: `make test-full` (COURSE_FULL_AUTOGRADE=1): the complete versions of what `make test` samples.
FULL = os.environ.get("COURSE_FULL_AUTOGRADE") == "1"


def full_only(what: str, sample: str):
    """Mark a test that only `make test-full` runs (CI runs `make test`: its time budget): ``what`` it checks and
    the ``sample`` of it that `make test` runs instead, both said in the skip reason."""
    return pytest.mark.skipif(not FULL, reason=f"{what} runs in `make test-full` (COURSE_FULL_AUTOGRADE=1); "
                                               f"`make test` runs {sample}")


def student(source: str, name: str = "fused_rms_norm", **constants):
    """A function defined as a notebook cell defines it (module __main__, numpy imported, ``constants`` set)."""
    namespace = {"__name__": "__main__", "np": np, **constants}
    exec(compile(textwrap.dedent(source), "<student>", "exec"), namespace)
    return namespace[name]


def reported_facts(message: str) -> dict:
    """What a reporting student function saw: the dict it raised as ``"FACTS" + repr(facts) + "FACTS"``."""
    return ast.literal_eval(message.split("FACTS")[1])


def without_demonstrations(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook with its demonstration cells (the code cells nbgrader does not track) emptied: what a student
    hands in who deleted them, graded exactly as the whole notebook.  The class-level tests (faults, isolation,
    attacks, parallel grading) grade dozens of lesson-02 notebooks and are not about its demonstrations, which
    take 3.5 of the 8 s a lesson-02 notebook takes to grade (its 128 MiB peak demo, its timing sweep)."""
    for cell in nb.cells:
        if cell.cell_type == "code" and "nbgrader" not in cell.metadata:
            cell.source = ""
    return nb


def submission(lesson: str, answers: dict | None = None) -> nbformat.NotebookNode:
    """The student notebook of ``lesson`` with the reference answers, ``answers`` over them, without its
    demonstrations (:func:`without_demonstrations`)."""
    return without_demonstrations(grading.fill_answers(lesson, {**grading.reference_answers(lesson), **(answers or {})}))


def untouched_submission(lesson: str) -> nbformat.NotebookNode:
    """The student notebook as released, without its demonstrations: a student who handed in nothing."""
    return without_demonstrations(nbformat.read(course.student_notebook(lesson), as_version=4))


def scores_of_reference_and_untouched(lesson: str, tmp_path) -> dict[str, dict[str, float]]:
    """nbgrader's grades of the reference and of the untouched student notebook: student -> {test cell: score}."""
    grades = grading.grade_notebooks(lesson, {
        "reference": grading.fill_answers(lesson, grading.reference_answers(lesson)),
        "untouched": nbformat.read(course.student_notebook(lesson), as_version=4)}, tmp_path)
    return {name: {g.cell: g.score for g in cells} for name, cells in grades.items()}


def bare_class(root, lessons: dict[str, float], students: dict[str, dict], submitted: list[tuple[str, str]]):
    """A class folder without grading: nbgrader_config.py, a gradebook that knows ``lessons`` (lesson -> points, one
    graded cell each) and ``students`` (id -> nbgrader Student fields), and an (empty) notebook in
    ``submitted/<student>/<lesson>/`` for each (student, lesson) of ``submitted``.  Nothing there is graded."""
    import os
    from pathlib import Path

    from nbgrader.api import Gradebook

    from autograder.course.nbgrader_cli import nbgrader_env

    root = Path(root)
    root.mkdir(parents=True)
    (root / "nbgrader_config.py").write_text('c = get_config()\nc.CourseDirectory.db_url = "sqlite:///gradebook.db"\n')
    path = os.environ.get("PATH", "")
    os.environ["PATH"] = nbgrader_env()["PATH"]  # nbgrader's Gradebook shells out to alembic
    try:
        with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook:
            for lesson, points in lessons.items():
                gradebook.add_assignment(lesson)
                gradebook.add_notebook(lesson, lesson)
                gradebook.add_grade_cell("c1", lesson, lesson, max_score=points, cell_type="code")
            for student_id, fields in students.items():
                gradebook.add_student(student_id, **fields)
    finally:
        os.environ["PATH"] = path
    for student_id, lesson in submitted:
        work = root / "submitted" / student_id / lesson
        work.mkdir(parents=True)
        nbformat.write(nbformat.v4.new_notebook(), work / f"{lesson}.ipynb")
    return root


def hidden_seeds(lesson: str) -> set[int]:
    """The seeds of every hidden case in the lesson's source (what feedback must never show)."""
    from autograder.nbgrader.cells import parse_grade_cell

    seeds = set()
    for cell in nbformat.read(course.source_notebook(lesson), as_version=4).cells:
        for call in parse_grade_cell(cell.source) or []:
            if call.hidden:
                seeds |= {c["seed"] for c in call.cases or [] if "seed" in c}
    return seeds


def assert_feedback_hides_hidden_tests(page: str, lesson: str, who: str) -> str:
    """A feedback page (``nbgrader generate_feedback``'s HTML) shows no hidden-test source, no seed of a hidden
    case, no execution counts, each check's title once; returns its text (tags removed)."""
    import re

    seeds = hidden_seeds(lesson)
    assert seeds, f"{lesson} has no hidden cases: the check would be vacuous"
    text = re.sub(r"<[^>]+>", "", page)
    assert "HIDDEN TESTS" not in text and "cases=" not in text, who
    found = {int(s) for s in re.findall(r"seed\W{1,4}(\d+)", text)}
    assert not found & seeds, (who, found & seeds)
    assert not re.search(r"prompt\">(In|Out)(\s|&nbsp;)*\[\d+\]", page), who  # no run counts
    return text


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the hub's, the lab's, Slurm's daemons)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
