"""Does the one rule that names a known mistake name only what the student's output really matches?

The rule (autograder/checks/mistakes.py): the output misses the oracle, the variant misses the oracle on
the same case, and the output matches the variant by the comparison's own test.  The first tests are the
bug that made it: a near miss of the right answer was named after a variant that equals the oracle for
the default parameters (``eps`` hard-coded to 1e-6, on a case with eps = 1e-6), because the matcher took
1e-4 where the comparison had failed at 1e-5.
"""
import contextlib

import numpy as np
import pytest

from autograder.checks import mistakes, reference
from autograder.checks.core import CheckFailed
from autograder.checks.inputs import normal
from autograder.checks.mistakes import arrays_close, compare_or_name, first_match, identify, named
from autograder.checks.scalars import expect_number

EPS_IGNORED = "параметр eps игнорируется (зашит 1e-6)"


@pytest.fixture(autouse=True)
def without_worker_guard(monkeypatch):
    """Student calls go through call_student without the worker's guard (tested on its own)."""
    from autograder.isolation import guard

    monkeypatch.setattr(guard, "student_code", contextlib.nullcontext)


def rms_inputs(eps: float):
    x = normal((64, 128), 0)
    w = normal((128,), 1, 0.5) + np.float32(1.0)
    return x, w, eps


def near_miss(x, w, eps):
    """The right answer, 3e-5 off everywhere: fails float32's 1e-5, within the old matcher's 1e-4."""
    return (reference.rms_norm(x, w, eps) * (1 + 3e-5)).astype(np.float32)


def mistake_of(call) -> str | None:
    with pytest.raises(CheckFailed) as failed:
        call()
    return getattr(failed.value, "mistake", None)


def test_a_near_miss_is_not_named_after_a_variant_equal_to_the_oracle():
    """A near miss on a case with the default eps: no mistake named (it used to be a variant equal to
    the oracle there, «eps ignored» or «eps outside the root»)."""
    x, w, eps = rms_inputs(1e-6)
    assert np.allclose(reference.RMS_NORM_MISTAKES[EPS_IGNORED](x, w, eps), reference.rms_norm(x, w, eps))
    assert mistake_of(lambda: compare_or_name(near_miss(x, w, eps), reference.rms_norm(x, w, eps), inputs=(x, w, eps),
                                              variants=reference.RMS_NORM_MISTAKES, case="eps=1e-6")) is None


def test_a_near_miss_through_the_lesson_check_names_nothing():
    """The same through lesson02.equivalence, as a student's function: the failure names no mistake."""
    from autograder.lessons.lesson02.checks import equivalence

    message = None
    try:
        equivalence(near_miss)
    except CheckFailed as failure:
        message, mistake = str(failure), getattr(failure, "mistake", None)
    assert message is not None and mistake is None, message
    assert mistakes.PHRASE.split(":")[0] not in message


def test_the_variant_is_named_where_it_differs_from_the_oracle():
    """eps hard-coded, on a case with eps = 1e-2: there the variant differs, and the output that matches it is named."""
    x, w, eps = rms_inputs(1e-2)
    x *= np.float32(0.01)  # rows of tiny RMS: eps matters
    got = reference.rms_norm(x, w, 1e-6).astype(np.float32)
    assert mistake_of(lambda: compare_or_name(got, reference.rms_norm(x, w, eps), inputs=(x, w, eps),
                                              variants=reference.RMS_NORM_MISTAKES, case="eps=1e-2")) == EPS_IGNORED


def test_a_named_mistake_replaces_the_checks_general_hint_and_an_unnamed_miss_keeps_it():
    """The general hint of a comparison (e.g. «проверьте маску») may point away from the mistake the grader
    recognised: when a mistake is named the message carries it instead of the hint, otherwise the hint."""
    x = np.linspace(1, 2, 8)
    doubled = {"удвоение": lambda a: 2 * a}
    hint = "Подсказка: проверьте маску."
    with pytest.raises(CheckFailed) as named_one:
        compare_or_name((2 * x).astype(np.float32), x, inputs=(x,), variants=doubled, case="x", hint=hint)
    assert named_one.value.mistake == "удвоение" and hint not in str(named_one.value)
    assert "неверных элементов" in str(named_one.value)
    with pytest.raises(CheckFailed) as unnamed:
        compare_or_name((3 * x).astype(np.float32), x, inputs=(x,), variants=doubled, case="x", hint=hint)
    assert getattr(unnamed.value, "mistake", None) is None and hint in str(unnamed.value)


def test_the_match_is_as_strict_as_the_comparison():
    """An output 3e-5 off a variant that really differs from the oracle: the comparison's 1e-5 does not accept
    it, so neither does the matcher (the old one, at 1e-4, did)."""
    x = np.linspace(1, 2, 8)
    doubled = {"удвоение": lambda a: 2 * a}
    close = arrays_close(1e-5, 1e-5)
    assert identify((2 * x * (1 + 3e-5)).astype(np.float32), x, doubled, (x,), close=close) is None
    assert identify((2 * x).astype(np.float32), x, doubled, (x,), close=close) == "удвоение"


def test_a_variant_equal_to_the_oracle_is_never_named():
    """Whatever the output, a variant that equals the oracle on this case (here: within the tolerance) is skipped."""
    expected = np.ones(4)
    close = arrays_close(0.1, 0)
    got = np.full(4, 1.15, np.float32)  # misses the oracle (0.1) but is within 0.1 of the variant
    assert named(got, expected, [("почти эталон", np.full(4, 1.08))], close=close) is None
    assert named(got, expected, [("почти эталон", np.full(4, 1.08)), ("сдвиг", np.full(4, 1.2))],
                 close=close) == "сдвиг"


def test_right_values_of_a_wrong_dtype_and_outputs_without_finite_values_name_nothing():
    """Values that pass the comparison's test (the dtype failed) and an all-NaN output match no variant."""
    x = np.arange(1.0, 5.0)
    nan_variant = {"NaN": lambda a: np.full_like(a, np.nan), "сдвиг": lambda a: a + 1}
    close = arrays_close(1e-5, 1e-5)
    assert identify(x.copy(), x, {"сам x": lambda a: a}, (x,), close=close) is None
    assert identify(np.full(4, np.nan, np.float32), x, nan_variant, (x,), close=close) is None
    assert identify((x + 1).astype(np.float32), x, nan_variant, (x,), close=close) == "сдвиг"


def test_numbers_are_matched_by_the_comparison_exactness():
    """expect_number: a count compared exactly names a mistake only for exactly its value, and a wrong value
    equal to the right one (bytes = 0: «only FLOPs» is the right time) is never named."""
    assert mistake_of(lambda: expect_number(4 * 1024 * 2, 5 * 1024 * 2, call="f(1024)", exact=True,
                                            mistakes={"4 прохода": 4 * 1024 * 2})) == "4 прохода"
    assert mistake_of(lambda: expect_number(4 * 1024 * 2 + 1e-6, 5 * 1024 * 2, call="f(1024)", exact=True,
                                            mistakes={"4 прохода": 4 * 1024 * 2})) is None
    assert first_match(2.0, 1.0, {"равно эталону": 1.0, "удвоено": 2.0}, close=lambda a, b: a == b) == "удвоено"
    assert first_match(1.5, 1.0, {"равно эталону": 1.0}, close=lambda a, b: abs(a - b) <= 0.6) is None


def test_a_variant_that_cannot_run_or_be_read_says_nothing():
    """A variant that raises, or a value the test cannot read, is passed over."""
    x = np.arange(3.0)
    variants = {"падает": lambda a: 1 / 0, "строка": lambda a: "abc", "сдвиг": lambda a: a + 1}
    assert identify((x + 1).astype(np.float32), x, variants, (x,), close=arrays_close(1e-5, 1e-5)) == "сдвиг"


def test_a_python_float_in_a_float_parameter_is_the_low_word_of_a_double():
    """What CuPy's RawKernel gives a kernel's `float` parameter for a Python float (the stand-in's marshalling
    does the same: autograder/gpu/emulated_cupy.marshalled)."""
    from autograder.gpu import emulated_cupy

    for value, read in ((0.125, 0.0), (1e-6, -3.0819791e-19), (0.01, 89128.96)):
        assert reference.python_float_as_float_parameter(value) == np.float32(read)
        assert np.frombuffer(emulated_cupy.marshalled(value)[:4], np.float32)[0] == np.float32(read)


def test_eps_and_the_scale_as_python_floats_are_named_in_lessons_07_and_08():
    """A kernel that read eps (07) or 1/sqrt(d) (08) from a double: the hint says to pass np.float32."""
    from autograder.lessons.lesson08 import checks as lesson08

    x, w, eps = rms_inputs(1e-2)
    got = reference.rms_norm(x, w, reference.python_float_as_float_parameter(eps)).astype(np.float32)
    named07 = mistake_of(lambda: compare_or_name(got, reference.rms_norm(x, w, eps), inputs=(x, w, eps),
                                                 variants=reference.GPU_RMS_NORM_MISTAKES, case="eps=1e-2"))
    q, k, v = (normal((1, 64, 64), seed) for seed in (0, 1, 2))
    uniform = np.broadcast_to(v.astype(np.float64).mean(axis=1, keepdims=True), v.shape)  # scale 0 for d = 64
    named08 = mistake_of(lambda: compare_or_name(uniform.astype(np.float32), lesson08.oracle(q, k, v),
                                                 inputs=(q, k, v, False), variants=lesson08.MISTAKES, case="d=64"))
    for named in (named07, named08):
        assert named is not None and "число Python" in named and "np.float32" in named, named
