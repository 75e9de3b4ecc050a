"""`course grade NOTEBOOK`: self-study grading prints the words the notebook shows."""
import nbformat

from autograder.course import cli, paths as course

from autograder.course import grading
from bank import banks

LESSON = "02_fused_rmsnorm"


def test_self_study_grade_names_each_check_and_why_it_failed(tmp_path, capsys):
    wrong = {s.name: s for s in banks()[LESSON].WRONG}["naive_temporaries"].answers
    nb = grading.fill_answers(LESSON, {**grading.reference_answers(LESSON), **wrong})
    path = tmp_path / f"{LESSON}-Copy1.ipynb"
    nbformat.write(nb, path)
    assert cli.main(["grade", str(path)]) == 2
    assert f"--lesson {LESSON}" in capsys.readouterr().err  # a copy's name: the command to use instead
    assert cli.main(["grade", str(path), "--lesson", LESSON]) == 0
    out = capsys.readouterr().out
    assert "✓ Эквивалентность с эталоном float64: 3 из 3" in out
    assert "✗ Пик памяти ≈ размер выхода: нет временных (T, D): 0 из 2" in out
    assert "временные массивы (T, D)" in out  # the check's own message, not only a cell id
    assert "+2 из 2 (бонус)" in out  # the bonus is scored apart, above the maximum
    assert "ИТОГО: 9 из 12 и бонус +3" in out and "test_lesson02_" not in out


def test_bonus_extra_credit_counts_each_bonus_check_once_and_only_when_every_call_passed():
    from autograder.nbgrader.bonus import bonus_points

    visible = {"check_id": "lesson02.add_equivalence", "points": 2.0, "passed": True, "bonus": True}
    hidden_failed = {**visible, "passed": False, "hidden": True}
    memory = {"check_id": "lesson02.add_memory", "points": 1.0, "passed": True, "bonus": True}
    regular = {"check_id": "lesson02.memory", "points": 2.0, "passed": True, "bonus": False}
    assert bonus_points([visible, dict(visible, hidden=True), memory, regular]) == 3.0
    assert bonus_points([visible, hidden_failed, memory]) == 1.0
    assert bonus_points([regular]) == 0.0
