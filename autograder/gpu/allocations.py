"""What the memory checks read of the device allocations made while a block ran: their sizes, total and largest.

Two classes record them: ``runtime.DeviceAllocations`` on a GPU (CuPy's allocator hook, with guard bytes) and
``emulated_cupy.DeviceAllocations`` on the PTX emulator's stand-in (every array it allocates).
"""
from __future__ import annotations


class AllocationSizes:
    """``sizes``: the bytes of each allocation, in order."""

    sizes: list[int]

    @property
    def total(self) -> int:
        return sum(self.sizes)

    @property
    def largest(self) -> int:
        return max(self.sizes, default=0)
