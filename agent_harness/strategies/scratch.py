"""Scratch copies of a workspace: a candidate's action is tried on one and the visible tests run there,
so the episode's own workspace changes only by the candidate chosen. A copy holds the regular files
only (no links, .git or caches, as the scorer's copies), is removed on leaving the block, and is an
`owned_tempdir`, so a run killed before removing it leaves it to the next run."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..errors import ToolError
from ..sandbox import safefs
from ..sandbox.bounds import hand_over
from ..sandbox.tempdirs import owned_tempdir
from ..sandbox.workspace import Workspace
from ..tools import ToolOptions, ToolResult, put_file, run_tool
from ..tools.failures import find_failure

READ_ONLY = frozenset({"read_file", "list_dir", "grep", "git_diff", "run_tests"})  # change no file


@dataclass(frozen=True)
class Trial:
    """What the visible tests said of a workspace: passed, how far they got (the line of the failing check in
    a test file; 0 when unknown), the test run's result. `changed`: the action tried changed a file."""

    passed: bool
    progress: int
    result: ToolResult
    changed: bool = True

    @property
    def score(self) -> tuple[int, int]:
        return (1 if self.passed else 0, self.progress)


def is_test_file(rel: str) -> bool:
    return any(part.startswith("test") for part in rel.split("/"))


def test_files(files: dict[str, str]) -> dict[str, str]:
    """The task's test files among `files`, put back on a scratch copy before its tests run."""
    return {rel: text for rel, text in files.items() if is_test_file(rel)}


RANK = "passed first, then the failing check furthest down a test file, then the lowest candidate number"
RANK_CHANGES = ("passed first, then the failing check furthest down a test file, then one that changed a file, "
                "then the lowest candidate number")


def candidate_rank(verdict: str, trial: Trial | None, n: int, changes: bool = False) -> tuple[int, int, int, int]:
    """A candidate's place by RANK (higher is better; `changes`: by RANK_CHANGES): one that was not tried or had
    no usable action is last."""
    if verdict in ("invalid", "refused", "fault", "not_tried"):
        return (-1, 0, 0, -n)
    score = trial.score if trial is not None else (0, 0)
    return (*score, int(changes and trial is not None and trial.changed), -n)


def _progress(output: str) -> int:
    found = find_failure(output)
    check = found.check if found is not None else None
    return check.line if check is not None and is_test_file(os.path.basename(check.file)) else 0


def _files(root: os.PathLike[str], limit: int) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for node in safefs.walk_workspace(root):
        data = safefs.read_node(node, limit) if node.st.st_mode & 0o170000 == 0o100000 else None
        if data is not None:
            out[node.rel] = data
    return out


@contextlib.contextmanager
def scratch_copy(ws: Workspace) -> Iterator[Workspace]:
    """A workspace over a fresh copy of `ws`'s regular files, removed on leaving; `changed_files()` on it
    names what changed since the copy."""
    root = owned_tempdir("cand")
    try:
        safefs.copy_regular_files(ws.root, root, ws.limits.disk_files, ws.limits.disk_bytes)
        snapshot = _files(root, ws.limits.disk_bytes)
        hand_over(root)
        copy = Workspace(root, snapshot, ws.test_cmd, ws.limits, ws.spec)
        try:
            yield copy
        finally:
            copy.cleanup()
    finally:
        safefs.remove_tree(root)


def try_action(ws: Workspace, tests: dict[str, str], tool: str | None, args: dict[str, object],
               options: ToolOptions) -> Trial | None:
    """Take the action (`tool` None: none) on a scratch copy of `ws`, put the task's test files (`tests`) back
    and run the visible tests there. None when the action changed no file (the tests as before it)."""
    def act(copy: Workspace) -> None:
        if tool is not None:
            with contextlib.suppress(ToolError):  # refused: it changes nothing, as in the workspace
                run_tool(copy, tool, args, options)

    return try_change(ws, tests, act, options, changes=tool is not None)


def try_change(ws: Workspace, tests: dict[str, str], change: Callable[[Workspace], None], options: ToolOptions,
               changes: bool = True) -> Trial | None:
    """`change` made on a scratch copy of `ws`, the task's test files (`tests`) put back, the visible tests run
    there. None when `changes` and the change left every file as it was."""
    with scratch_copy(ws) as copy:
        change(copy)
        if changes and not copy.changed_files():
            return None
        for rel, text in tests.items():
            put_file(copy, rel, text)
        result = run_tool(copy, "run_tests", {}, options).safe()
        return Trial(bool(result.tests_passed), 0 if result.tests_passed else _progress(result.text), result,
                     changes)
