import functools
import os
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # tests/bank.py and tests/banks/

# The NVRTC cache of the test session (autograder/gpu/nvrtc.py, cached_compile and ptx): the banks compile
# the same unchanged reference kernels for three architectures in every entry, and the emulator's checks make
# their PTX in every check's fresh process.  Set here, before any test module imports the package, so that this
# process, its check workers (their environment is this one's) and the nbgrader runs of the tests (AUTOGRADER_*
# variables reach the OS sandbox too, which shows the folder read-only: autograder/isolation/sandbox.py) all see
# it; tests/nvrtc_prefill.py fills it with the reference kernels as a run of GPU lessons' tests starts
# (start_nvrtc_prefill).  It lives in .pytest_cache/ (git-ignored, `make clean` removes it): entries are named by
# the compiler, the options and the whole source, so one left from an earlier session is exactly what a compile
# gives.  AUTOGRADER_NVRTC_CACHE= (empty) turns it off; another path moves it.
from autograder.isolation.sandbox import NVRTC_CACHE_ENV as _NVRTC_CACHE  # noqa: E402  (reads no variable)
if _NVRTC_CACHE not in os.environ:
    _folder = Path(__file__).resolve().parent.parent / ".pytest_cache" / "nvrtc"
    try:
        _folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        _folder.chmod(0o700)  # nvrtc.py uses no folder that group or others may write
        os.environ[_NVRTC_CACHE] = str(_folder)
    except OSError:
        pass


# --- scheduling: which tests share an xdist worker ---------------------------------------------------------

#: Files whose tests share one expensive session fixture (a class graded by nbgrader, a JupyterLab with its
#: browser): all of a file's tests go to one xdist worker, which builds the fixture once.  The other tests go
#: one by one to whichever worker is free.  (pytest-xdist's own ``xdist_group`` marks stopped working with
#: pytest 9.2, pytest-dev/pytest-xdist#1386: a group's tests went to both workers and each built the class.)
ONE_WORKER_FILES = {"test_hardening_autograde.py", "test_class_faults.py", "test_parallel.py",
                    "test_sandbox_attacks.py", "test_browser.py", "test_hub.py"}


def work_unit(nodeid: str) -> str:
    """What goes to one worker with a test: its whole file if in :data:`ONE_WORKER_FILES`, else itself."""
    file = nodeid.split("::", 1)[0]
    return file if Path(file).name in ONE_WORKER_FILES else nodeid


@pytest.hookimpl(optionalhook=True)  # pytest without xdist (-p no:xdist) knows no such hook
def pytest_xdist_make_scheduler(config, log):
    """Under ``-n N`` (xdist's default ``--dist load``): work units (:func:`work_unit`) in the order
    :func:`cost_rank` sorts the collection, the costliest first, so that no long test starts last.
    Another ``--dist`` given on the command line is xdist's own."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False  # the work units in collection order: the costliest first (cost_rank)

    class OneWorkerFiles(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return OneWorkerFiles(config, log)


# --- tiers: the markers of pyproject.toml's [tool.pytest.ini_options] ---------------------------------------

_LESSON_FILE = re.compile(r"test_lesson(\d\d)_")


#: Files whose tests are about every lesson at once: the lessons tables and the sentences that list lessons
#: (a new lesson's row or number missing fails them), so `make test-lesson L=NN` runs them for any lesson.
EVERY_LESSON_FILES = {"test_docs.py", "test_lesson_lists.py"}


def lessons_of(item) -> set[str]:
    """The lessons a test is about, as two digits: those of its file (tests/test_lessonNN_*.py) and of its
    ``lesson`` parameter (tests/test_banks.py, test_autograde.py, test_notebooks.py ...); every lesson for the
    files of :data:`EVERY_LESSON_FILES`."""
    if item.path.name in EVERY_LESSON_FILES:
        from autograder.course.paths import text_lessons
        return {lesson[:2] for lesson in text_lessons()}
    found = set()
    match = _LESSON_FILE.match(item.path.name)
    if match:
        found.add(match.group(1))
    callspec = getattr(item, "callspec", None)
    lesson = callspec.params.get("lesson") if callspec is not None else None
    if isinstance(lesson, str) and lesson[:2].isdigit():
        found.add(lesson[:2])
    return found


#: Files whose every test is end to end: each runs nbgrader (generate_assignment, autograde), `course grade` or
#: `course autograde`, builds and installs the published repository, or drives a browser.
E2E_FILES = {"test_autograde.py", "test_hardening_autograde.py", "test_sandbox_attacks.py", "test_parallel.py",
             "test_class_faults.py", "test_class_kills.py", "test_cli_grade.py", "test_nbgrader_batch.py",
             "test_browser.py", "test_publish.py", "test_base_install.py", "test_jobs.py", "test_hub.py"}
#: Single end-to-end tests of files that are otherwise unit tests (by function name).
E2E_TESTS = {
    "test_notebooks.py": {"test_solution_notebook_runs_top_to_bottom_with_every_check_passing",  # a Jupyter kernel
                          "test_built_notebooks_are_current_and_without_outputs",  # check-release: nbgrader
                          "test_a_failed_check_shows_the_verdict_not_the_graders_traceback"},  # a Jupyter kernel
    "test_sandbox.py": {"test_course_grade_of_ones_own_notebook_goes_on_without_the_sandbox_with_one_line"},
    "test_lms_export.py": {"test_course_export_writes_the_three_files_and_says_which_ids_to_fill",  # course export
                           "test_course_export_names_an_unknown_lesson"},  # on a gradebook: ~11 s each
}
#: Calls that make a test end to end wherever it is (the real nbgrader autograde: tests/test_lessonNN_*.py's
#: grading of the reference), found in the test's own source, so a renamed test stays in its tier.
E2E_CALLS = {"grade_notebooks", "scores_of_reference_and_untouched", "nbgrader"}


def calls_e2e(function) -> bool:
    """Whether ``function``'s own body calls one of :data:`E2E_CALLS` (by name or attribute)."""
    code = getattr(function, "__code__", None)
    return code is not None and code.co_firstlineno in _functions_calling_e2e(code.co_filename)


@functools.cache
def _functions_calling_e2e(filename: str) -> frozenset[int]:
    """The first lines (of the decorators, as ``co_firstlineno`` counts them) of the functions in ``filename``
    whose body calls one of :data:`E2E_CALLS`: each file parsed once, not once per collected test."""
    import ast

    try:
        tree = ast.parse(Path(filename).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    return frozenset(min([node.lineno, *(d.lineno for d in node.decorator_list)])
                     for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and any(isinstance(call, ast.Call) and (getattr(call.func, "id", None) in E2E_CALLS
                                                             or getattr(call.func, "attr", None) in E2E_CALLS)
                             for call in ast.walk(node)))


#: Files whose parametrised tests are bank entries (marker ``bank``): in-process, and on the PTX emulator.
BANK_FILES = {"test_banks.py", "test_emulator_banks.py"}
#: Fixtures that build a course with nbgrader: a test that uses one is end to end.
E2E_FIXTURES = {"class_course", "small_course"}


def is_e2e(item) -> bool:
    name = item.path.name
    return (name in E2E_FILES or item.originalname in E2E_TESTS.get(name, ())
            or not E2E_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))
            or calls_e2e(getattr(item, "function", None)))


def pytest_collection_modifyitems(config, items):
    """Mark the tiers: ``e2e`` (:func:`is_e2e`), ``bank`` (the entries of :data:`BANK_FILES`), ``emulator``
    (tests/test_emulator*.py) and
    ``lesson(n="NN")`` for each lesson a test is about: `make test-lesson L=NN` selects them with
    ``-m "lesson(n='NN')"``, `make test-fast` the banks of the lessons touched (tests/touched_lessons.py)."""
    for item in items:
        if is_e2e(item):
            item.add_marker(pytest.mark.e2e)
        if item.path.name.startswith("test_emulator"):
            item.add_marker(pytest.mark.emulator)
        if item.path.name in BANK_FILES and getattr(item, "callspec", None) is not None:
            item.add_marker(pytest.mark.bank)
        for n in sorted(lessons_of(item)):
            item.add_marker(pytest.mark.lesson(n=n))
    # The costliest first (cost_rank; a stable sort: file order within a rank): on 2 cores with 6 xdist workers a
    # long test that starts last leaves the other workers idle at the end.
    items.sort(key=cost_rank)
    if any(lessons_of(item) & set(EMULATOR_HEAVY_LESSONS) and (item.get_closest_marker("e2e") or
                                                              item.get_closest_marker("bank")) for item in items):
        start_nvrtc_prefill()


_PREFILL = []


def start_nvrtc_prefill() -> None:
    """The GPU lessons' reference kernels into the session's NVRTC cache, in the background (tests/nvrtc_prefill.py:
    one per cache however many workers ask; the tests wait on an entry being made rather than compile it again)."""
    import subprocess

    folder = os.environ.get(_NVRTC_CACHE)
    if folder and not _PREFILL:
        _PREFILL.append(subprocess.Popen([sys.executable, str(Path(__file__).with_name("nvrtc_prefill.py")), folder],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL))


def pytest_unconfigure(config):
    for prefill in _PREFILL:
        if prefill.poll() is None:
            prefill.kill()
        prefill.wait()


@pytest.fixture(autouse=True)
def _no_emulator_left_in_place():
    """A notebook's setup cell run in this process (``cp = choose_cupy()`` of a GPU lesson, e.g. through a bank's
    namespace) puts the emulator's stand-in in ``cupy``'s place for good, as it should in a notebook; every test
    starts without it."""
    yield
    from autograder.gpu import runtime

    runtime.stop_using_emulator()



#: The GPU lessons whose checks run on the PTX emulator without a GPU for seconds each: their tests first.
EMULATOR_HEAVY_LESSONS = ("11", "08", "09", "07", "06")


def cost_rank(item) -> tuple[int, int]:
    """How early a test should start: the shared-fixture files, then end-to-end tests, then bank entries and the
    emulator's tests, then the rest; within each, the emulator-heavy lessons first (:data:`EMULATOR_HEAVY_LESSONS`)."""
    if item.path.name in ONE_WORKER_FILES:
        tier = 0
    elif item.get_closest_marker("e2e"):
        tier = 1
    elif item.get_closest_marker("bank") or item.get_closest_marker("emulator"):
        tier = 2
    else:
        tier = 3
    lessons = lessons_of(item) if tier else set()
    heavy = min((EMULATOR_HEAVY_LESSONS.index(n) for n in lessons if n in EMULATOR_HEAVY_LESSONS),
                default=len(EMULATOR_HEAVY_LESSONS))
    return tier, heavy
