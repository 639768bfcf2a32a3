"""Group-relative advantages (GRPO, Dr. GRPO, RLOO) and their session-level variant, as pure functions.

A *group* is the samples of one prompt (one ``TaskRequest`` run ``num_samples`` times). Polar leaves
advantages to the trainer; these functions exist so an exporter or a trainer bridge can compute them the
same way everywhere, and so that a session split into several traces can be normalised per session.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real
from typing import Literal, Sequence

Method = Literal["grpo", "dr_grpo", "rloo"]
Level = Literal["session", "trace"]

METHODS: tuple[str, ...] = ("grpo", "dr_grpo", "rloo")
LEVELS: tuple[str, ...] = ("session", "trace")
DEFAULT_EPS = 1e-6
"""Added to the std in ``grpo`` (verl's ``epsilon`` and slime's constant have the same value)."""


@dataclass(frozen=True)
class GroupAdvantages:
    """One group's advantages, in the order of its rewards, with the group's reward statistics."""

    advantages: list[float]
    mean: float
    std: float  # population std (ddof=0) of the rewards, whatever the method
    no_signal: bool  # every reward equal: all advantages are 0 and the group teaches nothing


@dataclass(frozen=True)
class SessionReward:
    """A session given by its reward and its number of traces (every trace shares the reward)."""

    reward: float
    n_traces: int


@dataclass(frozen=True)
class TraceAdvantages:
    """Per session, per trace: the advantage and the loss weight; ``group`` is the computation behind them."""

    advantages: list[list[float]]
    weights: list[list[float]]
    group: GroupAdvantages


def group_advantages(rewards: Sequence[float], *, method: Method = "grpo", eps: float = DEFAULT_EPS) -> GroupAdvantages:
    """Advantages of one group of rewards.

    - ``grpo``: ``(r - mean) / (std + eps)`` with the **population** std (ddof=0), so rewards
      ``[1, 0, 0, 1]`` give ``[1, -1, -1, 1]`` (eps aside). verl (``compute_grpo_outcome_advantage``,
      ``torch.std``) and slime (``rewards.std(dim=-1)``) use torch's default **sample** std (ddof=1),
      so their advantages are smaller by ``sqrt((n - 1) / n)``; verl also gives a group of one sample
      its raw reward (mean 0, std 1), where this gives 0.
    - ``dr_grpo``: ``r - mean``, no std division (Dr. GRPO, Liu et al. 2025).
    - ``rloo``: ``r_i`` minus the mean of the *other* rewards (leave-one-out), i.e.
      ``n / (n - 1) * (r_i - mean)``; a group of one sample gives 0.

    A group whose rewards are all equal is ``no_signal`` and gets exact zeros under every method.
    Raises ValueError on an empty group, a boolean, a non-number or a non-finite reward, an unknown
    method, or a negative or non-finite eps.
    """
    if method not in METHODS:
        raise ValueError(f"unknown advantage method {method!r}; expected one of {', '.join(METHODS)}")
    if isinstance(eps, bool) or not isinstance(eps, Real) or not math.isfinite(eps) or eps < 0:
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    values = _checked_rewards(rewards)
    n = len(values)
    mean = math.fsum(values) / n
    std = math.sqrt(math.fsum((r - mean) ** 2 for r in values) / n)
    # std can underflow to 0 for rewards that differ only in subnormal digits: no usable signal either
    if min(values) == max(values) or std == 0.0:
        return GroupAdvantages(advantages=[0.0] * n, mean=mean, std=std, no_signal=True)
    if method == "grpo":
        advantages = [(r - mean) / (std + eps) for r in values]
    elif method == "dr_grpo":
        advantages = [r - mean for r in values]
    else:
        total = math.fsum(values)
        advantages = [r - (total - r) / (n - 1) for r in values]
    return GroupAdvantages(advantages=advantages, mean=mean, std=std, no_signal=False)


def trace_advantages(
    sessions: Sequence[list[float] | SessionReward],
    *,
    level: Level = "session",
    method: Method = "grpo",
    eps: float = DEFAULT_EPS,
) -> TraceAdvantages:
    """Advantages for every trace of a group of sessions (the samples of one prompt).

    Each session is either a list of its per-trace rewards or a ``SessionReward(reward, n_traces)``;
    a tuple is rejected, since ``(1.0, 3)`` could mean either.

    - ``level="session"``: the group is the sessions. A session's reward is its ``SessionReward.reward``,
      or the mean of its per-trace rewards. Every trace of a session gets the session's advantage and
      the loss weight ``1 / n_traces``, so **the weights of a session sum to 1** and a session split into
      many traces (compactions, sub-agents) counts as much as a session that is one trace.
    - ``level="trace"``: every trace is a sample of its own in the group, with weight 1. This is what a
      trainer does when it is handed the traces with no session structure.

    Raises ValueError on an empty group, a session with no traces, or any reward ``group_advantages``
    rejects.
    """
    if level not in LEVELS:
        raise ValueError(f"unknown advantage level {level!r}; expected one of {', '.join(LEVELS)}")
    if not sessions:
        raise ValueError("a group needs at least one session")
    per_trace = [_trace_rewards(session, index) for index, session in enumerate(sessions)]
    sizes = [len(rewards) for rewards in per_trace]
    if level == "trace":
        group = group_advantages([r for rewards in per_trace for r in rewards], method=method, eps=eps)
        flat = iter(group.advantages)
        advantages = [[next(flat) for _ in range(size)] for size in sizes]
        weights = [[1.0] * size for size in sizes]
    else:
        session_rewards = [
            float(session.reward) if isinstance(session, SessionReward) else math.fsum(rewards) / len(rewards)
            for session, rewards in zip(sessions, per_trace, strict=True)
        ]
        group = group_advantages(session_rewards, method=method, eps=eps)
        advantages = [[advantage] * size for advantage, size in zip(group.advantages, sizes, strict=True)]
        weights = [[1.0 / size] * size for size in sizes]
    return TraceAdvantages(advantages=advantages, weights=weights, group=group)


def _checked_rewards(rewards: Sequence[float]) -> list[float]:
    if isinstance(rewards, (str, bytes)) or not isinstance(rewards, Sequence):
        raise ValueError(f"rewards must be a sequence of numbers, got {type(rewards).__name__}")
    if not rewards:
        raise ValueError("a group needs at least one reward")
    values = []
    for index, value in enumerate(rewards):
        if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
            raise ValueError(f"rewards[{index}] must be a finite number, got {value!r}")
        values.append(float(value))
    return values


def _trace_rewards(session: list[float] | SessionReward, index: int) -> list[float]:
    """A session's per-trace rewards (checked here so errors name the session)."""
    if isinstance(session, SessionReward):
        n = session.n_traces
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"sessions[{index}]: n_traces must be an int >= 1, got {n!r}")
        rewards = [session.reward] * n
    elif isinstance(session, list):
        if not session:
            raise ValueError(f"sessions[{index}] has no traces")
        rewards = session
    else:
        raise ValueError(
            f"sessions[{index}] must be a list of per-trace rewards or a SessionReward, got {type(session).__name__}"
        )
    try:
        return _checked_rewards(rewards)
    except ValueError as exc:
        raise ValueError(f"sessions[{index}]: {exc}") from None
