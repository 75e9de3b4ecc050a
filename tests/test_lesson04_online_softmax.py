"""Are the online-softmax grader's definitions right, and does the reference obey them for any blocks?"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays

from autograder.course import paths as course

from autograder.lessons.lesson04.checks import (_close, expected_state, random_bounds, softmax_average,
                                                update_mistakes)
from bank import reference_functions


REF = reference_functions("04_online_softmax")


def test_worked_example_matches_the_corrected_seed_figures():
    """Do the definitions give the intermediates in FACTS.md (3.75621, 1.64616, 7.91056, 4.80547; 1.14144)?"""
    v = np.arange(1.0, 9.0).reshape(8, 1)
    s0 = np.array([2, 4, 1, 3, 0, 5, 2, 1.0])
    m, l, acc = expected_state(s0[:4], v[:4])
    assert (m, round(l, 5), round(acc[0], 5)) == (4.0, 1.55300, 3.75621)
    corr = np.exp(4.0 - 5.0)
    assert (round(l * corr, 5), round(acc[0] * corr, 5)) == (0.57132, 1.38183)
    m, l, acc = expected_state(s0, v)
    assert (m, round(l, 5), round(acc[0], 5)) == (5.0, 1.64616, 7.91056)
    assert round(softmax_average(s0, v)[0], 5) == 4.80547
    assert round(softmax_average(np.array([7, 1, 2, 0, 3, 2, 1, 0.0]), v)[0], 5) == 1.14144


def test_close_treats_infinities_exactly():
    """Is 0 not 'close' to -inf, and -inf close to -inf?"""
    assert not _close(0.0, -np.inf) and _close(-np.inf, -np.inf) and not _close(np.nan, np.nan)


@given(n=st.integers(1, 60), seed=st.integers(0, 2**31))
def test_random_bounds_split_the_row_into_nonempty_blocks(n, seed):
    """Does random_bounds cover 0..n-1 exactly once with non-empty consecutive blocks?"""
    bounds = random_bounds(n, np.random.default_rng(seed))
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a < b for a, b in bounds) and all(b == c for (_, b), (c, _) in zip(bounds, bounds[1:]))


scores = arrays(np.float64, st.integers(1, 30), elements=st.one_of(
    st.floats(-1e4, 1e4), st.just(-np.inf)))


@settings(max_examples=60, deadline=None)
@given(s=scores, d=st.integers(1, 4), data=st.data())
def test_reference_state_equals_the_definition_for_any_split_and_order(s, d, data):
    """For any scores (±1e4, -inf), block split and order: is the reference state the invariant's state?"""
    v = np.random.default_rng(len(s)).standard_normal((len(s), d))
    bounds = random_bounds(len(s), np.random.default_rng(data.draw(st.integers(0, 1000))))
    order = data.draw(st.permutations(bounds))
    state = REF["online_softmax_init"](d)
    for a, b in order:
        state = REF["online_softmax_update"](state, s[a:b], v[a:b])
    want = expected_state(s, v)
    assert all(_close(g, w) for g, w in zip(state, want))
    if np.isfinite(s).any():
        assert np.allclose(REF["online_softmax_finalize"](state), softmax_average(s, v))


@settings(max_examples=40, deadline=None)
@given(s=scores, cut=st.integers(0, 30))
def test_reference_merge_of_any_two_parts_is_the_whole(s, cut):
    """Does merging the states of s[:cut] and s[cut:] give the state of s (empty parts included)?"""
    cut = min(cut, len(s))
    v = np.random.default_rng(cut).standard_normal((len(s), 2))

    def state_of(part, values):
        state = REF["online_softmax_init"](2)
        return REF["online_softmax_update"](state, part, values) if len(part) else state

    merged = REF["merge_states"](state_of(s[:cut], v[:cut]), state_of(s[cut:], v[cut:]))
    assert all(_close(g, w) for g, w in zip(merged, expected_state(s, v)))


SITUATIONS = {  # (state before, block scores): the max grows, and the max does not grow
    "grows": ((1.0, 2.0, np.array([1.0, -1.0])), np.array([3.0, 0.5])),
    "stays": ((4.0, 2.0, np.array([1.0, -1.0])), np.array([3.0, 0.5])),
}
VALUES = np.array([[1.0, 2.0], [0.5, -1.0]])


def right_update(before, s, v):
    m, l, acc = before
    m_new = max(m, s.max())
    c, p = np.exp(m - m_new), np.exp(s - m_new)
    return m_new, l * c + p.sum(), acc * c + p @ v


@pytest.mark.parametrize("description", list(update_mistakes(*SITUATIONS["grows"], VALUES)))
def test_each_predicted_update_mistake_differs_from_the_right_state(description):
    """Does every predicted wrong update differ from the right one when the max grows or when it stays?"""
    differs = []
    for before, s in SITUATIONS.values():
        wrong = update_mistakes(before, s, VALUES)[description]
        differs.append(not all(_close(g, w) for g, w in zip(wrong, right_update(before, s, VALUES))))
    assert any(differs)
