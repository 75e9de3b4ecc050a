"""Serial `nbgrader autograde` vs `course autograde --workers N` on synthetic lesson-02 submissions.

The submissions come from the lesson's bank (tests/banks/bank_02_fused_rmsnorm.py): the
reference, answers written differently, known mistakes, and a few whose bonus function never
returns (each costs its check's timeout, as a student's endless loop does).  Two identical
courses get the same submissions; one is graded by plain `nbgrader autograde`, the other by
`course autograde`.  Prints wall and CPU time of each, the speed-up, and whether every cell's
score is the same.

    .venv/bin/python benchmarks/autograde_parallel.py                      # 20 submissions, 3 hang
    .venv/bin/python benchmarks/autograde_parallel.py --submissions 4 --hanging 1   # a quick look
"""
from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from autograder.course import paths as course  # noqa: E402

from autograder.course import grading, nbgrader_cli

LESSON = "02_fused_rmsnorm"

#: Bonus answers that never return, written the ways students write endless loops.
HANGING = [
    """
def fused_add_rms_norm(x, residual, w, eps=1e-6):
    T = x.shape[0]
    t = 0
    while t < T:                      # forgot t += 1
        residual[t] += x[t]
    return fused_rms_norm(residual, w, eps), residual
""",
    """
def fused_add_rms_norm(x, residual, w, eps=1e-6):
    h = x + residual
    while not np.all(np.isfinite(h) == False):   # a condition that never turns true
        h = h * 1.0
    return fused_rms_norm(h, w, eps), h
""",
    """
def fused_add_rms_norm(x, residual, w, eps=1e-6):
    import threading
    threading.Event().wait()          # waits for nothing, forever
""",
]


def make_submissions(count: int, hanging: int) -> dict:
    """``count`` notebooks: ``hanging`` of them never return, the rest cycle through the bank."""
    from bank import banks

    bank = banks()[LESSON]
    reference = grading.reference_answers(LESSON)
    pool = [("reference", {})] + [(s.name, s.answers) for s in bank.CORRECT + bank.WRONG]
    hangs = {int((k + 0.5) * count / hanging) for k in range(hanging)} if hanging else set()
    answers = {}
    for index in range(count):  # names sort in this order: the hanging ones spread through the queue
        if index in hangs:
            answers[f"s{index:03d}_hangs"] = {"fused_add_rms_norm": HANGING[sorted(hangs).index(index) % len(HANGING)]}
        else:
            name, extra = pool[(index - len([h for h in hangs if h < index])) % len(pool)]
            answers[f"s{index:03d}_{name}"] = extra
    return {student: grading.fill_answers(LESSON, {**reference, **extra}) for student, extra in answers.items()}


def prepare(folder: Path, submissions: dict) -> Path:
    nbgrader_cli.new_course(folder, only=[LESSON])
    nbgrader_cli.nbgrader("generate_assignment", LESSON, "--force", cwd=folder)
    grading.write_submissions(folder, LESSON, submissions)
    return folder


def timed(command: list[str], cwd: Path, quiet: bool) -> tuple[float, float]:
    """Wall and CPU seconds of a command and everything it started (children, kernels, checks)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    done = subprocess.run(command, cwd=cwd, env=nbgrader_cli.nbgrader_env(), text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE if quiet else None)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{(done.stderr or '')[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--submissions", type=int, default=20)
    parser.add_argument("--hanging", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--keep", help="keep both courses in this folder (default: a temporary one)")
    args = parser.parse_args()

    submissions = make_submissions(args.submissions, args.hanging)
    with tempfile.TemporaryDirectory(prefix="bench-autograde-") as scratch:
        base = Path(args.keep).resolve() if args.keep else Path(scratch)
        serial, parallel = prepare(base / "serial", submissions), prepare(base / "parallel", submissions)
        print(f"{len(submissions)} submissions of {LESSON} ({args.hanging} never return), "
              f"{args.workers} workers; courses in {base}", flush=True)

        bin_dir = Path(sys.executable).parent
        serial_wall, serial_cpu = timed([str(bin_dir / "nbgrader"), "autograde", LESSON], serial, quiet=True)
        print(f"serial   nbgrader autograde                 {serial_wall:7.1f} s wall {serial_cpu:7.1f} s CPU", flush=True)
        parallel_wall, parallel_cpu = timed([str(bin_dir / "course"), "autograde", LESSON, "--workers",
                                             str(args.workers)], parallel, quiet=False)
        print(f"parallel course autograde --workers {args.workers:<6} {parallel_wall:7.1f} s wall "
              f"{parallel_cpu:7.1f} s CPU", flush=True)

        students = sorted(submissions)
        expected = grading.read_grades(serial, LESSON, students)
        got = grading.read_grades(parallel, LESSON, students)
        differ = [s for s in students if expected[s] != got[s]]
        totals = {s: sum(g.score for g in expected[s]) for s in students}
        print("scores (serial): " + ", ".join(f"{s}={totals[s]:g}" for s in students))
        print(f"speed-up {serial_wall / parallel_wall:.2f}x; scores identical: "
              f"{'yes' if not differ else 'NO: ' + ', '.join(differ)}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
