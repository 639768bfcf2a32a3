"""Scripted policies: what the simulated model "samples" for a request.

A policy is a plain dict (see `POLICY_KINDS`); `render_policy` turns it into the
exact text the model would emit before its `<|im_end|>` stop token. A `choice` policy
(`{"kind": "choice", "options": [policy, ...], "mode": "cycle"|"random", "seed": int?}`)
picks one of its options per use; `resolve_policy` does the picking with state the caller
keeps (the `RuleBook` keeps it per rule, under its lock).
"""

from __future__ import annotations

import json
import random
from typing import Any

POLICY_KINDS = ("text", "tool_call", "tool_calls", "reasoning", "reasoning_tool_call", "error", "choice")
CHOICE_MODES = ("cycle", "random")
DEFAULT_SNIPPET = 40


class PolicyError(ValueError):
    """A policy or rule is malformed."""


def param_value(value: Any) -> str:
    """A sampled parameter value: strings verbatim, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def render_call(name: str, arguments: dict) -> str:
    """One `<tool_call>` block in the Qwen3-Coder XML form."""
    params = "".join(
        f"<parameter={key}>\n{param_value(value)}\n</parameter>\n" for key, value in arguments.items()
    )
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


def render_calls(calls: list[dict], preface: str = "") -> str:
    """Several calls, newline-separated, after an optional text preface."""
    blocks = "\n".join(render_call(c["name"], c.get("arguments") or {}) for c in calls)
    return (preface + "\n\n" + blocks) if preface else blocks


def render_think(reasoning: str) -> str:
    """A closed think block as Qwen3 samples it."""
    return f"<think>\n{reasoning}\n</think>\n\n"


def policy_calls(policy: dict) -> list[dict]:
    """The tool calls a policy makes, as [{name, arguments}]."""
    kind = policy["kind"]
    if kind in ("tool_call", "reasoning_tool_call"):
        return [{"name": policy["name"], "arguments": policy.get("arguments") or {}}]
    if kind == "tool_calls":
        return list(policy["calls"])
    return []


def render_policy(policy: dict) -> str:
    """The exact sampled text for a policy (stop token not included)."""
    validate_policy(policy)
    kind = policy["kind"]
    text = policy.get("text") or ""
    if kind == "text":
        return text
    if kind == "reasoning":
        return render_think(policy["reasoning"]) + text
    if kind in ("tool_call", "tool_calls"):
        return render_calls(policy_calls(policy), text)
    if kind == "reasoning_tool_call":
        return render_think(policy["reasoning"]) + render_calls(policy_calls(policy), text)
    if kind == "choice":
        raise PolicyError("a choice policy has no text of its own: resolve it first (resolve_policy)")
    raise PolicyError(f"policy kind {kind!r} has no sampled text")


def validate_policy(policy: Any) -> dict:
    """Check a policy's shape; return it unchanged."""
    if not isinstance(policy, dict) or policy.get("kind") not in POLICY_KINDS:
        raise PolicyError(f"policy must be an object with kind in {POLICY_KINDS}")
    kind = policy["kind"]
    if kind == "choice":
        _validate_choice(policy)
    if kind in ("reasoning", "reasoning_tool_call") and not isinstance(policy.get("reasoning"), str):
        raise PolicyError(f"{kind} policy needs a string 'reasoning'")
    if kind in ("tool_call", "reasoning_tool_call"):
        if not isinstance(policy.get("name"), str) or not isinstance(policy.get("arguments", {}), dict):
            raise PolicyError(f"{kind} policy needs 'name' and object 'arguments'")
    if kind == "tool_calls":
        calls = policy.get("calls")
        if not isinstance(calls, list) or not calls or not all(
            isinstance(c, dict) and isinstance(c.get("name"), str) and isinstance(c.get("arguments", {}), dict)
            for c in calls
        ):
            raise PolicyError("tool_calls policy needs a non-empty 'calls' list of {name, arguments}")
    if kind == "error" and not isinstance(policy.get("status", 500), int):
        raise PolicyError("error policy 'status' must be an integer")
    if "text" in policy and not isinstance(policy["text"], str):
        raise PolicyError("'text' must be a string")
    if not isinstance(policy.get("delay_ms", 0), (int, float)):
        raise PolicyError("'delay_ms' must be a number")
    return policy


def _validate_choice(policy: dict) -> None:
    options = policy.get("options")
    if not isinstance(options, list) or not options:
        raise PolicyError("choice policy needs a non-empty 'options' list of policies")
    for index, option in enumerate(options):
        try:
            validate_policy(option)
        except PolicyError as exc:
            raise PolicyError(f"choice option {index}: {exc}") from None
    if policy.get("mode", "cycle") not in CHOICE_MODES:
        raise PolicyError(f"choice policy 'mode' must be one of {CHOICE_MODES}")
    seed = policy.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise PolicyError("choice policy 'seed' must be an integer")


def resolve_policy(policy: dict, state: dict[str, Any], path: str = "") -> dict:
    """The concrete policy for one use: a `choice` picks an option (recursively), anything else is itself.

    `state` maps each choice's position in the policy tree to its cycle counter or its random
    generator; the caller keeps it between uses (and serializes access to it).
    """
    if policy.get("kind") != "choice":
        return policy
    options = policy["options"]
    if policy.get("mode", "cycle") == "cycle":
        index = state.get(path, 0)
        state[path] = index + 1
        index %= len(options)
    else:
        generator = state.get(path)
        if generator is None:
            generator = state[path] = random.Random(policy.get("seed"))
        index = generator.randrange(len(options))
    chosen = resolve_policy(options[index], state, f"{path}/{index}")
    if "delay_ms" in policy and "delay_ms" not in chosen:
        chosen = {**chosen, "delay_ms": policy["delay_ms"]}
    return chosen


def message_text(message: Any) -> str:
    """Plain text of one message's content (text parts joined)."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def default_policy(messages: list[dict]) -> dict:
    """The deterministic reply when no rule matches."""
    last = messages[-1] if messages else {}
    snippet = message_text(last)[:DEFAULT_SNIPPET]
    if isinstance(last, dict) and last.get("role") == "tool":
        return {"kind": "text", "text": f"Sim summary of tool result: {snippet}"}
    return {"kind": "text", "text": f"Sim reply to: {snippet}"}
