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

RIGHT_AFTER_A_WAIT = student("def fused_rms_norm(x, w, eps=1e-6):\n    import time\n    time.sleep(2.5)\n"
                             "    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w\n")
ENDLESS_LOOP = student("def fused_rms_norm(x, w, eps=1e-6):\n    while True:\n        pass\n")
SLEEPS_FOREVER = student("def fused_rms_norm(x, w, eps=1e-6):\n    import time\n    time.sleep(600)\n")
LIMIT_S = 1.0


@pytest.fixture(autouse=True)
def _forget_hangs():
    yield
    isolation._HUNG.clear()


def check(function, fork: bool | None):
    start = time.monotonic()
    result = run_check("lesson02.equivalence", [cloudpickle.dumps(function)], timeout_s=LIMIT_S, fork=fork)
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
    monkeypatch.setattr(cpu_time, "overloaded", lambda: True)
    result, took = check(RIGHT_AFTER_A_WAIT, fork)
    assert "не завершилась" not in result.message, result.message
    assert result.passed, result.message
    assert 2.5 <= took < OVERLOADED_WALL_LIMITS * LIMIT_S + 2


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
