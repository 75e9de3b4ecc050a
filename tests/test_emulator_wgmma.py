"""The emulator's wgmma model (autograder/gpu/emulator/ops_wgmma.py): descriptors, swizzled layouts and fragments,
each against the formula written out by hand. The kernels that use it: tests/test_tc_wgmma.py."""
import numpy as np
import pytest

from autograder.gpu.emulator.errors import Unsupported
from autograder.gpu.emulator.ops_wgmma import a_layout, chunk_addresses, d_layout, descriptor_fields

P = 3 * 1024  # a 1024-byte-aligned panel


def descriptor(address, leading, stride, swizzle=1, base=0):
    return ((address & 0x3FFFF) >> 4) | ((leading >> 4) << 16) | ((stride >> 4) << 32) | (base << 49) | (swizzle << 62)


def test_descriptor_fields_read_back_what_was_packed():
    assert descriptor_fields(descriptor(P + 32, 16, 1024)) == (P + 32, 16, 1024, 0, 1)
    assert descriptor_fields(descriptor(0x3FFF0, 0x3FFF0, 0x10, swizzle=3, base=5)) == (0x3FFF0, 0x3FFF0, 0x10, 5, 3)


@pytest.mark.parametrize("k_step", [0, 1, 2, 3])
def test_k_major_128_byte_swizzle(k_step):
    got = chunk_addresses(descriptor(P + 32 * k_step, 16, 1024), 64, k_major=True)
    for r in range(64):
        for j in range(2):  # k = 8j .. 8j + 7 of this k-step: chunk 2 k_step + j of the 128-byte row
            assert got[r, j] == P + (r // 8) * 1024 + (r % 8) * 128 + (((2 * k_step + j) ^ (r % 8)) << 4)


def test_mn_major_128_byte_swizzle():
    lbo = 64 * 128  # the next 64 columns: the next panel of 64 rows of K
    got = chunk_addresses(descriptor(P, lbo, 1024), 128, k_major=False)
    for k in range(16):
        for j in range(16):  # columns 8j .. 8j + 7
            assert got[k, j] == P + (j // 8) * lbo + (k // 8) * 1024 + (k % 8) * 128 + (((j % 8) ^ (k % 8)) << 4)


def test_k_major_without_swizzle_uses_both_offsets():
    got = chunk_addresses(descriptor(P, 2048, 128, swizzle=0), 16, k_major=True)
    for r in range(16):
        for j in range(2):
            assert got[r, j] == P + (r % 8) * 16 + (r // 8) * 128 + j * 2048


def test_a_base_offset_is_not_emulated():
    with pytest.raises(Unsupported):
        chunk_addresses(descriptor(P, 16, 1024, base=1), 64, k_major=True)


def test_the_accumulator_fragment_covers_the_tile_once():
    layout = d_layout(128)  # (64 registers, 128 lanes, 2)
    cells = layout.reshape(-1, 2)
    assert len({tuple(c) for c in cells}) == 64 * 128 == len(cells)
    assert tuple(layout[0, 0]) == (0, 0)
    assert tuple(layout[3, 5]) == (8 + 1, 2 * 1 + 1)        # lane 5: g = 1, t = 1; register 3: row + 8, odd column
    assert tuple(layout[4, 32]) == (16, 8)                  # warp 1's first row; register 4: the next 8 columns


def test_the_a_fragment_is_mma_m16n8k16s_per_warp():
    layout = a_layout()  # (4 registers, 2 halves, 128 lanes, 2)
    cells = layout.reshape(-1, 2)
    assert len({tuple(c) for c in cells}) == 64 * 16 == len(cells)
    assert tuple(layout[1, 0, 0]) == (8, 0) and tuple(layout[2, 1, 0]) == (0, 9)
    assert tuple(layout[0, 0, 96 + 7]) == (48 + 1, 6)       # warp 3, g = 1, t = 3
