"""A PTX emulator: runs a kernel's PTX (as NVRTC writes it, see :func:`autograder.gpu.nvrtc.ptx`) on the CPU,
all threads of a chunk of blocks at once as NumPy lanes, and reports what a GPU would leave undefined or fault
on: out-of-bounds and misaligned accesses, shared-memory races between barriers, reads of uninitialised shared
memory, divergent barriers and warp collectives, instructions it cannot emulate.

    result = launch(ptx, "row_sums", grid=(T,), block=(256,), args=[x, out, np.int32(T), np.int32(D)])
    result.ok, result.findings, result.issued

Where the emulator can differ from a GPU (each is a place a later session may tighten):

* Approximate instructions (ex2/lg2/rsqrt/tanh/sqrt.approx/rcp.approx.f32/div.full) are computed in float64 and
  rounded once: a GPU is 1-2 ulp off on part of the inputs (ex2.approx.f32: 49 % exact, rsqrt 78 %, measured on
  the H200 in ../shared/EMULATOR.md), so bits differ there, values stay within the GPU's bound.  Modelled on the
  H200 (docs/emulator-golden.md), so zeros, signs and specials are its own: ``sin``/``cos.approx.f32`` (its
  range reduction and 25-bit fixed-point turn; values within 1.8e-7 of its own), ``div.approx.f32`` (a times
  the flushed reciprocal: 0 or NaN for |b| > 2^126), ``rcp.approx.ftz.f64`` (the high word's reciprocal,
  truncated to the high word: 487 of 512 golden elements bit-equal, the rest one high-word unit off).
  ``ex2.approx.f16`` follows the H200's rounding (a float32 result cut to f16 toward zero, infinity past the
  largest f16): 511 of the 512 golden elements bit-equal, the other 1 ulp off (tolerance: 2 ulp).
* ``mma.sync`` with f32 accumulation reproduces the H200's tensor cores: exact products, each product's exponent
  taken as the sum of its operands', every product and C truncated toward zero at 2^(emax - 25), an exact sum,
  truncated to f32 (``ops_tensor.accumulate_f32``): all 10 240 golden elements of the five f32 forms (m16n8k8
  and m16n8k16, f16/bf16/tf32) bit-equal, so the golden test holds them bit-equal.  Other GPUs (sm_75, sm_80,
  sm_86/89) are not measured and may truncate elsewhere (the lessons' tolerances allow for it); the exponent of a
  subnormal input is its true one (not measured either).  f16 accumulation is the exact sum rounded once (all
  2048 golden halves bit-equal); tf32 operands drop their low 13 bits, as the H200 does.
* ``mma.sync`` and ``ldmatrix`` need the whole warp: a warp that executes one with lanes missing (returned, or a
  block that is not whole warps) is a ``partial_warp_collective`` finding and its result is what the missing
  lanes' registers held (ldmatrix: a missing lane's row reads as 0).  ldmatrix rows are the address-giving lanes'
  16-byte shared loads (bounds, 16-byte alignment, races and uninitialised bytes as for any shared load).
* ``mul.f32`` whose only use is a following ``add.f32``/``sub.f32`` of the same basic block is run as one FMA, as
  ptxas contracts it (the H200 fused such pairs in 100 % of elements: ../shared/EMULATOR.md, and all 512 of the
  golden pair, an inline-asm block whose product sits in a scoped register); ptxas's own rule is not documented,
  so a pair it leaves unfused (or fuses across blocks) differs by one rounding.  This NVRTC (13.5) leaves no such
  pair in the PTX of lessons 06, 07, 08 (both steps), 09 and 11: NVVM contracts them itself.
  ``launch(contract=False)`` runs the PTX as written.  f16/bf16 ``mul`` + ``add`` pairs are always run as written.
* cp.async reads its global source when issued, not when the copy lands (a source written in between differs).
* Shared-memory races: ``bar.warp.sync`` orders same-warp pairs by a per-lane count of the syncs each lane took
  part in (exact for full-mask ``__syncwarp()``, approximate for partial masks); the readers of a granule in one
  epoch are summarised as (a reader, several readers?, several warps?, the latest warp-sync count).
* f32 and f64 add/sub/mul/fma and div.rn/rz/rm/rp (and rcp/sqrt.f32 in those modes) are correctly rounded, as
  on the H200 (overflow to the largest finite value where the mode rounds towards it, -0.0 for an exact zero sum
  under rm); f64 add/mul/fma lanes near a rounding boundary, at under- or overflow or with a zero result are
  rounded one by one in Python integers (slow, but rare).
* f16/bf16 arithmetic and conversions to f16, bf16 and tf32 are rounded once from an exact (or rounded-to-odd)
  float64 value in every mode (``rounding.round_to_format``): bit-equal on every golden element.
* H200 behaviour the PTX ISA does not state, followed: float -> integer NaN is 0 from f32 (and narrower) into at
  most 32 bits, else the sign bit alone (0x80000000 from f64, 0x8000000000000000 into 64 bits; 8- and 16-bit
  results from f64: not measured, the sign bit too); ``.sat`` (every float type) and ``.relu`` give +0 for -0;
  ``testp.normal.f32`` of +-0 is true (f64: not measured, false); 64-bit ``bfe``/``bfi`` use the whole u32
  position and length; ``atom.global.add.f32`` flushes subnormals, shared memory does not (generic addresses:
  not measured, kept).
* NaN results of float arithmetic are the canonical 0x7fffffff / 0x7ff8... (f16, bf16: 0x7fff, for neg and abs
  too, as on the H200); NaN payloads are not propagated.
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
* ``wgmma`` (sm_90a; no lesson uses it, benchmarks/tc_wgmma.cu does): m64nNk16 with f32 accumulation, A from shared
  memory or registers, B from shared memory, run when the whole warpgroup has arrived, its result landing at the
  wait_group that retires it (``ops_wgmma``; bit-equal to the H200 on every golden element of its twelve forms).
* Not implemented (a clean ``unsupported`` finding): ``call`` (printf, non-inlined functions), ``.const`` and
  module-level ``.global`` variables, textures, ``cp.async.bulk``, named barriers with a thread count, ``%clock``;
  ``mma`` shapes and types beyond m16n8k8/m16n8k16 f16/bf16 (m16n8k8 tf32) and m8n8k16 s8/u8 (m16n8k4 tf32,
  m16n8k16/k32 integer, f64, sparse ``.sp``, ``wmma``), ``ldmatrix`` beyond m8n8 .b16, ``stmatrix``; the half
  types' tanh/rcp/sqrt and ``ex2.approx.ftz.bf16`` (not measured), ``cvt`` with ``.satfinite`` or fp8 types,
  ``dp4a``/``dp2a``.

Modules: ``ptx`` (reading PTX), ``program`` (instructions -> closures, built when first reached; the opcode
registry), ``ops_*`` (one builder per opcode family; ``ops_half`` f16/bf16 arithmetic, ``ops_tensor`` mma and
ldmatrix, ``ops_wgmma`` Hopper's warpgroup MMA), ``rounding`` (exact float rounding, the narrow formats), ``memory`` (global arena,
shared memory with shadow state, local memory), ``machine`` (lanes, divergence, barriers, collectives; its
docstring has the execution rule and the cost model), ``fusion`` (straight stretches of f32 arithmetic and shared
loads run a data-flow level at a time: the closures' bits and findings, or a fallback to them), ``findings``.

Speed: about 350-700 thousand instruction issues per second on one quiet core for lesson 08's graded kernel (step
1: its unrolled loops run as fused segments, ``fusion``), 55-165 thousand for its step 2, 15-25 thousand for lesson
09's tensor-core one (half that beside other jobs; one issue: one instruction over one group of lanes;
``benchmarks/emulator_speed.py`` times every graded case of lessons 06, 07, 08, 09 and 11;
``benchmarks/results/emulator_speed.txt``).
"""
from __future__ import annotations

import gc

import numpy as np

from . import (ops_async, ops_control, ops_convert, ops_float, ops_half, ops_integer, ops_memory,  # noqa: F401
               ops_tensor, ops_wgmma)  # (builders)
from .errors import Unsupported
from .findings import Finding
from .machine import MAX_ISSUES, Machine, Result
from .ptx import parse

__all__ = ["launch", "forms", "Unsupported", "Finding", "Result"]


def launch(ptx: str, kernel: str, grid, block, args: list, shared_bytes: int = 0, *,
           max_issues: int = MAX_ISSUES, lanes: int | None = None, contract: bool = True,
           fuse: bool = True) -> Result:
    """Run ``kernel`` of the PTX module ``ptx`` with a grid of ``grid`` blocks of ``block`` threads.

    ``args`` follow the kernel's parameters: NumPy arrays are pointers into device buffers, as CuPy passes them
    (a view points into the array it views, so views of one array share one buffer and a non-contiguous view is
    read in its base's memory order: ``memory.allocation_of``; each buffer is copied in, and after the run copied
    back), numbers are converted to the parameter's PTX type, ``bytes`` are the bytes the driver reads (padded
    with zeros to the parameter's size, or cut to it: how CuPy passes a scalar, ``emulated_cupy.marshalled``).  ``shared_bytes`` is
    the dynamic shared memory per block; ``lanes`` caps the threads emulated at once (whole blocks; default
    :data:`machine.LANES`); ``contract`` runs a ``mul.f32`` whose only use is the next ``add.f32``/``sub.f32`` as one
    FMA, as ptxas does (``program.contractions``); ``fuse`` runs straight stretches of f32 arithmetic and shared
    loads as fused segments (``fusion``: the same results; False only to compare).  Constructs the emulator does not implement give a finding of kind
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
        kw = {"contract": contract, "fuse": fuse} if lanes is None else {"lanes": lanes, "contract": contract,
                                                                         "fuse": fuse}
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
