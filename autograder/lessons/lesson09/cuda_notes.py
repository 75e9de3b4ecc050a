"""Lesson 09's notes on the given C++ and PTX (not graded): small NumPy models and one picture.

* :func:`pack_f16x2` is what the given ``pack_f16x2`` helper does with ``cvt.rn.f16.f32`` (``"=h"``: a 16-bit
  register) and a shift (``"r"``: a 32-bit one), in NumPy.
* :func:`flush_to_zero` is what ``.ftz`` does to a float32 result below the smallest normal number.
* :func:`array_parameter_sizes`: what ``sizeof`` says of an array parameter written ``float s[4]`` (a pointer) and
  ``float (&s)[4]`` (a reference to the array itself), compiled by NVRTC (no GPU needed).
* :func:`plot_cp_async_pipeline` draws the two-buffer pipeline of the FlashAttention kernel: ``cp.async`` copies,
  ``commit_group`` and ``wait_group 0`` (PTX ISA, "Data Movement and Conversion Instructions: cp.async,
  cp.async.commit_group, cp.async.wait_group").
"""
from __future__ import annotations

import numpy as np


def pack_f16x2(lo: float, hi: float) -> int:
    """Two floats rounded to f16 (round to nearest, as ``cvt.rn.f16.f32``) in one 32-bit word, ``lo`` in the low
    16 bits: ``(unsigned)a | ((unsigned)b << 16)`` of the given helper."""
    a, b = (int(np.float16(v).view(np.uint16)) for v in (lo, hi))   # "=h": each half is a 16-bit register
    return a | (b << 16)                                             # "=r": the pair is one 32-bit register


def flush_to_zero(x) -> np.ndarray:
    """float32 values below the smallest normal float32 (2^-126) in magnitude become 0 (sign kept), as with
    ``.ftz`` (PTX ISA, "Floating Point Instructions": subnormal inputs and results are flushed to sign-preserving
    zero)."""
    x = np.asarray(x, dtype=np.float32)
    return np.where(np.abs(x) < np.finfo(np.float32).tiny, np.copysign(np.float32(0), x), x).astype(np.float32)


def array_parameter_sizes() -> dict[str, int]:
    """``sizeof(s)`` inside a function whose parameter is ``float s[4]`` and ``float (&s)[4]``, found by NVRTC:
    each candidate size is tried with a ``static_assert`` and the one that compiles is the answer."""
    from ...gpu import nvrtc

    sizes = {}
    for parameter in ("float s[4]", "float (&s)[4]"):
        for size in (4, 8, 16):
            source = f"__device__ void f({parameter}) {{ static_assert(sizeof(s) == {size}, \"\"); }}"
            if nvrtc.compile_source(source).ok:
                sizes[parameter] = size
                break
    return sizes


def plot_cp_async_pipeline(tiles: int = 4, ax=None):
    """Timeline of the kernel's K/V pipeline: while tile j is computed, cp.async brings tile j + 1 into the other
    buffer; each tile's copies are one commit group, and ``wait_group 0`` + ``__syncthreads()`` open tile j."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    ax = ax or plt.subplots(figsize=(11, 2.8))[1]
    colors = plt.get_cmap("tab10")
    copy, compute = 1.0, 1.6                    # copying a tile is shorter than computing it, as on a GPU
    start = 0.0                                 # tile 0 is requested before the loop
    for j in range(tiles):
        ax.add_patch(Rectangle((start, 1), copy, 0.6, facecolor=colors(j), alpha=0.5, edgecolor="black"))
        ax.text(start + copy / 2, 1.3, f"cp.async тайл {j}\n→ буфер {j % 2}", ha="center", va="center", fontsize=7)
        ax.plot([start + copy] * 2, [0.95, 1.65], color="black", lw=1)
        ax.text(start + copy, 1.72, "commit_group", ha="center", fontsize=6)
        begin = max(start + copy, j * compute + copy)   # wait_group 0: tile j has landed; then the barrier
        ax.add_patch(Rectangle((begin, 0), compute, 0.6, facecolor=colors(j), edgecolor="black"))
        ax.text(begin + compute / 2, 0.3, f"счёт тайла {j}", ha="center", va="center", fontsize=7)
        ax.plot([begin] * 2, [-0.05, 0.65], color="red", lw=2)
        ax.text(begin, -0.25, "wait_group 0 +\n__syncthreads()", ha="center", va="top", fontsize=6, color="red")
        start = begin                           # right after the barrier the next tile is requested
    ax.text(-0.2, 1.3, "копии", ha="right", va="center", fontsize=9)
    ax.text(-0.2, 0.3, "варпы", ha="right", va="center", fontsize=9)
    ax.set_xlim(-1.5, start + compute + 0.5)
    ax.set_ylim(-0.9, 2.0)
    ax.axis("off")
    ax.set_title("Два буфера K/V: тайл j + 1 летит (cp.async), пока считается тайл j", fontsize=10)
    return ax
