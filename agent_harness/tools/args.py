"""Tool arguments: the one check of a call's arguments against its ToolSpec, shared by the reply
parser (whose messages the model reads) and `execute` (which callers reach without the parser).

It scans no model text (no regex, no loops over characters): the parser's linear-time guarantee
(tests/test_protocol_linear.py) counts these lines too.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from ..errors import FormatError
from ..text import has_surrogates
from ..types import ToolParam, ToolSpec

JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "array": (list,), "integer": (int,), "boolean": (bool,), "object": (dict,),
    "string|array": (str, list),
}
_WANT = {
    "string": "a JSON string in double quotes",
    "array": 'a JSON array like ["a", "b"]',
    "integer": "an integer like 30 (no quotes)",
    "boolean": "true or false (no quotes)",
    "object": 'a JSON object like {"key": "value"}',
    "string|array": 'a JSON string like "python3 -m unittest" (or an array of strings)',
}


class ArgumentError(FormatError):
    """The arguments of a tool call do not fit its spec; the message tells the model the usage."""


def usage(spec: ToolSpec) -> str:
    return f"Usage: {spec.signature()}"


def preview(value: Any, limit: int = 40) -> str:
    """`value` as JSON, cut to `limit` characters."""
    try:
        s = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        s = "..."
    return s if len(s) <= limit else s[: limit - 3] + "..."


def type_name(value: Any) -> str:
    """The JSON kind of `value`, with its article ("a string", "null")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def fits(p: ToolParam, value: Any) -> bool:
    """`value` has the JSON type of `p` (a boolean is not an integer)."""
    return isinstance(value, JSON_TYPES[p.type]) and not (p.type == "integer" and isinstance(value, bool))


def _type_error(spec: ToolSpec, p: ToolParam, value: Any) -> str:
    base = f'Argument "{p.name}" of {spec.name} must be'
    if p.type == "array" and isinstance(value, str):
        try:
            parts = shlex.split(value)
        except ValueError:
            parts = value.split()
        return f"{base} a JSON array, not a string: write {preview(parts, 60)}."
    return f"{base} {_WANT[p.type]}, got {type_name(value)} {preview(value)}."


def check_args(spec: ToolSpec, args: Any, repairs: list[str]) -> dict[str, Any]:
    """The arguments of a call to `spec`, checked: omitted (None) or JSON-string args are accepted,
    null optional arguments dropped (each recorded in `repairs`); raises ArgumentError otherwise."""
    if args is None:
        repairs.append("args_omitted")
        args = {}
    if isinstance(args, str):
        try:
            decoded = json.loads(args)
        except (ValueError, RecursionError):
            decoded = None
        if not isinstance(decoded, dict):
            raise ArgumentError(f'"args" must be a JSON object like {{"name": value}}. {usage(spec)}')
        repairs.append("args_json_string")  # OpenAI sends "arguments" as a JSON string
        args = decoded
    if not isinstance(args, dict):
        raise ArgumentError(f'"args" must be a JSON object, not {type_name(args)}. {usage(spec)}')
    params = {p.name: p for p in spec.params}
    unknown = [k for k in args if k not in params]
    if unknown:
        if not params:
            raise ArgumentError(f'{spec.name} takes no arguments: use {{"tool": "{spec.name}", "args": {{}}}}.')
        raise ArgumentError(
            f'{spec.name} got unexpected argument "{str(unknown[0])[:40]}". '
            f"Valid arguments: {', '.join(params)}. {usage(spec)}"
        )
    out: dict[str, Any] = {}
    for name, value in args.items():
        if value is None and not params[name].required:
            repairs.append("null_arg")
            continue
        out[name] = value
    missing = [p for p in spec.required if p not in out]
    if missing:
        raise ArgumentError(f'{spec.name} is missing required argument "{missing[0]}". {usage(spec)}')
    for name, value in out.items():
        if not fits(params[name], value):
            raise ArgumentError(_type_error(spec, params[name], value))
    return out


def check_text(name: str, value: Any, depth: int = 0) -> None:
    """Refuse text the OS cannot take: a lone surrogate (a JSON escape like \\ud800) in any string."""
    if isinstance(value, str):
        if has_surrogates(value):
            raise ArgumentError(f"argument '{name}' holds a lone surrogate (an escape like \\ud800 that is not "
                                "a character); write the characters themselves")
    elif isinstance(value, list | dict) and depth < 100:
        for item in value.values() if isinstance(value, dict) else value:
            check_text(name, item, depth + 1)
