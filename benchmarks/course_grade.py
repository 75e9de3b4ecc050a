"""Where `course grade` spends its time: each CPU lesson's reference answers, graded as `course grade` does.

For every lesson that needs no GPU (``autograder.course.paths.lessons()`` minus ``is_gpu_lesson``), the
student notebook filled with the reference answers is graded by ``autograder.course.autograde``
(what ``course grade NOTEBOOK`` runs) in a scratch course.  The timing comes from the outside:
``benchmarks/course_grade_probe/sitecustomize.py`` is put on PYTHONPATH for the processes that
grading starts and logs when nbgrader's converters, the kernel, each cell and each check start and
end.  The table gives each lesson's CPU seconds (of the benchmark and every process grading started:
less sensitive than wall time to other work on the machine) and splits its wall time (total) into

    nbgrader   nbgrader processes started, and their seconds outside any converter (imports, config,
               gradebook set-up, exit)
    generate   nbgrader generate_assignment (the converter: the lesson's gradebook entries; with the
               ``alembic heads`` process that nbgrader starts for a new gradebook)
    kernel     the student's kernel: start, hardening and shutdown
    cells      the notebook's cells in the kernel (test cells: only the export of the named objects)
    checks     how many checks ran (each in its own process) and their seconds
    other      the rest (the autograde converter outside the kernel, writing files, the grader's own process)

With ``--cli`` it also times the real command, ``course grade NOTEBOOK`` (its own process: imports,
the same grading, the verdict table), on the same notebook.  Every lesson must get full marks (the
scores are printed; --json keeps every cell's); the exit status says whether it did.

    .venv/bin/python benchmarks/course_grade.py                      # all CPU lessons, once
    .venv/bin/python benchmarks/course_grade.py --repeat 3 --json benchmarks/results/x.json
    .venv/bin/python benchmarks/course_grade.py 02_fused_rmsnorm --cells 5   # and its 5 slowest cells
    .venv/bin/python benchmarks/course_grade.py --cli    # and the real `course grade` command, per lesson
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import resource
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBE = Path(__file__).resolve().parent / "course_grade_probe"

from autograder.course import paths as course  # noqa: E402

from autograder.course import grading, nbgrader_cli

COLUMNS = ("total", "nbgrader", "generate", "kernel", "cells", "checks", "other")


def grade_once(lesson: str) -> dict:
    """Grade the reference-filled notebook of ``lesson``; the spans the probe logged, summed."""
    notebook = grading.fill_answers(lesson, grading.reference_answers(lesson))
    with tempfile.TemporaryDirectory(prefix="bench-grade-") as scratch:
        log = Path(scratch) / "probe.jsonl"
        saved = {k: os.environ.get(k) for k in ("COURSE_BENCH_LOG", "PYTHONPATH")}
        os.environ["COURSE_BENCH_LOG"] = str(log)
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROBE), saved["PYTHONPATH"]]))
        try:
            before = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
            start = time.time()
            grades = grading.grade_notebooks(lesson, {"me": notebook}, Path(scratch) / "course")["me"]
            total = time.time() - start
            after = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
            cpu = sum(a.ru_utime + a.ru_stime - b.ru_utime - b.ru_stime for a, b in zip(after, before))
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        spans = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return {**summarise(lesson, total, spans, grades), "cpu": cpu}


def cli_score(total: str) -> float | None:
    """The score in `course grade`'s last line, bonus included: "ИТОГО: 12 из 12 и бонус +3" -> 15."""
    found = re.fullmatch(r"ИТОГО: ([\d.]+) из [\d.]+(?: и бонус \+([\d.]+))?", total.strip())
    return float(found[1]) + float(found[2] or 0) if found else None


def cli_once(lesson: str) -> tuple[float, str]:
    """Wall seconds of the real command, ``course grade NOTEBOOK``, on the same notebook; its total line."""
    import nbformat

    notebook = grading.fill_answers(lesson, grading.reference_answers(lesson))
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as scratch:
        path = Path(scratch) / f"{lesson}.ipynb"
        nbformat.write(notebook, path)
        start = time.time()
        done = subprocess.run([str(Path(sys.executable).parent / "course"), "grade", str(path)], cwd=scratch,
                              env=nbgrader_cli.nbgrader_env(), capture_output=True, text=True)
        wall = time.time() - start
    total = [line for line in done.stdout.splitlines() if line.startswith("ИТОГО")]
    return wall, (total[-1] if total and done.returncode == 0 else f"FAILED ({done.returncode})")


def _seconds(spans: list[dict], kind: str, **match) -> float:
    return sum(s["end"] - s["start"] for s in spans if s["kind"] == kind
               and all(s.get(k) == v for k, v in match.items()))


def summarise(lesson: str, total: float, spans: list[dict], grades) -> dict:
    converter_pids = {s["pid"] for s in spans if s["kind"] == "converter"}
    processes = [s for s in spans if s["kind"] == "process" and s["pid"] in converter_pids]
    converters = _seconds(spans, "converter")
    generate = _seconds(spans, "converter", name="GenerateAssignment")
    preprocess = _seconds(spans, "preprocess")
    cells = _seconds(spans, "cell")
    checks = [s for s in spans if s["kind"] == "check"]
    check_s = sum(s["end"] - s["start"] for s in checks)
    row = {
        "lesson": lesson,
        "total": total,
        "nbgrader_processes": len(processes),
        "nbgrader": sum(p["end"] - p["start"] for p in processes) - converters,
        "generate": generate,
        "kernel": preprocess - cells,
        "cells": cells - check_s,
        "checks_n": len(checks),
        "checks": check_s,
        "score": sum(g.score for g in grades),
        "max_score": sum(g.max_score for g in grades),
        "grades": {g.cell: g.score for g in grades},
        "alembic": sum(s["end"] - s["start"] for s in spans if s["kind"] == "process" and s["pid"] not in converter_pids),
        "spans": spans,
        "slowest_cells": sorted(({"index": s["index"], "seconds": round(s["end"] - s["start"], 3)}
                                 for s in spans if s["kind"] == "cell"), key=lambda c: -c["seconds"])[:10],
        "slowest_checks": sorted(({"check": s["check"], "seconds": round(s["end"] - s["start"], 3)}
                                  for s in checks), key=lambda c: -c["seconds"])[:10],
    }
    row["other"] = total - sum(row[k] for k in ("nbgrader", "generate", "kernel", "cells", "checks"))
    return row


@dataclasses.dataclass
class _Grade:  # a saved cell score (--show): the reference gets full marks, max = score
    cell: str
    score: float
    max_score: float


def table(rows: list[dict]) -> str:
    head = (f"{'lesson':<22} {'cpu':>6} {'total':>7} {'nbgrader':>12} {'generate':>8} {'kernel':>7} {'cells':>7} "
            f"{'checks':>12} {'other':>6}  score")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['lesson']:<22} {r.get('cpu', float('nan')):6.1f} {r['total']:7.1f} {r['nbgrader_processes']:>3} × {r['nbgrader']:6.1f} "
                     f"{r['generate']:8.1f} {r['kernel']:7.1f} {r['cells']:7.1f} {r['checks_n']:>3} × {r['checks']:6.1f} "
                     f"{r['other']:6.1f}  {r['score']:g}/{r['max_score']:g}")
    s = {k: sum(r.get(k, float("nan")) for r in rows) for k in ("cpu", "total", "nbgrader", "generate", "kernel", "cells", "checks", "other",
                                              "nbgrader_processes", "checks_n", "score", "max_score")}
    if all("cli" in r for r in rows):
        lines = [line + (" course grade" if i == 0 else "") for i, line in enumerate(lines)]
        lines = lines[:2] + [line + f" {r['cli']:12.1f}" for line, r in zip(lines[2:], rows)]
    lines.append("-" * len(head))
    lines.append(f"{'sum':<22} {s['cpu']:6.1f} {s['total']:7.1f} {s['nbgrader_processes']:>3} × {s['nbgrader']:6.1f} "
                 f"{s['generate']:8.1f} {s['kernel']:7.1f} {s['cells']:7.1f} {s['checks_n']:>3} × {s['checks']:6.1f} "
                 f"{s['other']:6.1f}  {s['score']:g}/{s['max_score']:g}"
                 + (f"{sum(r['cli'] for r in rows):13.1f}" if all("cli" in r for r in rows) else ""))
    return "\n".join(lines)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()} {platform.release()}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("lesson", nargs="*", help="lessons (default: every CPU lesson)")
    parser.add_argument("--repeat", type=int, default=1, help="runs; the table shows each run and the spread")
    parser.add_argument("--cells", type=int, default=0, help="also list each lesson's N slowest cells and checks")
    parser.add_argument("--cli", action="store_true",
                        help="also time the real command `course grade NOTEBOOK` (a new process) per lesson")
    parser.add_argument("--json", help="write the runs, machine, date and command to this JSON file")
    parser.add_argument("--show", metavar="JSON", help="print the tables of a JSON file written by --json")
    args = parser.parse_args()
    if args.show:
        saved = json.loads(Path(args.show).read_text())
        print(f"{saved['date']}  {saved['machine']}  commit {saved['commit']}  load {saved['load_average_before'][0]:.1f}"
              f" .. {saved.get('load_average_after', [float('nan')])[0]:.1f}\n{saved['command']}\n{saved.get('grader_code', '')}")
        for number, rows in enumerate(saved["runs"], start=1):
            rows = [{**summarise(r["lesson"], r["total"], r["spans"], [_Grade(c, v, v) for c, v in r["grades"].items()]),
                     **{k: r[k] for k in ("cpu", "cli") if k in r}} for r in rows]
            print(f"\nrun {number} of {len(saved['runs'])}\n{table(rows)}")
        return 0

    lessons = args.lesson or [name for name in course.lessons() if not course.is_gpu_lesson(name)]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    header = {"machine": machine(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "command": " ".join([Path(sys.executable).name, *sys.argv]), "commit": commit,
              "load_average_before": os.getloadavg()}
    print(f"{header['date']}  {header['machine']}  commit {commit}  load {header['load_average_before'][0]:.1f}", flush=True)
    runs, failed = [], False
    for run in range(args.repeat):
        rows = []
        for lesson in lessons:
            rows.append(grade_once(lesson))
            failed |= rows[-1]["score"] != rows[-1]["max_score"]
            if args.cli:
                rows[-1]["cli"], rows[-1]["cli_total"] = cli_once(lesson)
                failed |= cli_score(rows[-1]["cli_total"]) != rows[-1]["score"]
        runs.append(rows)
        print(f"\nrun {run + 1} of {args.repeat}\n{table(rows)}", flush=True)
        for r in rows[: len(rows) if args.cells else 0]:
            print(f"  {r['lesson']}: slowest cells " + ", ".join(f"#{c['index']} {c['seconds']:.2f} s"
                                                                  for c in r["slowest_cells"][: args.cells]))
            print(f"  {r['lesson']}: slowest checks " + ", ".join(f"{c['check']} {c['seconds']:.2f} s"
                                                                   for c in r["slowest_checks"][: args.cells]))
    totals = [sum(r["total"] for r in rows) for rows in runs]
    if len(runs) > 1:
        print(f"\nsum over lessons, {len(runs)} runs: min {min(totals):.1f} s, median {statistics.median(totals):.1f} s, "
              f"max {max(totals):.1f} s")
    identical = all(r["grades"] == first["grades"] for rows in runs for r, first in zip(rows, runs[0]))
    print(f"full marks in every lesson: {'yes' if not failed else 'NO'}; same cell scores in every run: "
          f"{'yes' if identical else 'NO'}")
    header["load_average_after"] = os.getloadavg()
    if args.json:
        Path(args.json).write_text(json.dumps({**header, "sums": totals, "runs": runs}, indent=1, ensure_ascii=False) + "\n")
    return 1 if failed or not identical else 0


if __name__ == "__main__":
    sys.exit(main())
