"""The tool registry: one decorated function per tool. Its name, its first docstring line and its
annotated parameters become the ToolSpec the system prompt is rendered from; `run_tool` checks a
call's arguments (args.py) and runs it."""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Annotated, Any, Union, get_args, get_origin, get_type_hints

from ..errors import ToolError
from ..sandbox.workspace import Workspace
from ..text import has_surrogates
from ..types import ToolParam, ToolSpec
from .args import ArgumentError, check_args, check_text
from .result import ToolResult


@dataclass(frozen=True)
class ToolOptions:
    """Switches for the helpers that make small models succeed, and output sizes."""

    syntax_check: bool = True  # after write_file of a .py file, report a SyntaxError and its line
    extract_failure: bool = True  # put the failing check of a test run at the top of the observation
    show_values: bool = False  # run_tests of a Python script: a failing assert shows its operands' values
    max_output_chars: int = 3000  # command output shown (head and tail kept)
    max_read_chars: int = 8000  # file text shown by read_file
    max_list_entries: int = 200
    max_grep_matches: int = 50
    grep_timeout_s: float = 10.0
    cmd_timeout_s: float = 10.0  # wall clock of run_cmd and run_tests (at most the workspace's limit)


ToolFn = Callable[..., str | ToolResult]  # fn(ws, opts, **args) -> observation, or one with facts


@dataclass(frozen=True)
class Tool:
    spec: ToolSpec
    run: ToolFn
    available: Callable[[Workspace], bool]
    optional: bool = False  # offered only when asked for (`tools_for(ws, include)`): edit_file


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
        params.append(ToolParam(name, _json_type(base), doc,  # type: ignore[arg-type]
                                required=p.default is inspect.Parameter.empty))
    doc = (fn.__doc__ or "").strip().splitlines()
    return ToolSpec(fn.__name__, doc[0].strip() if doc else "", tuple(params))


def tool(available: Callable[[Workspace], bool] = lambda ws: True,
         optional: bool = False) -> Callable[[ToolFn], ToolFn]:
    """Register `fn(ws, opts, **args) -> observation` (a str, or a ToolResult with facts) as a tool; an
    `optional` one is offered only to an agent that asks for it."""
    def register(fn: ToolFn) -> ToolFn:
        TOOLS[fn.__name__] = Tool(_spec(fn), fn, available, optional)
        return fn
    return register


def tools_for(ws: Workspace, include: Collection[str] = ()) -> list[ToolSpec]:
    """The tools offered in this workspace (run_tests only when it has a test command), the optional ones
    only when `include` names them."""
    return [t.spec for t in TOOLS.values() if t.available(ws) and (not t.optional or t.spec.name in include)]


def run_tool(ws: Workspace, tool: str, args: Any, options: ToolOptions) -> ToolResult:
    """Run one tool call; refusals (unknown tool, bad arguments, a path it may not use) raise ToolError."""
    if not isinstance(tool, str) or has_surrogates(tool):
        raise ToolError(f"unknown tool. Valid tools: {', '.join(s.name for s in tools_for(ws))}")
    t = TOOLS.get(tool)
    if t is None or not t.available(ws):
        raise ToolError(f"unknown tool '{tool}'. Valid tools: {', '.join(s.name for s in tools_for(ws))}")
    try:
        checked = check_args(t.spec, args, [])
        for name, value in checked.items():
            check_text(name, value)
    except ArgumentError as e:
        raise ToolError(str(e)) from None
    out = t.run(ws, options, **checked)
    return out if isinstance(out, ToolResult) else ToolResult(out)


def execute(ws: Workspace, tool: str, args: Any, options: ToolOptions) -> str:
    """The observation text of `run_tool`, for callers that need no facts (tests, scripts)."""
    return run_tool(ws, tool, args, options).text
