"""Numbers a student's function returns: one formatting, one comparison, one failure message.

Lessons 01 and 03 grade formulas (bytes, FLOPs, intensities) whose results are single numbers:
:func:`expect_number` compares exactly (counts) or with a relative tolerance of :data:`REL` (only
the order of float operations may differ) and names a known mistake through
:mod:`autograder.checks.mistakes`, by the same test.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from .core import CheckFailed
from .mistakes import failure, first_match

REL = 1e-9  # relative tolerance for ratios: only the order of float operations may differ


def fmt(value) -> str:
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return f"{int(value):,}".replace(",", "\u202f")  # narrow no-break space: one number, not two
    try:
        return f"{float(value):.6g}"
    except (TypeError, ValueError):
        return repr(value)[:80]


def is_number(value) -> bool:
    return isinstance(value, (numbers.Real, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def close(got, expected, exact: bool) -> bool:
    if not is_number(got) or not math.isfinite(float(got)):
        return False
    if exact:
        return float(got) == float(expected) or (isinstance(got, numbers.Integral) and int(got) == expected)
    return math.isclose(float(got), float(expected), rel_tol=REL, abs_tol=0.0)


def expect_number(got, expected, *, call: str, case: str = "", exact: bool = False,
                  mistakes: dict[str, float] | None = None, hint: str = "") -> None:
    """Raise CheckFailed unless ``got`` is a finite number equal to ``expected``; name a known mistake."""
    if close(got, expected, exact):
        return
    where = f" ({case})" if case else ""
    if not is_number(got):
        raise CheckFailed(f"{call} должна вернуть число, а вернула {type(got).__name__}: {fmt(got)}{where}.")
    mistake = first_match(got, expected, mistakes or {}, close=lambda value, reference: close(value, reference, exact))
    raise failure(f"{call}: получено {fmt(got)}, ожидалось {fmt(expected)}{where}.", mistake,
                  otherwise=f"Подсказка: {hint}" if hint else "")
