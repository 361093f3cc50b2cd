"""The agent's tools, each defined once as a function: its name, first docstring line and annotated
parameters become its ToolSpec (registry.py); its body makes the observation the model reads.

A refused call (a path leaving the workspace, a missing file, bad arguments) raises ToolError,
which the agent shows as ``ERROR: ...``; a command that fails is a normal observation with its
exit code and output. Observations depend only on the workspace contents: no temp paths, pids
or timings, so identical runs give identical traces.
"""

from __future__ import annotations

import functools
import os
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

from ..errors import ToolError
from ..sandbox.workspace import Workspace
from ..types import CmdResult
from .failures import Failure, failure_point, find_failure, syntax_error
from .files import MAX_READ_BYTES, file_bytes, listing, open_regular, resolve, write
from .output import strip_timings, truncate, two_streams
from .registry import ToolOptions, tool
from .result import ToolResult

# Linux refuses (E2BIG) one argument over MAX_ARG_STRLEN (32 pages) and an argv + environment over
# ARG_MAX; the sandbox adds its own arguments and environment, so the total is kept well below.
MAX_ARG_BYTES = 32 * 4096 - 1
MAX_ARGV_BYTES = 1 << 19
GREP_SCRIPT = Path(__file__).with_name("grep_main.py").read_text(encoding="utf-8")
VALUES_SCRIPT = Path(__file__).with_name("values_main.py").read_text(encoding="utf-8")
PYTHONS = frozenset({"python", "python3", "python3.11"})


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


def _reader(ws: Workspace) -> Callable[[str], str | None]:
    """A workspace file's text by path (None when it is not a readable regular file), each file read once."""
    @functools.cache
    def text_of(path: str) -> str | None:
        found = file_bytes(ws, path)
        return found[1].decode("utf-8", "replace") if found else None
    return text_of


def _failure(res: CmdResult, read: Callable[[str], str | None], values: bool = False) -> Failure | None:
    """The failing check of a failed run; its values (values_main.py's lines) only when `values` asked for them."""
    return None if res.ok else find_failure(res.stdout + "\n" + res.stderr, read, values)


def _summary(found: Failure | None) -> list[str]:
    """The failure's lines to put before a command's output."""
    shown = found.summary() if found is not None else None
    return [shown, ""] if shown else []


def _cmd_observation(res: CmdResult, ws: Workspace, opts: ToolOptions) -> str:
    out, err = two_streams(strip_timings(res.stdout), strip_timings(res.stderr), opts.max_output_chars)
    found = _failure(res, _reader(ws)) if opts.extract_failure else None
    parts = [*_summary(found), f"exit code: {res.returncode}{_kill_note(res, ws, _timeout(ws, opts))}"]
    if out:
        parts += ["stdout:", out.rstrip("\n")]
    if err:
        parts += ["stderr:", err.rstrip("\n")]
    if not out and not err:
        parts.append("(no output)")
    return "\n".join(parts)


def _with_values(cmd: list[str]) -> list[str]:
    """`python3 script.py ...` run through values_main.py (a failing assert shows its operands' values);
    any other command as it is."""
    if len(cmd) >= 2 and os.path.basename(cmd[0]) in PYTHONS and cmd[1].endswith(".py") and \
            not cmd[1].startswith("-"):
        return [cmd[0], "-c", VALUES_SCRIPT, *cmd[1:]]
    return cmd


# --------------------------------------------------------------------------------------------
# The tools


@tool()
def read_file(ws: Workspace, opts: ToolOptions, path: Annotated[str, "the file to read"]) -> str:
    """Show the text of a file."""
    target = resolve(ws, path)
    rel = ws.rel(target)
    fd, st = open_regular(ws, target)
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
               content: Annotated[str, "the complete new text of the file"]) -> ToolResult:
    """Create a file or replace all of its text."""
    target = resolve(ws, path)
    rel = ws.rel(target)
    if rel == ".":
        raise ToolError("give a file path, like main.py")
    data = content.encode("utf-8", "replace")
    before = file_bytes(ws, path)
    write(ws, target, data)
    lines = content.count("\n") + (1 if content and not content.endswith("\n") else 0)
    obs = f"Wrote {rel} ({lines} lines)."
    if opts.syntax_check and rel.endswith(".py"):
        error = syntax_error(content, rel)
        if error:
            obs += f"\nThe file was saved, but it has a syntax error:\n{error}"
    return ToolResult(obs, changed=before is None or before[1] != data)


@tool(optional=True)
def edit_file(ws: Workspace, opts: ToolOptions, path: Annotated[str, "the file to edit"],
              old: Annotated[str, "the exact text to replace, copied from the file (it must appear once)"],
              new: Annotated[str, "the text to put in its place"]) -> ToolResult:
    """Replace one exact piece of a file's text with new text."""
    target = resolve(ws, path)
    rel = ws.rel(target)
    if rel == ".":
        raise ToolError("give a file path, like main.py")
    text = _text_of(ws, target, rel)
    if not old:
        raise ToolError("old is empty: copy the exact lines to replace from the file")
    found = text.count(old)
    if found == 0:
        loose = " ".join(old.split()) in " ".join(text.split())
        hint = " It is there with other spacing or indentation: copy it exactly." if loose else ""
        raise ToolError(f"the old text is not in {rel}.{hint} Use read_file to see the file, then copy the lines "
                        "to replace exactly.")
    if found > 1:
        raise ToolError(f"the old text appears {found} times in {rel}; give more of the lines around it, so that "
                        "it appears once.")
    if old == new:
        raise ToolError("old and new are the same: nothing would change")
    content = text.replace(old, new, 1)
    write(ws, target, content.encode("utf-8"))
    obs = f"Edited {rel}: replaced {_lines(old)} line(s) with {_lines(new)} line(s)."
    if opts.syntax_check and rel.endswith(".py"):
        error = syntax_error(content, rel)
        if error:
            obs += f"\nThe file was saved, but it has a syntax error:\n{error}"
    return ToolResult(obs, changed=True)


def _lines(text: str) -> int:
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def _text_of(ws: Workspace, target: Path, rel: str) -> str:
    """The UTF-8 text of the regular file `target`; ToolError for anything else (a binary or huge file)."""
    fd, st = open_regular(ws, target)
    with os.fdopen(fd, "rb") as f:
        if st.st_size > MAX_READ_BYTES:
            raise ToolError(f"{rel} is too large to edit ({st.st_size} bytes).")
        data = f.read(MAX_READ_BYTES + 1)
    try:
        if b"\0" in data[:8192]:
            raise UnicodeDecodeError("utf-8", data, 0, 1, "NUL byte")
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"{rel} is not UTF-8 text; it cannot be edited as text.") from None


@tool()
def list_dir(ws: Workspace, opts: ToolOptions,
             path: Annotated[str, "folder to list (default: the whole workspace)"] = ".") -> str:
    """List the files in a folder and its subfolders."""
    target = resolve(ws, path)
    rel = ws.rel(target)
    if not target.exists():
        raise ToolError(f"{rel}: no such folder. Use list_dir with no path to see the workspace.")
    if not target.is_dir():
        raise ToolError(f"{rel} is a file; use read_file to see it.")
    entries, total = listing(ws, target, opts.max_list_entries)
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
    target = resolve(ws, path)
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
def run_tests(ws: Workspace, opts: ToolOptions) -> ToolResult:
    """Run the tests and show the result."""
    cmd = ws.test_cmd or []
    res = ws.run(_with_values(cmd) if opts.show_values else cmd, timeout=_timeout(ws, opts))
    note = _kill_note(res, ws, _timeout(ws, opts))
    status = "Tests PASSED." if res.ok else f"Tests FAILED (exit code {res.returncode}){note}."
    both = res.stdout + ("\n" if res.stdout and res.stderr else "") + res.stderr
    output = truncate(strip_timings(both).rstrip("\n"), opts.max_output_chars)
    found = _failure(res, _reader(ws), opts.show_values)  # read once: the summary shown and the failing check
    parts = [*_summary(found if opts.extract_failure else None), f"{status}  $ {shlex.join(cmd)}"]
    if output:
        parts.append(output)
    text = "\n".join(parts)
    at = None if res.ok else failure_point(text, found)
    return ToolResult(text, tests_passed=res.ok, failing_check=at, values=found.values if found and at else ())
