"""Does lesson 06's CPU side work without a GPU: the tables, the pictures, the "no GPU" paths?"""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from autograder.lessons.lesson06 import cuda_basics as cb
from autograder.gpu import runtime as gpu  # noqa: E402


def test_reference_gpus_have_every_fact():
    """Do the T4 and H200 columns name the same facts, and are the derived figures the lesson prints right?"""
    for name, facts in cb.REFERENCE_GPUS.items():
        assert list(facts) == cb.FACT_KEYS, name
    t4, h200 = cb.REFERENCE_GPUS["T4 (Colab)"], cb.REFERENCE_GPUS["H200"]
    assert t4["SM"] * t4["потоков на SM, макс."] == 40_960
    assert h200["SM"] * h200["потоков на SM, макс."] == 270_336


def test_describe_gpu_prints_both_columns(capsys):
    """Does describe_gpu print the T4 and H200 columns (and say so when there is no GPU)?"""
    cb.describe_gpu()
    out = capsys.readouterr().out
    assert "T4 (Colab)" in out and "H200" in out and "L2, МиБ" in out
    if not gpu.gpu_status()[0]:
        assert "GPU недоступен" in out


@pytest.mark.parametrize("draw, kwargs, cells", [
    (cb.plot_ownership_1d, {"n": 20, "block": 8}, 24),          # 3 blocks of 8: 20 used, 4 idle
    (cb.plot_ownership_rows, {"T": 3, "D": 20, "block": 8}, 60),
    (cb.plot_ownership_matmul, {"M": 10, "N": 12, "tile": 4}, 144),  # 3 x 3 tiles of 4 x 4
    (cb.plot_flash_ownership, {"n": 12, "rows_per_block": 4, "kv_tile": 4}, 144 + 3),
    (cb.plot_memory_hierarchy, {}, 4),
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
