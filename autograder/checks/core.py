"""Checks, their registry and results, and the helpers every lesson's checks share.

A check is a plain function registered with :func:`check`.  It receives the student's objects
explicitly (never by digging in frames), runs them on seeded inputs and raises
:class:`CheckFailed` with a Russian message when a property does not hold.  Points are declared
once, here, and the nbgrader cell that calls the check carries the same number (a test asserts
it).  Checks run inside :mod:`autograder.isolation.worker`, a separate process, so they may trust nothing
the student's kernel did.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import pkgutil
import re
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np


#: Verdict marks: in every text font (DejaVu, Segoe UI...), unlike the emoji ✅/❌, which show as
#: empty boxes where no emoji font is installed.
PASS_MARK, FAIL_MARK, SKIP_MARK = "✓", "✗", "○"

from .failures import (_PACKAGE_DIR, MAX_MESSAGE_CHARS, CheckFailed, ExplainedError, GraderFault,  # noqa: F401
                       shorten)


@dataclasses.dataclass(frozen=True)
class Check:
    """A registered check: its id (``lessonNN.name``), points, title and timeout."""

    id: str
    points: float
    title: str
    function: Callable[..., str | None]
    timeout_s: float = 120.0
    memory_limit_gib: float | None = 4.0  # None: no address-space cap (GPU checks)
    needs_gpu: bool = False
    bonus: bool = False  # optional: not in the maximum, its points are extra credit
    #: Called in the check's student process before the student's objects are unpickled there (a GPU check
    #: without a GPU: the emulator's stand-in takes ``cupy``'s place, as in the notebook that sent them).
    before_payload: Callable[[], object] | None = None


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """What a run of one check produced; ``score`` is ``points`` or 0."""

    check_id: str
    title: str
    points: float
    passed: bool
    message: str
    mistake: str | None = None
    not_started: bool = False  # the student's function is still the released stub
    #: The grader could not run the check (its worker ended before the student's code ran): the
    #: result says nothing of the solution, so a grade must not be recorded from it.
    grader_fault: bool = False
    #: The student's function did not finish within the check's time limit (set by the grader, never by a worker):
    #: later checks of the same objects are failed without running (autograder/isolation/run.py, hang_rule).
    timed_out: bool = False

    @property
    def score(self) -> float:
        return self.points if self.passed else 0.0

    def summary(self) -> str:
        mark = PASS_MARK if self.passed else FAIL_MARK
        return f"{mark} {self.title}: {format_points(self.score)} из {format_points(self.points)}"


def is_bonus(check_id: str) -> bool:
    try:
        return get_check(check_id).bonus
    except KeyError:  # not a registered check (a test's stand-in): an ordinary one
        return False


def skipped_bonus(result: CheckResult) -> bool:
    """A bonus check whose function is still the released stub: not attempted, and no failure."""
    return not result.passed and result.not_started and is_bonus(result.check_id)


def skipped_bonus_line(result: CheckResult) -> str:
    return f"{SKIP_MARK} {result.title}: не выполнен — это необязательно (бонус, 0 доп. баллов)"


_REGISTRY: dict[str, Check] = {}


def check(check_id: str, *, points: float, title: str, timeout_s: float = 30.0,
          memory_limit_gib: float | None = 4.0, needs_gpu: bool = False,
          bonus: bool = False, before_payload: Callable[[], object] | None = None):
    """Register a check function under ``check_id`` (``lessonNN.name``)."""

    def register(function):
        if check_id in _REGISTRY and _REGISTRY[check_id].function.__qualname__ != function.__qualname__:
            raise ValueError(f"check id {check_id!r} registered twice")
        _REGISTRY[check_id] = Check(check_id, float(points), title, function, timeout_s,
                                    memory_limit_gib, needs_gpu, bonus, before_payload)
        return function

    return register


#: The grader's own checks, run in a worker like a lesson's but never graded: ``sanitizer.run_once``.
GRADER_MODULES = {"sanitizer": "autograder.gpu.sanitizer"}


#: A lesson's package, ``autograder.lessons.lessonNN``, and the prefix of its check ids.
LESSON_PACKAGE = re.compile(r"lesson\d\d")
LESSONS_DIR = Path(__file__).resolve().parent.parent / "lessons"


def lesson_packages() -> list[str]:
    """``["lesson01", ..., "lesson11"]``: the lesson packages there are (found by name, none listed by hand)."""
    return sorted(m.name for m in pkgutil.iter_modules([str(LESSONS_DIR)]) if m.ispkg and LESSON_PACKAGE.fullmatch(m.name))


def lesson_module_name(check_id: str) -> str:
    """``lesson02.equivalence`` -> ``autograder.lessons.lesson02`` (the lesson's package, found by name)."""
    prefix = check_id.split(".", 1)[0]
    if prefix in GRADER_MODULES:
        return GRADER_MODULES[prefix]
    if not LESSON_PACKAGE.fullmatch(prefix) or importlib.util.find_spec(f"autograder.lessons.{prefix}") is None:
        raise KeyError(f"нет пакета урока для проверки {check_id!r} в {LESSONS_DIR} — оттуда этот Python "
                       "импортирует пакет autograder; если урок добавлен в другой копии курса, установите её: "
                       "pip install -e <папка курса> (make создаёт .venv с этой копией)")
    return f"autograder.lessons.{prefix}"


def get_check(check_id: str) -> Check:
    """The registered check, importing its lesson's package on first use."""
    if check_id not in _REGISTRY:
        importlib.import_module(lesson_module_name(check_id))
    try:
        return _REGISTRY[check_id]
    except KeyError:
        raise KeyError(f"нет проверки {check_id!r} в {lesson_module_name(check_id)}: проверьте имя в вызове "
                       "grade(...) (его пишет ячейка урока) и @check в checks.py урока") from None


def all_checks(prefix: str = "") -> dict[str, Check]:
    """Every lesson check whose id starts with ``prefix`` (imports every lesson package; the grader's
    own checks, :data:`GRADER_MODULES`, are not lessons' and never listed)."""
    lessons = lesson_packages()
    for lesson in lessons:
        importlib.import_module(f"autograder.lessons.{lesson}")
    return {k: v for k, v in sorted(_REGISTRY.items()) if k.startswith(prefix) and k.split(".")[0] in lessons}


def lesson_checks(lesson: str) -> dict[str, Check]:
    """The checks of a course lesson folder name: ``"07_cupy_rmsnorm"`` -> the ``lesson07.*`` checks."""
    prefix = "lesson" + lesson.split("_", 1)[0]
    importlib.import_module(lesson_module_name(prefix))
    return {k: v for k, v in sorted(_REGISTRY.items()) if k.startswith(prefix + ".")}


def plural(count: int, one: str, few: str, many: str) -> str:
    """The Russian form for ``count``: plural(4, "оператор", "оператора", "операторов") -> "оператора"."""
    tens, units = count % 100, count % 10
    if units == 1 and tens != 11:
        return one
    if 2 <= units <= 4 and not 12 <= tens <= 14:
        return few
    return many


def format_points(points: float) -> str:
    return str(int(points)) if float(points).is_integer() else f"{points:g}"


# --- calling student code -------------------------------------------------------------------

def call_student(function: Any, *args, case: str, what: str = "функция", **kwargs):
    """Call the student's function; any exception becomes a CheckFailed naming the case.

    In a check's worker that judges (:mod:`autograder.checks.student_process`), ``function`` is a handle:
    the call, with this same function, runs in the student process and only its result comes back.  A grader
    helper around the student's objects (a probe that catches their exceptions) runs here, and each call of a
    handle in it goes there."""
    from . import student_process

    if student_process.judging() and student_process.is_handle(function):
        return student_process.in_student(call_student, function, *args, case=case, what=what, **kwargs)
    if not callable(function) or (student_process.is_handle(function)
                                  and not student_process.callable_handle(function)):
        raise CheckFailed(f"{what} должна быть функцией, а получено {type(function).__name__}.")
    from ..isolation import guard

    # In a judge no student code runs here: the handles' calls are guarded where they run.
    guarded = contextlib.nullcontext() if student_process.judging() else guard.student_code()
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with guarded:  # innermost: it restores the grader's state first
                return function(*args, **kwargs)
    except CheckFailed:
        raise
    except guard.Tampering as error:
        raise CheckFailed(f"Нарушение правил проверки на случае {case}: {error}.") from None
    except NotImplementedError:
        failure = CheckFailed(f"{what} ещё не реализована: в ней остался `raise NotImplementedError()` "
                              f"(случай: {case}).")
        failure.not_started = True  # a bonus left alone is no failure (notebook.grade, nbgrader_ext)
        raise failure from None
    except MemoryError:
        raise CheckFailed(f"{what} исчерпала лимит памяти проверки на случае {case}: "
                          "MemoryError. Скорее всего, создаётся слишком большой массив.") from None
    except BaseException as error:  # SystemExit and KeyboardInterrupt too: they are the student's
        # The student's frames only: the grader's own (a stand-in's raise, a helper's) tell a student nothing.
        frames = [frame for frame in traceback.extract_tb(error.__traceback__)[1:]
                  if not frame.filename.startswith(_PACKAGE_DIR)]
        where = "".join(traceback.format_list(frames[-3:])) if frames else ""
        if type(getattr(error, "student_where", None)) is str:  # raised in the student process, rebuilt here
            where, name, text = error.student_where, type(error).__name__, error.student_text
        else:
            try:
                name, text = guard.describe(error)  # its __str__ is student code
            except guard.Tampering as tampering:
                raise CheckFailed(f"Нарушение правил проверки на случае {case}: {tampering}.") from None
        limit = MAX_MESSAGE_CHARS if isinstance(error, ExplainedError) else 500
        if isinstance(error, ExplainedError) and getattr(type(error), "grader_limitation", False) is True:
            # what the grader here cannot run (the GPU stand-in lacks it): not gradable here, never a 0
            failure = CheckFailed(shorten(f"не проверено на случае {case}: {text}"))
            failure.not_gradable = True
            raise failure from None
        raise CheckFailed(shorten(
            f"{what} выбросила исключение на случае {case}:\n"
            f"{name}: {shorten(text, limit)}\n{where}")) from None


# --- comparing arrays ------------------------------------------------------------------------

TOLERANCES = {
    # dtype name -> (atol, rtol) against a float64 oracle
    "float32": (1e-5, 1e-5),
    "float64": (1e-10, 1e-10),
}


def require_array(got: Any, *, shape: tuple[int, ...], dtype: str, case: str, name: str = "результат") -> np.ndarray:
    """Type, shape and dtype first: a plain ndarray of exactly this shape and dtype."""
    if type(got) is not np.ndarray:  # subclasses and look-alikes with a forged __eq__ are refused
        raise CheckFailed(f"{name} должен быть numpy.ndarray, а получено {type(got).__name__} "
                          f"(случай: {case}).")
    if got.shape != tuple(shape):
        raise CheckFailed(f"{name}: форма {got.shape}, ожидалась {tuple(shape)} (случай: {case}).")
    if got.dtype != np.dtype(dtype):
        hint = ""
        if got.dtype == np.float64 and dtype == "float32":
            hint = (" Подсказка: NumPy 2 повышает float32 до float64, если смешать массив со скаляром "
                    "float64 (например, `x / np.sqrt(d)`): используйте np.float32(...) или .astype.")
        raise CheckFailed(f"{name}: dtype {got.dtype}, ожидался {dtype} (случай: {case}).{hint}")
    return got


def tolerance(dtype: str = "float32", atol: float | None = None, rtol: float | None = None) -> tuple[float, float]:
    """(atol, rtol) of a comparison: the ones given, else :data:`TOLERANCES` of ``dtype``."""
    default_atol, default_rtol = TOLERANCES[dtype]
    return (default_atol if atol is None else atol), (default_rtol if rtol is None else rtol)


def _hint_line(hint: str) -> str:
    return f"\nПодсказка: {hint}" if hint else ""


def nonfinite_failure(got: np.ndarray, expected: np.ndarray, bad_values: np.ndarray, *, case: str, hint: str = "",
                      name: str = "результат") -> CheckFailed:
    """The failure of an output with NaN/inf where ``bad_values``: how many, and the first of them."""
    index = tuple(int(i) for i in np.argwhere(bad_values)[0])
    return CheckFailed(f"{name} содержит {int(bad_values.sum())} значений NaN/inf (случай: {case}); "
                       f"первое в позиции {index}: {got[index]!r}, ожидалось {expected[index]:.6g}."
                       + _hint_line(hint))


def first_wrong(got64: np.ndarray, expected: np.ndarray, bad: np.ndarray, hint: str = "") -> str:
    """The last line of a mismatch: the first wrong index, its value and the expected one (and the hint)."""
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    return (f"Первый неверный индекс {index}: получено {float(got64[index]):.6g}, "
            f"ожидалось {float(expected[index]):.6g}." + _hint_line(hint))


def compare(got: Any, expected: np.ndarray, *, case: str, dtype: str = "float32",
            atol: float | None = None, rtol: float | None = None, hint: str = "",
            name: str = "результат") -> float:
    """Raise CheckFailed unless ``got`` matches ``expected``; returns the max abs error."""
    got = require_array(got, shape=expected.shape, dtype=dtype, case=case, name=name)
    atol, rtol = tolerance(dtype, atol, rtol)
    with np.errstate(all="ignore"):
        got64 = got.astype(np.float64)
        bad_values = ~np.isfinite(got64) & np.isfinite(expected)
        if bad_values.any():
            raise nonfinite_failure(got, expected, bad_values, case=case, hint=hint, name=name)
        error = np.abs(got64 - expected)
        bad = error > atol + rtol * np.abs(expected)
    if bad.any():
        raise CheckFailed(
            f"{name} не совпадает с эталоном float64 (случай: {case}).\n"
            f"Макс. ошибка {float(np.nanmax(error)):.3g} при допуске atol={atol:g}, rtol={rtol:g}; "
            f"неверных элементов {int(bad.sum())} из {bad.size}.\n" + first_wrong(got64, expected, bad, hint))
    return float(error.max()) if error.size else 0.0


def require_unchanged(inputs: dict[str, tuple[np.ndarray, np.ndarray]], *, case: str, what: str,
                      hint: str | Callable[[str], str]) -> None:
    """Raise CheckFailed if an input changed: ``inputs`` maps a name to (original, what was passed)."""
    for name, (before, after) in inputs.items():
        if not np.array_equal(before, after):
            changed = int(np.sum(before != after))
            text = hint(name) if callable(hint) else hint
            raise CheckFailed(f"{what} изменила вход {name}: {changed} элементов ({case}).\n{text}")


def describe_case(**params) -> str:
    """``T=4096, D=512, seed=1`` — how every message names its case."""
    return ", ".join(f"{k}={v}" for k, v in params.items())
