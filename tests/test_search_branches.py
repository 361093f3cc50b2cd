"""--search-branches: a search turn that finds no pass branches its best write where the model doubts what it
wrote (one scoring request, then greedy completions of the reply up to each doubt and the model's token there),
each branch tried as a candidate; on real workspaces, with a model that answers by request."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from agent_harness.errors import ConfigError
from agent_harness.sandbox.workspace import Workspace
from agent_harness.scenarios import TaskQuery
from agent_harness.scenarios.humanevalfix import SCENARIO
from agent_harness.strategies.asking import Asker, Request
from agent_harness.strategies.react import AgentConfig
from agent_harness.strategies.search import SearchEpisode
from agent_harness.traces.steps import Candidate, Doubts
from agent_harness.types import Completion, GenParams, TokenScore

TASK = SCENARIO.load_tasks(TaskQuery(task_ids=("Python/2",)))[0]  # truncate_number: `number % 1.0 + 1.0`
TARGET = SCENARIO.target_file(TASK)
GIVEN = TASK.files[TARGET]


def write(content: str) -> str:
    call = {"tool": "write_file", "args": {"path": TARGET, "content": content}}
    return f"THOUGHT: fix it.\nTOOL_CALL: {json.dumps(call)}"


COPY = write(GIVEN)  # the file written back as it was shown
FIX = write(GIVEN.replace("% 1.0 + 1.0", "% 1.0 - 0.0"))  # what the branch at ` +` (to ` -`) completes to


def reply(text: str, scores: tuple[TokenScore, ...] = (), error: str | None = None) -> Completion:
    return Completion(text=text, prompt_tokens=10, completion_tokens=0 if scores else 5, finish_reason="stop",
                      latency_s=0.0, error=error, scores=scores)


class Model:
    """Writes the file back (`said`); doubts `+` in what it wrote (prefers ` -`, then ` *`) and `def` before the
    content (never branched: only the written text is); completes a prefill as `FIX` when FIX goes on from it,
    else with a wrong ending. Keeps its batches."""

    def __init__(self, said: str = COPY, fixes: bool = True) -> None:
        self.said, self.fixes, self.batches = said, fixes, []  # type: ignore[var-annotated]

    def many(self, requests: Sequence[Request]) -> list[Completion]:
        self.batches.append(list(requests))
        return [self.answer(c, p) for c, p, _ in requests]

    def answer(self, conv: list[dict[str, str]], params: GenParams) -> Completion:
        last = conv[-1]
        if params.prompt_logprobs:
            text = last["content"]
            return reply("", (TokenScore(text.index("fix it"), "fix", -3.0, (("see", -0.1),)),
                              TokenScore(text.index(" +"), " +", -2.0, ((" -", -0.5), (" *", -1.0)))))
        if last["role"] == "assistant":
            prefill = last["content"]
            if self.fixes and FIX.startswith(prefill):
                return reply(FIX[len(prefill):])
            return reply(' 2.0\\n"}}')
        return reply(self.said)


@pytest.fixture
def ws() -> Iterator[Workspace]:
    w = Workspace.create(TASK.files, test_cmd=TASK.test_cmd)
    yield w
    w.cleanup()


def search(ws: Workspace, **agent: object) -> SearchEpisode:
    config = AgentConfig(**{"candidates": 1, "search_branches": 4, **agent})  # type: ignore[arg-type]
    return SearchEpisode(TASK, ws, GenParams(max_tokens=256, seed=7), config)


def test_a_write_that_fails_is_branched_where_the_model_doubts_it_and_the_passing_branch_taken(ws: Workspace) -> None:
    model, ep = Model(), search(ws)
    ep.run(Asker(model.many))
    sampled, scoring, branches = model.batches
    assert [p.prompt_logprobs for _, p, _ in sampled] == [0] and [p.prompt_logprobs for _, p, _ in scoring] == [5]
    assert scoring[0][0][-1] == {"role": "assistant", "content": COPY}  # the reply scored as it was written
    at = COPY.index(" +")
    assert [c[-1]["content"] for c, _, _ in branches] == [COPY[:at] + " -", COPY[:at] + " *"]  # `fix` not doubted
    assert all(p.greedy and p.seed is None for _, p, _ in branches)
    [doubts] = [s for s in ep.steps if isinstance(s, Doubts)]
    assert doubts.doubts == [{"at": at, "code": " +", "model": [" -", " *"], "margin": 1.5}]
    cands = [s for s in ep.steps if isinstance(s, Candidate)]
    assert [(c.candidate, c.verdict, c.chosen) for c in cands] == [(0, "unchanged", False), (1, "passed", True),
                                                                   (2, "not_tried", False)]
    assert cands[1].branch == {"at": at, "code": " +", "model": [" -"], "margin": 1.5}
    assert ep.exit_reason == "submitted" and "candidate 1 of turn 1" in (ep.final or "")
    assert (Path(ws.root) / TARGET).read_text().endswith("return number % 1.0 - 0.0\n")
    assert SCENARIO.score(TASK, ws, []).passed
    # the chosen branch's whole reply goes on as the turn's reply; the scoring and the others stay aside
    assert [getattr(s, "raw", None) for s in ep.steps].count(FIX) == 1
    assert ep._spent() < ep.prompt_tokens + ep.completion_tokens


def test_a_write_is_branched_once_per_episode_and_nothing_without_the_setting(ws: Workspace) -> None:
    model, ep = Model(fixes=False), search(ws, max_steps=3, search_restart=False)
    ep.run(Asker(model.many))
    assert sum(p.prompt_logprobs > 0 for batch in model.batches for _, p, _ in batch) == 1
    assert ep.exit_reason == "max_steps"
    assert sum(isinstance(s, Doubts) for s in ep.steps) == 1
    plain = Model()
    search(ws, max_steps=2, search_branches=0).run(Asker(plain.many))
    assert all(not p.prompt_logprobs and c[-1]["role"] != "assistant" for b in plain.batches for c, p, _ in b)


OTHER = write(GIVEN.replace("% 1.0 + 1.0", "% 1.0 + 2.0"))  # another wrong write, sampled warm


class Two(Model):
    """Sampled candidate 0 writes the file back, every other sampled candidate writes OTHER (the same failing check:
    candidate 0 ranks first); no branch fixes it."""

    def many(self, requests: Sequence[Request]) -> list[Completion]:
        self.batches.append(list(requests))
        return [reply(OTHER) if m.candidate and c[-1]["role"] != "assistant" and not p.prompt_logprobs
                else self.answer(c, p) for c, p, m in requests]


@pytest.mark.parametrize("spread", [False, True])
def test_spread_branches_branches_the_best_write_not_branched_yet(ws: Workspace, spread: bool) -> None:
    """Two turns whose candidates write the same two files: by default only the first turn's best write is
    branched (the second turn's best is the same write); spread, the second turn branches the other write."""
    model = Two(fixes=False)
    ep = search(ws, max_steps=2, search_restart=False, candidates=2, spread_branches=spread)
    ep.run(Asker(model.many))
    scored = [c[-1]["content"] for b in model.batches for c, p, _ in b if p.prompt_logprobs]
    assert ep.exit_reason == "max_steps"
    assert sorted(scored) == (sorted([COPY, OTHER]) if spread else [COPY])


def test_spread_branches_skips_doubts_of_layout_alone(ws: Workspace) -> None:
    """A write's doubt whose other token only breaks the line otherwise is not branched when spread."""
    class Layout(Model):
        def answer(self, conv: list[dict[str, str]], params: GenParams) -> Completion:
            if params.prompt_logprobs:
                text = conv[-1]["content"]
                return reply("", (TokenScore(text.index(" +"), " +", -2.0, ((" +\\n", -0.1), (" -", -0.5))),))
            return super().answer(conv, params)

    model, ep = Layout(), search(ws, spread_branches=True)
    ep.run(Asker(model.many))
    [doubts] = [s for s in ep.steps if isinstance(s, Doubts)]
    assert doubts.doubts == [{"at": COPY.index(" +"), "code": " +", "model": [" -"], "margin": 1.5}]
    assert ep.exit_reason == "submitted"


class Deep(Model):
    """Doubts three tokens of what it wrote: ` %` most, then ` +`, then `return`; no branch fixes it."""

    def answer(self, conv: list[dict[str, str]], params: GenParams) -> Completion:
        if params.prompt_logprobs:
            text = conv[-1]["content"]
            at = text.index("return number")
            return reply("", (TokenScore(at, "return", -1.0, ((" yield", -0.5), (" pass", -0.9))),
                              TokenScore(text.index(" %", at), " %", -3.0, ((" //", -0.5), (" /", -0.6))),
                              TokenScore(text.index(" +", at), " +", -2.0, ((" -", -0.5), (" *", -1.0)))))
        return super().answer(conv, params)


@pytest.mark.parametrize("deeper", [False, True])
def test_deeper_branches_branch_a_write_again_at_its_doubts_not_branched_yet(ws: Workspace, deeper: bool) -> None:
    """Each turn writes the file back: by default only the first turn branches it; deeper, each later turn branches
    it at the next most doubted tokens, in the model's order, until none is left."""
    model = Deep(fixes=False)
    ep = search(ws, max_steps=4, search_restart=False, search_branches=2, spread_branches=True,
                deeper_branches=deeper)
    ep.run(Asker(model.many))
    branched = [[c[-1]["content"][len(COPY[:COPY.index("return number")]):] for c, _, _ in b]
                for b in model.batches if b[0][0][-1]["role"] == "assistant" and not b[0][1].prompt_logprobs]
    first = [["return number //", "return number /"]]
    assert branched[:1] == first
    if not deeper:
        assert len(branched) == 1
        return
    assert branched == [*first, ["return number % 1.0 -", "return number % 1.0 *"], [" yield", " pass"]]
    doubts = [s for s in ep.steps if isinstance(s, Doubts)]
    assert [[(d["code"], d["model"]) for d in s.doubts] for s in doubts] == [
        [(" %", [" //", " /"])], [(" +", [" -", " *"])], [("return", [" yield", " pass"])], []]
    # every scoring after the first says it scored the write again, and how much it left out
    assert "scored again" not in doubts[0].text
    assert [s.text.split(":")[0].split(", ")[-1] for s in doubts[1:3]] == [
        "the 2 branches made from it before left out", "the 4 branches made from it before left out"]
    assert doubts[3].text.startswith("candidate") and "scored again" in doubts[3].text
    assert ep.exit_reason == "max_steps"


def test_a_failed_scoring_is_recorded_and_the_search_goes_on(ws: Workspace) -> None:
    class Unscored(Model):
        def answer(self, conv: list[dict[str, str]], params: GenParams) -> Completion:
            return reply("", error="bad reply") if params.prompt_logprobs else super().answer(conv, params)

    model, ep = Unscored(), search(ws, max_steps=2)
    ep.run(Asker(model.many))
    [doubts] = [s for s in ep.steps if isinstance(s, Doubts)]
    assert doubts.text == "the model's doubts could not be read: bad reply" and doubts.doubts == []
    assert ep.exit_reason == "max_steps" and not any(c[-1]["role"] == "assistant" for b in model.batches
                                                      for c, _, _ in b if not b[0][1].prompt_logprobs)


def test_reads_and_finals_are_not_branched(ws: Workspace) -> None:
    read = "THOUGHT: look.\nTOOL_CALL: " + json.dumps({"tool": "read_file", "args": {"path": TARGET}})
    model = Model(said=read)
    search(ws, max_steps=2).run(Asker(model.many))
    assert all(not p.prompt_logprobs for b in model.batches for _, p, _ in b)


def test_the_setting_is_checked() -> None:
    with pytest.raises(ConfigError, match="between 0 and 64"):
        AgentConfig(search_branches=65)
    with pytest.raises(ConfigError, match="--protocol text only"):
        AgentConfig(search_branches=8, protocol="native")



# -- the whole path -----------------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent


def run(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "run_agents.py"), "--no-embed", "--no-progress", "--out",
                           str(out), *args], capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})


@pytest.mark.slow
def test_cli_search_scores_a_write_and_records_its_doubts(tmp_path: Path) -> None:
    script = tmp_path / "copier.jsonl"
    script.write_text(json.dumps({"task": TASK.id, "replies": [COPY]}) + "\n")
    reg = tmp_path / "models.yaml"
    reg.write_text(f"models:\n  - name: copier\n    backend: scripted\n    script: {script}\n")
    out = tmp_path / "out"
    r = run(out, "--registry", str(reg), "--models", "copier", "--agent", "search", "--search-branches", "4",
            "--candidates", "1", "--max-steps", "2", "--tasks", "2")
    assert r.returncode == 0, r.stderr
    [path] = (out / "copier" / "humanevalfix-search" / "gold").glob("*.json")
    t = json.loads(path.read_text())
    assert t["agent"]["search_branches"] == 4 and t["agent"]["search"]["branches"]["programs"] == 4
    assert t["fingerprint"]["config"]["agent"]["search_branches"] == 4
    [doubts] = [s for s in t["steps"] if s["type"] == "doubts"]  # the replayed model gives no alternatives
    assert doubts["text"] == "the model doubts no token of candidate 0's write" and doubts["turn"] == 0
    assert t["outcome"]["passed"] is False


def test_cli_a_backend_that_cannot_score_is_refused_in_one_line(tmp_path: Path) -> None:
    reg = tmp_path / "models.yaml"
    reg.write_text("models:\n  - name: remote\n    backend: openai\n    openai:\n"
                   "      base_url: http://127.0.0.1:9/v1\n      model: m\n      max_retries: 0\n")
    r = run(tmp_path / "out", "--registry", str(reg), "--models", "remote", "--agent", "branch-search",
            "--search-branches", "8", "--n", "1")
    assert r.returncode != 0 and r.stderr.count("\n") == 1 and not (tmp_path / "out").exists()
    assert "--agent branch-search reads the model's log-probabilities" in r.stderr
    r = run(tmp_path / "out", "--registry", str(reg), "--models", "remote", "--agent", "search",
            "--search-branches", "8", "--n", "1")
    assert "--agent search --search-branches reads the model's log-probabilities" in r.stderr
    assert r.returncode != 0 and r.stderr.count("\n") == 1 and not (tmp_path / "out").exists()


def test_only_what_a_write_puts_in_the_file_is_doubted_inline_or_in_a_block() -> None:
    from agent_harness.strategies.search import Action, _written

    content = 'def f():\n    return "é"\n'
    inline = write(content)
    a = Action("", "write_file", {"path": TARGET, "content": content})
    start, end = _written(inline, a) or (0, 0)
    assert json.loads(f'"{inline[start:end]}"') == content
    block = f'TOOL_CALL: {{"tool": "write_file", "args": {{"path": "{TARGET}"}}}}\n```python\n{content}```'
    start, end = _written(block, a) or (0, 0)
    assert block[start:end] == content
    edit = Action("", "edit_file", {"path": TARGET, "old": "x", "new": "return 2\n"})
    assert _written('TOOL_CALL: {"tool": "edit_file", "args": {"old": "x", "new": "return 2\\n"}}', edit)
    assert _written("TOOL_CALL: {}", a) is None
