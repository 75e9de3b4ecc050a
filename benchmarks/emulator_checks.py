"""Each graded GPU check of the reference solutions on the PTX emulator, timed as the grader runs it; then Validate of
each GPU lesson and the students' `course check` (issue 27's speed goals: a check at most 3 s, Validate at most 60 s,
`course check` under 2 minutes, on 2 cores without a GPU).

    python benchmarks/emulator_checks.py [--lessons 06,07,08,09,11] [--out benchmarks/results/emulator_checks.txt]

For every grade(...) call of a GPU lesson's reference notebook (visible cases, and the hidden ones of the source
notebook) whose check runs on the emulator: a fresh process (as a check's worker: the kernel's PTX is made there,
not cached) that builds the reference answers' namespace, then times the call through
``runtime.run_check_on_emulator`` (the emulator's case sizes, findings failing the check).  Prints a table — check,
visible or hidden, seconds of the call, its CPU seconds and how many of them went to NVRTC (the kernels compiled
to PTX) and to parsing that PTX, seconds with the process's set-up (imports, the notebook's answer cells),
passed — and the slowest call.  Then ``nbgrader validate`` (what JupyterLab's Validate runs) of each lesson's student
notebook filled with the reference answers, and ``course check`` (the students' ``make test``) in a freshly
published students' repository with its untouched notebooks.  Writes it all to ``--out`` with the date, machine,
load and command.  No GPU needed; the
machine is shared (2 cores): check ``uptime``; the CPU-seconds column is steadier than the wall clock.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "emulator_checks.txt"

_ONE_CALL = r"""
import contextlib, io, sys, time
sys.path[:0] = [{root!r}, {tests!r}]
started = time.perf_counter()
import test_gpu_lessons as banks
from autograder.checks.core import CheckFailed, get_check
from autograder.gpu import emulator, nvrtc, runtime
spent = {{"nvrtc": 0.0, "parse": 0.0}}
def timed(name, function):
    def wrapper(*args, **kwargs):
        cpu = time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            spent[name] += time.process_time() - cpu
    return wrapper
nvrtc._ptx = timed("nvrtc", nvrtc._ptx)  # a worker's compilations of the kernels to PTX, and their parsing
emulator.parse = timed("parse", emulator.parse)
lesson, index = {lesson!r}, {index}
check_id, names, cases = banks.grade_calls(lesson)[index]
with runtime.stand_in("T4"):
    with contextlib.redirect_stdout(io.StringIO()):
        space = banks.namespace(lesson, banks.BANKS[lesson]()[0].answers)
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            runtime.run_check_on_emulator(get_check(check_id).function, *[space[n] for n in names],
                                          **({{}} if cases is None else {{"cases": cases}}))
        passed = True
    except CheckFailed as failure:
        passed = str(failure).splitlines()[0][:80]
print(repr((time.perf_counter() - wall, time.process_time() - cpu, spent["nvrtc"], spent["parse"],
            time.perf_counter() - started, passed)))
"""


def _timed(argv: list[str], cwd) -> tuple[float, str]:
    started = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, cwd=cwd)
    last = [line for line in (out.stdout or out.stderr).splitlines() if line.strip()]  # the verdict is on stdout
    return time.perf_counter() - started, last[-1][:100] if last else ""


def _validate_and_course_check(lessons: list[str]) -> list[str]:
    import tempfile

    import nbformat

    from autograder.course import grading

    bin_dir = Path(sys.executable).parent
    lines = []
    with tempfile.TemporaryDirectory() as folder:
        for lesson in lessons:
            nbformat.write(grading.fill_answers(lesson, grading.reference_answers(lesson)), f"{folder}/{lesson}.ipynb")
            seconds, last = _timed([str(bin_dir / "nbgrader"), "validate", f"{lesson}.ipynb"], folder)
            lines.append(f"Validate {lesson:<26} {seconds:7.1f} s  {last}")
            print(lines[-1], flush=True)
        subprocess.run([str(bin_dir / "course"), "publish", f"{folder}/students", "--repository",
                        "https://github.com/example-org/module07-students"], capture_output=True, check=True, cwd=ROOT)
        seconds, last = _timed([str(bin_dir / "course"), "check"], f"{folder}/students")
        lines.append(f"course check (students' repository, untouched notebooks) {seconds:7.1f} s  {last}")
        print(lines[-1], flush=True)
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lessons", default="06,07,08,09,11")
    parser.add_argument("--checks-only", action="store_true", help="the check calls only (no Validate, no course check)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()

    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    import test_gpu_lessons as banks
    from autograder.checks.core import get_check
    from autograder.gpu import runtime

    load = os.getloadavg()
    lines = [f"# {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%MZ} {platform.machine()}, {os.cpu_count()} cores, "
             f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; python benchmarks/emulator_checks.py "
             + " ".join(sys.argv[1:]),
             f"{'check':<28} {'cases':<7} {'call s':>7} {'CPU s':>7} {'NVRTC':>7} {'parse':>7} {'with set-up s':>14}  passed"]
    print("\n".join(lines), flush=True)
    slowest, sums = (0.0, ""), [0.0, 0.0, 0.0]
    for lesson in banks.BANKS:
        if lesson[:2] not in args.lessons.split(","):
            continue
        for index, (check_id, _, cases) in enumerate(banks.grade_calls(lesson)):
            if not get_check(check_id).needs_gpu or not runtime.scores_without_gpu(get_check(check_id)):
                continue
            code = _ONE_CALL.format(root=str(ROOT), tests=str(ROOT / "tests"), lesson=lesson, index=index)
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
            try:
                wall, cpu, compiled, parsed, total, passed = eval(out.stdout.strip().splitlines()[-1])  # noqa: S307
            except (IndexError, SyntaxError):
                wall = cpu = compiled = parsed = total = float("nan")
                passed = "error: " + out.stderr.strip()[-200:]
            line = (f"{check_id:<28} {'hidden' if cases is not None else 'visible':<7} {wall:7.2f} {cpu:7.2f} "
                    f"{compiled:7.2f} {parsed:7.2f} {total:14.2f}  {'yes' if passed is True else passed}")
            sums = [a + b for a, b in zip(sums, (cpu, compiled, parsed))]
            print(line, flush=True)
            lines.append(line)
            slowest = max(slowest, (wall, f"{check_id} ({'hidden' if cases is not None else 'visible'})"))
    lines.append(f"slowest call: {slowest[1]}, {slowest[0]:.2f} s; CPU of all calls {sums[0]:.1f} s, of which NVRTC "
                 f"{sums[1]:.1f} s and PTX parsing {sums[2]:.1f} s (every call compiles afresh, as a check's worker does)")
    print(lines[-1])
    if not args.checks_only:
        lines += _validate_and_course_check([lesson for lesson in banks.BANKS if lesson[:2] in args.lessons.split(",")])
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
