"""A task's workspace: a temp git repo holding the task files, and the path rules of the file tools.

The harness never runs git on the workspace after the agent has acted: `.git` is the agent's to
write (via run_cmd), so its config could name programs for git to run (core.fsmonitor,
diff.external, textconv and filter drivers, ...). `diff()` and `changed_files()` compare the
working tree with the snapshot taken at creation instead, which also works when `.git` is gone;
git commands that scorers need go through `run()`, inside the sandbox.

Workspaces and their scoring copies are `tempdirs.owned_tempdir` folders: a run killed before it
could remove them (SIGKILL) leaves them to the next run, which removes them.

Commands run in the workspace's sandbox (`sandbox.open_sandbox`; under Docker one container for the
episode); `end_session` closes it, and `run_on_copy` and the scorers (`spec`) use a fresh one.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import math
import os
import stat
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Any

import git

from ..errors import ConfigError, ScoreError, ToolError
from ..types import CmdResult
from . import WORKDIR, Limits, SandboxSpec, choose_sandbox, hand_over, open_sandbox, run_sandboxed, safefs
from .tempdirs import owned_tempdir

FIXED_DATE = "2000-01-01T00:00:00+0000"
AUTHOR = ("agent-harness", "harness@workspace.invalid")
# The harness's own git calls (at creation only) ignore the host's system and global config.
GIT_HOST_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_TERMINAL_PROMPT": "0"}
# Commits the agent makes get a fixed identity and date, so their ids are reproducible too.
GIT_AGENT_ENV = {"GIT_AUTHOR_NAME": "agent", "GIT_AUTHOR_EMAIL": "agent@workspace.invalid",
                 "GIT_COMMITTER_NAME": "agent", "GIT_COMMITTER_EMAIL": "agent@workspace.invalid",
                 "GIT_AUTHOR_DATE": FIXED_DATE, "GIT_COMMITTER_DATE": FIXED_DATE}
MAX_DIFF_FILE = 256 << 10  # bytes of one file shown as a text diff
MAX_DIFF_TOTAL = 2 << 20  # bytes of new content read for one diff's text
MAX_DIFF_FILES = 500  # files named in one diff
MAX_DIFF_CHARS = 1 << 20  # characters of one diff
MAX_FILES = 5000  # files compared by diff(); a flood beyond it is reported, not read

Entry = tuple[str, bytes, int]  # (git-style mode, sha256 or link target, size)


def _check_rel(rel: str) -> str:
    p = PurePosixPath(rel)
    if not rel or p.is_absolute() or ".." in p.parts or "\\" in rel or p.parts[0] == ".git":
        raise ConfigError(f"task file '{rel}' must be a relative path inside the workspace, outside .git")
    return p.as_posix()


class Workspace:
    """A temp folder with the task files committed to git; see `create`."""

    def __init__(self, root: Path, snapshot: dict[str, bytes], test_cmd: list[str] | None,
                 limits: Limits, spec: SandboxSpec) -> None:
        self.root = root
        self.test_cmd = test_cmd
        self.limits = limits
        self.spec = spec  # the sandbox kind and image; the scorers run in a fresh one of the same
        self.sandbox = spec.kind
        self._session = open_sandbox(spec, root, limits)
        self._snapshot = snapshot
        self._real_root = root.resolve()
        self._closed = False
        self.over_quota: str | None = None  # why commands are refused, once the disk quota was exceeded

    @classmethod
    def create(cls, files: dict[str, str], test_cmd: list[str] | None = None,
               limits: Limits | None = None, image: str | None = None) -> Workspace:
        """Write `files` into a new temp folder and commit them (fixed author and dates); its commands run
        in the sandbox `sandbox.choose_sandbox(image)` picks (`image`: the task's Docker image, if it names one)."""
        snapshot = {_check_rel(rel): text.encode("utf-8") for rel, text in files.items()}
        spec = choose_sandbox(image)
        root = owned_tempdir("ws")  # removed by a later run if this one is killed
        try:
            for rel, data in snapshot.items():
                path = root / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
                path.chmod(0o644)
            _init_repo(root, sorted(snapshot))
            hand_over(root)
        except BaseException:
            with contextlib.suppress(OSError):
                safefs.remove_tree(root)
            raise
        return cls(root, snapshot, list(test_cmd) if test_cmd else None, limits or Limits(), spec)

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
        """Run `cmd` in the sandbox with the workspace as its only writable folder.

        The workspace's disk quota is checked after each command; once it is exceeded, commands
        are refused for the rest of the episode (so one episode writes at most the quota plus
        what one command can write in its time).
        """
        if self.over_quota:
            return CmdResult(returncode=1, stdout="", stderr=f"not run: {self.over_quota}\n", duration_s=0.0,
                             timed_out=False, killed_reason="disk", sandbox=self.sandbox)
        limits = self.limits_for(timeout)
        res = self._session.run(cmd, limits, GIT_AGENT_ENV)
        usage = self.disk_usage()
        if usage is not None:
            self.over_quota = (f"the workspace went over its disk quota ({usage}); commands are refused for "
                               "the rest of the episode")
            res = replace(res, stderr=res.stderr + f"\n{self.over_quota}\n", killed_reason="disk")
        return res

    def disk_usage(self) -> str | None:
        """None when the workspace is within its quota of bytes and files, else how it is over."""
        files, size = 0, 0
        try:
            for node in safefs.walk(self.root, max_entries=self.limits.disk_files):
                files += 1
                size += node.st.st_size if stat.S_ISREG(node.st.st_mode) else 0
                if size > self.limits.disk_bytes:
                    return f"more than {self.limits.disk_bytes} bytes"
        except safefs.TreeTooLarge:
            return f"more than {self.limits.disk_files} files and folders"
        except OSError as e:
            return f"unreadable: {e.strerror}"
        return None

    def run_on_copy(self, cmd: list[str], files: dict[str, str], timeout: float | None = None,
                    pass_fds: tuple[int, ...] = ()) -> CmdResult:
        """Run `cmd` in the sandbox on a fresh copy of the workspace with `files` added, then delete it.

        The copy holds the regular files only (by content; no links, special files, .git or
        compiled caches), so nothing the agent planted can make the harness write outside it.
        Raises ScoreError when the workspace cannot be copied within the bounds, ConfigError when
        a file of `files` cannot be placed (a file or folder of the agent's is in the way).
        """
        self.end_session()  # the agent's container (Docker) stops before the tests run in a fresh one
        copy = owned_tempdir("score")
        try:
            try:
                safefs.copy_regular_files(self.root, copy, self.limits.disk_files, self.limits.disk_bytes)
            except (safefs.TreeTooLarge, OSError) as e:
                raise ScoreError(f"the workspace cannot be copied for scoring: {e or type(e).__name__}") from None
            for rel, text in files.items():
                _place(copy, _check_rel(rel), text.encode("utf-8"))
            hand_over(copy)
            return run_sandboxed(cmd, copy, self.limits_for(timeout), env=GIT_AGENT_ENV, sandbox=self.spec,
                                 pass_fds=pass_fds)
        finally:
            safefs.remove_tree(copy)

    # -- changes ----------------------------------------------------------------------------
    def _scan(self) -> tuple[dict[str, Entry], bool]:
        """(mode, digest) of every file of the working tree (links not followed, contents never
        kept), and whether MAX_FILES cut the scan."""
        found: dict[str, Entry] = {}
        try:
            for node in safefs.walk_workspace(self.root, max_entries=MAX_FILES * 4):
                if len(found) >= MAX_FILES:
                    return found, True
                entry = _entry(node)
                if entry is not None:
                    found[node.rel] = entry
        except safefs.TreeTooLarge:
            return found, True
        return found, False

    def _changes(self) -> tuple[list[tuple[str, Entry | None, Entry | None]], bool]:
        before = {rel: ("100644", _digest(data), len(data)) for rel, data in self._snapshot.items()}
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
        """A git-style unified diff of the working tree against the initial files; "" if unchanged.

        Memory and time stay bounded: at most MAX_DIFF_TOTAL bytes of new content are read for
        text diffs, at most MAX_DIFF_FILES files get a header, the text is cut at MAX_DIFF_CHARS.
        """
        changes, cut = self._changes()
        parts: list[str] = []
        budget = [MAX_DIFF_TOTAL]
        size = 0
        for i, (rel, old, new) in enumerate(changes):
            if i >= MAX_DIFF_FILES or size > MAX_DIFF_CHARS:
                parts.append(f"# {len(changes) - i} more changed files not shown\n")
                break
            part = _file_diff(_shown(rel), self._old_text(rel, old), self._new_text(rel, new, budget), old, new)
            parts.append(part)
            size += len(part)
        if cut:
            parts.append(f"# more than {MAX_FILES} files in the workspace; the rest were not compared\n")
        out = "".join(parts)
        return out if len(out) <= MAX_DIFF_CHARS else out[:MAX_DIFF_CHARS] + "\n# diff cut here\n"

    def _old_text(self, rel: str, old: Entry | None) -> bytes | None:
        if old is None:
            return b""
        data = self._snapshot.get(rel, b"")
        return data if len(data) <= MAX_DIFF_FILE else None

    def _new_text(self, rel: str, new: Entry | None, budget: list[int]) -> bytes | None:
        """The file's bytes when it is small enough to show and the budget allows; else None."""
        if new is None:
            return b""
        if new[0] == "120000":
            return new[1]
        if new[2] > MAX_DIFF_FILE or new[2] > budget[0]:
            return None
        data = safefs.read_rel(self.root, rel, MAX_DIFF_FILE + 1)
        if data is None or len(data) > MAX_DIFF_FILE:
            return None
        budget[0] -= len(data)
        return data

    # -- lifetime ---------------------------------------------------------------------------
    def end_session(self) -> None:
        """Stop what the agent's commands ran in (under Docker, remove its container): the episode is over.
        Later commands (a scorer's) run in a fresh sandbox."""
        self._session.close()
        self._session = open_sandbox(self.spec, self.root, self.limits)

    def cleanup(self) -> None:
        """Close the sandbox and delete the workspace folder (any depth, links never followed); safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            self._session.close()
        finally:
            safefs.remove_tree(self.root)

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


def _place(root: Path, rel: str, data: bytes) -> None:
    """Write `data` at `rel` in a folder the harness made (no links in it), creating folders."""
    target = root / rel
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise ConfigError(f"hidden file '{rel}' cannot be placed: {e.strerror}") from None
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _shown(rel: str) -> str:
    """A path as text that is safe to print and to store as JSON (undecodable bytes replaced)."""
    return rel.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _entry(node: safefs.Node) -> Entry | None:
    """(mode, digest, size) of a regular file or symlink; None for fifos, sockets and devices."""
    st = node.st
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(node.name, dir_fd=node.dir_fd).encode("utf-8", "surrogateescape")
        except OSError:
            return None
        return "120000", target, len(target)
    if not stat.S_ISREG(st.st_mode):
        return None
    mode = "100755" if st.st_mode & 0o111 else "100644"
    try:
        fd = os.open(node.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=node.dir_fd)
    except OSError:
        return None
    digest = hashlib.sha256()
    size = 0
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return mode, digest.digest(), size


def _digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _text(data: bytes | None) -> list[str] | None:
    if data is None or b"\0" in data or len(data) > MAX_DIFF_FILE:
        return None
    try:
        return data.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def _file_diff(rel: str, a_data: bytes | None, b_data: bytes | None, old: Entry | None, new: Entry | None) -> str:
    """One file's diff; `a_data`/`b_data` are the contents to show (None: too large or unread)."""
    if old is not None and new is not None and (old[0] == "120000") != (new[0] == "120000"):
        return _file_diff(rel, a_data, b"", old, None) + _file_diff(rel, b"", b_data, None, new)  # file <-> link
    head = [f"diff --git a/{rel} b/{rel}\n"]
    if old is None and new is not None:
        head.append(f"new file mode {new[0]}\n")
    elif new is None and old is not None:
        head.append(f"deleted file mode {old[0]}\n")
    elif old is not None and new is not None and old[0] != new[0]:
        head += [f"old mode {old[0]}\n", f"new mode {new[0]}\n"]
    a_name = f"a/{rel}" if old is not None else "/dev/null"
    b_name = f"b/{rel}" if new is not None else "/dev/null"
    if old is not None and new is not None and old[1] == new[1]:
        return "".join(head)
    a_lines, b_lines = _text(a_data), _text(b_data)
    if a_lines is None or b_lines is None:
        size = f" ({new[2]} bytes)" if new is not None else ""
        return "".join(head) + f"Binary or large files {a_name} and {b_name} differ{size}\n"
    body = difflib.unified_diff(a_lines, b_lines, a_name, b_name, lineterm="\n", n=3)
    lines = [line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in body]
    return "".join(head + lines)
