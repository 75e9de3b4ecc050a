"""Every entry of the GPU banks graded as on a machine without a GPU (issue 27): what it loses, beside what it loses on
a GPU.

    python benchmarks/gpu_banks_without_gpu.py                    # every entry of 06, 07, 08, 09, 11 (minutes)
    python benchmarks/gpu_banks_without_gpu.py --lessons 07 --workers 2
    python benchmarks/gpu_banks_without_gpu.py --lessons 07,08 --entries eps_as_python_float   # those entries only

Each entry's grade(...) calls, visible and hidden, run as a check's worker runs them without a GPU
(``tests/emulated_banks.graded_losses``: the CuPy stand-in posing as the H200 the banks were proven on, the
emulator's case sizes, a fatal finding failing its check and the others the bounds-and-races check, timed checks failing with «нужен GPU»), one entry
per process.  What the
entry loses on a GPU is its bank's ``loses`` (tests/test_gpu_lessons.py, proven on the H200).  Per entry the
JSON records both, whether they agree (``tests/emulated_banks.graded_disagreement``) and the seconds it took.

Output: ``benchmarks/results/gpu_banks_without_gpu.json`` (``--out``) with the date, machine and command;
``tests/test_emulator_banks.py`` checks it against today's banks.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

DEFAULT_OUT = ROOT / "benchmarks" / "results" / "gpu_banks_without_gpu.json"


def _job(lesson: str, name: str) -> dict:
    import emulated_banks as eb

    started = time.perf_counter()
    lost = eb.graded_losses(lesson, name)
    return {"lost": {k: v[:300] for k, v in sorted(lost.items())}, "seconds": round(time.perf_counter() - started, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lessons", default="06,07,08,09,11", help="lesson numbers, comma-separated")
    parser.add_argument("--workers", type=int, default=max(1, os.cpu_count() or 1))
    parser.add_argument("--entries", default="", help="only these entries (comma-separated); the others' rows stay")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()

    import emulated_banks as eb
    import test_gpu_lessons as banks

    entries = [(lesson, e) for lesson, make in banks.BANKS.items() if lesson[:2] in args.lessons.split(",")
               for e in make() if not args.entries or e.name in args.entries.split(",")]
    started = time.time()
    rows = []
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(args.workers, mp_context=context, max_tasks_per_child=1) as pool:
        futures = {pool.submit(_job, lesson, e.name): (lesson, e) for lesson, e in entries}
        for future in concurrent.futures.as_completed(futures):
            lesson, e = futures[future]
            try:
                done = future.result()
            except Exception as error:  # noqa: BLE001 - a crashed process is a row, not the end of the run
                rows.append({"lesson": lesson, "entry": e.name, "error": f"{type(error).__name__}: {error}"})
                continue
            problem = eb.graded_disagreement(lesson, e, done["lost"])
            rows.append({"lesson": lesson, "entry": e.name, "gpu_loses": sorted(e.loses),
                         "may_lose": sorted(e.may_lose), "without_gpu_loses": sorted(done["lost"]),
                         "agrees": problem is None, "difference": problem, "seconds": done["seconds"],
                         "failures": done["lost"]})
            print(f"{lesson[:2]} {e.name:<38} {done['seconds']:6.1f}s lost "
                  f"{','.join(c.split('.')[1] for c in sorted(done['lost'])) or '-':<60} "
                  f"{'agrees' if problem is None else 'DIFFERS: ' + problem}", flush=True)
    from bank_rows import merged

    previous = json.loads(args.out.read_text(encoding="utf-8")) if args.out.exists() else {}
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, no GPU used"
    command = "python benchmarks/gpu_banks_without_gpu.py " + " ".join(sys.argv[1:])
    report = merged(previous, rows, {(lesson, e.name) for lesson, e in entries}, only_entries=bool(args.entries),
                    bank_order=[(lesson, e.name) for lesson, make in banks.BANKS.items() for e in make()],
                    run={"date": now, "machine": machine, "command": command}, machine=machine, command=command)
    args.out.write_text(json.dumps(report, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"\n{report['agree']} of {report['entries']} entries agree; {time.time() - started:.0f} s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
