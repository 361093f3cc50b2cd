"""The native tool-call protocol: the model gets OpenAI-style `tools=` (its chat template renders them)
and calls one per reply; a reply with no call is the final answer.

A call comes either structured (`NativeCall`s a server parsed out of the reply) or in the reply text:
Qwen/Hermes ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, a ```json fence or a bare
JSON object. As in parser.py, the drifts small models make are forgiven and recorded in
`ParsedReply.repairs`, arguments are checked by tools/args.py, and every failure is a short
`FormatError`. Model text is scanned with str methods and bounded loops only (no regex), so a
hostile reply parses in linear time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import FormatError
from ..tools.args import ArgumentError, check_args, type_name, usage
from ..types import NativeCall, ToolParam, ToolSpec
from .decode import decode, scan_end
from .parser import ParsedReply, find_tool
from .prompt import NATIVE_REMINDER as NATIVE_REMINDER
from .prompt import NO_CALL_FINISH, SUBMIT_FINISH
from .scan import closers_end, fence_open_at_end, skip_space, strip_fences

TAG, CLOSE = "<tool_call>", "</tool_call>"
_FORM = '<tool_call>{"name": "<tool name>", "arguments": {...}}</tool_call>'
NATIVE_EXPECTED_FORM = (
    f"Call one tool:\n{_FORM}\nor, when the task is done, {NO_CALL_FINISH}."
)
SUBMIT_EXPECTED_FORM = f"Call one tool:\n{_FORM}\nWhen the task is done, {SUBMIT_FINISH}."

# tool_choice required: the tool that finishes, and the start of a call prefilled on every turn (Qwen's and
# Hermes' form; a model whose template has another form still reads it as a call).
SUBMIT = ToolSpec("submit", "Finish the task: say in one line what you changed.",
                  (ToolParam("summary", "string", "one line: what you changed and why"),))
CALL_PREFILL = f'{TAG}\n{{"name": "'


def expected_form(submit: bool) -> str:
    """The form a reply should take, for a format error's message (`submit`: tool_choice required)."""
    return SUBMIT_EXPECTED_FORM if submit else NATIVE_EXPECTED_FORM

# Every tolerance parse_native can record in ParsedReply.repairs; the last four are also recorded by decode.py
# and tools/args.py, which the text protocol shares.
NATIVE_REPAIRS: tuple[str, ...] = (
    "extra_calls", "unclosed_tag", "json_fence", "bare_json", "alt_keys", "args_json_string",
    "double_encoded", "text_in_tag", "flat_args", "extra_keys", "tool_name_case",
    "literal_newlines", "python_literal", "args_omitted", "null_arg",
)

_TOOL_KEYS = ("name", "tool", "tool_name", "function")
_ARGS_KEYS = ("arguments", "args", "parameters", "params", "input")
_START_KEYS = (*_TOOL_KEYS, "type")  # keys that may open a call object in the text
_FENCE_LOOKBACK = 80  # how far before a "{" a ```json opener is looked for


def _param_schema(p: ToolParam) -> dict[str, Any]:
    schema: dict[str, Any]
    if p.type == "string|array":
        schema = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
    elif p.type == "array":
        schema = {"type": "array", "items": {"type": "string"}}
    else:
        schema = {"type": p.type}
    schema["description"] = p.doc.strip()
    return schema


def tool_schemas(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """OpenAI function-tool schemas of `tools`, in their order (the text prompt's specs, as `tools=`)."""
    return [{
        "type": "function",
        "function": {
            "name": t.name,
            "description": t.doc.strip(),
            "parameters": {
                "type": "object",
                "properties": {p.name: _param_schema(p) for p in t.params},
                "required": list(t.required),
            },
        },
    } for t in tools]


def render_native_system_prompt(tools: Sequence[ToolSpec], example_path: str | None = None,
                                submit: bool = False) -> str:
    """The native protocol's system prompt: the rules only (the chat template shows the tools). `submit`:
    tool_choice required, the submit tool finishes."""
    names = {t.name for t in tools}
    rules = ["Call one tool per reply, then stop. Its result comes back in the next message."]
    if any(p.name == "path" for t in tools for p in t.params):
        rules.append("Paths are relative to the workspace" + (f', like "{example_path}".' if example_path else "."))
    if "write_file" in names:
        rules.append("write_file replaces the whole file: send the complete new content.")
    if "run_tests" in names:
        rules.append("Run run_tests before you finish.")
    rules.append(f"When the task is done, {SUBMIT_FINISH if submit else NO_CALL_FINISH}.")
    if not tools:
        rules = ["No tools are available: reply with a one-line summary."]
    head = "You are a coding agent. You work on files in a workspace by calling tools."
    return "\n".join([head, "", "Rules:", *(f"- {r}" for r in rules)])


def _find_tool(name: str, tools: Mapping[str, ToolSpec], repairs: list[str]) -> ToolSpec:
    return find_tool(name, tools, repairs, f" To finish, {NO_CALL_FINISH}.")


def _reworded(e: FormatError) -> FormatError:
    """decode.py's message, worded for this protocol."""
    return FormatError(f"{str(e).replace('after TOOL_CALL:', 'in the tool call')}")


def _decode(text: str, start: int, repairs: list[str]) -> tuple[dict[str, Any], int]:
    """decode.py's tolerant decoding (strict JSON, lax JSON, a Python literal)."""
    try:
        return decode(text, start, repairs)
    except FormatError as e:
        raise _reworded(e) from None


def _decode_args(s: str, repairs: list[str]) -> Any:
    """Arguments given as JSON text: lax JSON or a Python literal, even JSON-encoded twice."""
    i = skip_space(s, 0)
    if i < len(s) and s[i] == '"':
        try:
            inner = json.loads(s)
        except (ValueError, RecursionError, MemoryError):
            inner = None
        if isinstance(inner, str):
            repairs.append("double_encoded")
            s, i = inner, skip_space(inner, 0)
    if i == len(s):
        repairs.append("args_omitted")
        return {}
    if s[i] == "{":
        obj, end = _decode(s, i, repairs)
        if s[end:].strip():
            raise FormatError('"arguments" has text after its JSON object.')
        return obj
    try:
        return json.loads(s)  # null, a list, ...: check_args words the complaint
    except (ValueError, RecursionError, MemoryError):
        raise FormatError('"arguments" must be a JSON object like {"path": "a.py"}.') from None


def _check(spec: ToolSpec, args: Any, repairs: list[str]) -> dict[str, Any]:
    """tools/args.py's check, with this protocol's wording where check_args speaks of "args"."""
    if args is not None and not isinstance(args, dict):
        raise ArgumentError(f'"arguments" must be a JSON object, not {type_name(args)}. {usage(spec)}')
    if args and not spec.params:
        raise ArgumentError(f'{spec.name} takes no arguments: use "arguments": {{}}.')
    return check_args(spec, args, repairs)


def _split(obj: dict[str, Any], tools: Mapping[str, ToolSpec], repairs: list[str]) -> tuple[ToolSpec, Any]:
    """The tool and its raw arguments in a decoded call object."""
    if isinstance(obj.get("function"), dict):
        obj = obj["function"]  # OpenAI {"type": "function", "function": {"name": ..., "arguments": ...}}
        repairs.append("alt_keys")
    tool_key = next((k for k in _TOOL_KEYS if isinstance(obj.get(k), str)), None)
    if tool_key is None:
        raise FormatError('The tool call needs "name": the tool name in double quotes.')
    spec = _find_tool(obj[tool_key], tools, repairs)
    args_key = next((k for k in _ARGS_KEYS if k in obj), None)
    if tool_key != "name" or args_key not in (None, "arguments"):
        repairs.append("alt_keys")
    rest = {k: v for k, v in obj.items() if k not in (tool_key, args_key)}
    if args_key is None:
        repairs.append("flat_args" if rest else "args_omitted")  # {"name": "read_file", "path": "a.py"}
        return spec, rest
    if rest:
        repairs.append("extra_keys")
    args = obj[args_key]
    if isinstance(args, str):
        repairs.append("args_json_string")
        args = _decode_args(args, repairs)
    return spec, args


def _call_at(text: str, i: int) -> bool:
    """text[i] is "{" opening an object whose first key names a tool ("name", "tool", ...)."""
    j = skip_space(text, i + 1)
    if j >= len(text) or text[j] not in "\"'":
        return False
    for key in _START_KEYS:
        k = j + 1 + len(key)
        if text.startswith(key, j + 1) and text.startswith(text[j], k):
            return text.startswith(":", skip_space(text, k + 1))
    return False


def _next_start(text: str, pos: int, limit: int) -> int:
    i = text.find("{", pos, limit)
    while i >= 0 and not _call_at(text, i):
        i = text.find("{", i + 1, limit)
    return i


def _fence_before(text: str, i: int) -> int:
    """Where a ``` opener right before text[i] starts, or -1 (a bounded look back)."""
    lo = max(0, i - _FENCE_LOOKBACK)
    k = fence_open_at_end(text[lo:i])
    return lo + k if k >= 0 else -1


def _is_call(obj: dict[str, Any], strong: bool, tools: Mapping[str, ToolSpec]) -> bool:
    """A decoded object is a call: any with a tool name where a call was clearly meant (`strong`),
    else only one with arguments or a known tool's name (prose may hold JSON like {"name": "Bob"})."""
    body = obj["function"] if isinstance(obj.get("function"), dict) else obj
    name = next((body[k] for k in _TOOL_KEYS if isinstance(body.get(k), str)), None)
    if name is None:
        return False
    return strong or any(k in body for k in _ARGS_KEYS) or name.strip().lower() in {t.lower() for t in tools}


def _text_call(text: str, tools: Mapping[str, ToolSpec], repairs: list[str]) -> tuple[int, int, dict[str, Any]] | None:
    """(start, end, object) of the first call in the text, or None. Each character is decoded at most
    a bounded number of times: a failed or rejected object is skipped whole, and the scan stops at the
    first <tool_call> tag."""
    tag = text.find(TAG)
    first, pos = skip_space(text, 0), 0
    while (i := _next_start(text, pos, tag if tag >= 0 else len(text))) >= 0:
        fence = _fence_before(text, i)
        strong = i == first or fence >= 0  # the reply or a fence starts with it: a call was meant
        found: list[str] = []
        closed = scan_end(text, i)  # the decoder is handed the object's span alone, not the rest of the reply
        try:
            obj, end = decode(text[i:closed], 0, found) if closed is not None else decode(text, i, found)
            end += i if closed is not None else 0
        except FormatError as e:
            if closed is None or strong:  # a call cut off, or one that is broken where a call was meant
                raise _reworded(e) from None
            obj, end = {}, closed
        if _is_call(obj, strong, tools):
            repairs += [*found, "json_fence" if fence >= 0 else "bare_json"]
            return (fence if fence >= 0 else i), closers_end(text, end), obj
        pos = end
        if 0 <= tag < pos:  # the tag was inside the object skipped
            tag = text.find(TAG, pos)
    if tag < 0:
        return None
    body = tag + len(TAG)
    stop = min((k for k in (text.find(CLOSE, body), text.find(TAG, body)) if k >= 0), default=len(text))
    brace = text.find("{", body, stop)
    if brace < 0:
        raise FormatError("The <tool_call> tag holds no JSON object.")
    obj, end = _decode(text, brace, repairs)
    nxt = text.find(TAG, end)
    close = text.find(CLOSE, end, nxt if nxt >= 0 else len(text))
    inside = text[body:brace] + (text[end:close] if close >= 0 else "")
    if "```" in inside:
        repairs.append("json_fence")
    if inside.replace("```json", "").replace("```", "").strip():
        repairs.append("text_in_tag")
    if close < 0:
        repairs.append("unclosed_tag")
        return tag, closers_end(text, end), obj
    return tag, close + len(CLOSE), obj


def parse_native(text: str, calls: Sequence[NativeCall], tools: Mapping[str, ToolSpec]) -> ParsedReply:
    """Parse one reply of the native protocol. Raises only FormatError, with a message for the model."""
    text = text if isinstance(text, str) else ""
    repairs: list[str] = []
    if calls:
        if len(calls) > 1:
            repairs.append("extra_calls")  # the first runs, the rest are dropped: one call per turn
        call = calls[0]
        spec = _find_tool(call.name if isinstance(call.name, str) else "", tools, repairs)
        raw: Any = call.arguments
        args = _decode_args(raw, repairs) if isinstance(raw, str) else raw
        checked = _check(spec, args, repairs)
        return ParsedReply(text.strip() or None, spec.name, checked, None, list(dict.fromkeys(repairs)))
    if not text.strip():
        raise FormatError("Your reply was empty. Call a tool, or reply with a one-line summary when the task is done.")
    found = _text_call(text, tools, repairs)
    if found is None:
        return ParsedReply(None, None, None, text.strip(), [])
    start, end, obj = found
    spec, args = _split(obj, tools, repairs)
    checked = _check(spec, args, repairs)
    later = [k for k in (text.find(TAG, end), _next_start(text, end, len(text))) if k >= 0]
    if later:
        repairs.append("extra_calls")
    tail = text[end : min(later)] if later else text[end:]
    thought = "\n".join(p for p in (strip_fences(text[:start]), strip_fences(tail)) if p) or None
    return ParsedReply(thought, spec.name, checked, None, list(dict.fromkeys(repairs)))
