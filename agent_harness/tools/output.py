"""Output shown to the model: cut to a size (head and tail kept), without run times."""

from __future__ import annotations

import re


def truncate(text: str, limit: int) -> str:
    """`text` cut to about `limit` chars: head and tail kept, a marker says what was cut."""
    if len(text) <= limit:
        return text
    half = max(limit // 2, 1)
    head = text[:half]
    nl = head.rfind("\n")
    if nl > half // 2:
        head = head[: nl + 1]
    tail = text[len(text) - (limit - half):]
    nl = tail.find("\n")
    if 0 <= nl < len(tail) // 2:
        tail = tail[nl + 1:]
    cut = text[len(head): len(text) - len(tail)]
    marker = f"[... {len(cut)} characters ({cut.count(chr(10))} lines) cut ...]\n"
    return head + ("" if head.endswith("\n") else "\n") + marker + tail


def two_streams(out: str, err: str, limit: int) -> tuple[str, str]:
    """stdout and stderr cut to `limit` chars together, the shorter one kept whole when it fits in half."""
    if len(out) + len(err) <= limit:
        return out, err
    half = limit // 2
    if len(out) <= half:
        return out, truncate(err, limit - len(out))
    if len(err) <= half:
        return truncate(out, limit - len(err)), err
    return truncate(out, half), truncate(err, limit - half)


# Test runners print how long they took; observations must not depend on timing.
_TIMINGS = (
    (re.compile(r"^(Ran \d+ tests?) in \d+(?:\.\d+)?s$", re.M), r"\1"),  # unittest
    (re.compile(r"^(=+ .*?) in \d+(?:\.\d+)?s(?: \([0-9:.]+\))? (=+)$", re.M), r"\1 \2"),  # pytest
)


def strip_timings(text: str) -> str:
    """`text` without the run times test runners print (unittest, pytest)."""
    for rx, repl in _TIMINGS:
        text = rx.sub(repl, text)
    return text
