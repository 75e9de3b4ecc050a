"""Known mistakes: wrong variants that the grader runs on the same input as the student.

When a student's output misses the oracle but matches one of these, the message names the
mistake instead of only printing numbers.  Each lesson module declares its variants as
``{description: function(*inputs) -> array}`` and passes them to :func:`identify`.
"""
from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

Variant = Callable[..., "np.ndarray | tuple"]


def _matches(got, wrong, atol: float, rtol: float) -> bool:
    if isinstance(wrong, tuple):
        wrong = wrong[0]
    if type(got) is not np.ndarray or np.shape(got) != np.shape(wrong):
        return False
    with np.errstate(all="ignore"):
        return bool(np.allclose(got.astype(np.float64), np.asarray(wrong, dtype=np.float64),
                                atol=atol, rtol=rtol, equal_nan=True))


def identify(got, variants: Mapping[str, Variant], inputs: tuple, *, atol: float = 1e-4,
             rtol: float = 1e-4) -> str | None:
    """The description of the first variant whose output on ``inputs`` matches ``got``."""
    for description, variant in variants.items():
        with np.errstate(all="ignore"):
            try:
                wrong = variant(*inputs)
            except Exception:  # a variant that cannot run on this input says nothing
                continue
        if _matches(got, wrong, atol, rtol):
            return description
    return None


def compare_or_name(got, expected, *, inputs: tuple, variants: Mapping[str, Variant], case: str,
                    **compare_kwargs) -> float:
    """:func:`autograder.core.compare`, and on a mismatch name the known mistake it matches."""
    from .core import CheckFailed, compare

    try:
        return compare(got, expected, case=case, **compare_kwargs)
    except CheckFailed as failure:
        mistake = identify(got, variants, inputs)
        if mistake is None:
            raise
        named = CheckFailed(f"{failure}\nПохоже на известную ошибку: «{mistake}».")
        named.mistake = mistake
        raise named from None
