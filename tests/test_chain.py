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

from agent_harness.scenarios import TaskQuery
from agent_harness.scenarios.humanevalfix import SCENARIO
from agent_harness.strategies.chain import ReflectThenReact
from agent_harness.strategies.react import AgentConfig, Episode
from agent_harness.strategies.reflect import ReflectConfig
from agent_harness.trace import load_traces, validate_trace
from agent_harness.types import Completion, GenParams
from agent_harness.workspace import Workspace

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
    yield ReflectThenReact(TASK, ws, PARAMS, SCENARIO, ReflectConfig(iters=2), AgentConfig())
    ws.cleanup()


def test_a_reflect_pass_ends_the_episode(chain: ReflectThenReact) -> None:
    chain.advance(reply(f"```python\n{FIXED}```"))
    assert chain.exit_reason == "submitted" and chain.phase == "reflect" and chain.turn == 1
    assert [s["type"] for s in chain.steps] == ["attempt", "feedback"]
    assert {s["phase"] for s in chain.steps} == {"reflect"} and SCENARIO.score(TASK, chain.ws, []).passed


def test_after_failed_reflect_the_files_are_back_and_react_asks_what_it_asks_alone(chain: ReflectThenReact) -> None:
    original = TASK.files[TARGET]
    chain.advance(reply(WRONG))
    assert chain.phase == "reflect" and not chain.done
    assert chain.gen_params().temperature == 0.4  # reflect's own schedule
    chain.advance(reply(WRONG))
    assert chain.phase == "react" and not chain.done and chain.turn == 2
    assert (Path(chain.ws.root) / TARGET).read_text() == original  # reflect's version is gone

    handoff = next(s for s in chain.steps if s["type"] == "handoff")
    assert handoff["turn"] == 2 and handoff["phase"] == "react"
    assert "reflect ended (max_steps) after 2" in handoff["text"]
    assert [s["type"] for s in chain.steps[handoff["i"]:]] == ["handoff", "initial_tests"]
    assert [s["i"] for s in chain.steps] == list(range(len(chain.steps)))

    ws = Workspace.create(TASK.files, test_cmd=TASK.test_cmd)  # the same task, react alone
    try:
        alone = Episode(TASK, ws, PARAMS, AgentConfig())
        assert chain.prompt() == alone.prompt()
        assert chain.gen_params() == alone.gen_params()  # same turn-0 seed and temperature as react alone
        assert handoff["system_prompt"] == alone.system_prompt and handoff["task_message"] == alone.user_prompt
    finally:
        ws.cleanup()

    chain.advance(write_fix())
    assert chain.turn == 3 and chain.steps[-1]["type"] == "tool_result" and chain.steps[-1]["turn"] == 3 - 1
    chain.advance(reply("THOUGHT: done.\nFINAL: fixed truncate_number"))
    assert chain.exit_reason == "submitted" and chain.final == "fixed truncate_number"
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
