"""--agent best-of-n-search: best-of-n first; when no program passes, the tool agent's search, from the files
as given or (--handoff kept) from best-of-n's best failing program. Real workspaces and the CLI, scripted models."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from test_best_of_n import FIXED, HALF, RUN_SEED, TARGET, TASK, WRONG  # the same task and programs

from agent_harness.sandbox.workspace import Workspace
from agent_harness.scenarios.humanevalfix import SCENARIO
from agent_harness.strategies.asking import Asker, Request
from agent_harness.strategies.best_of_n import BestOfNEpisode
from agent_harness.strategies.chain import Chain
from agent_harness.strategies.config import AgentConfig
from agent_harness.traces.steps import Handoff, InitialTests, SubmitCheck, ToolResult
from agent_harness.types import Completion, GenParams, request_seed

ROOT = Path(__file__).resolve().parent.parent


def reply(text: str) -> Completion:
    return Completion(text=text, prompt_tokens=10, completion_tokens=5, finish_reason="stop", latency_s=0.0)


class Model:
    """best-of-n's programs by candidate; the search's replies by turn (the last one repeated). Keeps each batch
    with what the target file held when it was asked."""

    def __init__(self, ws: Workspace, programs: Sequence[str], turns: Sequence[str]) -> None:
        self.ws, self.programs, self.turns = ws, programs, turns
        self.batches: list[tuple[list[Request], str]] = []

    def many(self, requests: Sequence[Request]) -> list[Completion]:
        self.batches.append((list(requests), (Path(self.ws.root) / TARGET).read_text()))
        out = []
        for _, _, meta in requests:
            said = self.programs if meta.strategy == "best_of_n" else self.turns
            out.append(reply(said[min(meta.candidate if meta.strategy == "best_of_n" else meta.turn,
                                      len(said) - 1)]))
        return out


def write(module: str, path: str = TARGET) -> str:
    call = {"tool": "write_file", "args": {"path": path, "content": module}}
    return f"THOUGHT: fix it.\nTOOL_CALL: {json.dumps(call)}"


@pytest.fixture
def ws() -> Iterator[Workspace]:
    w = Workspace.create(TASK.files, test_cmd=TASK.test_cmd)
    yield w
    w.cleanup()


def chain(ws: Workspace, k: int, **agent: object) -> Chain:
    params = GenParams(max_tokens=384, seed=RUN_SEED)
    first = GenParams(max_tokens=384, seed=request_seed(RUN_SEED, TASK.id, 0, 0))
    config = AgentConfig(candidates=2, max_steps=3, **agent)  # type: ignore[arg-type]
    opening = BestOfNEpisode(TASK, ws, first, SCENARIO, candidates=k, temperature=0.8, run_seed=RUN_SEED)
    return Chain(TASK, ws, params, SCENARIO, None, config, sample=0, search=True, opening=opening)


def fixed_module() -> str:
    return SCENARIO.fix_prompt(TASK).module(FIXED)


def test_a_best_of_n_pass_ends_the_episode_without_the_tool_agent(ws: Workspace) -> None:
    ep = chain(ws, 3)
    model = Model(ws, [WRONG, FIXED], ["never asked"])
    ep.run(Asker(model.many))
    assert len(model.batches) == 1 and ep.exit_reason == "submitted" and ep.phase == "best_of_n"
    assert ep.final == "candidate 1 passes the visible tests"
    assert {s.phase for s in ep.steps} == {"best_of_n"} and SCENARIO.score(TASK, ws, []).passed


def test_with_no_pass_the_search_starts_from_the_files_as_given(ws: Workspace) -> None:
    ep = chain(ws, 2)
    model = Model(ws, [WRONG, HALF], [write(fixed_module())])
    ep.run(Asker(model.many))
    (first, _), (search, held) = model.batches[0], model.batches[1]
    assert [m.strategy for _, _, m in first] == ["best_of_n"] * 2
    assert [m.strategy for _, _, m in search] == ["search"] * 2  # --candidates per search turn, not the opening's
    assert held == TASK.files[TARGET]  # best-of-n's best (HALF) is gone before the search asks
    assert ep.exit_reason == "submitted" and SCENARIO.score(TASK, ws, []).passed
    handoff = next(s for s in ep.steps if isinstance(s, Handoff))
    assert "best-of-n found no program of 2" in handoff.text and "put back as given" in handoff.text
    phases = [s.phase for s in ep.steps]
    assert phases[:3] == ["best_of_n"] * 3 and set(phases[3:]) == {"react"}
    assert ep.turn == 1 + ep.current.turn  # the chain's turns: best-of-n's one, then the search's


def test_kept_hands_over_best_of_ns_best_program_and_the_tests_as_given(ws: Workspace) -> None:
    ep = chain(ws, 2, handoff="kept")
    model = Model(ws, [WRONG, HALF], [write(fixed_module())])
    ep.run(Asker(model.many))
    _, held = model.batches[1]
    assert held.endswith("return 0.5\n")  # the one whose failing check is furthest down
    initial = next(s for s in ep.steps if isinstance(s, InitialTests))
    assert initial.phase == "react" and "kept as it left them" in next(
        s for s in ep.steps if isinstance(s, Handoff)).text
    assert ep.exit_reason == "submitted" and SCENARIO.score(TASK, ws, []).passed
    for rel, text in TASK.files.items():
        if rel != TARGET:
            assert (Path(ws.root) / rel).read_text() == text


def test_kept_keeps_the_tasks_test_files_whatever_the_program_wrote(ws: Workspace) -> None:
    test_file = next(f for f in TASK.files if f != TARGET)
    (Path(ws.root) / test_file).write_text("pass\n")  # as if the first phase had rewritten the tests
    ep = chain(ws, 1, handoff="kept")
    ep.run(Asker(Model(ws, [WRONG], ["THOUGHT: done.\nFINAL: nothing"]).many))
    assert (Path(ws.root) / test_file).read_text() == TASK.files[test_file]
    assert ep.current.task.files[test_file] == TASK.files[test_file]


@pytest.mark.parametrize("protect", [True, False])
def test_the_search_phase_keeps_the_tests_as_given(ws: Workspace, protect: bool) -> None:
    test_file = next(f for f in TASK.files if f != TARGET)
    cheat, final = write("print('fine')\n", test_file), "THOUGHT: done.\nFINAL: fixed"
    ep = chain(ws, 1, protect_tests=protect)
    ep.run(Asker(Model(ws, [WRONG], [cheat, final]).many))
    result = next(s for s in ep.steps if isinstance(s, ToolResult))
    refused = any(isinstance(s, SubmitCheck) for s in ep.steps)  # the FINAL refused: the visible tests fail
    if protect:
        assert result.text.startswith(f"ERROR: {test_file} holds the task's tests") and refused
        assert (Path(ws.root) / test_file).read_text() == TASK.files[test_file]
    else:  # as before the helper: the rewritten tests pass in the workspace and the model submits at once
        assert result.text.startswith(f"Wrote {test_file}") and not refused
    assert ep.exit_reason == "submitted" and not SCENARIO.score(TASK, ws, []).passed


def cli(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "run_agents.py", "--agent", "best-of-n-search", "--n", "2", "--no-embed",
                           "--no-progress", "--out", str(out), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def test_cli_oracle_passes_null_fails_and_the_trace_names_both_phases(tmp_path: Path) -> None:
    r = cli(tmp_path, "--models", "oracle,null", "--candidates", "2", "--opening-candidates", "3",
            "--handoff", "kept")
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["oracle"]["humanevalfix-best_of_n_search"]["pass@1"] == 1.0
    assert summary["null"]["humanevalfix-best_of_n_search"]["pass@1"] == 0.0
    trace = json.loads(next((tmp_path / "null").rglob("run_Python-0__s0.json")).read_text())
    agent = trace["agent"]
    assert agent["strategy"] == "best_of_n_search" and agent["handoff"] == "kept"
    assert agent["opening_candidates"] == 3 and agent["search"]["candidates"] == 2
    assert agent["search"]["best_of_n"]["candidates"] == 3
    phases = [s.get("phase") for s in trace["steps"]]
    assert phases[:4] == ["best_of_n"] * 4 and "react" in phases


def test_opening_candidates_out_of_range_is_one_line(tmp_path: Path) -> None:
    r = cli(tmp_path, "--models", "oracle", "--opening-candidates", "0")
    assert r.returncode == 2 and "--opening-candidates must be between 1" in r.stderr.strip().splitlines()[-1]


def test_kept_takes_no_link_fifo_or_binary_the_first_phase_left(ws: Workspace, tmp_path: Path) -> None:
    """What the first phase left is read without following a link or blocking on a FIFO; such a file, or one
    that is not text, is handed over as given."""
    secret = tmp_path / "secret.py"
    secret.write_text("SECRET = 1\n")
    target = Path(ws.root) / TARGET
    ep = chain(ws, 1, handoff="kept")
    for leave in ("link", "fifo", "binary"):
        target.unlink()
        if leave == "link":
            target.symlink_to(secret)
        elif leave == "fifo":
            os.mkfifo(target)
        else:
            target.write_bytes(b"\xff\xfe\x00")
        assert ep._kept()[TARGET] == TASK.files[TARGET], leave
