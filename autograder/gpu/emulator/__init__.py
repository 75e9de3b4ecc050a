"""A PTX emulator: runs a kernel's PTX (as NVRTC writes it, see :func:`autograder.gpu.nvrtc.ptx`) on the CPU,
all threads of a chunk of blocks at once as NumPy lanes, and reports what a GPU would leave undefined or fault
on: out-of-bounds and misaligned accesses, shared-memory races between barriers, reads of uninitialised shared
memory, divergent barriers and warp collectives, instructions it cannot emulate.

    result = launch(ptx, "row_sums", grid=(T,), block=(256,), args=[x, out, np.int32(T), np.int32(D)])
    result.ok, result.findings, result.issued

Where the emulator can differ from a GPU (each is a place a later session may tighten):

* Approximate instructions (ex2/lg2/rsqrt/sin/cos/tanh/sqrt.approx/rcp.approx/div.approx/div.full) are computed
  in float64 and rounded once: a GPU is 1-2 ulp off on part of the inputs (ex2.approx.f32: 49 % exact, rsqrt
  78 %, measured on the H200 in ../shared/EMULATOR.md), so bits differ there, values stay within the GPU's bound.
* ``mul.f32`` whose only use is a following ``add.f32``/``sub.f32`` of the same basic block is run as one FMA, as
  ptxas contracts it (../shared/EMULATOR.md: the H200 fused such pairs in 100 % of elements); ptxas's own rule
  is not documented, so a pair it leaves unfused (or fuses across blocks) differs by one rounding.  This NVRTC
  (13.5) leaves no such pair in the PTX of lessons 06, 07, 08 (both steps) and 11: NVVM contracts them itself.
  ``launch(contract=False)`` runs the PTX as written.
* cp.async reads its global source when issued, not when the copy lands (a source written in between differs).
* Shared-memory races: ``bar.warp.sync`` orders same-warp pairs by a per-lane count of the syncs each lane took
  part in (exact for full-mask ``__syncwarp()``, approximate for partial masks); the readers of a granule in one
  epoch are summarised as (a reader, several readers?, several warps?, the latest warp-sync count).
* ``fma.rn.f64`` is TwoProd + TwoSum: correctly rounded except in rare cancellations (one ulp).
* NaN results of float arithmetic are the canonical 0x7fffffff / 0x7ff8...; NaN payloads are not propagated.
* ``min``/``max`` of -0.0 and +0.0 order -0.0 below +0.0.
* Integer division by zero gives all ones (quotient) and the dividend (remainder); PTX leaves it undefined.
* Atomics on one address run in lane order (block by block, lower thread first); float atomic sums can round
  differently from the GPU's (unspecified) order.
* Lockstep within a chunk: a kernel whose result depends on a schedule (spin-waiting on another thread of the
  block, inter-block communication beyond atomics) ends in a ``timeout`` or a different value, never silently.
* Races: shared memory per granule between barriers (atomics excepted); global memory write-write races of
  different values only (no read-write races in global memory); an exited thread at a barrier is reported
  although PTX defines it (CUDA does not).
* Uninitialised reads are tracked in shared memory only (not registers, not ``.local``); shared bytes nobody wrote
  read as 0xFF (NaN for floats).
* Registers declared in nested ``{ }`` scopes (inline assembly) share one flat namespace.
* Not implemented (a clean ``unsupported`` finding): ``call`` (printf, non-inlined functions), ``.const`` and
  module-level ``.global`` variables, textures, ``mma``, ``ldmatrix``, ``cp.async.bulk``, f16x2/bf16 arithmetic,
  ``mul24``/``mad24``, named barriers with a thread count, ``%clock``.

Modules: ``ptx`` (reading PTX), ``program`` (instructions -> closures, built when first reached; the opcode
registry), ``ops_*`` (one builder per opcode family), ``rounding`` (exact float rounding), ``memory`` (global arena,
shared memory with shadow state, local memory), ``machine`` (lanes, divergence, barriers, collectives; its
docstring has the execution rule and the cost model), ``findings``.

Speed: about 25-70 thousand instruction issues per second on one core (one issue: one instruction over one
group of lanes; ``benchmarks/emulator_speed.py`` times every graded case of lessons 06, 07, 08 and 11).
"""
from __future__ import annotations

import gc

import numpy as np

from . import ops_async, ops_control, ops_convert, ops_float, ops_integer, ops_memory  # noqa: F401  (builders)
from .errors import Unsupported
from .findings import Finding
from .machine import MAX_ISSUES, Machine, Result
from .ptx import parse

__all__ = ["launch", "forms", "Unsupported", "Finding", "Result"]


def launch(ptx: str, kernel: str, grid, block, args: list, shared_bytes: int = 0, *,
           max_issues: int = MAX_ISSUES, lanes: int | None = None, contract: bool = True) -> Result:
    """Run ``kernel`` of the PTX module ``ptx`` with a grid of ``grid`` blocks of ``block`` threads.

    ``args`` follow the kernel's parameters: NumPy arrays are device buffers (copied in, and after the run
    copied back into the same arrays), numbers are passed as the parameter's PTX type.  ``shared_bytes`` is
    the dynamic shared memory per block; ``lanes`` caps the threads emulated at once (whole blocks; default
    :data:`machine.LANES`); ``contract`` runs a ``mul.f32`` whose only use is the next ``add.f32``/``sub.f32`` as one
    FMA, as ptxas does (``program.contractions``).  Constructs the emulator does not implement give a finding of kind
    ``"unsupported"`` (the run stops there); :class:`Unsupported` never escapes."""
    collecting = gc.isenabled()
    gc.disable()  # the run allocates many short-lived tuples; full collections of the process's heap cost seconds
    try:
        try:
            kernels = _parsed(ptx)
        except Unsupported as e:
            return Result([Finding("unsupported", f"эмулятор не умеет разбирать этот PTX ({e}); эту проверку можно "
                                   "пройти только на GPU")], 0, 0.0)
        if kernel not in kernels:
            raise ValueError(f"no kernel {kernel!r} in the PTX (found: {', '.join(kernels) or 'none'})")
        args = list(args)
        kw = {"contract": contract} if lanes is None else {"lanes": lanes, "contract": contract}
        return Machine(kernels[kernel], grid, block, args, shared_bytes, max_issues=max_issues, **kw).run()
    finally:
        if collecting:
            gc.enable()


_PARSED: dict = {}


def _parsed(ptx: str) -> dict:
    """parse(ptx), kept for the last few modules (a wrapper launches several kernels of one module; nothing
    changes a parsed kernel)."""
    kernels = _PARSED.pop(ptx, None)
    if kernels is None:
        kernels = parse(ptx)
        while len(_PARSED) >= 4:
            _PARSED.pop(next(iter(_PARSED)))
    _PARSED[ptx] = kernels
    return kernels


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
