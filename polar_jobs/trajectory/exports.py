"""Trainer formats from trajectories (pure): slime ``Sample`` rows, verl rows, SkyRL generator output,
and SFT JSONL. Traces of one session share its rollout id; over-long traces are cut to an exact
causal prefix (the whole prompt kept, the response cut), never by trimming the prompt's start."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable

from polar_jobs.trajectory.trace import Trace, Trajectory, TrajectoryStatus

FORMATS = ("slime", "verl", "skyrl", "sft")


def truncate_causal(trace: Trace, max_tokens: int | None) -> Trace | None:
    """The trace cut to ``max_tokens`` total tokens by shortening the response; None if the prompt alone
    does not fit (such a trace cannot be trained on without lying about its context)."""
    if max_tokens is None or len(trace.prompt_ids) + len(trace.response_ids) <= max_tokens:
        return trace
    keep = max_tokens - len(trace.prompt_ids)
    if keep <= 0:
        return None
    spans = [replace(span, end=min(span.end, keep)) for span in trace.spans if span.start < keep]
    return replace(trace, response_ids=trace.response_ids[:keep], loss_mask=trace.loss_mask[:keep],
                   response_logprobs=None if trace.response_logprobs is None else trace.response_logprobs[:keep],
                   spans=spans, finish_reason="length", metadata={**trace.metadata, "truncated_to": max_tokens})


def trace_rewards(trajectory: Trajectory, reward: float | list[float] | None) -> list[float]:
    """One finite reward per trace: an outcome reward copied to every trace, or exactly one per trace."""
    values = [0.0 if reward is None else reward] * len(trajectory.traces) if not isinstance(reward, list) else reward
    if len(values) != len(trajectory.traces):
        raise ValueError(f"{len(values)} trace rewards for {len(trajectory.traces)} traces")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"rewards must be finite numbers, got {value!r}")
    return [float(value) for value in values]


def _kept(trajectory: Trajectory, reward: float | list[float] | None,
          max_tokens: int | None) -> list[tuple[int, Trace, float]]:
    rewards = trace_rewards(trajectory, reward)
    kept = [(index, truncate_causal(trace, max_tokens), rewards[index]) for index, trace in enumerate(trajectory.traces)]
    return [(index, trace, value) for index, trace, value in kept if trace is not None]


def _polar_metadata(trajectory: Trajectory, index: int, trace: Trace) -> dict[str, Any]:
    return {"session_id": trajectory.session_id, "rollout_id": trajectory.rollout_id, "trace_index": index,
            "label": trace.label, "system_hash": trace.system_hash, "completion_ids": trace.completion_ids,
            "status": trajectory.status.value, "builder": trajectory.builder, "finish_reason": trace.finish_reason,
            **trace.metadata}


def slime_samples(trajectory: Trajectory, reward: float | list[float] | None = None, *, group_index: int = 0,
                  start_index: int = 0, reward_key: str = "reward", max_tokens: int | None = None) -> list[dict]:
    """slime ``Sample`` fields; an untrainable trajectory comes out fully masked and marked for removal."""
    rows = []
    for offset, (index, trace, value) in enumerate(_kept(trajectory, reward, max_tokens)):
        trainable = trajectory.trainable
        rows.append({
            "group_index": group_index, "index": start_index + offset, "rollout_id": trajectory.rollout_id,
            "session_id": trajectory.session_id, "prompt": trace.prompt_messages, "response": "",
            "tokens": trace.prompt_ids + trace.response_ids, "response_length": len(trace.response_ids),
            "loss_mask": trace.loss_mask if trainable else [0] * len(trace.loss_mask),
            "rollout_log_probs": trace.response_logprobs, "reward": {reward_key: value},
            "status": _slime_status(trajectory, trace), "remove_sample": not trainable,
            "metadata": {"polar": _polar_metadata(trajectory, index, trace)},
        })
    return rows


def _slime_status(trajectory: Trajectory, trace: Trace) -> str:
    if trajectory.status is TrajectoryStatus.UNTRAINABLE:
        return "aborted"
    return "truncated" if trace.finish_reason == "length" else "completed"


def verl_rows(trajectory: Trajectory, reward: float | list[float] | None = None, *, uid: str | None = None,
              max_tokens: int | None = None) -> list[dict]:
    """verl agent-loop outputs; ``uid`` is the GRPO group key (the task / prompt id)."""
    return [{
        "uid": uid or trajectory.rollout_id, "prompt_ids": trace.prompt_ids, "response_ids": trace.response_ids,
        "response_mask": trace.loss_mask if trajectory.trainable else [0] * len(trace.loss_mask),
        "response_logprobs": trace.response_logprobs, "reward_score": value, "num_turns": trace.num_turns,
        "extra_fields": {"polar": _polar_metadata(trajectory, index, trace)},
    } for index, trace, value in _kept(trajectory, reward, max_tokens)]


def skyrl_output(trajectories: Iterable[tuple[Trajectory, float | list[float] | None, str, int]],
                 max_tokens: int | None = None) -> dict[str, Any]:
    """A SkyRL ``GeneratorOutput``; each entry is (trajectory, reward, instance_id, repetition_id)."""
    output: dict[str, Any] = {"prompt_token_ids": [], "response_ids": [], "rewards": [], "loss_masks": [],
                              "stop_reasons": [], "rollout_logprobs": [], "trajectory_ids": [], "rollout_metrics": {}}
    for trajectory, reward, instance_id, repetition_id in trajectories:
        for _, trace, value in _kept(trajectory, reward, max_tokens):
            output["prompt_token_ids"].append(trace.prompt_ids)
            output["response_ids"].append(trace.response_ids)
            output["rewards"].append(value)
            output["loss_masks"].append(trace.loss_mask if trajectory.trainable else [0] * len(trace.loss_mask))
            output["stop_reasons"].append(trace.finish_reason)
            output["rollout_logprobs"].append(trace.response_logprobs)
            output["trajectory_ids"].append({"instance_id": instance_id, "repetition_id": repetition_id})
    if any(logprobs is None for logprobs in output["rollout_logprobs"]):
        output["rollout_logprobs"] = None  # SkyRL takes logprobs for all sequences or none
    output["rollout_metrics"] = {"num_sequences": len(output["response_ids"]),
                                 "trained_tokens": sum(sum(mask) for mask in output["loss_masks"])}
    return output


def sft_records(trajectory: Trajectory, max_tokens: int | None = None) -> list[dict]:
    """OpenAI messages + tools per trace (the conversation as the model produced it).

    Text-only content becomes one string and ``tools`` is a JSON string: tool schemas differ in shape
    from row to row, and Arrow (``datasets``) needs one type per column.
    """
    return [{
        "messages": [_sft_message(message) for message in trace.prompt_messages + trace.response_messages],
        "tools": json.dumps(trace.tools, ensure_ascii=False),
        "rollout_id": trajectory.rollout_id, "trace_index": index, "label": trace.label,
    } for index, trace, _ in _kept(trajectory, None, max_tokens)]


def _sft_message(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        message = dict(message, content="\n".join(part.get("text", "") for part in content))
    if "reasoning" in message and "reasoning_content" not in message:
        message = {k: v for k, v in message.items() if k != "reasoning"} | {"reasoning_content": message["reasoning"]}
    return message


def write_jsonl(rows: Iterable[dict], path: str | Path) -> int:
    """Write rows as JSON lines; returns how many."""
    count = 0
    with open(path, "w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    return count
