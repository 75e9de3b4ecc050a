"""Autograde a class at once: N worker processes grade, one process writes the class gradebook.

``nbgrader autograde`` grades one submission after another, and its sqlite gradebook is not
made for several writers.  The design here keeps nbgrader's own code for every step and gives
the class gradebook exactly one writer:

1. The main process lists the submissions to grade (``submitted/<student>/<lesson>/``; without
   ``force`` it skips those already autograded, by nbgrader's own rule), holds a lock file so
   that two runs never write the same course, and copies the class gradebook twice with
   sqlite's backup API (a consistent copy even while someone reads it): ``gradebook.db.backup``
   beside it, and a snapshot for the workers.
2. Each worker process owns a scratch course: the config, the lessons' sources and its own copy
   of the snapshot.  It grades one submission at a time with nbgrader's ``Autograde`` converter
   (what ``nbgrader autograde LESSON --student ID --force`` runs) in that private gradebook.
   Workers take submissions from one queue, so a hanging notebook holds up one worker only.
3. The main process records each graded submission in the class course by running the same
   converter there with the execution steps replaced by :class:`ReplayAutograded`, which hands
   over the worker's executed notebook (after checking that its cells are the ones nbgrader
   just sanitised).  nbgrader then does all it does after execution — SaveAutoGrades (scores
   from the outputs through ``determine_grade``), late penalties, the ``autograded/`` copy — in
   the class gradebook, one submission at a time.  The same outputs scored by the same code:
   the scores are those of a serial run (tests/test_parallel.py checks it), and every merged
   score is read back and compared with the worker's.

The same merge records notebooks autograded on another machine (:func:`merge`): GPU lessons
graded on a GPU machine, or a shard of the class graded elsewhere.
"""
from __future__ import annotations

import collections
import concurrent.futures
import concurrent.futures.process
import contextlib
import copy
import fcntl
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterable

from . import status as status_module
from .status import pending
from .folder import CourseFolder, Submission, find_submissions, require_gradebook, select_lessons, shard
from .folder import load as load_course_folder
from ..isolation.home import build_home_template, use_home_template
from ..nbgrader import submission as submission_module
from .record import (Outcome, Summary, keep_logs, last_error, record_graded, auto_scores, backup_sqlite,
                     changed_verdicts, record, recorded_scores, run_autograde)


LOCK_NAME = ".course-autograde.lock"


_WORKER: dict = {}


def worker_config(course: CourseFolder, home: Path, sandbox: str = "required"):
    """The class course's nbgrader config, pointed at a worker's scratch course in ``home``, grading in
    the OS sandbox as ``sandbox`` says (IsolatedExecute.sandbox).

    Student code there may not write into the class course either: the kernel guard protects
    the scratch course (nbgrader's working folder) by itself, the class course only when told;
    the sandbox hides both.
    """
    config = copy.deepcopy(course.config)
    config.IsolatedExecute.sandbox = sandbox
    config.CourseDirectory.root = str(home)
    config.CourseDirectory.db_url = f"sqlite:///{home / 'gradebook.db'}"
    protected = list(config.IsolatedExecute.get("protected_dirs", []))
    config.IsolatedExecute.protected_dirs = [*protected, str(Path(course.root).resolve())]
    return config


def _start_worker(class_root: str, scratch: str, lessons: list[str], gpus, sandbox: str, home_template: str) -> None:
    """Worker process: its own scratch course with a private copy of the gradebook snapshot.

    It dies with the main process (PR_SET_PDEATHSIG) and then removes the scratch folder, which
    holds a copy of the instructor's sources; Ctrl-C in the terminal is for the main process,
    which stops the workers itself.  Its checks' homes are copies of ``home_template``, which the
    main process built once for all workers in the scratch folder.
    """
    _die_with_parent(signal.SIGTERM)
    signal.signal(signal.SIGINT, lambda *_: None)  # a handler, not SIG_IGN: children get the default
    signal.signal(signal.SIGTERM, lambda *_: _stop_worker(scratch))
    if _parent_gone():
        _stop_worker(scratch)  # the parent died before PR_SET_PDEATHSIG was set
    _use_nbgrader_env()
    use_home_template(home_template)
    if gpus is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpus.get())
    course = load_course_folder(class_root)
    home = Path(scratch) / f"worker-{os.getpid()}"
    _WORKER["home"] = home
    home.mkdir(parents=True)
    log = open(home / "nbgrader.log", "ab", buffering=0)
    os.dup2(log.fileno(), 1)  # nbgrader's log and the kernels' chatter, not the progress bar
    os.dup2(log.fileno(), 2)
    mine = CourseFolder(home, worker_config(course, home, sandbox))
    shutil.copy(Path(scratch) / "gradebook.snapshot.db", home / "gradebook.db")
    for lesson in lessons:
        shutil.copytree(course.source(lesson), mine.source(lesson), dirs_exist_ok=True)
    _WORKER.update(course=course, mine=mine)


def _parent_gone() -> bool:
    return os.getppid() != int(os.environ.get("COURSE_AUTOGRADE_PARENT", os.getppid()))


def _stop_worker(scratch: str) -> None:
    """SIGTERM in a worker: the main process stopped this pool (remove this worker's scratch
    course) or died (remove the whole scratch folder: nobody else will)."""
    if _parent_gone():
        shutil.rmtree(scratch, ignore_errors=True)
    elif _WORKER.get("home") is not None:
        shutil.rmtree(_WORKER["home"], ignore_errors=True)
    os._exit(1)


def _die_with_parent(sig: int) -> None:
    """Linux: deliver ``sig`` to this process when its parent dies (no-op elsewhere)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _grade(sub: Submission) -> tuple[Submission, str, dict | None, str, str]:
    """Worker: autograde one submission in the scratch course; (sub, folder, scores, error, log)."""
    course, mine = _WORKER["course"], _WORKER["mine"]
    linked = submission_module.linked_notebook(course.submitted(sub))  # before anything reads through a link
    if linked:
        return sub, "", None, linked, ""
    for path in submission_module.notebooks_in(course.submitted(sub)):
        invalid = submission_module.is_valid_notebook(path)
        if invalid:
            return sub, "", None, f"{path.name}: {invalid}", ""
    target = mine.submitted(sub)
    shutil.rmtree(target, ignore_errors=True)
    submission_module.copy_without_links(course.submitted(sub), target)  # never through a link
    done = run_autograde(mine.config, sub)
    shutil.rmtree(target, ignore_errors=True)
    folder = str(mine.autograded(sub).parent.parent)
    if not done["success"]:
        return sub, folder, None, last_error(done), done.get("log", "") + done.get("error", "")
    return sub, folder, auto_scores(mine.coursedir().db_url, sub), "", ""


class Stopped(Exception):
    """SIGINT or SIGTERM reached the main process: stop at the next safe point."""


@contextlib.contextmanager
def _stop_on_signals():
    """SIGINT/SIGTERM stop the run; while a submission is being recorded they wait for its end.

    Yields a state dict: set ``state["critical"]`` around a recording; ``state["signal"]`` names
    the signal once one arrived.
    """
    state = {"critical": False, "signal": ""}

    def handler(signum, _frame):
        state["signal"] = signal.Signals(signum).name
        if not state["critical"]:
            raise Stopped(state["signal"])

    if threading.current_thread() is not threading.main_thread():
        yield state
        return
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield state
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextlib.contextmanager
def _critical(state):
    state["critical"] = True
    try:
        yield
    finally:
        state["critical"] = False
    if state["signal"]:
        raise Stopped(state["signal"])


def autograde(folder: Path | str, lessons: Iterable[str] = (), *, workers: int | None = None,
              force: bool = False, students: Iterable[str] = (), only_gpu: bool = False,
              skip_gpu: bool = False, shard_of: tuple[int, int] | None = None,
              gpus: list[str] | None = None, progress: bool = True, sandbox: str = "required") -> Summary:
    """Autograde the chosen submissions of the course in ``folder`` with ``workers`` processes, each
    submission in the OS sandbox (``sandbox``: "required" refuses without bubblewrap, "off" grades
    without it and says so)."""
    from ..nbgrader.execute import SANDBOX_OFF, require_sandbox

    started = time.monotonic()
    require_sandbox(sandbox)  # SandboxMissing (a RuntimeError) before anything is touched
    if sandbox == "off":
        print(SANDBOX_OFF, file=sys.stderr)
    _use_nbgrader_env()
    course = load_course_folder(folder)
    require_gradebook(course)
    chosen = select_lessons(course.lessons(), lessons, only_gpu=only_gpu, skip_gpu=skip_gpu)
    submissions = find_submissions(course, chosen, students)
    if shard_of:
        submissions = shard(submissions, *shard_of)
    outcomes: list[Outcome] = []
    summary = Summary(outcomes, 0, 0.0, 1, sandboxed=sandbox != "off")
    todo: list[Submission] = []
    with _stop_on_signals() as state:
        try:
            with _course_lock(course):
                todo = pending(course, submissions, force)
                summary.skipped = len(submissions) - len(todo)
                summary.workers = max(1, min(workers or len(gpus or []) or _cpus(), len(todo) or 1))
                if todo:
                    _grade_all(course, todo, summary, state, gpus, progress, sandbox)
                summary.anomalies = {o.submission: status_module.anomalies(course, o.submission.lesson,
                                                                          o.submission.student)
                                     for o in outcomes}
        except Stopped as stop:
            summary.stopped = str(stop)
            summary.not_started = len(todo) - len(outcomes)
    outcomes.sort(key=lambda o: (o.submission.lesson, o.submission.student))
    keep_logs(course, outcomes)
    summary.seconds = time.monotonic() - started
    return summary


def _grade_all(course: CourseFolder, todo: list[Submission], summary: Summary, state, gpus, progress,
               sandbox: str = "required") -> None:
    """Grade ``todo`` with a pool of workers; record each result as it comes (one writer).

    At most one submission per worker is in flight, so when a worker dies (the OOM killer, a
    kill) the pool's failure names only running submissions: they are graded again in a new
    pool, and one that breaks the pool twice is reported as not graded.  Nothing else fails.
    """
    backup_sqlite(course.db_path, course.db_path.with_name(course.db_path.name + ".backup"))
    _remove_stale_scratch()
    scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX))
    (scratch / "owner.pid").write_text(str(os.getpid()))
    _start_reaper(scratch)
    os.environ["COURSE_AUTOGRADE_PARENT"] = str(os.getpid())
    backup_sqlite(course.db_path, scratch / "gradebook.snapshot.db")
    home_template = build_home_template(str(scratch / "home-template"))
    context = multiprocessing.get_context("spawn")
    waiting = list(todo)
    breaks: dict[Submission, int] = collections.Counter()
    outcomes = summary.outcomes
    bar = _bar(len(todo), f"Автопроверка, {summary.workers} проц.", progress)
    pool = None
    try:
        with bar:
            while waiting:
                queue = None
                if gpus:
                    queue = context.Queue()
                    for index in range(summary.workers):
                        queue.put(gpus[index % len(gpus)])
                pool = concurrent.futures.ProcessPoolExecutor(
                    summary.workers, mp_context=context, initializer=_start_worker,
                    initargs=(str(course.root), str(scratch), sorted({s.lesson for s in todo}), queue, sandbox, home_template))
                running: dict = {}
                broken = False
                while (waiting or running) and not broken:
                    while waiting and len(running) < summary.workers:
                        sub = waiting.pop(0)
                        running[_submit(pool, sub, state)] = sub
                    done, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
                    for future in done:
                        sub = running.pop(future)
                        try:
                            result = future.result()
                        except concurrent.futures.process.BrokenProcessPool:
                            broken = True
                            breaks[sub] += 1
                            if breaks[sub] < 2:
                                waiting.insert(0, sub)
                                continue
                            outcome = Outcome(sub, None, "процесс проверки дважды завершился аварийно "
                                                         "(нехватка памяти? kill?) на этой работе")
                        except Exception as error:
                            outcome = Outcome(sub, None, f"сбой: {error!r}")
                        else:
                            with _critical(state):
                                outcome = record_graded(course, *result)
                        outcomes.append(outcome)
                        bar.update(1)
                        if not outcome.ok:
                            bar.set_postfix_str(f"ошибок: {sum(not o.ok for o in outcomes)}")
                if broken:  # the submissions still running in the broken pool are graded again
                    for future, sub in running.items():
                        waiting.insert(0, sub)
                    _stop_pool(pool)
                    pool = None
    finally:
        if pool is not None:
            _stop_pool(pool)
        shutil.rmtree(scratch, ignore_errors=True)


def _submit(pool, sub: Submission, state):
    """``pool.submit(_grade, sub)``, a signal waiting for its end: a submit may start a worker, and a spawned worker
    whose start is cut short reads no start-up data from its pipe and prints a traceback into the terminal."""
    with _critical(state):
        return pool.submit(_grade, sub)


def _stop_pool(pool) -> None:
    """Stop a pool now: its workers get SIGTERM (they remove the scratch folder and exit)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        with contextlib.suppress(Exception):
            process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        with contextlib.suppress(Exception):
            process.join(10)
            if process.is_alive():
                process.kill()


SCRATCH_PREFIX = "course-autograde-"


#: A watcher outside the run: when the main process is gone (even by kill -9, before any worker
#: exists) it removes the scratch folder, which holds the gradebook snapshot (hidden tests
#: included) and copies of the instructor's sources; it exits as soon as the folder is gone.
REAPER = """\
import os, shutil, sys, time
owner, folder = int(sys.argv[1]), sys.argv[2]
while os.path.isdir(folder):
    try:
        os.kill(owner, 0)
    except ProcessLookupError:
        shutil.rmtree(folder, ignore_errors=True)
        break
    except PermissionError:
        pass
    time.sleep(0.5)
"""


def _start_reaper(scratch: Path) -> None:
    subprocess.Popen([sys.executable, "-I", "-c", REAPER, str(os.getpid()), str(scratch)],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True)  # not in the terminal's group: Ctrl-C does not stop it


def _remove_stale_scratch() -> None:
    """Scratch folders of runs whose main process is gone (killed with -9): they hold a copy of
    the instructor's sources."""
    for folder in Path(tempfile.gettempdir()).glob(SCRATCH_PREFIX + "*"):
        try:
            owner = int((folder / "owner.pid").read_text())
        except (OSError, ValueError):
            continue
        if not _alive(owner):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def merge(folder: Path | str, autograded: Path | str, lessons: Iterable[str] = (), *,
          only_gpu: bool = False, skip_gpu: bool = False, progress: bool = True) -> Summary:
    """Record notebooks autograded on another machine (its ``autograded/`` folder) here."""
    started = time.monotonic()
    _use_nbgrader_env()
    course = load_course_folder(folder)
    autograded = Path(autograded).resolve()
    chosen = select_lessons(course.lessons(), lessons, only_gpu=only_gpu, skip_gpu=skip_gpu)
    found = sorted((Submission(p.parent.name, p.parent.parent.name)
                    for lesson in chosen for p in autograded.glob(f"*/{lesson}/*.ipynb")),
                   key=lambda s: (s.lesson, s.student))
    found = list(dict.fromkeys(found))
    outcomes = []
    summary = Summary(outcomes, 0, 0.0, 1)
    with _stop_on_signals() as state:
        try:
            with _course_lock(course):
                if found:
                    backup_sqlite(course.db_path, course.db_path.with_name(course.db_path.name + ".backup"))
                with _bar(len(found), "Запись в gradebook", progress) as bar:
                    for sub in found:
                        if not course.submitted(sub).is_dir():
                            outcomes.append(Outcome(sub, None, f"нет сданной работы {course.submitted(sub)}"))
                        else:
                            before = recorded_scores(course, sub)
                            with _critical(state):
                                outcomes.append(record(course, sub, autograded))
                            if before and outcomes[-1].ok:  # the merged grading is authoritative: say what it changed
                                notebook = next((autograded / sub.student / sub.lesson).glob("*.ipynb"))
                                summary.changed[sub] = changed_verdicts(before, outcomes[-1].scores, notebook)
                        bar.update(1)
        except Stopped as stop:
            summary.stopped = str(stop)
            summary.not_started = len(found) - len(outcomes)
    keep_logs(course, outcomes)
    summary.seconds = time.monotonic() - started
    return summary


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _use_nbgrader_env() -> None:
    """nbgrader shells out to alembic: this interpreter's bin first on PATH."""
    bin_dir = str(Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")


@contextlib.contextmanager
def _course_lock(course: CourseFolder):
    """One writer per course: a second run waits for nothing, it stops with a message."""
    with open(course.root / LOCK_NAME, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"В {course.root} уже идёт автопроверка или запись в gradebook "
                               f"(занят {LOCK_NAME}); дождитесь её конца.") from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _bar(total: int, description: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=description, unit=" раб.", disable=not enabled or not total,
                dynamic_ncols=True)
