"""Scoring: the evaluator registry and built-ins (session_completed, output, swe), GRPO advantages.

A plain library: no Flask, no Celery. Commands run in the session's workspace through its runtime.
"""

from polar_jobs.scoring.base import Evaluation, EvaluationContext, EvaluationError, Evaluator, HarnessOutcome
from polar_jobs.scoring.registry import BUILTINS, create, resolve, run

__all__ = ["BUILTINS", "Evaluation", "EvaluationContext", "EvaluationError", "Evaluator", "HarnessOutcome",
           "create", "resolve", "run"]
