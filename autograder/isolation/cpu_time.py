"""The CPU time a check's worker has had, for its time limit on a machine running more than it has cores.

A check's limit (``Check.timeout_s``) is wall-clock time: right on a machine with a core for each
worker, wrong on one that runs more (a class graded with more workers than cores, a loaded CI
runner), where a correct check can wait past its limit for a core and score 0.  So when the limit
passes while the machine is overloaded, the grader waits on for as long as the worker has had less
CPU time than the limit (:func:`autograder.isolation.run.wait_for_worker`); an endless loop still
uses its CPU time and fails as before.  Both are read from ``/proc`` and ``os.getloadavg``: Linux,
which the sandbox needs anyway.
"""
from __future__ import annotations

import os

_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


def tree_seconds(root: int) -> float:
    """CPU seconds (user and system) of process ``root`` and of every live descendant, the children they
    have reaped included; 0.0 for a process that is gone."""
    parents, ticks = {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:  # ended while we looked
            continue
        fields = stat[stat.rindex(b")") + 2:].split()  # after "pid (comm) ": state ppid ... (proc(5))
        parents[int(name)] = int(fields[1])
        ticks[int(name)] = sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += ticks.get(pid, 0)
        stack += children.get(pid, [])
    return total / _TICKS_PER_SECOND


def overloaded() -> bool:
    """Did the machine have more runnable work than this process's cores over the last minute?"""
    return os.getloadavg()[0] > len(os.sched_getaffinity(0))
