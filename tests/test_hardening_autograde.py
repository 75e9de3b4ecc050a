"""Does the real `nbgrader autograde` survive bad and hostile submissions, giving them nothing?

One class of lesson-02 submissions is graded once (a session fixture, about 2-3 minutes): each
submission is the student notebook with some answer cells replaced and some cells added, as a
student could write it.  Demo cells are emptied (students may delete them) to keep it fast.
Each test then reads nbgrader's gradebook and the autograded notebook of one submission:
exactly the expected cells lose their points, and the outputs say why.  A timeout of 8 s for
cells and checks stands in for the course's 120 s / 30 s.
"""
import os
import textwrap
from pathlib import Path

import nbformat
import pytest

from autograder.course import paths as course

from autograder.course import grading
from autograder.isolation import guard

import helpers

LESSON = "02_fused_rmsnorm"
RMS = {f"test_lesson02_{n}" for n in ("equivalence", "zeros", "large_values", "unit_rms", "eps_placement",
                                      "mean_axis", "not_mutated", "dtype", "memory")}
ADD = {"test_lesson02_add_equivalence", "test_lesson02_add_memory"}
TIMEOUT_S = 8

# Wrong answers that lose every cell of their function: whatever tampering is added to them,
# the score must stay 0 there (mutates the input, float64, extra (T, D) buffers).
WRONG_RMS = "x *= 2\nreturn (x * 1).astype(np.float64)"
WRONG_ADD = "x += residual\nreturn (x * 2).astype(np.float64), x"

CALL_ADD = ("fused_add_rms_norm(np.ones((2, 4), np.float32), np.ones((2, 4), np.float32), "
            "np.ones(4, np.float32))")


def rms(body: str) -> dict:
    return {"fused_rms_norm": "def fused_rms_norm(x, w, eps=1e-6):\n" + textwrap.indent(textwrap.dedent(body).strip(), "    ")}


def add(body: str) -> dict:
    return {"fused_add_rms_norm": "def fused_add_rms_norm(x, residual, w, eps=1e-6):\n"
            + textwrap.indent(textwrap.dedent(body).strip(), "    ")}


def cell(source: str) -> str:
    return textwrap.dedent(source).strip()


# name -> answers (grade_id -> code), cells added after a grade_id, the cells it must lose, and
# phrases that given cells' outputs must contain (test cells by grade_id, added cells by a
# marker comment in their source).
CLASS = {
    "reference": dict(loses=set(), says={"test_lesson02_memory": "2 из 2"}),
    "naive": dict(answers=rms("return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w"),
                  loses={"test_lesson02_memory", "test_lesson02_dtype"},
                  says={"test_lesson02_memory": "временные массивы (T, D)"}),
    "kernel_killers": dict(
        cells={"fused_rms_norm": [
            "keep = 42  # state",
            "import os; os._exit(3)  # exit",
            "import ctypes; ctypes.string_at(0)  # segfault",
            "import numpy as np; bomb = np.ones(16 * 2**30, dtype=np.uint8)  # bomb",
            "while True: pass  # hang",
            # deaf to the interrupt, asleep rather than spinning: the busy loop is "# hang"'s; a spin here would
            # burn a CI core for its timeout and the restart's wait
            "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN)  # deaf\nwhile True: time.sleep(1)",
            "import os, signal; os.kill(os.getppid(), signal.SIGKILL)  # parricide",
            "print('после всего', keep)  # after",
        ]},
        loses=set(),
        says={"# exit": "Ядро Python завершилось", "# segfault": "Ядро Python завершилось",
              "# bomb": "MemoryError", "# hang": "CellTimeoutError",  # interrupted (or, if slow, restarted)
              "# deaf": "не ответила на прерывание", "# parricide": "сигналы другим процессам",
              "# after": "после всего 42"}),
    "function_exits": dict(
        answers=add("import os\nos._exit(3)"),
        cells={"fused_add_rms_norm": [CALL_ADD + "  # call"]},
        loses=ADD,
        says={"# call": "Ядро Python завершилось", "test_lesson02_add_equivalence": "завершился с кодом 3"}),
    "function_segfaults": dict(
        answers=add("import ctypes\nreturn ctypes.string_at(0)"),
        cells={"fused_add_rms_norm": [CALL_ADD + "  # call"]},
        loses=ADD,
        says={"# call": "Ядро Python завершилось", "test_lesson02_add_equivalence": "ctypes"}),
    "function_hangs_and_bombs": dict(
        answers={**rms("while True:\n    pass"), **add("return np.ones(16 * 2**30, dtype=np.uint8)")},
        loses=RMS | ADD,
        says={"test_lesson02_equivalence": f"не завершилась за {TIMEOUT_S} с",
              "test_lesson02_zeros": "уже не завершилась", "test_lesson02_add_equivalence": "MemoryError"}),
    "syntax_error_and_huge_message": dict(
        answers={**rms("raise ValueError('ы' * 10_000_000)"),
                 "fused_add_rms_norm": "def fused_add_rms_norm(x, residual, w, eps=1e-6)\n    return x"},
        loses=RMS | ADD,
        says={"test_lesson02_equivalence": "обрезано", "fused_add_rms_norm": "SyntaxError",
              "test_lesson02_add_equivalence": "не определено имя `fused_add_rms_norm`"}),
    "none_and_wrong_types": dict(
        answers={**rms("return None"), **add("return [x.tolist(), residual.tolist()]")},
        loses=RMS - {"test_lesson02_not_mutated"} | ADD,  # it does not mutate its input: true
        says={"test_lesson02_equivalence": "получено NoneType",
              "test_lesson02_add_equivalence": "вернула list"}),
    "nan_inf_and_always_equal": dict(
        answers={**rms("return np.full_like(x, np.nan)"), **add("""
            class Yes:
                def __eq__(self, other): return True
            return Yes(), np.full_like(x, np.inf)""")},
        # The NaN array has the right dtype and leaves x alone.
        loses=RMS - {"test_lesson02_dtype", "test_lesson02_not_mutated"} | ADD,
        says={"test_lesson02_equivalence": "NaN/inf", "test_lesson02_add_equivalence": "получено Yes"}),
    "redefines_grade_and_checks": dict(
        answers={"fused_rms_norm": cell("""
            def fused_rms_norm(x, w, eps=1e-6):
                x *= 2
                return (x * 1).astype(np.float64)
            import autograder, autograder.checks.core, autograder.notebook
            import autograder.lessons.lesson02.checks as lesson
            def grade(*args, **kwargs):
                return 3
            autograder.grade = autograder.notebook.grade = grade
            lesson.equivalence = lesson.memory = lambda *args, **kwargs: None
            autograder.checks.core.compare = lambda *args, **kwargs: 0.0
            autograder.checks.core._REGISTRY.clear()"""), **add(WRONG_ADD)},
        loses=RMS | ADD,
        says={"test_lesson02_equivalence": "dtype float64"}),
    "patches_numpy_and_builtins": dict(
        answers={"fused_rms_norm": cell("""
            def fused_rms_norm(x, w, eps=1e-6):
                x *= 2
                return (x * 1).astype(np.float64)
            import builtins
            np.allclose = np.array_equal = lambda *args, **kwargs: True
            np.abs = lambda a, *args, **kwargs: a * 0
            builtins.isinstance = lambda *args: True"""), **add("""
            import builtins
            builtins.len = lambda obj: 2
            np.abs = lambda a, *args, **kwargs: a * 0
            x += residual
            return x, x""")},
        loses=RMS | ADD,
        says={"test_lesson02_add_equivalence": "в builtins"}),
    "cheats_tracemalloc": dict(
        answers={"fused_rms_norm": cell("""
            tracemalloc.get_traced_memory = lambda: (0, 0)
            tracemalloc.stop = lambda: None
            def fused_rms_norm(x, w, eps=1e-6):
                return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w"""), **add("""
            import tracemalloc
            h = x + residual
            out = h / np.sqrt(np.mean(h * h, axis=-1, keepdims=True) + eps) * w
            tracemalloc.stop()
            tracemalloc.start()
            return out, h""")},
        loses={"test_lesson02_memory", "test_lesson02_dtype"} | ADD,
        says={"test_lesson02_memory": "пик памяти", "test_lesson02_add_memory": "tracemalloc.stop"}),
    "reads_instructor_files": dict(
        answers={"fused_rms_norm": cell("""
            import glob, json
            for path in glob.glob("../../../**/*.ipynb", recursive=True):
                cells = json.load(open(path))["cells"]
                exec("".join(next(c["source"] for c in cells if "def fused_rms_norm" in "".join(c["source"]))))
            """), **add("""
            open("{REPOSITORY}/solutions/02_fused_rmsnorm/02_fused_rmsnorm.ipynb").read()  # by name: refused
            return x + residual, x + residual""".replace("{REPOSITORY}", guard.REPOSITORY))},  # even where unseen
        loses=RMS | ADD,  # no notebook to read: the kernel's copy of the submission holds none (issue 53, route 3)
        says={"test_lesson02_equivalence": "не определено имя `fused_rms_norm`",
              "test_lesson02_add_equivalence": "нельзя открывать файл"}),
    "suppresses_tracebacks": dict(
        answers={"fused_rms_norm": cell("""
            import os, sys
            ip = get_ipython()
            ip.showtraceback = lambda *args, **kwargs: None
            ip.showsyntaxerror = lambda *args, **kwargs: None
            sys.stderr = open(os.devnull, "w")
            def fused_rms_norm(x, w, eps=1e-6):
                raise RuntimeError("тихо")"""), **add("raise RuntimeError('тихо')")},
        loses=RMS | ADD,
        says={"test_lesson02_equivalence": "тихо"}),
    "forges_the_verdict": dict(
        answers={**rms(cell("""
            import json
            json.dumps = lambda *args, **kwargs: '{"passed": true, "message": ""}'
            """) + "\n" + WRONG_RMS), **add(cell("""
            try:
                raise RuntimeError
            except RuntimeError as error:
                frame = error.__traceback__.tb_frame.f_back
            frame.f_globals["compare"] = lambda *args, **kwargs: 0.0
            """) + "\n" + WRONG_ADD)},
        loses=RMS | ADD,
        says={"test_lesson02_equivalence": "в json", "test_lesson02_add_equivalence": "кадрам стека"}),
    "writes_grader_files": dict(
        cells={"fused_rms_norm": [cell(f"""
            import os
            outcomes = []
            for attempt in (lambda: open("../../../nbgrader_config.py", "a"),
                            lambda: open({os.path.join(guard.PACKAGE_DIR, "__init__.py")!r}, "a"),
                            lambda: os.remove("../../../gradebook.db"),
                            lambda: os.system("true")):
                try:
                    attempt()
                    outcomes.append("удалось")
                except PermissionError:
                    outcomes.append("запрещено")
            print(outcomes)  # writes""")]},
        loses=set(),
        says={"# writes": "['запрещено', 'запрещено', 'запрещено', 'запрещено']"}),
}


def submission(answers=None, cells=None, **_) -> nbformat.NotebookNode:
    nb = helpers.submission(LESSON, answers)
    for after, sources in (cells or {}).items():
        at = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == after)
        nb.cells[at + 1:at + 1] = [nbformat.v4.new_code_cell(s) for s in sources]
    return nb


@pytest.fixture(scope="session")  # once per worker: xdist interleaves modules, which would rebuild a module fixture
def graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hardening")
    package_init = Path(guard.PACKAGE_DIR, "__init__.py").read_bytes()
    grades = grading.grade_notebooks(LESSON, {name: submission(**spec) for name, spec in CLASS.items()}, folder,
                              extra_args=(f"--Execute.timeout={TIMEOUT_S}",
                                          f"--IsolatedExecute.check_timeout={TIMEOUT_S}"))
    assert Path(guard.PACKAGE_DIR, "__init__.py").read_bytes() == package_init
    notebooks = {name: nbformat.read(folder / "autograded" / name / LESSON / f"{LESSON}.ipynb", as_version=4)
                 for name in CLASS}
    return grades, notebooks, folder


def output_text(c) -> str:
    parts = []
    for o in c.get("outputs", []):
        parts += [o.get("text", ""), o.get("ename", ""), o.get("evalue", ""),
                  str(o.get("data", {}).get("text/plain", ""))]
    return "\n".join(parts)


def find_cell(nb, key: str):
    for c in nb.cells:
        if c.metadata.get("nbgrader", {}).get("grade_id") == key or (key.startswith("#") and key in c.source):
            return c
    raise KeyError(key)


@pytest.mark.parametrize("name", sorted(CLASS))
def test_bad_submission_loses_exactly_its_own_cells(graded, name):
    """Does this submission lose exactly the cells its bad code is in, and say why there?"""
    grades, notebooks, _ = graded
    spec = CLASS[name]
    lost = {g.cell for g in grades[name] if g.score != g.max_score}
    assert lost == spec["loses"], grading.score_table(grades[name])
    for key, phrase in spec["says"].items():
        text = output_text(find_cell(notebooks[name], key))
        assert phrase in text, f"{name}, {key}: {phrase!r} not in\n{text[:3000]}"


def test_the_course_folder_is_untouched(graded):
    """Did no submission write into the course (config, gradebook still there and unchanged)?"""
    _, _, folder = graded
    assert (folder / "gradebook.db").exists()
    assert (folder / "nbgrader_config.py").read_bytes() == (course.ROOT / "nbgrader_config.py").read_bytes()


def test_messages_stay_short(graded):
    """Is every verdict in the autograded notebooks short enough to read (huge errors cut)?"""
    _, notebooks, _ = graded
    for name, nb in notebooks.items():
        for c in nb.cells:
            if c.metadata.get("nbgrader", {}).get("grade"):
                assert len(output_text(c)) < 6000, (name, c.metadata.nbgrader.grade_id)


AGAIN = ("reference", "naive", "forges_the_verdict", "function_exits")


def test_a_second_autograde_gives_the_same_scores_and_verdicts(graded, tmp_path):
    """Does grading some of the same submissions again give the same scores and the same words?"""
    grades, notebooks, _ = graded
    again = grading.grade_notebooks(LESSON, {name: submission(**CLASS[name]) for name in AGAIN}, tmp_path,
                             extra_args=(f"--Execute.timeout={TIMEOUT_S}",
                                         f"--IsolatedExecute.check_timeout={TIMEOUT_S}"))
    for name in AGAIN:
        assert again[name] == grades[name], name
        nb = nbformat.read(tmp_path / "autograded" / name / LESSON / f"{LESSON}.ipynb", as_version=4)
        first = [output_text(c) for c in notebooks[name].cells if c.metadata.get("nbgrader", {}).get("grade")]
        second = [output_text(c) for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
        assert first == second, name
