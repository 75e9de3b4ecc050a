"""Lesson 11's reference kernel with each split's block-table slice read once into shared memory.

A candidate for issue 30 (lesson 11 at >= 90 % of copy at B=1, L=32k and >= 70 % at B=1, L=8k). Measure it
beside the lesson's reference (results/decode_kernels_h200.txt says why the goals are short):

    python benchmarks/decode_kernels.py --no-torch --source benchmarks/decode_variant_pagetable.py --out $OUT/pagetable.json

Why: as a CUDA graph the lesson's kernels take 12 us for 8 MB and 25 us for 67 MB (B=1), so about 10 us of the
GPU's time is a latency chain. In the lesson's kernel each run's K/V loads wait on a load of the block table
(``row_table[t / page_size]``), two dependent DRAM round trips per run of tokens. Here the block's threads load
the split's pages ``[p0, p1)`` of the table into shared memory together once (at most ``TABLE_SLOTS`` of them;
pages past that are read from the table as before), and a run's loads wait on nothing but themselves. The slice
lives in the shared memory the cross-warp merge uses at the end (a barrier between the two), so the kernel's
shared memory and its blocks per SM are the lesson's.

Made from the solution notebook's DECODE_SRC by the named edits below (each must apply once); the wrapper is the
lesson's own. ``with_last_block=True`` (``decode_variant_pagetable_lastblock.py``) adds the last-block merge of
decode_variant_lastblock.py: one launch. tests/test_lesson11_flash_decoding.py runs both on the PTX emulator.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import cupy as cp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import decode_variant_lastblock as lastblock  # noqa: E402 - the solution's cells and the last-block edits

#: Pages of a split's block-table slice kept in shared memory (2 KiB; SMEM_FLOATS is 4160 floats).
TABLE_SLOTS = 512

#: (old, new): each applied exactly once to the solution's DECODE_SRC.
EDITS = (
    ("#define SMEM_FLOATS (WARPS * 8 * (128 + 2))   // the cross-warp merge of the largest instantiation\n",
     "#define SMEM_FLOATS (WARPS * 8 * (128 + 2))   // the cross-warp merge of the largest instantiation\n"
     "#ifndef TABLE_SLOTS\n#define TABLE_SLOTS 512   // pages of a split's block-table slice in shared memory\n#endif\n"),
    ("                                         const int* __restrict__ row_table, int base, int t1, int page_size,",
     "                                         const int* __restrict__ row_table, const int* sm_pages, int p0,\n"
     "                                         int base, int t1, int page_size,"),
    ("            const int page = row_table[t / page_size];",
     "            const int slot = t / page_size - p0;   // the split's slice in shared memory, if it fits\n"
     "            const int page = slot < TABLE_SLOTS ? sm_pages[slot] : row_table[t / page_size];"),
    ("    const int* row_table = table + (size_t)b * max_pages;\n",
     "    const int* row_table = table + (size_t)b * max_pages;\n"
     "    // the split's pages of the block table, read once by the whole block (the merge reuses this memory)\n"
     "    int* sm_pages = reinterpret_cast<int*>(smem);\n"
     "    for (int i = threadIdx.x; i < min(p1 - p0, TABLE_SLOTS); i += blockDim.x) sm_pages[i] = row_table[p0 + i];\n"
     "    __syncthreads();\n"),
    ("row_table, base, t1, page_size, Hkv, kvh, lane);",
     "row_table, sm_pages, p0, base, t1, page_size, Hkv, kvh, lane);"),
    ("row_table, base + step, t1, page_size, Hkv, kvh, lane);",
     "row_table, sm_pages, p0, base + step, t1, page_size, Hkv, kvh, lane);"),
    ("row_table, base + 2 * step, t1, page_size, Hkv, kvh, lane);",
     "row_table, sm_pages, p0, base + 2 * step, t1, page_size, Hkv, kvh, lane);"),
    ("#pragma unroll\n    for (int g = 0; g < GT; ++g) {\n        if (lane == 0) { sm_m[warp][g] = m[g];",
     "    __syncthreads();   // every warp is done with the block-table slice: the merge overwrites it\n"
     "#pragma unroll\n    for (int g = 0; g < GT; ++g) {\n        if (lane == 0) { sm_m[warp][g] = m[g];"),
)


def edited(source: str, *, table_slots: int = TABLE_SLOTS, with_last_block: bool = False) -> str:
    """The solution's DECODE_SRC with the slice in shared memory (``table_slots`` pages of it), and with the
    last-block merge where asked (then without the combine kernel)."""
    for old, new in EDITS:
        if source.count(old) != 1:
            raise ValueError(f"the lesson's DECODE_SRC changed: {old[:60]!r} is there {source.count(old)} times")
        source = source.replace(old, new)
    source = f"#define TABLE_SLOTS {int(table_slots)}\n" + source
    return lastblock._edited(source) if with_last_block else source


DECODE_SRC = edited(lastblock.SOLUTION_SRC)
_namespace = {"cp": cp, "np": np, "math": math, "DECODE_SRC": DECODE_SRC}
exec(lastblock._solution_cells()["paged_decode_gpu"], _namespace)   # the lesson's wrapper, on this DECODE_SRC
choose_splits = _namespace["choose_splits"]
paged_decode_gpu = _namespace["paged_decode_gpu"]
