"""Reading a JSON Lines file whose every line must parse: a bad line is a one-line ConfigError."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import ConfigError


def read_jsonl(path: Path, what: str) -> list[tuple[int, Any]]:
    """(line number, value) of each non-blank line; `what` names the file in the error ("script", "dataset")."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read {what}: {e.strerror}") from None
    rows: list[tuple[int, Any]] = []
    for n, line in enumerate(lines, 1):
        if line.strip():
            try:
                rows.append((n, json.loads(line)))
            except ValueError as e:
                raise ConfigError(f"{path}:{n}: invalid JSON: {e}") from None
    return rows
