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


def test_side_by_side_results_follow_the_serial_memo_of_functions_that_did_not_finish():
    """One after another, a check after one whose same objects did not finish is not run (run.py's memo); side by
    side it may have run meanwhile, and even passed (a function that hangs on one check's inputs only)."""
    from autograder.checks.core import CheckResult
    from autograder.isolation.run import hang_rule

    def result(check_id, passed, timed_out=False):
        return CheckResult(check_id, "t", 1, passed, "m", timed_out=timed_out)

    ran = [("lesson02.zeros", "A", 8.0, result("lesson02.zeros", True)),              # before the hang: kept
           ("lesson02.equivalence", "A", 8.0, result("lesson02.equivalence", False, timed_out=True)),
           ("lesson02.zeros", "A", 5.0, result("lesson02.zeros", True)),              # after it: not run
           ("lesson02.add_equivalence", "B", 8.0, result("lesson02.add_equivalence", True)),   # other objects
           ("lesson02.not_mutated", None, 8.0, result("lesson02.not_mutated", False)),        # objects missing
           ("lesson02.zeros", "A", 8.0, result("lesson02.zeros", False, timed_out=True))]     # hung as well
    got = hang_rule(ran)
    assert [r.passed for r in got] == [True, False, False, True, False, False]
    assert got[0] is ran[0][3] and got[1] is ran[1][3] and got[3] is ran[3][3] and got[4] is ran[4][3]
    for later in (got[2], got[5]):
        assert later.message.startswith("Проверка не запускалась: эта же функция уже не завершилась за 8 с")
        assert not later.timed_out and not later.grader_fault
