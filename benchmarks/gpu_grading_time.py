"""How long grading one student's GPU lessons takes on this machine, and where the time goes (issue 30).

    python benchmarks/gpu_grading_time.py [--lessons 06,07,08,09,11] [--out FILE.json]
    python benchmarks/gpu_grading_time.py --show FILE.json
    AUTOGRADER_GPU_BOUNDS=emulator python benchmarks/gpu_grading_time.py ...   # the emulator in compute-sanitizer's place

Each lesson's solution notebook (the instructor's: hidden tests included, the reference answers) runs top to bottom
in a fresh Python process, as nbgrader's kernel runs a submission: every code cell in order, timed, demonstrations
included; its test cells call ``grade(...)``, which runs each check in a worker process of its own
(:func:`autograder.notebook.run`), as under ``nbgrader autograde``.  What nbgrader adds around the kernel (reading
the notebook, the gradebook; about a second a notebook, benchmarks/results/course_grade.txt) is not in it, nor the
OS sandbox.  The lessons run one after another: the wall time of grading one student's five notebooks on one GPU.

The table: per lesson, the cells that are not checks (setup, answers, demonstrations) and the checks, split into
compute-sanitizer checks (``*_sanitizer``, ``*_bounds``), timed checks (``*.speed``, ``*.gpu_speed``) and the rest;
then every check slower than a second.  Needs a GPU and CuPy (the checks would run on the PTX emulator without).
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LESSONS = {"06": "06_cuda_basics", "07": "07_cupy_rmsnorm", "08": "08_cupy_flash_attention", "09": "09_tensor_cores",
           "11": "11_flash_decoding"}


def kind(check_id: str) -> str:
    """"sanitizer" (the lessons name their compute-sanitizer checks ``*sanitizer`` or ``*_bounds``), "timed" (registered
    ``gpu_check(..., timed=True)``) or "other"."""
    from autograder.gpu.runtime import is_timed

    if check_id.endswith(("sanitizer", "_bounds")):
        return "sanitizer"
    return "timed" if is_timed(check_id) else "other"


def child(lesson: str, parallel_checks: int = 1) -> None:
    """Run ``lesson``'s solution notebook here, cell by cell; print one JSON line of timings.  With
    ``parallel_checks`` > 1 its checks run side by side as IsolatedExecute runs them with that setting (the same
    CheckPool): a test cell starts its checks and the notebook goes on; a timed check runs alone."""
    import autograder
    from autograder.gpu.runtime import is_timed
    from autograder.isolation.check_pool import CheckPool
    from autograder.isolation.run import pack, run_check

    checks, futures = [], []
    pool = CheckPool(parallel_checks)

    def timed_grade(check_id, *objects, cases=None):
        payloads = pack(list(objects))  # now, as the test cell exports them: later cells may change the objects

        def one_check():
            started = time.perf_counter()
            result = run_check(check_id, payloads, cases)
            checks.append({"check": check_id, "hidden": cases is not None, "passed": result.passed,
                           "seconds": round(time.perf_counter() - started, 3),
                           "message": "" if result.passed else result.message[:300]})
        futures.append(pool.submit(one_check, timed=is_timed(check_id)))

    autograder.grade = timed_grade  # the test cells' `from autograder import grade` takes this
    notebook = json.loads((ROOT / "solutions" / lesson / f"{lesson}.ipynb").read_text(encoding="utf-8"))
    namespace = {"__name__": "__main__"}
    cells = []
    started = time.perf_counter()
    for index, cell in enumerate(c for c in notebook["cells"] if c["cell_type"] == "code"):
        source = "".join(cell["source"])
        meta = cell.get("metadata", {}).get("nbgrader", {})
        before = len(checks)
        t0 = time.perf_counter()
        exec(compile(source, f"<{lesson} cell {index}>", "exec"), namespace)
        role = ("test" if meta.get("grade") and not meta.get("solution") else "answer" if meta.get("solution")
                else "setup" if meta.get("locked") else "demo")
        cells.append({"index": index, "role": role, "grade_id": meta.get("grade_id"),
                      "seconds": round(time.perf_counter() - t0, 3), "checks": len(checks) - before})
    pool.wait()
    pool.close()
    for future in futures:
        future.result()  # a check that raised (not a verdict) stops the run here, as it did in the cell
    print("RESULT " + json.dumps({"lesson": lesson, "seconds": round(time.perf_counter() - started, 3),
                                  "cells": cells, "checks": checks}), flush=True)


def grade_lesson(lesson: str, parallel_checks: int = 1) -> dict:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--child", lesson, "--parallel-checks", str(parallel_checks)],
                          cwd=ROOT, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{lesson}: the notebook stopped ({done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads(lines[-1][len("RESULT "):])
    result["process_seconds"] = round(time.perf_counter() - started, 3)
    return result


def device() -> str:
    from autograder.gpu import runtime

    ok, why = runtime.gpu_status()
    if not ok:
        return f"no GPU ({why})"
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(0)
    return f"{props['name'].decode()}, compute capability {props['major']}.{props['minor']}, CuPy {cupy.__version__}"


def bounds_tool() -> str:
    """What answers the bounds-and-races checks in this run (``AUTOGRADER_GPU_BOUNDS``, see autograder/gpu/sanitizer.py)."""
    from autograder.gpu.sanitizer import bounds_tool as tool

    return tool()


def table(report: dict) -> str:
    tool = report.get("bounds_tool", "compute-sanitizer")  # runs before the setting: compute-sanitizer
    side_by_side = report.get("parallel_checks", 1)
    lines = [f"{report['date']}  {report['device']}", report["command"] + f"   (bounds and races: {tool}"
             + (f"; checks side by side, {side_by_side} at most: a check's seconds overlap others'" if side_by_side > 1
                else "") + ")", "",
             f"{'lesson':<26}{'process':>8}{'cells':>8}{'checks':>8}  {'sanitizer':>12}{'timed':>12}{'other':>12}"]
    totals = dict(process=0.0, cells=0.0, checks=0.0, sanitizer=0.0, timed=0.0, other=0.0)
    counts = dict(sanitizer=0, timed=0, other=0)
    for lesson in report["lessons"]:
        checks = sum(c["seconds"] for c in lesson["checks"])
        split = {k: [c["seconds"] for c in lesson["checks"] if kind(c["check"]) == k] for k in counts}
        cells = sum(c["seconds"] for c in lesson["cells"] if c["role"] != "test")
        row = dict(process=lesson["process_seconds"], cells=cells, checks=checks,
                   **{k: sum(v) for k, v in split.items()})
        for k in totals:
            totals[k] += row[k]
        for k in counts:
            counts[k] += len(split[k])
        lines.append(f"{lesson['lesson']:<26}{row['process']:8.1f}{row['cells']:8.1f}{row['checks']:8.1f}  "
                     + "".join(f"{len(split[k]):>3} ×{row[k]:7.1f}" for k in counts))
    lines.append(f"{'sum':<26}{totals['process']:8.1f}{totals['cells']:8.1f}{totals['checks']:8.1f}  "
                 + "".join(f"{counts[k]:>3} ×{totals[k]:7.1f}" for k in counts))
    failed = [(lesson["lesson"], c) for lesson in report["lessons"] for c in lesson["checks"] if not c["passed"]]
    lines += ["", "checks over a second (lesson, check, hidden cases, seconds):"]
    for lesson in report["lessons"]:
        for c in sorted(lesson["checks"], key=lambda c: -c["seconds"]):
            if c["seconds"] >= 1:
                lines.append(f"  {lesson['lesson']:<26}{c['check']:<30}{'hidden' if c['hidden'] else 'visible':<9}"
                             f"{c['seconds']:6.1f}  {kind(c['check'])}")
    lines += ["", f"every check passed" if not failed else
              "FAILED: " + "; ".join(f"{lesson} {c['check']}: {c['message']}" for lesson, c in failed)]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lessons", default=",".join(LESSONS))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--show", type=Path)
    parser.add_argument("--parallel-checks", type=int, default=1,
                        help="a notebook's checks side by side, at most N at once (IsolatedExecute.parallel_checks)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.parallel_checks)
        return 0
    if args.show:
        print(table(json.loads(args.show.read_text(encoding="utf-8"))))
        return 0
    report = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "device": device(),
              "python": platform.python_version(), "bounds_tool": bounds_tool(), "parallel_checks": args.parallel_checks,
              "command": "python benchmarks/gpu_grading_time.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "lessons": []}
    for number in args.lessons.split(","):
        report["lessons"].append(grade_lesson(LESSONS[number.strip()], args.parallel_checks))
        print(f"{report['lessons'][-1]['lesson']}: {report['lessons'][-1]['process_seconds']:.1f} s", flush=True)
    report["total_seconds"] = round(sum(lesson["process_seconds"] for lesson in report["lessons"]), 3)
    print(table(report))
    if args.out:
        args.out.write_text(json.dumps(report, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
