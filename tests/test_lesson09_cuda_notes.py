"""Lesson 09's notes on the given C++ and PTX: the NumPy models and the picture (no GPU needed)."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from autograder.lessons.lesson09 import cuda_notes as cn  # noqa: E402


def test_pack_f16x2_puts_lo_in_the_low_half_like_the_given_helper():
    assert cn.pack_f16x2(1.0, -2.0) == 0xC000_3C00
    word = cn.pack_f16x2(0.1, 3.0)
    assert np.array([word], dtype=np.uint32).view(np.float16).tolist() == [np.float16(0.1), np.float16(3.0)]


def test_flush_to_zero_only_touches_subnormals():
    tiny = np.finfo(np.float32).tiny
    out = cn.flush_to_zero([2.0**-130, -(2.0**-140), tiny, 1.0, 0.0])
    assert out.tolist() == [0.0, 0.0, float(tiny), 1.0, 0.0] and np.signbit(out[1])


def test_array_parameter_sizes_pointer_versus_reference():
    assert cn.array_parameter_sizes() == {"float s[4]": 8, "float (&s)[4]": 16}


def test_pipeline_picture_has_a_copy_and_a_compute_box_per_tile():
    ax = cn.plot_cp_async_pipeline(tiles=4)
    assert len(ax.patches) == 8
    plt.close("all")
