"""The prefix_merge builder: every append-only context becomes one trace.

Each completion, in call order, joins the trace whose last prompt is the longest token prefix of
its own prompt, or opens a new trace. Within a trace the sampled tokens keep their ids, logprobs and
loss mask 1; between them the interstitial (tool results, template glue, the next generation prompt)
is taken from the next prompt's own tokenization after the end-of-turn token, with mask 0. Where a
harness rewrote the history (dropped reasoning, re-rendered turns) the trace ends, the break is
reported with its cause, and the rest is re-segmented into new traces: nothing sampled is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from polar_jobs.store import CapturedCompletion
from polar_jobs.store.delta import pack_ids
from polar_jobs.trajectory import calls
from polar_jobs.trajectory.align import Alignment, Turn, align
from polar_jobs.trajectory.rerender import Decoder
from polar_jobs.trajectory.trace import ChainBreak, Span, Trace


@dataclass
class _Chain:
    index: int
    first: CapturedCompletion
    eot: int | None
    response: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] | None = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    response_messages: list[dict[str, Any]] = field(default_factory=list)
    members: list[CapturedCompletion] = field(default_factory=list)
    tip_packed: bytes = b""
    first_packed: bytes = b""
    last_order: int = 0

    @property
    def tip(self) -> CapturedCompletion:
        return self.members[-1]

    def add(self, completion: CapturedCompletion, interstitial: list[int], order: int) -> None:
        self.response.extend(interstitial)
        self.mask.extend([0] * len(interstitial))
        start = len(self.response)
        self.response.extend(completion.response_ids)
        self.mask.extend([1] * len(completion.response_ids))
        if self.logprobs is not None and completion.logprobs is not None:
            self.logprobs.extend([0.0] * len(interstitial))
            self.logprobs.extend(completion.logprobs)
        else:
            self.logprobs = None  # a trainable position without its logprob: none for the whole trace
        self.spans.append(Span(completion.id, start, len(self.response)))
        if self.members:  # messages between the echoed reply and this call: tool results and the like
            self.response_messages.extend(calls.messages(completion)[len(calls.messages(self.tip)) + 1:])
        self.response_messages.append(calls.reply_message(completion))
        self.members.append(completion)
        self.tip_packed = pack_ids(completion.prompt_ids)
        self.first_packed = self.first_packed or self.tip_packed
        self.last_order = order

    def turns(self) -> list[Turn]:
        """Each member's sampled tokens and the interstitial that followed it in this trace."""
        bounds = [span.start for span in self.spans[1:]] + [None]
        return [Turn(self.response[span.start:span.end], None if nxt is None else self.response[span.end:nxt])
                for span, nxt in zip(self.spans, bounds)]

    def to_trace(self, label: str) -> Trace:
        return Trace(prompt_ids=list(self.first.prompt_ids), response_ids=self.response, loss_mask=self.mask,
                     response_logprobs=self.logprobs, finish_reason=self.tip.finish_reason, spans=self.spans,
                     prompt_messages=calls.messages(self.first), response_messages=self.response_messages,
                     tools=calls.tools(self.first), system_hash=calls.system_hash(self.first.prompt_ids, self.eot),
                     label=label)


@dataclass
class MergeResult:
    traces: list[Trace]
    breaks: list[ChainBreak]
    stats: dict[str, int]


def build_prefix_merge(completions: list[CapturedCompletion], eot: int | None = None,
                       decode: Decoder | None = None) -> MergeResult:
    ordered = calls.usable(completions)
    eot = eot if eot is not None else calls.infer_eot(ordered)
    chains: list[_Chain] = []
    breaks: list[ChainBreak] = []
    pending: list[tuple[_Chain, CapturedCompletion, Alignment, int]] = []  # confirmed if that chain stops
    for order, completion in enumerate(ordered):
        packed = pack_ids(completion.prompt_ids)
        candidates = _longest_tips(chains, packed)
        if candidates:  # fast path: the last prompt is a token prefix; only the last reply to check
            joined, failure = False, None
            for chain in candidates:  # several when one prompt was sent again (a retry, a parallel sample)
                turns = chain.turns()
                result = align(chain.first.prompt_ids, turns, completion.prompt_ids, eot, decode,
                               start_turn=len(turns) - 1, start=len(chain.tip.prompt_ids))
                if result.matched:
                    chain.add(completion, completion.prompt_ids[result.rest:], order)
                    joined = True
                    break
                failure = failure or (chain, result)
            if joined:
                continue
            breaks.append(_break(failure[0], completion, failure[1]))
        elif _extend_relative(chains, completion, packed, eot, decode, order, pending):
            continue
        fresh = _Chain(index=len(chains), first=completion, eot=eot)
        fresh.add(completion, [], order)
        chains.append(fresh)
    breaks.extend(_break(chain, completion, result) for chain, completion, result, order in pending
                  if chain.last_order < order)  # the old context never went on: its history was rewritten
    labels = _labels(chains)
    traces = [chain.to_trace(labels[chain.index]) for chain in chains]
    stats = {"completions": len(completions), "usable": len(ordered), "traces": len(traces),
             "merged": sum(len(c.members) for c in chains if len(c.members) > 1), "breaks": len(breaks)}
    return MergeResult(traces, sorted(breaks, key=lambda b: b.completion_id), stats)


def _longest_tips(chains: list[_Chain], packed: bytes) -> list[_Chain]:
    """The chains whose last prompt is the longest proper prefix of ``packed`` (oldest first). Only a proper
    prefix: an identical prompt (a retry or a parallel sample) starts its own trace."""
    tips = [chain for chain in chains if len(chain.tip_packed) < len(packed) and packed.startswith(chain.tip_packed)]
    longest = max((len(chain.tip_packed) for chain in tips), default=0)
    return [chain for chain in tips if len(chain.tip_packed) == longest]


def _extend_relative(chains: list[_Chain], completion: CapturedCompletion, packed: bytes, eot: int | None,
                     decode: Decoder | None, order: int, pending: list) -> bool:
    """Slow path: a trace whose first prompt this prompt starts with, its turns re-rendered (a template
    that re-renders earlier turns differently). Extends it when every turn is the same conversation."""
    relatives = sorted((c for c in chains if len(c.first_packed) < len(packed) and packed.startswith(c.first_packed)),
                       key=lambda c: c.last_order, reverse=True)
    failures = []
    for chain in relatives:
        result = align(chain.first.prompt_ids, chain.turns(), completion.prompt_ids, eot, decode)
        if result.matched:
            chain.add(completion, completion.prompt_ids[result.rest:], order)
            return True
        failures.append((chain, result))
    if failures:  # it shares a relative's history and then differs: a break, unless that context goes on
        chain, result = max(failures, key=lambda pair: pair[1].position)
        pending.append((chain, completion, result, order))
    return False


def _break(chain: _Chain, completion: CapturedCompletion, result: Alignment) -> ChainBreak:
    return ChainBreak(completion.id, chain.index, result.position, result.cause, result.expected, result.found)


def _labels(chains: list[_Chain]) -> dict[int, str]:
    """'main' for traces under the system prompt that sampled the most tokens; 'side' for the rest."""
    if not chains:
        return {}
    weight: dict[str, int] = {}
    hashes = {chain.index: calls.system_hash(chain.first.prompt_ids, chain.eot) for chain in chains}
    for chain in chains:
        weight[hashes[chain.index]] = weight.get(hashes[chain.index], 0) + sum(chain.mask)
    main = max(weight, key=weight.get)
    return {index: "main" if value == main else "side" for index, value in hashes.items()}
