"""What the class-fault suites share (tests/test_class_faults.py: tampering; tests/test_class_kills.py: kills and
faults): classes of lesson 02 (demo cells emptied: fast) with honest students, graded the way an instructor does it,
and the clean run of the honest students that every case is compared with, cell by cell."""
from __future__ import annotations

import copy
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from autograder.course import folder as course_folder, autograde as parallel
from autograder.course import grading, nbgrader_cli
from bank import banks
from helpers import submission, untouched_submission

LESSON = "02_fused_rmsnorm"
REFERENCE = grading.reference_answers(LESSON)


def notebook(answers: dict | None = None) -> nbformat.NotebookNode:
    return submission(LESSON, answers)


def grade_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def without(nb, cell_id):
    nb.cells = [c for c in nb.cells if grade_id(c) != cell_id]
    return nb


NAIVE = banks()[LESSON]
NAIVE = {s.name: s for s in NAIVE.WRONG}["naive_temporaries"].answers

#: The honest students: their grades must never change, whatever the others hand in.
def untouched() -> nbformat.NotebookNode:
    return untouched_submission(LESSON)


HONEST = {"ref_a": lambda: notebook(), "naive": lambda: notebook(NAIVE), "untouched": untouched}


def hostile_module(root: Path) -> str:
    """A numpy.py that, if it ever ran, would read the hidden tests, write into the course and
    give every student of the class full marks."""
    return (f"import sqlite3\n"
            f"open({str(root / 'PWNED')!r}, 'w').write(open({str(root / 'solutions' / LESSON / (LESSON + '.ipynb'))!r}).read())\n"
            f"db = sqlite3.connect({str(root / 'gradebook.db')!r})\n"
            f"db.execute('UPDATE grade SET auto_score = 1000'); db.commit()\n"
            f"raise ImportError('shadowed')\n")


def tampered(root: Path) -> dict:
    """student -> (notebook, extra files, the honest student whose grades it must get or None
    when it must stay ungraded, anomaly kinds the instructor must be told)."""
    duplicated = notebook()
    at = next(i for i, c in enumerate(duplicated.cells) if grade_id(c) == "test_lesson02_zeros")
    duplicated.cells.insert(at + 1, copy.deepcopy(duplicated.cells[at]))
    for i, c in enumerate(duplicated.cells):
        c["id"] = f"cell-{i}"
    new_cell = notebook()
    extra = nbformat.v4.new_code_cell("print(1)")
    extra.metadata["nbgrader"] = {"grade": True, "grade_id": "bonus_for_me", "points": 100, "solution": False,
                                  "locked": False, "schema_version": 3, "task": False}
    new_cell.cells.append(extra)
    renamed = notebook()
    for c in renamed.cells:
        if grade_id(c) == "test_lesson02_zeros":
            c.metadata["nbgrader"]["grade_id"] = "my_zeros"
    edited = notebook(NAIVE)
    for c in edited.cells:
        if grade_id(c) == "test_lesson02_memory":
            c.source = "print('всё хорошо')"
    helper = notebook({"fused_rms_norm": "from rmshelper import fused_rms_norm"})
    huge = notebook()
    huge.cells.append(nbformat.v4.new_code_cell("print('x' * 50_000_000)"))
    return {
        "numpy_file": (notebook(), {"numpy.py": hostile_module(root)}, "ref_a", {"shadowing_file"}),
        "autograder_file": (notebook(), {"autograder.py": "x = 1\n"}, "ref_a", {"shadowing_file"}),
        "helper_module": (helper, {"rmshelper.py": "import numpy as np\n\n" + REFERENCE["fused_rms_norm"]},
                          "ref_a", {"extra_file"}),
        "deleted_test": (without(notebook(), "test_lesson02_zeros"), {}, "ref_a", {"restored_cell"}),
        "deleted_failing_test": (without(notebook(NAIVE), "test_lesson02_memory"), {}, "naive", {"restored_cell"}),
        "deleted_setup": (without(notebook(), "setup"), {}, "ref_a", {"restored_cell"}),
        "duplicated_test": (duplicated, {}, "ref_a", {"duplicate_cell"}),
        "new_grade_cell": (new_cell, {}, "ref_a", {"unknown_grade_cell"}),
        "renamed_grade_id": (renamed, {}, "ref_a", {"unknown_grade_cell", "restored_cell"}),
        "edited_test": (edited, {}, "naive", {"edited_cell"}),
        "huge_output": (huge, {}, "ref_a", {"output_cut"}),
        "glob[1]": (notebook(), {}, "ref_a", set()),
        "broken_json": (None, {}, None, {"invalid_notebook"}),
    }


def make_class(folder: Path, students: dict) -> Path:
    """A course as the instructor has it: assignment generated, these submissions collected."""
    nbgrader_cli.new_course(folder, only=[LESSON])
    nbgrader_cli.nbgrader("generate_assignment", LESSON, "--force", cwd=folder)
    for student, (nb, files) in students.items():
        target = folder / "submitted" / student / LESSON
        target.mkdir(parents=True, exist_ok=True)
        if nb is None:
            (target / f"{LESSON}.ipynb").write_text("{это не JSON")
        else:
            nbformat.write(nb, target / f"{LESSON}.ipynb")
        for name, text in files.items():
            (target / name).write_text(text)
    return folder


def grades(folder: Path, lesson: str = LESSON) -> dict[str, dict[str, float | None]]:
    """student -> {cell: auto_score} straight from the gradebook (NULL stays None)."""
    with course_folder.quiet(), Gradebook(f"sqlite:///{folder / 'gradebook.db'}") as gradebook:
        return {sub.student.id: {g.name: g.auto_score for nb in sub.notebooks for g in nb.grades}
                for sub in gradebook.find_assignment(lesson).submissions}


def forget_scores(folder: Path, students=None) -> None:
    """What a kill between nbgrader writing the notebook and the grades leaves: NULL scores."""
    with course_folder.quiet(), Gradebook(f"sqlite:///{folder / 'gradebook.db'}") as gradebook:
        for sub in gradebook.find_assignment(LESSON).submissions:
            if students is None or sub.student.id in students:
                for nb in sub.notebooks:
                    for g in nb.grades:
                        g.auto_score = None
        gradebook.db.commit()


def honest_class() -> dict:
    return {name: (make(), {}) for name, make in HONEST.items()}


def once_per_run(tmp_path_factory, name: str, compute):
    """``compute()`` (a JSON value) once for the whole test run, however many xdist workers ask: the first one
    computes it under a file lock in the run's shared temporary folder, the others wait for it and read it."""
    import fcntl
    import json
    import os

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # popen-gwN/.. is the run's own
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = shared / f"{name}.json"
        if not done.exists():
            done.write_text(json.dumps(compute()))
        return json.loads(done.read_text())


@pytest.fixture(scope="session")
def clean(tmp_path_factory):
    """The honest students alone, graded by `course autograde`: the grades every case must keep (once per test
    run: the tests of tests/test_class_kills.py and tests/test_class_faults.py spread over the xdist workers)."""
    def grade_the_honest_class():
        folder = make_class(tmp_path_factory.mktemp("clean"), honest_class())
        summary = parallel.autograde(folder, workers=2, progress=False)
        assert not summary.failed, summary.text()
        return grades(folder)

    return once_per_run(tmp_path_factory, "clean-class-grades", grade_the_honest_class)
