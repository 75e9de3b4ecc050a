"""autograder/isolation/check_pool.py: a notebook's checks side by side, a timed check alone."""
import threading
import time

import pytest

from autograder.isolation.check_pool import CheckPool


def test_one_place_runs_each_check_at_once_in_the_callers_thread():
    pool = CheckPool(1)
    threads = []
    future = pool.submit(lambda: threads.append(threading.current_thread()) or "verdict")
    assert future.done() and future.result() == "verdict" and threads == [threading.current_thread()]
    failed = pool.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):  # raised where the verdict is read, as the serial grader raised it
        failed.result()
    pool.close()


def test_checks_run_side_by_side_up_to_the_places():
    pool = CheckPool(3)
    meet = threading.Barrier(3, timeout=10)  # broken (an error) unless three checks run at once
    futures = [pool.submit(lambda: meet.wait() is not None) for _ in range(3)]
    pool.wait()
    assert [f.result() for f in futures] == [True] * 3
    pool.close()


def test_a_timed_check_waits_for_the_others_and_runs_alone():
    pool = CheckPool(4)
    running, overlaps, order = set(), [], []
    lock = threading.Lock()

    def check(name, seconds):
        def run():
            with lock:
                running.add(name)
                overlaps.append((name, set(running)))
            time.sleep(seconds)
            with lock:
                running.discard(name)
                order.append(name)
            return name
        return run

    first = [pool.submit(check(f"slow{i}", 0.3)) for i in range(3)]
    timed = pool.submit(check("timed", 0.05), timed=True)
    assert timed.done() and all(f.done() for f in first)  # it started only after them, and has finished
    after = pool.submit(check("after", 0.01))
    pool.wait()
    assert set(order[:3]) == {"slow0", "slow1", "slow2"} and order[3:] == ["timed", "after"]
    assert dict(overlaps)["timed"] == {"timed"}
    assert after.result() == "after"
    pool.close()


def test_close_drops_the_checks_not_started_yet():
    pool = CheckPool(2)
    release = threading.Event()
    started = []
    futures = [pool.submit(lambda i=i: started.append(i) or release.wait(10)) for i in range(5)]
    closing = threading.Thread(target=pool.close)
    closing.start()
    time.sleep(0.3)  # close has dropped the queued three and waits for the two running
    release.set()
    closing.join(10)
    assert sorted(started) == [0, 1]
    assert [f.cancelled() for f in futures] == [False, False, True, True, True]
    assert futures[0].result() is True


def test_places_below_one_are_refused_with_a_message():
    with pytest.raises(ValueError, match="хотя бы 1"):
        CheckPool(0)


def test_a_config_asking_for_no_checks_at_all_is_refused_when_read():
    import traitlets
    from autograder.nbgrader.execute import IsolatedExecute

    assert IsolatedExecute(parallel_checks=4).parallel_checks == 4
    with pytest.raises(traitlets.TraitError, match="parallel_checks = 0: нужно целое число от 1"):
        IsolatedExecute(parallel_checks=0)
