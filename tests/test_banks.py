"""Does every check pass the reference and its rewrites, and fail exactly the known mistakes?

In-process and fast: the check functions run directly in the test process, on the bank's answers.
The isolation around them (worker process, guard, nbgrader) is tested on its own in
tests/test_hardening_*.py, and tests/test_autograde.py repeats bank verdicts through the real
`nbgrader autograde` (all of them with `make test-full`).
"""
import contextlib
import re

import pytest

from autograder.course import paths as course
from autograder.checks.core import CheckFailed, get_check
from bank import Submission, banks, grade_calls, namespace

CASES = [(lesson, s) for lesson, bank in banks().items()
         for s in [Submission("reference", {})] + bank.CORRECT + bank.WRONG]


@pytest.fixture(autouse=True)
def without_worker_guard(monkeypatch):
    """The guard belongs to the worker process (tested in tests/test_hardening_*.py); here the
    check logic runs alone, so student calls go through call_student without it."""
    from autograder.isolation import guard

    monkeypatch.setattr(guard, "student_code", contextlib.nullcontext)


def failed_checks(lesson: str, submission: Submission) -> dict[str, tuple[str, set[str]]]:
    """check id -> (its first failure message, the known mistakes its failures named)."""
    ns = namespace(lesson, submission.answers)
    failed: dict[str, tuple[str, set[str]]] = {}
    for calls in grade_calls(lesson).values():
        for call in calls:
            check = get_check(call.check_id)
            if check.needs_gpu:
                continue  # a mixed lesson's GPU checks: their bank runs on a GPU (tests/test_gpu_lessons.py)
            objects = [ns[name] for name in call.names]
            try:
                check.function(*objects, **({"cases": call.cases} if call.cases is not None else {}))
            except CheckFailed as failure:
                mistake = getattr(failure, "mistake", None)
                named = re.findall(r"Похоже на известную ошибку: «(.+?)»", str(failure))
                # the report reads the mistake as data: the words and the data must agree
                assert named == ([mistake] if mistake else []), str(failure)
                failed.setdefault(call.check_id, (str(failure), set()))[1].update({mistake} - {None})
    return failed


@pytest.mark.parametrize("lesson, submission", CASES, ids=[f"{l}-{s.name}" for l, s in CASES])
def test_submission_loses_exactly_its_checks(lesson, submission):
    """Does this submission fail exactly the checks its bank entry names, naming exactly its known mistakes,
    with the right words?"""
    failed = failed_checks(lesson, submission)
    report = "\n\n".join(f"{k}, named {sorted(named)}: {message}" for k, (message, named) in failed.items())
    assert set(failed) == set(submission.loses), report
    assert set().union(*(named for _, named in failed.values())) == set(submission.mistakes), report
    if submission.says:
        assert any(submission.says in message for message, _ in failed.values()), report


def test_every_lesson_has_a_bank():
    """Is every lesson's grader graded by a bank of at least 10 known mistakes?"""
    found = banks()
    for lesson in course.lessons():
        if course.is_gpu_lesson(lesson):
            continue  # GPU lessons: their banks run on a GPU (tests/test_gpu_lessons.py)
        assert lesson in found, f"no bank for {lesson} in tests/banks/"
        assert len(found[lesson].WRONG) >= 10, f"{lesson}: fewer than 10 known-wrong submissions"
