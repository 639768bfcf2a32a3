"""The runtime interface: where a session's commands run (a local directory, a container, ...)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Protocol, Sequence


@dataclass(frozen=True)
class ExecResult:
    """What one command did; ``exit_code`` is None when it was killed at its timeout."""

    exit_code: int | None
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class RuntimeError_(Exception):
    """A runtime could not do what was asked (start, copy, a missing image): not the command's failure."""


class Runtime(Protocol):
    """A session's workspace and a way to run commands in it. ``workdir`` is the path inside the runtime."""

    workdir: str

    def start(self) -> None: ...

    def exec(self, command: Sequence[str] | str, *, env: Mapping[str, str] | None = None, cwd: str | None = None,
             timeout: float | None = None, log: Path | None = None) -> ExecResult:
        """Run a command (argv, or a string for ``bash -lc``); output also appended to ``log``."""
        ...

    def upload(self, local: Path, remote: str) -> None: ...

    def download(self, remote: str, local: Path) -> None: ...

    def stop(self) -> None:
        """Kill everything the session started; idempotent."""
        ...
