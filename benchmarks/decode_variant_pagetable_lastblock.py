"""Lesson 11's reference kernel with both candidates of issue 30: the split's block-table slice in shared memory
(decode_variant_pagetable.py) and the merge by the last block of each (sequence, KV head), one launch
(decode_variant_lastblock.py). Measure it beside the lesson's reference:

    python benchmarks/decode_kernels.py --no-torch --source benchmarks/decode_variant_pagetable_lastblock.py --out $OUT/both.json
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import decode_variant_lastblock as lastblock  # noqa: E402
import decode_variant_pagetable as pagetable  # noqa: E402

DECODE_SRC = pagetable.edited(lastblock.SOLUTION_SRC, with_last_block=True)
choose_splits = lastblock.choose_splits
paged_decode_gpu = lastblock.make_paged_decode_gpu(DECODE_SRC)
