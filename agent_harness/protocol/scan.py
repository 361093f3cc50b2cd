"""Scanning model text without regexes: lines, the markers that open them (THOUGHT:, TOOL_CALL:,
FINAL:, <tool_call>), code fences, and a bare call object. Every scan here touches each character
a bounded number of times, so the parser stays linear on hostile replies."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

# Markers start a line, allowing markdown decoration: **TOOL_CALL:**, ## Final:, > Thought:, <tool_call>.
# Model text is scanned with str methods and index loops, never a backtracking regex: every scan
# below touches each character a bounded number of times (tests/test_protocol_linear.py counts).
SPACE = " \t"
DECOR = "*_#>`"
KEYWORDS: tuple[tuple[str, Literal["thought", "call", "final"]], ...] = (
    ("THOUGHTS", "thought"), ("THOUGHT", "thought"), ("TOOL_CALL", "call"), ("TOOL-CALL", "call"),
    ("TOOL CALL", "call"), ("TOOLCALL", "call"), ("FINAL_ANSWER", "final"), ("FINAL ANSWER", "final"),
    ("FINAL", "final"),
)
BY_INITIAL = {c: tuple(k for k in KEYWORDS if k[0][0] == c) for c in {word[0] for word, _ in KEYWORDS}}
XML_CALL = "<tool_call>"
CALL_NAMES = ("tool", "name", "function")


@dataclass(frozen=True)
class Marker:
    kind: Literal["thought", "call", "final"]
    start: int
    end: int



def is_word(s: str, extra: str) -> bool:
    """`s` is empty or only regex word characters (letters, digits, _) and the `extra` ones."""
    for c in extra:
        s = s.replace(c, "a")
    return not s or s.replace("_", "a").isalnum()


def skip_space(text: str, i: int) -> int:
    """The first index at or after `i` that is not whitespace."""
    n = len(text)
    while i < n and text[i].isspace():
        i += 1
    return i


def lines(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of every line of `text`, the newline excluded."""
    start = 0
    for line in text.split("\n"):
        end = start + len(line)
        yield start, end
        start = end + 1


def line_marker(text: str, start: int, end: int) -> Marker | None:
    """The marker that opens the line text[start:end], if there is one."""
    line = text[start:end]
    body = line.lstrip(SPACE)
    if not body:
        return None
    if body[: len(XML_CALL)].lower() == XML_CALL:
        tail = body[len(XML_CALL):].lstrip(SPACE)
        return Marker("call", start, end - len(tail))
    rest = body.lstrip(DECOR)
    pre = len(rest) < len(body)
    if pre:
        rest = rest.lstrip(SPACE)
    for word, kind in BY_INITIAL.get(rest[:1].upper(), ()):  # most lines start with no keyword's letter
        if rest[: len(word)].upper() != word:
            continue
        tail = rest[len(word):].lstrip(SPACE).lstrip("*_`").lstrip(SPACE)
        if tail.startswith(":"):
            tail = tail[1:].lstrip("*_`") if pre else tail[1:]
            return Marker(kind, start, end - len(tail.lstrip(SPACE)))
    return None


def markers(text: str) -> list[Marker]:
    return [m for start, end in lines(text) if (m := line_marker(text, start, end)) is not None]


def inline_marker(text: str) -> Marker | None:
    """The first "TOOL_CALL:" or "FINAL:" anywhere (used only when no line starts with a marker)."""
    hits = [(i, kind, len(word)) for word, kind in (("TOOL_CALL:", "call"), ("FINAL:", "final"))
            if (i := text.find(word)) >= 0]
    if not hits:
        return None
    i, kind, width = min(hits)
    return Marker(kind, i, i + width)  # type: ignore[arg-type]


def bare_call(text: str) -> int:
    """Index of the first `{"tool":` (or name/function, quotes optional) in `text`, or -1."""
    n = len(text)
    i = text.find("{")
    while i >= 0:
        j = skip_space(text, i + 1)
        j += j < n and text[j] in "\"'"
        word = next((w for w in CALL_NAMES if text.startswith(w, j)), None)
        if word is not None:
            k = j + len(word)
            k += k < n and text[k] in "\"'"
            if text.startswith(":", skip_space(text, k)):
                return i
        i = text.find("{", i + 1)
    return -1


def is_fence_line(line: str) -> bool:
    """A line holding only a ``` fence with an optional language tag."""
    t = line.strip(SPACE)
    return t.startswith("```") and is_word(t[3:], "+-")


def fence_open_at_end(s: str) -> int:
    """Where a ``` fence opener (tag, spaces, one newline, spaces) that ends `s` starts, or -1."""
    t = s.rstrip(SPACE)
    if t.endswith("\n"):
        t = t[:-1].rstrip(SPACE)
    k = len(t)
    while k and (t[k - 1].isalnum() or t[k - 1] in "_+-"):
        k -= 1
    return k - 3 if t.endswith("```", 0, k) else -1


def drop_closing_fence(s: str) -> str:
    """`s` without a last line that holds only ``` (the closing fence of a fenced reply)."""
    t = s.rstrip(SPACE)
    if t.endswith("```"):
        u = t[:-3].rstrip(SPACE)
        if u.endswith("\n"):
            return u[:-1]
    return s


def closers_end(text: str, i: int) -> int:
    """Index past the whitespace, ``` fences, `)` and `</tool_call>` that follow a call at `i`."""
    n = len(text)
    while i < n:
        if text[i].isspace() or text[i] in ")`":
            i += 1
        elif text.startswith("</tool_call>", i):
            i += len("</tool_call>")
        else:
            break
    return i


def fenced_block(text: str, i: int) -> tuple[str, int] | None:
    """(body, end) of the ``` block opened at text[i]: its text, and the end of its closing line."""
    nl = text.find("\n", i)
    if nl < 0 or not is_word(text[i + 3:nl].rstrip(SPACE), "+.-"):
        return None
    rest = text[nl + 1:]
    for start, end in lines(rest):
        if rest[start:end].strip(SPACE) == "```":
            return rest[:start], nl + 1 + end
    return None


def name_hint(prefix: str) -> str | None:
    """A tool name written before the JSON (`read_file {...}`, `read_file(`), else None."""
    name = (prefix[:-1] if prefix.endswith("(") else prefix).rstrip()
    if not name or not (name[0].isascii() and (name[0].isalpha() or name[0] == "_")):
        return None
    return name if is_word(name[1:], ".-") else None



def strip_fences(s: str) -> str:
    """`s` with every fence line emptied, stripped. Only lines holding ``` are looked at (most replies'
    lines are not, and a visit per line costs more than a find per fence)."""
    parts, pos, j = [], 0, s.find("```")
    while j >= 0:
        a, b = s.rfind("\n", 0, j) + 1, s.find("\n", j)
        b = len(s) if b < 0 else b
        if is_fence_line(s[a:b]):
            parts.append(s[pos:a])
            pos = b
        j = s.find("```", b)
    parts.append(s[pos:])
    return "".join(parts).strip()

