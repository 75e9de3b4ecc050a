"""Lesson 03's oracle, mistakes and bounds, tested directly (no worker, no notebook)."""
import numpy as np
import pytest

from autograder.lessons.lesson03 import checks as l03
from autograder.checks import reference


def test_oracle_silu_is_stable_for_huge_arguments():
    """Does the float64 oracle give silu(±1000) = (0, 1000) without any floating-point error?"""
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        values = reference.silu(np.array([-1e4, -1000.0, 0.0, 1000.0, 1e4]))
    assert np.allclose(values, [0.0, 0.0, 0.0, 1000.0, 1e4])


def test_gate_is_the_first_half():
    """Is the oracle silu(x W[:, :I]) * (x W[:, I:]), and different from the swapped variant?"""
    x, w = l03._case_inputs(3, 8, 5, seed=0)
    g, u = x.astype(np.float64) @ w[:, :5], x.astype(np.float64) @ w[:, 5:]
    assert np.allclose(l03._oracle(x, w), g / (1 + np.exp(-g)) * u)
    assert not np.allclose(l03._oracle(x, w), l03._swapped(x, w))


@pytest.mark.parametrize("name", sorted(l03.MISTAKES))
def test_every_known_mistake_differs_from_the_oracle(name):
    """Could each known mistake be told apart from the right answer on the visible case's kind of input?"""
    x, w = l03._case_inputs(16, 64, 32, seed=1)
    assert not np.allclose(l03.MISTAKES[name](x, w), l03._oracle(x, w), atol=1e-3, rtol=1e-3)


def test_memory_bound_is_gemm_output_plus_result():
    """Is the bound three (T, I) float32 arrays plus 15 % and 256 KiB?"""
    assert l03.memory_bound(512, 3072) == int(1.15 * 3 * 512 * 3072 * 4 + 256 * 1024)


def test_large_case_really_overflows_the_naive_formula():
    """Does the large-input case reach |g| > 88.7, where float32 exp overflows?"""
    x, w = l03._case_inputs(64, 512, 256, seed=1, scale=300.0)
    g = x @ w[:, :256]
    assert np.abs(g).max() > 500
    with np.errstate(over="raise"), pytest.raises(FloatingPointError):
        g / (1 + np.exp(-g))
