"""The memory checks of lessons 02, 03, 05 and 11 with the reference solutions and with a solution that hides a
(T, D) temporary from tracemalloc in an ``mmap``: tracemalloc's peak next to the student process's resident growth,
which the judge reads from /proc (autograder/isolation/student_process.py), and the verdicts.  Shows the slack
``RESIDENT_SLACK`` (autograder/checks/memory.py) is enough for honest code and too little to hide a temporary.

    python benchmarks/resident_memory.py [--out benchmarks/results/resident_memory.txt]

No GPU needed; a few seconds a check on 2 cores.
"""
from __future__ import annotations

import argparse
import datetime
import platform
import re
import sys
import textwrap
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

MEMORY_CHECKS = {  # check id -> (lesson folder, the function it measures)
    "lesson02.memory": ("02_fused_rmsnorm", "fused_rms_norm"),
    "lesson02.add_memory": ("02_fused_rmsnorm", "fused_add_rms_norm"),
    "lesson03.memory": ("03_swiglu", "fused_swiglu"),
    "lesson05.fa1_memory": ("05_flash_attention", "flash_attention"),
    "lesson11.memory": ("11_flash_decoding", "paged_decode"),
}

#: lesson 02's reference with its float64 copy of x made in an anonymous mmap, which tracemalloc does not see.
HIDDEN_IN_MMAP = textwrap.dedent('''
    def fused_rms_norm(x, w, eps=1e-6):
        import mmap
        def hidden(shape):  # an array tracemalloc does not see
            return np.frombuffer(mmap.mmap(-1, int(np.prod(shape)) * 8), np.float64).reshape(shape)
        x64, squares = hidden(x.shape), hidden(x.shape)
        x64[...] = x
        np.multiply(x64, x64, out=squares)
        scale = 1.0 / np.sqrt(squares.mean(axis=-1, keepdims=True) + eps)
        np.multiply(x64, scale, out=x64)
        out = np.empty_like(x)
        np.multiply(x64, w, out=out, casting="unsafe")
        return out
''')


def namespace(source: str) -> dict:
    import math

    space = {"__name__": "__main__", "np": np, "math": math}
    exec(compile(source, "<student>", "exec"), space)
    return space


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "resident_memory.txt")
    options = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from autograder.checks.memory import RESIDENT_LINE
    from autograder.course import grading
    from autograder.isolation.run import pack_one, run_check

    lines = [f"{'проверка':<22}{'решение':<16}{'tracemalloc, МиБ':>18}{'процесс, МиБ':>14}  вердикт"]
    for check_id, (lesson, name) in MEMORY_CHECKS.items():
        answers = grading.reference_answers(lesson)
        solutions = [("эталон", "\n".join(answers.values()))]
        if check_id == "lesson02.memory":
            solutions.append(("mmap (T, D)", HIDDEN_IN_MMAP))
        for label, source in solutions:
            function = namespace(source)[name]
            result = run_check(check_id, [pack_one(function)])
            peaks = [float(p) for p in re.findall(r"\s([\d.]+)\s+[\d.]+\s+\d+%", result.message)]
            grown = re.search(rf"{re.escape(RESIDENT_LINE)} ([\d.]+)", result.message)
            hidden = re.search(r"Память процесса выросла на ([\d.]+)", result.message)
            resident = grown.group(1) if grown else hidden.group(1) if hidden else "—"
            lines.append(f"{check_id:<22}{label:<16}{max(peaks):>18}{resident:>14}  "
                         f"{'пройдена' if result.passed else 'не пройдена'}")
    header = (f"# {datetime.date.today()}  {platform.node()}  {platform.processor() or platform.machine()}\n"
              f"# python benchmarks/resident_memory.py\n")
    text = header + "\n".join(lines) + "\n"
    print(text)
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(text)


if __name__ == "__main__":
    main()
