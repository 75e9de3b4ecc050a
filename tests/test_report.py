"""The class report's pure parts: reading named mistakes, and the page it renders.

(The report on a really graded class is tested in tests/test_parallel.py, on its graded course.)
"""
from nbformat.v4 import new_code_cell, new_output

from autograder.course import report
from autograder.checks.core import CheckFailed, CheckResult
from autograder.checks.mistakes import compare_or_name
from autograder.nbgrader.execute import verdict_outputs


def failing_cell(message: str, mistake: str | None = None):
    cell = new_code_cell("grade('lesson02.x', f)")
    cell.outputs = verdict_outputs([CheckResult("lesson02.x", "Заголовок", 1.0, False, message, mistake)])
    return cell


def test_named_mistake_travels_as_data_from_the_check_to_the_report():
    """The mistake compare_or_name names reaches the report as the verdict's data, not by parsing text."""
    import numpy as np

    x = np.ones((2, 3), dtype=np.float32)
    try:
        compare_or_name(x * 2, x, inputs=(x,), variants={"умножили на 2 дважды": lambda v: v * 2},
                        case="T=2, D=3")
    except CheckFailed as failure:
        message, mistake = str(failure), failure.mistake  # what the worker sends back (worker.main)
    assert "умножили на 2 дважды" in message  # the student reads it too
    assert report.named_mistakes(failing_cell(message, mistake)) == [("умножили на 2 дважды", "Заголовок")]


def test_no_named_mistake_in_plain_failures_text_or_passes():
    """A failure without a named mistake, a message that only looks like one, a stdout mention,
    a pass: nothing is counted."""
    assert report.named_mistakes(failing_cell("результат не совпадает с эталоном")) == []
    assert report.named_mistakes(failing_cell("Похоже на известную ошибку: «только текст».")) == []
    cell = new_code_cell("")
    cell.outputs = [new_output("stream", name="stdout",
                               text="Похоже на известную ошибку: «не в ошибке»."),
                    new_output("execute_result", data={"text/plain": "1"})]
    assert report.named_mistakes(cell) == []


def test_page_shows_the_worst_check_and_the_top_mistake_first():
    """Does "Главное" name the check most students failed and the most frequent mistake?"""
    checks = (report.CheckStats("test_a", "Эквивалентность", 3.0, ("s1", "s2", "s3")),
              report.CheckStats("test_b", "Пик памяти", 2.0, ("s1",)))
    mistakes = (report.MistakeStats("02_x", "eps вне корня", ("s1", "s2"), ("Эквивалентность",)),)
    stats = report.LessonStats("02_x", 5.0, {"s1": 0.0, "s2": 2.0, "s3": 2.0, "s4": 5.0}, checks,
                               mistakes, unread=0)
    page = report.render([stats], "курс")
    top = page.split("<h2>Главное</h2>")[1].split("<h2>")[0]
    assert top.index("Эквивалентность") < top.index("Пик памяти")
    assert "<b>75 %</b>" in top and "«eps вне корня» — <b>2 (50 %)</b>" in top
    assert page.count("<img") == 1


def test_non_starters_do_not_decide_which_check_is_hardest_and_every_student_has_a_row():
    """Students who never started fail every check; the ranking is among those who started, the
    non-starters are counted apart, and a per-student table shows scores and what is missing."""
    checks = (report.CheckStats("test_first", "Первая проверка урока", 1.0, ("lazy1", "lazy2", "lazy3")),
              report.CheckStats("test_hard", "Трудная проверка", 1.0, ("lazy1", "lazy2", "lazy3", "s1", "s2")))
    stats = report.LessonStats("02_x", 2.0, {"lazy1": 0.0, "lazy2": 0.0, "lazy3": 0.0, "s1": 1.0, "s2": 1.0,
                                             "s3": 2.0}, checks, (), unread=0, blank=("lazy1", "lazy2", "lazy3"),
                               ungraded=(("broken", "ноутбук не читается"),), not_submitted=("absent",))
    assert stats.failed_share(checks[0]) == 0 and round(stats.failed_share(checks[1]), 3) == round(2 / 3, 3)
    page = report.render([stats], "курс")
    top = page.split("<h2>Главное</h2>")[1].split("<h2>")[0]
    assert "Трудная проверка" in top and "Первая проверка урока" not in top
    assert "Сданы, но не проверены (1)" in top and "broken" in top
    students = page.split("<h2>Студенты</h2>")[1]
    assert "не сдана" in students and "не проверена: ноутбук не читается" in students
    assert "0 из 2 (не приступал)" in students and "2 из 2" in students
