"""Does lesson 06 work without a GPU: the tables, the pictures, the emulator's reports, the grading on the emulator?"""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import nbformat  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from autograder.lessons.lesson06 import cuda_basics as cb
from autograder.gpu import runtime as gpu  # noqa: E402

LESSON = "06_cuda_basics"


def test_reference_gpus_have_every_fact():
    """Do the T4 and H200 columns name the same facts, and are the derived figures the lesson prints right?"""
    for name, facts in cb.REFERENCE_GPUS.items():
        assert list(facts) == cb.FACT_KEYS, name
    t4, h200 = cb.REFERENCE_GPUS["T4 (Colab)"], cb.REFERENCE_GPUS["H200"]
    assert t4["SM"] * t4["потоков на SM, макс."] == 40_960
    assert h200["SM"] * h200["потоков на SM, макс."] == 270_336


def test_describe_gpu_prints_both_columns(capsys):
    """Does describe_gpu print the T4 and H200 columns (and the student's GPU beside them when there is one; the
    setup cell's choose_cupy says where the kernels run)?"""
    cb.describe_gpu()
    out = capsys.readouterr().out
    assert "T4 (Colab)" in out and "H200" in out and "L2, МиБ" in out
    assert ("ваш:" in out) == gpu.gpu_status()[0]


@pytest.mark.parametrize("draw, kwargs, cells", [
    (cb.plot_ownership_1d, {"n": 20, "block": 8}, 24),          # 3 blocks of 8: 20 used, 4 idle
    (cb.plot_ownership_rows, {"T": 3, "D": 20, "block": 8}, 60),
    (cb.plot_ownership_matmul, {"M": 10, "N": 12, "tile": 4}, 144),  # 3 x 3 tiles of 4 x 4
    (cb.plot_flash_ownership, {"n": 12, "rows_per_block": 4, "kv_tile": 4}, 144 + 3),
    (cb.plot_memory_hierarchy, {}, 4),
    (cb.plot_waves, {"num_blocks": 200, "sm_count": 40, "per_sm": 4}, 320),   # two waves of 160 slots
    (cb.plot_sectors, {"strides": (1, 8)}, 64),                               # 32 sectors per row
    (cb.plot_tile_load, {"threads": 4, "rows": 3, "d": 8}, 24),
])
def test_pictures_draw_one_patch_per_owner(draw, kwargs, cells):
    """Does each picture draw exactly one box per element (or level) it describes?"""
    ax = draw(**kwargs)
    assert len(ax.patches) == cells
    plt.close("all")


def test_idle_threads_are_hatched_in_the_1d_picture():
    """Are the threads past n drawn hatched (they must not touch memory)?"""
    ax = cb.plot_ownership_1d(n=20, block=8)
    assert sum(1 for p in ax.patches if p.get_hatch()) == 4
    plt.close("all")


def test_the_emulator_reports_both_buggy_kernels_as_section_7_says():
    """Section 7: the kernel without a tail guard is stopped at a read past x; the one without a barrier gives the
    right sums and a race report (on any machine: the emulator runs on the CPU)."""
    missing_guard, missing_barrier = cb.BUGGY_KERNELS
    stopped = cb.emulator_report(missing_guard)
    assert "ядро остановлено" in stopped and "за границы" in stopped and "повторов: 24" in stopped, stopped
    assert "(блок (3, 0, 0), поток (232, 0, 0), строка 5)" in stopped, stopped  # as the section's table says
    race = cb.emulator_report(missing_barrier)
    assert race.startswith("результат: 1000, 1000, 1000, 1000 — верный") and "гонка в разделяемой памяти" in race
    assert "поток (128, 0, 0)" in race and "(строка 8)" in race and "строка 11)" in race and "__syncthreads()" in race


@pytest.mark.skipif(gpu.gpu_status()[0], reason="with a GPU the run checks run there (tests/test_gpu_lessons.py)")
def test_autograde_without_gpu_gives_the_reference_full_marks_on_the_emulator(tmp_path):
    """The real nbgrader autograde, on a machine without a GPU: the reference gets every point (its kernels on the PTX
    emulator, in the sandbox), each run verdict saying so; the untouched notebook gets 0."""
    from autograder.course import paths as course
    from helpers import scores_of_reference_and_untouched

    scored = scores_of_reference_and_untouched(LESSON, tmp_path)
    nb = nbformat.read(course.source_notebook(LESSON), as_version=4)
    maxima = {c.metadata.nbgrader.grade_id: c.metadata.nbgrader.points for c in nb.cells
              if c.metadata.get("nbgrader", {}).get("grade")}
    assert scored["reference"] == maxima and sum(maxima.values()) == 15
    assert sum(scored["untouched"].values()) == 0
    graded = nbformat.read(tmp_path / "autograded" / "reference" / LESSON / f"{LESSON}.ipynb", as_version=4)
    verdicts = [str(o.get("text", "")) + str(o.get("data", "")) for c in graded.cells
                if c.metadata.get("nbgrader", {}).get("grade") for o in c.get("outputs", [])]
    assert sum("проверено на эмуляторе GPU" in v for v in verdicts) == 9, verdicts  # 3 kernels x 3 run checks
    assert not any("нужен GPU" in v for v in verdicts), verdicts


def test_section_7_quotes_the_committed_compute_sanitizer_run():
    """The table of section 7 quotes benchmarks/results/sanitizer_vs_emulator_h200.json: the tool's lines, its
    version and date, for the same two kernels."""
    import json

    from autograder.course import paths as course

    run = json.loads((course.ROOT / "benchmarks" / "results" / "sanitizer_vs_emulator_h200.json").read_text("utf-8"))
    text = course.text_source(LESSON).read_text(encoding="utf-8")
    start = text.index("Те же два запуска на H200 курса под `compute-sanitizer`")
    quoted = " ".join(line.lstrip("# ") for line in text[start:text.index("Чего эмулятор не моделирует", start)].splitlines())
    assert run["date"][:10] in quoted and run["compute_sanitizer"].split()[1].rsplit(".", 2)[0] in quoted
    missing_guard, missing_barrier = run["kernels"]
    assert [k["kernel"] for k in run["kernels"]] == list(cb.BUGGY_KERNELS)
    assert "========= ERROR SUMMARY: 0 errors" in missing_guard["sanitizer"] and "ERROR SUMMARY: 0 errors" in quoted
    race = next(line for line in missing_barrier["sanitizer"] if "Race reported" in line)
    hazards = next(line for line in missing_barrier["sanitizer"] if "hazards]" in line)
    assert race.split("Error: ")[1] in quoted and hazards.strip("= ").split("  ")[-1].strip() in quoted



def test_resident_blocks_take_the_smallest_limit_of_the_reference_gpus():
    """Occupancy as section 1 computes it: lesson 09's kernel (255 registers) fits 2 blocks by registers everywhere
    and 1 on a T4 by its 51 KiB of tiles; lesson 11's split kernel: 4 on the H200, 3 on the T4 (shared memory)."""
    fa_t4 = cb.resident_blocks("T4 (Colab)", 128, 255, (128 + 4 * 16) * 136 * 2)
    fa_h200 = cb.resident_blocks("H200", 128, 255, (128 + 4 * 64) * 136 * 2)
    assert fa_t4["регистры"] == fa_h200["регистры"] == 2            # 255 registers are allocated as 256
    assert min(fa_t4.values()) == 1 and min(fa_h200.values()) == 2
    assert min(cb.resident_blocks("H200", 128, 128, 16640).values()) == 4    # __launch_bounds__(128, 4) of lesson 11
    assert min(cb.resident_blocks("T4 (Colab)", 128, 128, 16640).values()) == 3
    assert cb.resident_blocks("H200", 1024, 16)["потоки"] == 2 and cb.resident_blocks("H200", 32, 16)["блоков на SM"] == 32
    assert cb.waves(200, 40, 4) == 1.25


def test_sectors_banks_and_kernel_names():
    """Sections 3, 4 and 6: sectors of a warp's load, banks and conflicts, extern "C" names."""
    assert [cb.sectors_touched(s) for s in (1, 2, 4, 8, 32)] == [4, 8, 16, 32, 32]
    assert list(cb.bank_of([0, 4, 124, 128, 132])) == [0, 1, 31, 0, 1]
    assert cb.conflict_degree(4 * 32 * np.arange(8)) == 8           # a column of 32-float rows: one bank
    assert cb.conflict_degree(4 * 33 * np.arange(32)) == 1          # padded to 33: 32 banks
    assert cb.conflict_degree(np.zeros(32, dtype=int)) == 1         # one word for all: a broadcast
    assert cb.conflict_degree(2 * 64 * np.arange(8)) == 8           # lesson 09: f16 rows of D = 64
    assert cb.conflict_degree(2 * 72 * np.arange(8)[:, None] + 4 * np.arange(4)) == 1   # D + 8: ldmatrix rows
    fig = cb.plot_banks(rows=8, row_floats=32, pads=(0, 1))
    assert [len(ax.patches) for ax in fig.axes] == [8 * 32, 8 * 33]
    plt.close("all")
    names = cb.kernel_names('__global__ void f(float* x) {}\nextern "C" __global__ void g(float* x) {}')
    assert names[1] == "g" and names[0] != "f" and "f" in names[0]
