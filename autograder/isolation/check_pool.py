"""A notebook's checks side by side: at most N at once, a timed check alone.

Every check already runs in a worker of its own, from the objects its test cell exported, so two checks of one
notebook share nothing but the machine.  :class:`CheckPool` lets the grader start a check and go on with the
notebook's next cells while it runs (``IsolatedExecute.parallel_checks``; issue 30: one student's GPU lessons
took 205-215 s on the H200, nearly all of it in checks one after another).  What the machine's sharing could
change is kept out:

* a check graded by its kernel's time (``timed``) starts only when every check started before it has finished,
  and nothing else starts until it has: it runs alone, as one after another would run it (the notebook's next
  cell waits too);
* a check's own time limit starts when its worker does, not while it waits for a place in the pool;
* one after another, a check after one whose same objects did not finish in time is not run at all (run.py's
  memo); side by side it may have run meanwhile, so IsolatedExecute passes the results through
  :func:`autograder.isolation.run.hang_rule` in the notebook's order before writing them.

With one place (the default) every check runs at once, in the caller's thread: grading as before.
"""
from __future__ import annotations

import concurrent.futures
from typing import Callable, TypeVar

T = TypeVar("T")


class CheckPool:
    def __init__(self, places: int):
        if places < 1:
            raise ValueError(f"parallel_checks = {places}: нужно хотя бы 1 (1 — проверки по одной)")
        self.places = places
        self._executor = concurrent.futures.ThreadPoolExecutor(places, thread_name_prefix="check") if places > 1 else None
        self._running: list[concurrent.futures.Future] = []

    def submit(self, run: Callable[[], T], *, timed: bool = False) -> "concurrent.futures.Future[T]":
        """Start ``run`` (one check: it starts and waits for its worker); its future holds what it returns."""
        if self._executor is None or timed:
            self.wait()
            return _done(run)
        future = self._executor.submit(run)
        self._running.append(future)
        return future

    def wait(self) -> None:
        """Until every check started so far has finished (what they raised stays in their futures)."""
        concurrent.futures.wait(self._running)
        self._running.clear()

    def close(self) -> None:
        """Checks not started yet are dropped; those running finish (each within its own time limit)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
        self._running.clear()


def _done(run: Callable[[], T]) -> "concurrent.futures.Future[T]":
    future: concurrent.futures.Future = concurrent.futures.Future()
    try:
        future.set_result(run())
    except Exception as error:  # noqa: BLE001 - kept in the future, raised where its result is read
        future.set_exception(error)
    return future
