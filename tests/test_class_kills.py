"""Grading a class when something dies: can a kill, a dead worker or a cut leave a silent wrong grade?

Classes of lesson 02 (tests/class_faults.py) are graded by `course autograde` with the main process, a worker or
the whole run killed at many points, and compared cell by cell with a clean run of the honest students: after any
kill, a plain re-run (no --force) gives exactly the clean run's grades, leaves no process and no scratch copy of
the course behind, and nothing ungraded is shown as a zero.  Its tests spread over the xdist workers (a minute or
more each); the clean run is built once per test run (class_faults.once_per_run).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest

from autograder.course import folder as course_folder, autograde as parallel, status
from autograder.course import nbgrader_cli
from helpers import FULL
from class_faults import (HONEST, LESSON, clean, forget_scores, grades, honest_class,  # noqa: F401 - a fixture
                          make_class, notebook)

COURSE_BIN = Path(sys.executable).parent / "course"


# --- faults --------------------------------------------------------------------------------

def run_processes(main_pid: int) -> list[int]:
    """Processes started by the run of ``main_pid`` (workers, kernels, checks): they carry its
    COURSE_AUTOGRADE_PARENT in their environment."""
    mark = f"COURSE_AUTOGRADE_PARENT={main_pid}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == main_pid:
            continue
        try:
            if mark in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def scratch_of(main_pid: int) -> list[Path]:
    return [p for p in Path(tempfile.gettempdir()).glob(parallel.SCRATCH_PREFIX + "*")
            if (p / "owner.pid").exists() and (p / "owner.pid").read_text() == str(main_pid)]


def start(folder: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([str(COURSE_BIN), "autograde", "--workers", "2", *args], cwd=folder,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=nbgrader_cli.nbgrader_env())


def wait_grading(run: subprocess.Popen, seconds: float = 120) -> None:
    """Until the run has started its workers (its signal handlers are in place by then: a loaded machine can
    take many seconds to get there), then 3 s more: it is grading."""
    deadline = time.monotonic() + seconds
    while not run_processes(run.pid):
        assert run.poll() is None and time.monotonic() < deadline, "the run started no worker"
        time.sleep(0.3)
    time.sleep(3)


def wait_gone(main_pid: int, seconds: float = 15) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = run_processes(main_pid)
        if not left and not scratch_of(main_pid):
            return []
        time.sleep(0.3)
    return run_processes(main_pid) or [-1]


#: Students added to the three of the clean class: four in all, two for each of the run's two workers, so that a
#: kill or a signal a few seconds in finds the run grading (with six, this file cost 186 CPU-s of `make test`).
EXTRA = ("ref_b",)


def faults_class(folder: Path) -> Path:
    students = honest_class()
    for name in EXTRA:
        students[name] = (notebook(), {})
    return make_class(folder, students)


def expected_grades(clean) -> dict:
    return {**clean, **{name: clean["ref_a"] for name in EXTRA}}


def assert_ends_with_the_clean_grades(run: subprocess.Popen, folder: Path, clean) -> None:
    """The run ends well (exit status 0) and the class has exactly the clean grades."""
    out, err = run.communicate(timeout=600)
    assert run.returncode == 0, out + err
    assert grades(folder) == expected_grades(clean)


def test_kills_at_many_points_leave_nothing_behind_and_a_rerun_gives_the_clean_grades(clean, tmp_path):
    """kill -9 of the main process at several moments of a run (start, grading, recording; `make test`: two of the
    four): no worker, kernel or check survives it, no scratch copy of the course stays, and plain re-runs
    end with exactly the clean grades."""
    folder = faults_class(tmp_path)
    for delay in (1.0, 4.0, 7.5, 11.0) if FULL else (1.0, 7.5):  # start and set-up; grading and recording
        run = start(folder)
        time.sleep(delay)
        if run.poll() is not None:
            break
        run.kill()
        run.wait()
        assert wait_gone(run.pid) == [], f"left behind after kill -9 at {delay} s"
    assert_ends_with_the_clean_grades(start(folder), folder, clean)


def test_sigterm_and_ctrl_c_stop_cleanly_in_one_line(clean, tmp_path):
    folder = faults_class(tmp_path)
    for sig, code in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
        run = start(folder)
        wait_grading(run)
        run.send_signal(sig)
        out, err = run.communicate(timeout=60)
        assert run.returncode == code, (out, err)
        assert out.strip().startswith(f"Остановлено ({sig.name})") and "Traceback" not in err, (out, err)
        assert wait_gone(run.pid) == []
    assert_ends_with_the_clean_grades(start(folder), folder, clean)


def test_a_signal_during_a_submit_waits_for_the_worker_it_starts():
    """SIGTERM while a submit starts a spawned worker (the CI's «EOFError: Ran out of input» traceback, printed by a
    worker whose start-up data never came): the submit ends first, then the run stops."""
    class Pool:
        def submit(self, function, sub):
            os.kill(os.getpid(), signal.SIGTERM)  # delivered here, between the worker's start and its data
            time.sleep(0.05)
            self.submitted = sub
            return "future"

    pool = Pool()
    with parallel._stop_on_signals() as state:
        with pytest.raises(parallel.Stopped, match="SIGTERM"):
            parallel._submit(pool, "alice", state)
    assert pool.submitted == "alice"


def test_a_dead_worker_fails_nothing(clean, tmp_path):
    """One worker killed mid-run: its submission is graded again in a new pool, nothing fails."""
    folder = faults_class(tmp_path)
    run = start(folder)
    deadline = time.monotonic() + 60
    victim = None
    while victim is None and time.monotonic() < deadline:
        time.sleep(0.5)
        for pid in run_processes(run.pid):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"multiprocessing" in cmdline and b"spawn_main" in cmdline:
                victim = pid
                break
    assert victim is not None, "no worker process seen"
    time.sleep(3)  # it is grading by now
    os.kill(victim, signal.SIGKILL)
    assert_ends_with_the_clean_grades(run, folder, clean)


def test_grading_cut_between_notebook_and_grades_is_regraded_not_zero(clean, tmp_path):
    """The state a kill leaves between nbgrader writing the autograded notebook and the grades
    (grades NULL; or a notebook without outputs): shown as not graded, and a plain re-run of
    `course autograde` and of serial `nbgrader autograde` grades it again."""
    folder = make_class(tmp_path, honest_class())
    assert not parallel.autograde(folder, workers=2, progress=False).failed
    forget_scores(folder, {"ref_a"})
    graded = folder / "autograded" / "naive" / LESSON / f"{LESSON}.ipynb"
    nb = nbformat.read(graded, as_version=4)
    for c in nb.cells:
        if c.cell_type == "code":
            c.outputs = []
    os.chmod(graded, 0o644)
    nbformat.write(nb, graded)
    known = course_folder.load(folder)
    assert status.status(known, LESSON, "ref_a").state is status.State.UNGRADED
    assert status.status(known, LESSON, "naive").state is status.State.UNGRADED
    assert status.status(known, LESSON, "untouched").state is status.State.GRADED
    summary = parallel.autograde(folder, workers=1, progress=False)
    assert sorted(o.submission.student for o in summary.outcomes) == ["naive", "ref_a"]
    assert grades(folder) == clean
    # serial nbgrader: the same hole, closed by CourseAutograde (nbgrader_config.py); the others stay as graded
    forget_scores(folder, {"ref_a"})
    nbgrader_cli.nbgrader("autograde", LESSON, cwd=folder)
    assert grades(folder) == clean


def test_a_check_the_grader_could_not_run_leaves_the_submission_ungraded_not_zero(clean, tmp_path, monkeypatch):
    """A check whose worker is lost before the student's code ran (seen once on a GPU machine:
    exit code 0, no verdict) gives no grade: the submissions are "сдана, не проверена" with the
    reason, nothing is a zero, and a plain re-run once the fault is gone gives the clean grades."""
    folder = make_class(tmp_path, honest_class())
    # the run's and its workers' temporary folders (TMPDIR), to look into after it; short: the kernels' sockets
    # are files there, and a socket's path has at most 107 bytes
    temporary = Path(tempfile.mkdtemp(prefix="kills-"))
    monkeypatch.setenv("TMPDIR", str(temporary))
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.setenv("AUTOGRADER_INJECT_WORKER_FAULT", "lesson02.memory")
    summary = parallel.autograde(folder, workers=2, progress=False)
    assert len(summary.failed) == len(HONEST), summary.text()
    loaded = course_folder.load(folder)
    for student in HONEST:
        state = status.status(loaded, LESSON, student)
        assert state.state is status.State.UNGRADED, (student, state)
        assert "lesson02.memory" in state.reason and "Сбой проверяющей системы" in state.reason, state.reason
    assert all(score is None for cells in grades(folder).values() for score in cells.values())
    monkeypatch.delenv("AUTOGRADER_INJECT_WORKER_FAULT")
    summary = parallel.autograde(folder, workers=2, progress=False)
    assert not summary.failed, summary.text()
    assert grades(folder) == clean
    # the workers' checks copied their homes from the run's one template (in its scratch folder, gone with it):
    # no worker built one of its own, and nothing of the runs is left
    assert list(temporary.iterdir()) == [], list(temporary.iterdir())
    temporary.rmdir()


def test_without_a_gradebook_the_commands_say_what_creates_it(tmp_path, capsys):
    from autograder.course import cli

    nbgrader_cli.new_course(tmp_path, only=[LESSON])
    target = tmp_path / "submitted" / "s1" / LESSON
    target.mkdir(parents=True)
    nbformat.write(notebook(), target / f"{LESSON}.ipynb")
    for command in (["autograde", "--force"], ["report"]):
        assert cli.main([*command, "--course", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert "нет gradebook.db" in err and "make release" in err and "работ: 1" in err, err


def test_a_temporary_folder_too_deep_for_the_kernels_sockets_is_named_with_what_to_do(tmp_path, monkeypatch):
    """The kernel's sockets are files in TMPDIR, and a socket's path has at most 107 bytes: in a deeper TMPDIR no
    kernel could start.  Nothing is graded, nothing is a zero, and the reason says to set a short TMPDIR."""
    from autograder.nbgrader.execute import GraderError, require_short_socket_paths

    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    with pytest.raises(GraderError, match="export TMPDIR=/tmp"):
        require_short_socket_paths(str(deep / "autograder-sandbox-12345678"))
    require_short_socket_paths("/tmp/autograder-sandbox-12345678")
    folder = make_class(tmp_path / "course", {"ref_a": (notebook(), {})})
    monkeypatch.setenv("TMPDIR", str(deep))
    monkeypatch.setattr(tempfile, "tempdir", None)
    summary = parallel.autograde(folder, workers=1, progress=False)
    assert len(summary.failed) == 1 and "export TMPDIR=/tmp" in summary.text(), summary.text()
    state = status.status(course_folder.load(folder), LESSON, "ref_a")
    assert state.state is status.State.UNGRADED and "TMPDIR" in state.reason, state
