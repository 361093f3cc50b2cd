"""The plain-text agent protocol: system prompt, reply parser, observation and error texts.

Every model reply is ``THOUGHT: <reasoning>`` followed by exactly one of
``TOOL_CALL: {"tool": "<name>", "args": {...}}`` or ``FINAL: <text>``. The parser forgives the
ways small models drift from that form (fences, trailing prose, OpenAI-style keys, Python
literals, ...) and records each forgiveness in `ParsedReply.repairs`; it is strict about what
would run the wrong thing (unknown tools, bad arguments, two actions in one reply). Every
failure is a `FormatError` whose message is short enough for a 0.5B model to act on.
"""

from __future__ import annotations

import ast
import json
import shlex
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import FormatError
from .text import safe_text
from .types import ToolParam, ToolSpec

# The reply starts with "THOUGHT:" at position 0, so "\nTHOUGHT:" only ever cuts a second thought.
# Every entry starts with a newline or is a chat-template token, so none can cut a valid reply
# before its TOOL_CALL/FINAL line; see tests/test_protocol.py.
STOP_STRINGS: tuple[str, ...] = (
    "\nOBSERVATION:",
    "\nObservation:",
    "\nTOOL_RESULT",
    "\nTool result:",
    "\nTHOUGHT:",
    "\nThought:",
    "\nFORMAT ERROR:",
    "<tool_response>",
    "<|im_end|>",
    "<|im_start|>",
    "<|endoftext|>",
    "<|eot_id|>",
)

OBSERVATION_HEADER = "OBSERVATION:"
ERROR_HEADER = "FORMAT ERROR:"
EXPECTED_FORM = (
    "Reply with:\n"
    "THOUGHT: <your reasoning>\n"
    'TOOL_CALL: {"tool": "<tool name>", "args": {...}}\n'
    "or, when the task is done:\n"
    "THOUGHT: <your reasoning>\n"
    "FINAL: <what you did>"
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

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "array": (list,), "integer": (int,), "boolean": (bool,), "object": (dict,),
    "string|array": (str, list),
}
_TOOL_KEYS = ("tool", "name", "tool_name", "function")
_ARGS_KEYS = ("args", "arguments", "parameters", "params", "input")
_MAX_DEPTH = 100  # nesting depth accepted from Python-literal replies

# Markers start a line, allowing markdown decoration: **TOOL_CALL:**, ## Final:, > Thought:, <tool_call>.
# Model text is scanned with str methods and index loops, never a backtracking regex: every scan
# below touches each character a bounded number of times (tests/test_protocol_linear.py counts).
_SPACE = " \t"
_DECOR = "*_#>`"
_KEYWORDS: tuple[tuple[str, Literal["thought", "call", "final"]], ...] = (
    ("THOUGHTS", "thought"), ("THOUGHT", "thought"), ("TOOL_CALL", "call"), ("TOOL-CALL", "call"),
    ("TOOL CALL", "call"), ("TOOLCALL", "call"), ("FINAL_ANSWER", "final"), ("FINAL ANSWER", "final"),
    ("FINAL", "final"),
)
_XML_CALL = "<tool_call>"
_CALL_NAMES = ("tool", "name", "function")


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


@dataclass(frozen=True)
class _Marker:
    kind: Literal["thought", "call", "final"]
    start: int
    end: int


# --------------------------------------------------------------------------------------------
# Rendering


def _example_value(p: ToolParam, example_path: str = "main.py") -> Any:
    if p.type == "string":
        return example_path if "path" in p.name or "file" in p.name else "..."
    return {"array": ["..."], "integer": 1, "boolean": True, "object": {}, "string|array": "..."}[p.type]


def _example_call(tools: Sequence[ToolSpec], example_path: str) -> str:
    with_args = [t for t in tools if t.required]
    spec = next((t for t in with_args if "read" in t.name), with_args[0] if with_args else tools[0])
    args = {p.name: _example_value(p, example_path) for p in spec.params if p.required}
    return json.dumps({"tool": spec.name, "args": args})


def _tool_line(spec: ToolSpec) -> str:
    doc = spec.doc.strip().splitlines()[0].strip() if spec.doc.strip() else ""
    params = "; ".join(f"{p.name}: {p.doc.strip()}" for p in spec.params if p.doc.strip())
    parts = [p for p in (doc, params) if p]
    return f"- {spec.signature()}" + (f" - {' '.join(parts)}" if parts else "")


def render_system_prompt(tools: Sequence[ToolSpec], preamble: str = "", example_path: str | None = None,
                         examples: bool = True) -> str:
    """The system prompt: tools (from their specs), the reply format with examples, the rules.

    `example_path` names a real file of the task in the examples: small models copy example
    arguments literally, and a placeholder like main.py sends them after a file that is not there.
    `examples=False` leaves the examples out (the agent shows a worked episode instead, see demo.py).
    """
    example_path = example_path or "main.py"
    names = {t.name for t in tools}
    block_tool = next((t for t in tools if "content" in t.required
                       and any(p.name == "content" and p.type == "string" for p in t.params)), None)
    lines: list[str] = [preamble.strip(), ""] if preamble.strip() else []
    lines.append("You are a coding agent. You work on files in a workspace by calling tools.")
    if tools:
        lines += ["", "Tools (? = optional argument):", *(_tool_line(t) for t in tools)]
    lines += [
        "",
        "Every reply is THOUGHT: then exactly one of TOOL_CALL: or FINAL:",
        "THOUGHT: <short reasoning>",
        'TOOL_CALL: {"tool": "<tool name>", "args": {<arguments>}}',
        "FINAL: <what you did>",
    ]
    if tools and examples:
        lines += ["", "Example:", "THOUGHT: I need to see the code first.",
                  f"TOOL_CALL: {_example_call(tools, example_path)}"]
    if block_tool is not None and examples:
        head = {p.name: _example_value(p, example_path) for p in block_tool.params
                if p.required and p.name != "content"}
        lines += ["", "Example:", "THOUGHT: The loop must stop one step earlier. I rewrite the file.",
                  f"TOOL_CALL: {json.dumps({'tool': block_tool.name, 'args': head})}",
                  "```python", "def last(xs):", "    return xs[len(xs) - 1]", "```"]
    if examples:
        lines += ["", "Example:", "THOUGHT: The fix is done and checked.",
                  "FINAL: Fixed the bug in the loop bound."]
    rules = [
        "One tool call per reply, then stop. Its result comes back as OBSERVATION.",
        "Arguments are JSON: double quotes, newlines in strings written as \\n. A ```json fence is allowed.",
    ]
    if any(p.name == "path" for t in tools for p in t.params):
        rules.append("Paths are relative to the workspace.")
    if "write_file" in names:
        rules.append("write_file replaces the whole file: send the complete new content.")
    if block_tool is not None:
        rules.append(f'For {block_tool.name}, leave "content" out of the JSON and put the text in a ``` block '
                     "right after the TOOL_CALL line.")
    if "run_tests" in names:
        rules.append("Run run_tests before FINAL.")
    if not tools:
        rules = ["No tools are available: reply with FINAL."]
    lines += ["", "Rules:", *(f"- {r}" for r in rules)]
    return "\n".join(lines)


REMINDER = "Reply with THOUGHT: then one TOOL_CALL: (or FINAL: when the task is done)."
# What a coding agent usually does next, by the tool it just used: small models that read a file
# and are not told what comes next tend to read it again, forever.
NEXT_STEP = {
    "read_file": "If you see the bug, fix it with write_file (the whole file in a ``` block); "
                 "if not, run_tests to see what fails.",
    "write_file": "Now run_tests to check your change.",
    "run_tests": "Fix the failing code with write_file.",
    "run_tests passed": "The tests pass: reply FINAL: with a one-line summary.",
}


def next_step(tool: str | None, observation: str) -> str:
    """The reminder shown after an observation: the reply format, plus the usual next step."""
    key = "run_tests passed" if tool == "run_tests" and observation.startswith("Tests PASSED") else tool
    hint = NEXT_STEP.get(key or "")
    return f"{hint} {REMINDER}" if hint else REMINDER


def format_observation(text: str, reminder: str | None = None) -> str:
    """How a tool's output is shown to the model (the next user message), with an optional
    reminder (see `next_step`): small models otherwise drift into echoing the observation or
    their own last reply after a few turns."""
    body = safe_text(text).rstrip()
    return f"{OBSERVATION_HEADER}\n{body if body else '(no output)'}" + (f"\n\n{reminder}" if reminder else "")


def format_error(err: FormatError) -> str:
    """The next user message after an unparseable reply: what was wrong and the expected form."""
    msg = safe_text(str(err)).strip() or "Your reply does not follow the format."
    return f"{ERROR_HEADER} {msg}\n{EXPECTED_FORM}"


# --------------------------------------------------------------------------------------------
# Parsing


def _is_word(s: str, extra: str) -> bool:
    """`s` is empty or only regex word characters (letters, digits, _) and the `extra` ones."""
    for c in extra:
        s = s.replace(c, "a")
    return not s or s.replace("_", "a").isalnum()


def _skip_space(text: str, i: int) -> int:
    """The first index at or after `i` that is not whitespace."""
    n = len(text)
    while i < n and text[i].isspace():
        i += 1
    return i


def _lines(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of every line of `text`, the newline excluded."""
    start, n = 0, len(text)
    while True:
        end = text.find("\n", start)
        if end < 0:
            yield start, n
            return
        yield start, end
        start = end + 1


def _line_marker(text: str, start: int, end: int) -> _Marker | None:
    """The marker that opens the line text[start:end], if there is one."""
    line = text[start:end]
    body = line.lstrip(_SPACE)
    if body[: len(_XML_CALL)].lower() == _XML_CALL:
        tail = body[len(_XML_CALL):].lstrip(_SPACE)
        return _Marker("call", start, end - len(tail))
    rest = body.lstrip(_DECOR)
    pre = len(rest) < len(body)
    if pre:
        rest = rest.lstrip(_SPACE)
    for word, kind in _KEYWORDS:
        if rest[: len(word)].upper() != word:
            continue
        tail = rest[len(word):].lstrip(_SPACE).lstrip("*_`").lstrip(_SPACE)
        if tail.startswith(":"):
            tail = tail[1:].lstrip("*_`") if pre else tail[1:]
            return _Marker(kind, start, end - len(tail.lstrip(_SPACE)))
    return None


def _markers(text: str) -> list[_Marker]:
    return [m for start, end in _lines(text) if (m := _line_marker(text, start, end)) is not None]


def _inline_marker(text: str) -> _Marker | None:
    """The first "TOOL_CALL:" or "FINAL:" anywhere (used only when no line starts with a marker)."""
    hits = [(i, kind, len(word)) for word, kind in (("TOOL_CALL:", "call"), ("FINAL:", "final"))
            if (i := text.find(word)) >= 0]
    if not hits:
        return None
    i, kind, width = min(hits)
    return _Marker(kind, i, i + width)  # type: ignore[arg-type]


def _bare_call(text: str) -> int:
    """Index of the first `{"tool":` (or name/function, quotes optional) in `text`, or -1."""
    n = len(text)
    i = text.find("{")
    while i >= 0:
        j = _skip_space(text, i + 1)
        j += j < n and text[j] in "\"'"
        word = next((w for w in _CALL_NAMES if text.startswith(w, j)), None)
        if word is not None:
            k = j + len(word)
            k += k < n and text[k] in "\"'"
            if text.startswith(":", _skip_space(text, k)):
                return i
        i = text.find("{", i + 1)
    return -1


def _is_fence_line(line: str) -> bool:
    """A line holding only a ``` fence with an optional language tag."""
    t = line.strip(_SPACE)
    return t.startswith("```") and _is_word(t[3:], "+-")


def _fence_open_at_end(s: str) -> int:
    """Where a ``` fence opener (tag, spaces, one newline, spaces) that ends `s` starts, or -1."""
    t = s.rstrip(_SPACE)
    if t.endswith("\n"):
        t = t[:-1].rstrip(_SPACE)
    k = len(t)
    while k and (t[k - 1].isalnum() or t[k - 1] in "_+-"):
        k -= 1
    return k - 3 if t.endswith("```", 0, k) else -1


def _drop_closing_fence(s: str) -> str:
    """`s` without a last line that holds only ``` (the closing fence of a fenced reply)."""
    t = s.rstrip(_SPACE)
    if t.endswith("```"):
        u = t[:-3].rstrip(_SPACE)
        if u.endswith("\n"):
            return u[:-1]
    return s


def _closers_end(text: str, i: int) -> int:
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


def _fenced_block(text: str, i: int) -> tuple[str, int] | None:
    """(body, end) of the ``` block opened at text[i]: its text, and the end of its closing line."""
    nl = text.find("\n", i)
    if nl < 0 or not _is_word(text[i + 3:nl].rstrip(_SPACE), "+.-"):
        return None
    rest = text[nl + 1:]
    for start, end in _lines(rest):
        if rest[start:end].strip(_SPACE) == "```":
            return rest[:start], nl + 1 + end
    return None


def _name_hint(prefix: str) -> str | None:
    """A tool name written before the JSON (`read_file {...}`, `read_file(`), else None."""
    name = (prefix[:-1] if prefix.endswith("(") else prefix).rstrip()
    if not name or not (name[0].isascii() and (name[0].isalpha() or name[0] == "_")):
        return None
    return name if _is_word(name[1:], ".-") else None


def _usage(spec: ToolSpec) -> str:
    return f"Usage: {spec.signature()}"


def _preview(value: Any, limit: int = 40) -> str:
    try:
        s = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        s = "..."
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _scan_end(text: str, start: int) -> int | None:
    """Index just past the bracket that closes text[start], skipping '...' and "..." strings."""
    depth, i, quote, n = 0, start, "", len(text)
    while i < n:
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c in "{[(":
            depth += 1
        elif c in "}])":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def _from_ast(node: ast.AST, depth: int = 0) -> Any:
    """Turn a Python/JSON literal AST into JSON values; evaluates nothing."""
    if depth > _MAX_DEPTH:
        raise ValueError("too deep")
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, str | int | float)):
        return node.value
    if isinstance(node, ast.Name) and node.id in ("true", "false", "null", "True", "False", "None"):
        return {"true": True, "True": True, "false": False, "False": False}.get(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _from_ast(node.operand, depth + 1)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.List | ast.Tuple):
        return [_from_ast(e, depth + 1) for e in node.elts]
    if isinstance(node, ast.Dict):
        out: dict[str, Any] = {}
        for k, v in zip(node.keys, node.values, strict=True):
            key = _from_ast(k, depth + 1) if k is not None else None
            if not isinstance(key, str):
                raise ValueError("non-string key")
            out[key] = _from_ast(v, depth + 1)
        return out
    raise ValueError(f"not a literal: {type(node).__name__}")


def _python_literal(src: str) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escapes like '\d' warn, and tests may run -W error
        tree = ast.parse(src.strip(), mode="eval")
    return _from_ast(tree.body)


def _decode(text: str, start: int, repairs: list[str]) -> tuple[dict[str, Any], int]:
    """Decode the object at text[start] ("{"): strict JSON, then lax JSON, then a Python literal."""
    try:
        return json.JSONDecoder().raw_decode(text, start)
    except json.JSONDecodeError as e:
        err = e
    except (ValueError, RecursionError, MemoryError):  # e.g. an int of 5000 digits, deep nesting
        raise FormatError("The JSON after TOOL_CALL: has a number too long or nests too deep.") from None
    try:
        obj, end = json.JSONDecoder(strict=False).raw_decode(text, start)
        repairs.append("literal_newlines")
        return obj, end
    except json.JSONDecodeError as e:
        err = e  # control characters are forgiven now, so this is the real fault
    except (ValueError, RecursionError, MemoryError):
        pass
    end = _scan_end(text, start)
    if end is None:
        raise FormatError(
            "The JSON after TOOL_CALL: is not closed (missing }). Was the reply cut off? Keep it shorter."
        )
    try:
        obj = _python_literal(text[start:end])  # a dict: the slice starts at "{" and sets are refused
    except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
        near = text[max(start, err.pos - 15) : err.pos + 15]
        raise FormatError(
            f"Invalid JSON after TOOL_CALL: {err.msg} near {near!r}. "
            'Use double quotes; inside strings write \\" and \\n.'
        ) from None
    repairs.append("python_literal")
    return obj, end


def _find_tool(name: str, tools: Mapping[str, ToolSpec], repairs: list[str]) -> ToolSpec:
    name = name.strip()
    if name in tools:
        return tools[name]
    folded = [t for t in tools if t.lower() == name.lower()]
    if len(folded) == 1:
        repairs.append("tool_name_case")
        return tools[folded[0]]
    valid = ", ".join(tools) or "(none)"
    finishing = name.lower() in ("final", "finish", "submit", "done")
    hint = " To finish, write FINAL: <text> instead." if finishing else ""
    raise FormatError(f'Unknown tool "{name[:40]}". Valid tools: {valid}.{hint}')


def _split_call(
    obj: dict[str, Any], hint: str | None, tools: Mapping[str, ToolSpec], repairs: list[str]
) -> tuple[ToolSpec, Any]:
    """Find the tool and its raw args in the decoded call object (`hint`: a name written before it)."""
    if hint is not None and not any(k in obj for k in ("tool", "function", *_ARGS_KEYS)):
        return _find_tool(hint, tools, repairs), obj  # TOOL_CALL: read_file {"path": "a.py"}
    if "tool" not in obj and isinstance(obj.get("function"), dict):
        obj = obj["function"]  # OpenAI {"type": "function", "function": {"name": ..., "arguments": ...}}
        repairs.append("alt_keys")
    tool_key = next((k for k in _TOOL_KEYS if isinstance(obj.get(k), str)), None)
    args_key = next((k for k in _ARGS_KEYS if k in obj), None)
    if tool_key is None:
        if "tool" in obj or hint is None:
            raise FormatError(f'The tool call needs "tool": a tool name in double quotes. Use {_CALL_FORM}.')
        spec = _find_tool(hint, tools, repairs)
    else:
        spec = _find_tool(obj[tool_key], tools, repairs)
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


def _type_error(spec: ToolSpec, p: ToolParam, value: Any) -> str:
    base = f'Argument "{p.name}" of {spec.name} must be'
    if p.type == "array" and isinstance(value, str):
        try:
            parts = shlex.split(value)
        except ValueError:
            parts = value.split()
        return f"{base} a JSON array, not a string: write {_preview(parts, 60)}."
    want = {
        "string": "a JSON string in double quotes",
        "array": 'a JSON array like ["a", "b"]',
        "integer": "an integer like 30 (no quotes)",
        "boolean": "true or false (no quotes)",
        "object": 'a JSON object like {"key": "value"}',
        "string|array": 'a JSON string like "python3 -m unittest" (or an array of strings)',
    }[p.type]
    return f"{base} {want}, got {_type_name(value)} {_preview(value)}."


def _check_args(spec: ToolSpec, args: Any, repairs: list[str]) -> dict[str, Any]:
    if args is None:
        repairs.append("args_omitted")
        args = {}
    if isinstance(args, str):
        try:
            decoded = json.loads(args)
        except (ValueError, RecursionError):
            decoded = None
        if not isinstance(decoded, dict):
            raise FormatError(f'"args" must be a JSON object like {{"name": value}}. {_usage(spec)}')
        repairs.append("args_json_string")  # OpenAI sends "arguments" as a JSON string
        args = decoded
    if not isinstance(args, dict):
        raise FormatError(f'"args" must be a JSON object, not {_type_name(args)}. {_usage(spec)}')
    params = {p.name: p for p in spec.params}
    unknown = [k for k in args if k not in params]
    if unknown:
        if not params:
            raise FormatError(f'{spec.name} takes no arguments: use {{"tool": "{spec.name}", "args": {{}}}}.')
        raise FormatError(
            f'{spec.name} got unexpected argument "{str(unknown[0])[:40]}". '
            f"Valid arguments: {', '.join(params)}. {_usage(spec)}"
        )
    out: dict[str, Any] = {}
    for name, value in args.items():
        if value is None and not params[name].required:
            repairs.append("null_arg")
            continue
        out[name] = value
    missing = [p for p in spec.required if p not in out]
    if missing:
        raise FormatError(f'{spec.name} is missing required argument "{missing[0]}". {_usage(spec)}')
    for name, value in out.items():
        p = params[name]
        if not isinstance(value, _JSON_TYPES[p.type]) or (p.type == "integer" and isinstance(value, bool)):
            raise FormatError(_type_error(spec, p, value))
    return out


def _strip_fences(s: str) -> str:
    return "\n".join("" if _is_fence_line(s[a:b]) else s[a:b] for a, b in _lines(s)).strip()


def _parse_call(
    text: str, marker: _Marker, markers: list[_Marker], tools: Mapping[str, ToolSpec], repairs: list[str]
) -> tuple[ToolSpec, dict[str, Any]]:
    """Parse the call after `marker`; reject a second call or a FINAL after it."""
    pos = marker.end
    bound = next((m.start for m in markers if m.start > marker.start), len(text))
    brace = text.find("{", pos, bound)
    head = text[pos:bound if brace < 0 else brace]
    if "```" in head or _fence_open_at_end(text[: marker.start]) >= 0:
        repairs.append("json_fence")
    if brace >= 0 and "\n" in head and not head.split("\n", 1)[0].strip():
        repairs.append("json_next_line")
    prefix = head.replace("```json", "").replace("```", "").strip().strip("`").strip()
    hint = _name_hint(prefix)
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
        spec = _find_tool(hint, tools, repairs)
        if spec.required:
            raise FormatError(f"{spec.name} needs arguments as JSON: {_CALL_FORM}. {_usage(spec)}")
        end = pos + len(text[pos:bound].rstrip())
        spec_args: tuple[ToolSpec, Any] = (spec, {})
        repairs.append("args_omitted")
    else:
        obj, end = _decode(text, brace, repairs)
        spec_args = _split_call(obj, hint, tools, repairs)
        end = _content_block(text, end, spec_args, repairs)
    later = [m for m in markers if m.start >= end]
    if any(m.kind == "call" for m in later):
        raise FormatError(_TWO_CALLS)
    rest = text[_closers_end(text, end):]
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
    return spec, _check_args(spec, args, repairs)


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
    i = _skip_space(text, end)
    if "json_fence" in repairs and text.startswith("```", i):  # the fence that closed the JSON
        nl = text.find("\n", i)
        if not text[i + 3:len(text) if nl < 0 else nl].strip(_SPACE):
            i = _skip_space(text, i + 3)
    if not text.startswith("```", i):
        return end
    block = _fenced_block(text, i)
    if block is None:
        raise FormatError(f'The ``` block with "{missing[0]}" after TOOL_CALL: is not closed: end it with a '
                          "line that holds only ```. Was the reply cut off? Keep it shorter.")
    body, block_end = block
    args[missing[0]] = body if body.endswith("\n") or not body else body + "\n"
    repairs.append("content_block")
    return block_end


def _second_call(rest: str) -> bool:
    at = _bare_call(rest)
    if at < 0:
        return False
    try:
        obj, _ = json.JSONDecoder(strict=False).raw_decode(rest, at)
    except (ValueError, RecursionError, MemoryError):
        return True  # looks like the start of another call object
    return isinstance(obj, dict)


def _thought(text: str, markers: list[_Marker], decisive: int, repairs: list[str]) -> str | None:
    first = next((m for m in markers if m.kind == "thought" and m.start < decisive), None)
    if first is None:
        repairs.append("missing_thought")
        return _strip_fences(text[:decisive]) or None  # untagged prose is still the reasoning
    thought = text[first.end : decisive]
    fence = _fence_open_at_end(thought)
    thought = (thought[:fence] if fence >= 0 else thought).strip()
    return thought or None


def parse_reply(text: str, tools: Mapping[str, ToolSpec]) -> ParsedReply:
    """Parse one model reply. Raises only FormatError, with a message meant for the model."""
    if not isinstance(text, str) or not text.strip():
        raise FormatError("Your reply was empty.")
    repairs: list[str] = []
    markers = _markers(text)
    decisive = next((m for m in markers if m.kind != "thought"), None)
    if decisive is None:
        inline = _inline_marker(text)
        if inline is not None:
            repairs.append("inline_marker")
            decisive = inline
            markers = sorted([*markers, decisive], key=lambda m: m.start)
            if decisive.kind == "final" and "TOOL_CALL:" in text[decisive.end :]:
                raise FormatError(_BOTH)
    if decisive is None:
        bare = _bare_call(text)
        if bare < 0:
            if any(m.kind == "thought" for m in markers):
                raise FormatError("Your reply has a THOUGHT: but no TOOL_CALL: or FINAL: after it.")
            raise FormatError(_NEITHER)
        repairs.append("missing_marker")
        decisive = _Marker("call", bare, bare)
        markers = sorted([*markers, decisive], key=lambda m: m.start)
    if decisive.kind == "final":
        if any(m.kind == "call" for m in markers if m.start > decisive.start):
            raise FormatError(_BOTH)
        thought = _thought(text, markers, decisive.start, repairs)
        final = text[decisive.end :].strip()
        if final.count("```") % 2:  # the closing fence of a fenced reply
            final = _drop_closing_fence(final).strip()
        return ParsedReply(thought, None, None, final, list(dict.fromkeys(repairs)))
    if text[decisive.start : decisive.end].strip().lower().startswith("<tool_call>"):
        repairs.append("xml_tool_call")
    thought = _thought(text, markers, decisive.start, repairs)
    spec, args = _parse_call(text, decisive, markers, tools, repairs)
    return ParsedReply(thought, spec.name, args, None, list(dict.fromkeys(repairs)))
