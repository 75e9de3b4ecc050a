"""A check's time limit on a machine running more than it has cores (autograder/isolation/cpu_time.py).

The limit is wall-clock time, but where it passes while the machine is overloaded the grader waits on for as
long as the worker has had less CPU time than the limit: a correct check that waited for a core passes, an
endless loop still fails, and on a machine that is not overloaded nothing changes.
"""
import subprocess
import sys
import time

import cloudpickle
import pytest

from autograder.isolation import cpu_time
from autograder.isolation import run as isolation
from autograder.isolation.run import OVERLOADED_WALL_LIMITS, run_check
from helpers import student

def right_after(seconds: float):
    return student(f"def fused_rms_norm(x, w, eps=1e-6):\n    import time\n    time.sleep({seconds})\n"
                   "    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w\n")


RIGHT_AFTER_A_WAIT = right_after(2.5)
ENDLESS_LOOP = student("def fused_rms_norm(x, w, eps=1e-6):\n    while True:\n        pass\n")
SLEEPS_FOREVER = student("def fused_rms_norm(x, w, eps=1e-6):\n    import time\n    time.sleep(600)\n")
LIMIT_S = 1.0
read = isolation.startup_cpu


@pytest.fixture(autouse=True)
def _forget_hangs():
    yield
    isolation._HUNG.clear()


def check(function, fork: bool | None, limit_s: float = LIMIT_S):
    start = time.monotonic()
    result = run_check("lesson02.equivalence", [cloudpickle.dumps(function)], timeout_s=limit_s, fork=fork)
    return result, time.monotonic() - start


def test_cpu_time_of_a_process_tree_counts_its_grandchildren():
    spinner = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'while True: pass'])"
    process = subprocess.Popen([sys.executable, "-c", spinner], start_new_session=True)
    try:
        time.sleep(2.0)
        first = cpu_time.tree_seconds(process.pid)
        time.sleep(1.0)
        second = cpu_time.tree_seconds(process.pid)
    finally:
        subprocess.run(["pkill", "-KILL", "-s", str(process.pid)])
        process.wait()
    assert first > 0.2 and second > first
    assert cpu_time.tree_seconds(process.pid) == 0.0  # gone


@pytest.mark.parametrize("fork", [None, False], ids=["forked", "new worker"])
def test_on_an_overloaded_machine_a_check_that_waited_past_its_limit_is_graded(monkeypatch, fork):
    """Waits 2.5 limits (of 2 s: a new worker's start on a loaded CI machine takes seconds of the 4 limits' wall)."""
    monkeypatch.setattr(cpu_time, "overloaded", lambda: True)
    signed = []
    monkeypatch.setattr(isolation, "startup_cpu", lambda *a: signed.append(read(*a)) or signed[-1])
    result, took = check(right_after(5.0), fork, limit_s=2.0)
    assert "не завершилась" not in result.message, result.message
    assert result.passed, result.message
    assert 5.0 <= took < OVERLOADED_WALL_LIMITS * 2.0 + 2
    assert signed and signed[-1] >= (0.1 if fork is False else 0.0), signed  # a new worker imports numpy


BURNS_THEN_SLEEPS = ("import sys, time\nend = time.process_time() + 1.5\nwhile time.process_time() < end:\n    pass\n"
                     "sys.stdin.read()\ntime.sleep(1.0)\n")


@pytest.mark.parametrize("signed_startup_s, graded", [(1.5, True), (0.0, False)], ids=["counted off", "none signed"])
def test_on_an_overloaded_machine_the_workers_start_up_is_not_the_checks_cpu_time(monkeypatch, signed_startup_s,
                                                                                   graded):
    """A worker that spent 1.5 s of CPU starting (more than the 1 s limit; a new worker with CuPy can) and then
    waits: the start-up it signed is not counted, so it is not taken for an endless loop."""
    monkeypatch.setattr(cpu_time, "overloaded", lambda: True)
    monkeypatch.setattr(isolation, "OVERLOADED_WALL_LIMITS", 30)  # the CPU allowance is tested, not the wall cap
    process = subprocess.Popen([sys.executable, "-c", BURNS_THEN_SLEEPS], stdin=subprocess.PIPE,
                               start_new_session=True)
    try:
        if graded:
            isolation.wait_for_worker(process, b"", LIMIT_S, lambda: signed_startup_s)
        else:
            with pytest.raises(subprocess.TimeoutExpired):
                isolation.wait_for_worker(process, b"", LIMIT_S, lambda: signed_startup_s)
    finally:
        process.kill()
        process.wait()


def test_only_the_first_signed_start_up_line_counts():
    token, other = "a" * 32, "b" * 32
    head = (f"\n{token} stage request\n{other} stage cpu 99\n{token} stage cpu 0.625\n{token} started\n"
            f"{token} stage cpu 50\n").encode()
    assert isolation.startup_cpu(head, token) == 0.625
    assert isolation.startup_cpu(head[:head.index(b"0.625")], token) == 0.0  # not written yet



@pytest.mark.parametrize("fork", [None, False], ids=["forked", "new worker"])
def test_on_an_overloaded_machine_an_endless_loop_still_fails_when_it_had_its_cpu_time(monkeypatch, fork):
    monkeypatch.setattr(cpu_time, "overloaded", lambda: True)
    result, took = check(ENDLESS_LOOP, fork)
    assert not result.passed and f"не завершилась за {LIMIT_S:g} с" in result.message
    assert took < OVERLOADED_WALL_LIMITS * LIMIT_S + 2


def test_on_an_overloaded_machine_a_worker_that_never_ends_fails_at_the_last_limit(monkeypatch):
    monkeypatch.setattr(cpu_time, "overloaded", lambda: True)
    result, took = check(SLEEPS_FOREVER, None)
    assert not result.passed and f"не завершилась за {LIMIT_S:g} с" in result.message
    assert OVERLOADED_WALL_LIMITS * LIMIT_S - 0.5 <= took < OVERLOADED_WALL_LIMITS * LIMIT_S + 2


@pytest.mark.parametrize("fork", [None, False], ids=["forked", "new worker"])
def test_on_a_machine_with_cores_to_spare_the_limit_is_wall_clock_time(monkeypatch, fork):
    monkeypatch.setattr(cpu_time, "overloaded", lambda: False)
    result, took = check(RIGHT_AFTER_A_WAIT, fork)
    assert not result.passed and f"не завершилась за {LIMIT_S:g} с" in result.message
    assert took < 2.5
