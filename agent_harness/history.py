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

The trace keeps every step whole; the first step of each turn lists the elisions that turn's
prompt added (`elided`), so `rebuild_prompt` can recreate every prompt from the trace.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import FormatError
from .protocol import REMINDER, format_error, format_observation, next_step
from .tools import ToolResult, file_bytes
from .types import Conversation, Message
from .workspace import Workspace

Step = Mapping[str, Any]

STALE_HINT = "Writing it again will not help: find what is wrong and write a different version."
STALE_TEMPERATURE_STEP = 0.2  # added for each further stale write
STALE_TEMPERATURE_MAX = 1.0  # the registry allows up to 2.0; above 1.0 small models write noise


# --------------------------------------------------------------------------------------------
# Facts recorded on steps


def content_sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]


def test_record(result: ToolResult) -> dict[str, Any] | None:
    """The `tests` field of a test run's step: {"passed", "at"}; None when the tests did not run."""
    if result.tests_passed is None:
        return None
    return {"passed": result.tests_passed, "at": None if result.tests_passed else result.failing_check}


def _records(steps: Sequence[Step], kind: str) -> list[tuple[Step, dict[str, Any]]]:
    """(step, record) of every step carrying `kind` ("file" on write_file results, or "tests")."""
    return [(s, s[kind]) for s in steps if isinstance(s.get(kind), dict)
            and (kind != "file" or s.get("tool") == "write_file")]


def _changes(steps: Sequence[Step], path: str | None = None) -> list[int]:
    """Positions (step `i`) of the writes that changed `path` (any file when None), and of restarts,
    which put every file back as given."""
    writes = [s["i"] for s, f in _records(steps, "file") if f["changed"] and (path is None or f["path"] == path)]
    return sorted(writes + [s["i"] for s in steps if s["type"] == "restart"])


def _last_test(steps: Sequence[Step], after: int, before: float) -> dict[str, Any] | None:
    return next((r for s, r in reversed(_records(steps, "tests")) if after < s["i"] < before), None)


def version_outcome(steps: Sequence[Step], at: int, path: str) -> dict[str, Any] | None:
    """The last test result while the version of `path` written at step `at` was the file's content."""
    until = next((i for i in _changes(steps, path) if i > at), float("inf"))
    return _last_test(steps, at, until)


def current_outcome(steps: Sequence[Step]) -> dict[str, Any] | None:
    """The last test result since any file last changed (None: not tested since)."""
    return _last_test(steps, max(_changes(steps), default=-1), float("inf"))


def _failed_write(steps: Sequence[Step], rel: str, sha: str) -> Step | None:
    """The latest write that left `rel` as `sha` and whose version then failed the tests."""
    for s, f in reversed(_records(steps, "file")):
        if f["changed"] and f["path"] == rel and f["sha"] == sha:
            outcome = version_outcome(steps, s["i"], rel)
            if outcome is not None and not outcome["passed"]:
                return s
    return None


def write_record(steps: Sequence[Step], rel: str, data: bytes, changed: bool) -> dict[str, Any]:
    """The `file` field of a write_file result: which version of the file the write left (`data`);
    `repeat_of` is the turn of an earlier write of the same version that failed."""
    sha = content_sha(data)
    made = sum(f["changed"] and f["path"] == rel for _, f in _records(steps, "file"))
    attempt = made + 1 if changed else None
    repeated = _failed_write(steps, rel, sha) if changed else None
    return {"path": rel, "sha": sha, "changed": changed, "attempt": attempt,
            "repeat_of": None if repeated is None else repeated["turn"]}


def is_stale(record: Mapping[str, Any]) -> bool:
    return not record["changed"] or record["repeat_of"] is not None


def stale_observation(steps: Sequence[Step], record: Mapping[str, Any], obs: str) -> str:
    """`obs` of a stale write, told what it is. Turn numbers count from 1, as a reader would."""
    if not record["changed"]:
        outcome = current_outcome(steps)
        tests = "" if outcome is None else "; the tests pass" if outcome["passed"] else \
            f"; the tests still fail at {outcome['at']}"
        return f"No change: the content is identical to the file{tests}."
    earlier = _failed_write(steps, record["path"], record["sha"])
    outcome = (version_outcome(steps, earlier["i"], record["path"]) if earlier else None) or {"at": "?"}
    return f"{obs}\nYou tried this exact version at turn {record['repeat_of'] + 1}; it failed at {outcome['at']}."


def stale_temperature(steps: Sequence[Step], start: float) -> float:
    """While the latest write is stale: `start`, plus a step for each stale write of the episode."""
    writes = [f for _, f in _records(steps, "file")]
    if not writes or not is_stale(writes[-1]):
        return 0.0
    repeats = sum(map(is_stale, writes))
    return round(min(STALE_TEMPERATURE_MAX, start + STALE_TEMPERATURE_STEP * (repeats - 1)), 3)


def stale_run(steps: Sequence[Step]) -> int:
    """Stale writes since the last write that changed a file to a new version (0 while the tests pass)."""
    run = 0
    for _, f in _records(steps, "file"):
        run = run + 1 if is_stale(f) else 0
    return 0 if (current_outcome(steps) or {}).get("passed") else run


def tool_facts(ws: Workspace, steps: Sequence[Step], tool: str | None, args: Mapping[str, Any],
               result: ToolResult, notes: bool) -> tuple[str, dict[str, Any]]:
    """What a tool result establishes, as fields of its step (`file`: the version a read showed or a
    write left; `tests`: a test result), and its text told when the write was stale (with `notes`).
    The file facts come from the workspace as it is now: code the tests ran may have changed it."""
    obs = result.text
    if tool == "run_tests":
        status = test_record(result)
        return obs, {"tests": status} if status else {}
    found = file_bytes(ws, args.get("path")) if tool in ("read_file", "write_file") else None
    if found is None or result.error is not None:
        return obs, {}
    rel, data = found
    if tool == "read_file":
        return obs, {"file": {"path": rel, "sha": content_sha(data)}}
    content = args.get("content")
    if not isinstance(content, str) or data != content.encode("utf-8", "replace") or result.changed is None:
        return obs, {}  # the write did not happen
    record = write_record(steps, rel, data, result.changed)
    if not (notes and is_stale(record)):
        return obs, {"file": record}
    passing = not record["changed"] and (current_outcome(steps) or {}).get("passed")
    return stale_observation(steps, record, obs), {"file": record, **({} if passing else {"stale": True})}


# --------------------------------------------------------------------------------------------
# Messages


def user_message(step: Step, format_reminder: bool) -> Message:
    """The user message after a turn's reply, from the step that ends the turn (its tool result,
    submit check or parse error). The agent and `rebuild_prompt` both build it here."""
    if step["type"] == "parse_error":
        return {"role": "user", "content": format_error(FormatError(step["text"]))}
    text = f"{step['note']}\n\n{step['text']}" if step.get("note") else step["text"]
    reminder = None
    if format_reminder:
        passed = (step.get("tests") or {}).get("passed")
        reminder = f"{STALE_HINT} {REMINDER}" if step.get("stale") else next_step(step.get("tool"), passed)
    return {"role": "user", "content": format_observation(text, reminder)}


def _summary(outcome: Mapping[str, Any] | None) -> str:
    if outcome is None:
        return "not tested"
    return "tests passed" if outcome["passed"] else f"tests failed at {outcome['at']}"


def _write_stub(turn_steps: Sequence[Step], note: str) -> str:
    """A write_file reply without its content: the thought and the call stay, so the format does."""
    thought = next((s["text"] for s in turn_steps if s["type"] == "thought"), None)
    call = next(s for s in turn_steps if s["type"] == "tool_call")
    head = f"THOUGHT: {thought}\n" if thought else ""
    return f"{head}TOOL_CALL: {json.dumps({'tool': 'write_file', 'args': {'path': call['args']['path']}})}\n[{note}]"


def _attempt_before(steps: Sequence[Step], at: int) -> str:
    made = [f for s, f in _records(steps, "file") if f["changed"] and s["i"] < at]
    return f"attempt {made[-1]['attempt']} of {made[-1]['path']}" if made else "the files as given"


def elisions(steps: Sequence[Step]) -> dict[tuple[int, str], str]:
    """(turn, role) -> the text that replaces that message in the condensed conversation."""
    by_turn: dict[int, list[Step]] = {}
    for s in steps:
        by_turn.setdefault(s["turn"], []).append(s)
    out: dict[tuple[int, str], str] = {}
    for t, group in by_turn.items():
        end = next((s for s in group if s["type"] in ("tool_result", "submit_check")), None)
        if end is None:
            continue
        f = end.get("file")
        later = [c for c in _changes(steps, f["path"] if f else None) if c > end["i"]]
        if f and end.get("tool") == "read_file" and later:
            out[(t, "user")] = format_observation(f"[read of {f['path']}, since rewritten]")
        elif f and end.get("tool") == "write_file" and later:
            if not f["changed"]:  # its note, one line, stays
                out[(t, "assistant")] = _write_stub(group, "content elided: it was identical to the file")
                continue
            name = f"attempt {f['attempt']} of {f['path']}"
            out[(t, "assistant")] = _write_stub(group, f"content of {name} elided")
            out[(t, "user")] = format_observation(f"[{name}: {_summary(version_outcome(steps, end['i'], f['path']))}]")
        elif end.get("tests") and later:
            refused = "FINAL refused; " if end["type"] == "submit_check" else ""
            outcome = end["tests"]
            result = "passed" if outcome["passed"] else f"failed at {outcome['at']}"
            tested = _attempt_before(steps, end["i"])
            out[(t, "user")] = format_observation(f"[{refused}test run of {tested}: {result}]")
    return out


def condense(messages: Conversation, first_turn: int, elided: Mapping[tuple[int, str], str],
             since: int = 0) -> Conversation:
    """`messages` with elided ones replaced; turn t's reply is message first_turn + 2(t - since), its
    result the next (`since`: the turn the conversation began at, later than 0 after a restart)."""
    out = list(messages)
    for (turn, role), text in elided.items():
        if turn < since:
            continue
        i = first_turn + 2 * (turn - since) + (role == "user")
        if i < len(out) and out[i]["role"] == role:
            out[i] = {"role": out[i]["role"], "content": text}
    return out


def rebuild_prompt(trace: Mapping[str, Any], turn: int) -> Conversation:
    """The conversation sent to the model at `turn` (0-based), rebuilt from a trace."""
    prompt, steps = trace["prompt"], trace["steps"]
    reminder = (trace.get("agent") or {}).get("format_reminder", True)
    messages: Conversation = [{"role": "system", "content": prompt["system"]}, *prompt.get("demo", []),
                              {"role": "user", "content": prompt["task"]}]
    first_turn, since = len(messages), 0
    elided: dict[tuple[int, str], str] = {}
    for t in range(turn + 1):
        group = [s for s in steps if s["turn"] == t]
        if any(s["type"] == "restart" for s in group):  # the conversation began again at this turn
            messages, since = messages[:first_turn], t
        if t == turn:
            break
        messages.append({"role": "assistant", "content": next(s["raw"] for s in group if "raw" in s)})
        end = next((s for s in group if s["type"] in ("tool_result", "submit_check", "parse_error")), None)
        if end is not None:
            messages.append(user_message(end, reminder))
    for s in steps:
        if s["turn"] <= turn:
            elided.update({(e["turn"], e["role"]): e["text"] for e in s.get("elided", [])})
    return condense(messages, first_turn, elided, since)
