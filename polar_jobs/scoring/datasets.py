"""SWE dataset rows (SWE-bench, SWE-Gym, SkyRL-v0-293-data) → ``TaskRequest``s for the ``swe`` evaluator.

Row shapes (docs: swe-eval.md §1):
- SWE-bench: every field a string; ``FAIL_TO_PASS``/``PASS_TO_PASS`` are JSON-encoded lists.
- SWE-Gym: the same fields, F2P/P2P real lists, no ``environment_setup_commit``.
- SkyRL-v0-293-data: ``prompt`` (a chat list), ``data_source``, ``ability`` and ``instance``, a nested
  SWE-Gym row whose F2P/P2P may be numpy arrays.

The evaluator gets the instance as a plain JSON-able dict with F2P/P2P as lists; the grader's
``load_instance`` re-applies the same F2P/P2P rules, so a bad row fails here, before any session runs.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any, Callable

from polar_jobs.schemas import AgentSpec, EvaluatorSpec, RuntimeSpec, TaskRequest

DEFAULT_REPO_TEMPLATE = "https://github.com/{repo}.git"
"""Where the repository is cloned from when no ``repo_source`` is given (``{repo}`` is ``owner/name``)."""
DEFAULT_TIMEOUT_S = 3600.0
"""The whole session, as ``TaskRequest``'s own default."""
TEST_LIST_FIELDS = ("FAIL_TO_PASS", "PASS_TO_PASS")
_REQUIRED_FIELDS = ("instance_id", "repo", "base_commit")


def swe_task_request(
    row: dict[str, Any],
    *,
    num_samples: int = 1,
    harness: str = "shell",
    agent_command: str | None = None,
    timeout_seconds: float = DEFAULT_TIMEOUT_S,
    repo_source: Callable[[str], str] | str | None = None,
) -> TaskRequest:
    """One SWE row → a ``TaskRequest`` whose runtime checks out ``base_commit`` and whose evaluator is ``swe``.

    ``repo_source`` maps ``owner/name`` to a clone source: a callable, or a template with ``{repo}``,
    ``{owner}`` and ``{name}`` (e.g. ``"/mirrors/{owner}__{name}"``); by default ``DEFAULT_REPO_TEMPLATE``.
    The shell harness needs ``agent_command`` (``{instruction}`` is substituted by the harness).
    Raises ValueError, naming the instance, for a missing field or a bad or empty F2P.
    """
    instance = _instance(row)
    outer = row if "instance" in row else {}
    data_source = outer.get("data_source") or instance.get("data_source")
    return TaskRequest(
        instruction=_instruction(row, instance),
        num_samples=num_samples,
        timeout_seconds=timeout_seconds,
        runtime=RuntimeSpec(repo=_repo_source(instance["repo"], repo_source), commit=instance["base_commit"]),
        agent=AgentSpec(harness=harness, command=agent_command),
        evaluator=EvaluatorSpec(name="swe", config={"instance": instance}),
        metadata={"instance_id": instance["instance_id"], "repo": instance["repo"], "data_source": data_source},
    )


def load_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a ``.json`` (a list), ``.jsonl`` or ``.parquet`` file, as plain dicts."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".json":
        rows = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(rows, list):
            raise ValueError(f"{path}: expected a JSON list of rows, got {type(rows).__name__}")
    elif suffix == ".jsonl":
        lines = path.read_text(encoding="utf-8").splitlines()
        rows = [json.loads(line) for line in lines if line.strip()]
    elif suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as exc:
            raise ImportError(f"reading {path.name} needs the 'pyarrow' package: pip install pyarrow") from exc
        rows = pq.read_table(path).to_pylist()
    else:
        raise ValueError(f"{path}: unsupported file type {suffix or '(none)'}; expected .json, .jsonl or .parquet")
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(f"{path}: row {index} is a {type(row).__name__}, not an object")
    return rows


def load_task_requests(path: str | Path, **kwargs: Any) -> list[TaskRequest]:
    """``swe_task_request`` for every row of ``path``; ``kwargs`` go to ``swe_task_request``."""
    return [swe_task_request(row, **kwargs) for row in load_rows(path)]


def _instance(row: dict[str, Any]) -> dict[str, Any]:
    """The row's SWE instance (flat, or nested under ``instance``) as a plain JSON-able dict, F2P/P2P as lists."""
    nested = row.get("instance")
    instance = _plain(nested if nested is not None else row)
    if not isinstance(instance, dict):
        raise ValueError(f"row.instance must be a mapping, got {type(nested).__name__}")
    instance_id = instance.get("instance_id") or "<no instance_id>"
    for name in _REQUIRED_FIELDS:
        if not isinstance(instance.get(name), str) or not instance[name]:
            raise ValueError(f"instance {instance_id}: {name} is missing or not a non-empty string")
    for name in TEST_LIST_FIELDS:
        instance[name] = _test_list(instance.get(name), instance_id, name)
    if not instance["FAIL_TO_PASS"]:
        raise ValueError(f"instance {instance_id}: FAIL_TO_PASS is empty (an empty F2P grades as resolved)")
    return instance


def _test_list(value: Any, instance_id: str, name: str) -> list[str]:
    """F2P/P2P as ``list[str]`` from a JSON string, a list or an array; anything else is an error, never ``[]``."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ValueError(f"instance {instance_id}: {name} is not a JSON list: {value[:80]!r}") from None
    elif hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, tuple):
        value = list(value)
    if not isinstance(value, list) or not all(isinstance(test, str) for test in value):
        raise ValueError(f"instance {instance_id}: {name} must be a list of test ids, got {value!r:.80}")
    return value


def _instruction(row: dict[str, Any], instance: dict[str, Any]) -> str:
    """SkyRL's chat ``prompt`` (its last user message), else the problem statement."""
    prompt = _plain(row.get("prompt"))
    if isinstance(prompt, list):
        user = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        if user and isinstance(user[-1], str) and user[-1].strip():
            return user[-1]
    statement = instance.get("problem_statement")
    if not isinstance(statement, str) or not statement.strip():
        raise ValueError(f"instance {instance['instance_id']}: problem_statement is missing or empty")
    return statement


def _repo_source(repo: str, source: Callable[[str], str] | str | None) -> str:
    if callable(source):
        return source(repo)
    owner, _, name = repo.partition("/")
    return (source or DEFAULT_REPO_TEMPLATE).format(repo=repo, owner=owner, name=name)


def _plain(value: Any) -> Any:
    """Numpy arrays and scalars, tuples and dates (what parquet and pandas hand back) → JSON-able values."""
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        return _plain(value.tolist())
    return value
