"""Does the tile tracer see exactly the Q·Kᵀ tiles an attention function computes, however it is written?"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from autograder.course import paths as course

from autograder.checks import reference
from autograder.lessons.lesson05.checks import (EQUIVALENCE_CASES, STABILITY_CASES, _SIMULATED, case_inputs,
                                                simulate, stability_tolerance)
from autograder.lessons.lesson05.tracing import Traced, expected_tiles, observe_tiles
from bank import reference_functions


REF = reference_functions("05_flash_attention")


def seed_style(Q, K, V, Br=64, Bc=64, causal=False):
    """Outer loop over Q, np.where mask, Kj.T: the seed's layout."""
    return REF["flash_attention_v2"](Q, K, V, Br=Br, Bc=Bc, causal=causal)


def transposed_first(Q, K, V, Br=64, Bc=64, causal=False):
    """Transpose whole Q and K first, slice columns afterwards, products via np.dot and .dot."""
    n, d = Q.shape
    Qt, Kt = Q.T, np.transpose(K)
    O = np.empty((n, d), np.float32)
    for i0 in range(0, n, Br):
        Qi = Qt[:, i0:i0 + Br].T
        parts = []
        for j0 in range(0, n, Bc):
            if causal and j0 > i0 + Qi.shape[0] - 1:
                break
            block = np.dot(Qi, Kt[:, j0:j0 + Bc]) if j0 % 2 == 0 else Qi.dot(Kt[:, j0:j0 + Bc])
            parts.append(block * np.float32(1 / np.sqrt(d)))
        S = np.concatenate(parts, axis=1)
        if causal:
            S = np.where(np.arange(S.shape[1])[None] > np.arange(i0, i0 + Qi.shape[0])[:, None], -np.inf, S)
        P = np.exp(S - S.max(1, keepdims=True))
        O[i0:i0 + Qi.shape[0]] = (P / P.sum(1, keepdims=True)) @ V[:S.shape[1]]
    return O


def row_by_row(Q, K, V, Br=64, Bc=64, causal=False):
    """One query row at a time (K-block @ q), as a student might write it."""
    n, d = Q.shape
    O = np.empty((n, d), np.float32)
    for i in range(n):
        stop = i + 1 if causal else n
        s = np.concatenate([K[j0:min(j0 + Bc, stop)] @ Q[i] for j0 in range(0, stop, Bc)]) / np.float32(np.sqrt(d))
        p = np.exp(s - s.max())
        O[i] = (p / p.sum()) @ V[:stop]
    return O


def broadcast_multiply(Q, K, V, Br=64, Bc=64, causal=False):
    """Tiles as a broadcast product summed over d, with float64 copies of the blocks."""
    n, d = Q.shape
    O = np.empty((n, d), np.float32)
    for i0 in range(0, n, Br):
        Qi = Q[i0:i0 + Br].astype(np.float64)
        rows = np.arange(i0, i0 + len(Qi))
        S = np.concatenate([(Qi[:, None, :] * K[j0:j0 + Bc].astype(np.float64)[None, :, :]).sum(-1)
                            for j0 in range(0, (rows[-1] + 1) if causal else n, Bc)], axis=1) / np.sqrt(d)
        if causal:
            S = np.where(np.arange(S.shape[1])[None] > rows[:, None], -np.inf, S)
        P = np.exp(S - S.max(1, keepdims=True))
        O[i0:i0 + len(Qi)] = ((P / P.sum(1, keepdims=True)) @ V[:S.shape[1]]).astype(np.float32)
    return O


def iterate_and_split(Q, K, V, Br=64, Bc=64, causal=False):
    """Blocks from np.array_split, rows by iterating (for q in block), products per row with np.inner."""
    n, d = Q.shape
    Q_blocks, K_blocks = np.array_split(Q, range(Br, n, Br)), np.array_split(K, range(Bc, n, Bc))
    O, row = np.empty((n, d), np.float32), 0
    for Qi in Q_blocks:
        for q in Qi:
            parts = [np.inner(Kj, q) for j, Kj in enumerate(K_blocks) if not (causal and j * Bc > row)]
            s = np.concatenate(parts)[: row + 1 if causal else n] / np.float32(np.sqrt(d))
            p = np.exp(s - s.max())
            O[row] = (p / p.sum()) @ V[:len(s)]
            row += 1
    return O


WRITINGS = [REF["flash_attention"], REF["flash_attention_v2"], seed_style, transposed_first, row_by_row,
            broadcast_multiply, iterate_and_split]


@pytest.mark.parametrize("function", WRITINGS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("causal", [False, True])
def test_every_correct_writing_shows_the_same_tiles(function, causal):
    """Do FA-1 order, FA-2 order, transposes, .dot, row loops and broadcast products all count 36 / 64 tiles?"""
    Q, K, V = case_inputs(256, 64, 0)
    seen = observe_tiles(function, Q, K, V, Br=32, Bc=32, causal=causal)
    assert seen.count == (36 if causal else 64)
    assert (seen.tiles == expected_tiles(256, 256, 32, 32, causal)).all()
    np.testing.assert_allclose(seen.result, reference.attention(Q, K, V, causal), atol=1e-5)


def test_tracing_does_not_change_the_result():
    """Is the traced run's output bit-for-bit the untraced output?"""
    Q, K, V = case_inputs(100, 16, 1)
    for causal in (False, True):
        plain = REF["flash_attention_v2"](Q, K, V, Br=7, Bc=13, causal=causal)
        traced = observe_tiles(REF["flash_attention_v2"], Q, K, V, Br=7, Bc=13, causal=causal).result
        assert type(traced) is np.ndarray and np.array_equal(plain, traced)


def test_converting_inputs_loses_the_trace():
    """Does np.asarray / np.array on the inputs show up as zero observed products (not as wrong counts)?"""
    Q, K, V = case_inputs(64, 8, 2)
    for convert in (np.asarray, np.array):
        def converted(Q, K, V, Br=64, Bc=64, causal=False, convert=convert):
            return REF["flash_attention_v2"](convert(Q), convert(K), V, Br=Br, Bc=Bc, causal=causal)
        assert observe_tiles(converted, Q, K, V, Br=16, Bc=16, causal=True).count == 0


def test_products_not_of_q_with_k_are_not_tiles():
    """Are P @ V, Q @ Q.T and scalar products ignored by the tracer?"""
    Q, K, V = case_inputs(32, 4, 3)

    def no_qk(Q, K, V, Br=64, Bc=64, causal=False):
        _ = (Q @ Q.T) * np.float32(2)
        _ = K.T @ K
        return np.zeros_like(V)

    assert observe_tiles(no_qk, Q, K, V, Br=8, Bc=8, causal=False).count == 0


def test_fa1_and_fa2_orders_differ_in_q_block_order():
    """Does the observed order tell FA-1 (Q-blocks interleaved) from FA-2 (one Q-block at a time)?"""
    Q, K, V = case_inputs(64, 8, 4)
    fa1 = observe_tiles(REF["flash_attention"], Q, K, V, Br=16, Bc=16, causal=False).q_block_order()
    fa2 = observe_tiles(REF["flash_attention_v2"], Q, K, V, Br=16, Bc=16, causal=False).q_block_order()
    assert fa2 == sorted(fa2) and fa1 != sorted(fa1)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 70), Br=st.integers(1, 24), Bc=st.integers(1, 24), causal=st.booleans())
def test_reference_computes_exactly_the_expected_tiles(n, Br, Bc, causal):
    """For any n, Br, Bc: does the reference compute exactly the tiles not entirely above the diagonal?"""
    Q, K, V = case_inputs(n, 4, n)
    for function in (REF["flash_attention"], REF["flash_attention_v2"]):
        seen = observe_tiles(function, Q, K, V, Br=Br, Bc=Bc, causal=causal)
        assert (seen.tiles == expected_tiles(n, n, Br, Bc, causal)).all()
        assert not seen.recomputed


@pytest.mark.parametrize("N", [1, 2, 8, 32])
def test_causal_tile_count_is_n_plus_one_over_2n(N):
    """Is the causal share of tiles (N+1)/2N, i.e. 36 of 64 for N = 8?"""
    assert expected_tiles(N * 16, N * 16, 16, 16, True).sum() == N * (N + 1) // 2


def test_traced_slices_know_their_rows():
    """Does a slice of a transposed, reshaped, scaled traced array depend on exactly its own rows?"""
    from autograder.lessons.lesson05.tracing import Tracer, trace

    tracer = Tracer(10, 10)
    Q = trace(np.arange(40, dtype=np.float32).reshape(10, 4), "Q", tracer)
    part = ((Q * np.float32(2)).T[:, 3:6]).T.astype(np.float64)
    assert isinstance(part, Traced) and part._prov["Q"][0].tolist() == [3, 4, 5]
    assert np.reshape(Q, (5, 8))[1]._prov["Q"][0].tolist() == [2, 3]


@pytest.mark.parametrize("mistake", sorted(_SIMULATED))
def test_every_simulated_mistake_shows_on_a_graded_case(mistake):
    """Is each known mistake visible (outside tolerance) on at least one visible equivalence or stability case?"""
    for c in EQUIVALENCE_CASES + STABILITY_CASES:
        Q, K, V = case_inputs(c["n"], c["d"], c["seed"], c.get("inputs", "normal"))
        expected = reference.attention(Q, K, V, c["causal"])
        with np.errstate(all="ignore"):
            got = simulate(Q, K, V, c["Br"], c["Bc"], c["causal"], mistake).astype(np.float64)
        atol = stability_tolerance(Q, K, V) if "inputs" in c else 1e-5
        if not np.all(np.abs(got - expected) <= atol + 1e-5 * np.abs(expected)):
            return
    pytest.fail(f"{mistake} matches the oracle on every visible case")


def test_simulate_refuses_unknown_mistakes():
    """Can the mistake simulator not be run as a correct implementation?"""
    Q, K, V = case_inputs(8, 4, 5)
    with pytest.raises(ValueError):
        simulate(Q, K, V, 4, 4, False, None)
