"""Known mistakes: wrong variants that the grader runs on the same input as the student.

When a student's output misses the oracle but matches one of these, the message names the
mistake instead of only printing numbers.  A lesson declares its variants either as functions
of the inputs (``{description: function(*inputs) -> wrong output}``, :func:`identify`) or
as wrong values already computed (``{description: value}``, :func:`first_match`).  Whatever matched,
:func:`failure` writes the message: the phrase «Похоже на известную ошибку: «…».» for the student
and ``CheckFailed.mistake`` as data for the report (:mod:`autograder.checks.verdicts`).  No other
place writes that phrase.

One rule names a mistake, in :func:`named`, for every lesson.  ``close(value, reference)`` is the
comparison's own test (its tolerance, :func:`arrays_close` for :func:`autograder.checks.core.compare`);
a variant is named only when, on the case at hand,

* the student's output misses the oracle: ``not close(got, expected)``;
* the variant's output misses the oracle too: ``not close(wrong, expected)`` — a variant that equals
  the right answer here (``eps`` hard-coded to its default, on a case with the default ``eps``) can
  never be named, so a near miss of the right answer is never taken for it;
* the student's output matches the variant by the same test: ``close(got, wrong)`` — never a looser
  tolerance than the one the comparison failed at.
"""
from __future__ import annotations

from typing import Callable, Iterable, Mapping

import numpy as np

Variant = Callable[..., object]  # the inputs -> the wrong output, in the form ``close`` reads
#: ``close(value, reference)``: does ``value`` pass the comparison against ``reference``?
Close = Callable[[object, object], bool]

PHRASE = "Похоже на известную ошибку: «{}»."


def failure(message: str, mistake: str | None = None, *, otherwise: str = "", then: str = ""):
    """A check's failure: ``message``, then the named mistake or else ``otherwise`` (a hint), then
    ``then`` (said in both cases).  The mistake travels as data too (``.mistake``)."""
    from .core import CheckFailed

    text = message
    if mistake:
        text += "\n" + PHRASE.format(mistake)
    elif otherwise:
        text += "\n" + otherwise
    if then:
        text += "\n" + then
    named = CheckFailed(text)
    named.mistake = mistake or None
    return named


def named(got, expected, wrongs: Iterable[tuple[str, object]], *, close: Close) -> str | None:
    """The description of the first wrong value that the rule of this module names (see its docstring)."""
    try:
        if close(got, expected):  # the values are right: the dtype or the layout failed, no mistake to name
            return None
    except Exception:
        return None
    for description, wrong in wrongs:
        try:
            if not close(wrong, expected) and close(got, wrong):
                return description
        except Exception:  # a wrong value the test cannot read says nothing
            continue
    return None


def first_match(got, expected, known: Mapping[str, object], *, close: Close) -> str | None:
    """The mistake among precomputed wrong values (``{description: value}``) that :func:`named` names."""
    return named(got, expected, known.items(), close=close)


def _outputs(variants: Mapping[str, Variant], inputs: tuple):
    """(description, output) of each variant on ``inputs``, computed as they are asked for."""
    for description, variant in variants.items():
        with np.errstate(all="ignore"):
            try:
                wrong = variant(*inputs)
            except Exception:  # a variant that cannot run on this input says nothing
                continue
        yield description, wrong


def identify(got, expected, variants: Mapping[str, Variant], inputs: tuple, *, close: Close) -> str | None:
    """The mistake among ``variants`` run on ``inputs`` that :func:`named` names."""
    return named(got, expected, _outputs(variants, inputs), close=close)


def arrays_close(atol: float, rtol: float) -> Close:
    """:func:`autograder.checks.core.compare`'s value test as ``close``: a plain ndarray of the reference's
    shape, ``|value − reference| ≤ atol + rtol·|reference|`` everywhere; NaN matches only NaN and an
    infinity only the same one.  A value without one finite element matches nothing: it would fit
    every variant that gives NaN."""

    def close(value, reference) -> bool:
        if type(value) is not np.ndarray:
            return False
        reference = np.asarray(reference, dtype=np.float64)
        if value.shape != reference.shape:
            return False
        with np.errstate(all="ignore"):
            value = value.astype(np.float64)
            return bool(np.isfinite(value).any()
                        and np.isclose(value, reference, atol=atol, rtol=rtol, equal_nan=True).all())

    return close


def compare_or_name(got, expected, *, inputs: tuple, variants: Mapping[str, Variant], case: str,
                    **compare_kwargs) -> float:
    """:func:`autograder.checks.core.compare`, and on a mismatch name the known mistake it matches
    (by the comparison's own tolerance)."""
    from .core import CheckFailed, compare, tolerance

    try:
        return compare(got, expected, case=case, **compare_kwargs)
    except CheckFailed as mismatch:
        atol, rtol = tolerance(compare_kwargs.get("dtype", "float32"), compare_kwargs.get("atol"),
                               compare_kwargs.get("rtol"))
        mistake = identify(got, expected, variants, inputs, close=arrays_close(atol, rtol))
        if mistake is None:
            raise
        if not compare_kwargs.get("hint"):
            raise failure(str(mismatch), mistake) from None
    # The named mistake replaces the check's general hint, which may point elsewhere (a mask, an overflow).
    try:
        compare(got, expected, case=case, **{**compare_kwargs, "hint": ""})
    except CheckFailed as mismatch:
        raise failure(str(mismatch), mistake) from None
    raise AssertionError("compare() passed on a second call with the same values")
