"""Every entry of the GPU banks (06, 07, 08, 09, 11) on the PTX emulator and on a GPU, side by side (issue 26).

    python3 benchmarks/emulator_vs_h200.py                      # on a GPU machine: both sides, writes the JSON
    python3 benchmarks/emulator_vs_h200.py --lessons 07 --entries reference,no_tail_guard --workers 2
    python benchmarks/emulator_vs_h200.py --emulator-only ...   # no GPU: the emulator's column alone, no JSON

Each entry's value checks (``tests/emulated_banks.py``: the checks that compare the wrapper's output with the
oracle, on their visible and hidden cases) run once with real CuPy on the GPU and once with the CuPy stand-in
(``autograder.gpu.emulated_cupy`` posing as an H200: its limits, NVRTC PTX for compute_80 on the emulator), each entry in a fresh process
(a kernel fault spoils a CUDA context).  Per entry the JSON records what each side lost, the emulator's findings,
whether the emulator shows what the bank says the entry does on a GPU (``tests/emulated_banks.disagreement``),
and, for every output both sides computed, how far apart they are in units of the lesson's tolerance
(|emulator - GPU| / (atol + rtol * |GPU|); 1 is the tolerance).  Entries that never end run only their first
value check on the emulator (each launch spends the emulator's whole instruction budget) and none on the GPU.

Output: ``benchmarks/results/emulator_vs_h200.json`` (``--out``) with the device, date and command of each run.
A run updates the rows of the entries it ran and keeps the others (``--fresh`` starts over), so the banks can be
measured lesson by lesson in separate runs (a device call has a time limit): ``"complete"`` says whether every
entry of every bank has a row.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import multiprocessing
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

DEFAULT_OUT = ROOT / "benchmarks" / "results" / "emulator_vs_h200.json"


def _job(lesson: str, name: str, emulated: bool, checks: list[str] | None, only: int | None = None):
    """One entry on one side (of ``checks`` only, if given; their call ``only`` only, if given), in its own
    process: its calls as plain data."""
    import emulated_banks as eb

    started = time.perf_counter()
    calls = eb.run_entry(lesson, name, emulated=emulated, checks=checks, only=only)
    return {"seconds": round(time.perf_counter() - started, 1), "checks": checks, "calls": [
        {"check": c.check_id, "hidden": c.hidden, "passed": c.passed, "message": c.message[:400],
         "seconds": c.seconds, "findings": c.findings[:5], "finding_count": len(c.findings),
         "outputs": c.outputs} for c in calls]}


def _joined(parts: list[dict], checks: list[str] | None) -> dict:
    """An entry's emulator side from its per-call jobs: their calls in the bank's order."""
    return {"seconds": round(sum(part["seconds"] for part in parts), 1), "checks": checks,
            "calls": [call for part in parts for call in part["calls"]]}


def _distance(emulated: list, gpu: list, atol: float, rtol: float) -> float | None:
    """The largest |emulator - GPU| / (atol + rtol |GPU|) over outputs of the same shapes; None if none."""
    worst = None
    for a, b in zip(emulated, gpu):
        if a.shape != b.shape:
            return float("inf")
        if a.size:
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            value = float(np.max(np.abs(a64 - b64) / (atol + rtol * np.abs(b64))))
            worst = value if worst is None else max(worst, value)
    return worst


def emulated_checks(lesson: str, entry, skip: set) -> list[str]:
    """The value checks an entry runs on the emulator: its first only if it never ends (each launch spends the
    emulator's whole instruction budget), none of ``skip``."""
    import emulated_banks as eb

    checks = [c for c in eb.VALUE_CHECKS[lesson] if c not in skip]
    return checks[:1] if entry.hangs else checks


def compare(lesson: str, entry, emulator: dict, gpu: dict | None) -> dict:
    import emulated_banks as eb

    calls = [eb.Call(c["check"], c["hidden"], c["passed"], c["message"], c["seconds"], c["outputs"],
                     c["findings"]) for c in emulator["calls"]]
    problem = eb.disagreement(lesson, entry, calls, emulator["checks"])
    row = {
        "lesson": lesson, "entry": entry.name,
        "bank_says_gpu_loses": sorted(entry.loses), "may_lose": sorted(entry.may_lose),
        "gpu_only_checks_lost": sorted(set(entry.loses) - set(eb.VALUE_CHECKS[lesson])),
        "emulator": {"lost": sorted(eb.lost(calls)), "seconds": emulator["seconds"],
                     "findings": sorted({k for c in emulator["calls"] for k, _ in c["findings"]}),
                     "first_finding": next((t for c in emulator["calls"] for _, t in c["findings"]), None),
                     "failures": {c["check"]: c["message"][:300] for c in emulator["calls"] if not c["passed"]}},
        "emulator_shows_what_the_gpu_shows": problem is None, "difference": problem,
    }
    if emulator["checks"] is not None:  # the value checks it left out (an entry that never ends: all but one)
        row["emulator_checks_not_run"] = sorted(set(eb.VALUE_CHECKS[lesson]) - set(emulator["checks"]))
    if gpu is not None:
        distances = []
        ran = {c["check"] for c in emulator["calls"]}  # the GPU's calls of the checks the emulator ran, in order
        for e, g in zip(emulator["calls"], [c for c in gpu["calls"] if c["check"] in ran]):
            if e["passed"] and g["passed"]:
                d = _distance(e["outputs"], g["outputs"], *eb.agreement(e["check"]))
                if d is not None:
                    distances.append(d)
        row["gpu"] = {"lost": sorted({c["check"] for c in gpu["calls"] if not c["passed"]}),
                      "seconds": gpu["seconds"],
                      "failures": {c["check"]: c["message"][:300] for c in gpu["calls"] if not c["passed"]}}
        row["outputs_compared"] = len(distances)
        row["max_distance_in_tolerances"] = round(max(distances), 4) if distances else None
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lessons", default="06,07,08,09,11", help="lesson numbers, comma-separated")
    parser.add_argument("--entries", default="", help="only these entries (names, comma-separated)")
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--emulator-only", action="store_true", help="no GPU side (and no JSON)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--fresh", action="store_true", help="drop the rows --out holds (else they are updated)")
    parser.add_argument("--missing", action="store_true",
                        help="only the entries --out has no row for (or an error row)")
    parser.add_argument("--skip-checks", default="",
                        help="value checks the emulator side leaves out (comma-separated ids), recorded in each row: "
                             "e.g. lesson08.causal_skip,lesson09.causal_skip, whose n = 1024/2048 cases take longer "
                             "on the emulator than a device call lasts")
    args = parser.parse_args()

    import test_gpu_lessons as banks
    from autograder.gpu import runtime

    has_gpu, device = runtime.gpu_status()
    if not has_gpu and not args.emulator_only:
        print(f"no GPU ({device}): run on a GPU machine, or with --emulator-only", file=sys.stderr)
        return 2
    lessons = [lesson for lesson in sorted(banks.BANKS) if lesson[:2] in args.lessons.split(",")]
    only = set(filter(None, args.entries.split(",")))
    entries = [(lesson, e) for lesson in lessons for e in banks.BANKS[lesson]() if not only or e.name in only]
    all_entries = {(lesson, e.name) for lesson in banks.BANKS for e in banks.BANKS[lesson]()}
    earlier = {} if args.fresh or not args.out.exists() else json.loads(args.out.read_text(encoding="utf-8"))
    if args.missing:
        done = {(r["lesson"], r["entry"]) for r in earlier.get("rows", []) if "error" not in r}
        entries = [(lesson, e) for lesson, e in entries if (lesson, e.name) not in done]
    ran = {(lesson, e.name) for lesson, e in entries}
    kept = [r for r in earlier.get("rows", []) if (r["lesson"], r["entry"]) in all_entries - ran]
    runs = earlier.get("runs", [])
    run = {"device": device, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "command": "python3 " + " ".join(sys.argv), "workers": args.workers,
           "entries": sorted(f"{lesson[:2]}/{e.name}" for lesson, e in entries)}
    # The emulator side runs grade(...) call by call (a right lesson-08 entry's hidden cases take minutes each on
    # the emulator), the GPU side entry by entry (a fault spoils the process's CUDA context).  Jobs are queued
    # entry after entry, in the order of --lessons: entries finish in that order, and a run cut short keeps
    # whole rows.
    import emulated_banks as eb

    skip = set(filter(None, args.skip_checks.split(",")))
    run["emulator_skipped_checks"] = sorted(skip)
    jobs = {}
    context = multiprocessing.get_context("spawn")
    started = time.time()
    order = args.lessons.split(",")
    entries.sort(key=lambda le: order.index(le[0][:2]))
    with concurrent.futures.ProcessPoolExecutor(args.workers, mp_context=context, max_tasks_per_child=1) as pool:
        for lesson, e in entries:
            checks = emulated_checks(lesson, e, skip)
            for index in range(len(eb.value_calls(lesson, checks))):
                jobs[(lesson, e.name, index)] = pool.submit(_job, lesson, e.name, True, checks, index)
            if not args.emulator_only and not e.hangs:
                jobs[(lesson, e.name, "gpu")] = pool.submit(_job, lesson, e.name, False, None)
        waiting = {(lesson, e.name): (lesson, e) for lesson, e in entries}
        rows = []
        for future in concurrent.futures.as_completed(jobs.values()):  # each entry as soon as both sides are done
            key = next(k for k, f in jobs.items() if f is future)[:2]
            if key not in waiting or not all(f.done() for k, f in jobs.items() if k[:2] == key):
                continue
            lesson, e = waiting.pop(key)
            checks = emulated_checks(lesson, e, skip)
            try:
                emulator = _joined([jobs[(lesson, e.name, index)].result()
                                    for index in range(len(eb.value_calls(lesson, checks)))],
                                   checks if checks != list(eb.VALUE_CHECKS[lesson]) else None)
                gpu = jobs[(lesson, e.name, "gpu")].result() if (lesson, e.name, "gpu") in jobs else None
            except Exception as error:  # noqa: BLE001 - a crashed process is a row, not the end of the run
                rows.append({"lesson": lesson, "entry": e.name, "error": f"{type(error).__name__}: {error}"})
                print(f"{lesson[:2]} {e.name:<38} ERROR {type(error).__name__}: {error}", flush=True)
                continue
            row = compare(lesson, e, emulator, gpu)
            rows.append(row)
            run["finished"] = sorted(f"{r['lesson'][:2]}/{r['entry']}" for r in rows)
            if not args.emulator_only:  # after every entry: a run cut short keeps what it measured
                write(args.out, kept + rows, runs + [run], all_entries)
            print(f"{lesson[:2]} {e.name:<38} emulator {row['emulator']['seconds']:6.1f}s "
                  f"lost {','.join(c.split('.')[1] for c in row['emulator']['lost']) or '-':<40} "
                  f"{'agrees' if row['emulator_shows_what_the_gpu_shows'] else 'DIFFERS: ' + row['difference']}"
                  + (f"  gpu lost {','.join(c.split('.')[1] for c in row['gpu']['lost']) or '-'}"
                     f"  max distance {row['max_distance_in_tolerances']}" if "gpu" in row else ""), flush=True)
        rows.sort(key=lambda r: (r["lesson"], [e.name for _, e in entries].index(r["entry"])))
    agree = sum(1 for r in rows if r.get("emulator_shows_what_the_gpu_shows"))
    print(f"\n{agree} of {len(rows)} entries: the emulator shows what the GPU shows; {time.time() - started:.0f} s")
    if not args.emulator_only:
        write(args.out, kept + rows, runs + [run], all_entries)
        print(f"wrote {args.out}")
    return 0


def write(out: Path, rows: list, runs: list, all_entries: set) -> None:
    import cupy
    import test_gpu_lessons as banks

    order = {lesson: [e.name for e in entries()] for lesson, entries in banks.BANKS.items()}
    rows = sorted(rows, key=lambda r: (r["lesson"], order[r["lesson"]].index(r["entry"])))
    report = {"device": runs[-1]["device"], "cupy": cupy.__version__, "cpu": platform.processor(),
              "cpu_count": os.cpu_count(), "emulator_arch": "compute_80 (the stand-in posing as an H200)",
              "complete": {(r["lesson"], r["entry"]) for r in rows} >= all_entries,
              "entries": len(rows), "of": len(all_entries),
              "agree": sum(1 for r in rows if r.get("emulator_shows_what_the_gpu_shows")), "runs": runs, "rows": rows}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
