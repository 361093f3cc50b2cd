"""JSON Lines files (one JSON value a line): the HumanEvalFix rows, scripted replies, `runs.jsonl`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import ConfigError


def read_jsonl(path: Path, what: str = "file", *, skip_bad: bool = False) -> list[tuple[int, Any]]:
    """(line number, value) of every non-blank line of `path`.

    An unreadable file is a ConfigError ("cannot read <what>") and so is a line that is not JSON
    (naming file:line); with `skip_bad` such lines are left out and an unreadable file reads as empty.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        if skip_bad:
            return []
        raise ConfigError(f"{path}: cannot read {what}: {e.strerror}") from None
    out: list[tuple[int, Any]] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append((n, json.loads(line)))
        except ValueError as e:
            if not skip_bad:
                raise ConfigError(f"{path}:{n}: invalid JSON: {e}") from None
    return out
