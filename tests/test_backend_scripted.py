"""The scripted backend answers by the request's metadata (task, strategy, turn), never by the prompt text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_harness.backends.loop import complete_all
from agent_harness.backends.scripted import ScriptedBackend
from agent_harness.errors import BackendError, ConfigError
from agent_harness.types import Completion, GenParams, Message, RequestMeta, Task

PARAMS = GenParams(max_tokens=200)
PROMPT: list[Message] = [{"role": "user", "content": "Fix the bug."}]


def _task(tid: str, content: str) -> Task:
    return Task(id=tid, scenario="s", statement="Fix the bug.", files={"a.py": ""},
                oracle=[{"tool": "write_file", "args": {"path": "a.py", "content": content}}])


def test_two_tasks_with_one_statement_get_their_own_oracle() -> None:
    a, b = _task("a", "A = 1\n"), _task("b", "B = 2\n")
    oracle = ScriptedBackend("oracle")
    first = complete_all(oracle, [PROMPT, PROMPT], PARAMS, meta=[RequestMeta(a), RequestMeta(b)])
    assert [json.loads(c.text.split("TOOL_CALL: ")[1])["args"]["content"] for c in first] == ["A = 1\n", "B = 2\n"]
    [done] = complete_all(oracle, [PROMPT], PARAMS, meta=[RequestMeta(a, turn=1)])
    assert "FINAL:" in done.text
    [shot] = complete_all(oracle, [PROMPT], PARAMS, meta=[RequestMeta(b, strategy="single_shot")])
    assert "```python\nB = 2\n" in shot.text


def test_the_oracle_needs_the_task_and_one_meta_per_row() -> None:
    oracle = ScriptedBackend("oracle")
    with pytest.raises(ConfigError, match="names no task"):
        complete_all(oracle, [PROMPT], PARAMS)
    with pytest.raises(ValueError, match="1 conversations, 2 metas"):
        complete_all(oracle, [PROMPT], PARAMS, meta=[RequestMeta(_task("a", "")), RequestMeta(_task("b", ""))])


def test_replay_takes_the_turn_from_the_meta_and_per_task_replies(tmp_path: Path) -> None:
    script = tmp_path / "s.jsonl"
    script.write_text('"shared 0"\n"shared 1"\n{"task": "b", "replies": ["own 0"]}\n')
    replay = ScriptedBackend("replay", script)
    a, b = _task("a", ""), _task("b", "")
    texts = [c.text for c in complete_all(replay, [PROMPT] * 4, PARAMS, meta=[
        RequestMeta(a), RequestMeta(a, turn=1), RequestMeta(b), RequestMeta(b, turn=1)])]
    assert texts == ["shared 0", "shared 1", "own 0", "THOUGHT: I am done.\nFINAL: done"]
    assert complete_all(replay, [PROMPT], PARAMS)[0].text == "shared 0"  # no meta: turn = assistant messages so far


def test_a_request_without_its_task_fails_alone_and_requests_are_batched() -> None:
    """The oracle refuses a request that names no task before it joins a batch: its batch-mates get their
    replies. The replies of one call come from one batch (the run log's mean batch)."""
    import asyncio

    oracle = ScriptedBackend("oracle")
    a, b = _task("a", "A = 1\n"), _task("b", "B = 2\n")

    async def go() -> list[Completion | BaseException]:
        requests = [oracle.complete(PROMPT, PARAMS, RequestMeta(a)), oracle.complete(PROMPT, PARAMS),
                    oracle.complete(PROMPT, PARAMS, RequestMeta(b))]
        return list(await asyncio.gather(*requests, return_exceptions=True))

    first, bad, second = asyncio.run(go())
    assert isinstance(bad, ConfigError)
    assert isinstance(first, Completion) and isinstance(second, Completion)
    assert [json.loads(c.text.split("TOOL_CALL: ")[1])["args"]["content"] for c in (first, second)] == [
        "A = 1\n", "B = 2\n"]
    assert oracle.stats() == {"batches": 1, "mean_batch": 2.0}
    oracle.close()
    with pytest.raises(BackendError, match="closed"):
        complete_all(oracle, [PROMPT], PARAMS, meta=[RequestMeta(a)])
