"""Checks every built trace must pass: aligned arrays, mask 1 exactly on sampled tokens, and a token
stream that is the conversation the model saw, segment by segment (pure)."""

from __future__ import annotations

from polar_jobs.store import CapturedCompletion
from polar_jobs.trajectory.align import Turn, align
from polar_jobs.trajectory.rerender import Decoder
from polar_jobs.trajectory.trace import Trace


class InvariantViolation(AssertionError):
    """A built trace is not faithful to its captures: a builder bug, never silently trained on."""


def violations(trace: Trace, by_id: dict[int, CapturedCompletion], eot: int | None,
               decode: Decoder | None = None) -> list[str]:
    """Everything wrong with one trace (empty when it is faithful)."""
    problems: list[str] = []
    length = len(trace.response_ids)
    if len(trace.loss_mask) != length:
        problems.append(f"loss_mask has {len(trace.loss_mask)} entries for {length} response tokens")
    if trace.response_logprobs is not None and len(trace.response_logprobs) != length:
        problems.append(f"response_logprobs has {len(trace.response_logprobs)} entries for {length} tokens")
    expected_mask = [0] * length
    for span in trace.spans:
        completion = by_id[span.completion_id]
        expected_mask[span.start:span.end] = [1] * (span.end - span.start)
        if trace.response_ids[span.start:span.end] != completion.response_ids:
            problems.append(f"completion {completion.id}: sampled ids differ from the captured ones")
        if trace.response_logprobs is not None and trace.response_logprobs[span.start:span.end] != completion.logprobs:
            problems.append(f"completion {completion.id}: logprobs differ from the captured ones")
    if trace.loss_mask != expected_mask:
        problems.append("loss_mask is not 1 exactly on the sampled positions")
    problems.extend(_context_problems(trace, by_id, eot, decode))
    return problems


def _context_problems(trace: Trace, by_id: dict[int, CapturedCompletion], eot: int | None,
                      decode: Decoder | None) -> list[str]:
    """Before each sampled span the trace holds the conversation that completion was prompted with: its
    prompt, walked turn by turn (``align``), ends with exactly the interstitial the trace has there."""
    first = by_id[trace.spans[0].completion_id] if trace.spans else None
    if first is None or trace.prompt_ids != first.prompt_ids or trace.spans[0].start != 0:
        return ["the trace's prompt is not its first completion's prompt"]
    problems = []
    turns: list[Turn] = []
    for previous_span, span in zip(trace.spans, trace.spans[1:]):
        turns.append(Turn(trace.response_ids[previous_span.start:previous_span.end], None))
        current, previous = by_id[span.completion_id], by_id[previous_span.completion_id]
        if current.prompt_ids[:len(previous.prompt_ids)] == previous.prompt_ids:  # earlier turns verified already
            result = align(trace.prompt_ids, turns, current.prompt_ids, eot, decode, start_turn=len(turns) - 1,
                           start=len(previous.prompt_ids))
        else:
            result = align(trace.prompt_ids, turns, current.prompt_ids, eot, decode)
        interstitial = trace.response_ids[previous_span.end:span.start]
        if not result.matched:
            problems.append(f"completion {current.id}: its prompt is not the trace's conversation ({result.cause})")
        elif current.prompt_ids[result.rest:] != interstitial:
            problems.append(f"completion {current.id}: the interstitial is not the rest of its prompt")
        turns[-1] = Turn(turns[-1].sampled, interstitial)
    return problems


def check(trace: Trace, by_id: dict[int, CapturedCompletion], eot: int | None, decode: Decoder | None = None) -> None:
    problems = violations(trace, by_id, eot, decode)
    if problems:
        raise InvariantViolation("; ".join(problems))
