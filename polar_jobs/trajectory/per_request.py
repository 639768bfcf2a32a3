"""The per_request builder: one trace per captured completion (simple, never breaks, re-trains prefixes)."""

from __future__ import annotations

from polar_jobs.store import CapturedCompletion
from polar_jobs.trajectory import calls
from polar_jobs.trajectory.trace import Span, Trace


def build_per_request(completions: list[CapturedCompletion], eot: int | None = None) -> list[Trace]:
    ordered = calls.usable(completions)
    eot = eot if eot is not None else calls.infer_eot(ordered)
    return [
        Trace(
            prompt_ids=list(c.prompt_ids),
            response_ids=list(c.response_ids),
            loss_mask=[1] * len(c.response_ids),
            response_logprobs=list(c.logprobs) if c.logprobs is not None else None,
            finish_reason=c.finish_reason,
            spans=[Span(c.id, 0, len(c.response_ids))],
            prompt_messages=calls.messages(c),
            response_messages=[calls.reply_message(c)],
            tools=calls.tools(c),
            system_hash=calls.system_hash(c.prompt_ids, eot),
        )
        for c in ordered
    ]
