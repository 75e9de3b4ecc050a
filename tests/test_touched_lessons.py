"""`make test-fast`'s selection (tests/touched_lessons.py): which lessons' banks a change keeps."""
from pathlib import Path

import touched_lessons as t


def test_a_lesson_file_touches_its_lesson_only():
    assert t.touched(["lessons/03_swiglu.py", "tests/banks/bank_05_flash_attention.py", "README.md"])[0] == {"03", "05"}
    assert t.touched(["autograder/lessons/lesson10/checks.py", "tests/test_lesson11_flash_decoding.py"])[0] \
        == {"10", "11"}
    assert t.touched(["tests/test_gpu_lessons.py"])[0] == {"06", "07", "08", "09", "11"}


def test_the_shared_core_or_no_git_touches_every_lesson():
    assert t.touched(["autograder/checks/core.py"])[0] is None
    assert t.touched(["tests/bank.py"])[0] is None
    assert t.touched(None)[0] is None


def test_the_expression_keeps_unit_tests_and_the_touched_banks():
    assert t.expression(None) == "not e2e"
    assert t.expression(set(), emulator=False) == "not e2e and not bank and (not emulator or bank)"
    assert t.expression({"05", "03"}, emulator=False) \
        == "not e2e and (not bank or lesson(n='03') or lesson(n='05')) and (not emulator or bank)"
    assert t.expression({"08"}) == "not e2e and (not bank or lesson(n='08') or emulator)"


def test_only_a_change_to_the_emulator_or_its_tests_runs_the_emulators_tests():
    for path in ("autograder/gpu/emulator/machine.py", "autograder/gpu/emulated_cupy.py",
                 "tests/test_emulator_golden.py", "tests/golden/emulator/f32.json", "tests/emulated_banks.py"):
        assert t.emulator_touched([path]), path
        assert t.touched([path])[0] == set(), path  # and no lesson's in-process bank
    for path in ("autograder/gpu/nvrtc.py", "lessons/08_cupy_flash_attention.py", "README.md"):
        assert not t.emulator_touched([path]), path
    assert t.touched(["autograder/gpu/nvrtc.py"])[0] is None  # the GPU core still reaches every bank
    assert t.emulator_touched(None)


def _selected(expression: str, markers: set[str], lessons: set[str]) -> bool:
    """Evaluate a ``-m`` expression the way pytest does, for a test with these markers and lessons."""
    from _pytest.mark.expression import Expression

    def matcher(name, **kwargs):
        if name == "lesson":
            return kwargs.get("n") in lessons if kwargs else bool(lessons)
        return name in markers
    return Expression.compile(expression).evaluate(matcher)


def test_the_expression_selects_each_kind_of_test_as_documented():
    unit, e2e = (set(), set()), ({"e2e"}, {"02"})
    bank02, bank08 = ({"bank"}, {"02"}), ({"bank"}, {"08"})
    emulator_unit, emulator_bank08 = ({"emulator"}, set()), ({"emulator", "bank"}, {"08"})
    everything = [unit, e2e, bank02, bank08, emulator_unit, emulator_bank08]
    cases = {  # (lessons touched, emulator touched): what runs
        (frozenset({"08"}), False): [unit, bank08, emulator_bank08],
        (frozenset({"02"}), False): [unit, bank02],
        (frozenset(), True): [unit, emulator_unit, emulator_bank08],
        (None, False): [unit, bank02, bank08, emulator_bank08],
        (None, True): [unit, bank02, bank08, emulator_unit, emulator_bank08],
    }
    for (lessons, emulator), expected in cases.items():
        expression = t.expression(None if lessons is None else set(lessons), emulator)
        chosen = [test for test in everything if _selected(expression, *test)]
        assert chosen == expected, (lessons, emulator, expression)


def test_make_test_lesson_runs_the_tests_of_the_lessons_tables_and_lists_for_any_lesson():
    from types import SimpleNamespace

    from conftest import EVERY_LESSON_FILES, lessons_of

    from autograder.course.paths import text_lessons
    every = {lesson[:2] for lesson in text_lessons()}
    assert {"01", "11"} <= every
    for name in EVERY_LESSON_FILES:
        assert (Path(__file__).parent / name).exists(), name
        assert lessons_of(SimpleNamespace(path=Path("tests") / name)) == every
    assert lessons_of(SimpleNamespace(path=Path("tests/test_lesson05_tracing.py"), callspec=None)) == {"05"}
