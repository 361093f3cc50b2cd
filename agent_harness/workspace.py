"""A task's workspace: a temp git repo holding the task files, and the path rules of the file tools.

The harness never runs git on the workspace after the agent has acted: `.git` is the agent's to
write (via run_cmd), so its config could name programs for git to run (core.fsmonitor,
diff.external, textconv and filter drivers, ...). `diff()` and `changed_files()` compare the
working tree with the snapshot taken at creation instead, which also works when `.git` is gone;
git commands that scorers need go through `run()`, inside the sandbox.
"""

from __future__ import annotations

import difflib
import hashlib
import math
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Any

import git

from .errors import ConfigError, ToolError
from .sandbox import WORKDIR, Limits, detect_sandbox, hand_over, run_sandboxed
from .types import CmdResult

FIXED_DATE = "2000-01-01T00:00:00+0000"
AUTHOR = ("agent-harness", "harness@workspace.invalid")
# The harness's own git calls (at creation only) ignore the host's system and global config.
GIT_HOST_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_TERMINAL_PROMPT": "0"}
# Commits the agent makes get a fixed identity and date, so their ids are reproducible too.
GIT_AGENT_ENV = {"GIT_AUTHOR_NAME": "agent", "GIT_AUTHOR_EMAIL": "agent@workspace.invalid",
                 "GIT_COMMITTER_NAME": "agent", "GIT_COMMITTER_EMAIL": "agent@workspace.invalid",
                 "GIT_AUTHOR_DATE": FIXED_DATE, "GIT_COMMITTER_DATE": FIXED_DATE}
IGNORED_DIRS = (".git", "__pycache__")
MAX_DIFF_FILE = 1 << 20  # bytes of one file shown as a text diff
MAX_FILES = 5000  # files compared by diff(); a flood beyond it is reported, not read

Entry = tuple[str, bytes]  # (git-style mode, content or a digest marker for large files)


def _check_rel(rel: str) -> str:
    p = PurePosixPath(rel)
    if not rel or p.is_absolute() or ".." in p.parts or "\\" in rel or p.parts[0] == ".git":
        raise ConfigError(f"task file '{rel}' must be a relative path inside the workspace, outside .git")
    return p.as_posix()


class Workspace:
    """A temp folder with the task files committed to git; see `create`."""

    def __init__(self, root: Path, snapshot: dict[str, bytes], test_cmd: list[str] | None,
                 limits: Limits, sandbox: str) -> None:
        self.root = root
        self.test_cmd = test_cmd
        self.limits = limits
        self.sandbox = sandbox
        self._snapshot = snapshot
        self._real_root = root.resolve()
        self._closed = False

    @classmethod
    def create(cls, files: dict[str, str], test_cmd: list[str] | None = None,
               limits: Limits | None = None) -> Workspace:
        """Write `files` into a new temp folder and commit them (fixed author and dates)."""
        snapshot = {_check_rel(rel): text.encode("utf-8") for rel, text in files.items()}
        sandbox = detect_sandbox()
        root = Path(tempfile.mkdtemp(prefix="agent-harness-ws-"))
        try:
            for rel, data in snapshot.items():
                path = root / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
                path.chmod(0o644)
            _init_repo(root, sorted(snapshot))
            hand_over(root)
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        return cls(root, snapshot, list(test_cmd) if test_cmd else None, limits or Limits(), sandbox)

    # -- paths ----------------------------------------------------------------------------
    def resolve(self, path: str) -> Path:
        """The real path of a workspace-relative `path`; escapes and `.git` raise ToolError."""
        if not isinstance(path, str):
            raise ToolError("the path must be a string")
        raw = path.strip()
        if "\0" in raw:
            raise ToolError("the path contains a NUL character")
        if raw == WORKDIR or raw.startswith(WORKDIR + "/"):  # how the sandbox shows the workspace
            raw = raw[len(WORKDIR):].lstrip("/")
        pure = PurePosixPath(raw or ".")
        if pure.is_absolute():
            raise ToolError(f"'{path}' is an absolute path; use a path inside the workspace, like main.py")
        parts: list[str] = []
        for part in pure.parts:
            if part == "..":
                if not parts:
                    raise ToolError(f"'{path}' leads outside the workspace")
                parts.pop()
            elif part != ".":
                parts.append(part)
        if parts[:1] == [".git"]:
            raise ToolError(f"'{path}' is inside .git, which the file tools do not touch")
        try:
            target = self.root.joinpath(*parts).resolve()
        except (RuntimeError, OSError) as e:  # a symlink loop
            raise ToolError(f"'{path}' cannot be resolved: {e}") from None
        if not target.is_relative_to(self._real_root):
            raise ToolError(f"'{path}' leads outside the workspace (through a symlink)")
        if target.relative_to(self._real_root).parts[:1] == (".git",):
            raise ToolError(f"'{path}' leads into .git, which the file tools do not touch")
        return target

    def rel(self, path: Path) -> str:
        """`path` (a resolved path inside the workspace) as the model sees it."""
        return path.relative_to(self._real_root).as_posix()

    # -- commands ---------------------------------------------------------------------------
    def limits_for(self, timeout: float | None = None) -> Limits:
        """The workspace's limits, with `timeout` as the wall clock (and a CPU limit no longer)."""
        if timeout is None:
            return self.limits
        return replace(self.limits, wall_s=timeout, cpu_s=max(1, min(self.limits.cpu_s, math.ceil(timeout))))

    def run(self, cmd: list[str], timeout: float | None = None) -> CmdResult:
        """Run `cmd` in the sandbox with the workspace as its only writable folder."""
        limits = self.limits_for(timeout)
        return run_sandboxed(cmd, self.root, limits, env=GIT_AGENT_ENV, sandbox=self.sandbox)

    # -- changes ----------------------------------------------------------------------------
    def _scan(self) -> tuple[dict[str, Entry], bool]:
        """Every file of the working tree (links not followed), and whether MAX_FILES cut the scan."""
        found: dict[str, Entry] = {}
        for rel, path in _walk(self.root):
            if len(found) >= MAX_FILES:
                return found, True
            entry = _entry(path)
            if entry is not None:
                found[rel] = entry
        return found, False

    def _changes(self) -> tuple[list[tuple[str, Entry | None, Entry | None]], bool]:
        before = {rel: ("100644", _content(data)) for rel, data in self._snapshot.items()}
        after, cut = self._scan()
        out = []
        for rel in sorted(before.keys() | after.keys()):
            old, new = before.get(rel), after.get(rel)
            if cut and new is None:
                continue  # not scanned, so not known to be deleted
            if old != new:
                out.append((rel, old, new))
        return out, cut

    def changed_files(self) -> list[str]:
        """Workspace-relative paths added, modified or deleted since creation, sorted."""
        return [rel for rel, _, _ in self._changes()[0]]

    def diff(self) -> str:
        """A git-style unified diff of the working tree against the initial files; "" if unchanged."""
        changes, cut = self._changes()
        parts = [_file_diff(rel, old, new) for rel, old, new in changes]
        if cut:
            parts.append(f"# more than {MAX_FILES} files in the workspace; the rest were not compared\n")
        return "".join(parts)

    # -- lifetime ---------------------------------------------------------------------------
    def cleanup(self) -> None:
        """Delete the workspace folder; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        shutil.rmtree(self.root, onerror=_force_remove)

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *_: Any) -> None:
        self.cleanup()

    def __repr__(self) -> str:
        return f"Workspace({str(self.root)!r}, sandbox={self.sandbox!r})"


def _init_repo(root: Path, paths: list[str]) -> None:
    g = git.Git(str(root))
    g.update_environment(**GIT_HOST_ENV, GIT_AUTHOR_NAME=AUTHOR[0], GIT_AUTHOR_EMAIL=AUTHOR[1],
                         GIT_COMMITTER_NAME=AUTHOR[0], GIT_COMMITTER_EMAIL=AUTHOR[1],
                         GIT_AUTHOR_DATE=FIXED_DATE, GIT_COMMITTER_DATE=FIXED_DATE)
    g.init("-q", "--initial-branch=main")
    if paths:
        g.add("--force", "--", *paths)  # every task file, even one a task's .gitignore names
    g.commit("-q", "--allow-empty", "--no-verify", "-m", "initial task files")


def _force_remove(func: Any, path: str, _exc: Any) -> None:
    """rmtree helper for folders the agent made unwritable (matters when the harness is not root)."""
    try:
        os.chmod(os.path.dirname(path), 0o700)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o700)
        func(path)
    except OSError:
        pass


def _walk(root: Path) -> Iterator[tuple[str, Path]]:
    """(relative path, path) of every non-directory entry, sorted; .git and __pycache__ skipped."""
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        links = [d for d in dirnames if (here / d).is_symlink()]
        dirnames[:] = sorted(d for d in dirnames if d not in IGNORED_DIRS and d not in links)
        for name in sorted(filenames + links):
            if name.endswith(".pyc"):
                continue
            path = here / name
            yield path.relative_to(root).as_posix(), path


def _entry(path: Path) -> Entry | None:
    """(mode, content) of a regular file or symlink; None for fifos, sockets and devices."""
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            return "120000", os.readlink(path).encode("utf-8", "surrogateescape")
        if not stat.S_ISREG(st.st_mode):
            return None
        mode = "100755" if st.st_mode & 0o111 else "100644"
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            if st.st_size <= MAX_DIFF_FILE:
                return mode, _content(f.read(MAX_DIFF_FILE + 1))
            digest = hashlib.sha256()
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        return mode, _large(st.st_size, digest.hexdigest())
    except OSError:
        return None


def _large(size: int, sha256: str) -> bytes:
    return f"\0large file, {size} bytes, sha256 {sha256}".encode()


def _content(data: bytes) -> bytes:
    """What diff() compares: the bytes, or a digest marker for a file too large to show."""
    return data if len(data) <= MAX_DIFF_FILE else _large(len(data), hashlib.sha256(data).hexdigest())


def _text(data: bytes) -> list[str] | None:
    if b"\0" in data or len(data) > MAX_DIFF_FILE:
        return None
    try:
        return data.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def _file_diff(rel: str, old: Entry | None, new: Entry | None) -> str:
    if old is not None and new is not None and (old[0] == "120000") != (new[0] == "120000"):
        return _file_diff(rel, old, None) + _file_diff(rel, None, new)  # file <-> symlink
    head = [f"diff --git a/{rel} b/{rel}\n"]
    if old is None and new is not None:
        head.append(f"new file mode {new[0]}\n")
    elif new is None and old is not None:
        head.append(f"deleted file mode {old[0]}\n")
    elif old is not None and new is not None and old[0] != new[0]:
        head += [f"old mode {old[0]}\n", f"new mode {new[0]}\n"]
    a_name = f"a/{rel}" if old is not None else "/dev/null"
    b_name = f"b/{rel}" if new is not None else "/dev/null"
    a_data = old[1] if old is not None else b""
    b_data = new[1] if new is not None else b""
    if a_data == b_data:
        return "".join(head)
    a_lines, b_lines = _text(a_data), _text(b_data)
    if a_lines is None or b_lines is None:
        return "".join(head) + f"Binary files {a_name} and {b_name} differ\n"
    body = difflib.unified_diff(a_lines, b_lines, a_name, b_name, lineterm="\n", n=3)
    lines = [line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in body]
    return "".join(head + lines)
