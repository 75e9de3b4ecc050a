"""Lesson 06, section 7: compute-sanitizer on a GPU and the PTX emulator on the same two buggy kernels, side by side.

    python benchmarks/sanitizer_vs_emulator.py [--out benchmarks/results/sanitizer_vs_emulator_h200.json]

The kernels are ``autograder.lessons.lesson06.cuda_basics.BUGGY_KERNELS`` (no tail guard; no barrier before the
shared-memory tree), launched by ``launch_buggy``: on the GPU in a fresh Python process under
``compute-sanitizer --tool memcheck`` (the first) and ``--tool racecheck`` (the second), on the emulator by
``emulator_report``.  The JSON keeps the tool's report lines (``=========``) and the emulator's text; the lesson
quotes the tool's lines from it (``tests/test_lesson06_cuda_basics.py`` checks the quotes).  Needs a GPU, CuPy and
compute-sanitizer.
"""
from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_OUT = ROOT / "benchmarks" / "results" / "sanitizer_vs_emulator_h200.json"
TOOLS = {"scale_add без защиты хвоста": "memcheck", "row_sums без барьера": "racecheck"}
DRIVER = ("import cupy as cp\nfrom autograder.lessons.lesson06 import cuda_basics as cb\n"
          "out = cb.launch_buggy(cp, {name!r})\ncp.cuda.Device().synchronize()\nprint('result', out.get()[:4])\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()

    import cupy

    from autograder.gpu import runtime
    from autograder.gpu.sanitizer import sanitizer_path
    from autograder.lessons.lesson06 import cuda_basics as cb

    ok, device = runtime.gpu_status()
    if not ok:
        sys.exit(f"needs a GPU: {device}")
    tool = sanitizer_path()
    version = subprocess.run([tool, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    rows = []
    for name, which in TOOLS.items():
        done = subprocess.run([tool, "--tool", which, sys.executable, "-c", DRIVER.format(name=name)],
                              capture_output=True, text=True, cwd=ROOT, timeout=300)
        lines = [line.rstrip() for line in (done.stdout + done.stderr).splitlines()]
        report = [line for line in lines if line.startswith("=========")]
        rows.append({"kernel": name, "launch": cb.BUGGY_KERNELS[name][2], "tool": which,
                     "exit_code": done.returncode, "sanitizer": report,
                     "program_output": [line for line in lines if not line.startswith("=========")][-5:],
                     "emulator": cb.emulator_report(name)})
        print(f"--- {name}: compute-sanitizer --tool {which} (exit {done.returncode})")
        print("\n".join(report[:14]))
        print(f"--- the emulator:\n{rows[-1]['emulator']}\n")
    result = {"device": device, "cupy": cupy.__version__, "compute_sanitizer": version,
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "command": "python benchmarks/sanitizer_vs_emulator.py" + ("" if args.out == DEFAULT_OUT else
                                                                         f" --out {args.out}"),
              "kernels": rows}
    args.out.write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
