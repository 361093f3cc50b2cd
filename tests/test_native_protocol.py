"""The native tool-call protocol (agent_harness/protocol/native.py): schemas, prompt and the reply parser."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from test_protocol_linear import FIXED_PARSED, FIXED_STEPS, PARSED_PER_CHAR, STEPS_PER_CHAR, work

from agent_harness.errors import FormatError
from agent_harness.protocol import decode, parser, scan
from agent_harness.protocol import native as native_module
from agent_harness.protocol.native import (
    NATIVE_EXPECTED_FORM,
    NATIVE_REMINDER,
    NATIVE_REPAIRS,
    parse_native,
    render_native_system_prompt,
    tool_schemas,
)
from agent_harness.protocol.parser import REPAIRS, ParsedReply
from agent_harness.tools import TOOLS
from agent_harness.tools import args as tool_args
from agent_harness.types import NativeCall, ToolParam, ToolSpec

SPECS = {name: t.spec for name, t in TOOLS.items()}  # every builtin tool, run_tests included
READ = '{"name": "read_file", "arguments": {"path": "a.py"}}'


def parse(text: str, *calls: NativeCall) -> ParsedReply:
    return parse_native(text, calls, SPECS)


def call_of(text: str) -> tuple[str | None, dict[str, Any] | None, list[str]]:
    r = parse(text)
    return r.tool, r.args, r.repairs


# ----------------------------------------------------------------------------------------
# Schemas and prompt


def test_tool_schemas_of_the_builtin_tools() -> None:
    specs = list(SPECS.values())
    schemas = tool_schemas(specs)
    assert [s["function"]["name"] for s in schemas] == [t.name for t in specs]
    for spec, schema in zip(specs, schemas, strict=True):
        assert schema["type"] == "function"
        fn = schema["function"]
        assert fn["description"] == spec.doc
        params = fn["parameters"]
        assert params["type"] == "object"
        assert list(params["properties"]) == [p.name for p in spec.params]
        assert params["required"] == list(spec.required)
        for p in spec.params:
            assert params["properties"][p.name]["description"] == p.doc
    by_name = {s["function"]["name"]: s["function"]["parameters"] for s in schemas}
    assert by_name["read_file"]["properties"]["path"]["type"] == "string"
    assert by_name["grep"]["required"] == ["pattern"]
    assert by_name["git_diff"] == {"type": "object", "properties": {}, "required": []}
    cmd = by_name["run_cmd"]["properties"]["cmd"]
    assert cmd["anyOf"] == [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]
    assert tool_schemas(specs) == schemas  # deterministic
    json.dumps(schemas)  # plain JSON


def test_tool_schemas_of_every_param_type() -> None:
    spec = ToolSpec("t", "A tool.", (ToolParam("a", "array", "list"), ToolParam("n", "integer", "count", False),
                                      ToolParam("b", "boolean", "flag", False), ToolParam("o", "object", "map")))
    props = tool_schemas([spec])[0]["function"]["parameters"]
    assert props["properties"]["a"] == {"type": "array", "items": {"type": "string"}, "description": "list"}
    assert [props["properties"][k]["type"] for k in "nbo"] == ["integer", "boolean", "object"]
    assert props["required"] == ["a", "o"]


def test_native_system_prompt() -> None:
    specs = list(SPECS.values())
    prompt = render_native_system_prompt(specs, example_path="src/app.py")
    for text_form in ("THOUGHT", "TOOL_CALL", "FINAL:", "OBSERVATION", '"tool":'):
        assert text_form not in prompt
    assert prompt.startswith("You are a coding agent")
    assert "one tool" in prompt.lower() and "relative to the workspace" in prompt
    assert "write_file replaces the whole file" in prompt and "run_tests" in prompt
    assert "no tool call" in prompt and '"src/app.py"' in prompt
    assert "read_file(" not in prompt  # the tools are the chat template's to show
    assert len(prompt) < 600
    no_tests = render_native_system_prompt([s for s in specs if s.name != "run_tests"])
    assert "run_tests" not in no_tests
    assert "No tools" in render_native_system_prompt([])


def test_reminder_and_expected_form() -> None:
    assert "one tool" in NATIVE_REMINDER.lower() and "no tool call" in NATIVE_REMINDER
    assert '<tool_call>{"name": "<tool name>", "arguments": {...}}</tool_call>' in NATIVE_EXPECTED_FORM
    assert "TOOL_CALL:" not in NATIVE_EXPECTED_FORM


# ----------------------------------------------------------------------------------------
# Structured calls (a server parsed the reply)


def test_structured_call() -> None:
    r = parse("  I read it first.\n", NativeCall("read_file", '{"path": "a.py"}', "call_1"))
    assert (r.thought, r.tool, r.args, r.final, r.repairs) == ("I read it first.", "read_file", {"path": "a.py"},
                                                               None, [])
    assert r.kind == "tool_call"
    assert parse("", NativeCall("read_file", '{"path": "a.py"}')).thought is None


def test_structured_calls_run_only_the_first() -> None:
    r = parse("", NativeCall("read_file", '{"path": "a.py"}'), NativeCall("run_tests", "{}"))
    assert (r.tool, r.args, r.repairs) == ("read_file", {"path": "a.py"}, ["extra_calls"])
    with pytest.raises(FormatError, match="Unknown tool"):  # the first decides, even when a later one is fine
        parse("", NativeCall("nope", "{}"), NativeCall("run_tests", "{}"))


@pytest.mark.parametrize(("arguments", "args", "repairs"), [
    ('"{\\"path\\": \\"a.py\\"}"', {"path": "a.py"}, ["double_encoded"]),
    ("{'path': 'a.py'}", {"path": "a.py"}, ["python_literal"]),
    ('{"path": "a\tb.py"}', {"path": "a\tb.py"}, ["literal_newlines"]),
])
def test_structured_arguments_are_read_tolerantly(arguments: str, args: dict[str, Any], repairs: list[str]) -> None:
    r = parse("", NativeCall("read_file", arguments))
    assert (r.args, r.repairs) == (args, repairs)


@pytest.mark.parametrize("arguments", ["", "  ", "null"])
def test_structured_arguments_omitted(arguments: str) -> None:
    r = parse("", NativeCall("git_diff", arguments))
    assert (r.tool, r.args, r.repairs) == ("git_diff", {}, ["args_omitted"])


@pytest.mark.parametrize(("arguments", "message"), [
    ('{"path": "a.py"', "not closed"),
    ('{"path": a.py}', "Invalid JSON"),
    ("path=a.py", "must be a JSON object"),
    ('{"path": "a.py"} x', "text after"),
    ('["a.py"]', "must be a JSON object, not an array"),
    ('{"path": 3}', 'Argument "path" of read_file must be'),
    ("{}", 'missing required argument "path"'),
])
def test_bad_structured_arguments(arguments: str, message: str) -> None:
    with pytest.raises(FormatError, match=message) as err:
        parse("", NativeCall("read_file", arguments))
    assert "TOOL_CALL" not in str(err.value)


def test_structured_tool_name_case_and_unknown_tool() -> None:
    assert parse("", NativeCall("Run_Tests", "{}")).repairs == ["tool_name_case"]
    with pytest.raises(FormatError, match=r'Unknown tool "finish"\. Valid tools: read_file, .*one-line summary'):
        parse("", NativeCall("finish", "{}"))


# ----------------------------------------------------------------------------------------
# Calls in the text


def test_tool_call_tag_is_canonical() -> None:
    r = parse(f"I need the code.\n<tool_call>\n{READ}\n</tool_call>")
    assert (r.thought, r.tool, r.args, r.repairs) == ("I need the code.", "read_file", {"path": "a.py"}, [])
    assert parse(f"<tool_call>{READ}</tool_call>").thought is None
    assert parse(f"<tool_call>{READ}</tool_call>\nThen I fix it.").thought == "Then I fix it."


def test_unclosed_tag() -> None:
    assert call_of(f"<tool_call>\n{READ}\n") == ("read_file", {"path": "a.py"}, ["unclosed_tag"])


def test_text_inside_the_tag() -> None:
    assert call_of(f"<tool_call>{READ}}}</tool_call>")[2] == ["text_in_tag"]
    assert call_of(f"<tool_call>\n```json\n{READ}\n```\n</tool_call>")[2] == ["json_fence"]


def test_tag_whose_json_is_broken_is_an_error() -> None:
    for reply, message in [('<tool_call>{"name": "read_file", "arguments": {"path": "a.py"}</tool_call>', "not closed"),
                           ('<tool_call>{"name": "read_file" "arguments": {}}</tool_call>', "Invalid JSON"),
                           ("<tool_call></tool_call>", "holds no JSON"),
                           ('<tool_call>{"arguments": {"path": "a.py"}}</tool_call>', 'needs "name"')]:
        with pytest.raises(FormatError, match=message):
            parse(reply)


def test_json_fence() -> None:
    r = parse(f"Reading.\n```json\n{READ}\n```\nThen the fix.")
    assert (r.thought, r.tool, r.repairs) == ("Reading.\nThen the fix.", "read_file", ["json_fence"])
    assert call_of(f"```\n{READ}\n```")[2] == ["json_fence"]


def test_broken_call_in_a_fence_is_an_error() -> None:
    with pytest.raises(FormatError, match=r"Invalid JSON in the tool call"):
        parse('Here:\n```json\n{"name": "read_file", "arguments": {"path": a.py}}\n```')


def test_bare_json() -> None:
    r = parse(f"I will read it: {READ}")
    assert (r.thought, r.tool, r.args, r.repairs) == ("I will read it:", "read_file", {"path": "a.py"}, ["bare_json"])
    assert call_of('{"name": "git_diff"}') == ("git_diff", {}, ["bare_json", "args_omitted"])


def test_broken_call_at_the_start_or_cut_off_is_an_error() -> None:
    with pytest.raises(FormatError, match="Invalid JSON"):
        parse('{"name": "read_file", "arguments": {"path": a.py}}')
    with pytest.raises(FormatError, match="cut off"):
        parse('Now: {"name": "write_file", "arguments": {"path": "a.py", "content": "def f(')


@pytest.mark.parametrize(("call", "repairs"), [
    ('{"tool": "read_file", "args": {"path": "a.py"}}', ["alt_keys"]),
    ('{"tool_name": "read_file", "parameters": {"path": "a.py"}}', ["alt_keys"]),
    ('{"function": "read_file", "input": {"path": "a.py"}}', ["alt_keys"]),
    ('{"type": "function", "function": {"name": "read_file", "arguments": {"path": "a.py"}}}', ["alt_keys"]),
    ('{"name": "read_file", "arguments": "{\\"path\\": \\"a.py\\"}"}', ["args_json_string"]),
    ('{"name": "read_file", "arguments": "\\"{\\\\\\"path\\\\\\": \\\\\\"a.py\\\\\\"}\\""}',
     ["args_json_string", "double_encoded"]),
    ('{"name": "read_file", "path": "a.py"}', ["flat_args"]),
    ('{"name": "read_file", "arguments": {"path": "a.py"}, "id": "1"}', ["extra_keys"]),
    ('{"name": "READ_FILE", "arguments": {"path": "a.py"}}', ["tool_name_case"]),
    ("{'name': 'read_file', 'arguments': {'path': 'a.py'}}", ["python_literal"]),
    ('{"name": "read_file", "arguments": {"path": "a\nb.py"}}', ["literal_newlines"]),
    ('{"name": "list_dir", "arguments": {"path": null}}', ["null_arg"]),
])
def test_call_object_repairs(call: str, repairs: list[str]) -> None:
    tool, args, got = call_of(f"<tool_call>{call}</tool_call>")
    assert tool in ("read_file", "list_dir") and got == repairs
    assert args in ({"path": "a.py"}, {"path": "a\nb.py"}, {})


def test_several_calls_in_the_text_run_the_first() -> None:
    second = '<tool_call>{"name": "run_tests", "arguments": {}}</tool_call>'
    for reply in (f"<tool_call>{READ}</tool_call>\n{second}", f"<tool_call>{READ}</tool_call>\n{READ}",
                  f"```json\n{READ}\n```\n{second}", f"{READ}\n{READ}"):
        r = parse(reply)
        assert (r.tool, r.args, r.thought) == ("read_file", {"path": "a.py"}, None)
        assert "extra_calls" in r.repairs


def test_bare_call_before_a_tag_is_the_first() -> None:
    r = parse(f'First {READ} then <tool_call>{{"name": "run_tests"}}</tool_call>')
    assert (r.tool, r.repairs) == ("read_file", ["bare_json", "extra_calls"])


def test_tag_inside_a_call_argument_is_content() -> None:
    content = {"path": "a.py", "content": "x = '<tool_call>{\"name\": \"run_tests\"}</tool_call>'\n"}
    body = json.dumps({"name": "write_file", "arguments": content})
    r = parse(f"<tool_call>{body}</tool_call>")
    assert (r.tool, r.args, r.repairs) == ("write_file", content, [])
    r = parse(f"```json\n{body}\n```")
    assert (r.tool, r.args, r.repairs) == ("write_file", content, ["json_fence"])


def test_unknown_tool_and_bad_args_in_the_text() -> None:
    with pytest.raises(FormatError, match=r'Unknown tool "raed_file"\. Valid tools: read_file, write_file'):
        parse('<tool_call>{"name": "raed_file", "arguments": {"path": "a.py"}}</tool_call>')
    with pytest.raises(FormatError, match='unexpected argument "file"'):
        parse('<tool_call>{"name": "read_file", "arguments": {"file": "a.py"}}</tool_call>')
    with pytest.raises(FormatError, match='takes no arguments: use "arguments": {}'):
        parse('<tool_call>{"name": "git_diff", "arguments": {"x": 1}}</tool_call>')
    with pytest.raises(FormatError, match='must be a JSON array|"cmd" of run_cmd must be'):
        parse('<tool_call>{"name": "run_cmd", "arguments": {"cmd": 3}}</tool_call>')


# ----------------------------------------------------------------------------------------
# Final answers and empty replies


@pytest.mark.parametrize("reply", [
    "Fixed the off-by-one in last().",
    '  Done: the parser now handles {"name": "Bob", "age": 3}.\n',
    "Fixed `return {\"name\": self.name}` in models.py.",
    'The schema is {"type": "object"}.',
    "{}",
])
def test_a_reply_without_a_call_is_final(reply: str) -> None:
    r = parse(reply)
    assert (r.thought, r.tool, r.args, r.final, r.repairs) == (None, None, None, reply.strip(), [])
    assert r.kind == "final"


@pytest.mark.parametrize("reply", ["", "   \n\t "])
def test_empty_reply_is_an_error(reply: str) -> None:
    with pytest.raises(FormatError, match="Your reply was empty. Call a tool, or"):
        parse(reply)


# ----------------------------------------------------------------------------------------
# Repairs, hostile and random replies


def test_repairs_are_listed() -> None:
    """Every repair a reply above records is in NATIVE_REPAIRS; the shared ones keep the text parser's names."""
    assert len(set(NATIVE_REPAIRS)) == len(NATIVE_REPAIRS)
    for shared in ("json_fence", "alt_keys", "args_json_string", "flat_args", "extra_keys", "tool_name_case",
                   "literal_newlines", "python_literal", "args_omitted", "null_arg"):
        assert shared in NATIVE_REPAIRS and shared in REPAIRS


def test_the_parser_uses_no_regex() -> None:
    assert "re" not in vars(native_module)


HUGE = 1_000_000


@pytest.mark.parametrize("unit", ["{", "<tool_call>", '{"name": ', "[", '{"name": "x", "a": [', "```json\n{",
                                  '{"name": "a"} ', "x {'name': (", "</tool_call>", '"'])
def test_a_huge_hostile_reply_finishes(unit: str) -> None:
    text = unit * (HUGE // len(unit))
    try:
        result = parse(text)
    except FormatError:
        return
    assert isinstance(result, ParsedReply)


MODULES = (native_module, parser, scan, decode, tool_args)


@pytest.mark.parametrize("unit", ["{", "{ ", '{"name": ', '{"name": "a"} ', 'x {"name": "a"} ', "x {'name': (1}",
                                  'x {"name": [1, 2}', "<tool_call>{}", "```json\n{\"name\" }\n```\n",
                                  f"{READ} ", '{"type": "a"} '])
def test_work_is_linear_in_the_reply(unit: str) -> None:
    """Counted in steps, not seconds: a quadratic scan of these replies takes 10^8 steps."""
    text = unit * (40_000 // len(unit))
    lines, parsed = work(lambda: parse(text), MODULES)  # the text parser's counter and bounds
    assert lines <= STEPS_PER_CHAR * len(text) + FIXED_STEPS, lines
    assert parsed <= PARSED_PER_CHAR * len(text) + FIXED_PARSED, parsed


ATOMS = ["<tool_call>", "</tool_call>", "{", "}", "[", "]", "(", '"', "'", ":", ",", "\\", "\n", " ", "```", "```json",
         '"name"', '"arguments"', '"tool"', '"function"', '"type"', "read_file", '"read_file"', "run_tests", "null",
         READ, '{"path": "a.py"}', "x", "ß", "\t", "1e999", "9" * 30]


def test_random_replies_raise_only_format_errors() -> None:
    rng = random.Random(1234)
    for _ in range(3000):
        text = "".join(rng.choice(ATOMS) for _ in range(rng.randint(0, 14)))
        calls: tuple[NativeCall, ...] = ()
        if rng.random() < 0.2:
            calls = (NativeCall(rng.choice([*SPECS, "x", ""]), text[: rng.randint(0, len(text))]),)
        try:
            r = parse(text, *calls)
        except FormatError:
            continue
        assert (r.tool is None) != (r.final is None)
        assert set(r.repairs) <= set(NATIVE_REPAIRS), r.repairs
        if r.tool is not None:
            assert r.tool in SPECS and isinstance(r.args, dict)
