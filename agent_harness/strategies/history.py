"""What the model sees of its own history: stale file versions named, stale steps condensed.

Small models copy their own earlier replies: with a failed version of a file in the context they
write it again, and again. Two helpers work from the episode's steps:

- Stale notes. Each write_file result records the file version it left (`file` on the step); a
  write that changes nothing, or that brings back a version the tests already failed, is told so
  (`stale_observation`), and the following turns sample warmer (`stale_temperature`).
- Condensed history (`elisions`, `condense`). Steps that a later change of a file made stale are
  shown as one line: a read of a file since rewritten, a rewritten attempt and its test run. The
  latest version of each file stays whole, and so does a write that changed nothing until the file
  changes: as the last reply, a stub in its place was copied verbatim by the 0.5B (smoke run).

Prefix caching: an elision changes an earlier message, so the prompt after it is computed anew.
Elisions happen only when a file changes, so between two changes the prompt only grows and the
cache holds; SWE-agent's LastNObservations moves its window every turn (its `polling` option exists
to soften that) and OpenHands' observation masking likewise, which would miss the cache at every turn.

The conversation is kept by turn (`Exchange`: a reply and the message that answered it), so an elision,
keyed by (turn, role), finds its message without counting positions. The trace keeps every step whole;
the first step of each turn lists the elisions that turn's prompt added (`elided`), so `rebuild_prompt`
can recreate every prompt from the trace.
"""

from __future__ import annotations

import hashlib
import json
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..errors import FormatError
from ..protocol import EXPECTED_FORM, format_error, format_observation, next_step
from ..protocol.native import CALL_PREFILL, expected_form
from ..protocol.prompt import reminder_for
from ..sandbox.workspace import Workspace
from ..tools import ToolResult as ToolOutput
from ..tools import file_bytes
from ..traces.steps import (
    FileVersion,
    Final,
    InitialTests,
    ParseError,
    Restart,
    Role,
    Step,
    SubmitCheck,
    TestsResult,
    Thought,
    ToolCall,
    ToolResult,
    parse_steps,
)
from ..types import Conversation, Message, NativeCallDict

STALE_HINT = "Writing it again will not help: find what is wrong and write a different version."
STALE_TEMPERATURE_STEP = 0.2  # added for each further stale write
STALE_TEMPERATURE_MAX = 1.0  # the registry allows up to 2.0; above 1.0 small models write noise

Answer = ToolResult | SubmitCheck | ParseError  # the steps whose user message answers a reply
Opens = Thought | Final | ToolCall | ParseError  # the step types that may carry the reply's record
Elisions = dict[tuple[int, Role], str]  # (turn, role) -> the text shown instead of that message


# --------------------------------------------------------------------------------------------
# Facts recorded on steps


def content_sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]


def test_record(result: ToolOutput) -> TestsResult | None:
    """The `tests` field of a test run's step: {"passed", "at"}; None when the tests did not run."""
    if result.tests_passed is None:
        return None
    return {"passed": result.tests_passed, "at": None if result.tests_passed else result.failing_check}


class _Ledger:
    """What a run of steps established, indexed once (each helper below reads it in O(log n)): the file
    versions written, the test results and the restarts, which put every file back as given."""

    def __init__(self, steps: Sequence[Step]) -> None:
        self.writes = [(s, s.file) for s in steps
                       if isinstance(s, ToolResult) and s.file is not None and s.tool == "write_file"]
        tested = [(s.i, s.tests) for s in steps
                  if isinstance(s, ToolResult | SubmitCheck | InitialTests) and s.tests is not None]
        self._tested_at, self._tests = [i for i, _ in tested], [r for _, r in tested]
        self._made = [(s.i, f) for s, f in self.writes if f["changed"]]  # the writes that changed a file
        self._made_at = [i for i, _ in self._made]
        restarts = [s.i for s in steps if isinstance(s, Restart)]
        self._changes: dict[str | None, list[int]] = {None: sorted(self._made_at + restarts)}
        for path in {f["path"] for _, f in self._made}:
            self._changes[path] = sorted([i for i, f in self._made if f["path"] == path] + restarts)
        self._restarts = restarts

    def next_change(self, after: int, path: str | None = None) -> int | None:
        """The position (step `i`) of the first change of `path` (any file when None) after `after`."""
        changes = self._changes.get(path, self._restarts)
        k = bisect_right(changes, after)
        return changes[k] if k < len(changes) else None

    def last_test(self, after: int, before: float) -> TestsResult | None:
        """The last test result between two positions (both excluded)."""
        k = bisect_left(self._tested_at, before)
        return self._tests[k - 1] if k and self._tested_at[k - 1] > after else None

    def version_outcome(self, at: int, path: str) -> TestsResult | None:
        """The last test result while the version of `path` written at step `at` was the file's content."""
        until = self.next_change(at, path)
        return self.last_test(at, float("inf") if until is None else until)

    def current_outcome(self) -> TestsResult | None:
        """The last test result since any file last changed (None: not tested since)."""
        changes = self._changes[None]
        return self.last_test(changes[-1] if changes else -1, float("inf"))

    def passing(self) -> bool:
        outcome = self.current_outcome()
        return outcome is not None and bool(outcome["passed"])

    def failed_write(self, rel: str, sha: str) -> ToolResult | None:
        """The latest write that left `rel` as `sha` and whose version then failed the tests."""
        for s, f in reversed(self.writes):
            if f["changed"] and f["path"] == rel and f["sha"] == sha:
                outcome = self.version_outcome(s.i, rel)
                if outcome is not None and not outcome["passed"]:
                    return s
        return None

    def made(self, rel: str) -> int:
        """How many writes changed `rel`."""
        return sum(f["path"] == rel for _, f in self._made)

    def made_before(self, at: int) -> FileVersion | None:
        """The last write that changed a file before position `at`."""
        k = bisect_left(self._made_at, at)
        return self._made[k - 1][1] if k else None


def write_record(ledger: _Ledger, rel: str, data: bytes, changed: bool) -> FileVersion:
    """The `file` field of a write_file result: which version of the file the write left (`data`);
    `repeat_of` is the turn of an earlier write of the same version that failed."""
    sha = content_sha(data)
    repeated = ledger.failed_write(rel, sha) if changed else None
    return {"path": rel, "sha": sha, "changed": changed, "attempt": ledger.made(rel) + 1 if changed else None,
            "repeat_of": None if repeated is None else repeated.turn}


def is_stale(record: FileVersion) -> bool:
    return not record["changed"] or record["repeat_of"] is not None


def stale_observation(ledger: _Ledger, record: FileVersion, obs: str) -> str:
    """`obs` of a stale write, told what it is. Turn numbers count from 1, as a reader would."""
    if not record["changed"]:
        outcome = ledger.current_outcome()
        tests = "" if outcome is None else "; the tests pass" if outcome["passed"] else \
            f"; the tests still fail at {outcome['at']}"
        return f"No change: the content is identical to the file{tests}."
    earlier = ledger.failed_write(record["path"], record["sha"])
    outcome = ledger.version_outcome(earlier.i, record["path"]) if earlier else None
    at = "?" if outcome is None else outcome["at"]
    return f"{obs}\nYou tried this exact version at turn {(record['repeat_of'] or 0) + 1}; it failed at {at}."


def stale_temperature(steps: Sequence[Step], start: float) -> float:
    """While the latest write is stale: `start`, plus a step for each stale write of the episode."""
    writes = [f for _, f in _Ledger(steps).writes]
    if not writes or not is_stale(writes[-1]):
        return 0.0
    repeats = sum(map(is_stale, writes))
    return round(min(STALE_TEMPERATURE_MAX, start + STALE_TEMPERATURE_STEP * (repeats - 1)), 3)


def stale_run(steps: Sequence[Step]) -> int:
    """Stale writes since the last write that changed a file to a new version (0 while the tests pass)."""
    ledger, run = _Ledger(steps), 0
    for _, f in ledger.writes:
        run = run + 1 if is_stale(f) else 0
    return 0 if ledger.passing() else run


class Facts(NamedTuple):
    """What a tool result establishes: the observation as shown, and the fields of its step (None: absent)."""

    text: str
    file: FileVersion | None = None
    tests: TestsResult | None = None
    stale: bool | None = None


def tool_facts(ws: Workspace, steps: Sequence[Step], tool: str | None, args: Mapping[str, Any],
               result: ToolOutput, notes: bool) -> Facts:
    """What a tool result establishes (`file`: the version a read showed or a write left; `tests`: a test
    result), and its text told when the write was stale (with `notes`). The file facts come from the
    workspace as it is now: code the tests ran may have changed it."""
    obs = result.text
    if tool == "run_tests":
        return Facts(obs, tests=test_record(result))
    found = file_bytes(ws, args.get("path")) if tool in ("read_file", "write_file") else None
    if found is None or result.error is not None:
        return Facts(obs)
    rel, data = found
    if tool == "read_file":
        return Facts(obs, file={"path": rel, "sha": content_sha(data)})
    content = args.get("content")
    if not isinstance(content, str) or data != content.encode("utf-8", "replace") or result.changed is None:
        return Facts(obs)  # the write did not happen
    ledger = _Ledger(steps)
    record = write_record(ledger, rel, data, result.changed)
    tests = test_record(result)  # a write that ran the tests too (search's tests_on_write)
    if not (notes and is_stale(record)):
        return Facts(obs, file=record, tests=tests)
    passing = not record["changed"] and ledger.passing()
    return Facts(stale_observation(ledger, record, obs), file=record, tests=tests, stale=None if passing else True)


# --------------------------------------------------------------------------------------------
# Messages


def user_message(step: Answer, format_reminder: bool, native: bool = False, submit: bool = False) -> Message:
    """The message after a turn's reply, from the step that ends the turn (its tool result, submit check
    or parse error). The agent and `rebuild_prompt` both build it here. `native`: the native protocol's
    words, and a tool result is a `tool` message answering its call; `submit`: tool_choice required."""
    if isinstance(step, ParseError):
        expected = expected_form(submit) if native else EXPECTED_FORM
        return {"role": "user", "content": format_error(FormatError(step.text), expected)}
    note = step.note if isinstance(step, SubmitCheck) else None
    text = f"{note}\n\n{step.text}" if note else step.text
    reminder = None
    if format_reminder:
        passed = step.tests["passed"] if step.tests else None
        stale = isinstance(step, ToolResult) and step.stale
        reminder = (f"{STALE_HINT} {reminder_for(native, submit)}" if stale
                    else next_step(step.tool, passed, native, submit))
    if native and isinstance(step, ToolResult) and step.call_id is not None:
        return {"role": "tool", "tool_call_id": step.call_id, "content": format_observation(text, reminder, False)}
    return {"role": "user", "content": format_observation(text, reminder)}


def native_call(call_id: str, tool: str, args: Mapping[str, Any]) -> NativeCallDict:
    """A tool call as an assistant message carries it (native protocol; arguments as the template takes them)."""
    return {"id": call_id, "type": "function", "function": {"name": tool, "arguments": dict(args)}}


@dataclass
class Exchange:
    """One turn of the conversation: the model's reply and the message that answered it (None: the
    episode ended on that reply). Native protocol: `reply` is the text beside the call, `calls` the call."""

    turn: int
    reply: str
    answer: Message | None = None
    calls: list[NativeCallDict] | None = None

    def messages(self, elided: Mapping[tuple[int, Role], str]) -> list[Message]:
        """The turn's messages, each shown as `elided` condenses it (by this turn and the role)."""
        said: Message = {"role": "assistant", "content": elided.get((self.turn, "assistant"), self.reply)}
        if self.calls:
            said["tool_calls"] = self.calls
        out = [said]
        if self.answer is not None:
            text = elided.get((self.turn, "user"))
            out.append(self.answer if text is None else {"role": "user", "content": text})
        return out


def conversation(head: Conversation, exchanges: Sequence[Exchange],
                 elided: Mapping[tuple[int, Role], str] | None = None) -> Conversation:
    """The prompt: `head` (system, demo, task), then each turn's messages, condensed as `elided` says."""
    return [*head, *(m for x in exchanges for m in x.messages(elided or {}))]


def _summary(outcome: TestsResult | None) -> str:
    if outcome is None:
        return "not tested"
    return "tests passed" if outcome["passed"] else f"tests failed at {outcome['at']}"


def _write_stub(turn_steps: Sequence[Step], note: str) -> str:
    """A write_file reply without its content: the thought and the call stay, so the format does."""
    thought = next((s.text for s in turn_steps if isinstance(s, Thought)), None)
    call = next(s for s in turn_steps if isinstance(s, ToolCall))
    head = f"THOUGHT: {thought}\n" if thought else ""
    path = (call.args or {})["path"]
    return f"{head}TOOL_CALL: {json.dumps({'tool': 'write_file', 'args': {'path': path}})}\n[{note}]"


def elisions(steps: Sequence[Step]) -> Elisions:
    """(turn, role) -> the text that replaces that message in the condensed conversation."""
    ledger = _Ledger(steps)
    by_turn: dict[int, list[Step]] = {}
    for s in steps:
        by_turn.setdefault(s.turn, []).append(s)
    out: Elisions = {}
    for t, group in by_turn.items():
        end = next((s for s in group if isinstance(s, ToolResult | SubmitCheck)), None)
        if end is None:
            continue
        f = end.file if isinstance(end, ToolResult) else None
        later = ledger.next_change(end.i, f["path"] if f else None) is not None
        if f and end.tool == "read_file" and later:
            out[(t, "user")] = format_observation(f"[read of {f['path']}, since rewritten]")
        elif f and end.tool == "write_file" and later:
            if not f["changed"]:  # its note, one line, stays
                out[(t, "assistant")] = _write_stub(group, "content elided: it was identical to the file")
                continue
            name = f"attempt {f['attempt']} of {f['path']}"
            out[(t, "assistant")] = _write_stub(group, f"content of {name} elided")
            out[(t, "user")] = format_observation(f"[{name}: {_summary(ledger.version_outcome(end.i, f['path']))}]")
        elif end.tests and later:
            refused = "FINAL refused; " if isinstance(end, SubmitCheck) else ""
            result = "passed" if end.tests["passed"] else f"failed at {end.tests['at']}"
            made = ledger.made_before(end.i)
            tested = "the files as given" if made is None else f"attempt {made['attempt']} of {made['path']}"
            out[(t, "user")] = format_observation(f"[{refused}test run of {tested}: {result}]")
    return out


def rebuild_prompt(trace: Mapping[str, Any], turn: int) -> Conversation:
    """The conversation sent to the model at `turn` (0-based), rebuilt from a trace."""
    from .config import AgentConfig  # the strategies build on this module

    prompt, steps = trace["prompt"], parse_steps(trace["steps"])
    agent = AgentConfig.from_dump(trace.get("agent") or {})
    reminder, native, submit = agent.format_reminder, agent.protocol == "native", agent.forced_calls
    head: Conversation = [{"role": "system", "content": prompt["system"]}, *prompt.get("demo", []),
                          {"role": "user", "content": prompt["task"]}]
    exchanges: list[Exchange] = []
    for t in range(turn + 1):
        group = [s for s in steps if s.turn == t]
        if any(isinstance(s, Restart) for s in group):  # the conversation began again at this turn
            exchanges = []
        if t == turn:
            break
        raw = next((s.raw for s in group if isinstance(s, Opens) and s.raw is not None), None)
        if raw is None:
            raise ValueError(f"turn {t} of the trace has no reply to rebuild the prompt from")
        end = next((s for s in group if isinstance(s, Answer)), None)
        answer = None if end is None else user_message(end, reminder, native, submit)
        call = next((s for s in group if isinstance(s, ToolCall)), None)
        if native and call is not None and call.call_id and call.tool:  # the call as the model was shown it
            thought = next((s.text for s in group if isinstance(s, Thought)), "")
            exchanges.append(Exchange(t, thought, answer, [native_call(call.call_id, call.tool, call.args or {})]))
        else:
            exchanges.append(Exchange(t, raw, answer))
    elided: Elisions = {}
    for s in steps:
        if s.turn <= turn and isinstance(s, Opens) and s.elided:
            elided.update({(e["turn"], e["role"]): e["text"] for e in s.elided})
    sent = conversation(head, exchanges, elided)
    return [*sent, {"role": "assistant", "content": CALL_PREFILL}] if submit else sent
