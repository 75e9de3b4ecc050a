"""Does `course autograde` give the class gradebook exactly what plain `nbgrader autograde` gives?

One small class of lesson 02 (the reference, two known mistakes, the untouched notebook) is
graded twice: serially by the real `nbgrader autograde`, and by :mod:`autograder.course.autograde` with
two workers into a class course.  The same graded course then serves the re-run, the merge of
notebooks graded elsewhere and the class report.
"""
import sqlite3
import zlib

import nbformat
import pytest

from autograder.course import cli, paths as course, folder as course_folder, autograde as parallel, record, report

from autograder.course import grading, nbgrader_cli
from bank import banks
from helpers import assert_feedback_hides_hidden_tests, submission, untouched_submission

LESSON = "02_fused_rmsnorm"



def submissions() -> dict:
    wrong = {s.name: s for s in banks()[LESSON].WRONG}
    return {
        "reference": submission(LESSON),
        "eps_outside_root": submission(LESSON, wrong["eps_outside_root"].answers),
        "naive_temporaries": submission(LESSON, wrong["naive_temporaries"].answers),
        "untouched": untouched_submission(LESSON),
    }


def class_course(folder, notebooks):
    """A course as the instructor has it: assignment generated, submissions collected."""
    nbgrader_cli.new_course(folder, only=[LESSON])
    nbgrader_cli.nbgrader("generate_assignment", LESSON, "--force", cwd=folder)
    grading.write_submissions(folder, LESSON, notebooks)
    return folder


def verdict(folder, student, cell) -> str:
    """A graded cell's outputs in the autograded notebook (to explain a difference)."""
    nb = nbformat.read(folder / "autograded" / student / LESSON / f"{LESSON}.ipynb", as_version=4)
    (found,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == cell]
    return " | ".join(str(o.get("text") or o.get("evalue") or o.get("data")) for o in found.outputs)[-1500:]


@pytest.fixture(scope="session")  # once per worker: xdist interleaves modules, which would rebuild a module fixture
def graded(tmp_path_factory):
    notebooks = submissions()
    base = tmp_path_factory.mktemp("parallel")
    serial = grading.grade_notebooks(LESSON, notebooks, base / "serial")
    folder = class_course(base / "class", notebooks)
    summary = parallel.autograde(folder, workers=2, progress=False)
    side_by_side = grading.grade_notebooks(LESSON, notebooks, base / "side_by_side",
                                           extra_args=("--IsolatedExecute.parallel_checks=4",))
    return {"serial": serial, "folder": folder, "summary": summary, "base": base,
            "students": sorted(notebooks), "side_by_side": side_by_side}


def test_parallel_scores_are_the_serial_scores(graded):
    """Same submissions: is every cell's score in the class gradebook the serial nbgrader score?"""
    assert not graded["summary"].failed, graded["summary"].text()
    assert graded["summary"].workers == 2
    got = grading.read_grades(graded["folder"], LESSON, graded["students"])
    differ = [(student, mine.cell, mine.score, theirs.score)
              for student in graded["students"] for mine, theirs in zip(got[student], graded["serial"][student])
              if mine != theirs]
    assert not differ, "\n".join(f"{s} {cell}: parallel {a}, serial {b}\n  parallel: {verdict(graded['folder'], s, cell)}"
                                  f"\n  serial: {verdict(graded['base'] / 'serial', s, cell)}"
                                  for s, cell, a, b in differ)
    totals = {s: sum(g.score for g in grades) for s, grades in graded["serial"].items()}
    assert totals["reference"] == 15 and totals["untouched"] == 0  # the comparison is not vacuous
    assert 0 < totals["eps_outside_root"] < 15 and 0 < totals["naive_temporaries"] < 15


def test_checks_side_by_side_give_the_serial_scores(graded):
    """nbgrader autograde with IsolatedExecute.parallel_checks = 4 (a notebook's checks run side by side while it
    goes on): is every cell's score the serial one?"""
    differ = [(student, mine.cell, mine.score, theirs.score) for student in graded["students"]
              for mine, theirs in zip(graded["side_by_side"][student], graded["serial"][student]) if mine != theirs]
    assert not differ, "\n".join(f"{s} {cell}: side by side {a}, serial {b}\n  side by side: "
                                  f"{verdict(graded['base'] / 'side_by_side', s, cell)}" for s, cell, a, b in differ)
    assert [g.cell for g in graded["side_by_side"]["reference"]] == [g.cell for g in graded["serial"]["reference"]]


def test_the_class_course_looks_as_after_nbgrader(graded):
    """Autograded notebooks in place, a gradebook backup, and nbgrader's own export works on it."""
    folder = graded["folder"]
    for student in graded["students"]:
        assert (folder / "autograded" / student / LESSON / f"{LESSON}.ipynb").exists()
    assert (folder / "gradebook.db.backup").exists()
    with sqlite3.connect(folder / "gradebook.db") as db:
        assert db.execute("pragma integrity_check").fetchone() == ("ok",)
        assert db.execute("select count(*) from submitted_assignment").fetchone() == (4,)
    nbgrader_cli.nbgrader("export", "--to", str(folder / "grades.csv"), cwd=folder)
    assert "eps_outside_root" in (folder / "grades.csv").read_text(encoding="utf-8")


def test_a_second_run_skips_graded_work_and_force_regrades_without_duplicates(graded, capsys):
    """Like nbgrader: nothing new -> nothing graded; --force on one student rewrites its grades only."""
    folder = graded["folder"]
    assert cli.main(["autograde", "--course", str(folder)]) == 0
    assert "новых работ нет (уже проверено: 4" in capsys.readouterr().out

    again = parallel.autograde(folder, force=True, students=["eps_outside_root"], workers=1, progress=False)
    assert [o.submission.student for o in again.outcomes] == ["eps_outside_root"] and not again.failed
    assert grading.read_grades(folder, LESSON, graded["students"]) == graded["serial"]
    with sqlite3.connect(folder / "gradebook.db") as db:
        assert db.execute("select count(*) from submitted_assignment").fetchone() == (4,)
        assert db.execute("select count(*) from grade").fetchone() == (sum(map(len, graded["serial"].values())),)


def test_merge_records_notebooks_graded_on_another_machine(graded, tmp_path):
    """GPU machine workflow: another copy graded them; does `course merge` record the same scores?"""
    notebooks = submissions()
    folder = class_course(tmp_path / "class", notebooks)
    assert cli.main(["merge", str(graded["base"] / "serial" / "autograded"), "--course", str(folder)]) == 0
    assert grading.read_grades(folder, LESSON, graded["students"]) == graded["serial"]


def test_a_merge_over_earlier_grades_is_authoritative_and_lists_the_verdicts_it_changed(graded, tmp_path):
    """The class graded once (e.g. on the PTX emulator), then a GPU machine's grading merged over it: the new scores
    are recorded, and the summary names every test cell whose verdict changed."""
    import shutil

    folder = class_course(tmp_path / "class", submissions())
    serial = graded["base"] / "serial" / "autograded"
    first = parallel.merge(folder, serial, progress=False)
    assert not first.failed and first.changed == {}, first.text()  # nothing was recorded before
    other = tmp_path / "other_machine"
    shutil.copytree(serial, other)
    path = other / "reference" / LESSON / f"{LESSON}.ipynb"
    nb = nbformat.read(path, as_version=4)
    (cell,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_lesson02_memory"]
    cell.outputs = [nbformat.v4.new_output("error", ename="CheckFailed", evalue="на другой машине", traceback=[])]
    nbformat.write(nb, path)
    again = parallel.merge(folder, other, progress=False)
    (old,) = [g.score for g in graded["serial"]["reference"] if g.cell == "test_lesson02_memory"]
    assert old > 0 and again.changed[course_folder.Submission(LESSON, "reference")] == (
        [f"test_lesson02_memory: {old:g} → 0"], 0)
    assert all(not cells for sub, (cells, _) in again.changed.items() if sub.student != "reference")
    assert f"reference/{LESSON}: test_lesson02_memory: {old:g} → 0" in again.text()
    scores = {g.cell: g.score for g in grading.read_grades(folder, LESSON, ["reference"])["reference"]}
    assert scores["test_lesson02_memory"] == 0


def test_merge_refuses_a_notebook_graded_from_another_submission(graded, tmp_path):
    """Is a graded notebook whose answers differ from submitted/ refused, and nothing recorded?"""
    notebooks = submissions()
    notebooks["untouched"] = notebooks["reference"]  # what this course holds is not what was graded
    folder = class_course(tmp_path / "class", notebooks)
    summary = parallel.merge(folder, graded["base"] / "serial" / "autograded", progress=False)
    assert [str(o.submission) for o in summary.failed] == [f"untouched/{LESSON}"]
    assert "проверен не по этой сданной работе" in summary.failed[0].error
    assert not (folder / "autograded" / "untouched" / LESSON).exists()


def test_report_on_the_graded_class(graded, tmp_path):
    """Does the report count the failed checks and the named mistake the class really made?"""
    (stats,) = report.class_stats(graded["folder"])
    assert stats.students == 4 and stats.max_score == 12 and stats.blank == ("untouched",)  # bonus apart
    failed = {c.cell: set(c.failed) for c in stats.checks}
    assert failed["test_lesson02_eps_placement"] == {"eps_outside_root", "untouched"}
    assert failed["test_lesson02_memory"] == {"naive_temporaries", "untouched"}
    (mistake,) = [m for m in stats.mistakes if "eps прибавлен вне корня" in m.mistake]
    assert mistake.students == ("eps_outside_root",)

    out = tmp_path / "report.html"
    assert cli.main(["report", "--course", str(graded["folder"]), "--out", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert page.count("<img") == 1 and "data:image/png;base64," in page
    assert "eps прибавлен вне корня" in page and "Эквивалентность с эталоном float64" in page


# --- pure parts ---------------------------------------------------------------------------

def test_lessons_are_selected_by_name_and_by_gpu():
    """Do --only-gpu and --skip-gpu split the lessons by whether their checks need a GPU?"""
    known = ["02_fused_rmsnorm", "07_cupy_rmsnorm", "08_cupy_flash_attention"]
    assert course_folder.select_lessons(known, only_gpu=True) == known[1:]
    assert course_folder.select_lessons(known, skip_gpu=True) == known[:1]
    assert course_folder.select_lessons(known, ["08_cupy_flash_attention", "02_fused_rmsnorm"],
                                   only_gpu=True) == ["08_cupy_flash_attention"]
    with pytest.raises(ValueError, match="generate_assignment"):
        course_folder.select_lessons(known, ["05_flash_attention"])


def test_shards_cover_every_submission_once_on_every_machine():
    """Are the shards disjoint, complete and independent of Python's hash seed?"""
    subs = [course_folder.Submission(f"0{k}_x", f"s{i}") for k in range(1, 4) for i in range(40)]
    parts = [course_folder.shard(subs, k, 3) for k in (1, 2, 3)]
    assert sorted(sum(parts, []), key=str) == sorted(subs, key=str)
    assert all(parts) and sum(map(len, parts)) == len(subs)
    assert parts[0] == [s for s in subs if zlib.crc32(str(s).encode()) % 3 == 0]
    with pytest.raises(ValueError):
        course_folder.shard(subs, 0, 3)


def test_replay_keeps_what_nbgrader_does_after_execution(graded):
    """Is everything from SaveAutoGrades on kept, and only the execution steps replaced?"""
    from nbgrader.preprocessors import AssignLatePenalties, SaveAutoGrades

    config = record.replay_config(course_folder.load(graded["folder"]), graded["base"])
    steps = config.Autograde.autograde_preprocessors
    assert steps[0] is record.ReplayAutograded
    assert steps[1] is SaveAutoGrades and AssignLatePenalties in steps
    assert config.ReplayAutograded.directory == str(graded["base"])


def test_a_second_writer_is_stopped(tmp_path):
    """While one run holds the course, does another stop at once instead of writing too?"""
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\n")
    held = course_folder.load(tmp_path)
    with parallel._course_lock(held):
        with pytest.raises(RuntimeError, match="уже идёт"):
            with parallel._course_lock(held):
                pass


def test_workers_keep_student_code_out_of_the_class_course(tmp_path):
    """Does a worker's config add the class course to the folders student code may not write into?"""
    (tmp_path / "class").mkdir()
    (tmp_path / "class" / "nbgrader_config.py").write_text(
        "c = get_config()\nc.IsolatedExecute.protected_dirs = ['/srv/shared-data']\n")
    class_course = course_folder.load(tmp_path / "class")
    config = parallel.worker_config(class_course, tmp_path / "worker-1")
    assert config.IsolatedExecute.protected_dirs == ["/srv/shared-data", str((tmp_path / "class").resolve())]
    assert config.CourseDirectory.root == str(tmp_path / "worker-1")
    assert class_course.config.IsolatedExecute.protected_dirs == ["/srv/shared-data"]  # not changed in place
    from autograder.nbgrader.execute import IsolatedExecute
    assert IsolatedExecute(config=config).protected_dirs == config.IsolatedExecute.protected_dirs


def test_feedback_keeps_hidden_tests_hidden(graded):
    """`nbgrader generate_feedback` on the graded class: no hidden-test source, no seed of a
    hidden case, each check once, no execution counts; visible failures still explained."""
    nbgrader_cli.nbgrader("generate_feedback", LESSON, "--force", cwd=graded["folder"])
    for student in graded["students"]:
        page = (graded["folder"] / "feedback" / student / LESSON / f"{LESSON}.html").read_text(encoding="utf-8")
        text = assert_feedback_hides_hidden_tests(page, LESSON, student)
        assert text.count("Нулевые строки дают нули без NaN") <= 2, student  # title in the cell, once
    eps = (graded["folder"] / "feedback" / "eps_outside_root" / LESSON / f"{LESSON}.html").read_text(encoding="utf-8")
    assert "eps прибавлен вне корня" in eps
    from autograder.nbgrader.feedback_style import WRAP_OUTPUT_CSS
    assert eps.count(WRAP_OUTPUT_CSS.strip()) == 1  # long lines wrap: the hint is never cut off
