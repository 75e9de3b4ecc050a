"""The memory checks of lessons 02, 03, 05 and 11 with the reference solutions and with a solution that hides its
(T, D) temporaries from tracemalloc in ``mmap``\\ s or in files it maps, and one that loads NumPy modules:
tracemalloc's peak next to the student process's resident growth, which the judge reads from /proc (autograder/checks/student_process.py), and the verdicts.  Shows that
``RESIDENT_SLACK`` (autograder/checks/memory.py) is enough for honest code and too little to hide a temporary.

    python benchmarks/resident_memory.py [--out benchmarks/results/resident_memory.txt]

This process is the judge, as a check's worker is (without the sandbox): it forks the student process, runs the
check's own function and reads each case's measurement (``memory.LAST_BOUNDS``).  No GPU needed; seconds.
"""
from __future__ import annotations

import argparse
import datetime
import math
import platform
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

MEMORY_CHECKS = {  # check id -> (lesson folder, the function it measures)
    "lesson02.memory": ("02_fused_rmsnorm", "fused_rms_norm"),
    "lesson02.add_memory": ("02_fused_rmsnorm", "fused_add_rms_norm"),
    "lesson03.memory": ("03_swiglu", "fused_swiglu"),
    "lesson05.fa1_memory": ("05_flash_attention", "flash_attention"),
    "lesson05.fa2_memory": ("05_flash_attention", "flash_attention_v2"),
    "lesson11.memory": ("11_flash_decoding", "paged_decode"),
}

#: Lesson 02's answer with its float64 temporaries made by ``hidden(shape)``, which tracemalloc does not see.
_HIDDEN_TEMPORARIES = '''
def fused_rms_norm(x, w, eps=1e-6):
{hidden}
    x64, squares = hidden(x.shape), hidden(x.shape)
    x64[...] = x
    np.multiply(x64, x64, out=squares)
    scale = 1.0 / np.sqrt(squares.mean(axis=-1, keepdims=True) + eps)
    np.multiply(x64, scale, out=x64)
    out = np.empty_like(x)
    np.multiply(x64, w, out=out, casting="unsafe")
    return out
'''

#: ... in anonymous mmaps.
HIDDEN_IN_MMAP = _HIDDEN_TEMPORARIES.format(hidden='''    import mmap
    def hidden(shape):
        return np.frombuffer(mmap.mmap(-1, int(np.prod(shape)) * 8), np.float64).reshape(shape)''')

#: ... in files it writes and maps (np.memmap): pages of a file, not of a library, so counted.
HIDDEN_IN_FILE = _HIDDEN_TEMPORARIES.format(hidden='''    import tempfile
    def hidden(shape):
        return np.memmap(tempfile.TemporaryFile(dir="."), np.float64, "w+", shape=shape)''')


def loading_libraries(reference: str) -> str:
    """The reference answer, its first call loading NumPy's fft and random modules: 5 MiB of library pages that
    tracemalloc does not see and the judge does not count (``student_process.LIBRARY_FOLDERS``)."""
    return reference.replace("    return out\n", "    np.random.default_rng(0); np.fft.fft(np.ones(4))\n    return out\n", 1)


def function(source: str, name: str):
    space = {"__name__": "__main__", "np": np, "math": math}
    exec(compile(source, "<student>", "exec"), space)
    return space[name]


def judged(check_id: str, fn) -> tuple[str, list]:
    """The check run with this process as its judge: its verdict, and its cases' measurements."""
    from autograder.checks import memory, student_process
    from autograder.checks.core import CheckFailed, get_check
    from autograder.isolation.run import pack_one

    check = get_check(check_id)
    student_process.start([pack_one(fn)], ())
    student_process.go()
    try:
        (handle,) = student_process.objects()
        try:
            check.function(handle)
            verdict = "пройдена"
        except CheckFailed as failure:
            verdict = "не пройдена: " + str(failure).splitlines()[0][:70]
    finally:
        student_process.stop()
        student_process._JUDGE.update(socket=None)
    return verdict, list(memory.LAST_BOUNDS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "resident_memory.txt")
    options = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from autograder.checks.memory import MiB, RESIDENT_SLACK
    from autograder.course import grading

    lines = [f"{'проверка':<22}{'решение':<14}{'случай':>6}{'tracemalloc':>13}{'процесс':>10}{'разница':>10}"
             f"{'допуск':>9}  вердикт (МиБ)"]
    worst = 0.0
    for check_id, (lesson, name) in MEMORY_CHECKS.items():
        solutions = [("эталон", "\n".join(grading.reference_answers(lesson).values()))]
        if check_id == "lesson02.memory":
            solutions += [("fft, random", loading_libraries(solutions[0][1])), ("mmap (T, D)", HIDDEN_IN_MMAP),
                          ("файл (T, D)", HIDDEN_IN_FILE)]
        for label, source in solutions:
            verdict, bounds = judged(check_id, function(source, name))
            for number, bound in enumerate(bounds, 1):
                peak = bound.peak
                grown = "—" if peak.resident is None else f"{peak.resident / MiB:.2f}"
                gap = None if peak.resident is None else (peak.resident - peak.bytes) / MiB
                if label == "эталон" and gap is not None:
                    worst = max(worst, gap)
                lines.append(f"{check_id:<22}{label:<14}{number:>6}{peak.mib:>13.2f}{grown:>10}"
                             f"{'—' if gap is None else f'{gap:+.2f}':>10}{bound.allowed / MiB:>9.2f}  {verdict}")
    lines.append(f"наибольшая разница у эталонов: {worst:+.2f} МиБ; RESIDENT_SLACK = {RESIDENT_SLACK / MiB:g} МиБ")
    header = (f"# {datetime.datetime.now():%Y-%m-%d %H:%M}  {platform.node()}  {platform.machine()}  "
              f"python benchmarks/resident_memory.py\n")
    text = header + "\n".join(lines) + "\n"
    print(text)
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(text)


if __name__ == "__main__":
    main()
