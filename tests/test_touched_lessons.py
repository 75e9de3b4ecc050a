"""`make test-fast`'s selection (tests/touched_lessons.py): which lessons' banks a change keeps."""
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
    assert t.expression(set()) == "not e2e and not bank"
    assert t.expression({"05", "03"}) == "not e2e and (not bank or lesson(n='03') or lesson(n='05'))"
