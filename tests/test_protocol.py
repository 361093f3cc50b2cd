"""The text protocol: every tolerance, every strict failure, the prompt, and a fuzzed contract."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_harness.errors import FormatError
from agent_harness.protocol import (
    REPAIRS,
    STOP_STRINGS,
    ParsedReply,
    format_error,
    format_observation,
    parse_reply,
    render_system_prompt,
)
from agent_harness.types import ToolParam, ToolSpec

SPECS = [
    ToolSpec("read_file", "Read a text file.", (ToolParam("path", "string", "file path"),)),
    ToolSpec(
        "write_file",
        "Write a whole file.",
        (ToolParam("path", "string", "file path"), ToolParam("content", "string", "the complete content")),
    ),
    ToolSpec(
        "run",
        "Run a command.",
        (
            ToolParam("cmd", "array", 'argv list, e.g. ["python", "x.py"]'),
            ToolParam("timeout", "integer", "seconds", required=False),
            ToolParam("check", "boolean", "fail on non-zero exit", required=False),
            ToolParam("env", "object", "extra environment", required=False),
        ),
    ),
    ToolSpec("git_diff", "Show the workspace diff.", ()),
    ToolSpec("run_tests", "Run the task's tests.", ()),
]
TOOLS = {t.name: t for t in SPECS}
PY_TYPES: dict[str, Any] = {"string": str, "array": list, "integer": int, "boolean": bool, "object": dict}

READ = '{"tool": "read_file", "args": {"path": "a.py"}}'
C = "THOUGHT: t\nTOOL_CALL: "  # the canonical head of a tool-call reply
A = {"path": "a.py"}
MARKERS_TEXT = "x\nFINAL: no\nTOOL_CALL: no\nTHOUGHT: no\n```"  # file content that looks like markers
WRITE_NL = '{"tool": "write_file", "args": {"path": "a.py", "content": "def f():\n    return 1\n"}}'

# id, reply, tool, args, repairs that must be recorded, thought
OK_CALLS: list[tuple[str, str, str, dict[str, Any], set[str], str | None]] = [
    ("canonical", f"THOUGHT: look first\nTOOL_CALL: {READ}", "read_file", A, set(), "look first"),
    ("final_after_call", f"{C}{READ}\nFINAL: done", "read_file", A, {"final_after_call"}, "t"),
    ("inline_final_after_call", f"THOUGHT: t TOOL_CALL: {READ} FINAL: done", "read_file", A,
     {"final_after_call", "inline_marker"}, "t"),
    ("content_block", 'THOUGHT: t\nTOOL_CALL: {"tool": "write_file", "args": {"path": "a.py"}}\n```python\n'
     'def f():\n    return "x"\n```', "write_file", {"path": "a.py", "content": 'def f():\n    return "x"\n'},
     {"content_block"}, "t"),
    ("content_block_after_fenced_json", 'THOUGHT: t\nTOOL_CALL:\n```json\n{"tool": "write_file", "args": '
     '{"path": "a.py"}}\n```\n```\nx = {"tool": 1}\n\ny = \'FINAL\'\n```\n', "write_file",
     {"path": "a.py", "content": 'x = {"tool": 1}\n\ny = \'FINAL\'\n'},
     {"content_block", "json_fence", "json_next_line"}, "t"),
    ("multiline_thought", f"THOUGHT: one\ntwo\n\nTOOL_CALL: {READ}", "read_file", A, set(), "one\ntwo"),
    ("json_fence", f"THOUGHT: t\nTOOL_CALL:\n```json\n{READ}\n```", "read_file", A,
     {"json_fence", "json_next_line"}, "t"),
    ("plain_fence_same_line", f"{C}```{READ}```", "read_file", A, {"json_fence"}, "t"),
    ("fence_around_whole_call", f"THOUGHT: t\n```\nTOOL_CALL: {READ}\n```", "read_file", A, {"json_fence"},
     "t"),
    ("next_line", f"THOUGHT: t\nTOOL_CALL:\n{READ}", "read_file", A, {"json_next_line"}, "t"),
    ("trailing_text", f"{C}{READ} and then I will wait.", "read_file", A, {"trailing_text"}, "t"),
    ("missing_thought", f"TOOL_CALL: {READ}", "read_file", A, {"missing_thought"}, None),
    ("untagged_prose_is_thought", f"I should read it.\nTOOL_CALL: {READ}", "read_file", A,
     {"missing_thought"},
     "I should read it."),
    ("case_title", f"Thought: t\nTool_Call: {READ}", "read_file", A, set(), "t"),
    ("case_lower", f"thought: t\ntool_call: {READ}", "read_file", A, set(), "t"),
    ("tool_call_space", f"THOUGHT: t\nTool Call: {READ}", "read_file", A, set(), "t"),
    ("markdown_bold_inside", f"**THOUGHT:** t\n**TOOL_CALL:** {READ}", "read_file", A, set(), "t"),
    ("markdown_bold_outside", f"**THOUGHT**: t\n**TOOL_CALL**: {READ}", "read_file", A, set(), "t"),
    ("heading", f"### THOUGHT: t\n### TOOL_CALL: {READ}", "read_file", A, set(), "t"),
    ("openai_keys", C + '{"name": "read_file", "arguments": {"path": "a.py"}}', "read_file", A,
     {"alt_keys"}, "t"),
    ("openai_arguments_string", C + '{"name": "read_file", "arguments": "{\\"path\\": \\"a.py\\"}"}',
     "read_file", A, {"alt_keys", "args_json_string"}, "t"),
    ("openai_function_wrapper",
     C + '{"type": "function", "function": {"name": "read_file", "arguments": {"path": "a.py"}}}',
     "read_file", A, {"alt_keys"}, "t"),
    ("parameters_key", C + '{"tool": "read_file", "parameters": {"path": "a.py"}}', "read_file", A,
     {"alt_keys"},
     "t"),
    ("flat_args", C + '{"tool": "read_file", "path": "a.py"}', "read_file", A, {"flat_args"}, "t"),
    ("extra_keys_ignored", C + '{"tool": "read_file", "args": {"path": "a.py"}, "id": 3}', "read_file", A,
     {"extra_keys"}, "t"),
    ("args_omitted", C + '{"tool": "git_diff"}', "git_diff", {}, {"args_omitted"}, "t"),
    ("args_null", C + '{"tool": "git_diff", "args": null}', "git_diff", {}, {"args_omitted"}, "t"),
    ("bare_name_no_args", C + "git_diff", "git_diff", {}, {"name_outside_json", "args_omitted"}, "t"),
    ("name_outside_json", C + 'read_file {"path": "a.py"}', "read_file", A, {"name_outside_json"}, "t"),
    ("name_call_syntax", C + 'read_file({"path": "a.py"})', "read_file", A, {"name_outside_json"}, "t"),
    ("name_outside_args_key", C + 'read_file {"args": {"path": "a.py"}}', "read_file", A,
     {"name_outside_json"}, "t"),
    ("json_label_without_fence", f"{C}json\n{READ}", "read_file", A, {"json_fence"}, "t"),
    ("text_before_json", f"{C}here it is: {READ}", "read_file", A, {"text_before_json"}, "t"),
    ("single_call_in_list", f"{C}[{READ}]", "read_file", A, {"text_before_json", "trailing_text"}, "t"),
    ("python_literal", C + "{'tool': 'run', 'args': {'cmd': ['pytest'], 'check': True}}", "run",
     {"cmd": ["pytest"], "check": True}, {"python_literal"}, "t"),
    ("python_trailing_comma", C + '{"tool": "read_file", "args": {"path": "a.py",},}', "read_file", A,
     {"python_literal"}, "t"),
    ("python_none_drops_optional", C + "{'tool': 'run', 'args': {'cmd': ['ls'], 'timeout': None}}", "run",
     {"cmd": ["ls"]}, {"python_literal", "null_arg"}, "t"),
    ("mixed_json_python_names", C + "{'tool': 'run', 'args': {'cmd': ['ls'], 'check': true}}", "run",
     {"cmd": ["ls"], "check": True}, {"python_literal"}, "t"),
    ("python_negative_number", C + "{'tool': 'run', 'args': {'cmd': ['ls'], 'timeout': -1}}", "run",
     {"cmd": ["ls"], "timeout": -1}, {"python_literal"}, "t"),
    ("literal_newlines_in_string", C + WRITE_NL, "write_file", {"path": "a.py",
     "content": "def f():\n    return 1\n"},
     {"literal_newlines"}, "t"),
    ("literal_newlines_marker_like_content",
     C + '{"tool": "write_file", "args": {"path": "n", "content": "' + MARKERS_TEXT + '"}}',
     "write_file", {"path": "n", "content": MARKERS_TEXT}, {"literal_newlines"}, "t"),
    ("escaped_content",
     C + '{"tool": "write_file", "args": {"path": "a.py", "content": "s = \\"FINAL:\\"\\n"}}',
     "write_file", {"path": "a.py", "content": 's = "FINAL:"\n'}, set(), "t"),
    ("qwen_native_xml", 'THOUGHT: t\n<tool_call>\n{"name": "run_tests", "arguments": {}}\n</tool_call>',
     "run_tests", {}, {"xml_tool_call", "alt_keys"}, "t"),
    ("inline_marker", f"THOUGHT: read it. TOOL_CALL: {READ}", "read_file", A, {"inline_marker"}, "read it."),
    ("missing_marker_fenced_json", f"THOUGHT: t\n```json\n{READ}\n```", "read_file", A,
     {"missing_marker", "json_fence"}, "t"),
    ("missing_marker_only_json", READ, "read_file", A, {"missing_marker", "missing_thought"}, None),
    ("tool_name_case", C + '{"tool": "Read_File", "args": {"path": "a.py"}}', "read_file", A,
     {"tool_name_case"},
     "t"),
    ("hallucinated_observation_after_call", f"{C}{READ}\nOBSERVATION: def f(): ...", "read_file", A,
     {"trailing_text"}, "t"),
    ("leading_whitespace", f"\n  THOUGHT: t\nTOOL_CALL: {READ}\n\n", "read_file", A, set(), "t"),
    ("unicode_args", 'THOUGHT: ü\nTOOL_CALL: {"tool": "read_file", "args": {"path": "dir/ünï €.py"}}',
     "read_file", {"path": "dir/ünï €.py"}, set(), "ü"),
    ("optional_args",
     C + '{"tool": "run", "args": {"cmd": ["a"], "timeout": 5, "check": false, "env": {"A": "1"}}}',
     "run", {"cmd": ["a"], "timeout": 5, "check": False, "env": {"A": "1"}}, set(), "t"),
]


@pytest.mark.parametrize(("text", "tool", "args", "repairs", "thought"),
                         [c[1:] for c in OK_CALLS], ids=[c[0] for c in OK_CALLS])
def test_tolerated_tool_calls(text: str, tool: str, args: dict[str, Any], repairs: set[str],
                              thought: str | None) -> None:
    r = _check_contract(text)
    assert r is not None
    assert (r.kind, r.tool, r.args, r.final) == ("tool_call", tool, args, None)
    assert r.thought == thought
    assert repairs <= set(r.repairs), r.repairs
    if not repairs:
        assert r.repairs == [], "a well-formed reply must need no repair"


OK_FINALS: list[tuple[str, str, str, str | None, set[str]]] = [
    ("canonical", "THOUGHT: tests pass\nFINAL: fixed the loop", "fixed the loop", "tests pass", set()),
    ("multiline_final", "THOUGHT: t\nFINAL: line one\nline two", "line one\nline two", "t", set()),
    ("lower_case", "thought: t\nfinal: ok", "ok", "t", set()),
    ("final_answer", "THOUGHT: t\nFinal Answer: ok", "ok", "t", set()),
    ("bold", "**THOUGHT:** t\n**FINAL:** ok", "ok", "t", set()),
    ("missing_thought", "FINAL: ok", "ok", None, {"missing_thought"}),
    ("final_anywhere_as_line_start", "Here is my summary.\nFINAL: ok", "ok", "Here is my summary.",
     {"missing_thought"}),
    ("inline_final", "THOUGHT: done. FINAL: ok", "ok", "done.", {"inline_marker"}),
    ("closing_fence_dropped", "```\nTHOUGHT: t\nFINAL: ok\n```", "ok", "t", set()),
    ("fence_inside_final_kept", "THOUGHT: t\nFINAL: changed\n```py\nx = 1\n```", "changed\n```py\nx = 1\n```",
     "t", set()),
    ("empty_final", "THOUGHT: t\nFINAL:", "", "t", set()),
    ("json_in_final_is_text", 'THOUGHT: t\nFINAL: used {"tool": "x"} once', 'used {"tool": "x"} once', "t",
     set()),
]


@pytest.mark.parametrize(("text", "final", "thought", "repairs"), [c[1:] for c in OK_FINALS],
                         ids=[c[0] for c in OK_FINALS])
def test_finals(text: str, final: str, thought: str | None, repairs: set[str]) -> None:
    r = _check_contract(text)
    assert r is not None
    assert (r.kind, r.final, r.tool, r.args) == ("final", final, None, None)
    assert r.thought == thought
    assert repairs <= set(r.repairs)


# id, reply, substrings the error message must contain
T = "TOOL_CALL: "
DEEP = "[" * 100_000 + "]" * 100_000
BAD: list[tuple[str, str, list[str]]] = [
    ("empty", "", ["empty"]),
    ("whitespace", "  \n\t ", ["empty"]),
    ("neither", "I think the bug is on line 3.", ["no TOOL_CALL:", "no FINAL:"]),
    ("thought_only", "THOUGHT: let me think", ["THOUGHT:", "no TOOL_CALL: or FINAL:"]),
    ("unknown_tool", T + '{"tool": "delete_all", "args": {}}',
     ['"delete_all"', "read_file, write_file, run, git_diff, run_tests"]),
    ("tool_named_final", T + '{"tool": "finish", "args": {}}', ["Unknown tool", "FINAL: <text>"]),
    ("missing_required", T + '{"tool": "write_file", "args": {"path": "a.py"}}',
     ['missing required argument "content"', "write_file(path: string, content: string)"]),
    ("required_null", T + '{"tool": "read_file", "args": {"path": null}}', ['"path"', "string", "null"]),
    ("unexpected_arg", T + '{"tool": "read_file", "args": {"file": "a.py"}}',
     ['unexpected argument "file"', "Valid arguments: path"]),
    ("args_for_argless_tool", T + '{"tool": "git_diff", "args": {"staged": true}}',
     ["git_diff takes no arguments", '"args": {}']),
    ("array_given_string", T + '{"tool": "run", "args": {"cmd": "python -m pytest -q"}}',
     ['"cmd"', "JSON array", '["python", "-m", "pytest", "-q"]']),
    ("string_given_array", T + '{"tool": "read_file", "args": {"path": ["a.py"]}}', ['"path"', "string",
     "an array"]),
    ("integer_given_string", T + '{"tool": "run", "args": {"cmd": ["ls"], "timeout": "30"}}',
     ['"timeout"', "integer", "no quotes"]),
    ("integer_given_bool", T + '{"tool": "run", "args": {"cmd": ["ls"], "timeout": true}}', ['"timeout"',
     "integer"]),
    ("integer_given_float", T + '{"tool": "run", "args": {"cmd": ["ls"], "timeout": 2.5}}', ['"timeout"',
     "integer"]),
    ("boolean_given_string", T + '{"tool": "run", "args": {"cmd": ["ls"], "check": "yes"}}',
     ['"check"', "true or false"]),
    ("object_given_list", T + '{"tool": "run", "args": {"cmd": ["ls"], "env": ["A=1"]}}', ['"env"',
     "JSON object"]),
    ("args_is_list", T + '{"tool": "read_file", "args": ["a.py"]}', ['"args" must be a JSON object']),
    ("args_bad_string", T + '{"tool": "read_file", "args": "a.py"}', ['"args" must be a JSON object']),
    ("tool_not_string", T + '{"tool": 3, "args": {}}', ['needs "tool": a tool name']),
    ("no_tool_key", T + '{"path": "a.py"}', ['needs "tool"']),
    ("name_outside_and_bad_tool_key", T + 'read_file {"tool": 3}', ['needs "tool"']),
    ("calls_in_a_list", f"{T}[{READ}, {READ}]", ["Only one TOOL_CALL"]),
    ("no_json", "THOUGHT: t\nTOOL_CALL: please read the file", ["must be followed by a JSON object"]),
    ("name_needs_args", "THOUGHT: t\nTOOL_CALL: read_file", ["read_file needs arguments",
     "read_file(path: string)"]),
    ("two_calls", f"{C}{READ}\nTOOL_CALL: {READ}", ["Only one TOOL_CALL"]),
    ("two_calls_fenced", f"THOUGHT: t\nTOOL_CALL:\n```json\n{READ}\n```\nTOOL_CALL:\n```json\n{READ}\n```",
     ["Only one TOOL_CALL"]),
    ("two_json_objects", f"{C}{READ}\n{READ}", ["Only one TOOL_CALL"]),
    ("final_then_call", f"THOUGHT: t\nFINAL: done\nTOOL_CALL: {READ}", ["not both"]),
    ("unescaped_quote", T + '{"tool": "write_file", "args": {"path": "a.py", "content": "print("hi")"}}',
     ["Invalid JSON", "print(", '\\"']),
    ("cut_off", T + '{"tool": "write_file", "args": {"path": "a.py", "content": "def f():\\n',
     ["not closed", "cut off"]),
    ("huge_number", T + '{"tool": "run", "args": {"cmd": [' + "9" * 5000 + "]}}", ["number too long"]),
    ("deep_nesting", T + '{"tool": "run", "args": {"cmd": ' + DEEP + "}}", ["nests too deep"]),
    ("deep_python_nesting", T + "{'tool': 'run', 'args': {'cmd': " + "[" * 150 + "]" * 150 + "}}",
     ["Invalid JSON"]),
    ("inline_final_then_call", f"THOUGHT: t FINAL: done TOOL_CALL: {READ}", ["not both"]),
    ("cut_off_second_call", f"{C}{READ}\n" + '{"tool": "read_file", "args": {', ["Only one TOOL_CALL"]),
    ("python_non_string_key", T + "{'tool': 'run', 'args': {1: 'a'}}", ["Invalid JSON"]),
    ("array_given_unbalanced_quote", T + '{"tool": "run", "args": {"cmd": "echo \'a"}}', ['["echo", "\'a"]']),
    ("python_call_not_literal", T + "{'tool': 'read_file', 'args': {'path': open('x')}}", ["Invalid JSON"]),
    ("python_set_not_literal", T + "{'tool': 'run', 'args': {'cmd': {'a', 'b'}}}", ["Invalid JSON"]),
]


@pytest.mark.parametrize(("text", "needles"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_strict_failures(text: str, needles: list[str]) -> None:
    with pytest.raises(FormatError) as info:
        parse_reply(text, TOOLS)
    msg = str(info.value)
    for needle in needles:
        assert needle in msg, msg
    assert "\n" not in msg and len(msg) <= 200, "errors are one short line for a small model"


def test_kind_property() -> None:
    assert ParsedReply("t", "git_diff", {}, None, []).kind == "tool_call"
    assert ParsedReply(None, None, None, "", []).kind == "final"


def test_unknown_tool_lists_the_given_map() -> None:
    only = {"read_file": TOOLS["read_file"]}
    with pytest.raises(FormatError, match=r"Valid tools: read_file\.$"):
        parse_reply('TOOL_CALL: {"tool": "git_diff"}', only)


# ------------------------------------------------------------------------------------------
# Rendering


def test_prompt_is_rendered_from_specs() -> None:
    params = (ToolParam("widget", "string", "widget id"), ToolParam("times", "integer", "count", False))
    fake = ToolSpec("frobnicate", "Frobnicate a widget.\nSecond doc line is not shown.", params)
    without = render_system_prompt(SPECS)
    with_fake = render_system_prompt([*SPECS, fake])
    assert "frobnicate" not in without
    line = ("- frobnicate(widget: string, times: integer?) - Frobnicate a widget. "
            "widget: widget id; times: count")
    assert line in with_fake.splitlines()
    assert "Second doc line" not in with_fake
    for spec in SPECS:
        assert f"- {spec.signature()}" in without
        assert spec.doc in without


def test_prompt_format_examples_parse() -> None:
    prompt = render_system_prompt(SPECS)
    assert "THOUGHT:" in prompt and "TOOL_CALL:" in prompt and "FINAL:" in prompt and "```json" in prompt
    examples = [block.split("\n\n")[0] for block in prompt.split("Example:\n")[1:]]
    assert len(examples) == 3
    call, write, final = (parse_reply(e, TOOLS) for e in examples)
    assert (call.tool, call.args, call.repairs) == ("read_file", {"path": "main.py"}, [])
    assert (write.tool, write.repairs) == ("write_file", ["content_block"])
    assert final.kind == "final" and final.repairs == []
    # The model's own examples must survive its stop strings.
    for e in examples:
        assert not any(s in e for s in STOP_STRINGS)


def test_prompt_rules_follow_the_tools() -> None:
    full = render_system_prompt(SPECS)
    assert "One tool call per reply" in full and "double quotes" in full
    assert "relative to the workspace" in full
    assert "write_file replaces the whole file" in full
    assert "Run run_tests before FINAL" in full
    few = render_system_prompt([ToolSpec("echo", "Echo.", (ToolParam("text", "string", "what"),))])
    assert "run_tests" not in few and "write_file" not in few and "relative to the workspace" not in few
    assert 'TOOL_CALL: {"tool": "echo", "args": {"text": "..."}}' in few
    array = render_system_prompt([ToolSpec("exec", "Exec.", (ToolParam("cmd", "array", "argv"),))])
    assert 'TOOL_CALL: {"tool": "exec", "args": {"cmd": ["..."]}}' in array
    argless = render_system_prompt([ToolSpec("ping", "Ping.")])
    assert 'TOOL_CALL: {"tool": "ping", "args": {}}' in argless
    none = render_system_prompt([])
    assert "No tools are available" in none and "Tools" not in none


def test_prompt_preamble_and_size() -> None:
    p = render_system_prompt(SPECS, preamble="  You fix Python bugs.\n")
    assert p.startswith("You fix Python bugs.\n\n")
    assert render_system_prompt(SPECS) == render_system_prompt(SPECS, "")
    # Sent every step to 0.5B models: keep it near 300 tokens (~4 characters per token).
    assert len(render_system_prompt(SPECS)) < 1600


def test_observation_and_error_text() -> None:
    assert format_observation("a\nb\n\n") == "OBSERVATION:\na\nb"
    assert format_observation("   \n") == "OBSERVATION:\n(no output)"
    text = format_error(FormatError('Unknown tool "x". Valid tools: a, b.'))
    assert text.startswith('FORMAT ERROR: Unknown tool "x". Valid tools: a, b.\n')
    assert 'TOOL_CALL: {"tool": "<tool name>", "args": {...}}' in text and "FINAL: <" in text
    # The expected form shown in the error must itself be the protocol's form.
    assert "THOUGHT: <your reasoning>" in text


# ------------------------------------------------------------------------------------------
# Stop strings


def _cut(text: str) -> str:
    """What a backend returns: the text up to the first stop string."""
    idx = [text.find(s) for s in STOP_STRINGS if s in text]
    return text[: min(idx)] if idx else text


def test_stop_strings_never_cut_a_valid_reply() -> None:
    for name, text, *_ in OK_CALLS:
        if name not in ("hallucinated_observation_after_call", "literal_newlines_marker_like_content"):
            assert _cut(text) == text, name
    for s in STOP_STRINGS:
        # A reply begins with "THOUGHT:" at position 0; no stop string may match there.
        assert not "THOUGHT: x".startswith(s) and s.strip()
        assert "TOOL_CALL" not in s.upper() and "FINAL" not in s.upper()


@pytest.mark.parametrize("tail", ["\nOBSERVATION:\n1 passed", "\nObservation: ok", "\nTHOUGHT: now FINAL",
                                  "\nTOOL_RESULT: x", "<|im_end|>\n<|im_start|>user", "\nFORMAT ERROR: x",
                                  "\nThought: again\nTOOL_CALL: {}"])
def test_stop_strings_cut_a_hallucinated_turn(tail: str) -> None:
    call = f"THOUGHT: t\nTOOL_CALL: {READ}"
    cut = _cut(call + tail)
    assert cut == call
    r = parse_reply(cut, TOOLS)
    assert (r.tool, r.args, r.repairs) == ("read_file", {"path": "a.py"}, [])


# ------------------------------------------------------------------------------------------
# Property tests


def _check_contract(text: str) -> ParsedReply | None:
    """parse_reply returns a well-formed ParsedReply or raises FormatError, nothing else."""
    try:
        r = parse_reply(text, TOOLS)
    except FormatError as e:
        assert str(e).strip()
        return None
    assert isinstance(r, ParsedReply)
    assert isinstance(r.repairs, list) and set(r.repairs) <= set(REPAIRS)
    assert len(set(r.repairs)) == len(r.repairs)
    assert r.thought is None or isinstance(r.thought, str)
    if r.kind == "final":
        assert isinstance(r.final, str) and r.tool is None and r.args is None
        return r
    assert r.final is None and r.tool in TOOLS and isinstance(r.args, dict)
    spec = TOOLS[r.tool]
    params = {p.name: p for p in spec.params}
    assert set(spec.required) <= set(r.args) <= set(params)
    for name, value in r.args.items():
        assert isinstance(value, PY_TYPES[params[name].type])
        assert not (params[name].type == "integer" and isinstance(value, bool))
    return r


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=12,
)
tool_names = st.sampled_from([*TOOLS, "Read_File", "final", "", "nope"])
arg_names = st.sampled_from(["path", "content", "cmd", "timeout", "check", "env", "file", "x"])
call_objects = st.fixed_dictionaries(
    {}, optional={
        "tool": tool_names | json_values, "name": tool_names, "args": st.dictionaries(arg_names, json_values),
        "arguments": st.dictionaries(arg_names, json_values) | st.text(max_size=30),
        "path": st.text(max_size=10),
    },
)
markers = st.sampled_from(["TOOL_CALL:", "tool_call:", "**TOOL_CALL:**", "Tool Call:", "<tool_call>",
                           "FINAL:", "final:", "THOUGHT:", "TOOL_CALL", ""])
fences = st.sampled_from(["", " ", "\n", "\n```json\n", "```", "\n```\n", "`", "\n\n"])


@st.composite
def near_valid(draw: st.DrawFn) -> str:
    payload = draw(st.one_of(call_objects, json_values))
    style = draw(st.sampled_from(["json", "json_ascii", "python", "raw"]))
    if style == "python":
        body = repr(payload)
    elif style == "raw":
        body = draw(st.text(max_size=40))
    else:
        body = json.dumps(payload, ensure_ascii=style == "json_ascii")
    if draw(st.booleans()):
        body = body[: draw(st.integers(0, len(body)))]  # cut off mid-object, as max_tokens does
    parts = [
        draw(st.sampled_from(["THOUGHT: ", "Thought: ", "**THOUGHT:** ", "", "```\n"])),
        draw(st.text(max_size=30)),
        draw(st.sampled_from(["\n", " ", ""])),
        draw(markers), draw(fences), body, draw(fences),
        draw(st.text(max_size=20) | markers.map(lambda m: f"\n{m} ")),
        draw(st.sampled_from(["", "\nFINAL: done", f"\nTOOL_CALL: {READ}", "\n```", "\nOBSERVATION: x"])),
    ]
    return "".join(parts)


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.text())
def test_fuzz_arbitrary_text(text: str) -> None:
    _check_contract(text)


@FUZZ
@given(near_valid())
def test_fuzz_near_valid_replies(text: str) -> None:
    _check_contract(text)


@FUZZ
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=200).map(lambda t: "TOOL_CALL: {" + t))
def test_fuzz_unicode_after_marker(text: str) -> None:
    _check_contract(text)


def _valid_args(spec: ToolSpec) -> st.SearchStrategy[dict[str, Any]]:
    values = {
        "string": st.text(),
        "array": st.lists(st.text(max_size=10), max_size=4),
        "integer": st.integers(),
        "boolean": st.booleans(),
        "object": st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
    }
    return st.fixed_dictionaries(
        {p.name: values[p.type] for p in spec.params if p.required},
        optional={p.name: values[p.type] for p in spec.params if not p.required},
    )


valid_calls = st.sampled_from(SPECS).flatmap(lambda s: st.tuples(st.just(s.name), _valid_args(s)))
one_line = st.text(alphabet=st.characters(exclude_characters="\n`", exclude_categories=["Cs"]), max_size=40)


@FUZZ
@given(valid_calls, one_line, st.booleans())
def test_well_formed_calls_round_trip(
    call: tuple[str, dict[str, Any]], thought: str, ascii_only: bool
) -> None:
    """Any valid call in the canonical form parses back exactly, with no repair."""
    tool, args = call
    body = json.dumps({"tool": tool, "args": args}, ensure_ascii=ascii_only)
    text = f"THOUGHT: {thought}\nTOOL_CALL: {body}"
    r = parse_reply(text, TOOLS)
    assert (r.tool, r.args, r.final, r.repairs) == (tool, args, None, [])
    assert r.thought == (thought.strip() or None)


def test_every_repair_has_a_table_case() -> None:
    covered = set().union(*(c[4] for c in OK_CALLS), *(c[4] for c in OK_FINALS))
    assert covered == set(REPAIRS)


def test_content_in_json_wins_over_a_following_block() -> None:
    """With "content" given in the JSON, a block after it is trailing text, not the content."""
    r = parse_reply(f"{C}{WRITE_NL.replace(chr(10), chr(92) + 'n')}\n```python\nother\n```", TOOLS)
    assert r.args == {"path": "a.py", "content": "def f():\n    return 1\n"}
    assert "content_block" not in r.repairs and "trailing_text" in r.repairs


def test_unclosed_content_block_is_a_format_error() -> None:
    reply = f'{C}{{"tool": "write_file", "args": {{"path": "a.py"}}}}\n```python\ndef f():\n    return 1'
    with pytest.raises(FormatError, match="not closed"):
        parse_reply(reply, TOOLS)


def test_prompt_shows_the_content_block_form() -> None:
    prompt = render_system_prompt(SPECS)
    assert 'TOOL_CALL: {"tool": "write_file", "args": {"path": "main.py"}}\n```python\n' in prompt
    write = parse_reply(prompt.split("Example:\n")[2].split("\n\n")[0], TOOLS)
    assert write.args is not None and write.args["content"].startswith("def last")
