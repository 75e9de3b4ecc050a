"""compute-sanitizer (memcheck, racecheck) around one call of a student's GPU function.

:func:`sanitize` runs ``function(*inputs(**case))`` under the tool, in a worker process started
through the worker's protocol (:func:`run_once` is that worker's check);
:func:`sanitizer_check` is what a lesson's check calls (:func:`sanitizer_verdict`: over its cases):
memcheck (with padding after every allocation) and racecheck side by side, each failure a message with the
tool's findings and a hint; or, where :data:`BOUNDS_ENV` asks for it, the PTX emulator in their place
(:func:`emulator_check`).  Where the tool is missing, the check fails and says how it scores, never passes silently.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import re
import shutil
import sys
import tempfile

from . import runtime as gpu
from ..isolation import guard, run as isolation  # isolation before any student code: the guard snapshots modules
from ..checks.core import CheckFailed, GraderFault, call_student, check, describe_case, shorten
from ..checks import student_process
from ..checks.student_process import in_student

def sanitizer_path() -> str | None:
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and os.path.exists(os.path.join(home, "bin", "compute-sanitizer")):
            return os.path.join(home, "bin", "compute-sanitizer")
    return None


_SANITIZER = sanitizer_path()
_allow = getattr(guard, "allow_grader_program", None)
if _SANITIZER and _allow is not None:  # the worker's guard refuses new processes once student code ran
    _allow(_SANITIZER)
if _allow is not None:  # the worker of an emulator run (BOUNDS_ENV=emulator) is a new Python process
    _allow(sys.executable)

#: Which tool answers a GPU lesson's bounds-and-races check on a machine with a GPU: "emulator" (the default: the
#: PTX emulator, posing as the nearest GPU it knows, runs the check's cases in a worker of its own: every access
#: checked, about a second a case instead of 3-11 s; compute-sanitizer only where its run proves nothing) or
#: "compute-sanitizer" (memcheck and racecheck).  Both lose the same checks on every entry of the GPU banks of
#: 06-09: through this very branch on a CPU posing as the H200 (benchmarks/emulator_bounds_banks.py) and on a GPU
#: (the banks under each setting; benchmarks/results/gpu_banks_h100_emulator_bounds.json, gpu_grading_time.txt).
#: Without a GPU the emulator answers anyway.
BOUNDS_ENV = "AUTOGRADER_GPU_BOUNDS"


def bounds_tool() -> str:
    """"emulator" or "compute-sanitizer": :data:`BOUNDS_ENV`, the emulator unless it says "compute-sanitizer"."""
    asked = os.environ.get(BOUNDS_ENV, "").strip().lower()
    return "compute-sanitizer" if asked == "compute-sanitizer" else "emulator"

#: Larger than the furthest a tile load can overrun: 31 rows of d = 128 floats past the end (lesson 08).
SANITIZER_PADDING_BYTES = 64 * 1024

_SUMMARY = re.compile(r"(RACECHECK|ERROR) SUMMARY: (\d+) (?:hazards? displayed \((\d+) errors?, (\d+) warnings?\)|errors?)")


@dataclasses.dataclass(frozen=True)
class SanitizerReport:
    errors: int
    warnings: int
    log: str
    returncode: int


def sanitize(function, inputs: str, case: dict, *, tool: str = "racecheck", timeout_s: float = 75.0) -> SanitizerReport:
    """Run ``function(*inputs(**case))`` once under compute-sanitizer, in a worker of its own.

    ``inputs`` names a grader function ("module:function") that builds the arguments on the GPU.
    The run is an ordinary check (:func:`run_once`) started through the worker's protocol
    (:func:`autograder.isolation.run.run_check` with compute-sanitizer as its launcher): the student's
    function travels by value, the guard and the caps are the worker's, and only a nonce-signed
    reply is believed.  A run lost before the student's code started is the grader's fault
    (:class:`GraderFault`), never the student's.
    """
    sanitizer = _SANITIZER
    if sanitizer is None:
        purpose = "гонок в разделяемой памяти" if tool == "racecheck" else "выходов за границы массивов"
        raise CheckFailed(f"не найден compute-sanitizer (входит в CUDA Toolkit): проверка {purpose} "
                          "на этой машине невозможна, и эта проверка не засчитывается (0 баллов), а не "
                          "пропускается. В Colab он есть в /usr/local/cuda/bin; на машине преподавателя "
                          "проверка пройдёт полностью.")
    with tempfile.TemporaryDirectory(prefix="autograder-sanitize-") as folder:
        log_path = os.path.join(folder, "sanitizer.log")
        # memcheck knows allocations, not which one a pointer came from: a read past K that lands in V
        # is "valid".  Padding after every allocation (never a valid address) makes such a read an error.
        padding = ("--padding", str(SANITIZER_PADDING_BYTES)) if tool == "memcheck" else ()
        launcher = (sanitizer, "--tool", tool, *padding, "--log-file", log_path, "--print-limit", "20")
        request = {"inputs": inputs, "case": case, "exact_allocations": tool == "memcheck"}
        result = isolation.run_check(RUN_ONCE, packed(function), [request], timeout_s=timeout_s,
                                     write_protected=(folder,), launcher=launcher)
        log = open(log_path, encoding="utf-8", errors="replace").read() if os.path.exists(log_path) else ""
    if result.grader_fault:
        said = shorten(log.strip()[-600:], 600) if log.strip() else "(журнал compute-sanitizer пуст)"
        raise GraderFault(f"запуск под compute-sanitizer --tool {tool} не дошёл до вашего кода. {result.message}\n"
                          f"Журнал compute-sanitizer:\n{said}")
    errors = warnings = 0
    summaries = _SUMMARY.findall(log)
    for kind, total, errs, warns in summaries:
        errors += int(errs) if errs else int(total)
        warnings += int(warns or 0)
    if not result.passed and not errors:
        if result.message.startswith("Проверка прервана"):  # the worker's timeout
            raise CheckFailed(f"запуск под compute-sanitizer не завершился за {timeout_s:g} с "
                              "(ядро не завершается?).")
        raise CheckFailed(f"запуск под compute-sanitizer --tool {tool} не удался: {result.message}")
    if not summaries:
        raise CheckFailed("compute-sanitizer не выдал итогов проверки:\n" + shorten(log[-600:], 600))
    return SanitizerReport(errors, warnings, log, 0 if result.passed else 1)


RUN_ONCE = "sanitizer.run_once"


@gpu.gpu_check(RUN_ONCE, points=0, title="один запуск функции студента под compute-sanitizer", timeout_s=75.0,
              emulator=False)  # compute-sanitizer needs the GPU; on the emulator sanitizer_verdict runs no tool
def run_once(function, cases):
    """Inside compute-sanitizer: build the inputs, run the student's function once, wait for its kernels (all of it
    in the student process, which the tool follows)."""
    (request,) = cases
    return in_student(_once_on_gpu, function, request)


def _once_on_gpu(function, request):
    import importlib

    if request["exact_allocations"]:  # no pool: memcheck sees each array's exact bounds
        gpu._EXACT_ALLOCATIONS = True
        gpu._cp.cuda.set_allocator(None)
    module, name = request["inputs"].split(":")
    args = getattr(importlib.import_module(module), name)(**request["case"])
    gpu._warm_up()
    call_student(function, *args, case=describe_case(**request["case"]), what="функция")
    gpu._cp.cuda.Device().synchronize()
    return "выполнено"


def _run_on_emulator(function, cases):
    """In a worker posing as a GPU (:data:`EMULATOR_RUNS`): build the inputs, run the student's function once
    on the emulator; any finding of its launches fails the check (:func:`~.runtime.fail_on_findings`).  The
    emulator's findings are where its launches ran: all of it runs in the student process."""
    (request,) = cases
    return in_student(_emulated_once, function, request)


def _emulated_once(function, request):
    import importlib

    module, name = request["inputs"].split(":")
    make_inputs = getattr(importlib.import_module(module), name)

    def once():
        args = make_inputs(**request["case"])
        try:
            call_student(function, *args, case=describe_case(**request["case"]), what="функция")
        except CheckFailed as failure:  # its values passed on the GPU: the stand-in differs, not the kernel
            gpu.fail_on_findings()  # findings and faults of a launch still fail
            return INCONCLUSIVE + str(failure)
        gpu.fail_on_findings()
        return "выполнено"

    return gpu.run_on_emulator(once)


#: What an emulator run replies when the student's function raised there (its values passed on the GPU): the run
#: proves nothing either way, and compute-sanitizer answers for the case (a cache of real CuPy kernels that the
#: notebook filled before ``grade`` packed the function, say).  Findings and faults of a launch still fail.
INCONCLUSIVE = "не решено на эмуляторе: "


#: The emulator's pose (:data:`~.emulated_cupy.DEVICES`) -> the id of the check that runs a case posing as it.
EMULATOR_RUNS = {}
for _pose in ("T4", "H200"):
    EMULATOR_RUNS[_pose] = f"sanitizer.on_emulator_{_pose.lower()}"
    # the stand-in is in place before the student's function is unpickled: its `cp` is the emulator's
    check(EMULATOR_RUNS[_pose], points=0, title=f"один запуск функции студента на эмуляторе GPU ({_pose})",
          timeout_s=120.0, memory_limit_gib=None,
          before_payload=lambda pose=_pose: gpu.use_emulator_posing_as(pose))(_run_on_emulator)


def emulator_pose() -> str:
    """The GPU the emulator poses as for this machine's GPU: a T4 (compute_75, 64 KiB of shared memory) below
    compute capability 8.0, else the H200 (compute_80, 227 KiB): the wrappers choose their tiles as on the GPU."""
    capability = gpu.compute_capability()  # 90: 9.0
    return "T4" if capability < 80 else "H200"


def emulator_check(payload: list, inputs: str, case_args: dict, case: str, *, pose: str | None = None) -> str | None:
    """One case of a bounds-and-races check on the emulator, from a machine with a GPU (:data:`BOUNDS_ENV`):
    ``payload`` is the student's function packed before it ran here (nothing of this process's CuPy in it);
    ``pose``: the GPU the emulator poses as (default :func:`emulator_pose`).  The verdict's detail, CheckFailed
    with the emulator's findings, or None where the run proves nothing (:data:`INCONCLUSIVE`)."""
    pose = pose or emulator_pose()
    result = isolation.run_check(EMULATOR_RUNS[pose], payload, [{"inputs": inputs, "case": case_args}], fork=False)
    if result.grader_fault:
        raise GraderFault(f"запуск на эмуляторе GPU ({pose}) не дошёл до вашего кода. {result.message}")
    if not result.passed:
        raise CheckFailed(f"эмулятор GPU ({pose}) вместо compute-sanitizer, случай: {case}.\n{result.message}")
    if result.message.startswith(INCONCLUSIVE):
        return None
    return f"эмулятор GPU ({pose}): ни одного обращения за границы, гонки или чтения неинициализированной памяти"


def sanitizer_check(function, inputs: str, case_args: dict, case: str, *, races: bool) -> list[str]:
    """memcheck and (``races``) racecheck of one case; CheckFailed with the tool's findings.

    The two tools run at the same time, each in a worker of its own (one GPU serves both): the check waits for
    the longer of the two runs, not their sum.  memcheck's verdict is read first, as when they ran one after
    the other, so a kernel with both faults is told of its out-of-bounds accesses.

    The caller has already checked the case's values: the sanitizer answers only for what values
    cannot show (an out-of-bounds read or write that does not change the output, a race that did
    not fire).  Returns the parts of the verdict, e.g. ["memcheck: 0 ошибок", "racecheck: 0 гонок"].
    """
    def run(tool: str) -> SanitizerReport:
        with guard.grader_thread():  # may start compute-sanitizer, although student code ran in this process
            return sanitize(function, inputs, case_args, tool=tool)

    tools = ("memcheck", "racecheck") if races else ("memcheck",)
    with concurrent.futures.ThreadPoolExecutor(len(tools)) as pool:
        runs = {tool: pool.submit(run, tool) for tool in tools}
    report = runs["memcheck"].result()  # raises the run's CheckFailed or GraderFault, memcheck's first
    if report.errors:
        raise CheckFailed(memcheck_message(report, case))
    done = ["memcheck: 0 ошибок"]
    if races:
        report = runs["racecheck"].result()
        if report.errors:
            raise CheckFailed(race_message(report, case))
        done.append("racecheck: 0 гонок")
    return done


def sanitizer_verdict(function, inputs: str, cases, check_values, *, races: bool, params=None) -> str:
    """The compute-sanitizer check of a GPU lesson: for each case its values first (``check_values(case)``),
    then :func:`sanitizer_check` with ``inputs`` built from the case (only its ``params`` where given).
    Returns the verdict's detail: "compute-sanitizer — memcheck: 0 ошибок, racecheck: 0 гонок".

    On the PTX emulator (no GPU) the cases run there instead: its bounds, race and initialisation checks look at
    every access of every launch, and any finding fails this check (:func:`~.runtime.fail_on_findings`; the
    lesson's other checks fail only on the fatal ones, as on a GPU: :func:`~.runtime.run_on_emulator`).  On a GPU
    with :data:`BOUNDS_ENV` = "emulator", the values run on the GPU and the bounds and races on the emulator, in a
    worker of its own (:func:`emulator_check`; compute-sanitizer where that run proves nothing)."""
    from .runtime import emulated

    if emulated():
        for c in cases:
            check_values(c)
        gpu.fail_on_findings()
        return ("эмулятор GPU вместо compute-sanitizer: ни одного обращения за границы, гонки в разделяемой "
                "памяти или чтения неинициализированной памяти")
    # the emulator's run starts from the function packed before it ran here: nothing of this process's CuPy in it
    payload = packed(function) if bounds_tool() == "emulator" else None
    done = []
    for c in cases:
        check_values(c)
        args = c if params is None else {p: c[p] for p in params}
        verdict = None if payload is None else emulator_check(payload, inputs, args, describe_case(**c))
        if verdict is None:  # compute-sanitizer's, or the emulator's run proved nothing
            verdict = "compute-sanitizer — " + ", ".join(sanitizer_check(function, inputs, args, describe_case(**c),
                                                                         races=races))
        done.append(verdict)
    return ", ".join(dict.fromkeys(done))


def packed(function) -> list[bytes]:
    """The student's function as a worker's payload: in a judge, the bytes it came in (it never ran here); else
    packed now."""
    if student_process.judging():
        return [student_process.payload_of(function)]
    return isolation.pack([function])


def race_message(report: SanitizerReport, case: str) -> str:
    hazards = [line.strip(" =") for line in report.log.splitlines()
               if "hazard" in line.lower() or "race reported" in line.lower()][:6]
    return shorten(
        f"compute-sanitizer --tool racecheck нашёл гонки в разделяемой памяти: {report.errors} ошибок "
        f"(случай: {case}).\n" + "\n".join(hazards) +
        "\nПодсказка: нет __syncthreads() между записью в __shared__ одними потоками и чтением "
        "другими (после загрузки тайла, после записи частичных сумм) или перед перезаписью тайла. "
        "Результат при этом может случайно совпасть с эталоном — гонка от этого не исчезает.", 1500)


def memcheck_message(report: SanitizerReport, case: str) -> str:
    found = [line.strip(" =") for line in report.log.splitlines()
             if "Invalid" in line or "out of bounds" in line or "Address" in line][:6]
    return shorten(
        f"compute-sanitizer --tool memcheck нашёл выход за границы массивов: {report.errors} ошибок "
        f"(случай: {case}).\n" + "\n".join(found) +
        "\nПодсказка: поток с индексом i ≥ n читает или пишет элемент — нет защиты хвоста "
        "`if (i < n)` при числе блоков, округлённом вверх; или неверен индекс строки/столбца у краёв "
        "тайла. Такая ошибка может не менять результат и не ронять ядро, но портит чужую память.", 1500)
