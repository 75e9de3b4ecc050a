"""Grading a class: can a student touch another's grade, can a fault leave a silent wrong grade?

Classes of lesson 02 (demo cells emptied: fast) are graded the way an instructor does it
(`course autograde`, and serial `nbgrader autograde` for a sample), with tampered submissions
beside honest ones and with the main process, a worker or the whole run killed at many points.
Every case is compared cell by cell with a clean run of the honest students:

* others' grades are identical to the clean run in every case;
* a tampered submission gets the grade its case says, and the instructor is told what it did;
* after any kill, a plain re-run (no --force) gives exactly the clean run's grades, leaves no
  process and no scratch copy of the course behind, and nothing ungraded is shown as a zero.
"""
from __future__ import annotations

import copy
import csv
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from autograder.course import folder as course_folder, autograde as parallel, report, status

from autograder.course import grading, nbgrader_cli
from bank import banks
from helpers import submission, untouched_submission

LESSON = "02_fused_rmsnorm"
REFERENCE = grading.reference_answers(LESSON)
COURSE_BIN = Path(sys.executable).parent / "course"


def notebook(answers: dict | None = None) -> nbformat.NotebookNode:
    return submission(LESSON, answers)


def grade_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def without(nb, cell_id):
    nb.cells = [c for c in nb.cells if grade_id(c) != cell_id]
    return nb


NAIVE = banks()[LESSON]
NAIVE = {s.name: s for s in NAIVE.WRONG}["naive_temporaries"].answers

#: The honest students: their grades must never change, whatever the others hand in.
def untouched() -> nbformat.NotebookNode:
    return untouched_submission(LESSON)


HONEST = {"ref_a": lambda: notebook(), "naive": lambda: notebook(NAIVE), "untouched": untouched}


def hostile_module(root: Path) -> str:
    """A numpy.py that, if it ever ran, would read the hidden tests, write into the course and
    give every student of the class full marks."""
    return (f"import sqlite3\n"
            f"open({str(root / 'PWNED')!r}, 'w').write(open({str(root / 'solutions' / LESSON / (LESSON + '.ipynb'))!r}).read())\n"
            f"db = sqlite3.connect({str(root / 'gradebook.db')!r})\n"
            f"db.execute('UPDATE grade SET auto_score = 1000'); db.commit()\n"
            f"raise ImportError('shadowed')\n")


def tampered(root: Path) -> dict:
    """student -> (notebook, extra files, the honest student whose grades it must get or None
    when it must stay ungraded, anomaly kinds the instructor must be told)."""
    duplicated = notebook()
    at = next(i for i, c in enumerate(duplicated.cells) if grade_id(c) == "test_lesson02_zeros")
    duplicated.cells.insert(at + 1, copy.deepcopy(duplicated.cells[at]))
    for i, c in enumerate(duplicated.cells):
        c["id"] = f"cell-{i}"
    new_cell = notebook()
    extra = nbformat.v4.new_code_cell("print(1)")
    extra.metadata["nbgrader"] = {"grade": True, "grade_id": "bonus_for_me", "points": 100, "solution": False,
                                  "locked": False, "schema_version": 3, "task": False}
    new_cell.cells.append(extra)
    renamed = notebook()
    for c in renamed.cells:
        if grade_id(c) == "test_lesson02_zeros":
            c.metadata["nbgrader"]["grade_id"] = "my_zeros"
    edited = notebook(NAIVE)
    for c in edited.cells:
        if grade_id(c) == "test_lesson02_memory":
            c.source = "print('всё хорошо')"
    helper = notebook({"fused_rms_norm": "from rmshelper import fused_rms_norm"})
    huge = notebook()
    huge.cells.append(nbformat.v4.new_code_cell("print('x' * 50_000_000)"))
    return {
        "numpy_file": (notebook(), {"numpy.py": hostile_module(root)}, "ref_a", {"shadowing_file"}),
        "autograder_file": (notebook(), {"autograder.py": "x = 1\n"}, "ref_a", {"shadowing_file"}),
        "helper_module": (helper, {"rmshelper.py": "import numpy as np\n\n" + REFERENCE["fused_rms_norm"]},
                          "ref_a", {"extra_file"}),
        "deleted_test": (without(notebook(), "test_lesson02_zeros"), {}, "ref_a", {"restored_cell"}),
        "deleted_failing_test": (without(notebook(NAIVE), "test_lesson02_memory"), {}, "naive", {"restored_cell"}),
        "deleted_setup": (without(notebook(), "setup"), {}, "ref_a", {"restored_cell"}),
        "duplicated_test": (duplicated, {}, "ref_a", {"duplicate_cell"}),
        "new_grade_cell": (new_cell, {}, "ref_a", {"unknown_grade_cell"}),
        "renamed_grade_id": (renamed, {}, "ref_a", {"unknown_grade_cell", "restored_cell"}),
        "edited_test": (edited, {}, "naive", {"edited_cell"}),
        "huge_output": (huge, {}, "ref_a", {"output_cut"}),
        "glob[1]": (notebook(), {}, "ref_a", set()),
        "broken_json": (None, {}, None, {"invalid_notebook"}),
    }


def make_class(folder: Path, students: dict) -> Path:
    """A course as the instructor has it: assignment generated, these submissions collected."""
    nbgrader_cli.new_course(folder, only=[LESSON])
    nbgrader_cli.nbgrader("generate_assignment", LESSON, "--force", cwd=folder)
    for student, (nb, files) in students.items():
        target = folder / "submitted" / student / LESSON
        target.mkdir(parents=True, exist_ok=True)
        if nb is None:
            (target / f"{LESSON}.ipynb").write_text("{это не JSON")
        else:
            nbformat.write(nb, target / f"{LESSON}.ipynb")
        for name, text in files.items():
            (target / name).write_text(text)
    return folder


def grades(folder: Path) -> dict[str, dict[str, float | None]]:
    """student -> {cell: auto_score} straight from the gradebook (NULL stays None)."""
    with course_folder.quiet(), Gradebook(f"sqlite:///{folder / 'gradebook.db'}") as gradebook:
        return {sub.student.id: {g.name: g.auto_score for nb in sub.notebooks for g in nb.grades}
                for sub in gradebook.find_assignment(LESSON).submissions}


def forget_scores(folder: Path, students=None) -> None:
    """What a kill between nbgrader writing the notebook and the grades leaves: NULL scores."""
    with course_folder.quiet(), Gradebook(f"sqlite:///{folder / 'gradebook.db'}") as gradebook:
        for sub in gradebook.find_assignment(LESSON).submissions:
            if students is None or sub.student.id in students:
                for nb in sub.notebooks:
                    for g in nb.grades:
                        g.auto_score = None
        gradebook.db.commit()


def honest_class() -> dict:
    return {name: (make(), {}) for name, make in HONEST.items()}


@pytest.fixture(scope="session")  # once per worker: xdist interleaves modules, which would rebuild a module fixture
def clean(tmp_path_factory):
    """The honest students alone, graded by `course autograde`: the grades every case must keep."""
    folder = make_class(tmp_path_factory.mktemp("clean"), honest_class())
    summary = parallel.autograde(folder, workers=2, progress=False)
    assert not summary.failed, summary.text()
    return grades(folder)


# --- tampering -----------------------------------------------------------------------------

@pytest.fixture(scope="session")  # once per worker: xdist interleaves modules, which would rebuild a module fixture
def tamper(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tamper")
    cases = tampered(folder)
    make_class(folder, {**honest_class(), **{s: (nb, files) for s, (nb, files, _, _) in cases.items()}})
    summary = parallel.autograde(folder, workers=2, progress=False)
    return folder, cases, summary


def test_tampering_changes_no_one_elses_grade(clean, tamper):
    """Are the honest students' grades those of the clean run, whatever the class handed in?"""
    folder, _, _ = tamper
    got = grades(folder)
    assert {s: got[s] for s in HONEST} == clean
    assert not (folder / "PWNED").exists(), "a file beside the notebook ran before the guard"


def test_each_tampered_submission_gets_what_its_case_says(clean, tamper):
    """Shadowing files are ignored, helper modules work, structure is repaired: the grade of the
    honest twin; a notebook that is not JSON is not graded (and not a zero)."""
    folder, cases, summary = tamper
    got = grades(folder)
    for student, (_, _, twin, _) in cases.items():
        if twin is None:
            assert student not in got or all(v is None for v in got[student].values()), student
            state = status.status(course_folder.load(folder), LESSON, student)
            assert state.state is status.State.UNGRADED and "не читается" in state.reason, state
            assert any(o.submission.student == student and not o.ok for o in summary.outcomes)
        else:
            assert got[student] == clean[twin], student


def test_the_instructor_is_told_what_each_submission_did(tamper):
    """Does the run's summary name every anomaly of every tampered student (and none for the honest)?"""
    _, cases, summary = tamper
    kinds = {sub.student: {a.kind for a in found} for sub, found in summary.anomalies.items()}
    for student, (_, _, _, expected) in cases.items():
        assert expected <= kinds.get(student, set()), (student, kinds.get(student))
    for student in HONEST:
        assert not kinds.get(student), (student, kinds[student])
    text = summary.text()
    assert "НЕ ПРОВЕРЕНА broken_json" in text and "numpy.py совпадает по имени с модулем" in text


def test_huge_output_is_cut_in_the_graded_notebook(tamper):
    folder, _, _ = tamper
    graded = folder / "autograded" / "huge_output" / LESSON / f"{LESSON}.ipynb"
    assert graded.stat().st_size < 2 * 2**20


def test_report_and_export_tell_ungraded_from_zero(tamper):
    """The failed submission is in the report as not graded and in the CSV with an empty score;
    a student of the gradebook who handed in nothing is "не сдана"."""
    folder, _, _ = tamper
    nbgrader_cli.nbgrader("db", "student", "add", "absent", cwd=folder)
    out = report.write_report(folder, folder / "report.html")
    page = out.read_text(encoding="utf-8")
    assert "Сданы, но не проверены (1)" in page and "broken_json" in page
    nbgrader_cli.nbgrader("export", "--to", str(folder / "grades.csv"), cwd=folder)
    with open(folder / "grades.csv", newline="", encoding="utf-8") as handle:
        rows = {r["student_id"]: r for r in csv.DictReader(handle)}
    assert rows["broken_json"]["status"] == "сдана, не проверена" and rows["broken_json"]["score"] == ""
    assert rows["absent"]["status"] == "не сдана" and rows["absent"]["score"] == ""
    assert rows["ref_a"]["status"] == "проверена" and float(rows["ref_a"]["score"]) == 15.0
    assert rows["glob[1]"]["status"] == "проверена"


def test_serial_nbgrader_is_protected_the_same_way(clean, tmp_path):
    """The same hostile files through plain `nbgrader autograde` (no --force), one student after another."""
    cases = tampered(tmp_path)
    chosen = {s: cases[s][:2] for s in ("numpy_file", "duplicated_test", "glob[1]", "broken_json")}
    make_class(tmp_path, {**honest_class(), **chosen})
    done = nbgrader_cli.nbgrader("autograde", LESSON, cwd=tmp_path, check=False)
    assert "has changed!" not in done.stderr, "honest cells reported as changed: real tampering would drown"
    got = grades(tmp_path)
    assert {s: got[s] for s in HONEST} == clean
    for student in ("numpy_file", "duplicated_test", "glob[1]"):
        assert got[student] == clean["ref_a"], student
    assert not (tmp_path / "PWNED").exists()


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


def faults_class(folder: Path) -> Path:
    students = honest_class()
    for index in range(3):
        students[f"ref_{'bcd'[index]}"] = (notebook(), {})
    return make_class(folder, students)


def expected_grades(clean) -> dict:
    return {**clean, **{f"ref_{c}": clean["ref_a"] for c in "bcd"}}


def assert_ends_with_the_clean_grades(run: subprocess.Popen, folder: Path, clean) -> None:
    """The run ends well (exit status 0) and the class has exactly the clean grades."""
    out, err = run.communicate(timeout=600)
    assert run.returncode == 0, out + err
    assert grades(folder) == expected_grades(clean)


def test_kills_at_many_points_leave_nothing_behind_and_a_rerun_gives_the_clean_grades(clean, tmp_path):
    """kill -9 of the main process at several moments of a run (start, grading, recording): no
    worker, kernel or check survives it, no scratch copy of the course stays, and plain re-runs
    end with exactly the clean grades."""
    folder = faults_class(tmp_path)
    for delay in (1.0, 4.0, 7.5, 11.0):
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
    # serial nbgrader: the same hole, closed by CourseAutograde (nbgrader_config.py)
    forget_scores(folder)
    nbgrader_cli.nbgrader("autograde", LESSON, cwd=folder)
    assert grades(folder) == clean


def test_a_check_the_grader_could_not_run_leaves_the_submission_ungraded_not_zero(clean, tmp_path, monkeypatch):
    """A check whose worker is lost before the student's code ran (seen once on a GPU machine:
    exit code 0, no verdict) gives no grade: the submissions are "сдана, не проверена" with the
    reason, nothing is a zero, and a plain re-run once the fault is gone gives the clean grades."""
    folder = make_class(tmp_path, honest_class())
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
