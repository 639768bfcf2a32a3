"""The eval script (after swebench ``make_eval_script_list_py``): reset the tests, apply test_patch, run them.

``#!/bin/bash`` with ``set -uxo pipefail`` and no ``-e``. stderr joins stdout (``exec 2>&1``) so the
``set -x`` trace, the markers and the test output read as one ordered log. Unlike upstream, a test
patch that does not apply stops the script with ``TEST_PATCH_FAILED``: an evaluator error, not a model failure.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from polar_jobs.scoring.swe.instance import SweInstance
from polar_jobs.scoring.swe.logs import END_MARKER, START_MARKER

NON_TEST_EXTS = (".json", ".png", ".csv", ".txt", ".md", ".jpg", ".jpeg", ".pkl", ".yml", ".yaml", ".toml",
                 ".rst", ".cfg", ".ini", ".gif", ".svg")
"""Files a test patch touches that are data, not tests: never passed to the test command."""

TEST_PATCH_FAILED = ">>>>> Test Patch Apply Failed"
TEST_PATCH_FAILED_EXIT = 86

_HEREDOC = "EOF_POLAR_SWE_TEST_PATCH"
_DIFF_HEADER = re.compile(r"^diff --git (\S+|\"[^\"]*\") (\S+|\"[^\"]*\")$")


@dataclass(frozen=True)
class PatchFiles:
    """The paths a diff touches: ``existing`` are in the base tree; ``added`` are created; ``targets`` survive it."""

    existing: tuple[str, ...]
    added: tuple[str, ...]
    targets: tuple[str, ...]


def patch_files(diff: str) -> PatchFiles:
    """Read a git diff's file headers (``---``/``+++``, renames, new and deleted files)."""
    existing: list[str] = []
    added: list[str] = []
    targets: list[str] = []
    for block in re.split(r"^(?=diff --git )", diff, flags=re.MULTILINE):
        if not block.startswith("diff --git "):
            continue
        old, new = _block_paths(block)
        if old is not None and old not in existing:
            existing.append(old)
        if new is not None:
            if old != new and new not in added:
                added.append(new)
            if new not in targets:
                targets.append(new)
    return PatchFiles(tuple(existing), tuple(added), tuple(targets))


def eval_directives(test_patch: str) -> list[str]:
    """The test files to run: the test patch's surviving targets, minus data and docs."""
    return [path for path in patch_files(test_patch).targets if not path.lower().endswith(NON_TEST_EXTS)]


def build_eval_script(instance: SweInstance) -> str:
    """The bash script that grades one instance inside its checkout (the model patch already applied)."""
    files = patch_files(instance.test_patch)
    base = shlex.quote(instance.base_commit)
    reset = []
    if files.existing:
        reset.append(f"git checkout {base} -- {_join(files.existing)}")
    if files.added:  # never a bare `git checkout <base>`: it would reset the whole tree (#518)
        reset.append(f"rm -f -- {_join(files.added)}")
    test_patch = instance.test_patch if instance.test_patch.endswith("\n") else instance.test_patch + "\n"
    delimiter = _HEREDOC
    while delimiter in test_patch:
        delimiter += "_X"
    test_cmd = _join(instance.test_cmd + tuple(eval_directives(instance.test_patch)))
    lines = [
        "#!/bin/bash",
        "exec 2>&1",
        "set -uxo pipefail",
        "git status",
        "git show --stat",
        f"git -c core.fileMode=false diff {base}",
        *instance.install,
        *reset,
        f"git apply --verbose - <<'{delimiter}'\n{test_patch}{delimiter}",
        f"if [ $? -ne 0 ]; then echo {shlex.quote(TEST_PATCH_FAILED)}; exit {TEST_PATCH_FAILED_EXIT}; fi",
        f": {shlex.quote(START_MARKER)}",
        test_cmd,
        "POLAR_SWE_TEST_EXIT_CODE=$?",
        f": {shlex.quote(END_MARKER)}",
        'echo ">>>>> Test Exit Code: $POLAR_SWE_TEST_EXIT_CODE"',
        *reset,
        "exit $POLAR_SWE_TEST_EXIT_CODE",
    ]
    return "\n".join(lines) + "\n"


def _block_paths(block: str) -> tuple[str | None, str | None]:
    """(old path or None when created, new path or None when deleted) for one ``diff --git`` block."""
    old = new = None
    header = _DIFF_HEADER.match(block.split("\n", 1)[0])
    if header:
        old, new = _strip_prefix(_unquote(header.group(1)), "a/"), _strip_prefix(_unquote(header.group(2)), "b/")
    for line in block.split("\n")[1:]:
        if line.startswith(("@@", "GIT binary patch")):
            break
        if line.startswith("new file mode"):
            old = None
        elif line.startswith("deleted file mode"):
            new = None
        elif line.startswith("rename from "):
            old = line[len("rename from "):]
        elif line.startswith("rename to "):
            new = line[len("rename to "):]
        elif line.startswith("--- "):
            path = _unquote(line[4:].split("\t")[0])
            old = None if path == "/dev/null" else _strip_prefix(path, "a/")
        elif line.startswith("+++ "):
            path = _unquote(line[4:].split("\t")[0])
            new = None if path == "/dev/null" else _strip_prefix(path, "b/")
    return old, new


def _unquote(path: str) -> str:
    """git quotes unusual paths C-style: ``"a/caf\\303\\251.py"``."""
    if len(path) >= 2 and path[0] == path[-1] == '"':
        try:
            return path[1:-1].encode("latin-1").decode("unicode_escape").encode("latin-1").decode("utf-8")
        except UnicodeError:
            return path[1:-1]
    return path


def _strip_prefix(path: str, prefix: str) -> str:
    return path[len(prefix):] if path.startswith(prefix) else path


def _join(args: tuple[str, ...] | list[str]) -> str:
    return " ".join(shlex.quote(arg) for arg in args)
