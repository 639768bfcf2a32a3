"""Small helpers for driving git and files through a ``Runtime`` (local directory or container alike)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from polar_jobs.runtimes.base import ExecResult, Runtime
from polar_jobs.scoring.base import EvaluationError

WORK_DIR = ".git/polar_swe"
"""Where the evaluator keeps its files inside a repository: never part of the tree, never cleaned."""

GIT = ("git", "-c", "core.autocrlf=false", "-c", "advice.detachedHead=false", "-c", "core.pager=cat")


def git(runtime: Runtime, *args: str, check: bool = True, timeout: float | None = 300) -> ExecResult:
    """Run git in the runtime's workdir; with ``check`` a failure is an EvaluationError (the grader's problem)."""
    result = runtime.exec([*GIT, *args], timeout=timeout)
    if check and not result.ok:
        raise EvaluationError(f"git {' '.join(args)[:200]} failed ({_status(result)}): {result.stderr.strip()[-800:]}")
    return result


def upload_text(runtime: Runtime, text: str, remote: str) -> None:
    """Write ``text`` to ``remote`` (relative to the workdir) in the runtime."""
    handle, local = tempfile.mkstemp(prefix="polar-swe-")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as out:
            out.write(text)
        runtime.upload(Path(local), remote)
    finally:
        os.unlink(local)


def output(result: ExecResult) -> str:
    """A command's stdout and stderr as one log chunk."""
    return result.stdout + (f"\n[stderr]\n{result.stderr}" if result.stderr.strip() else "")


def _status(result: ExecResult) -> str:
    return "timed out" if result.timed_out else f"exit {result.exit_code}"
