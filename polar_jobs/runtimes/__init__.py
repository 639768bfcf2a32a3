"""Where a session's commands run: the runtime interface and its implementations."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from polar_jobs.runtimes.apptainer import ApptainerRuntime
from polar_jobs.runtimes.base import ExecResult, Runtime, RuntimeError_
from polar_jobs.runtimes.docker import DockerRuntime
from polar_jobs.runtimes.local import LocalRuntime

if TYPE_CHECKING:
    from polar_jobs.schemas import RuntimeSpec


def make_runtime(spec: "RuntimeSpec", root: Path, session_id: str, *, keep_files: bool = True,
                 proxy_url: str | None = None) -> LocalRuntime | DockerRuntime | ApptainerRuntime:
    """The runtime a session's ``RuntimeSpec`` names; ``root`` is the host directory of session dirs.

    Containers get ``network_mode`` from the spec; without one, ``"host"`` when the harness must reach the
    proxy (``proxy_url``, on this machine's loopback: the only way there without a bridge, which is
    refused), else ``"none"``. Harness CLIs installed on the host (``polar_jobs.harnesses.npm``) are bind-mounted
    read-only at the same path, so the presets' commands work unchanged in a container."""
    if spec.kind == "local":
        return LocalRuntime(root, session_id, keep_files=keep_files, isolation=spec.isolation,
                            ro_binds=list(harness_binds()) if spec.isolation == "bwrap" else ())
    network = spec.network_mode or default_network(proxy_url)
    binds = harness_binds()
    if spec.kind == "docker":
        return DockerRuntime(root, session_id, spec.image, cpus=spec.cpus, memory=spec.memory,
                             network_mode=network, env=spec.env, binds=binds, keep_files=keep_files)
    if spec.kind == "apptainer":
        return ApptainerRuntime(root, session_id, spec.image, cpus=spec.cpus, memory=spec.memory,
                                network_mode=network, env=spec.env, binds=binds, keep_files=keep_files)
    raise ValueError(f"unknown runtime kind {spec.kind!r}")


def default_network(proxy_url: str | None) -> str:
    """``host`` when the harness must reach a proxy: it listens on this machine's loopback (the default
    setup), and sharing the host's network is the only way to reach it without a bridge; ``none`` (only
    ``lo``) when there is nothing to reach. A spec's ``network_mode`` always wins."""
    if not proxy_url:
        return "none"
    return "host"


def harness_binds() -> dict[str, str]:
    """Host directories a container sees read-only at the same path: the shared harness CLI cache."""
    from polar_jobs.harnesses import npm

    cache = npm.cache_root()
    return {str(cache): str(cache)} if cache.is_dir() else {}


__all__ = ["ApptainerRuntime", "DockerRuntime", "ExecResult", "LocalRuntime", "Runtime", "RuntimeError_",
           "default_network", "harness_binds", "make_runtime"]
