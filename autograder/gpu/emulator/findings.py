"""What the emulator reports: a :class:`Finding` per fault, with where it happened.

The text of a finding is for the student, so it is Russian; kinds are stable English identifiers a check can
branch on.  Kinds:

* ``unsupported`` — an opcode or form the emulator does not implement (the run stops: the check needs a GPU);
* ``global_oob`` / ``shared_oob`` / ``local_oob`` — an access outside the allocation it points into (run stops);
* ``misaligned`` — an address not a multiple of the access size (run stops, as on the GPU);
* ``race`` — two threads of one block touch one shared byte between two barriers, at least one writes;
* ``warp_race`` — the same, both threads of one warp, with no ``__syncwarp()`` between the accesses;
* ``global_race`` — two threads write different values to one global address without an atomic;
* ``cp_async_pending`` — a read of shared bytes a ``cp.async`` has not delivered yet (no wait before it);
* ``uninitialized_shared`` — a read of shared memory no thread wrote (the GPU holds garbage there);
* ``divergent_barrier`` — threads of one block wait at different ``__syncthreads()``;
* ``barrier_after_exit`` — ``__syncthreads()`` waited for by some threads while others of the block returned;
* ``partial_warp_collective`` — a warp-wide operation (``__shfl_sync``, ``__ballot_sync``, ``__syncwarp``) not
  reached by every lane of its mask, a shuffle reading a lane that does not take part, or ``mma.sync`` /
  ``ldmatrix`` executed by a warp with lanes missing, ``wgmma`` by a warpgroup with threads missing;
* ``wgmma_operand`` — a wgmma whose descriptor or scale-d predicate differs between threads of one warpgroup;
* ``timeout`` — the kernel did not finish within the instruction budget (an endless loop?).
"""
from __future__ import annotations

import dataclasses

#: Kinds after which the run stops (as the GPU stops a kernel at an illegal address).
FATAL = {"unsupported", "global_oob", "shared_oob", "local_oob", "misaligned", "timeout"}


@dataclasses.dataclass
class Finding:
    kind: str
    message: str  # Russian, for the student
    block: tuple | None = None  # (x, y, z) of blockIdx
    thread: tuple | None = None  # (x, y, z) of threadIdx
    instruction: str | None = None  # the PTX statement
    line: int | None = None  # CUDA source line
    count: int = 1  # how many times the emulator met this fault at this instruction

    def __str__(self) -> str:
        where = []
        if self.block is not None:
            where.append(f"блок {self.block}")
        if self.thread is not None:
            where.append(f"поток {self.thread}")
        if self.line is not None:
            where.append(f"строка {self.line}")
        text = self.message
        if where:
            text += " (" + ", ".join(where) + ")"
        if self.instruction:
            text += f"; инструкция PTX: {self.instruction}"
        if self.count > 1:
            text += f"; повторов: {self.count}"
        return text


def plural_bytes(n: int) -> str:
    return f"{n} Б"
