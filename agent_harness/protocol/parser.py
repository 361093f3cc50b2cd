"""The plain-text agent protocol: system prompt, reply parser, observation and error texts.

Every model reply is ``THOUGHT: <reasoning>`` followed by exactly one of
``TOOL_CALL: {"tool": "<name>", "args": {...}}`` or ``FINAL: <text>``. The parser forgives the
ways small models drift from that form (fences, trailing prose, OpenAI-style keys, Python
literals, ...) and records each forgiveness in `ParsedReply.repairs`; it is strict about what
would run the wrong thing (unknown tools, bad arguments, two actions in one reply). Every
failure is a `FormatError` whose message is short enough for a 0.5B model to act on.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import FormatError
from ..tools.args import check_args, usage
from ..types import ToolSpec
from .decode import decode
from .scan import (
    SPACE,
    Marker,
    bare_call,
    closers_end,
    drop_closing_fence,
    fence_open_at_end,
    fenced_block,
    inline_marker,
    name_hint,
    skip_space,
    strip_fences,
)
from .scan import (
    markers as find_markers,
)

_CALL_FORM = '{"tool": "<tool name>", "args": {...}}'
_TWO_CALLS = "Only one TOOL_CALL per reply. Send the first call alone; after its result, send the next."
_BOTH = "A reply has TOOL_CALL: or FINAL:, not both. Send the tool call now; write FINAL: after its result."
_NEITHER = "Your reply has no TOOL_CALL: and no FINAL:. End it with exactly one of them."

# Every tolerance the parser can record in ParsedReply.repairs (traces count them).
REPAIRS: tuple[str, ...] = (
    "missing_thought", "json_fence", "json_next_line", "trailing_text", "text_before_json",
    "name_outside_json", "xml_tool_call", "inline_marker", "missing_marker", "literal_newlines",
    "python_literal", "alt_keys", "flat_args", "extra_keys", "args_json_string", "args_omitted",
    "null_arg", "tool_name_case", "content_block", "final_after_call",
)

_TOOL_KEYS = ("tool", "name", "tool_name", "function")
_ARGS_KEYS = ("args", "arguments", "parameters", "params", "input")


@dataclass
class ParsedReply:
    """One model reply: a tool call or a final answer, plus the tolerances that were applied."""

    thought: str | None
    tool: str | None
    args: dict[str, Any] | None
    final: str | None
    repairs: list[str] = field(default_factory=list)

    @property
    def kind(self) -> Literal["tool_call", "final"]:
        return "final" if self.final is not None else "tool_call"


FINISH_HINT = " To finish, write FINAL: <text> instead."


def find_tool(name: str, tools: Mapping[str, ToolSpec], repairs: list[str], finish_hint: str = FINISH_HINT) -> ToolSpec:
    """The tool `name` names (its case forgiven, recorded); else a FormatError naming the valid tools, with
    `finish_hint` when the name asks to finish (each protocol says how it finishes)."""
    name = name.strip()
    if name in tools:
        return tools[name]
    folded = [t for t in tools if t.lower() == name.lower()]
    if len(folded) == 1:
        repairs.append("tool_name_case")
        return tools[folded[0]]
    valid = ", ".join(tools) or "(none)"
    finishing = name.lower() in ("final", "finish", "submit", "done")
    hint = finish_hint if finishing else ""
    raise FormatError(f'Unknown tool "{name[:40]}". Valid tools: {valid}.{hint}')


def _split_call(
    obj: dict[str, Any], hint: str | None, tools: Mapping[str, ToolSpec], repairs: list[str]
) -> tuple[ToolSpec, Any]:
    """Find the tool and its raw args in the decoded call object (`hint`: a name written before it)."""
    if hint is not None and not any(k in obj for k in ("tool", "function", *_ARGS_KEYS)):
        return find_tool(hint, tools, repairs), obj  # TOOL_CALL: read_file {"path": "a.py"}
    if "tool" not in obj and isinstance(obj.get("function"), dict):
        obj = obj["function"]  # OpenAI {"type": "function", "function": {"name": ..., "arguments": ...}}
        repairs.append("alt_keys")
    tool_key = next((k for k in _TOOL_KEYS if isinstance(obj.get(k), str)), None)
    args_key = next((k for k in _ARGS_KEYS if k in obj), None)
    if tool_key is None:
        if "tool" in obj or hint is None:
            raise FormatError(f'The tool call needs "tool": a tool name in double quotes. Use {_CALL_FORM}.')
        spec = find_tool(hint, tools, repairs)
    else:
        spec = find_tool(obj[tool_key], tools, repairs)
    if tool_key not in (None, "tool") or args_key not in (None, "args"):
        repairs.append("alt_keys")
    rest = {k: v for k, v in obj.items() if k not in (tool_key, args_key)}
    if args_key is None:
        if rest:
            repairs.append("flat_args")  # {"tool": "read_file", "path": "a.py"}
            return spec, rest
        repairs.append("args_omitted")
        return spec, {}
    if rest:
        repairs.append("extra_keys")
    return spec, obj[args_key]



def _parse_call(
    text: str, marker: Marker, markers: list[Marker], tools: Mapping[str, ToolSpec], repairs: list[str]
) -> tuple[ToolSpec, dict[str, Any]]:
    """Parse the call after `marker`; reject a second call or a FINAL after it."""
    pos = marker.end
    bound = next((m.start for m in markers if m.start > marker.start), len(text))
    brace = text.find("{", pos, bound)
    head = text[pos:bound if brace < 0 else brace]
    if "```" in head or fence_open_at_end(text[: marker.start]) >= 0:
        repairs.append("json_fence")
    if brace >= 0 and "\n" in head and not head.split("\n", 1)[0].strip():
        repairs.append("json_next_line")
    prefix = head.replace("```json", "").replace("```", "").strip().strip("`").strip()
    hint = name_hint(prefix)
    hint = hint if hint is None or hint.lower() != "json" else None
    if hint is not None:
        repairs.append("name_outside_json")
    elif prefix.lower() == "json":
        repairs.append("json_fence")  # a fence label without its fence
    elif prefix:
        repairs.append("text_before_json")
    if brace < 0:
        if hint is None:
            raise FormatError(f"TOOL_CALL: must be followed by a JSON object: {_CALL_FORM}.")
        spec = find_tool(hint, tools, repairs)
        if spec.required:
            raise FormatError(f"{spec.name} needs arguments as JSON: {_CALL_FORM}. {usage(spec)}")
        end = pos + len(text[pos:bound].rstrip())
        spec_args: tuple[ToolSpec, Any] = (spec, {})
        repairs.append("args_omitted")
    else:
        obj, end = decode(text, brace, repairs)
        spec_args = _split_call(obj, hint, tools, repairs)
        end = _content_block(text, end, spec_args, repairs)
    later = [m for m in markers if m.start >= end]
    if any(m.kind == "call" for m in later):
        raise FormatError(_TWO_CALLS)
    rest = text[closers_end(text, end):]
    if rest.strip():
        if "TOOL_CALL:" in rest or _second_call(rest):
            raise FormatError(_TWO_CALLS)
        # Small models often announce FINAL right after their call. The call runs; the FINAL is
        # dropped (the agent says so in the observation), so the model still sees the result first.
        if any(m.kind == "final" for m in later) or "FINAL:" in rest:
            repairs.append("final_after_call")
        else:
            repairs.append("trailing_text")
    spec, args = spec_args
    return spec, check_args(spec, args, repairs)


def _content_block(text: str, end: int, spec_args: tuple[ToolSpec, Any], repairs: list[str]) -> int:
    """Fill a required string argument missing from the JSON with the ``` block that follows it.

    Writing a file as a JSON string (every newline and quote escaped) is where small models fail
    most; a fenced code block is the form they were trained on. Returns the new end of the call.
    """
    spec, args = spec_args
    if not isinstance(args, dict):
        return end
    missing = [p.name for p in spec.params if p.required and p.type == "string" and p.name not in args]
    if len(missing) != 1:
        return end
    i = skip_space(text, end)
    if "json_fence" in repairs and text.startswith("```", i):  # the fence that closed the JSON
        nl = text.find("\n", i)
        if not text[i + 3:len(text) if nl < 0 else nl].strip(SPACE):
            i = skip_space(text, i + 3)
    if not text.startswith("```", i):
        return end
    block = fenced_block(text, i)
    if block is None:
        raise FormatError(f'The ``` block with "{missing[0]}" after TOOL_CALL: is not closed: end it with a '
                          "line that holds only ```. Was the reply cut off? Keep it shorter.")
    body, block_end = block
    args[missing[0]] = body if body.endswith("\n") or not body else body + "\n"
    repairs.append("content_block")
    return block_end


def _second_call(rest: str) -> bool:
    at = bare_call(rest)
    if at < 0:
        return False
    try:
        obj, _ = json.JSONDecoder(strict=False).raw_decode(rest, at)
    except (ValueError, RecursionError, MemoryError):
        return True  # looks like the start of another call object
    return isinstance(obj, dict)


def _thought(text: str, markers: list[Marker], decisive: int, repairs: list[str]) -> str | None:
    first = next((m for m in markers if m.kind == "thought" and m.start < decisive), None)
    if first is None:
        repairs.append("missing_thought")
        return strip_fences(text[:decisive]) or None  # untagged prose is still the reasoning
    thought = text[first.end : decisive]
    fence = fence_open_at_end(thought)
    thought = (thought[:fence] if fence >= 0 else thought).strip()
    return thought or None


def parse_reply(text: str, tools: Mapping[str, ToolSpec]) -> ParsedReply:
    """Parse one model reply. Raises only FormatError, with a message meant for the model."""
    if not isinstance(text, str) or not text.strip():
        raise FormatError("Your reply was empty.")
    repairs: list[str] = []
    markers = find_markers(text)
    decisive = next((m for m in markers if m.kind != "thought"), None)
    if decisive is None:
        inline = inline_marker(text)
        if inline is not None:
            repairs.append("inline_marker")
            decisive = inline
            markers = sorted([*markers, decisive], key=lambda m: m.start)
            if decisive.kind == "final" and "TOOL_CALL:" in text[decisive.end :]:
                raise FormatError(_BOTH)
    if decisive is None:
        bare = bare_call(text)
        if bare < 0:
            if any(m.kind == "thought" for m in markers):
                raise FormatError("Your reply has a THOUGHT: but no TOOL_CALL: or FINAL: after it.")
            raise FormatError(_NEITHER)
        repairs.append("missing_marker")
        decisive = Marker("call", bare, bare)
        markers = sorted([*markers, decisive], key=lambda m: m.start)
    if decisive.kind == "final":
        if any(m.kind == "call" for m in markers if m.start > decisive.start):
            raise FormatError(_BOTH)
        thought = _thought(text, markers, decisive.start, repairs)
        final = text[decisive.end :].strip()
        if final.count("```") % 2:  # the closing fence of a fenced reply
            final = drop_closing_fence(final).strip()
        return ParsedReply(thought, None, None, final, list(dict.fromkeys(repairs)))
    if text[decisive.start : decisive.end].strip().lower().startswith("<tool_call>"):
        repairs.append("xml_tool_call")
    thought = _thought(text, markers, decisive.start, repairs)
    spec, args = _parse_call(text, decisive, markers, tools, repairs)
    return ParsedReply(thought, spec.name, args, None, list(dict.fromkeys(repairs)))
