"""`course grade` runs nbgrader's two commands in one process (`autograder.nbgrader.batch`):
the gradebook version it stamps is the one `alembic heads` reports, and a failing command stops
the batch with nbgrader's own message.  (That grades are nbgrader's own: tests/test_autograde.py,
tests/test_cli_grade.py.)
"""
import pytest

from autograder.course import paths as course

from autograder.course import nbgrader_cli


def test_the_batch_stamps_the_gradebook_version_alembic_reports(monkeypatch):
    from autograder.nbgrader.batch import alembic_head
    from nbgrader.api import get_alembic_version  # runs `alembic heads`, as nbgrader does

    monkeypatch.setenv("PATH", nbgrader_cli.nbgrader_env()["PATH"])
    assert alembic_head() == get_alembic_version()


def test_a_failing_command_stops_the_batch(tmp_path):
    folder = nbgrader_cli.new_course(tmp_path / "course", only=["03_swiglu"])
    done = nbgrader_cli.nbgrader_batch([("generate_assignment", "no_such_lesson", "--force"),
                                  ("generate_assignment", "03_swiglu", "--force")], cwd=folder, check=False)
    assert done.returncode != 0 and "No notebooks were matched" in done.stderr
    assert not course.student_notebook("03_swiglu", folder).exists()
    with pytest.raises(RuntimeError, match="no_such_lesson"):
        nbgrader_cli.nbgrader_batch([("generate_assignment", "no_such_lesson")], cwd=folder)
    nbgrader_cli.nbgrader_batch([("generate_assignment", "03_swiglu", "--force")], cwd=folder)
    assert course.student_notebook("03_swiglu", folder).exists()


def test_a_process_of_the_grader_reads_notebooks_without_building_the_iri_grammar():
    """autograder/__init__.py keeps jsonschema from importing rfc3987_syntax (a Lark grammar built at import: over a
    second of every nbgrader process); nbformat still validates notebooks."""
    import subprocess
    import sys

    probe = ("import autograder.course.autograde, nbformat, sys\n"
             "nbformat.validate(nbformat.v4.new_notebook())\n"
             "print(sorted(m for m in ('rfc3987_syntax', 'lark', 'nbgrader', 'jsonschema') if sys.modules.get(m)))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["['jsonschema',", "'nbgrader']"], done.stdout + done.stderr
