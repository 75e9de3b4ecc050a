"""Peak memory of a student call, measured with tracemalloc references taken at import.

The functions are bound when this module is imported (in the worker, before any student code
exists), so a student who replaces ``tracemalloc.get_traced_memory`` changes nothing here; one
who stops tracing inside the function is caught because tracing is checked afterwards.
NumPy reports its data buffers to tracemalloc, so the peak counts array memory.

:func:`peaks_within` is the one memory check of the lessons: each case measured, its lines added to one
table, the first peak over its bound a failure.
"""
from __future__ import annotations

import dataclasses

from tracemalloc import (clear_traces as _clear_traces, get_traced_memory as _get_traced_memory,
                         is_tracing as _is_tracing, start as _start, stop as _stop)

from typing import Callable, Iterable

from .student_process import measured
from .core import CheckFailed, call_student, compare, describe_case

MiB = 2**20


#: How much more than tracemalloc's peak the student process's resident memory may grow by in a call: pages of
#: NumPy's and the interpreter's own (measured: at most 2.0 MiB over tracemalloc for the reference solutions,
#: benchmarks/resident_memory.py; a (T, D) float64 temporary of lesson 02 is 16 MiB) and huge-page rounding.
RESIDENT_SLACK = 4 * 2**20


@dataclasses.dataclass(frozen=True)
class Peak:
    """A measured peak next to the bound it is held to: tracemalloc's peak and, where the worker judges, how much
    the student process's resident memory grew (the judge's reading: every allocation, mmap included)."""

    bytes: int
    result: object
    resident: int | None = None

    @property
    def evaded(self) -> bool:
        """Whether the process grew by more than tracemalloc saw (beyond :data:`RESIDENT_SLACK`)."""
        return self.resident is not None and self.resident - RESIDENT_SLACK > self.bytes

    @property
    def counted(self) -> int:
        """What the bound is held to: tracemalloc's peak, or the process's growth where it saw far less."""
        return self.resident - RESIDENT_SLACK if self.evaded else self.bytes

    @property
    def mib(self) -> float:
        return self.bytes / MiB


def measure_peak(function, *args, case: str, what: str = "функция", **kwargs) -> Peak:
    """Call the student's function under tracemalloc; the peak excludes the inputs.  Measured where the
    student's code runs (its student process, when the worker judges)."""
    (peak, result), resident = measured(_measured_call, function, *args, case=case, what=what, **kwargs)
    if type(peak) is not int:
        raise CheckFailed(f"пик памяти не измерен (случай: {case}).")
    return Peak(peak, result, resident)


def _measured_call(function, *args, case: str, what: str, **kwargs) -> tuple[int, object]:
    if _is_tracing():
        _stop()
    _start()
    _clear_traces()
    try:
        result = call_student(function, *args, case=case, what=what, **kwargs)
        if not _is_tracing():
            raise CheckFailed(f"{what} остановила tracemalloc (случай: {case}): память так не измерить.")
        _, peak = _get_traced_memory()
    finally:
        if _is_tracing():
            _stop()
    return int(peak), result


def checked_peak(function, args: tuple, expected: Callable[[], object], *, case: str, what: str,
                 **tolerance) -> Peak:
    """:func:`measure_peak` of ``function(*args)``, whose result must then match ``expected()``
    (:func:`checks.core.compare`, with ``tolerance``)."""
    peak = measure_peak(function, *args, case=case, what=what)
    compare(peak.result, expected(), case=case, **tolerance)
    return peak


def peak_table(rows: list[tuple[str, float, float]]) -> str:
    """A small text table: what, peak MiB, allowed MiB, the share of the allowance used (in %)."""
    lines = [f"{'что':<28}{'пик, МиБ':>10}{'допуск, МиБ':>13}{'от допуска':>12}"]
    for name, peak, allowed in rows:
        share = f"{peak / allowed:>11.0%} " if allowed else f"{'—':>11} "
        lines.append(f"{name:<28}{peak / MiB:>10.2f}{allowed / MiB:>13.2f}{share}")
    return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class Bound:
    """One case of a memory check: its measured peak, what it may take, its lines of the table and the
    failure message (given the table so far) when the peak is over."""

    peak: Peak
    allowed: float
    rows: list[tuple[str, float, float]]
    too_much: Callable[[str], str]


def one_row(peak: Peak, allowed: float, label: str, too_much: Callable[[str], str]) -> Bound:
    """The :class:`Bound` of a case that is one row of the table: ``label``, its peak, what it may take."""
    return Bound(peak, allowed, [(label, peak.bytes, allowed)], too_much)


def peaks_within(cases: Iterable[dict], measure: Callable[[dict, str], Bound]) -> str:
    """Every case's ``measure(case_dict, case_description)`` within its bound: the table of all the peaks,
    or CheckFailed for the first case over it."""
    rows: list[tuple[str, float, float]] = []
    LAST_BOUNDS.clear()
    for c in cases:
        bound = measure(c, describe_case(**c))
        rows += bound.rows
        LAST_BOUNDS.append(bound)
        if bound.peak.evaded and bound.peak.counted > bound.allowed:
            raise CheckFailed(hidden_allocation(bound, peak_table(rows)))
        if bound.peak.bytes > bound.allowed:
            raise CheckFailed(bound.too_much(peak_table(rows)))
    return peak_table(rows)  # the resident growth, which varies run by run, is not in a passing verdict's words


#: The cases of the last memory check this process judged, measured (benchmarks/resident_memory.py reads them).
LAST_BOUNDS: list[Bound] = []


def hidden_allocation(bound: Bound, table: str) -> str:
    """The message for memory tracemalloc did not see: the process grew by more than it and than the bound."""
    peak = bound.peak
    return (f"Память процесса выросла на {peak.resident / MiB:.1f} МиБ, а tracemalloc видел только "
            f"{peak.mib:.1f} МиБ (допустимо {bound.allowed / MiB:.2f} МиБ): память выделена в обход NumPy — "
            "через mmap, ctypes или другой аллокатор. Проверка считает всю память процесса, так её не спрятать: "
            "создавайте временные массивы поблочно.\n" + table)
