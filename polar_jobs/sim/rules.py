"""Rules that pick a policy for a request, and the thread-safe book that holds them.

A rule is `{"match": {...}, "policy": {...}, "times": N?}`. All match keys are
optional and AND-ed; the first matching rule wins; `times` counts down and the
rule is dropped at zero. A `choice` policy is resolved at selection, with its cycle counter
or random generator kept in the rule, so concurrent requests take the options in a fixed
order. The `RuleBook` is owned by one app and guarded by a lock.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

from .policies import PolicyError, default_policy, message_text, resolve_policy, validate_policy

STATE_KEY = "_state"  # per rule: choice counters and generators (never in snapshots)
MATCH_KEYS = ("contains", "any_contains", "last_role", "has_tools", "tool", "model")


def tool_names(tools: Any) -> set[str]:
    """Names of the offered function tools."""
    names = set()
    for tool in tools or []:
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            names.add(fn["name"])
    return names


def matches(match: dict, request: dict) -> bool:
    """Whether a rule's `match` holds for a chat request body."""
    messages = request.get("messages") or []
    last = messages[-1] if messages else {}
    checks = {
        "contains": lambda v: v in message_text(last),
        "any_contains": lambda v: any(v in message_text(m) for m in messages),
        "last_role": lambda v: isinstance(last, dict) and last.get("role") == v,
        "has_tools": lambda v: bool(request.get("tools")) == bool(v),
        "tool": lambda v: v in tool_names(request.get("tools")),
        "model": lambda v: request.get("model") == v,
    }
    return all(checks[key](value) for key, value in match.items())


def validate_rule(rule: Any) -> dict:
    """Check one rule's shape; return a private copy."""
    if not isinstance(rule, dict) or not isinstance(rule.get("match", {}), dict):
        raise PolicyError("rule must be an object with an object 'match'")
    unknown = set(rule.get("match", {})) - set(MATCH_KEYS)
    if unknown:
        raise PolicyError(f"unknown match keys: {sorted(unknown)}")
    validate_policy(rule.get("policy"))
    times = rule.get("times")
    if times is not None and (not isinstance(times, int) or isinstance(times, bool) or times < 1):
        raise PolicyError("'times' must be a positive integer")
    return copy.deepcopy({"match": rule.get("match", {}), "policy": rule["policy"], "times": times})


class RuleBook:
    """An ordered, lock-guarded list of rules."""

    def __init__(self, rules: list | None = None):
        self._lock = threading.Lock()
        self._rules: list[dict] = [{**validate_rule(r), STATE_KEY: {}} for r in rules or []]

    def add(self, rules: list, replace: bool = False) -> None:
        """Append rules (or replace all of them)."""
        if not isinstance(rules, list):
            raise PolicyError("rules must be a JSON list")
        checked = [validate_rule(r) for r in rules]
        for rule in checked:
            rule[STATE_KEY] = {}
        with self._lock:
            self._rules = checked if replace else self._rules + checked

    def clear(self) -> None:
        """Drop every rule."""
        with self._lock:
            self._rules = []

    def snapshot(self) -> list[dict]:
        """A copy of the current rules."""
        with self._lock:
            return [{key: copy.deepcopy(value) for key, value in rule.items() if key != STATE_KEY}
                    for rule in self._rules]

    def select(self, request: dict) -> dict:
        """The policy for a request: first matching rule (consuming one use), else the default."""
        with self._lock:
            for index, rule in enumerate(self._rules):
                if matches(rule["match"], request):
                    if rule["times"] is not None:
                        rule["times"] -= 1
                        if rule["times"] == 0:
                            del self._rules[index]
                    return copy.deepcopy(resolve_policy(rule["policy"], rule[STATE_KEY]))
        return default_policy(request.get("messages") or [])
