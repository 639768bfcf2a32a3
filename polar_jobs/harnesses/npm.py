"""Installing a harness CLI from the npm registry once, into a shared cache keyed by package and version."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("POLAR_NPM_CACHE", Path.home() / ".cache" / "polar-jobs" / "npm"))


def install(package: str, version: str, binary: str, timeout: float = 900) -> Path:
    """The path of ``binary`` from ``package@version``, installing it first if needed (file-locked, so
    concurrent sessions install once)."""
    prefix = cache_root() / f"{package.replace('/', '__').lstrip('@')}@{version}"
    target = prefix / "node_modules" / ".bin" / binary
    if target.exists():
        return target
    prefix.mkdir(parents=True, exist_ok=True)
    with open(prefix / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            npm = shutil.which("npm")
            if npm is None:
                raise RuntimeError(f"npm is not installed: cannot install {package}@{version}")
            done = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix",
                                   str(prefix), f"{package}@{version}"], capture_output=True, text=True,
                                  timeout=timeout)
            if done.returncode != 0 or not target.exists():
                raise RuntimeError(f"npm install {package}@{version} failed: {done.stderr.strip()[-1000:]}")
    return target
