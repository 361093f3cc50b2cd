"""--agent best-of-n: single-shot sampled K times at once, each program tried on a scratch copy against the
visible tests, the first that passes submitted; on real workspaces and through the CLI with scripted models."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from agent_harness.errors import UnusableReply
from agent_harness.sandbox.workspace import Workspace
from agent_harness.scenarios import TaskQuery
from agent_harness.scenarios.humanevalfix import SCENARIO
from agent_harness.strategies.asking import Request
from agent_harness.strategies.best_of_n import BestOfNEpisode
from agent_harness.strategies.search import candidate_seed
from agent_harness.traces.steps import Candidate, Final
from agent_harness.types import Completion, GenParams, request_seed

ROOT = Path(__file__).resolve().parent.parent
TASK = SCENARIO.load_tasks(TaskQuery(task_ids=("Python/2",)))[0]  # truncate_number: return number % 1.0
TARGET = SCENARIO.target_file(TASK)
FIXED = "\n    return number % 1.0\n"  # continuations of the prefilled declaration
HALF = "\n    return 0.5\n"  # passes the first check (3.5), fails the second
WRONG = "\n    return number\n"
RUN_SEED = 7


def reply(text: str, error: str | None = None) -> Completion:
    return Completion(text=text, prompt_tokens=10, completion_tokens=5, finish_reason="stop", latency_s=0.0,
                      error=error)


class Model:
    """Replies by candidate (the last one repeated); keeps the batches it was asked."""

    def __init__(self, *said: str | Completion) -> None:
        self.said, self.batches = said, []  # type: ignore[var-annotated]

    def many(self, requests: Sequence[Request]) -> list[Completion]:
        self.batches.append(list(requests))
        out = [self.said[min(meta.candidate, len(self.said) - 1)] for _, _, meta in requests]
        return [c if isinstance(c, Completion) else reply(c) for c in out]

    def __call__(self, *request: object) -> Completion:
        raise AssertionError("best-of-n asks all its candidates at once")


@pytest.fixture
def ws() -> Iterator[Workspace]:
    w = Workspace.create(TASK.files, test_cmd=TASK.test_cmd)
    yield w
    w.cleanup()


def episode(ws: Workspace, k: int) -> BestOfNEpisode:
    params = GenParams(max_tokens=384, seed=request_seed(RUN_SEED, TASK.id, 0, 0))
    return BestOfNEpisode(TASK, ws, params, SCENARIO, candidates=k, temperature=0.8, run_seed=RUN_SEED)


def candidates(ep: BestOfNEpisode) -> list[Candidate]:
    return [s for s in ep.steps if isinstance(s, Candidate)]


def test_the_first_passing_program_is_submitted_and_the_rest_not_tried(ws: Workspace) -> None:
    model = Model(WRONG, HALF, FIXED, FIXED)
    ep = episode(ws, 4)
    ep.run(model)
    assert len(model.batches) == 1 and len(model.batches[0]) == 4  # one batched request
    cands = candidates(ep)
    assert [c.verdict for c in cands] == ["failed", "failed", "passed", "not_tried"]
    assert [c.chosen for c in cands] == [False, False, True, False]
    assert (Path(ws.root) / TARGET).read_text().endswith("return number % 1.0\n")
    assert isinstance(ep.steps[-1], Final) and ep.exit_reason == "submitted"
    assert ep.final == "candidate 2 passes the visible tests"
    assert ep.completion_tokens == 4 * 5  # every sample counted, the not-tried one too
    # seeds: candidate 0 is single-shot's own request, the others their own seed at the warmer temperature
    seeds = [c.seed for c in cands]
    assert seeds[0] == request_seed(RUN_SEED, TASK.id, 0, 0) == candidate_seed(RUN_SEED, TASK.id, 0, 0, 0)
    assert seeds[1:] == [candidate_seed(RUN_SEED, TASK.id, 0, 0, n) for n in (1, 2, 3)]
    assert len(set(seeds)) == 4 and [c.temperature for c in cands] == [0.0, 0.8, 0.8, 0.8]


def test_with_no_pass_the_program_that_gets_furthest_is_submitted(ws: Workspace) -> None:
    ep = episode(ws, 3)
    ep.run(Model(WRONG, HALF, WRONG))
    cands = candidates(ep)
    assert [c.verdict for c in cands] == ["failed", "failed", "failed"]
    assert [c.chosen for c in cands] == [False, True, False]  # HALF passes the first check
    assert (Path(ws.root) / TARGET).read_text().endswith("return 0.5\n") and ep.final is None


def test_the_test_files_are_the_tasks_whatever_a_program_does(ws: Workspace) -> None:
    """A program that rewrites the visible test file from import time cannot make its own test pass."""
    test_file = next(f for f in TASK.files if f != TARGET)
    forge = (f"\n    return 0\nopen({test_file!r}, 'w').write('pass\\n')\n")
    ep = episode(ws, 2)
    ep.run(Model(forge, FIXED))
    assert [c.verdict for c in candidates(ep)] == ["failed", "passed"]
    assert (Path(ws.root) / test_file).read_text() == TASK.files[test_file]


def test_a_faulty_reply_is_its_own_verdict_and_all_faulty_is_unusable(ws: Workspace) -> None:
    ep = episode(ws, 2)
    ep.run(Model(reply("", error="server said no"), FIXED))
    assert [c.verdict for c in candidates(ep)] == ["fault", "passed"]
    with pytest.raises(UnusableReply, match="server said no"):
        episode(ws, 2).run(Model(reply("", error="server said no")))


def cli(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "run_agents.py", "--agent", "best-of-n", "--n", "3", "--no-embed",
                           "--no-progress", "--out", str(out), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def test_cli_oracle_passes_null_fails_and_the_trace_says_what_was_sampled(tmp_path: Path) -> None:
    r = cli(tmp_path, "--models", "oracle,null", "--candidates", "3")
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["oracle"]["humanevalfix-best_of_n"]["pass@1"] == 1.0
    assert summary["null"]["humanevalfix-best_of_n"]["pass@1"] == 0.0
    assert summary["oracle"]["humanevalfix-best_of_n"]["suspicious"] == 0
    trace = json.loads(next((tmp_path / "oracle").rglob("run_Python-0__s0.json")).read_text())
    assert trace["agent"]["strategy"] == "best_of_n" and trace["agent"]["search"]["candidates"] == 3
    assert [s["type"] for s in trace["steps"]] == ["candidate"] * 3 + ["final"]


def test_best_of_n_needs_a_bigcode_style_prompt(tmp_path: Path) -> None:
    r = cli(tmp_path, "--models", "oracle", "--scenario", "repo_bugfix")
    assert r.returncode == 2 and "no bigcode-style prompt" in r.stderr.strip().splitlines()[-1], r.stderr[-2000:]
