"""A worked example episode, shown to the model as earlier chat turns before its real task.

Small models copy what they see: given format examples in the system prompt they recite them,
while a demonstrated episode (read → fix → test → FINAL) is a pattern they follow. The demo's
observations are produced by running its calls through the real tools in a scratch workspace,
so they look exactly like the ones the model will get.
"""

from __future__ import annotations

import json
from functools import cache

from .protocol import format_observation, next_step
from .types import Message

DEMO_FILE = "last.py"
DEMO_TEST = "test_last.py"
BUGGY = "def last(items):\n    return items[len(items)]\n"
FIXED = "def last(items):\n    return items[len(items) - 1]\n"
TESTS = "from last import last\n\nassert last([1, 2, 3]) == 3\nassert last(['a']) == 'a'\nprint('All tests passed.')\n"
STATEMENT = (f"Example task: the function `last` in `{DEMO_FILE}` has a bug. The tests in `{DEMO_TEST}` show "
             f"the expected behaviour. Read `{DEMO_FILE}`, fix the bug, and run the tests.")


def _call(thought: str, tool: str, args: dict[str, str], block: str | None = None) -> str:
    text = f"THOUGHT: {thought}\nTOOL_CALL: {json.dumps({'tool': tool, 'args': args})}"
    return text + (f"\n```python\n{block}```" if block is not None else "")


@cache
def demo_messages(tool_names: tuple[str, ...], reminder: bool, native: bool = False,
                  submit: bool = False) -> tuple[Message, ...]:
    """The demo turns for an agent with these tools (run_tests, else run_cmd, runs the tests); `native`: in
    the native tool protocol (the calls as the template's tool calls, the results as tool messages);
    `submit`: tool_choice required, every reply a bare call (as the prefill makes them) and submit finishes."""
    from .history import native_call
    from .tools import ToolOptions, run_tool
    from .workspace import Workspace

    test_cmd = ["python3", DEMO_TEST]
    test_call = ("run_tests", {}) if "run_tests" in tool_names else ("run_cmd", {"cmd": " ".join(test_cmd)})
    steps = [
        ("I read the code first.", "read_file", {"path": DEMO_FILE}),
        ("items[len(items)] is past the end; the last item is at len(items) - 1.", "write_file",
         {"path": DEMO_FILE, "content": FIXED}),
        ("I check the fix.", *test_call),
    ]
    messages: list[Message] = [{"role": "user", "content": STATEMENT}]
    ws = Workspace.create({DEMO_FILE: BUGGY, DEMO_TEST: TESTS}, test_cmd=test_cmd)
    try:
        for n, (thought, tool, args) in enumerate(steps):
            result = run_tool(ws, tool, args, ToolOptions())
            hint = next_step(tool, result.tests_passed, native, submit) if reminder else None
            if native:
                call_id = f"demo_{n}"
                messages.append({"role": "assistant", "content": "" if submit else thought,
                                 "tool_calls": [native_call(call_id, tool, args)]})
                messages.append({"role": "tool", "tool_call_id": call_id,
                                 "content": format_observation(result.text, hint, header=False)})
                continue
            block = args.get("content")
            shown = {k: v for k, v in args.items() if k != "content"}
            messages.append({"role": "assistant", "content": _call(thought, tool, shown, block)})
            messages.append({"role": "user", "content": format_observation(result.text, hint)})
    finally:
        ws.cleanup()
    summary = "last() returns the last item."
    if submit:
        messages.append({"role": "assistant", "content": "",
                         "tool_calls": [native_call(f"demo_{len(steps)}", "submit", {"summary": summary})]})
        return tuple(messages)
    final = f"The tests pass: {summary}" if native else f"THOUGHT: The tests pass.\nFINAL: {summary}"
    messages.append({"role": "assistant", "content": final})
    return tuple(messages)
