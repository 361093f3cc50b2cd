"""JSON text of traces: the nesting scan that runs before `json.loads` (which recurses), parsing with finite
numbers and no lone surrogates, and the writer's encoding, which always stays within what the reader takes
(see files.py for the files themselves)."""

from __future__ import annotations

import json
import math
import os
import re
from typing import TYPE_CHECKING, Any

from ..secrets import held, redact_value
from ..text import safe_text
from .files import MAX_SMALL_BYTES, Unreadable, read_path

if TYPE_CHECKING:
    import numpy as np

_CHUNK = 1 << 20  # bytes scanned at once
MAX_DEPTH = 200  # a trace nests about 6 deep, plus whatever tool args a model wrote (the writer keeps it within)


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
