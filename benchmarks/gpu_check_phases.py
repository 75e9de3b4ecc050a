"""What a GPU check costs besides its kernels, and what a per-submission cache of compiled kernels would save.

    python benchmarks/gpu_check_phases.py [--lessons 06,07,08,09,11] [--hidden] [--out FILE.json]
    python benchmarks/gpu_check_phases.py --show FILE.json

Issue 30 (grading one student's GPU lessons in at most 90 s on one GPU): every check call runs in a worker of its
own with a fresh home, so CuPy compiles the student's kernels with NVRTC again in each (CuPy's kernel cache is a
folder of that home).  Is that a large share of the 1.4-1.7 s a forked GPU check costs on the H200
(benchmarks/results/gpu_grading_time.txt)?  For every graded call of a lesson's solution notebook (the visible ones;
``--hidden`` adds the hidden ones), two fresh processes each run the check's function in-process (no worker, no
sandbox), the first with CuPy's cache in an empty folder (as every check's worker today), the second with the
folder the first one filled (as under a cache that lasts a submission).  Each process reports its phases: imports
(numpy, CuPy, the grader), CUDA's initialisation and first allocation, the notebook's setup and answer cells (its
demonstrations are left out), and the check.  compute-sanitizer checks are left out (their tool starts workers of
its own).  The table per lesson: calls, the checks' seconds cold and warm, their difference, the phases.
Meant for a GPU; without one the checks run on the PTX emulator (which compiles through its own NVRTC path, not
CuPy's cache, so cold and warm differ little there).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STARTED = time.perf_counter()
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from gpu_grading_time import LESSONS, kind  # noqa: E402 - after sys.path


def notebook_cells(lesson: str) -> list[dict]:
    return json.loads((ROOT / "solutions" / lesson / f"{lesson}.ipynb").read_text(encoding="utf-8"))["cells"]


def grade_calls(lesson: str, hidden: bool) -> list[tuple[int, int]]:
    """(cell index, call index in the cell) of the lesson's graded calls, compute-sanitizer checks left out."""
    from autograder.nbgrader.cells import parse_grade_cell

    found = []
    for index, cell in enumerate(notebook_cells(lesson)):
        if cell["cell_type"] != "code":
            continue
        for number, call in enumerate(parse_grade_cell("".join(cell["source"])) or []):
            if (hidden or not call.hidden) and kind(call.check_id) != "sanitizer":
                found.append((index, number))
    return found


def child(lesson: str, cell_index: int, call_index: int) -> None:
    """In this process: imports, CUDA, the setup and answer cells before the test cell, then one check call."""
    phases = {}
    mark = time.perf_counter()

    def phase(name):
        nonlocal mark
        now = time.perf_counter()
        phases[name] = round(now - mark, 4)
        mark = now

    phases["python_to_main"] = round(mark - STARTED, 4)
    import numpy  # noqa: F401
    from autograder.checks.core import CheckFailed, get_check
    from autograder.nbgrader.cells import parse_grade_cell
    try:
        import cupy as cp
    except ImportError:  # no GPU here: the notebook's setup cell puts the emulator's stand-in in its place
        cp = None
    phase("imports")
    if cp is not None:
        cp.cuda.runtime.getDeviceCount()
        cp.zeros(1)
        cp.cuda.Device().synchronize()
    phase("cuda")
    cells = notebook_cells(lesson)
    namespace = {"__name__": "__main__"}
    for cell in cells[:cell_index]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell["cell_type"] == "code" and (meta.get("solution") or meta.get("locked")) and not meta.get("grade"):
            exec(compile("".join(cell["source"]), f"<{lesson}>", "exec"), namespace)
    phase("cells")
    call = parse_grade_cell("".join(cells[cell_index]["source"]))[call_index]
    check = get_check(call.check_id)
    passed, message = True, ""
    try:
        check.function(*[namespace[name] for name in call.names], **({"cases": call.cases} if call.cases else {}))
    except CheckFailed as error:
        passed, message = False, str(error)[:300]
    if cp is not None:
        cp.cuda.Device().synchronize()
    phase("check")
    print("RESULT " + json.dumps({"check": call.check_id, "hidden": call.hidden, "passed": passed,
                                  "message": message, "phases": phases}), flush=True)


def run_child(lesson: str, cell_index: int, call_index: int, cache: str) -> dict:
    environment = dict(os.environ, CUPY_CACHE_DIR=cache)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--child", lesson, str(cell_index), str(call_index)],
                          cwd=ROOT, env=environment, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        return {"error": (done.stderr or done.stdout)[-1000:], "wall": round(time.perf_counter() - started, 3)}
    return {**json.loads(lines[-1][len("RESULT "):]), "wall": round(time.perf_counter() - started, 3)}


def table(result: dict) -> str:
    lines = [f"{result['date']}  {result['device']}", result["command"], "",
             f"{'lesson':<26}{'calls':>6}{'check cold':>12}{'check warm':>12}{'saved':>8}{'imports':>9}{'cuda':>7}"
             f"{'cells':>7}{'wall cold':>11}"]
    for lesson, runs in result["lessons"].items():
        good = [r for r in runs if "phases" in r["cold"] and "phases" in r["warm"]]
        if not good:
            lines.append(f"{lesson:<26}  no run finished: {runs[0]['cold'].get('error', '')[:80] if runs else 'no calls'}")
            continue
        cold = sum(r["cold"]["phases"]["check"] for r in good)
        warm = sum(r["warm"]["phases"]["check"] for r in good)

        def mean(name):
            return sum(r["cold"]["phases"][name] for r in good) / len(good)
        lines.append(f"{lesson:<26}{len(good):>6}{cold:>12.2f}{warm:>12.2f}{cold - warm:>8.2f}{mean('imports'):>9.2f}"
                     f"{mean('cuda'):>7.2f}{mean('cells'):>7.2f}{sum(r['cold']['wall'] for r in good):>11.1f}")
        for r in good:
            if not (r["cold"]["passed"] and r["warm"]["passed"]):
                lines.append(f"  {r['cold']['check']}: did not pass ({r['cold']['message'] or r['warm']['message']})"[:160])
    lines.append("check cold / warm: seconds of the check's own call with CuPy's kernel cache empty / filled by the "
                 "cold run; imports, cuda, cells: means per process (cold)")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lessons", default=",".join(LESSONS))
    parser.add_argument("--hidden", action="store_true", help="the hidden calls too")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--show", type=Path)
    args = parser.parse_args(argv)
    if args.show:
        print(table(json.loads(args.show.read_text(encoding="utf-8"))))
        return 0
    from autograder.gpu.runtime import gpu_status
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "device": gpu_status()[1],
              "command": "python benchmarks/gpu_check_phases.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "lessons": {}}
    for key in args.lessons.split(","):
        lesson = LESSONS[key]
        runs = []
        for cell_index, call_index in grade_calls(lesson, args.hidden):
            with tempfile.TemporaryDirectory(prefix="cupy-cache-") as cache:
                runs.append({"cold": run_child(lesson, cell_index, call_index, cache),
                             "warm": run_child(lesson, cell_index, call_index, cache)})
            print(f"{lesson} {runs[-1]['cold'].get('check', '?')}: cold {runs[-1]['cold'].get('phases', {}).get('check')}"
                  f" s, warm {runs[-1]['warm'].get('phases', {}).get('check')} s", flush=True)
        result["lessons"][lesson] = runs
    print(table(result))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        sys.exit(main())
