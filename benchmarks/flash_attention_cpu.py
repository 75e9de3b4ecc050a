"""NumPy attention on the CPU: naive (S and P materialised) vs the lesson-05 FlashAttention.

    .venv/bin/python benchmarks/flash_attention_cpu.py [--sizes 1024 2048 4096] [--d 64] [--block 64]

For each n: wall time (median of --repeats runs, tracemalloc off) and tracemalloc peak (one run
with tracing on) of the naive float32 version and of the reference ``flash_attention`` (FA-1
loop order) and ``flash_attention_v2`` (FA-2 order).  The reference functions are read from the
instructor notebook's answer cells, so the benchmark measures what the course ships.  Times
depend on the machine and its load; the peaks do not.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autograder.course import paths as course

from autograder.course import grading
from autograder.checks import reference  # noqa: E402
from autograder.lessons.lesson05.checks import naive_attention  # noqa: E402

MiB = 2**20


def reference_functions() -> dict:
    namespace = {"np": np}
    for name, source in grading.reference_answers("05_flash_attention").items():
        exec(compile(source, f"<{name}>", "exec"), namespace)
    return namespace


def seconds(function, *args, repeats: int, **kwargs) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function(*args, **kwargs)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def peak_bytes(function, *args, **kwargs) -> tuple[int, np.ndarray]:
    tracemalloc.start()
    result = function(*args, **kwargs)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak, result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096])
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--block", type=int, default=64, help="Br = Bc")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    ref = reference_functions()
    functions = {"naive": naive_attention,
                 "flash_attention (FA-1)": lambda Q, K, V: ref["flash_attention"](Q, K, V, Br=args.block, Bc=args.block),
                 "flash_attention_v2 (FA-2)": lambda Q, K, V: ref["flash_attention_v2"](Q, K, V, Br=args.block,
                                                                                          Bc=args.block)}
    print(f"NumPy {np.__version__}, Python {platform.python_version()}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPU, OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '-')}; "
          f"d={args.d}, Br=Bc={args.block}, float32, non-causal, median of {args.repeats}")
    header = f"{'n':>6} {'version':<26} {'time, ms':>10} {'peak, MiB':>10} {'peak / naive':>13} {'max err':>9}"
    print(header)
    print("-" * len(header))
    for n in args.sizes:
        rng = np.random.default_rng(n)
        Q, K, V = (rng.standard_normal((n, args.d), dtype=np.float32) for _ in range(3))
        oracle = reference.attention(Q, K, V)
        naive_peak = None
        for name, function in functions.items():
            function(Q, K, V)  # warm-up
            elapsed = seconds(function, Q, K, V, repeats=args.repeats)
            peak, out = peak_bytes(function, Q, K, V)
            naive_peak = naive_peak or peak
            error = float(np.abs(out - oracle).max())
            print(f"{n:>6} {name:<26} {elapsed * 1e3:>10.1f} {peak / MiB:>10.2f} {peak / naive_peak:>13.3f} {error:>9.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
