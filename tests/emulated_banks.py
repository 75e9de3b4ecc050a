"""The GPU banks' value checks run in this process, on the PTX emulator or on a GPU, with every output kept.

Used by ``tests/test_emulator_banks.py`` (a sample, no GPU) and ``benchmarks/emulator_vs_h200.py`` (every entry,
both sides).  The banks themselves (entries, what each loses on a GPU) are ``tests/test_gpu_lessons.py``'s.

A *value check* runs the student's wrapper and compares its output with the oracle; the other GPU checks
(compute-sanitizer, memory accounting, timing) observe what the emulator does not model the same way, and are
left to the GPU.  On the emulator every launch's findings are kept: a race or an out-of-bounds access the values
did not show still counts as the entry's fault.
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import time

import numpy as np

import test_gpu_lessons as banks
from autograder.checks.core import CheckFailed, get_check
from autograder.gpu import runtime
from autograder.isolation import guard

#: The value checks of each GPU lesson (the lessons' other GPU checks need a GPU's sanitizer, allocator or clock).
VALUE_CHECKS = {
    banks.L06: ("lesson06.scale_add", "lesson06.row_sums", "lesson06.matmul"),
    banks.L07: ("lesson07.equivalence", "lesson07.tails", "lesson07.not_mutated"),
    banks.L08: ("lesson08.equivalence", "lesson08.tails", "lesson08.causal", "lesson08.large_logits",
                "lesson08.causal_skip"),
    banks.L09: ("lesson09.mma_matmul", "lesson09.equivalence", "lesson09.tails", "lesson09.causal",
                "lesson09.causal_skip"),
    banks.L11: ("lesson11.gpu_equivalence", "lesson11.gpu_splits"),
}

#: How far apart an output of the emulator and of the GPU may be: the lessons' own tolerances (atol, rtol).
AGREEMENT = {"lesson08.large_logits": (2e-3, 2e-3), "lesson09": (2.0 ** -10, 2.0 ** -10)}
DEFAULT_AGREEMENT = (1e-5, 1e-5)


def agreement(check_id: str) -> tuple[float, float]:
    return AGREEMENT.get(check_id) or AGREEMENT.get(check_id.split(".")[0]) or DEFAULT_AGREEMENT


@dataclasses.dataclass
class Call:
    """One grade(...) call of one entry: its verdict, the outputs the check saw, the emulator's findings."""
    check_id: str
    hidden: bool
    passed: bool
    message: str
    seconds: float
    outputs: list = dataclasses.field(default_factory=list)
    findings: list = dataclasses.field(default_factory=list)  # (kind, text) of each emulator finding


def value_calls(lesson: str, checks=None, *, hidden: bool = True) -> list[tuple[str, tuple, list | None]]:
    """The lesson's grade(...) calls of value checks (visible, and hidden unless not ``hidden``), or of those of
    them in ``checks``."""
    wanted = VALUE_CHECKS[lesson] if checks is None else set(checks) & set(VALUE_CHECKS[lesson])
    return [c for c in banks.grade_calls(lesson) if c[0] in wanted and (hidden or c[2] is None)]


@contextlib.contextmanager
def _recording():
    """Keep a copy of every array a check takes from the device (runtime.to_host) in the list it yields."""
    original, outputs = runtime.to_host, []

    def to_host(got, **kwargs):
        host = original(got, **kwargs)
        outputs.append(np.array(host, copy=True))
        return host

    runtime.to_host = to_host
    guard.trust_grader_changes()  # the guard restores the grader's modules after student code: this is theirs now
    try:
        yield outputs
    finally:
        runtime.to_host = original
        guard.trust_grader_changes()


def run_entry(lesson: str, entry_name: str, *, emulated: bool, checks=None, hidden: bool = True,
              only: int | None = None) -> list[Call]:
    """Every value call of ``entry_name`` (of ``checks`` only, if given; visible cases only unless ``hidden``; the
    call of index ``only`` among them, if given) in this process, on the emulator (``emulated``) or on this
    machine's GPU."""
    from autograder.gpu import emulated_cupy

    entry = next(e for e in banks.BANKS[lesson]() if e.name == entry_name)
    # the H200's limits, as on the GPU the banks were proven on: a wrapper that falls back to its step-1 kernel
    # when the tiles do not fit in a T4's 64 KiB would call itself in a bank entry that stands for that step
    stand_in = runtime.stand_in("H200") if emulated else contextlib.nullcontext()
    calls = []
    with stand_in, _recording() as outputs:
        with contextlib.redirect_stdout(io.StringIO()):
            space = banks.namespace(lesson, entry.answers)
        chosen = value_calls(lesson, checks, hidden=hidden)
        for check_id, names, cases in chosen if only is None else chosen[only:only + 1]:
            objects = [space[n] for n in names]
            call = Call(check_id, cases is not None, False, "", 0.0)
            emulated_cupy.reset()
            outputs.clear()
            started = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):
                try:
                    # the check's body: the stand-in is in place (or the GPU is there), and the findings
                    # are read below, not turned into the check's failure as a run without a GPU does
                    body = get_check(check_id).function.__wrapped__
                    call.message = str(body(*objects, **({} if cases is None else {"cases": cases})))
                    call.passed = True
                except CheckFailed as failure:
                    call.message = str(failure)
                except Exception as error:  # noqa: BLE001 - e.g. a CUDA error the fault left in the context: the
                    # check's verdict on a GPU is a failure (the grader runs each check in its own worker)
                    call.message = f"{type(error).__name__}: {error}"
            call.seconds = round(time.perf_counter() - started, 2)
            call.outputs = list(outputs)
            if emulated:
                call.findings = [(f.kind, str(f)) for f in emulated_cupy.findings()]
            calls.append(call)
    return calls


def lost(calls: list[Call]) -> set[str]:
    """The checks an entry loses on this side: a failed call, or (emulator) any finding of its launches."""
    return {c.check_id for c in calls if not c.passed or c.findings}


def expected_value_losses(lesson: str, entry, checks=None) -> set[str]:
    """What the bank says the entry loses among the value checks (or among those in ``checks``)."""
    return set(entry.loses) & set(VALUE_CHECKS[lesson] if checks is None else checks)


def disagreement(lesson: str, entry, calls: list[Call], checks=None) -> str | None:
    """None when the emulator shows what the bank says the entry does on a GPU (on the checks run); else what
    differs.  A right entry passes with no finding; a wrong one loses exactly its value checks (those it may lose
    aside); an entry compute-sanitizer reports on a GPU shows a finding (and may lose, through that finding, a value
    check the GPU passes: the emulator stops at every out-of-bounds access), unless its values already fail."""
    expected = expected_value_losses(lesson, entry, checks)
    by_values = {c.check_id for c in calls if not c.passed}
    allowed = expected | set(entry.may_lose)
    sanitizer_fault = any("sanitizer" in check_id for check_id in entry.loses)
    if not expected <= by_values:
        return f"keeps {sorted(expected - by_values)} that a GPU fails"
    with_findings = {c.check_id for c in calls if c.findings}
    if sanitizer_fault:  # the emulator stops at an out-of-bounds read the GPU's allocation granularity hides
        allowed |= with_findings
    if not by_values <= allowed:
        return f"fails {sorted(by_values - allowed)} that a GPU passes"
    if sanitizer_fault and not with_findings and not by_values:
        return "no finding, while compute-sanitizer reports this entry on a GPU"
    if not sanitizer_fault and not with_findings <= allowed:
        return f"findings in {sorted(with_findings - allowed)}: " + "; ".join(
            text for c in calls for _, text in c.findings[:1])[:400]
    return None


# --- every check of an entry as the grader runs it without a GPU (issue 27) ----------------------------------

def graded_losses(lesson: str, entry_name: str, *, hidden: bool = True, device: str = "H200") -> dict[str, str]:
    """check id -> its failure message, for every check the entry fails when graded on a machine without a GPU:
    its grade(...) calls (visible, and hidden unless not ``hidden``) in this process as a check's worker runs them
    (:func:`autograder.gpu.runtime.run_check_on_emulator`: the emulator's case sizes, a fatal finding fails the check, the others the bounds-and-races check; a
    timed check fails with «нужен GPU»), the stand-in posing as ``device``.  The grader poses as a T4; here the
    H200 by default, the GPU the banks' verdicts were proven on: lesson 08's step-2 entry falls back to "step 1"
    (itself, in that entry) where a T4's 64 KiB of shared memory do not hold its d = 128 tiles, as a real T4 would."""

    entry = next(e for e in banks.BANKS[lesson]() if e.name == entry_name)
    lost: dict[str, str] = {}
    with runtime.stand_in(device):
        with contextlib.redirect_stdout(io.StringIO()):
            space = banks.namespace(lesson, entry.answers)
        for check_id, names, cases in banks.grade_calls(lesson):
            if cases is not None and not hidden:
                continue
            check = get_check(check_id)
            kwargs = {} if cases is None else {"cases": cases}
            with contextlib.redirect_stdout(io.StringIO()):
                try:
                    objects = [space[n] for n in names]
                    if not check.needs_gpu:
                        check.function(*objects, **kwargs)
                    elif not runtime.scores_without_gpu(check):
                        raise CheckFailed("нужен GPU")
                    else:
                        runtime.run_check_on_emulator(check.function, *objects, **kwargs)
                except CheckFailed as failure:
                    lost.setdefault(check_id, str(failure))
                except Exception as error:  # noqa: BLE001 - a worker reports it as the check's failure
                    lost.setdefault(check_id, f"{type(error).__name__}: {error}")
    return lost


def graded_disagreement(lesson: str, entry, lost) -> str | None:
    """None when an entry graded without a GPU loses what it loses on a GPU: every check the bank says it loses
    (those that cannot pass without a GPU aside), and nothing else but checks it may lose, those that cannot pass
    without a GPU and those its entry names, with why, as lost only without one (``also_loses_without_gpu``)."""
    from autograder.gpu import runtime

    cannot = {c for c, _, _ in banks.grade_calls(lesson) if not runtime.scores_without_gpu(get_check(c))}
    expected = set(entry.loses) - cannot
    allowed = expected | set(entry.may_lose) | cannot | set(entry.also_loses_without_gpu)
    lost = set(lost)
    if not expected <= lost:
        return f"keeps {sorted(expected - lost)} that a GPU fails"
    if not lost <= allowed:
        return f"fails {sorted(lost - allowed)} that a GPU passes"
    return None
