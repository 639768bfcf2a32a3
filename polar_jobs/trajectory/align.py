"""Does a prompt continue a trace? Walk the trace's turns through the prompt, segment by segment (pure).

A trace is its first prompt, then for each member call the tokens it sampled and the interstitial
that followed (tool results, template glue, the next generation prompt). A later prompt continues
the trace when it starts with the first prompt, re-renders each sampled reply as the same
conversation (``rerender.same_conversation``) up to its end-of-turn token, and repeats each
interstitial exactly. What follows the last reply is the new interstitial.
"""

from __future__ import annotations

from dataclasses import dataclass

from polar_jobs.trajectory.rerender import Decoder, classify, first_difference, same_conversation, window


@dataclass(frozen=True)
class Turn:
    sampled: list[int]
    interstitial: list[int] | None  # what followed this reply in the trace; None for the last turn


@dataclass(frozen=True)
class Alignment:
    matched: bool
    rest: int = 0  # where the new interstitial starts in the prompt (when matched)
    turn: int = -1  # the turn that did not match (-1: the first prompt)
    position: int = 0  # first token of the prompt that differs from the trace
    cause: str = ""
    expected: str = ""
    found: str = ""


def align(first_prompt: list[int], turns: list[Turn], prompt: list[int], eot: int | None,
          decode: Decoder | None, start_turn: int = 0, start: int | None = None) -> Alignment:
    """Match ``prompt`` against the trace; ``start_turn``/``start`` skip turns already known to match."""
    if start is None:
        if prompt[:len(first_prompt)] != first_prompt:
            at = first_difference(first_prompt, prompt)
            return _fail(-1, at, first_prompt, prompt, at, at, decode)
        start = len(first_prompt)
    position = start
    for index in range(start_turn, len(turns)):
        turn = turns[index]
        ended = eot is not None and turn.sampled[-1:] == [eot]
        body = turn.sampled[:-1] if ended else turn.sampled
        try:
            end = prompt.index(eot, position) if eot is not None else -1
        except ValueError:
            end = -1
        if end < 0:
            return Alignment(False, turn=index, position=position, cause="the reply never ends: no end-of-turn "
                             "token follows it in the new prompt", expected=window(body, len(body), decode),
                             found=window(prompt, position, decode))
        rendered = prompt[position:end]
        if not same_conversation(body, rendered, decode):
            at = first_difference(body, rendered)
            return _fail(index, position + at, body, rendered, at, at, decode)
        after = end + 1 if ended else end  # a truncated reply's end-of-turn token belongs to the interstitial
        if turn.interstitial is None:
            return Alignment(True, rest=after)
        if prompt[after:after + len(turn.interstitial)] != turn.interstitial:
            at = first_difference(turn.interstitial, prompt[after:])
            return _fail(index, after + at, turn.interstitial, prompt[after:], at, at, decode)
        position = after + len(turn.interstitial)
    return Alignment(True, rest=position)


def _fail(turn: int, position: int, expected_ids: list[int], found_ids: list[int], at_expected: int,
          at_found: int, decode: Decoder | None) -> Alignment:
    expected, found = window(expected_ids, at_expected, decode), window(found_ids, at_found, decode)
    if decode is not None:
        cause = classify(decode(expected_ids[max(0, at_expected - 64):at_expected + 512]),
                         decode(found_ids[max(0, at_found - 64):at_found + 512]))
    else:
        cause = "history rewritten: the new prompt differs from the trace"
    return Alignment(False, turn=turn, position=position, cause=cause, expected=expected, found=found)
