"""AUTOGRADER_GPU_BOUNDS=emulator's own code path over every entry of the GPU banks of 06-09, on this machine's CPU.

    python benchmarks/emulator_bounds_banks.py [--lessons 06,07] [--pose H200] [--out FILE.json]
    python benchmarks/emulator_bounds_banks.py --lessons 07 --entries eps_as_python_float --out FILE.json  # merged

On a GPU machine with ``AUTOGRADER_GPU_BOUNDS=emulator`` a bounds-and-races check runs its values on the GPU and its
bounds and races in a worker posing as a GPU on the PTX emulator (``autograder.gpu.sanitizer.emulator_check``).  Here,
without a GPU, each entry's bounds-and-races calls (visible and hidden) run that same branch of ``sanitizer_verdict``:
the values on the CuPy stand-in posing as ``--pose`` (the GPU's values are the bank's business), then the
student's function packed and sent to the emulator's worker, as on the GPU.  The question is the one the GPU banks
answer with compute-sanitizer: does each entry lose the bounds-and-races checks its bank says it loses on the H200,
and no other, with a message in the words the bank expects (``says``) where it loses those checks only?  An entry
that loses one through its values (and so never reaches the tool) counts as agreeing when
the bank says it loses it.

Prints a table; ``--out`` writes JSON with the date, machine and command.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

LESSONS = {"06": "06_cuda_basics", "07": "07_cupy_rmsnorm", "08": "08_cupy_flash_attention", "09": "09_tensor_cores"}


def bounds_check(check_id: str) -> bool:
    return check_id.endswith(("sanitizer", "_bounds"))


def entry_losses(lesson: str, entry, pose: str) -> tuple[set[str], dict[str, str]]:
    """The bounds-and-races checks ``entry`` loses through AUTOGRADER_GPU_BOUNDS=emulator's branch, and why."""
    import test_gpu_lessons as banks
    from autograder.checks.core import CheckFailed, get_check
    from autograder.gpu import runtime
    from autograder.isolation import guard

    lost: dict[str, str] = {}
    with runtime.stand_in(pose):
        with contextlib.redirect_stdout(io.StringIO()):
            space = banks.namespace(lesson, entry.answers)
        real_emulated = runtime.emulated
        runtime.emulated = lambda: False  # sanitizer_verdict takes the GPU's branch; values still on the stand-in
        guard.trust_grader_changes()  # the grader's own change: the guard restores runtime after student code
        try:
            for check_id, names, cases in banks.grade_calls(lesson):
                if not bounds_check(check_id):
                    continue
                kwargs = {} if cases is None else {"cases": cases}
                try:
                    with contextlib.redirect_stdout(io.StringIO()):
                        get_check(check_id).function.__wrapped__(*[space[n] for n in names], **kwargs)
                except CheckFailed as failure:
                    lost.setdefault(check_id, str(failure)[:400])
                except Exception as error:  # noqa: BLE001 - a worker reports it as the check's failure
                    lost.setdefault(check_id, f"{type(error).__name__}: {error}"[:400])
        finally:
            runtime.emulated = real_emulated
            guard.trust_grader_changes()
    return set(lost), lost


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lessons", default=",".join(LESSONS))
    parser.add_argument("--pose", default="H200", choices=("T4", "H200"))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--entries", default="", help="only these entries (comma-separated); --out keeps the others' rows")
    args = parser.parse_args(argv)
    os.environ["AUTOGRADER_GPU_BOUNDS"] = "emulator"
    import test_gpu_lessons as banks
    from autograder.gpu import sanitizer

    assert sanitizer.bounds_tool() == "emulator"
    rows = []
    for number in args.lessons.split(","):
        lesson = LESSONS[number.strip()]
        for entry in banks.BANKS[lesson]():
            if args.entries and entry.name not in args.entries.split(","):
                continue
            started = time.perf_counter()
            lost, messages = entry_losses(lesson, entry, args.pose)
            expected = {c for c in entry.loses if bounds_check(c)}
            maybe = {c for c in entry.may_lose if bounds_check(c)}
            # an entry that loses bounds-and-races checks only must be named in the words its bank expects
            worded = (not entry.says or entry.loses != expected or not lost
                      or any(entry.says in m for m in messages.values()))
            agrees = (expected <= lost <= expected | maybe) and worded
            rows.append({"lesson": lesson, "entry": entry.name, "gpu_loses": sorted(expected), "may_lose": sorted(maybe),
                         "says": entry.says, "emulator_loses": sorted(lost), "agrees": agrees, "messages": messages,
                         "seconds": round(time.perf_counter() - started, 2)})
            print(f"{lesson:<26}{entry.name:<44}{'agrees' if agrees else 'DIFFERS'}  gpu {sorted(expected)}  "
                  f"emulator {sorted(lost)}  {rows[-1]['seconds']:.1f} s", flush=True)
    agree = sum(r["agrees"] for r in rows)
    print(f"\n{agree} of {len(rows)} entries lose on the emulator's branch the bounds-and-races checks they lose "
          f"under compute-sanitizer on the H200 (pose {args.pose})")
    if args.out:
        from bank_rows import merged

        previous = json.loads(args.out.read_text(encoding="utf-8")) if args.out.exists() else {}
        machine = f"{platform.machine()}, {os.cpu_count()} cores, no GPU used"
        command = "python benchmarks/emulator_bounds_banks.py " + " ".join(argv if argv is not None else sys.argv[1:])
        run = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "machine": machine, "pose": args.pose, "command": command}
        report = merged(previous, rows, {(r["lesson"], r["entry"]) for r in rows}, only_entries=bool(args.entries),
                        bank_order=[(lesson, e.name) for lesson in LESSONS.values() for e in banks.BANKS[lesson]()],
                        run=run, machine=machine, command=command)
        args.out.write_text(json.dumps(report, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return 0 if agree == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
