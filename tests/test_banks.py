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
    assert set(failed) == set(submission.loses), differs("loses", set(failed), set(submission.loses), report)
    named = set().union(*(named for _, named in failed.values()))
    assert named == set(submission.mistakes), differs("names the mistakes", named, set(submission.mistakes), report)
    if submission.says:
        assert any(submission.says in message for message, _ in failed.values()), \
            f"no failure message says {submission.says!r} (the entry's says=)\n\n{report or 'no check failed'}"


def differs(what: str, got: set[str], expected: set[str], report: str) -> str:
    """Why an entry's verdict is not what its bank entry says, in words (not a bare set comparison)."""
    lines = [f"the bank entry {what} {sorted(expected) or 'nothing'}, the checks gave {sorted(got) or 'nothing'}"]
    if expected - got:
        lines.append(f"  expected but not given: {sorted(expected - got)}"
                     + ("  (a wrong entry that loses nothing: the checks cannot see this mistake, or the edit"
                        " did not change the answer; a hidden case counts too)" if not got else ""))
    if got - expected:
        lines.append(f"  given but not expected: {sorted(got - expected)}")
    return "\n".join(lines) + "\n\n" + (report or "no check failed")


def test_every_lesson_has_a_bank():
    """Is every lesson's grader graded by a bank of at least 10 known mistakes?"""
    found = banks()
    for lesson in course.lessons():
        if course.is_gpu_lesson(lesson):
            continue  # GPU lessons: their banks run on a GPU (tests/test_gpu_lessons.py)
        assert lesson in found, f"no bank for {lesson} in tests/banks/"
        assert len(found[lesson].WRONG) >= 10, f"{lesson}: fewer than 10 known-wrong submissions"
