"""--agent reflect-react: reflect first, then (files put back) the tool agent, on real workspaces and
through the CLI with scripted models."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_harness.sandbox.workspace import Workspace
from agent_harness.scenarios import TaskQuery
from agent_harness.scenarios.humanevalfix import SCENARIO
from agent_harness.strategies.chain import ReflectThenReact
from agent_harness.strategies.react import AgentConfig, Episode
from agent_harness.strategies.reflect import ReflectConfig
from agent_harness.traces.steps import Handoff
from agent_harness.traces.store import load_traces, validate_trace
from agent_harness.types import Completion, Conversation, GenParams, RequestMeta

ROOT = Path(__file__).resolve().parent.parent
TASK = SCENARIO.load_tasks(TaskQuery(task_ids=("Python/2",)))[0]  # truncate_number: return number % 1.0
TARGET = SCENARIO.target_file(TASK)
FIXED = "def truncate_number(number: float) -> float:\n    return number % 1.0\n"
WRONG = "```python\ndef truncate_number(number: float) -> float:\n    return number\n```"
PARAMS = GenParams(max_tokens=384, seed=7)


def reply(text: str) -> Completion:
    return Completion(text=text, prompt_tokens=10, completion_tokens=5, finish_reason="stop", latency_s=0.0)


def write_fix() -> Completion:
    call = {"tool": "write_file", "args": {"path": TARGET, "content": FIXED}}
    return reply(f"THOUGHT: fix it.\nTOOL_CALL: {json.dumps(call)}")


@pytest.fixture
def chain() -> Iterator[ReflectThenReact]:
    ws = Workspace.create(TASK.files, test_cmd=TASK.test_cmd)
    yield ReflectThenReact(TASK, ws, PARAMS, SCENARIO, ReflectConfig(iters=2, draft="chat"), AgentConfig())
    ws.cleanup()


class Replies:
    """The model as a list of replies, answering the chain's requests in order; keeps what each asked
    and what the workspace held when it asked."""

    def __init__(self, chain: ReflectThenReact, *replies: Completion) -> None:
        self.chain, self.replies = chain, list(replies)
        self.asked: list[tuple[Conversation, GenParams, RequestMeta, str]] = []

    def __call__(self, conversation: Conversation, params: GenParams, meta: RequestMeta) -> Completion:
        self.asked.append((conversation, params, meta, (Path(self.chain.ws.root) / TARGET).read_text()))
        return self.replies.pop(0)


def test_a_reflect_pass_ends_the_episode(chain: ReflectThenReact) -> None:
    chain.run(Replies(chain, reply(f"```python\n{FIXED}```")))
    assert chain.exit_reason == "submitted" and chain.phase == "reflect" and chain.turn == 1
    assert [s.type for s in chain.steps] == ["attempt", "feedback"]
    assert {s.phase for s in chain.steps} == {"reflect"} and SCENARIO.score(TASK, chain.ws, []).passed


def test_after_failed_reflect_the_files_are_back_and_react_asks_what_it_asks_alone(chain: ReflectThenReact) -> None:
    original = TASK.files[TARGET]
    done = reply("THOUGHT: done.\nFINAL: fixed truncate_number")
    model = Replies(chain, reply(WRONG), reply(WRONG), write_fix(), done)
    chain.run(model)
    assert chain.exit_reason == "submitted" and chain.final == "fixed truncate_number"
    assert [(m.strategy, m.turn) for _, _, m, _ in model.asked] == [("reflect", 0), ("reflect", 1), ("react", 0),
                                                                   ("react", 1)]
    assert model.asked[1][1].temperature == 0.4  # reflect's own schedule
    first_react, params, _, held = model.asked[2]
    assert held == original  # reflect's version is gone before react asks

    handoff = next(s for s in chain.steps if isinstance(s, Handoff))
    assert handoff.turn == 2 and handoff.phase == "react"
    assert "reflect ended (max_steps) after 2" in handoff.text
    assert [s.type for s in chain.steps[handoff.i:handoff.i + 2]] == ["handoff", "initial_tests"]
    assert [s.i for s in chain.steps] == list(range(len(chain.steps)))
    assert [s.phase for s in chain.steps] == ["reflect"] * handoff.i + ["react"] * (len(chain.steps) - handoff.i)

    ws = Workspace.create(TASK.files, test_cmd=TASK.test_cmd)  # the same task, react alone
    try:
        alone = Episode(TASK, ws, PARAMS, AgentConfig())
        alone.begin()
        assert first_react == alone.prompt()
        assert params == alone.gen_params()  # same turn-0 seed and temperature as react alone
        assert handoff.system_prompt == alone.system_prompt and handoff.task_message == alone.user_prompt
    finally:
        ws.cleanup()

    assert chain.turn == 4 and [s for s in chain.steps if s.type == "tool_result"][-1].turn == 2
    assert [s.turn for s in chain.current.steps if s.type == "tool_result"] == [0]  # the phase's own turns
    assert SCENARIO.score(TASK, chain.ws, []).passed
    assert chain.prompt_tokens == 40 and chain.completion_tokens == 20  # both phases counted


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "run_agents.py"), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def test_reflect_react_end_to_end_oracle_and_null(tmp_path: Path) -> None:
    out = tmp_path / "traces"
    r = cli("--models", "oracle,null", "--agent", "reflect-react", "--iters", "2", "--n", "2", "--out", str(out),
            "--no-embed")
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["oracle"]["humanevalfix-reflect_react"]["pass@1"] == 1.0
    assert summary["null"]["humanevalfix-reflect_react"]["pass@1"] == 0.0
    for who in ("oracle", "null"):
        for p in sorted((out / who / "humanevalfix-reflect_react" / "gold").glob("run_*.json")):
            data = json.loads(p.read_text())
            assert validate_trace(data) == [], p
            assert data["agent"]["strategy"] == "reflect_react" and data["agent"]["reflect"]["iters"] == 2
            phases = [s["phase"] for s in data["steps"]]
            if who == "oracle":  # solved by reflect's first attempt
                assert set(phases) == {"reflect"} and data["outcome"]["num_turns"] == 1
            else:  # two empty reflect attempts, then react: FINAL refused once (tests fail), then accepted
                assert phases == sorted(phases, reverse=True) and "react" in phases
                assert [s["type"] for s in data["steps"] if s["type"] in ("handoff", "submit_check", "final")] == \
                    ["handoff", "final", "submit_check", "final"]
                assert data["outcome"]["num_turns"] == 4 and data["outcome"]["exit_reason"] == "submitted"
    frames = load_traces(out)
    assert frames.skipped == [] and set(frames.steps["phase"]) == {"reflect", "react"}


def test_reflect_react_refuses_a_scenario_without_a_function(tmp_path: Path) -> None:
    r = cli("--models", "oracle", "--agent", "reflect-react", "--scenario", "repo_bugfix", "--out",
            str(tmp_path / "t"), "--no-embed")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: scenario 'repo_bugfix' cannot run --agent reflect-react: it has no single function to extract and "
        "test (use --agent react)"]
