"""Making text that came from the model safe for the OS, for JSON files and for tokenizers."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from .secrets import redact

# A lone surrogate (e.g. the JSON escape "\ud800") is a valid Python str but not encodable as UTF-8:
# the OS, the trace writer and the tokenizers would all raise on it.
_SURROGATES = {c: 0xFFFD for c in range(0xD800, 0xE000)}
MAX_ERROR_CHARS = 500


def has_surrogates(s: str) -> bool:
    """True when `s` cannot be encoded as UTF-8 (it holds a lone surrogate)."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def safe_text(s: str) -> str:
    """`s` with every lone surrogate replaced by U+FFFD (the same object when there is none)."""
    return s.translate(_SURROGATES) if has_surrogates(s) else s


def error_message(e: BaseException, hide: tuple[str, ...] = ()) -> str:
    """The message of an exception for an observation or a trace: the `hide` paths (the workspace's
    host folder) removed, surrogates replaced, and cut to a readable length."""
    msg = str(e)
    for path in sorted({p for p in hide if p}, key=len, reverse=True):
        msg = msg.replace(path + "/", "").replace(path, ".")
    msg = safe_text(msg)
    return msg if len(msg) <= MAX_ERROR_CHARS else msg[: MAX_ERROR_CHARS - 3] + "..."


def error_text(e: BaseException, hide: tuple[str, ...] = ()) -> str:
    """`Type: message` of an exception (see `error_message`)."""
    msg = error_message(e, hide)
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


# What a terminal acts on rather than shows: C0 controls, DEL, C1 controls (ESC and CSI start escape
# sequences), lone surrogates (not encodable), the bidirectional overrides and the line/paragraph
# separators (they reorder or break what the reader sees).
_UNPRINTABLE = [*range(0x00, 0x20), *range(0x7F, 0xA0), *range(0xD800, 0xE000), 0x2028, 0x2029,
                *range(0x200E, 0x2010), *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_ESCAPES = {c: (f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}") for c in _UNPRINTABLE} | {
    0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
_MULTILINE = {c: e for c, e in _ESCAPES.items() if c not in (0x09, 0x0A)}


def printable(s: str, multiline: bool = False) -> str:
    """`s` safe to print on a terminal: every control character (C0, DEL, C1, ESC included), lone
    surrogate, bidi override and line separator written as a visible escape such as `\\x1b`.
    Newlines and tabs are escaped too, unless `multiline` (where a multi-line print is intended)."""
    return s.translate(_MULTILINE if multiline else _ESCAPES)



# Markdown: what can start markup inside a line (code, emphasis, links, images, tables, math, escapes).
_MD_SPECIAL = {ord(c): "\\" + c for c in "\\`*_[]|~$"} | {ord("&"): "&amp;", ord("<"): "&lt;", ord(">"): "&gt;"}
_MD_LEADING = re.compile(r"^(\d{1,9}(?=[.)](?:[ \t]|$))|(?=[#=+-]+(?:[ \t]|$)))")  # "1. ", "# ", "- ", "---"


def md_inline(value: object) -> str:
    """`value` as inline Markdown text that shows as written: no line ending of any kind (line breaks,
    \\r, \\v, \\f, \\x1c-\\x1e, NEL, U+2028/9 and every other control character are shown as escapes,
    see `printable`), no HTML (& < > as entities), and the characters that open code, emphasis, links,
    images, table cells or math escaped. The one helper for every trace-provided string that a generated
    document (analysis .md files, the dataset card) contains."""
    text = printable(str(value)).translate(_MD_SPECIAL)
    return _MD_LEADING.sub(r"\1\\", text, count=1)  # a list item or heading, were it to start a line


_STREAM = {c: e for c, e in _MULTILINE.items() if c != 0x0D}  # \r kept: library progress bars redraw with it


class PrintableStream:
    """A text stream (stdout, stderr) that writes everything escaped as `printable(s, multiline=True)` does,
    carriage returns kept, to `target`: the last line of defence for prints of outside text."""

    def __init__(self, target: Any) -> None:
        self.target = target

    def write(self, s: str) -> int:
        self.target.write(redact(s).translate(_STREAM))
        return len(s)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, flush, encoding, ...
        return getattr(self.target, name)


def terminal_stream(stream: Any) -> Any:
    """The stream under a `PrintableStream` (for rich, whose own escape codes must pass; its cells are
    escaped one by one)."""
    return stream.target if isinstance(stream, PrintableStream) else stream


@contextmanager
def printable_stdio() -> Iterator[None]:
    """sys.stdout and sys.stderr escape what is printed to them inside the block."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (s if s is None else PrintableStream(s) for s in saved)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
