"""Failure extraction: the failing check of a test run (unittest, pytest or a bare traceback), and
the SyntaxError of a Python file, as the few lines a small model can act on."""

from __future__ import annotations

import ast
import os
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace

from ..sandbox import WORKDIR

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>.+))?$')
_UNITTEST_HEAD = re.compile(r"^(?:FAIL|ERROR): \S.*$")
_PYTEST_LOC = re.compile(r"^(?P<file>\S+\.py):(?P<line>\d+): \w+")
_MAX_LINE = 300
VALUES_HEADER = "Values in the failing assert:"  # values_main.py's; its lines follow, two spaces in
MAX_VALUES = 4
MAX_POINT = 200  # characters of a failing line kept by `failure_point`
MAX_STATEMENT_LINES = 40  # a failing check read whole from its file: at most this many lines
MAX_STATEMENT_CHARS = 4000  # ... and characters


@dataclass
class Frame:
    file: str
    line: int
    code: str = ""


def _shown_path(path: str) -> str:
    return path[len(WORKDIR) + 1:] if path.startswith(WORKDIR + "/") else path


def _traceback(lines: list[str], start: int) -> tuple[list[Frame], str] | None:
    """Frames and exception line of the first traceback at or after `start`."""
    marker = "Traceback (most recent call last):"
    i = next((j for j in range(start, len(lines)) if lines[j].strip() == marker), None)
    if i is None:
        return None
    frames: list[Frame] = []
    for line in lines[i + 1:]:
        m = _FRAME.match(line)
        if m:
            frames.append(Frame(_shown_path(m["file"]), int(m["line"])))
        elif line[:1].isspace():
            code = line.strip()
            if frames and not frames[-1].code and code and set(code) - set("^~ "):
                frames[-1].code = code
        elif line.strip():
            return frames, line.strip()
    return (frames, "") if frames else None


def _pytest(lines: list[str]) -> tuple[list[Frame], str] | None:
    errors = [ln[1:].strip() for ln in lines if ln.startswith("E ")]
    if not errors:
        return None
    code = next((ln[1:].strip() for ln in lines if ln.startswith(">")), "")
    loc = next((m for m in map(_PYTEST_LOC.match, lines) if m), None)
    frame = Frame(loc["file"] if loc else "?", int(loc["line"]) if loc else 0, code)
    return [frame], errors[0]


def _is_check(f: Frame) -> bool:
    return "assert" in f.code or os.path.basename(f.file).startswith("test") or "/tests/" in f.file


def whole_statement(source: str, line: int) -> str | None:
    """The statement that starts at `line` of `source`, all its lines (a traceback shows only the first).
    Read by parsing growing runs of lines, so a huge or hostile file costs little: None past
    MAX_STATEMENT_LINES lines or MAX_STATEMENT_CHARS characters."""
    lines = source.splitlines()[line - 1:line - 1 + MAX_STATEMENT_LINES] if line >= 1 else []
    size = 0
    for k in range(1, len(lines) + 1):
        size += len(lines[k - 1]) + 1
        if size > MAX_STATEMENT_CHARS:
            return None
        try:  # inside brackets indentation does not count: each line stripped, so any indentation parses
            ast.parse("\n".join(ln.strip() for ln in lines[:k]))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        return "\n".join([lines[0].strip(), *(ln.rstrip() for ln in lines[1:k])])
    return None


def _unclosed(code: str) -> bool:
    return sum(code.count(c) for c in "([{") > sum(code.count(c) for c in ")]}")


def _one_line(statement: str) -> str:
    """A multi-line statement on one line: `[\n    1, 2\n]` becomes `[1, 2]`."""
    out = ""
    for part in (ln.strip() for ln in statement.splitlines()):
        out += part if not out or out[-1] in "([{" or part[:1] in ")]}" else " " + part
    return out


@dataclass(frozen=True)
class Failure:
    """A failing test run, read once: what the model is shown and the line the run stopped at."""
    test: str | None  # the failing test (unittest), with "(1 of N failing tests)" when more failed
    check: Frame | None  # the failing check; its code whole on one line when the file could be read
    raised: Frame | None  # where the error was raised, when that is elsewhere and not library code
    error: str  # the exception line
    values: tuple[str, ...] = ()  # `--show-values`: "expr = value" of the failing assert's operands

    def summary(self, check: str | None = None) -> str | None:
        """The lines shown to the model; `check` replaces the failing-check line."""
        def cut(line: str) -> str:
            return line if len(line) <= _MAX_LINE else line[:_MAX_LINE] + " ..."
        out = [cut(f"Failing test: {self.test}")] if self.test else []
        if (c := self.check) is not None:
            out.append(check if check is not None else cut(f"Failing check: {c.code}  ({c.file}, line {c.line})"))
        out += [cut(f"Value: {v}") for v in self.values]
        if (r := self.raised) is not None:
            out.append(cut(f"Raised at: {r.code}  ({r.file}, line {r.line})"))
        if self.error:
            out.append(cut(f"Error: {self.error}"))
        return "\n".join(out) or None

    @property
    def point(self) -> str:
        """The failing check's code, else the error; "" when the run showed neither."""
        return ((self.check.code if self.check else "") or self.error)[:MAX_POINT]


def find_failure(output: str, read: Callable[[str], str | None] | None = None,
                 values: bool = False) -> Failure | None:
    """The failing check of a test run (unittest, pytest or a bare traceback), or None when the output
    holds no traceback. `read` gives a file's text by its shown path: a check the traceback cut after
    its first line is then shown whole, on one line. `values`: the run was asked for the failing assert's
    values (--show-values), so values_main.py's lines are read; otherwise a run's output cannot add them."""
    lines = output.splitlines()
    heads = [i for i, ln in enumerate(lines) if _UNITTEST_HEAD.match(ln)]
    parsed = _traceback(lines, heads[0] if heads else 0) or _pytest(lines)
    if parsed is None:
        return None
    frames, exc = parsed
    test = None
    if heads:
        more = f" (1 of {len(heads)} failing tests)" if len(heads) > 1 else ""
        test = lines[heads[0]].split(": ", 1)[1] + more
    check = next((f for f in reversed(frames) if "assert" in f.code), None) or \
        next((f for f in reversed(frames) if _is_check(f)), None) or (frames[-1] if frames else None)
    last = frames[-1] if frames else None
    raised = last if last is not None and last is not check and last.code and \
        not last.file.startswith("/usr/") else None
    if check is not None and check.code and read is not None and _unclosed(check.code):
        source = read(check.file)
        whole = whole_statement(source, check.line) if source is not None else None
        one = _one_line(whole) if whole else ""
        check = replace(check, code=one) if one.startswith(check.code) else check
    shown = _values(lines) if values else ()  # values_main.py's lines: read only when the run was asked for them
    return Failure(test, check if check is not None and check.code else None, raised, exc, shown)


def _values(lines: list[str]) -> tuple[str, ...]:
    """The lines values_main.py printed after the last VALUES_HEADER."""
    at = max((i for i, ln in enumerate(lines) if ln.strip() == VALUES_HEADER), default=None)
    if at is None:
        return ()
    out: list[str] = []
    for ln in lines[at + 1:at + 1 + MAX_VALUES]:
        if not ln.startswith("  ") or not ln.strip():
            break
        out.append(ln.strip() if len(ln.strip()) <= _MAX_LINE else ln.strip()[:_MAX_LINE] + " ...")
    return tuple(out)


def failure_summary(output: str, read: Callable[[str], str | None] | None = None) -> str | None:
    """The lines `find_failure` shows the model, or None."""
    found = find_failure(output, read)
    return found.summary() if found else None


def failure_point(output: str, found: Failure | None) -> str:
    """The line a failing test run stopped at: the failing check, else the error, else the last line."""
    if found is not None and found.point:
        return found.point
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    return lines[-1][:MAX_POINT] if lines else "(no output)"


def syntax_error(source: str, name: str) -> str | None:
    """The SyntaxError of `source` (compiled, never run) with its line, or None when it compiles."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. invalid escapes; only errors matter here
            compile(source, name, "exec", dont_inherit=True)
    except SyntaxError as e:
        where = f" line {e.lineno}" if e.lineno else ""
        text = [f"{type(e).__name__} in {name}{where}: {e.msg}"]
        src_lines = source.splitlines()
        line = e.text if e.text is not None else (src_lines[e.lineno - 1] if e.lineno and
                                                   e.lineno <= len(src_lines) else "")
        line = line.rstrip("\n")
        if line.strip():
            text.append(f"    {line.strip()}")
            if e.offset and e.offset > 0:
                col = e.offset - 1 - (len(line) - len(line.lstrip()))
                text.append("    " + " " * max(col, 0) + "^")
        return "\n".join(text)
    except (ValueError, RecursionError, MemoryError) as e:
        return f"{name} cannot be compiled: {e}"
    return None
