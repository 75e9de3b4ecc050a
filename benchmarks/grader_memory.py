"""How much memory the grader's own process takes while a student's cell prints a lot (issue 53's costs).

    python benchmarks/grader_memory.py [--gib 1 2] [--out benchmarks/results/grader_memory.json]

Lesson 02's reference with one more cell after its first answer, writing GIB gibibytes to stdout in 1 MiB
pieces, graded by the real ``nbgrader autograde`` (sandboxed where bubblewrap is). A sampler reads the resident
memory (VmRSS) of the grading process (``autograder.nbgrader.batch``) and of the student's kernel every 0.1 s.
Prints a table: GiB printed, the grader's and the kernel's peak, the grading's wall time and the score (12 is
full marks: the flood costs no grade).  The kernel's memory is its sandbox's to bound (the cgroup); the grader's is
bounded by ``isolation.kernel_output`` (each cell's print capped in the kernel) and by
``execute.MAX_KERNEL_MESSAGE_BYTES`` and ``MAX_QUEUED_KERNEL_MESSAGES`` (for what undoes that).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import threading
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from autograder.course import grading  # noqa: E402
from helpers import submission  # noqa: E402

LESSON = "02_fused_rmsnorm"


def flooding(gib: int) -> nbformat.NotebookNode:
    nb = submission(LESSON)
    at = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("solution"))
    nb.cells[at + 1:at + 1] = [nbformat.v4.new_code_cell(
        f"import sys\nchunk = 'x' * (1 << 20)\nfor _ in range({gib} * 1024):\n    sys.stdout.write(chunk)\n")]
    return nb


def resident_kib(marker: str) -> int:
    """The largest VmRSS (KiB) of the processes whose command line holds ``marker``."""
    most = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            if marker not in (status.parent / "cmdline").read_bytes().decode(errors="replace"):
                continue
            for line in status.read_text().splitlines():
                if line.startswith("VmRSS:"):
                    most = max(most, int(line.split()[1]))
        except (OSError, ValueError):
            continue
    return most


def measure(gib: int, folder: Path) -> dict:
    peaks, done = {"grader": 0, "kernel": 0}, threading.Event()

    def sample():
        while not done.is_set():
            peaks["grader"] = max(peaks["grader"], resident_kib("autograder.nbgrader.batch"))
            peaks["kernel"] = max(peaks["kernel"], resident_kib("ipykernel_launcher"))
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.monotonic()
    grades = grading.grade_notebooks(LESSON, {"floods": flooding(gib)}, folder / f"gib{gib}")
    took = time.monotonic() - start
    done.set()
    sampler.join()
    return {"gib": gib, "grader_peak_mib": round(peaks["grader"] / 1024), "kernel_peak_mib": round(peaks["kernel"] / 1024),
            "seconds": round(took, 1), "score": sum(g.score for g in grades["floods"] if not g.bonus)}


def main() -> None:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=int, nargs="+", default=[1])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="grader-memory-") as folder:
        rows = [measure(gib, Path(folder)) for gib in args.gib]
    print(f"{'GiB printed':>11} {'grader peak MiB':>15} {'kernel peak MiB':>15} {'seconds':>8} {'score':>6}")
    for r in rows:
        print(f"{r['gib']:>11} {r['grader_peak_mib']:>15} {r['kernel_peak_mib']:>15} {r['seconds']:>8} {r['score']:>6g}")
    if args.out:
        args.out.write_text(json.dumps({"date": datetime.date.today().isoformat(), "machine": platform.node(),
                                        "cpus": os.cpu_count(), "command": "python benchmarks/grader_memory.py "
                                        + " ".join(sys.argv[1:]), "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
