"""The pure parts of handling a submission: extra files and the repair of a notebook's structure.

(The same code under the real `nbgrader autograde` is tested in tests/test_class_faults.py.)
"""
import nbformat
from nbgrader.utils import compute_checksum

from autograder.nbgrader.submission import RESTORED_NOTE, SourceCell, extra_files, repair, shadowed_module


def source(grade_id, text, *, grade=False, solution=False, locked=True, points=None):
    return SourceCell(grade_id, "code", text, None, locked, solution, grade, False, points)


CELLS = [source("setup", "import numpy as np"),
         source("answer", "# ВАШ КОД ЗДЕСЬ\nraise NotImplementedError()", solution=True, locked=False),
         source("test_a", "grade('a', f)\n### BEGIN HIDDEN TESTS\ngrade('a', f, cases=[1])\n### END HIDDEN TESTS",
                grade=True, points=2.0),
         source("test_b", "grade('b', f)", grade=True, points=1.0)]


def student_notebook(skip=()):
    """The released notebook as a student would have it (hidden tests gone, answer written)."""
    nb = nbformat.v4.new_notebook()
    for c in CELLS:
        if c.grade_id in skip:
            continue
        text = {"answer": "def f(x):\n    return x", "test_a": "grade('a', f)"}.get(c.grade_id, c.source)
        cell = nbformat.v4.new_code_cell(text)
        cell.metadata["nbgrader"] = {"grade": c.grade, "grade_id": c.grade_id, "locked": c.locked,
                                     "solution": c.solution, "schema_version": 3, "task": False,
                                     **({"points": c.points} if c.grade else {})}
        cell.metadata["nbgrader"]["checksum"] = compute_checksum(cell)
        nb.cells.append(cell)
        nb.cells.append(nbformat.v4.new_code_cell("print('демо')"))
    return nb


def ids(nb):
    return [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]


def kinds(anomalies):
    return sorted(a.kind for a in anomalies)


def test_an_honest_notebook_needs_no_repair_but_gets_the_hidden_tests_back():
    nb = student_notebook()
    assert repair(nb, CELLS) == []
    assert ids(nb) == ["setup", None, "answer", None, "test_a", None, "test_b", None]
    assert "HIDDEN TESTS" in nb.cells[4].source and nb.cells[2].source.startswith("def f")


def test_deleted_cells_come_back_in_place_tests_whole_answers_as_stubs():
    nb = student_notebook(skip={"answer", "test_a"})
    assert kinds(repair(nb, CELLS)) == ["restored_cell", "restored_cell"]
    assert ids(nb) == ["setup", "answer", "test_a", None, "test_b", None]
    assert nb.cells[1].source.startswith(RESTORED_NOTE) and "NotImplementedError" in nb.cells[1].source
    assert nb.cells[2].source == CELLS[2].source and nb.cells[2].metadata.nbgrader.points == 2.0


def test_copies_unknown_ids_and_edits_are_neutralised():
    nb = student_notebook()
    copy = nbformat.v4.new_code_cell(nb.cells[6].source, metadata={"nbgrader": dict(nb.cells[6].metadata.nbgrader)})
    nb.cells.insert(1, copy)                                   # a copy of test_b early on
    stray = nbformat.v4.new_code_cell("print(1)")
    stray.metadata["nbgrader"] = {"grade": True, "grade_id": "mine", "points": 100}
    nb.cells.append(stray)                                     # a grade cell of the student's own
    broken = nbformat.v4.new_code_cell("x = 1")
    broken.metadata["nbgrader"] = "garbage"
    nb.cells.append(broken)                                    # metadata that is not even a dict
    nb.cells[5].source = "print('всё прошло')"                  # test_a edited (index after the insert)
    assert kinds(repair(nb, CELLS)) == ["duplicate_cell", "edited_cell", "unknown_grade_cell",
                                        "unknown_grade_cell"]
    assert [i for i in ids(nb) if i] == ["setup", "answer", "test_a", "test_b"]
    assert nb.cells[5].source == CELLS[2].source


def test_files_named_like_modules_are_told_apart_from_helpers(tmp_path):
    for name in ("numpy.py", "autograder.py", "json.py", "rmshelper.py", "data.csv", "x.ipynb"):
        (tmp_path / name).write_text("")
    (tmp_path / "IPython").mkdir()
    (tmp_path / "IPython" / "__init__.py").write_text("")
    assert shadowed_module(tmp_path / "numpy.py") == "numpy"
    assert shadowed_module(tmp_path / "json.py") == "json"
    assert shadowed_module(tmp_path / "IPython") == "IPython"
    assert shadowed_module(tmp_path / "rmshelper.py") is None
    names = ("IPython", "autograder.py", "data.csv", "json.py", "numpy.py", "rmshelper.py")
    found = {name: a.kind for a in extra_files(tmp_path, {"x.ipynb"}) for name in names if f" {name} " in a.detail}
    assert found == {"IPython": "shadowing_file", "autograder.py": "shadowing_file", "data.csv": "extra_file",
                     "json.py": "shadowing_file", "numpy.py": "shadowing_file", "rmshelper.py": "extra_file"}


def test_what_nbgrader_writes_into_a_submission_is_not_an_extra_file(tmp_path):
    """nbgrader's exchange puts timestamp.txt and submission_secret.txt into every submission: no warning for them
    (200 false «лишний файл» lines for a class of 200), one for a file of the student's own."""
    for name in ("x.ipynb", "timestamp.txt", "submission_secret.txt", "notes.txt"):
        (tmp_path / name).write_text("")
    assert [a.detail.split()[2] for a in extra_files(tmp_path, {"x.ipynb"})] == ["notes.txt"]


def test_a_students_helper_modules_travel_by_value(tmp_path, monkeypatch):
    """Modules right beside the notebook (a file or a package) are packed by value, so the check
    process, which never sees that folder, can call into them; nothing else is."""
    import pickle
    import subprocess
    import sys

    from autograder.isolation.run import pack_one, student_modules

    (tmp_path / "rmshelper_x.py").write_text("def twice(x):\n    return 2 * x\n")
    (tmp_path / "helperpkg_x").mkdir()
    (tmp_path / "helperpkg_x" / "__init__.py").write_text("from .inner import thrice\n")
    (tmp_path / "helperpkg_x" / "inner.py").write_text("def thrice(x):\n    return 3 * x\n")
    (tmp_path / "deeper").mkdir()
    (tmp_path / "deeper" / "other_x.py").write_text("y = 1\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(tmp_path / "deeper"))
    import helperpkg_x
    import other_x
    import rmshelper_x

    names = {m.__name__ for m in student_modules()}
    assert {"rmshelper_x", "helperpkg_x", "helperpkg_x.inner"} <= names and "other_x" not in names
    blob = pack_one(lambda x: rmshelper_x.twice(helperpkg_x.thrice(x)) + other_x.y * 0)
    for name in ("rmshelper_x", "helperpkg_x", "helperpkg_x.inner", "other_x"):
        sys.modules.pop(name, None)
    code = ("import pickle, sys; f = pickle.loads(sys.stdin.buffer.read()); print(f(7))")
    done = subprocess.run([sys.executable, "-I", "-c", code], input=blob, capture_output=True, cwd="/")
    assert b"No module named 'other_x'" in done.stderr  # by reference, as before: not the student's folder
    blob = pack_one(lambda x: rmshelper_x.twice(helperpkg_x.thrice(x)))
    done = subprocess.run([sys.executable, "-I", "-c", code], input=blob, capture_output=True, cwd="/")
    assert done.stdout.strip() == b"42", done.stderr
