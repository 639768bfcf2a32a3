"""Where a session's commands run: the runtime interface and its implementations."""

from polar_jobs.runtimes.base import ExecResult, Runtime, RuntimeError_
from polar_jobs.runtimes.local import LocalRuntime

__all__ = ["ExecResult", "LocalRuntime", "Runtime", "RuntimeError_"]
