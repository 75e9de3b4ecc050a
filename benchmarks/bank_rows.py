"""A bank benchmark's JSON when only some entries were run again (``--entries``): their new rows merged into the
committed file's, in bank order, the file's own date, machine and command kept and the rerun noted.

Used by benchmarks/gpu_banks_without_gpu.py and benchmarks/emulator_bounds_banks.py.
"""
from __future__ import annotations

import datetime


def merged(previous: dict, rows: list[dict], ran: set[tuple[str, str]], *, only_entries: bool,
           bank_order: list[tuple[str, str]], run: dict, machine: str, command: str) -> dict:
    """The report to write: ``rows`` (of the entries in ``ran``) with the rows of ``previous`` that were not run
    again (every other lesson's; with ``only_entries``, also the same lessons' other entries), sorted by
    ``bank_order``.  ``run`` is this run's date/machine/command (and the like): where only some entries ran, the
    previous file's values stay and a dated line is added to its ``rerun`` note."""
    lessons = {lesson for lesson, _ in ran}
    kept = [r for r in previous.get("rows", []) if (r["lesson"], r["entry"]) not in ran
            and (only_entries or r["lesson"] not in lessons)]
    order = {key: i for i, key in enumerate(bank_order)}
    rows = sorted(kept + rows, key=lambda r: order.get((r["lesson"], r["entry"]), len(order)))
    report = {k: previous.get(k, v) for k, v in run.items()} if only_entries else dict(run)
    report.update(entries=len(rows), agree=sum(1 for r in rows if r.get("agrees")), rows=rows)
    rerun = previous.get("rerun", "")  # notes on rows graded again (date, what changed): kept with the rows
    if only_entries:
        today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
        rerun = (rerun + "  " if rerun else "") + f"{today}: {len(ran)} entries graded again ({machine}): `{command}`."
    if rerun:
        report["rerun"] = rerun
    return report
