"""The agent's tools. Each is defined once, as a function below: its name, its first docstring
line and its annotated parameters become the ToolSpec the system prompt is rendered from; its
body makes the observation the model reads.

A refused call (a path leaving the workspace, a missing file, bad arguments) raises ToolError,
which the agent shows as ``ERROR: ...``; a command that fails is a normal observation with its
exit code and output. Observations depend only on the workspace contents: no temp paths, pids
or timings, so identical runs give identical traces.
"""

from __future__ import annotations

import inspect
import os
import re
import shlex
import stat
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin, get_type_hints

from .errors import ToolError
from .sandbox import WORKDIR, hand_over
from .text import has_surrogates
from .types import CmdResult, ToolParam, ToolSpec
from .workspace import Workspace

MAX_READ_BYTES = 2 << 20  # read_file refuses larger files (grep them instead)
# Linux refuses (E2BIG) one argument over MAX_ARG_STRLEN (32 pages) and an argv + environment over
# ARG_MAX; the sandbox adds its own arguments and environment, so the total is kept well below.
MAX_ARG_BYTES = 32 * 4096 - 1
MAX_ARGV_BYTES = 1 << 19
MAX_NAME_BYTES = 255  # NAME_MAX: one file or folder name
MAX_PATH_BYTES = 4095  # PATH_MAX less the final NUL: the whole host path


@dataclass(frozen=True)
class ToolOptions:
    """Switches for the helpers that make small models succeed, and output sizes."""

    syntax_check: bool = True  # after write_file of a .py file, report a SyntaxError and its line
    extract_failure: bool = True  # put the failing check of a test run at the top of the observation
    max_output_chars: int = 3000  # command output shown (head and tail kept)
    max_read_chars: int = 8000  # file text shown by read_file
    max_list_entries: int = 200
    max_grep_matches: int = 50
    grep_timeout_s: float = 10.0
    cmd_timeout_s: float = 10.0  # wall clock of run_cmd and run_tests (at most the workspace's limit)


# --------------------------------------------------------------------------------------------
# Registry: one decorated function per tool


ToolFn = Callable[..., str]  # fn(ws, opts, **args) -> observation


@dataclass(frozen=True)
class Tool:
    spec: ToolSpec
    run: ToolFn
    available: Callable[[Workspace], bool]


TOOLS: dict[str, Tool] = {}


def _json_type(tp: Any) -> str:
    if tp is bool:
        return "boolean"
    if tp is str:
        return "string"
    if tp is int:
        return "integer"
    if tp is list or get_origin(tp) is list:
        return "array"
    if tp is dict or get_origin(tp) is dict:
        return "object"
    union = get_origin(tp) in (Union, types.UnionType)
    if union and {_json_type(a) for a in get_args(tp)} == {"string", "array"}:
        return "string|array"
    raise TypeError(f"no JSON type for {tp!r}")


def _spec(fn: ToolFn) -> ToolSpec:
    hints = get_type_hints(fn, include_extras=True)
    params = []
    for name, p in list(inspect.signature(fn).parameters.items())[2:]:  # after (ws, opts)
        hint = hints[name]
        base, doc = (get_args(hint)[0], get_args(hint)[1]) if get_origin(hint) is Annotated else (hint, "")
        params.append(ToolParam(name, _json_type(base), doc, required=p.default is inspect.Parameter.empty))
    doc = (fn.__doc__ or "").strip().splitlines()
    return ToolSpec(fn.__name__, doc[0].strip() if doc else "", tuple(params))


def tool(available: Callable[[Workspace], bool] = lambda ws: True) -> Callable[[ToolFn], ToolFn]:
    """Register `fn(ws, opts, **args) -> observation` as a tool."""
    def register(fn: ToolFn) -> ToolFn:
        TOOLS[fn.__name__] = Tool(_spec(fn), fn, available)
        return fn
    return register


def tools_for(ws: Workspace) -> list[ToolSpec]:
    """The tools offered in this workspace (run_tests only when it has a test command)."""
    return [t.spec for t in TOOLS.values() if t.available(ws)]


def _check_args(spec: ToolSpec, args: dict[str, Any]) -> None:
    params = {p.name: p for p in spec.params}
    unknown = [k for k in args if k not in params]
    if unknown:
        raise ToolError(f"{spec.name} has no argument '{unknown[0]}'. Usage: {spec.signature()}")
    for p in spec.params:
        if p.name not in args:
            if p.required:
                raise ToolError(f"{spec.name} needs the argument '{p.name}'. Usage: {spec.signature()}")
            continue
        value = args[p.name]
        ok = {"string": isinstance(value, str), "array": isinstance(value, list),
              "string|array": isinstance(value, str | list), "integer": type(value) is int,
              "boolean": isinstance(value, bool), "object": isinstance(value, dict)}[p.type]
        if not ok:
            raise ToolError(f"argument '{p.name}' of {spec.name} must be a {p.type.split('|')[0]}. "
                            f"Usage: {spec.signature()}")


def _check_text(name: str, value: Any, depth: int = 0) -> None:
    """Refuse text the OS cannot take: a lone surrogate (a JSON escape like \\ud800) in any string."""
    if isinstance(value, str):
        if has_surrogates(value):
            raise ToolError(f"argument '{name}' holds a lone surrogate (an escape like \\ud800 that is not "
                            "a character); write the characters themselves")
    elif isinstance(value, list | dict) and depth < 100:
        for item in value.values() if isinstance(value, dict) else value:
            _check_text(name, item, depth + 1)


def execute(ws: Workspace, tool: str, args: dict[str, Any], options: ToolOptions) -> str:
    """Run one tool call and return the observation; refusals raise ToolError."""
    if not isinstance(tool, str) or has_surrogates(tool):
        raise ToolError(f"unknown tool. Valid tools: {', '.join(s.name for s in tools_for(ws))}")
    t = TOOLS.get(tool)
    if t is None or not t.available(ws):
        raise ToolError(f"unknown tool '{tool}'. Valid tools: {', '.join(s.name for s in tools_for(ws))}")
    args = {k: v for k, v in (args or {}).items() if v is not None}
    _check_args(t.spec, args)
    for name, value in args.items():
        _check_text(name, value)
    return t.run(ws, options, **args)


def _resolve(ws: Workspace, path: str) -> Path:
    """`ws.resolve(path)`, refusing names and paths longer than the OS allows (ENAMETOOLONG)."""
    raw = path.encode("utf-8")
    if any(len(part) > MAX_NAME_BYTES for part in raw.split(b"/")):
        raise ToolError(f"a file or folder name in the path is longer than {MAX_NAME_BYTES} bytes; "
                        "use shorter names")
    if len(os.fsencode(ws.root)) + 1 + len(raw) > MAX_PATH_BYTES:
        raise ToolError(f"the path is too long ({len(raw)} bytes); use a shorter one")
    try:
        return ws.resolve(path)
    except OSError as e:
        raise ToolError(f"the path cannot be used: {e.strerror or type(e).__name__}") from None


# --------------------------------------------------------------------------------------------
# Output helpers


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


def _two_streams(out: str, err: str, limit: int) -> tuple[str, str]:
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


def _shown_path(path: str) -> str:
    return path[len(WORKDIR) + 1:] if path.startswith(WORKDIR + "/") else path


# --------------------------------------------------------------------------------------------
# Failure extraction and syntax check

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>.+))?$')
_UNITTEST_HEAD = re.compile(r"^(?:FAIL|ERROR): \S.*$")
_PYTEST_LOC = re.compile(r"^(?P<file>\S+\.py):(?P<line>\d+): \w+")
_MAX_LINE = 300


@dataclass
class _Frame:
    file: str
    line: int
    code: str = ""


def _traceback(lines: list[str], start: int) -> tuple[list[_Frame], str] | None:
    """Frames and exception line of the first traceback at or after `start`."""
    marker = "Traceback (most recent call last):"
    i = next((j for j in range(start, len(lines)) if lines[j].strip() == marker), None)
    if i is None:
        return None
    frames: list[_Frame] = []
    for line in lines[i + 1:]:
        m = _FRAME.match(line)
        if m:
            frames.append(_Frame(_shown_path(m["file"]), int(m["line"])))
        elif line[:1].isspace():
            code = line.strip()
            if frames and not frames[-1].code and code and set(code) - set("^~ "):
                frames[-1].code = code
        elif line.strip():
            return frames, line.strip()
    return (frames, "") if frames else None


def _pytest(lines: list[str]) -> tuple[list[_Frame], str] | None:
    errors = [ln[1:].strip() for ln in lines if ln.startswith("E ")]
    if not errors:
        return None
    code = next((ln[1:].strip() for ln in lines if ln.startswith(">")), "")
    loc = next((m for m in map(_PYTEST_LOC.match, lines) if m), None)
    frame = _Frame(loc["file"] if loc else "?", int(loc["line"]) if loc else 0, code)
    return [frame], errors[0]


def _is_check(f: _Frame) -> bool:
    return "assert" in f.code or os.path.basename(f.file).startswith("test") or "/tests/" in f.file


def failure_summary(output: str) -> str | None:
    """The failing check of a test run (unittest, pytest or a bare traceback), as a few lines."""
    lines = output.splitlines()
    heads = [i for i, ln in enumerate(lines) if _UNITTEST_HEAD.match(ln)]
    parsed = _traceback(lines, heads[0] if heads else 0) or _pytest(lines)
    if parsed is None:
        return None
    frames, exc = parsed
    out = []
    if heads:
        more = f" (1 of {len(heads)} failing tests)" if len(heads) > 1 else ""
        out.append(f"Failing test: {lines[heads[0]].split(': ', 1)[1]}{more}")
    check = next((f for f in reversed(frames) if "assert" in f.code), None) or \
        next((f for f in reversed(frames) if _is_check(f)), None) or (frames[-1] if frames else None)
    if check is not None and check.code:
        out.append(f"Failing check: {check.code}  ({check.file}, line {check.line})")
    last = frames[-1] if frames else None
    if last is not None and last is not check and last.code and not last.file.startswith("/usr/"):
        out.append(f"Raised at: {last.code}  ({last.file}, line {last.line})")
    if exc:
        out.append(f"Error: {exc}")
    return "\n".join(ln if len(ln) <= _MAX_LINE else ln[:_MAX_LINE] + " ..." for ln in out) or None


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


# --------------------------------------------------------------------------------------------
# File helpers (run as the harness, on paths `Workspace.resolve` accepted)


def _open_regular(ws: Workspace, target: Path) -> tuple[int, os.stat_result]:
    rel = ws.rel(target)
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ToolError(f"{rel}: no such file. Use list_dir to see the files.") from None
    except IsADirectoryError:
        raise ToolError(f"{rel} is a folder; use list_dir to see what it holds.") from None
    except OSError as e:
        raise ToolError(f"{rel}: cannot open: {e.strerror}") from None
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):
        os.close(fd)
        raise ToolError(f"{rel} is a folder; use list_dir to see what it holds.")
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise ToolError(f"{rel} is not a regular file.")
    return fd, st


def _write(ws: Workspace, target: Path, data: bytes) -> None:
    rel = ws.rel(target)
    missing = []
    parent = target.parent
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    try:
        for d in reversed(missing):
            d.mkdir()
            hand_over(d)
        st = os.lstat(target) if os.path.lexists(target) else None
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise ToolError(f"{rel} is a folder; give a file path.")
        if st is not None and (not stat.S_ISREG(st.st_mode) or st.st_nlink > 1):
            os.unlink(target)  # never write through a hard link or into a fifo
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    except (NotADirectoryError, FileExistsError):
        raise ToolError(f"cannot write {rel}: a file is in the way of its folder") from None
    except OSError as e:
        raise ToolError(f"cannot write {rel}: {e.strerror}") from None
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    hand_over(target)


def _listing(ws: Workspace, folder: Path, limit: int) -> tuple[list[str], int]:
    """Workspace-relative entries under `folder` (folders end in /, links show their target)."""
    entries: list[str] = []
    total = 0
    for dirpath, dirnames, filenames in os.walk(folder):
        here = Path(dirpath)
        links = [d for d in dirnames if (here / d).is_symlink()]
        dirnames[:] = sorted(d for d in dirnames if d not in links and d not in (".git", "__pycache__"))
        files = [f for f in filenames + links if not f.endswith(".pyc")]
        names = [(d, True) for d in dirnames] + [(f, False) for f in files]
        for name, is_dir in sorted(names):
            total += 1
            if len(entries) < limit:
                path = here / name
                if path.is_symlink():
                    entries.append(f"{ws.rel(path)} -> {os.readlink(path)}")
                else:
                    entries.append(ws.rel(path) + ("/" if is_dir else ""))
    return entries, total


# --------------------------------------------------------------------------------------------
# Command observations


def _timeout(ws: Workspace, opts: ToolOptions) -> float:
    return min(opts.cmd_timeout_s, ws.limits.wall_s)


def _kill_note(res: CmdResult, ws: Workspace, timeout: float) -> str:
    lim = ws.limits_for(timeout)
    return {
        "timeout": f" (killed: it ran longer than {lim.wall_s:g} seconds)",
        "cpu": f" (killed: it used more than {lim.cpu_s} seconds of CPU)",
        "output": f" (killed: it printed more than {lim.output_bytes} bytes)",
        "fsize": f" (killed: it wrote a file larger than {lim.fsize_bytes} bytes)",
    }.get(res.killed_reason or "", "")


def _summary(res: CmdResult, opts: ToolOptions) -> list[str]:
    if not opts.extract_failure or res.ok:
        return []
    found = failure_summary(res.stdout + "\n" + res.stderr)
    return [found, ""] if found else []


def _cmd_observation(res: CmdResult, ws: Workspace, opts: ToolOptions) -> str:
    out, err = _two_streams(strip_timings(res.stdout), strip_timings(res.stderr), opts.max_output_chars)
    parts = [*_summary(res, opts), f"exit code: {res.returncode}{_kill_note(res, ws, _timeout(ws, opts))}"]
    if out:
        parts += ["stdout:", out.rstrip("\n")]
    if err:
        parts += ["stderr:", err.rstrip("\n")]
    if not out and not err:
        parts.append("(no output)")
    return "\n".join(parts)


GREP_SCRIPT = r"""
import os, re, stat, sys
pattern, base, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
try:
    rx = re.compile(pattern)
except (re.error, RecursionError, OverflowError) as e:
    print(f"invalid regular expression {pattern!r}: {e}", file=sys.stderr)
    sys.exit(2)
def files():
    if not os.path.isdir(base):
        yield base
        return
    for d, dirs, names in os.walk(base):
        dirs[:] = sorted(x for x in dirs if x not in (".git", "__pycache__"))
        for n in sorted(names):
            yield os.path.normpath(os.path.join(d, n))
hits = 0
for path in files():
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            continue
        with open(path, "rb") as f:
            data = f.read(2_000_000)
    except OSError:
        continue
    if b"\0" in data[:8192]:
        continue
    for n, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        if rx.search(line):
            hits += 1
            if hits <= limit:
                text = line.strip()
                print(f"{path}:{n}: {text[:200]}{' ...' if len(text) > 200 else ''}")
if hits > limit:
    print(f"[... {hits - limit} more matches not shown; narrow the pattern or the path]")
sys.exit(0 if hits else 1)
"""


# --------------------------------------------------------------------------------------------
# The tools


@tool()
def read_file(ws: Workspace, opts: ToolOptions, path: Annotated[str, "the file to read"]) -> str:
    """Show the text of a file."""
    target = _resolve(ws, path)
    rel = ws.rel(target)
    fd, st = _open_regular(ws, target)
    with os.fdopen(fd, "rb") as f:
        if st.st_size > MAX_READ_BYTES:
            raise ToolError(f"{rel} is too large to read ({st.st_size} bytes); use grep to search it.")
        data = f.read(MAX_READ_BYTES + 1)
    if b"\0" in data[:8192]:
        raise ToolError(f"{rel} is a binary file, not text.")
    if not data:
        return f"({rel} is empty)"
    return truncate(data.decode("utf-8", "replace"), opts.max_read_chars)


@tool()
def write_file(ws: Workspace, opts: ToolOptions, path: Annotated[str, "the file to write"],
               content: Annotated[str, "the complete new text of the file"]) -> str:
    """Create a file or replace all of its text."""
    target = _resolve(ws, path)
    rel = ws.rel(target)
    if rel == ".":
        raise ToolError("give a file path, like main.py")
    _write(ws, target, content.encode("utf-8", "replace"))
    lines = content.count("\n") + (1 if content and not content.endswith("\n") else 0)
    obs = f"Wrote {rel} ({lines} lines)."
    if opts.syntax_check and rel.endswith(".py"):
        error = syntax_error(content, rel)
        if error:
            obs += f"\nThe file was saved, but it has a syntax error:\n{error}"
    return obs


@tool()
def list_dir(ws: Workspace, opts: ToolOptions,
             path: Annotated[str, "folder to list (default: the whole workspace)"] = ".") -> str:
    """List the files in a folder and its subfolders."""
    target = _resolve(ws, path)
    rel = ws.rel(target)
    if not target.exists():
        raise ToolError(f"{rel}: no such folder. Use list_dir with no path to see the workspace.")
    if not target.is_dir():
        raise ToolError(f"{rel} is a file; use read_file to see it.")
    entries, total = _listing(ws, target, opts.max_list_entries)
    if not entries:
        return f"({rel} is empty)" if rel != "." else "(the workspace is empty)"
    if total > len(entries):
        entries.append(f"[... {total - len(entries)} more entries not shown; list a subfolder]")
    return "\n".join(entries)


@tool()
def run_cmd(ws: Workspace, opts: ToolOptions,
            cmd: Annotated[str | list[str], 'shell command line, e.g. "ls -la"']) -> str:
    """Run a shell command in the workspace and show its output."""
    if isinstance(cmd, str):
        if not cmd.strip():
            raise ToolError('cmd is empty; give a command line like "ls -la"')
        argv = ["/bin/sh", "-c", cmd]
    else:
        if not cmd or not all(isinstance(a, str) for a in cmd):
            raise ToolError('cmd must be a command line like "ls -la" (or a list of strings)')
        argv = list(cmd)
    if any("\0" in a for a in argv):
        raise ToolError("cmd contains a NUL character")
    sizes = [len(a.encode("utf-8")) for a in argv]
    if max(sizes) > MAX_ARG_BYTES or sum(sizes) > MAX_ARGV_BYTES:
        raise ToolError(f"the command line is too long ({sum(sizes)} bytes; at most {MAX_ARG_BYTES} per "
                        "argument): write a script with write_file and run that")
    return _cmd_observation(ws.run(argv, timeout=_timeout(ws, opts)), ws, opts)


@tool()
def git_diff(ws: Workspace, opts: ToolOptions) -> str:
    """Show what you changed so far, as a diff."""
    diff = ws.diff()
    if not diff:
        return "No changes: every file is as it was at the start."
    return truncate(diff, opts.max_output_chars)


@tool()
def grep(ws: Workspace, opts: ToolOptions, pattern: Annotated[str, "Python regular expression"],
         path: Annotated[str, "file or folder to search (default: all files)"] = ".") -> str:
    """Search the files for a pattern; shows file:line: text for each match."""
    if not pattern:
        raise ToolError("pattern is empty")
    if "\0" in pattern or len(pattern) > 1000:
        raise ToolError("pattern must be at most 1000 characters, without NUL")
    target = _resolve(ws, path)
    rel = ws.rel(target)
    if not os.path.lexists(target):
        raise ToolError(f"{rel}: no such file or folder.")
    res = ws.run(["python3", "-c", GREP_SCRIPT, pattern, rel, str(opts.max_grep_matches)],
                 timeout=opts.grep_timeout_s)
    if res.timed_out:
        raise ToolError(f"grep took longer than {opts.grep_timeout_s:g}s; use a simpler pattern.")
    if res.returncode == 1 and not res.stdout:
        return f"No matches for {pattern!r}" + (f" in {rel}." if rel != "." else ".")
    if res.returncode not in (0, 1):
        raise ToolError(res.stderr.strip().splitlines()[-1] if res.stderr.strip() else "grep failed")
    return truncate(res.stdout.rstrip("\n"), opts.max_output_chars)


@tool(available=lambda ws: bool(ws.test_cmd))
def run_tests(ws: Workspace, opts: ToolOptions) -> str:
    """Run the tests and show the result."""
    cmd = ws.test_cmd or []
    res = ws.run(cmd, timeout=_timeout(ws, opts))
    note = _kill_note(res, ws, _timeout(ws, opts))
    status = "Tests PASSED." if res.ok else f"Tests FAILED (exit code {res.returncode}){note}."
    both = res.stdout + ("\n" if res.stdout and res.stderr else "") + res.stderr
    output = truncate(strip_timings(both).rstrip("\n"), opts.max_output_chars)
    parts = [*_summary(res, opts), f"{status}  $ {shlex.join(cmd)}"]
    if output:
        parts.append(output)
    return "\n".join(parts)
