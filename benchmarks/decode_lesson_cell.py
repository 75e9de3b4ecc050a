"""Lesson 11's data cell BENCH_DECODE_H200 from a run of benchmarks/decode_kernels.py, as the lesson quotes it.

    python benchmarks/decode_lesson_cell.py [benchmarks/results/decode_kernels_h200.json]

Prints the cell's assignment (numbers to 3 significant digits): paste it over the one in lessons/11_flash_decoding.py
after a new run (the student's package has no benchmarks/ folder, so the figures live in the notebook), then
`make release`. tests/test_lesson11_flash_decoding.py checks that the lesson's cell is this script's output for the
committed JSON.
"""
from __future__ import annotations

import json
import pprint
import sys
from math import floor, log10
from pathlib import Path

DEFAULT = Path(__file__).resolve().parent / "results" / "decode_kernels_h200.json"
#: The keys of a row the lesson reads (section 4's tables).
ROW_KEYS = ("B", "L", "kv_bytes", "num_splits", "kernel_share", "gather_sdpa_fp32_x_floor", "sdpa_contiguous_fp32_share",
            "gather_sdpa_bf16_x_floor", "sdpa_contiguous_bf16_share", "speedup_vs_gather_sdpa_fp32")


def significant(x, digits: int = 3):
    """A float to ``digits`` significant digits; anything else as it is."""
    if isinstance(x, float) and x != 0:
        return round(x, digits - 1 - int(floor(log10(abs(x)))))
    return x


def cell_text(measured: dict) -> str:
    cell = {key: measured[key] for key in ("device", "sm_count", "date", "command", "versions")}
    cell["copy_bandwidth_Bps"] = significant(measured["copy_bandwidth_Bps"])
    cell["rows"] = [{key: significant(row[key]) for key in ROW_KEYS if key in row} for row in measured["rows"]]
    cell["splits_sweep"] = [{"L": r["L"], "num_splits": r["num_splits"], "share": significant(r["share"])}
                            for r in measured["splits_sweep"]]
    return "BENCH_DECODE_H200 = " + pprint.pformat(cell, sort_dicts=False, width=120)


if __name__ == "__main__":
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    print(cell_text(json.loads(path.read_text(encoding="utf-8"))))
