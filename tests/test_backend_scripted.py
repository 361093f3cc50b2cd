"""The scripted backend answers by the request's metadata (task, strategy, turn), never by the prompt text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_harness.backends.scripted import ScriptedBackend
from agent_harness.errors import ConfigError
from agent_harness.types import GenParams, Message, RequestMeta, Task

PARAMS = GenParams(max_tokens=200)
PROMPT: list[Message] = [{"role": "user", "content": "Fix the bug."}]


def _task(tid: str, content: str) -> Task:
    return Task(id=tid, scenario="s", statement="Fix the bug.", files={"a.py": ""},
                oracle=[{"tool": "write_file", "args": {"path": "a.py", "content": content}}])


def test_two_tasks_with_one_statement_get_their_own_oracle() -> None:
    a, b = _task("a", "A = 1\n"), _task("b", "B = 2\n")
    oracle = ScriptedBackend("oracle")
    first = oracle.generate([PROMPT, PROMPT], PARAMS, meta=[RequestMeta(a), RequestMeta(b)])
    assert [json.loads(c.text.split("TOOL_CALL: ")[1])["args"]["content"] for c in first] == ["A = 1\n", "B = 2\n"]
    [done] = oracle.generate([PROMPT], PARAMS, meta=[RequestMeta(a, turn=1)])
    assert "FINAL:" in done.text
    [shot] = oracle.generate([PROMPT], PARAMS, meta=[RequestMeta(b, strategy="single_shot")])
    assert "```python\nB = 2\n" in shot.text


def test_the_oracle_needs_the_task_and_one_meta_per_row() -> None:
    oracle = ScriptedBackend("oracle")
    with pytest.raises(ConfigError, match="names no task"):
        oracle.generate([PROMPT], PARAMS)
    with pytest.raises(ValueError, match="2 request metas for 1"):
        oracle.generate([PROMPT], PARAMS, meta=[RequestMeta(_task("a", "")), RequestMeta(_task("b", ""))])


def test_replay_takes_the_turn_from_the_meta_and_per_task_replies(tmp_path: Path) -> None:
    script = tmp_path / "s.jsonl"
    script.write_text('"shared 0"\n"shared 1"\n{"task": "b", "replies": ["own 0"]}\n')
    replay = ScriptedBackend("replay", script)
    a, b = _task("a", ""), _task("b", "")
    texts = [c.text for c in replay.generate([PROMPT] * 4, PARAMS, meta=[
        RequestMeta(a), RequestMeta(a, turn=1), RequestMeta(b), RequestMeta(b, turn=1)])]
    assert texts == ["shared 0", "shared 1", "own 0", "THOUGHT: I am done.\nFINAL: done"]
    assert replay.generate([PROMPT], PARAMS)[0].text == "shared 0"  # no meta: turn = assistant messages so far
