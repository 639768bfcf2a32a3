"""The model patch: extracted from an agent's workspace as a diff against base_commit, and applied by a ladder.

Extraction follows the recommended host-side steps (nested ``.git`` removed, ``git add -A``, binaries and
caches left out, diff against base_commit so the agent's own commits count). Application tries
``git apply`` → ``git apply --3way`` → ``patch --fuzz=5`` and records the rung that won.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from polar_jobs.runtimes.base import Runtime
from polar_jobs.scoring.base import EvaluationError
from polar_jobs.scoring.swe._runtime import WORK_DIR, git, output, upload_text

PATCH_FILE = f"{WORK_DIR}/model.patch"

APPLY_RUNGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("git_apply", ("git", "apply", "--verbose", PATCH_FILE)),
    ("git_apply_3way", ("git", "apply", "--verbose", "--3way", PATCH_FILE)),
    ("patch_fuzz", ("patch", "--batch", "--forward", "--fuzz=5", "-p1", "--no-backup-if-mismatch", "-i", PATCH_FILE)),
)
"""The polar_jobs apply ladder, in order; ``patch`` is skipped where it is not installed."""

RESET = "git reset -q && git checkout -q -- . && git clean -fdq"
"""Between rungs: ``--3way`` leaves its result (and conflicts) in the index, so the index is reset too."""

APPLY_FAILED = ">>>>> Patch Apply Failed"

_CACHE_PARTS = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis", ".tox",
                          ".nox", ".ipynb_checkpoints", ".cache"})
_CACHE_SUFFIXES = (".pyc", ".pyo", ".pyd")
_DIFF_START = re.compile(r"^diff --git ", re.MULTILINE)
_FENCE = re.compile(r"\n```[ \t]*\n*\Z")


@dataclass(frozen=True)
class ExtractedPatch:
    """The cleaned diff to grade, the raw ``git diff`` output for auditing, and the paths left out."""

    diff: str
    raw: str
    excluded: tuple[str, ...] = ()


@dataclass(frozen=True)
class ApplyResult:
    """Whether the patch applied, by which rung, and every rung's output."""

    applied: bool
    rung: str | None
    log: str


def clean_diff(text: str | None) -> str:
    """Strip everything before the first ``diff --git`` (and a closing code fence), CRLF → LF, end with a newline."""
    if not text:
        return ""
    text = text.replace("\r\n", "\n")
    first = _DIFF_START.search(text)
    if first is None:
        return ""
    text = _FENCE.sub("\n", text[first.start():])
    return text if text.endswith("\n") else text + "\n"


def is_cache_path(path: str) -> bool:
    """Caches and bytecode that ``git add -A`` sweeps in but never belong in a patch."""
    parts = path.split("/")
    return bool(_CACHE_PARTS.intersection(parts[:-1])) or path.endswith(_CACHE_SUFFIXES)


def binary_paths(numstat_z: str) -> list[str]:
    """Paths ``git diff --numstat -z --no-renames`` shows as ``-\\t-`` (binary)."""
    paths = []
    for entry in numstat_z.split("\0"):
        added, _, rest = entry.partition("\t")
        deleted, _, path = rest.partition("\t")
        if added == "-" and deleted == "-" and path:
            paths.append(path)
    return paths


def extract_patch(runtime: Runtime, base_commit: str) -> ExtractedPatch:
    """The agent's changes in the runtime's repository as a diff against ``base_commit``.

    Changes the workspace: nested ``.git`` directories are deleted and everything else is staged.
    """
    if git(runtime, "rev-parse", "--show-cdup").stdout.strip():  # else git would act on an enclosing repository
        raise EvaluationError(f"{runtime.workdir} is not the top of a git repository")
    git(runtime, "rev-parse", "--verify", "--quiet", f"{base_commit}^{{commit}}")
    nested = runtime.exec(["find", ".", "-path", "./.git", "-prune", "-o", "-name", ".git", "-print"])
    nested_gits = [line[2:] if line.startswith("./") else line for line in nested.stdout.splitlines() if line]
    if nested_gits:  # else each nested repository becomes a gitlink ("Subproject commit ...")
        runtime.exec(["rm", "-rf", "--", *nested_gits])
    git(runtime, "add", "-A")
    changed = git(runtime, "diff", "--cached", "--name-only", "--no-renames", "-z", base_commit).stdout
    numstat = git(runtime, "diff", "--cached", "--numstat", "--no-renames", "-z", base_commit).stdout
    left_out = sorted(set(binary_paths(numstat)) | {path for path in changed.split("\0") if path and is_cache_path(path)})
    for start in range(0, len(left_out), 200):
        git(runtime, "reset", "-q", base_commit, "--", *(f":(literal){path}" for path in left_out[start:start + 200]))
    raw = git(runtime, "diff", "--cached", "--no-color", "--no-ext-diff", base_commit).stdout
    excluded = tuple(f"{path}/" for path in nested_gits) + tuple(left_out)
    return ExtractedPatch(diff=clean_diff(raw), raw=raw, excluded=excluded)


def apply_patch(runtime: Runtime, diff: str) -> ApplyResult:
    """Apply ``diff`` in the runtime's repository, trying each rung of the ladder on a clean tree."""
    diff = clean_diff(diff)
    if not diff:
        return ApplyResult(False, None, "empty patch\n")
    runtime.exec(["mkdir", "-p", WORK_DIR])
    upload_text(runtime, diff, PATCH_FILE)
    log: list[str] = []
    for index, (rung, argv) in enumerate(APPLY_RUNGS):
        if index:
            log.append(f"$ {RESET}\n{output(runtime.exec(RESET))}")
        result = runtime.exec(list(argv), timeout=300)
        if result.exit_code == 127 and rung == "patch_fuzz":
            log.append(f"$ {' '.join(argv)}\nskipped: patch is not installed\n")
            continue
        log.append(f"$ {' '.join(argv)}\n{output(result)}[exit {result.exit_code}]\n")
        if result.ok:
            return ApplyResult(True, rung, "".join(log))
    runtime.exec(RESET)
    log.append(f"{APPLY_FAILED}\n")
    return ApplyResult(False, None, "".join(log))
