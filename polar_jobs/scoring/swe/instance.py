"""SWE task instances: one normalised shape for SWE-bench, SWE-Gym and SkyRL-v0-293-data rows.

Loading is strict on the fields that decide a grade: an unparsable or empty FAIL_TO_PASS is rejected,
never defaulted to ``[]`` (an empty F2P would score 1, i.e. resolved).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

DEFAULT_TEST_CMD: tuple[str, ...] = ("python", "-m", "pytest", "--no-header", "-rA", "--tb=no", "-p", "no:cacheprovider")
"""The SWE-bench pytest command; ``-rA`` prints the ``PASSED path::name`` lines the parsers read."""

DEFAULT_TIMEOUT_S = 1800.0
"""Wall-clock limit for one eval script, as in swebench."""

LOG_PARSERS = ("pytest", "pytest_v2")

_REQUIRED = ("instance_id", "repo", "base_commit", "test_patch")


@dataclass(frozen=True)
class SweInstance:
    """One task: where the repository starts, the tests that decide it, and how to run them."""

    instance_id: str
    repo: str
    base_commit: str
    test_patch: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    environment_setup_commit: str
    patch: str = ""
    problem_statement: str = ""
    hints_text: str = ""
    created_at: str = ""
    version: str = ""
    data_source: str = ""
    test_cmd: tuple[str, ...] = DEFAULT_TEST_CMD
    install: tuple[str, ...] = ()
    log_parser: str = "pytest"
    timeout_s: float = DEFAULT_TIMEOUT_S

    @property
    def repo_dirname(self) -> str:
        """``owner/name`` as the ``owner__name`` directory SWE-bench uses."""
        return self.repo.replace("/", "__")


def load_instance(row: Mapping[str, Any]) -> SweInstance:
    """Normalise a flat row or a ``row["instance"]``-nested one (SkyRL); raises ValueError naming the field."""
    if not isinstance(row, Mapping):
        raise ValueError(f"instance row must be a mapping, got {type(row).__name__}")
    data_source = str(row.get("data_source") or "")
    if isinstance(row.get("instance"), Mapping):
        row = row["instance"]
    iid = str(row.get("instance_id") or "<no instance_id>")
    for name in _REQUIRED:
        if not isinstance(row.get(name), str) or not row[name]:
            raise ValueError(f"{iid}: field {name!r} is missing or not a non-empty string")
    f2p = parse_test_list(row.get("FAIL_TO_PASS"), iid, "FAIL_TO_PASS")
    if not f2p:
        raise ValueError(f"{iid}: field 'FAIL_TO_PASS' is empty (an empty F2P would score as resolved)")
    p2p = parse_test_list(row.get("PASS_TO_PASS"), iid, "PASS_TO_PASS")
    return SweInstance(
        instance_id=iid,
        repo=row["repo"],
        base_commit=row["base_commit"],
        test_patch=row["test_patch"],
        fail_to_pass=tuple(f2p),
        pass_to_pass=tuple(p2p),
        environment_setup_commit=str(row.get("environment_setup_commit") or row["base_commit"]),
        patch=str(row.get("patch") or ""),
        problem_statement=str(row.get("problem_statement") or ""),
        hints_text=str(row.get("hints_text") or ""),
        created_at=str(row.get("created_at") or ""),
        version=str(row.get("version") or ""),
        data_source=data_source or str(row.get("data_source") or ""),
        test_cmd=_test_cmd(row.get("test_cmd"), iid),
        install=_install(row.get("install"), iid),
        log_parser=_log_parser(row.get("log_parser"), iid),
        timeout_s=_timeout(row.get("timeout_s"), iid),
    )


def parse_test_list(value: Any, iid: str, field: str) -> list[str]:
    """F2P/P2P from a JSON string, a list or an array (anything with ``tolist()``) to ``list[str]``."""
    if value is None:
        raise ValueError(f"{iid}: field {field!r} is missing")
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{iid}: field {field!r} is not a JSON list: {exc}: {value[:80]!r}") from None
    if isinstance(value, tuple):
        value = list(value)
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise ValueError(f"{iid}: field {field!r} must be a list of non-empty strings, got {value!r:.80}")
    return value


def load_instances(path: str | Path) -> list[SweInstance]:
    """Instances from ``.jsonl`` or ``.json`` (a list, a dict keyed by id, or one row)."""
    rows = _read_rows(Path(path))
    instances = [load_instance(row) for row in rows]
    seen: set[str] = set()
    for instance in instances:
        if instance.instance_id in seen:
            raise ValueError(f"{path}: instance {instance.instance_id!r} appears twice")
        seen.add(instance.instance_id)
    return instances


def load_predictions(path: str | Path) -> dict[str, str | None]:
    """Predictions (jsonl, a JSON list, or a dict keyed by id) as ``{instance_id: model_patch or None}``."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        items: list[Any] = [json.loads(line) for line in text.splitlines() if line.strip()]
    else:
        data = json.loads(text)
        if isinstance(data, dict) and "instance_id" not in data:
            items = [_keyed_prediction(key, value) for key, value in data.items()]
        else:
            items = data if isinstance(data, list) else [data]
    predictions: dict[str, str | None] = {}
    for item in items:
        if not isinstance(item, Mapping) or not isinstance(item.get("instance_id"), str):
            raise ValueError(f"{path}: prediction without an instance_id: {item!r:.120}")
        patch = item.get("model_patch")
        if patch is not None and not isinstance(patch, str):
            raise ValueError(f"{path}: {item['instance_id']}: model_patch must be a string or null")
        predictions[item["instance_id"]] = patch
    return predictions


def _keyed_prediction(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return {**value, "instance_id": value.get("instance_id", key)}
    return {"instance_id": key, "model_patch": value}


def _read_rows(path: Path) -> list[Any]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    data = json.loads(text)
    if isinstance(data, list):
        return data
    if isinstance(data, dict) and ("instance_id" in data or "instance" in data):
        return [data]
    if isinstance(data, dict):
        return list(data.values())
    raise ValueError(f"{path}: expected a list or a dict of instances, got {type(data).__name__}")


def _test_cmd(value: Any, iid: str) -> tuple[str, ...]:
    if value is None:
        return DEFAULT_TEST_CMD
    if isinstance(value, str):
        value = shlex.split(value)
    if hasattr(value, "tolist"):
        value = value.tolist()
    if not isinstance(value, (list, tuple)) or not value or not all(isinstance(arg, str) for arg in value):
        raise ValueError(f"{iid}: field 'test_cmd' must be a non-empty argv list, got {value!r:.80}")
    return tuple(value)


def _install(value: Any, iid: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,) if value.strip() else ()
    if isinstance(value, (list, tuple)) and all(isinstance(step, str) for step in value):
        return tuple(value)
    raise ValueError(f"{iid}: field 'install' must be a shell command or a list of them, got {value!r:.80}")


def _log_parser(value: Any, iid: str) -> str:
    if value is None:
        return "pytest"
    if value not in LOG_PARSERS:
        raise ValueError(f"{iid}: field 'log_parser' must be one of {LOG_PARSERS}, got {value!r}")
    return value


def _timeout(value: Any, iid: str) -> float:
    if value is None:
        return DEFAULT_TIMEOUT_S
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{iid}: field 'timeout_s' must be a positive number, got {value!r}")
    return float(value)
