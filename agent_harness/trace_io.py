"""The one reader of what a traces folder holds (traces, summary.json, runs.jsonl), which is hostile input:
traces are shared as datasets. Everything that reads such a file back goes through here.

- Regular files only. A file is opened with O_NOFOLLOW | O_NONBLOCK and checked with fstat (a walk also
  lstat-checks it first), so a FIFO, a device or a socket is refused without blocking and no symlink is
  followed. Every symlink is refused, not only those that leave the folder: the harness never writes one,
  a link inside the folder would count an episode twice, and telling inside from outside means resolving
  a path that can change between the check and the open. Folders are walked with `safefs.walk`, which
  never enters a linked folder either. Only the root a user names is taken as given (it may be a link).
- A size cap: at most cap + 1 bytes are read, whatever st_size says (/dev/zero, sparse or growing files).
- A nesting cap, checked by a linear scan of the bytes before `json.loads` (which recurses) sees them.
- Numbers are finite: NaN, Infinity and numbers too large for a float are refused.
- Lone surrogates (a JSON escape such as \\ud800) become U+FFFD in every string and key, so every writer
  downstream (report.html, parquet, CSV) can encode what it is given.

A refused file raises `Unreadable`, whose message says why in one line; `skip_line` makes the line to print.
"""

from __future__ import annotations

import errno
import fnmatch
import json
import math
import os
import re
import stat
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from . import safefs
from .secrets import held, redact, redact_value
from .text import printable, safe_text

if TYPE_CHECKING:
    import numpy as np

MAX_TRACE_BYTES = 128 << 20  # the writer's traces stay far below this (replies and tool output are capped)
MAX_SMALL_BYTES = 16 << 20  # summary.json, runs.jsonl
MAX_DEPTH = 200  # a trace nests about 6 deep, plus whatever tool args a model wrote (the writer keeps it within)
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


# -- nesting depth -----------------------------------------------------------------------------------
def _tables() -> tuple[np.ndarray, np.ndarray]:
    import numpy as np

    tokens = np.zeros(256, bool)
    tokens[[ord(c) for c in '"\\[]{}']] = True
    delta = np.zeros(256, np.int64)
    delta[[ord("["), ord("{")]] = 1
    delta[[ord("]"), ord("}")]] = -1
    return tokens, delta


def too_deep(raw: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON text `raw` nests brackets deeper than `limit` (outside strings): one linear scan.

    Vectorised over the bracket, quote and backslash bytes, a chunk at a time; a chunk never ends inside
    a run of backslashes, so whether a quote is escaped is decided within its chunk. Where `raw` is not
    JSON the answer can be too high (the parser would refuse the text anyway), never too low for the part
    the parser reads before it fails.
    """
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    import numpy as np

    tokens, delta = _tables()
    data = np.frombuffer(raw, np.uint8)
    depth, in_string, start = 0, 0, 0
    while start < len(data):
        end = min(start + _CHUNK, len(data))
        while end < len(data) and data[end - 1] == 0x5C:
            end += 1
        arr = data[start:end]
        pos = np.flatnonzero(tokens[arr])
        ch = arr[pos]
        bs = ch == 0x5C
        after_bs = np.zeros(len(pos), bool)  # the token right before this one is a backslash, adjacent
        after_bs[1:] = bs[:-1] & (np.diff(pos) == 1)
        idx = np.arange(len(pos))
        run_start = np.maximum.accumulate(np.where(bs & ~after_bs, idx, -1)) if len(pos) else idx
        odd_run = bs & ((idx - run_start) % 2 == 0)  # ends a backslash run of odd length so far
        escaped = np.zeros(len(pos), bool)
        escaped[1:] = after_bs[1:] & odd_run[:-1]
        quote = (ch == 0x22) & ~escaped
        inside = (np.cumsum(quote) - quote + in_string) % 2 == 1
        levels = depth + np.cumsum(np.where(inside, 0, delta[ch]))
        if len(levels) and int(levels.max()) > limit:
            return True
        depth = int(levels[-1]) if len(levels) else depth
        in_string = (in_string + int(quote.sum())) % 2
        start = end
    return False


# -- JSON ------------------------------------------------------------------------------------------------
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _no_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name}")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:30]} is out of range for a float")
    return value


def without_surrogates(value: Any) -> Any:
    """`value` with lone surrogates replaced in every string and key (containers changed in place)."""
    if isinstance(value, str):
        return safe_text(value)
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            pairs = list(item.items())
            item.clear()
            for k, v in pairs:
                if isinstance(v, str):
                    v = safe_text(v)
                elif isinstance(v, dict | list):
                    stack.append(v)
                item[safe_text(k)] = v
        elif isinstance(item, list):
            for n, v in enumerate(item):
                if isinstance(v, str):
                    item[n] = safe_text(v)
                elif isinstance(v, dict | list):
                    stack.append(v)
    return value


def parse_json(raw: bytes, finite: bool = True, depth_checked: bool = False) -> Any:
    """The JSON value in `raw` (UTF-8), within the nesting cap (unless the caller `depth_checked` it);
    NaN and Infinity refused when `finite`."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Unreadable(f"not UTF-8 (byte {e.start})") from None
    if not depth_checked and too_deep(raw):
        raise Unreadable(f"JSON nested deeper than {MAX_DEPTH}")
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite) if finite else json.loads(text)
    except RecursionError:  # cannot happen within MAX_DEPTH; kept as a one-line refusal all the same
        raise Unreadable(f"JSON nested deeper than {MAX_DEPTH}") from None
    except ValueError as e:  # JSONDecodeError included; its message has no file content in it
        raise Unreadable(f"{type(e).__name__}: {e}") from None
    return without_surrogates(value) if _SURROGATE_ESCAPE.search(raw) else value


def read_json(path: str | os.PathLike[str], limit: int = MAX_SMALL_BYTES, finite: bool = False) -> Any:
    """The JSON value of a small file such as summary.json (non-finite numbers allowed unless `finite`)."""
    return parse_json(read_path(path, limit), finite)


def read_json_lines(path: str | os.PathLike[str], limit: int = MAX_SMALL_BYTES,
                    finite: bool = False) -> list[tuple[int, Any]]:
    """(line number, value or the Unreadable of that line) of every non-blank line of a JSON Lines file."""
    out: list[tuple[int, Any]] = []
    for n, line in enumerate(read_path(path, limit).splitlines(), 1):
        if line.strip():
            try:
                out.append((n, parse_json(line, finite)))
            except Unreadable as e:
                out.append((n, e))
    return out


def encode_json(data: Any) -> bytes:
    """`data` as the compact UTF-8 JSON the trace writer stores, always within what this reader takes,
    so that an episode's own trace is never refused (and dropped from pass@1) whatever a model put in
    its tool args: lone surrogates become U+FFFD, NaN and Infinity null (a step's embedding holding
    one: no embedding), and lists or objects nested past MAX_DEPTH their JSON text."""
    try:
        raw = _dumps(data)
    except RecursionError:  # nesting json cannot write
        return _dumps(_sanitized(data, MAX_DEPTH))
    except ValueError as e:  # a non-finite float (a circular reference is a bug: raised)
        if "ircular" in str(e):
            raise
        return _dumps(_sanitized(data, MAX_DEPTH))
    return _dumps(_sanitized(data, MAX_DEPTH)) if too_deep(raw) else raw


def _dumps(data: Any) -> bytes:
    # dumps() uses the C encoder; dump() streams through the pure-Python one (several times slower).
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    if held(text):  # a server quoted a secret (secrets.py): never stored
        text = json.dumps(redact_value(data), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from the model (a JSON escape like \ud800)
        return safe_text(text).encode("utf-8")


def _bad_float(v: Any) -> bool:
    return isinstance(v, float) and not math.isfinite(v)


def _sanitized(data: Any, limit: int) -> Any:
    """A copy of `data` that `_dumps` writes within `limit` levels, non-finite floats as null. Iterative."""
    top: list[Any] = [None]
    todo: list[tuple[Any, Any, Any, int]] = [(data, top, 0, 1)]
    while todo:
        value, parent, key, level = todo.pop()
        if isinstance(value, dict | list) and level > limit:
            parent[key] = _deep_text(value)
        elif isinstance(value, dict):
            parent[key] = obj = dict.fromkeys(value)
            todo.extend((v, obj, k, level + 1) for k, v in value.items())
        elif key == "embedding" and isinstance(value, list) and any(map(_bad_float, value)):
            parent[key] = None
        elif isinstance(value, list):
            parent[key] = items = [None] * len(value)
            todo.extend((v, items, n, level + 1) for n, v in enumerate(value))
        else:
            parent[key] = None if _bad_float(value) else value
    return top[0]


def _deep_text(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (RecursionError, ValueError, TypeError):
        return "<nested too deep to store>"


# -- walking a traces folder ---------------------------------------------------------------------------
def trace_files(root: str | os.PathLike[str], limit: int = MAX_TRACE_BYTES) -> Iterator[tuple[str, bytes | Unreadable]]:
    """Each ``run_*.json`` under `root`, in path order: (its path from `root`, its bytes or why refused).

    Links and special files named like a trace are reported, never opened; a link to a folder is
    reported too (its traces are not read). The walk stops, with one report, after MAX_ENTRIES entries.
    """
    top = os.path.realpath(root)
    try:
        for node in safefs.walk(top, max_entries=MAX_ENTRIES):
            mode = node.st.st_mode
            if not fnmatch.fnmatchcase(node.name, TRACE_GLOB):
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

