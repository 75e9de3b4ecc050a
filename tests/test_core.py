"""Do the shared pieces of every check say what they should?"""
import numpy as np
import pytest

from autograder.checks import mistakes
from autograder.checks.core import CheckFailed, all_checks, compare, describe_case, require_array
from autograder.nbgrader.cells import parse_grade_cell


def test_compare_passes_within_tolerance_and_returns_the_error():
    """Does compare accept float32 rounding of a float64 oracle and return the max error?"""
    expected = np.linspace(-3, 3, 12).reshape(3, 4)
    error = compare(expected.astype(np.float32), expected, case="3x4")
    assert 0 <= error < 1e-6


def test_compare_names_case_max_error_and_first_bad_index():
    """Is a mismatch reported with the case, the max error and the first bad index?"""
    expected = np.zeros((2, 3))
    got = np.zeros((2, 3), np.float32)
    got[1, 2] = 0.5
    with pytest.raises(CheckFailed) as failure:
        compare(got, expected, case=describe_case(T=2, D=3, seed=7), hint="проверьте ось")
    message = str(failure.value)
    assert "T=2, D=3, seed=7" in message and "0.5" in message and "(1, 2)" in message
    assert "проверьте ось" in message


@pytest.mark.parametrize("got, says", [
    (np.zeros((2, 2), np.float64), "dtype float64"),
    (np.zeros((2, 3), np.float32), "форма (2, 3)"),
    ([[0.0, 0.0], [0.0, 0.0]], "numpy.ndarray"),
    (None, "numpy.ndarray"),
])
def test_shape_and_dtype_come_before_values(got, says):
    """Are wrong types, shapes and dtypes refused before any value is compared?"""
    with pytest.raises(CheckFailed, match=says.replace("(", r"\(").replace(")", r"\)")):
        compare(got, np.zeros((2, 2)), case="2x2")


def test_an_object_with_a_forged_eq_is_not_an_array():
    """Is an ndarray subclass whose == is always True refused?"""
    class Liar(np.ndarray):
        def __eq__(self, other):
            return True

    with pytest.raises(CheckFailed, match="numpy.ndarray"):
        require_array(np.zeros((2, 2), np.float32).view(Liar), shape=(2, 2), dtype="float32", case="c")


def test_nan_outputs_are_reported_as_nan():
    """Does a NaN where the oracle is finite fail with a message about NaN?"""
    got = np.array([1.0, np.nan], np.float32)
    with pytest.raises(CheckFailed, match="NaN"):
        compare(got, np.array([1.0, 2.0]), case="n=2")


def test_identify_names_the_matching_variant_only():
    """Does identify name the variant whose output matches, and nothing when none does?"""
    x = np.arange(4.0)
    variants = {"удвоение": lambda a: 2 * a, "сдвиг": lambda a: a + 1, "падает": lambda a: 1 / 0}
    close = mistakes.arrays_close(1e-5, 1e-5)
    assert mistakes.identify((x + 1).astype(np.float32), x, variants, (x,), close=close) == "сдвиг"
    assert mistakes.identify(np.float32(3) * x.astype(np.float32), x, variants, (x,), close=close) is None


def test_parse_grade_cell_accepts_only_grade_calls():
    """Does the autograde step recognise grade() cells and refuse anything else?"""
    calls = parse_grade_cell("# c\nfrom autograder import grade\ngrade('lesson02.zeros', f)\n"
                             "### BEGIN HIDDEN TESTS\ngrade('lesson02.zeros', f, cases=[{'T': 1}])\n")
    assert [(c.check_id, c.names, c.cases) for c in calls] == [
        ("lesson02.zeros", ("f",), None), ("lesson02.zeros", ("f",), [{"T": 1}])]
    assert parse_grade_cell("grade('lesson02.zeros', f)\nprint(1)") is None
    assert parse_grade_cell("grade('lesson02.zeros', f(1))") is None
    assert parse_grade_cell("x = 1") is None


def test_every_check_has_points_title_and_a_lesson_prefix():
    """Is every registered check well formed?"""
    checks = all_checks()
    assert checks
    for check_id, check in checks.items():
        assert check_id.split(".")[0].startswith("lesson") and check.points > 0 and check.title


def test_russian_plural_forms():
    from autograder.checks.core import plural

    forms = ("оператор", "оператора", "операторов")
    assert [plural(n, *forms) for n in (1, 2, 4, 5, 11, 12, 14, 21, 22, 25, 101, 111, 104)] == [
        "оператор", "оператора", "оператора", "операторов", "операторов", "операторов", "операторов",
        "оператор", "оператора", "операторов", "оператор", "операторов", "оператора"]


def test_an_exception_of_student_code_shows_the_students_frames_not_the_graders():
    """A student's function that fails inside the grader's own code (a stand-in's raise, a helper of the
    package) shows its own lines: the grader's frames would tell the student nothing and reveal its paths."""
    from autograder.checks import core

    def student(values):
        return core.tolerance(values)  # a KeyError raised inside the package

    with pytest.raises(core.CheckFailed) as failure:
        core.call_student(student, "not a number", what="Функция", case="c")
    text = str(failure.value)
    assert "выбросила исключение" in text and "in student" in text, text
    assert core._PACKAGE_DIR not in text and "autograder/" not in text, text


def test_an_unknown_check_id_says_where_the_package_was_looked_for_and_what_to_do():
    """An author whose new lesson lives in another checkout than the one installed must see which package
    Python imported (the trial: an editable install of another checkout)."""
    from autograder.checks import core

    with pytest.raises(KeyError) as no_lesson:
        core.get_check("lesson98.equivalence")
    assert str(core.LESSONS_DIR) in str(no_lesson.value) and "pip install -e" in str(no_lesson.value)
    with pytest.raises(KeyError) as no_check:
        core.get_check("lesson02.no_such_check")
    assert "autograder.lessons.lesson02" in str(no_check.value) and "@check" in str(no_check.value)
