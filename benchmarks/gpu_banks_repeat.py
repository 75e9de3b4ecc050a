"""Do GPU checks survive a machine that has graded before?  The GPU banks twice in one home (issue 23).

    python benchmarks/gpu_banks_repeat.py [--lessons 06,07,08,09,11] [--steps fresh,setup,again]
                                          [--deadline-s 540] [--sandbox] [--out gpu_banks_repeat.json]

For each lesson, in one home, in this order:
1. ``fresh``: the lesson's bank of tests/test_gpu_lessons.py (every entry, every GPU check, each check in
   its own worker through ``autograder.notebook.run``, as ``nbgrader autograde`` grades);
2. ``setup``: the instructor notebook's cells that are not graded (install, setup, answers, demos) run top
   to bottom in a separate Python process, as a student's kernel on Colab runs them before checking: it
   compiles the lesson's kernels into this home's caches (``~/.nv``, ``~/.cupy``);
3. ``again``: the same bank once more, with the caches that 1 and 2 left.
Each step reports its grader faults (a result with ``grader_fault``: the worker ended before the student's
code), the entries whose lost checks differ from the bank's expectation, and the size of the home's caches
before it.  With ``--sandbox`` every check runs inside the OS sandbox (bubblewrap), as a class is graded
(the sandbox gives every check a private home, so ``--steps fresh`` is the whole story there).

A device call lasts at most ten minutes, so the run is resumable: the steps done are kept in
``~/.gpu_banks_repeat/state.json`` and a later call on the same (still warm) machine goes on from there.
A step is kept under its lesson, its name and its mode (plain or sandbox, and ``AUTOGRADER_FORCE_PTX_ARCH``),
so one machine can run several modes one after another.
A call that finds no state is on a fresh machine and starts from the beginning.  ``--deadline-s`` stops
before a step that would not end in time (estimated from the steps done).  Prints a table; writes the JSON
of every step so far to ``--out``.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

STATE = Path.home() / ".gpu_banks_repeat" / "state.json"
CACHES = (".nv", ".cupy", ".cache")
FIRST_PASS_GUESS_S = 300


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else 0


def home_caches() -> dict[str, int]:
    return {name: folder_bytes(Path.home() / name) for name in CACHES}


class FaultCounter:
    """Counts every check result of the bank, and those that are grader faults."""

    def __init__(self, bank):
        self.bank, self.calls, self.faults, self.first = bank, 0, 0, None

    def wrap(self, function):
        def counted(*args, **kwargs):
            result = function(*args, **kwargs)
            self.calls += 1
            if result.grader_fault:
                self.faults += 1
                self.first = self.first or f"{result.check_id}: {result.message[:1500]}"
            return result
        return counted

    def __enter__(self):
        self.saved = self.bank.run, self.bank.run_check
        self.bank.run, self.bank.run_check = self.wrap(self.bank.run), self.wrap(self.bank.run_check)
        return self

    def __exit__(self, *exc):
        self.bank.run, self.bank.run_check = self.saved


def bank_step(lesson: str, sandbox: bool) -> dict:
    import test_gpu_lessons as bank
    from autograder.isolation import run as isolation, sandbox as sandboxing

    box = (sandboxing.Sandbox(scratch=tempfile.mkdtemp(prefix="autograder-sandbox-"), hidden=(str(ROOT),))
           if sandbox else None)
    log = io.StringIO()
    with FaultCounter(bank) as counter, isolation.sandboxed(box), contextlib.redirect_stdout(log):
        report = bank.run_bank(lesson)
    problems = bank.problems_of(report)
    return {"calls": counter.calls, "grader_faults": counter.faults, "first_fault": counter.first,
            "entries": len(report), "problems": problems,
            "lost": {r["entry"]: r["lost"] for r in report}}


def setup_step(lesson: str) -> dict:
    """The instructor notebook's ungraded cells, top to bottom, in a process of their own."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "tests" / "test_gpu_lessons.py"),
               "-k", f"demos and {lesson}"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    return {"command": " ".join(command[1:]), "returncode": done.returncode,
            "problems": [] if done.returncode == 0 else [done.stdout[-3000:] + done.stderr[-2000:]]}


STEPS = ("fresh", "setup", "again")


def mode(sandbox: bool) -> str:
    ptx = os.environ.get("AUTOGRADER_FORCE_PTX_ARCH")
    return ("sandbox" if sandbox else "plain") + (f", compute_{ptx} PTX" if ptx else "")


def key(step: dict) -> tuple[str, str, str]:
    return step["lesson"], step["step"], step.get("mode", "plain")


def plan(lessons: list[str], steps: list[str], sandbox: bool) -> list[tuple[str, str, str]]:
    return [(lesson, step, mode(sandbox)) for lesson in lessons for step in steps]


def estimate(step: str, lesson: str, done: list[dict]) -> float:
    mine = [d["seconds"] for d in done if d["lesson"] == lesson and d["step"] != "setup"]
    if step == "setup":
        return 60
    return max(mine) if mine else FIRST_PASS_GUESS_S


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lessons", default="06,07,08,09,11")
    parser.add_argument("--deadline-s", type=float, default=540)
    parser.add_argument("--steps", default=",".join(STEPS), help="which of fresh,setup,again to run")
    parser.add_argument("--sandbox", action="store_true", help="every check inside the OS sandbox")
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "gpu_banks_repeat.json"))
    args = parser.parse_args(argv)

    import test_gpu_lessons as bank
    names = {name[:2]: name for name in bank.BANKS}
    lessons = [names[n.strip()[:2]] for n in args.lessons.split(",")]
    steps = [step.strip() for step in args.steps.split(",")]
    if not set(steps) <= set(STEPS):
        parser.error(f"--steps takes some of {','.join(STEPS)}")
    started = time.time()
    fresh_machine = not STATE.exists()
    state = {"steps": [], "calls_of_this_script": 0} if fresh_machine else json.loads(STATE.read_text())
    state["calls_of_this_script"] += 1
    print(f"{'fresh machine' if fresh_machine else 'same machine, steps done: ' + str(len(state['steps']))}; "
          f"call {state['calls_of_this_script']}", flush=True)
    done_keys = {key(d) for d in state["steps"]}
    for lesson, step, step_mode in plan(lessons, steps, args.sandbox):
        if (lesson, step, step_mode) in done_keys:
            continue
        left = args.deadline_s - (time.time() - started)
        if estimate(step, lesson, state["steps"]) > left:
            print(f"stopping before {lesson} {step}: {left:.0f} s left; call again on this machine", flush=True)
            break
        before = home_caches()
        t = time.time()
        result = setup_step(lesson) if step == "setup" else bank_step(lesson, args.sandbox)
        result.update(lesson=lesson, step=step, mode=step_mode, seconds=round(time.time() - t), caches_before=before,
                      sandbox=args.sandbox and step != "setup", call=state["calls_of_this_script"],
                      force_ptx=os.environ.get("AUTOGRADER_FORCE_PTX_ARCH"),
                      **{name: os.environ[name] for name in ("GPU_BANK_CHECKS", "GPU_BANK_ENTRIES") if os.environ.get(name)})
        state["steps"].append(result)
        STATE.parent.mkdir(parents=True, exist_ok=True)
        STATE.write_text(json.dumps(state, ensure_ascii=False))
        print(f"{lesson:<26} {step:<6} {step_mode:<22} {result['seconds']:>5} s  calls {result.get('calls', '-'):>5}  "
              f"faults {result.get('grader_faults', '-'):>3}  problems {len(result['problems'])}  "
              f"~/.nv {before['.nv'] / 2**20:6.1f} MiB  ~/.cupy {before['.cupy'] / 2**20:6.1f} MiB", flush=True)
        for problem in result["problems"][:3]:
            print("    " + problem[:600].replace("\n", "\n    "), flush=True)
        if result.get("first_fault"):
            print("    first fault: " + result["first_fault"][:800], flush=True)

    remaining = [k for k in plan(lessons, steps, args.sandbox) if k not in {key(d) for d in state["steps"]}]
    summary = {"what": "GPU banks of tests/test_gpu_lessons.py twice in one home, a lesson's ungraded cells "
                       "between (benchmarks/gpu_banks_repeat.py, issue 23)",
               "date": datetime.date.today().isoformat(), "device": device(), "python": platform.python_version(),
               "command": "python benchmarks/gpu_banks_repeat.py " + " ".join(argv if argv is not None else sys.argv[1:]),
               "complete": not remaining, "remaining": remaining,
               "total": {"calls": sum(d.get("calls", 0) for d in state["steps"]),
                         "grader_faults": sum(d.get("grader_faults", 0) for d in state["steps"]),
                         "problems": sum(len(d["problems"]) for d in state["steps"])},
               "steps": state["steps"]}
    Path(args.out).write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps(summary["total"]), "complete" if not remaining else f"remaining {remaining}", flush=True)
    return 0 if not remaining and not summary["total"]["grader_faults"] and not summary["total"]["problems"] else 1


def device() -> str:
    from autograder.gpu import runtime
    return runtime.describe_gpu()


if __name__ == "__main__":
    raise SystemExit(main())
