"""The CPU seconds each test costs, with everything it starts (nbgrader, kernels, bubblewrap's children, check
workers): a pytest plugin for finding what makes the suite slow on CI's two cores, where it is CPU-bound.

    PYTHONPATH=tests PYTEST_ADDOPTS="-p cpu_per_test" make test    # as root, on Linux with cgroup v1's cpuacct

Each process of the run (the xdist workers and the controller) moves itself into a cpuacct group of its own,
``/sys/fs/cgroup/cpuacct/pytest-cpu-<worker>``, which every process it starts inherits; a test's cost is the group's
``cpuacct.usage`` after it less before it (setup, call and teardown: a session fixture counts in the first test that
needs it).  Rows go to ``.pytest_cache/cpu_per_test/<worker>.tsv`` (seconds, test id); at the end the controller
prints the files that cost most and the total.  ``rusage`` cannot stand in: processes in bubblewrap's PID namespace are
not all reaped into the run's accounting.  Where the group cannot be made (not root, no cpuacct), it says so and
measures nothing.
"""
from __future__ import annotations

import collections
import os
from pathlib import Path

import pytest

CPUACCT = Path("/sys/fs/cgroup/cpuacct")
_state: dict = {}


def _usage() -> float:
    return int((_state["group"] / "cpuacct.usage").read_text()) / 1e9


def _folder(config) -> Path:
    return Path(config.rootpath) / ".pytest_cache" / "cpu_per_test"


def pytest_configure(config):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    group = CPUACCT / f"pytest-cpu-{worker}"
    try:
        group.mkdir(exist_ok=True)
        (group / "cgroup.procs").write_text(str(os.getpid()))
        (group / "cpuacct.usage").write_text("0")  # this run's alone
    except OSError as error:
        _state["error"] = f"cpu_per_test: no cpuacct group ({error}); nothing measured"
        return
    folder = _folder(config)
    folder.mkdir(parents=True, exist_ok=True)
    if worker == "main":  # the controller starts before its workers
        for old in folder.glob("*.tsv"):
            old.unlink()
    _state.update(group=group, out=open(folder / f"{worker}.tsv", "w", encoding="utf-8"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if "group" not in _state:
        yield
        return
    before = _usage()
    yield
    _state["out"].write(f"{_usage() - before:.2f}\t{item.nodeid}\n")
    _state["out"].flush()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if "error" in _state:
        terminalreporter.write_line(_state["error"])
        return
    by_file: dict[str, float] = collections.Counter()
    for table in _folder(config).glob("*.tsv"):
        for line in table.read_text(encoding="utf-8").splitlines():
            seconds, nodeid = line.split("\t", 1)
            by_file[nodeid.split("::", 1)[0]] += float(seconds)
    groups = [CPUACCT / f"pytest-cpu-{table.stem}" for table in _folder(config).glob("*.tsv")]  # this run's
    total = sum(int((g / "cpuacct.usage").read_text()) for g in groups) / 1e9
    terminalreporter.section("CPU seconds per test file (tests/cpu_per_test.py)")
    for name, seconds in sorted(by_file.items(), key=lambda item: -item[1])[:20]:
        terminalreporter.write_line(f"{seconds:8.1f}  {name}")
    terminalreporter.write_line(f"{sum(by_file.values()):8.1f}  in tests; {total:.1f} in all (collection and "
                                f"start-up of the workers too)")
