"""A PTX emulator: runs a kernel's PTX (as NVRTC writes it, see :func:`autograder.gpu.nvrtc.ptx`) on the CPU,
all threads of a chunk of blocks at once as NumPy lanes, and reports what a GPU would leave undefined or fault
on: out-of-bounds and misaligned accesses, shared-memory races between barriers, reads of uninitialised shared
memory, divergent barriers and warp collectives, instructions it cannot emulate.

    result = launch(ptx, "row_sums", grid=(T,), block=(256,), args=[x, out, np.int32(T), np.int32(D)])
    result.ok, result.findings, result.issued

Modules: ``ptx`` (reading PTX), ``program`` (instructions -> closures; the opcode registry), ``ops_*`` (one
builder per opcode family), ``rounding`` (exact float rounding), ``memory`` (global arena, shared memory with
shadow state, local memory), ``machine`` (lanes, divergence, barriers, collectives), ``findings``.
"""
from __future__ import annotations

import numpy as np

from . import ops_control, ops_convert, ops_float, ops_integer, ops_memory  # noqa: F401  (register builders)
from .errors import Unsupported
from .findings import Finding
from .machine import MAX_ISSUES, Machine, Result
from .ptx import parse

__all__ = ["launch", "forms", "Unsupported", "Finding", "Result"]


def launch(ptx: str, kernel: str, grid, block, args: list, shared_bytes: int = 0, *,
           max_issues: int = MAX_ISSUES) -> Result:
    """Run ``kernel`` of the PTX module ``ptx`` with a grid of ``grid`` blocks of ``block`` threads.

    ``args`` follow the kernel's parameters: NumPy arrays are device buffers (copied in, and after the run
    copied back into the same arrays), numbers are passed as the parameter's PTX type.  ``shared_bytes`` is
    the dynamic shared memory per block.  Constructs the emulator does not implement give a finding of kind
    ``"unsupported"`` (the run stops there); :class:`Unsupported` never escapes."""
    try:
        kernels = parse(ptx)
    except Unsupported as e:
        return Result([Finding("unsupported", f"эмулятор не умеет разбирать этот PTX ({e}); эту проверку можно "
                               "пройти только на GPU")], 0, 0.0)
    if kernel not in kernels:
        raise ValueError(f"no kernel {kernel!r} in the PTX (found: {', '.join(kernels) or 'none'})")
    args = list(args)
    return Machine(kernels[kernel], grid, block, args, shared_bytes, max_issues=max_issues).run()


def forms(ptx: str, kernel: str) -> dict:
    """Every opcode form (the opcode with its modifiers, e.g. ``ld.global.nc.v4.f32``) of ``kernel``, each mapped to
    None where the emulator implements it, else to why not.  Nothing is run."""
    from .program import Compiler, find_builder

    k = parse(ptx)[kernel]
    args = [np.zeros(1, np.uint8) if p.type in ("u64", "b64", "s64") else
            (bytes(p.size) if p.type == "bytes" else 0) for p in k.params]
    machine = Machine(k, 1, 32, args)
    compiler = Compiler(machine, k)
    out = {}
    for ins in k.instructions:
        if ins.opcode in out and out[ins.opcode] is None:
            continue
        try:
            builder = find_builder(ins)
            if builder is None:
                raise Unsupported(f"opcode {ins.mnemonic}")
            builder(ins, compiler)
            out[ins.opcode] = None
        except Unsupported as e:
            out[ins.opcode] = str(e)
    return out
