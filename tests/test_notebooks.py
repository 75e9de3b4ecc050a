"""Are the notebooks what the pipeline expects: runnable, well-formed, current, without outputs?"""
import nbformat
import pytest
from nbclient import NotebookClient

from autograder.course import paths as course

from autograder.course import release
from autograder.course.cli import notebooks_with_outputs
from autograder.checks.core import get_check
from autograder.nbgrader.cells import parse_grade_cell
from helpers import full_only

LESSONS = course.lessons()
CPU_LESSONS = [lesson for lesson in LESSONS if not course.is_gpu_lesson(lesson)]


def graded_cells(lesson):
    nb = nbformat.read(course.source_notebook(lesson), as_version=4)
    return [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")
            and not c.metadata["nbgrader"].get("solution")]


@pytest.mark.parametrize("lesson", LESSONS)
def test_graded_cells_only_call_grade_and_points_match_the_registry(lesson):
    """Is every graded test cell a pure grade() call whose points are the check's points (0 for a
    bonus check: its points are extra credit, outside the maximum)?"""
    cells = graded_cells(lesson)
    assert cells, f"{lesson} has no graded cells"
    for cell in cells:
        calls = parse_grade_cell(cell.source)
        assert calls, f"{lesson}: cell {cell.metadata.nbgrader.grade_id} is not only grade() calls"
        assert len({c.check_id for c in calls}) == 1, "one check per cell"
        check = get_check(calls[0].check_id)
        expected = 0 if check.bonus else check.points
        assert cell.metadata.nbgrader.points == expected, cell.metadata.nbgrader.grade_id


@full_only("the instructor's notebooks run without nbgrader (7 s of CI a lesson)",
           "test_autograde.py::test_autograde_scores_every_submission_as_the_bank_says: each lesson's reference graded "
           "whole through nbgrader, with full marks and no error or stderr output in any cell")
@pytest.mark.parametrize("lesson", CPU_LESSONS)
def test_solution_notebook_runs_top_to_bottom_with_every_check_passing(lesson):
    """Does the instructor's notebook (hidden tests included) run without a single error?"""
    path = course.source_notebook(lesson)
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            assert output.output_type != "error", f"{cell.source[:200]}\n{output.get('evalue')}"
            assert not (output.output_type == "stream" and output.name == "stderr"), \
                f"stderr output scores 0 under nbgrader:\n{cell.source[:200]}\n{output.text[:500]}"


def test_built_notebooks_are_current_and_without_outputs():
    """Are solutions/ and notebooks/ exactly what `make release` builds from lessons/, and is no
    notebook committed with outputs?"""
    assert release.stale_release() == []
    assert notebooks_with_outputs() == []


FAILING_CELL = ("from autograder import grade\n"
                "def fused_rms_norm(x, w, eps=1e-6):\n"
                "    return x\n"
                "grade('lesson02.equivalence', fused_rms_norm)")


@pytest.mark.parametrize("execution", ["validate", "autograde"])
def test_a_failed_check_shows_the_verdict_not_the_graders_traceback(execution, monkeypatch):
    """Under nbgrader (Validate, autograde: NBGRADER_EXECUTION), does a failing grade() cell raise, with one
    entry, the Russian verdict?"""
    monkeypatch.setenv("NBGRADER_EXECUTION", execution)  # what nbgrader sets; the kernel inherits it
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(FAILING_CELL)])
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True).execute()
    error = nb.cells[0].outputs[-1]
    assert error.output_type == "error" and error.ename == "CheckFailed"
    assert error.traceback == [f"Проверка не пройдена: {error.evalue}"]
    assert "Эквивалентность" in error.evalue and "notebook.py" not in error.traceback[0]


def test_run_all_in_the_students_own_kernel_goes_past_a_failed_check(monkeypatch):
    """In a person's own kernel (no NBGRADER_EXECUTION, no AUTOGRADER_STRICT), does a failing grade() cell
    print its verdict on stderr without raising, so that «Запустить все ячейки» (stop on error) reaches the
    next cells?"""
    from autograder.notebook import NOT_RAISED

    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.delenv("AUTOGRADER_STRICT", raising=False)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(FAILING_CELL),
                                         nbformat.v4.new_code_cell("print('дошли до конца')")])
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=False).execute()  # raises on an error
    failed = nb.cells[0].outputs
    assert [o.output_type for o in failed] == ["stream"] and failed[0].name == "stderr"
    assert failed[0].text.startswith("✗ Эквивалентность") and NOT_RAISED in failed[0].text
    assert nb.cells[1].outputs[0].text == "дошли до конца\n"


def test_a_failed_check_raises_outside_a_notebook_kernel():
    """Outside an ipykernel (a script, pytest, a worker), does a failing grade() raise as it always did?"""
    from autograder import grade
    from autograder.checks.core import CheckFailed
    from autograder.notebook import interactive_kernel

    assert not interactive_kernel()
    with pytest.raises(CheckFailed, match="Эквивалентность"):
        grade("lesson02.equivalence", lambda x, w, eps=1e-6: x)
