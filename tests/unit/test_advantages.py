"""Group advantages by hand-computed values, and their invariants as hypothesis properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from polar_jobs.scoring.advantages import (DEFAULT_EPS, GroupAdvantages, SessionReward, group_advantages,
                                           trace_advantages)

pytestmark = pytest.mark.unit

# integer-valued rewards keep mean/std exact enough that the properties test the formulas, not rounding
int_rewards = st.lists(st.integers(min_value=-100, max_value=100).map(float), min_size=1, max_size=16)
methods = st.sampled_from(["grpo", "dr_grpo", "rloo"])


def approx_list(values: list[float], tol: float = 1e-9) -> object:
    return pytest.approx(values, abs=tol)


# -- hand-computed values ----------------------------------------------------------------------
def test_grpo_balanced_group():
    result = group_advantages([1, 0, 0, 1])
    assert result.mean == 0.5
    assert result.std == 0.5  # population std
    assert not result.no_signal
    # eps shrinks each advantage by the factor 0.5 / (0.5 + eps), i.e. by ~2e-6
    assert result.advantages == pytest.approx([1, -1, -1, 1], abs=5 * DEFAULT_EPS)
    assert result.advantages == pytest.approx([0.5 / (0.5 + DEFAULT_EPS) * a for a in (1, -1, -1, 1)], abs=1e-12)


def test_grpo_eps_zero_is_exact():
    assert group_advantages([1, 0, 0, 1], eps=0).advantages == [1.0, -1.0, -1.0, 1.0]


def test_grpo_one_of_four():
    result = group_advantages([1, 0, 0, 0])
    std = math.sqrt(0.1875)  # population: (0.75² + 3 * 0.25²) / 4
    assert result.mean == 0.25
    assert result.std == pytest.approx(std, abs=1e-15)
    expected = [0.75 / (std + DEFAULT_EPS)] + [-0.25 / (std + DEFAULT_EPS)] * 3
    assert result.advantages == approx_list(expected, 1e-12)
    assert result.advantages[0] == pytest.approx(math.sqrt(3), abs=1e-5)  # 0.75 / sqrt(0.1875)


def test_dr_grpo_by_hand():
    assert group_advantages([1, 0, 0, 0], method="dr_grpo").advantages == [0.75, -0.25, -0.25, -0.25]
    assert group_advantages([2, 0], method="dr_grpo").advantages == [1.0, -1.0]


def test_rloo_by_hand():
    assert group_advantages([1, 0, 0, 0], method="rloo").advantages == approx_list([1, -1 / 3, -1 / 3, -1 / 3])
    # 3 - (1+2)/2, 1 - (3+2)/2, 2 - (3+1)/2
    assert group_advantages([3, 1, 2], method="rloo").advantages == approx_list([1.5, -1.5, 0.0])


def test_rloo_single_sample_is_zero():
    assert group_advantages([0.7], method="rloo").advantages == [0.0]


@pytest.mark.parametrize("method", ["grpo", "dr_grpo", "rloo"])
@pytest.mark.parametrize("rewards", [[1, 1, 1, 1], [0.0, 0.0], [0.1, 0.1, 0.1], [5]])
def test_all_equal_is_no_signal(method, rewards):
    result = group_advantages(rewards, method=method)
    assert result.no_signal
    assert result.advantages == [0.0] * len(rewards)


def test_result_type():
    assert group_advantages([1, 0]) == GroupAdvantages(
        advantages=[0.5 / (0.5 + DEFAULT_EPS), -0.5 / (0.5 + DEFAULT_EPS)], mean=0.5, std=0.5, no_signal=False
    )


# -- rejections --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "rewards", [[], [1.0, math.nan], [math.inf, 0.0], [-math.inf], [True, 0.0], [False], ["1"], [None]]
)
def test_rejects_bad_rewards(rewards):
    with pytest.raises(ValueError):
        group_advantages(rewards)


@pytest.mark.parametrize("kwargs", [{"method": "ppo"}, {"eps": -1.0}, {"eps": math.nan}])
def test_rejects_bad_options(kwargs):
    with pytest.raises(ValueError):
        group_advantages([1.0, 0.0], **kwargs)


# -- properties --------------------------------------------------------------------------------
@given(int_rewards)
def test_grpo_sums_to_zero(rewards):
    assert math.fsum(group_advantages(rewards).advantages) == pytest.approx(0.0, abs=1e-9)


@given(int_rewards, st.integers(min_value=-1000, max_value=1000))
def test_grpo_shift_invariant(rewards, shift):
    shifted = [r + shift for r in rewards]
    assert group_advantages(shifted).advantages == approx_list(group_advantages(rewards).advantages, 1e-9)


@given(int_rewards, st.floats(min_value=0.1, max_value=100.0))
def test_grpo_scale_invariant_up_to_eps(rewards, scale):
    base = group_advantages(rewards)
    scaled = group_advantages([r * scale for r in rewards])
    assert scaled.no_signal == base.no_signal
    # unequal integers have std > 0.24 for n <= 16, so at scale >= 0.1 eps moves an advantage (|a| < 4) by < 2e-4
    assert scaled.advantages == approx_list(base.advantages, 1e-3)
    exact = group_advantages([r * scale for r in rewards], eps=0)
    assert exact.advantages == approx_list(group_advantages(rewards, eps=0).advantages, 1e-9)


@given(int_rewards)
def test_rloo_sums_to_zero_and_scales_dr_grpo(rewards):
    rloo = group_advantages(rewards, method="rloo").advantages
    assert math.fsum(rloo) == pytest.approx(0.0, abs=1e-9)
    n = len(rewards)
    if n > 1:
        dr = group_advantages(rewards, method="dr_grpo").advantages
        assert rloo == approx_list([n / (n - 1) * a for a in dr], 1e-9)


@given(int_rewards, methods)
def test_no_signal_iff_all_equal(rewards, method):
    result = group_advantages(rewards, method=method)
    assert result.no_signal == (len(set(rewards)) == 1)
    assert len(result.advantages) == len(rewards)


# -- sessions and traces -----------------------------------------------------------------------
def test_session_level_by_hand():
    result = trace_advantages([SessionReward(1.0, 3), [0.0], SessionReward(0.0, 2), [1.0, 1.0]], method="dr_grpo")
    assert result.advantages == [[0.5] * 3, [-0.5], [-0.5] * 2, [0.5] * 2]
    assert result.weights == [[1 / 3] * 3, [1.0], [0.5] * 2, [0.5] * 2]
    assert result.group.mean == 0.5


def test_session_reward_of_a_list_is_its_mean():
    result = trace_advantages([[1.0, 0.0], [0.0]], method="dr_grpo")
    assert result.group.mean == 0.25  # session rewards 0.5 and 0
    assert result.advantages == [[0.25, 0.25], [-0.25]]


def test_trace_level_counts_every_trace():
    # the 3-trace session outweighs the 1-trace one: mean 0.75, not 0.5
    result = trace_advantages([SessionReward(1.0, 3), SessionReward(0.0, 1)], level="trace", method="dr_grpo")
    assert result.group.mean == 0.75
    assert result.advantages == [[0.25] * 3, [-0.75]]
    assert result.weights == [[1.0] * 3, [1.0]]


def test_trace_level_keeps_per_trace_rewards():
    result = trace_advantages([[1.0, 0.0], [0.0, 1.0]], level="trace", method="dr_grpo")
    assert result.advantages == [[0.5, -0.5], [-0.5, 0.5]]


@pytest.mark.parametrize(
    "sessions, kwargs",
    [
        ([], {}),
        ([[]], {}),
        ([SessionReward(1.0, 0)], {}),
        ([SessionReward(math.nan, 2)], {}),
        ([SessionReward(True, 2)], {}),
        ([(1.0, 3)], {}),  # ambiguous: per-trace rewards or (reward, n_traces)?
        ([[1.0, math.inf]], {}),
        ([[1.0]], {"level": "turn"}),
    ],
)
def test_trace_advantages_rejects(sessions, kwargs):
    with pytest.raises(ValueError):
        trace_advantages(sessions, **kwargs)


sessions_strategy = st.lists(
    st.one_of(
        st.lists(st.integers(min_value=0, max_value=4).map(float), min_size=1, max_size=6),
        st.builds(SessionReward, st.integers(min_value=0, max_value=4).map(float), st.integers(1, 6)),
    ),
    min_size=1,
    max_size=8,
)


@given(sessions_strategy, methods)
def test_session_level_properties(sessions, method):
    result = trace_advantages(sessions, level="session", method=method)
    assert len(result.group.advantages) == len(sessions)
    for session_advantages, weights, advantage in zip(result.advantages, result.weights, result.group.advantages):
        assert session_advantages == [advantage] * len(session_advantages)
        assert math.fsum(weights) == pytest.approx(1.0)
        assert len(weights) == len(session_advantages)


@given(sessions_strategy, methods)
def test_trace_level_is_a_flat_group(sessions, method):
    result = trace_advantages(sessions, level="trace", method=method)
    flat = [r for s in sessions for r in (s if isinstance(s, list) else [s.reward] * s.n_traces)]
    expected = group_advantages(flat, method=method).advantages
    assert [a for advantages in result.advantages for a in advantages] == expected
    assert all(w == 1.0 for weights in result.weights for w in weights)
