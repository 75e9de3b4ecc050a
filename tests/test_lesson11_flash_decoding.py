"""Lesson 11 without a GPU: the case builder, the oracle, and the benchmark figures the notebook quotes."""
import json
import math

import numpy as np
import pytest

from autograder.course import paths as course
from autograder.lessons.lesson11.checks import (GPU_SPLITS, GPU_VISIBLE, LARGE, SPLITS, VISIBLE, make_case,
                                                merged, oracle, split_bounds)

LESSON = "11_flash_decoding"


@pytest.mark.parametrize("c", list(VISIBLE + SPLITS + LARGE + GPU_VISIBLE + GPU_SPLITS))
def test_cases_hide_stale_data_where_a_wrong_read_would_find_it(c):
    """Does every case keep NaN/inf (or garbage) past each length and in the table's extra entries, and
    does the float64 oracle still give a finite answer that no split count changes?"""
    keys = ("B", "Hq", "Hkv", "d", "page_size", "lengths", "seed", "shared", "q_scale", "keys_away", "stale_nan")
    q, k, v, table, lengths = make_case(**{key: c[key] for key in keys if key in c})
    ps = k.shape[1]
    for b, n in enumerate(lengths):
        pages = -(-int(n) // ps)
        assert np.isfinite(k[table[b, :pages]].reshape(-1, *k.shape[2:])[:n]).all()
        if c.get("stale_nan", True):
            assert not np.isfinite(k[table[b, pages:]]).any()          # stale table entries: NaN/inf pages
            if n % ps:
                assert not np.isfinite(k[table[b, pages - 1], n % ps:]).any()
    want = oracle(q, k, v, table, lengths)
    assert np.isfinite(want).all()
    for s in (2, 3, 50):
        assert np.allclose(oracle(q, k, v, table, lengths, s), want, atol=1e-12)


def test_shared_cases_share_a_page():
    q, k, v, table, lengths = make_case(3, 8, 1, 32, 5, [11, 10, 1], seed=1, shared=True)
    assert table[0, 0] == table[1, 0]
    assert len(set(table[0, :3]) | set(table[1, :2])) == 4


def test_split_bounds_are_contiguous_groups_of_ceil_pages():
    assert split_bounds(10, 3) == [(0, 4), (4, 8), (8, 10)]
    assert split_bounds(2, 5) == [(0, 1), (1, 2), (2, 2), (2, 2), (2, 2)]


def test_merge_of_all_empty_parts_is_zero_and_minus_inf():
    o, lse = merged(np.zeros((3, 2, 4)), np.full((3, 2), -np.inf))
    assert (o == 0).all() and (lse == -np.inf).all()


def test_oracle_is_softmax_attention_with_gqa():
    q, k, v, table, lengths = make_case(2, 4, 2, 8, 3, [7, 4], seed=5)
    b, h = 0, 3
    t = np.arange(lengths[b])
    K = k[table[b, t // 3], t % 3, h // 2].astype(np.float64)
    V = v[table[b, t // 3], t % 3, h // 2].astype(np.float64)
    s = K @ q[b, h] / math.sqrt(8)
    p = np.exp(s - s.max())
    assert np.allclose(oracle(q, k, v, table, lengths)[b, h], p @ V / p.sum())


def test_the_notebook_quotes_the_committed_benchmark():
    """Is the data cell of the notebook the committed JSON, rounded to 3 significant digits?"""
    measured = json.loads((course.ROOT / "benchmarks" / "results" / "decode_kernels_h200.json").read_text())
    source = course.text_source(LESSON).read_text(encoding="utf-8")
    start = source.index("BENCH_DECODE_H200 = {")
    ns = {}
    exec(source[start:source.index("\n# %%", start)], ns)
    quoted = ns["BENCH_DECODE_H200"]
    for key in ("device", "sm_count", "date", "command", "versions"):
        assert quoted[key] == measured[key], key
    for got, row in zip(quoted["rows"], measured["rows"], strict=True):
        for key, value in got.items():
            assert value == pytest.approx(row[key], rel=5e-3), (key, row["B"], row["L"])
    for got, row in zip(quoted["splits_sweep"], measured["splits_sweep"], strict=True):
        assert got["share"] == pytest.approx(row["share"], rel=5e-3)


def test_the_notebooks_data_cell_is_what_the_cell_script_prints():
    """benchmarks/decode_lesson_cell.py prints the lesson's BENCH_DECODE_H200 from the committed JSON, character for
    character: after a new run of decode_kernels.py its output is what to paste."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("decode_lesson_cell", course.ROOT / "benchmarks" / "decode_lesson_cell.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    source = course.text_source(LESSON).read_text(encoding="utf-8")
    start = source.index("BENCH_DECODE_H200 = {")
    measured = json.loads(script.DEFAULT.read_text(encoding="utf-8"))
    assert source[start:source.index("\n\n# %%", start)] == script.cell_text(measured)


def test_the_gpu_part_makes_it_a_gpu_lesson_and_the_numpy_part_needs_none():
    """Is lesson 11 graded with the GPU lessons (--only-gpu grades both parts there), its NumPy checks and
    the compile check runnable anywhere, and its run checks uncapped GPU checks?"""
    from autograder.checks.core import lesson_checks

    checks = lesson_checks(LESSON)
    assert course.is_gpu_lesson(LESSON)
    gpu_run = {k for k, c in checks.items() if c.needs_gpu}
    assert gpu_run == {"lesson11.gpu_equivalence", "lesson11.gpu_splits", "lesson11.gpu_memory", "lesson11.gpu_bounds",
                       "lesson11.gpu_speed"}
    assert all(checks[k].memory_limit_gib is None for k in gpu_run)
    assert not checks["lesson11.gpu_compiles"].needs_gpu


@pytest.mark.skipif(__import__("autograder.gpu.runtime", fromlist=["gpu_status"]).gpu_status()[0],
                    reason="with a GPU the run checks really run")
def test_without_a_gpu_the_run_checks_run_on_the_emulator_and_the_timed_one_says_it_needs_a_gpu():
    from autograder.checks.core import get_check
    from autograder.gpu import runtime
    from autograder.notebook import run

    for check_id in ("lesson11.gpu_equivalence", "lesson11.gpu_splits", "lesson11.gpu_memory", "lesson11.gpu_bounds",
                     "lesson11.gpu_speed"):
        result = run(check_id, lambda *a, **k: None)
        assert not result.passed and result.score == 0, check_id
        if check_id == "lesson11.gpu_speed":
            assert result.message.startswith("нужен GPU") and "измеряет время" in result.message, result.message
        else:
            assert "проверено на эмуляторе GPU" in result.message, result.message
    assert not runtime.scores_without_gpu(get_check("lesson11.gpu_speed"))



def test_a_right_merge_in_float64_fails_on_its_dtype_and_names_no_mistake():
    """Found by a student trial: the dtype failure used to add a wrong «known mistake» (lse = max lse_s)."""
    from autograder.notebook import run

    def merge_float64(o_parts, lse_parts):  # right, but computed and returned in float64
        import numpy as np

        lse_parts = lse_parts.astype(np.float64)
        m = lse_parts.max(axis=0)
        safe = np.where(np.isfinite(m), m, 0.0)
        w = np.exp(lse_parts - safe)
        total = w.sum(axis=0)
        o = np.einsum("s...,s...d->...d", w, o_parts) / np.where(total > 0, total, 1.0)[..., None]
        lse = np.where(total > 0, safe + np.log(np.where(total > 0, total, 1.0)), -np.inf)
        return o, lse

    result = run("lesson11.merge", merge_float64)
    assert not result.passed and "float32" in result.message and result.mistake is None, result.message


def test_bytes_without_the_element_size_are_named_as_such():
    """Found by a student trial: with 2-byte elements "K only" and "elements, not bytes" give the same number."""
    from autograder.notebook import run

    def elements_not_bytes(L, Hq, Hkv, d, bytes_per_element):
        return 2 * L * Hkv * d, 4 * L * Hq * d

    result = run("lesson11.traffic", elements_not_bytes)
    assert not result.passed and "забыт размер элемента" in result.message, result.message


@pytest.mark.skipif(__import__("autograder.gpu.runtime", fromlist=["gpu_status"]).gpu_status()[0],
                    reason="with a GPU the run checks run there (tests/test_gpu_lessons.py)")
def test_autograde_without_gpu_gives_the_reference_full_marks_but_the_timed_cell(tmp_path):
    """The real nbgrader autograde on a machine without a GPU: the reference's GPU part runs on the PTX emulator and
    scores, but the speed cell (0, «нужен GPU»); the untouched notebook gets 0."""
    import nbformat

    from helpers import scores_of_reference_and_untouched

    scored = scores_of_reference_and_untouched(LESSON, tmp_path)
    nb = nbformat.read(course.source_notebook(LESSON), as_version=4)
    maxima = {c.metadata.nbgrader.grade_id: c.metadata.nbgrader.points for c in nb.cells
              if c.metadata.get("nbgrader", {}).get("grade")}
    assert scored["reference"].pop("test_lesson11_gpu_speed") == 0
    assert scored["reference"] == {cell: points for cell, points in maxima.items() if cell != "test_lesson11_gpu_speed"}
    assert sum(scored["untouched"].values()) == 0



REPORT_NVRTC = """
def merge_partials(*args, **kwargs):
    import os, resource, sys
    nvrtc = sys.modules.get("autograder.gpu.nvrtc")
    facts = {"warmed_up": nvrtc is not None and nvrtc.WARMED_UP[0],
             "address space cap": resource.getrlimit(resource.RLIMIT_AS)[0]}
    raise ValueError("FACTS" + repr(facts) + "FACTS")
"""


@pytest.mark.parametrize("fork", [None, False], ids=["forked", "new process"])
def test_a_numpy_check_of_the_lesson_runs_where_nvrtc_never_compiled(fork):
    """Lesson 11's NumPy checks share their module with the GPU checks, which import NVRTC.  NVRTC's first
    compilation maps 13 GB of address space on a 16-core H200 host: in a NumPy check's worker (4 GiB cap) every
    later allocation failed, and each NumPy check of the lesson was a grader fault on that machine
    (benchmarks/gpu_grading_time.py, 2026-12-04).  The worker warms NVRTC up only for uncapped checks."""
    import cloudpickle

    from autograder.isolation.run import run_check
    from helpers import reported_facts, student

    result = run_check("lesson11.merge", [cloudpickle.dumps(student(REPORT_NVRTC, "merge_partials"))], fork=fork)
    facts = reported_facts(result.message)
    assert facts == {"warmed_up": False, "address space cap": 4 * 2**30}, facts



@pytest.mark.parametrize("variant, table_slots", [("lastblock", None), ("lesson", 2)])
def test_the_decode_candidates_match_the_oracle_on_the_emulator(variant, table_slots):
    """On the PTX emulator posing as a T4, the float64 oracle's answer for every split count, stale NaN slots and
    G = 8 included, and no finding: benchmarks/decode_variant_lastblock.py (issue 30's candidate: one launch, the
    last block merging), and the lesson's own kernel with a slice of ``table_slots`` pages of the block table in
    shared memory (2: a split's pages past the slice come from the table, the path a split of over 512 pages takes)."""
    import math

    from autograder.gpu import runtime

    folder = course.ROOT / "benchmarks"
    source = folder / "decode_variant_lastblock.py"
    keys = ("B", "Hq", "Hkv", "d", "page_size", "lengths", "seed", "shared", "q_scale", "keys_away", "stale_nan")
    cases = [c for c in GPU_VISIBLE if c["lengths"] in ([37, 16], [1, 10, 11])]
    assert len(cases) == 2
    with runtime.stand_in("T4") as cp:
        ns = {"__name__": "decode_variant_lastblock", "__file__": str(source)}
        exec(compile(source.read_text(encoding="utf-8"), str(source), "exec"), ns)
        if variant == "lesson":  # the lesson's wrapper on its kernel with a smaller slice
            ours = ns["SOLUTION_SRC"].replace("#define TABLE_SLOTS 512 ", f"#define TABLE_SLOTS {table_slots} ")
            assert ours != ns["SOLUTION_SRC"]
            wrapper = ns["_solution_cells"]()["paged_decode_gpu"]
            ns = {"cp": cp, "np": np, "math": math, "DECODE_SRC": ours}
            exec(wrapper, ns)
        for c in cases:
            inputs = make_case(**{key: c[key] for key in keys if key in c})
            for splits in (None, 1, 3, 50):
                cp.reset()
                got = cp.asnumpy(ns["paged_decode_gpu"](*(cp.asarray(a) for a in inputs), num_splits=splits))
                assert np.allclose(got, oracle(*inputs, splits or 1), atol=2e-5), (c["lengths"], splits)
                assert cp.findings() == [], (c["lengths"], splits, cp.findings())
