"""Known mistakes: wrong variants that the grader runs on the same input as the student.

When a student's output misses the oracle but matches one of these, the message names the
mistake instead of only printing numbers.  A lesson declares its variants either as functions
of the inputs (``{description: function(*inputs) -> array | number | tuple}``, :func:`identify`) or
as wrong values already computed (``{description: value}``, :func:`first_match`); a plot's mistakes
are matched by the lesson's own geometry.  Whatever matched, :func:`failure` writes the message:
the phrase «Похоже на известную ошибку: «…».» for the student and ``CheckFailed.mistake`` as data
for the report (:mod:`autograder.checks.verdicts`).  No other place writes that phrase.
"""
from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

Variant = Callable[..., "np.ndarray | tuple"]

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


def first_match(got, known: Mapping[str, object], match: Callable[[object, object], bool]) -> str | None:
    """The description of the first precomputed wrong value that ``match(got, value)`` accepts."""
    return next((description for description, wrong in known.items() if match(got, wrong)), None)


def _matches(got, wrong, atol: float, rtol: float) -> bool:
    if isinstance(wrong, tuple):
        wrong = wrong[0]
    if type(got) is not np.ndarray or np.shape(got) != np.shape(wrong):
        return False
    with np.errstate(all="ignore"):
        return bool(np.allclose(got.astype(np.float64), np.asarray(wrong, dtype=np.float64),
                                atol=atol, rtol=rtol, equal_nan=True))


def identify(got, variants: Mapping[str, Variant], inputs: tuple, *, atol: float = 1e-4,
             rtol: float = 1e-4, match: Callable[[object, object], bool] | None = None) -> str | None:
    """The description of the first variant whose output on ``inputs`` matches ``got``: arrays
    (and the first array of a tuple) within ``atol``/``rtol``, or as ``match(got, wrong)`` says."""
    for description, variant in variants.items():
        with np.errstate(all="ignore"):
            try:
                wrong = variant(*inputs)
            except Exception:  # a variant that cannot run on this input says nothing
                continue
        try:
            hit = match(got, wrong) if match is not None else _matches(got, wrong, atol, rtol)
        except Exception:
            continue
        if hit:
            return description
    return None


def compare_or_name(got, expected, *, inputs: tuple, variants: Mapping[str, Variant], case: str,
                    **compare_kwargs) -> float:
    """:func:`autograder.checks.core.compare`, and on a mismatch name the known mistake it matches."""
    from .core import CheckFailed, compare

    try:
        return compare(got, expected, case=case, **compare_kwargs)
    except CheckFailed as mismatch:
        mistake = identify(got, variants, inputs)
        if mistake is None:
            raise
        raise failure(str(mismatch), mistake) from None
