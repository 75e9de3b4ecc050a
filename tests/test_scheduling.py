"""Do the tests that share an expensive session fixture reach one xdist worker, and only they?"""
import re
from pathlib import Path

import conftest

TESTS = Path(__file__).resolve().parent


SHARED_FIXTURE = re.compile(r'@pytest\.fixture\(scope="(session|module)"')


def test_each_one_worker_file_exists_and_builds_a_session_fixture():
    """...itself, or imports one from a helper module of tests/ (tests/class_faults.py: the clean run)."""
    for name in sorted(conftest.ONE_WORKER_FILES):
        text = (TESTS / name).read_text(encoding="utf-8")
        helpers = [TESTS / f"{m}.py" for m in re.findall(r"^from (\w+) import", text, re.M) if (TESTS / f"{m}.py").exists()]
        assert SHARED_FIXTURE.search(text) or any(SHARED_FIXTURE.search(h.read_text("utf-8")) for h in helpers), name


def test_a_one_worker_file_is_one_work_unit_and_other_tests_are_their_own():
    assert conftest.work_unit("tests/test_parallel.py::test_merge_refuses[x]") == "tests/test_parallel.py"
    assert conftest.work_unit("tests/test_parallel.py::test_a") == conftest.work_unit("tests/test_parallel.py::b")
    other = "tests/test_banks.py::test_submission_loses_exactly_its_checks[02_fused_rmsnorm-reference]"
    assert conftest.work_unit(other) == other


def test_a_test_that_runs_the_real_nbgrader_is_end_to_end_whatever_its_name():
    """The fast tier leaves out end-to-end tests; one that grades through nbgrader is one by what it calls
    (lessons 08 and 09's reference-on-the-emulator tests, renamed, had slipped into `make test-fast`)."""
    import test_lesson08_cupy_flash_attention as lesson08
    import test_lesson09_tensor_cores as lesson09

    assert conftest.calls_e2e(lesson08.test_autograde_without_gpu_gives_the_reference_full_marks_on_the_emulator)
    assert conftest.calls_e2e(lesson09.test_autograde_without_gpu_gives_the_reference_full_marks_on_the_emulator)
    assert not conftest.calls_e2e(lesson08.test_oracle_is_per_head_attention)
