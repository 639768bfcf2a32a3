"""Evaluators by name: the built-ins, ``module:Class`` paths, and the ``polar_jobs.evaluators`` entry points.

``run`` is the one way an evaluation happens: any failure inside an evaluator becomes an
``EvaluationError`` carrying its message, and a result that is not a finite ``Evaluation`` is one too.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from polar_jobs.scoring.base import Evaluation, EvaluationContext, EvaluationError, Evaluator

ENTRY_POINT_GROUP = "polar_jobs.evaluators"
BUILTINS = {
    "session_completed": "polar_jobs.scoring.builtin:SessionCompleted",
    "output": "polar_jobs.scoring.output:OutputEvaluator",
    "swe": "polar_jobs.scoring.swe:SweEvaluator",
}


def resolve(name: str) -> type:
    """The evaluator class for a built-in name, a ``module:Class`` path or an entry-point name."""
    if name in BUILTINS:
        return _load(BUILTINS[name], name)
    if ":" in name:
        return _load(name, name)
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        if entry.name == name:
            try:
                return entry.load()
            except Exception as exc:  # a broken plugin is the plugin's error, named as such
                raise EvaluationError(f"evaluator {name!r} (entry point {entry.value}) failed to load: {exc}") from exc
    known = sorted(BUILTINS) + sorted(e.name for e in entry_points(group=ENTRY_POINT_GROUP))
    raise EvaluationError(f"unknown evaluator {name!r}; known: {', '.join(known)}, or module:Class")


def create(name: str, config: dict[str, Any] | None = None) -> Evaluator:
    """An evaluator instance; config problems surface here, before any session runs."""
    cls = resolve(name)
    try:
        return cls(dict(config or {}))
    except EvaluationError:
        raise
    except Exception as exc:
        raise EvaluationError(f"evaluator {name!r} rejected its config: {type(exc).__name__}: {exc}") from exc


def run(evaluator: Evaluator, context: EvaluationContext) -> Evaluation:
    """Evaluate; never a silent 0: whatever goes wrong is an ``EvaluationError`` with its message."""
    try:
        result = evaluator.evaluate(context)
    except EvaluationError:
        raise
    except Exception as exc:
        raise EvaluationError(f"evaluator {getattr(evaluator, 'name', type(evaluator).__name__)!r} failed: "
                              f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(result, Evaluation):
        raise EvaluationError(f"evaluator returned {type(result).__name__}, not an Evaluation")
    trajectory = context.trajectory
    if result.trace_rewards is not None and trajectory is not None and len(result.trace_rewards) != len(trajectory.traces):
        raise EvaluationError(f"evaluator gave {len(result.trace_rewards)} trace rewards for "
                              f"{len(trajectory.traces)} traces")
    return result


def _load(path: str, name: str) -> type:
    module_name, _, attribute = path.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise EvaluationError(f"evaluator {name!r}: cannot import {path}: {exc}") from exc
