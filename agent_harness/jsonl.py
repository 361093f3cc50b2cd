"""JSON Lines files (one JSON value a line): the HumanEvalFix rows, scripted replies, `runs.jsonl`.

Read by the safe reader (`trace_io`): a regular file only (a FIFO or a device is refused, never waited
on), at most `MAX_JSONL_BYTES`, each line within the nesting cap.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import ConfigError
from .traces.files import Unreadable, skip_line
from .traces.jsontext import read_json_lines

MAX_JSONL_BYTES = 1 << 30


def read_jsonl(path: Path, what: str = "file", *, skip_bad: bool = False,
               limit: int = MAX_JSONL_BYTES) -> list[tuple[int, Any]]:
    """(line number, value) of every non-blank line of `path`.

    An unreadable file is a ConfigError ("cannot read <what>") and so is a line that is not JSON
    (naming file:line); with `skip_bad` such lines are left out and an unreadable file reads as empty.
    A file over `limit` bytes is unreadable.
    """
    try:
        lines = read_json_lines(path, limit)
    except Unreadable as e:
        if skip_bad:
            return []
        raise ConfigError(skip_line(path, f"cannot read {what}: {e}")) from None
    out: list[tuple[int, Any]] = []
    for n, value in lines:
        if not isinstance(value, Unreadable):
            out.append((n, value))
        elif not skip_bad:
            raise ConfigError(skip_line(f"{path}:{n}", f"invalid JSON: {value}")) from None
    return out
