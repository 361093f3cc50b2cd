"""The one reader of what a traces folder holds (traces, summary.json, runs.jsonl), which is hostile input:
traces are shared as datasets. Everything that reads such a file back goes through here.

- Regular files only. A file is opened with O_NOFOLLOW | O_NONBLOCK and checked with fstat (a walk also
  lstat-checks it first), so a FIFO, a device or a socket is refused without blocking and no symlink is
  followed. Every symlink is refused, not only those that leave the folder: the harness never writes one,
  a link inside the folder would count an episode twice, and telling inside from outside means resolving
  a path that can change between the check and the open. Folders are walked with `safefs.walk`, which
  never enters a linked folder either. Only the root a user names is taken as given (it may be a link).
- A size cap: at most cap + 1 bytes are read, whatever st_size says (/dev/zero, sparse or growing files).
- JSON text (jsontext.py): a nesting cap, checked by a linear scan of the bytes before `json.loads`
  (which recurses) sees them; finite numbers only; lone surrogates (a JSON escape such as \\ud800) become
  U+FFFD in every string and key, so every writer downstream (report.html, parquet, CSV) can encode them.

A refused file raises `Unreadable`, whose message says why in one line; `skip_line` makes the line to print.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import stat
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..sandbox import safefs
from ..secrets import redact
from ..text import printable

if TYPE_CHECKING:
    pass

MAX_TRACE_BYTES = 128 << 20  # the writer's traces stay far below this (replies and tool output are capped)
MAX_SMALL_BYTES = 16 << 20  # summary.json, runs.jsonl
MAX_ENTRIES = 1 << 22  # folder entries a walk lists before it stops
SHOW_SKIPPED = 20  # skip lines printed before "... and N more"
TRACE_GLOB = "run_*.json"

_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CHUNK = 1 << 20


class Unreadable(ValueError):
    """A file the reader refuses; the message says why, in one line."""


def skip_line(path: str | os.PathLike[str], why: object) -> str:
    """`path: why`, safe to print on one terminal line (control characters escaped)."""
    return printable(f"{path}: {why}")


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symbolic link (not followed)"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "a special file"


def _refuse_mode(mode: int) -> None:
    if stat.S_ISLNK(mode):
        raise Unreadable(_kind(mode))
    if not stat.S_ISREG(mode):
        raise Unreadable(f"{_kind(mode)}, not a regular file")


def open_append(path: str | os.PathLike[str]) -> int:
    """A blocking fd appending to the regular file `path` (created if missing). A FIFO, device,
    symlink or hard link planted there raises OSError at once instead of blocking the open or writing
    through (a second name of a file elsewhere would get the line)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     0o644)
    except OSError as e:  # ELOOP (a link), ENXIO (a FIFO nobody reads): say what is there
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            raise e from None
        if stat.S_ISREG(mode):
            raise
        raise OSError(e.errno, f"{_kind(mode)}, not a regular file", os.fspath(path)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"{_kind(st.st_mode)}, not a regular file", os.fspath(path))
        if st.st_nlink > 1:
            raise OSError(errno.EMLINK, f"a file with {st.st_nlink} names (a hard link), not written through",
                          os.fspath(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def append_text(path: str | os.PathLike[str], text: str) -> None:
    """Append `text` (UTF-8) to the regular file `path`; OSError when `path` is anything else."""
    fd = open_append(path)
    try:
        data = redact(text).encode("utf-8")
        while data:
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)


def read_at(dir_fd: int | None, name: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of the regular file `name` (relative to `dir_fd`), at most `limit`; else Unreadable."""
    try:
        fd = os.open(name, _FLAGS, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Unreadable(_kind(stat.S_IFLNK)) from None
        raise Unreadable(f"cannot open: {e.strerror}") from None
    try:
        _refuse_mode(os.fstat(fd).st_mode)
        chunks, left = [], limit + 1
        while left > 0 and (chunk := os.read(fd, min(left, _CHUNK))):
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as e:
        raise Unreadable(f"cannot read: {e.strerror}") from None
    finally:
        os.close(fd)
    if left <= 0:
        raise Unreadable(f"larger than {limit} bytes")
    return b"".join(chunks)


def read_path(path: str | os.PathLike[str], limit: int) -> bytes:
    """`read_at` for a path (its last component is not followed; the folders above are the caller's)."""
    try:
        _refuse_mode(os.lstat(path).st_mode)
    except OSError as e:
        raise Unreadable(f"cannot open: {e.strerror}") from None
    return read_at(None, path, limit)


def read_rel(root: str | os.PathLike[str], rel: str, limit: int) -> bytes:
    """`read_at` for `rel` under `root`, no link followed anywhere below `root`."""
    head, _, name = rel.rstrip("/").rpartition("/")
    fd = safefs.open_dir(os.path.realpath(root), head) if name else None
    if fd is None:
        raise Unreadable("not found (or under a symbolic link)")
    try:
        return read_at(fd, name, limit)
    finally:
        os.close(fd)


def trace_files(root: str | os.PathLike[str], limit: int = MAX_TRACE_BYTES,
                patterns: tuple[str, ...] = (TRACE_GLOB,)) -> Iterator[tuple[str, bytes | Unreadable]]:
    """Each file under `root` whose name matches `patterns` (traces: ``run_*.json``), in path order: (its
    path from `root`, its bytes or why refused).

    Links and special files with such a name are reported, never opened; a link to a folder is
    reported too (its files are not read). The walk stops, with one report, after MAX_ENTRIES entries.
    """
    top = os.path.realpath(root)
    try:
        for node in safefs.walk(top, max_entries=MAX_ENTRIES):
            mode = node.st.st_mode
            if not any(fnmatch.fnmatchcase(node.name, p) for p in patterns):
                if stat.S_ISLNK(mode) and _is_dir(node):
                    yield node.rel, Unreadable("a symbolic link to a folder (not followed)")
                continue
            if not stat.S_ISREG(mode):
                yield node.rel, Unreadable(_kind(mode) + ("" if stat.S_ISLNK(mode) else ", not a regular file"))
                continue
            try:
                yield node.rel, read_at(node.dir_fd, node.name, limit)
            except Unreadable as e:
                yield node.rel, e
    except safefs.TreeTooLarge:
        yield ".", Unreadable(f"more than {MAX_ENTRIES} entries in the folder: stopped listing")
    except OSError as e:
        yield ".", Unreadable(f"cannot list: {e.strerror}")


def trace_paths(root: str | os.PathLike[str]) -> Iterator[str]:
    """The path from `root` of every entry named like a trace (whatever it is), listed without following
    a link or recursing: a folder nested thousands deep is fine. Nothing is opened."""
    try:
        for node in safefs.walk(os.path.realpath(root), max_entries=MAX_ENTRIES):
            if fnmatch.fnmatchcase(node.name, TRACE_GLOB):
                yield node.rel
    except (safefs.TreeTooLarge, OSError):
        return


def _is_dir(node: safefs.Node) -> bool:
    try:
        return stat.S_ISDIR(os.stat(node.name, dir_fd=node.dir_fd).st_mode)
    except OSError:
        return False


def report_skipped(lines: list[str], what: str = "trace file(s)", file: Any = None) -> None:
    """Print the skip lines (already made safe by `skip_line`) to stderr, at most SHOW_SKIPPED of them."""
    import sys

    if not lines:
        return
    out = file or sys.stderr
    print(f"skipped {len(lines)} unreadable {what}:", file=out)
    for line in lines[:SHOW_SKIPPED]:
        print(f"  {line}", file=out)
    if len(lines) > SHOW_SKIPPED:
        print(f"  ... and {len(lines) - SHOW_SKIPPED} more", file=out)

