"""What a launch did, for the roofline (lesson 01) of a student's kernel: floating-point operations by instruction.

Per thread that issues the instruction: ``fma``/``mad`` 2, the other arithmetic of a float type (``add``, ``sub``,
``mul``, ``div``, ``min``, ``max``, ``rcp``, ``sqrt``, ``rsqrt``, ``ex2``, ``lg2``, ``sin``, ``cos``, ``tanh``) 1,
twice that for the packed ``f16x2``/``bf16x2``; ``mma.sync`` ``mMnNkK`` 2·M·N·K per warp (a 32nd per thread), ``wgmma`` 2·M·N·K per
warpgroup (a 128th per thread), on the tensor cores.  Moves, comparisons and conversions count 0, as in the lessons' FLOP formulas.  The machine counts
every thread that issues an instruction, a predicated-off one included (kernels guard their float work by branches).
"""
from __future__ import annotations

import re

_TWO = {"fma", "mad"}
_ONE = {"add", "sub", "mul", "div", "min", "max", "rcp", "sqrt", "rsqrt", "ex2", "lg2", "sin", "cos", "tanh"}
_WIDTH = {"f16": 1, "bf16": 1, "f32": 1, "f64": 1, "f16x2": 2, "bf16x2": 2}
_MMA_SHAPE = re.compile(r"m(\d+)n(\d+)k(\d+)")


def flops_per_thread(parts: tuple[str, ...]) -> tuple[float, float]:
    """(CUDA-core, tensor-core) floating-point operations one thread's issue of the instruction ``parts`` (its
    opcode split at dots, as ``ptx.Instruction.parts``) stands for."""
    name = parts[0]
    if name in ("mma", "wgmma"):
        shape = next((m for m in map(_MMA_SHAPE.fullmatch, parts) if m), None)
        if shape is None:
            return 0.0, 0.0
        m, n, k = (int(g) for g in shape.groups())
        return 0.0, 2.0 * m * n * k / (32 if name == "mma" else 128)
    width = _WIDTH.get(parts[-1], 0)
    if name in _TWO:
        return 2.0 * width, 0.0
    if name in _ONE:
        return float(width), 0.0
    return 0.0, 0.0
