"""File operations on a tree that hostile code has written: walk, read, copy and delete.

Nothing here follows a symlink or resolves a path string below the tree's root: every step opens
one name relative to an open directory with O_NOFOLLOW, so a folder swapped for a link to the host
is never entered. Walks and deletions keep one directory open at a time and climb back with
"..", so they work at any depth and path length without recursion. They are meant for trees no
process is changing while they run (the sandbox kills a command's processes before it returns).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CHUNK = 1 << 20
# The one ignore list for the agent's changes (workspace diffs, the scorers' checks, the copy that
# hidden tests run on): what git and Python write, never the agent's work.
IGNORED_DIRS = (".git", "__pycache__")  # folders never entered, at any depth
IGNORED_SUFFIXES = (".pyc",)  # files left out wherever they are


class TreeTooLarge(Exception):
    """A walk met more entries than it was allowed to look at."""


@dataclass(frozen=True)
class Node:
    """One non-directory entry met by `walk`: its path from the root, and where to open it."""

    rel: str
    name: str
    dir_fd: int  # valid only until the walk moves on
    st: os.stat_result


def _listing(fd: int, budget: list[int]) -> list[tuple[str, os.stat_result]]:
    """The entries of the open directory `fd`, sorted by name, counted against `budget`."""
    out: list[tuple[str, os.stat_result]] = []
    with os.scandir(fd) as it:
        for entry in it:
            budget[0] -= 1
            if budget[0] < 0:
                raise TreeTooLarge
            with contextlib.suppress(OSError):
                out.append((entry.name, entry.stat(follow_symlinks=False)))
    out.sort(key=lambda e: e[0], reverse=True)  # popped from the end: ascending order
    return out


def walk(root: str | os.PathLike[str], skip_dirs: tuple[str, ...] = (), max_entries: int = 1 << 20) -> Iterator[Node]:
    """Every non-directory entry under `root` (links and special files included, never followed),
    depth first in name order; folders named in `skip_dirs` are not entered. Raises TreeTooLarge
    once more than `max_entries` entries (folders included) were listed."""
    fd = os.open(root, _DIR_FLAGS)
    budget = [max_entries]
    prefix: list[str] = []
    try:
        pending = [_listing(fd, budget)]
        while pending:
            if not pending[-1]:
                pending.pop()
                if prefix:
                    prefix.pop()
                    up = os.open("..", _DIR_FLAGS, dir_fd=fd)
                    os.close(fd)
                    fd = up
                continue
            name, st = pending[-1].pop()
            if stat.S_ISDIR(st.st_mode):
                if name in skip_dirs:
                    continue
                try:
                    sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    continue
                os.close(fd)
                fd = sub
                prefix.append(name)
                pending.append(_listing(fd, budget))
            else:
                yield Node("/".join([*prefix, name]), name, fd, st)
    finally:
        os.close(fd)


def walk_workspace(root: str | os.PathLike[str], max_entries: int = 1 << 20) -> Iterator[Node]:
    """`walk` without what the ignore list names (IGNORED_DIRS, IGNORED_SUFFIXES)."""
    for node in walk(root, IGNORED_DIRS, max_entries):
        if not node.name.endswith(IGNORED_SUFFIXES):
            yield node


def ignored(rel: str) -> bool:
    """Whether the path `rel` (from a tree's root) is one that `walk_workspace` leaves out."""
    *folders, name = rel.split("/")
    return any(f in IGNORED_DIRS for f in folders) or name.endswith(IGNORED_SUFFIXES)


def read_node(node: Node, limit: int) -> bytes | None:
    """Up to `limit` bytes of a regular file met by `walk`; None for anything else."""
    if not stat.S_ISREG(node.st.st_mode):
        return None
    return read_at(node.dir_fd, node.name, limit)


def read_at(dir_fd: int | None, name: str | os.PathLike[str], limit: int) -> bytes | None:
    """Up to `limit` bytes of the regular file `name` (in the open folder `dir_fd`); None for anything else."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, left = [], limit
        while left > 0 and (chunk := os.read(fd, min(left, _CHUNK))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def open_dir(root: str | os.PathLike[str], rel: str) -> int | None:
    """An fd of the folder `rel` under `root` reached without following links; None if there is none."""
    fd = os.open(root, _DIR_FLAGS)
    for part in (p for p in rel.split("/") if p not in ("", ".")):
        try:
            sub = os.open(part, _DIR_FLAGS, dir_fd=fd) if part != ".." else -1
        except OSError:
            sub = -1
        os.close(fd)
        if sub < 0:
            return None
        fd = sub
    return fd


def lstat_rel(root: str | os.PathLike[str], rel: str) -> os.stat_result | None:
    """lstat of `rel` under `root`, no link followed on the way; None when it is not there."""
    head, _, name = rel.rstrip("/").rpartition("/")
    fd = open_dir(root, head)
    if fd is None or not name:
        if fd is not None:
            os.close(fd)
        return None
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_rel(root: str | os.PathLike[str], rel: str, limit: int) -> bytes | None:
    """Up to `limit` bytes of the regular file `rel` under `root`, no link followed; else None."""
    head, _, name = rel.rstrip("/").rpartition("/")
    fd = open_dir(root, head)
    if fd is None:
        return None
    try:
        return read_at(fd, name, limit) if name else None
    finally:
        os.close(fd)


def readlink_rel(root: str | os.PathLike[str], rel: str) -> str | None:
    """The target of the symlink `rel` under `root` (not followed); None when it is not a link."""
    head, _, name = rel.rstrip("/").rpartition("/")
    fd = open_dir(root, head)
    if fd is None:
        return None
    try:
        return os.readlink(name, dir_fd=fd) if name else None
    except OSError:
        return None
    finally:
        os.close(fd)


@dataclass
class CopyStats:
    files: int = 0
    bytes: int = 0
    skipped: int = 0  # links, special files, paths too long to recreate


def copy_regular_files(src: str | os.PathLike[str], dst: Path, max_files: int, max_bytes: int) -> CopyStats:
    """Copy the regular files of `src` into the empty folder `dst` by content (mode 0644 or 0755).

    Links, fifos, sockets, devices and what the ignore list names are left out. Raises TreeTooLarge
    past `max_files` files or `max_bytes` bytes in all.
    """
    stats = CopyStats()
    for node in walk(src, IGNORED_DIRS, max_entries=max_files * 4 + 1000):
        if not stat.S_ISREG(node.st.st_mode) or node.name.endswith(IGNORED_SUFFIXES):
            stats.skipped += 1
            continue
        if len(node.rel.encode("utf-8", "surrogateescape")) > 3000:
            stats.skipped += 1
            continue
        stats.files += 1
        if stats.files > max_files:
            raise TreeTooLarge(f"more than {max_files} files")
        data = read_node(node, max_bytes - stats.bytes + 1)
        if data is None:
            stats.skipped += 1
            continue
        stats.bytes += len(data)
        if stats.bytes > max_bytes:
            raise TreeTooLarge(f"more than {max_bytes} bytes")
        target = dst / node.rel
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o755 if node.st.st_mode & 0o111 else 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    return stats


def remove_tree(root: str | os.PathLike[str]) -> None:
    """Delete `root` and everything in it, at any depth, never following a link.

    Folders the tree's owner made unwritable or unreadable are opened up first (matters when the
    harness is not root). Raises OSError naming what could not be removed; missing root is fine.
    """
    try:
        fd = os.open(root, _DIR_FLAGS)
    except FileNotFoundError:
        return
    except NotADirectoryError:
        os.unlink(root)
        return
    stack: list[tuple[str, set[str]]] = []  # (name of the folder we are in, names that failed in it)
    failed: set[str] = set()
    first_error: OSError | None = None
    try:
        while True:
            sub_name = None
            with os.scandir(fd) as it:
                for entry in it:
                    if entry.name in failed:
                        continue
                    try:
                        is_dir = entry.is_dir(follow_symlinks=False)
                    except OSError:
                        is_dir = False
                    if is_dir:
                        sub_name = entry.name
                        break
                    try:
                        _unlink(fd, entry.name)
                    except OSError as e:
                        failed.add(entry.name)
                        first_error = first_error or e
            if sub_name is not None:
                try:
                    sub = _open_sub(fd, sub_name)
                except OSError as e:
                    failed.add(sub_name)
                    first_error = first_error or e
                    continue
                os.close(fd)
                fd = sub
                stack.append((sub_name, failed))
                failed = set()
                continue
            if not stack:
                break
            name, parent_failed = stack.pop()
            up = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = up
            failed = parent_failed
            try:
                os.rmdir(name, dir_fd=fd)
            except OSError as e:
                failed.add(name)
                first_error = first_error or e
    finally:
        os.close(fd)
    try:
        os.rmdir(root)
    except OSError as e:
        raise OSError(e.errno, f"could not remove all of {root}: {first_error or e}") from None


def _unlink(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except PermissionError:
        os.fchmod(dir_fd, 0o700)
        os.unlink(name, dir_fd=dir_fd)


def _open_sub(dir_fd: int, name: str) -> int:
    try:
        sub = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except PermissionError:
        os.chmod(name, 0o700, dir_fd=dir_fd)  # a folder (lstat said so); nothing runs to swap it
        sub = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    with contextlib.suppress(OSError):
        os.fchmod(sub, 0o700)
    return sub
