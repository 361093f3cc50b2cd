"""The protocol's texts: the system prompt (rendered from the tool specs), the stop strings, how an
observation or a format error is shown, and the reminder of the usual next step."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import FormatError
from ..text import safe_text
from ..tools.output import truncate
from ..types import ToolParam, ToolSpec

if TYPE_CHECKING:
    from ..tools.result import ToolResult

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

# The native protocol's: the chat template's turn markers, and a tool response the model starts to imagine.
NATIVE_STOP_STRINGS: tuple[str, ...] = tuple(s for s in STOP_STRINGS if not s.startswith("\n"))

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


# The bash-only action space (AgentConfig.action_space "bash"): the shell is the only tool, as in mini-swe-agent.
SHELL_RULES = [
    "run_cmd is your only tool: cat FILE to read a file, sed -i 's/OLD/NEW/' FILE to change a line, "
    "cat > FILE <<'EOF' (the whole file, then EOF) to rewrite it, python3 TEST_FILE to run the tests.",
    "Run the tests before FINAL.",
]


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
    if "edit_file" in names:
        rules.append('edit_file changes one piece of a file: "old" is the exact text to replace, copied from the '
                     'file (indentation included) and found once; "new" is what goes in its place.')
    if names == {"run_cmd"}:
        rules += SHELL_RULES
    if block_tool is not None:
        rules.append(f'For {block_tool.name}, leave "content" out of the JSON and put the text in a ``` block '
                     "right after the TOOL_CALL line.")
    if "run_tests" in names:
        rules.append("Run run_tests before FINAL.")
    if not tools:
        rules = ["No tools are available: reply with FINAL."]
    lines += ["", "Rules:", *(f"- {r}" for r in rules)]
    return "\n".join(lines)


INITIAL_TEST_CHARS = 1000
REMINDER = "Reply with THOUGHT: then one TOOL_CALL: (or FINAL: when the task is done)."
# What a coding agent usually does next, by the tool it just used: small models that read a file
# and are not told what comes next tend to read it again, forever.
NEXT_STEP = {
    "read_file": "If you see the bug, fix it with write_file (the whole file in a ``` block); "
                 "if not, run_tests to see what fails.",
    "write_file": "Now run_tests to check your change.",
    "edit_file": "Now run_tests to check your change.",
    "run_tests": "Fix the failing code with write_file.",
    "run_tests passed": "The tests pass: reply FINAL: with a one-line summary.",
}


# How a native reply finishes: with no call (tool_choice auto), or by calling submit (tool_choice required).
NO_CALL_FINISH = "reply with a one-line summary and no tool call"
SUBMIT_FINISH = "call submit with a one-line summary"

# The native protocol's hints where the text protocol's name its reply format.
NATIVE_NEXT_STEP = {
    **NEXT_STEP,
    "read_file": "If you see the bug, fix it with write_file (the whole file as content); "
                 "if not, run_tests to see what fails.",
    "run_tests passed": f"The tests pass: {NO_CALL_FINISH}.",
}
NATIVE_REMINDER = f"Call one tool, or {NO_CALL_FINISH} when the task is done."
# ... and with tool_choice required, where every reply is a call and the submit tool finishes.
SUBMIT_NEXT_STEP = {**NATIVE_NEXT_STEP, "run_tests passed": f"The tests pass: {SUBMIT_FINISH}."}
SUBMIT_REMINDER = f"Call one tool; when the task is done, {SUBMIT_FINISH}."


def reminder_for(native: bool, submit: bool = False) -> str:
    """The reply format in one line: text protocol, native, or native with the submit tool."""
    return (SUBMIT_REMINDER if submit else NATIVE_REMINDER) if native else REMINDER


def next_step(tool: str | None, tests_passed: bool | None = None, native: bool = False, submit: bool = False) -> str:
    """The reminder shown after an observation: the reply format, plus the usual next step
    (`tests_passed`: the result of the test run the observation shows, None when it shows none;
    `native`: in the native tool protocol's words; `submit`: and the submit tool finishes)."""
    tested = tool == "run_tests" or (tool in ("write_file", "edit_file") and tests_passed is not None)
    key = ("run_tests passed" if tests_passed else "run_tests") if tested else tool
    hints = (SUBMIT_NEXT_STEP if submit else NATIVE_NEXT_STEP) if native else NEXT_STEP
    hint, reminder = hints.get(key or ""), reminder_for(native, submit)
    return f"{hint} {reminder}" if hint else reminder


def initial_file_note(path: str, result: ToolResult) -> str:
    """What the task message adds for a file shown before the first turn (AgentConfig.initial_files)."""
    if result.error is not None:
        return ""
    fence = "```python" if path.endswith(".py") else "```"
    return f"\n\n`{path}` now:\n{fence}\n{result.text.rstrip()}\n```"


def initial_fix_note(paths: Sequence[str]) -> str:
    """The task message's last line after files were shown: with the file in view, the 0.5B ran the
    tests first and then wrote its fix into the test file the test output named (12 of 12 episodes)."""
    if len(paths) == 1:
        return f"\n\nFix `{paths[0]}`: reply with write_file and the whole corrected file."
    return "\n\nFix the bug: reply with write_file and the whole corrected file."


def initial_test_note(result: ToolResult) -> str:
    """What the task message adds when the visible tests ran before the first turn (AgentConfig.initial_tests)."""
    if result.tests_passed:
        return "\n\nThe tests pass now."
    if result.failing_check:
        return f"\n\nThe tests fail now at:\n{result.failing_check}" + "".join(f"\n{v}" for v in result.values)
    return f"\n\nThe tests fail now:\n{truncate(result.text, INITIAL_TEST_CHARS)}"


def format_observation(text: str, reminder: str | None = None, header: bool = True) -> str:
    """How a tool's output is shown to the model (the next user message), with an optional
    reminder (see `next_step`): small models otherwise drift into echoing the observation or
    their own last reply after a few turns. `header=False`: no OBSERVATION: line (native protocol:
    the template wraps a tool message as a tool response)."""
    body = safe_text(text).rstrip() or "(no output)"
    return (f"{OBSERVATION_HEADER}\n{body}" if header else body) + (f"\n\n{reminder}" if reminder else "")


def format_error(err: FormatError, expected: str = EXPECTED_FORM) -> str:
    """The next user message after an unparseable reply: what was wrong and the expected form."""
    msg = safe_text(str(err)).strip() or "Your reply does not follow the format."
    return f"{ERROR_HEADER} {msg}\n{expected}"

