"""Measured plots the lessons show (not graded): peak memory against problem size."""
from __future__ import annotations

import tracemalloc
from typing import Callable, Mapping, Sequence

import numpy as np

MiB = 2**20


def peak_bytes(function: Callable, *args, **kwargs) -> int:
    """tracemalloc peak of one call, in bytes (the inputs, made before, are not counted)."""
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    tracemalloc.reset_peak()
    base, _ = tracemalloc.get_traced_memory()
    function(*args, **kwargs)
    _, peak = tracemalloc.get_traced_memory()
    if not was_tracing:
        tracemalloc.stop()
    return peak - base


def measure_peaks(functions: Mapping[str, Callable], sizes: Sequence[int],
                  make_args: Callable[[int], tuple]) -> dict[str, list[int]]:
    """Peak bytes of each function at each size; ``make_args(size)`` builds the inputs."""
    peaks: dict[str, list[int]] = {name: [] for name in functions}
    for size in sizes:
        args = make_args(size)
        for name, function in functions.items():
            with np.errstate(all="ignore"):
                peaks[name].append(peak_bytes(function, *args))
    return peaks


def plot_peaks(sizes: Sequence[int], peaks: Mapping[str, Sequence[int]], *, xlabel: str,
               title: str, reference: Mapping[str, Sequence[float]] | None = None, log: bool = True):
    """Peak memory (MiB) against size, one line per function, grey reference lines (each its own dash)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, values in peaks.items():
        ax.plot(sizes, np.asarray(values) / MiB, marker="o", label=name)
    styles = ("--", ":", "-.")  # grey like the theory they are, told apart by the dash
    for k, (name, values) in enumerate((reference or {}).items()):
        ax.plot(sizes, np.asarray(values) / MiB, linestyle=styles[k % len(styles)], color="gray", label=name)
    if log:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("пик tracemalloc, МиБ")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig
