"""--agent search: K candidate replies a turn, each tried on a scratch copy against the visible tests, the
turn continued from the best; on real workspaces and through the CLI with scripted models."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from agent_harness.errors import UnusableReply
from agent_harness.sandbox.workspace import Workspace
from agent_harness.scenarios import TaskQuery
from agent_harness.scenarios.humanevalfix import SCENARIO
from agent_harness.strategies.asking import Asker, Request
from agent_harness.strategies.chain import ReflectThenReact
from agent_harness.strategies.react import AgentConfig
from agent_harness.strategies.reflect import ReflectConfig
from agent_harness.strategies.search import SearchEpisode, candidate_seed
from agent_harness.traces.steps import Candidate
from agent_harness.traces.store import validate_trace
from agent_harness.types import Completion, GenParams, request_seed

ROOT = Path(__file__).resolve().parent.parent
TASK = SCENARIO.load_tasks(TaskQuery(task_ids=("Python/2",)))[0]  # truncate_number: return number % 1.0
TARGET = SCENARIO.target_file(TASK)
TEST_FILE = next(f for f in TASK.files if f != TARGET)
HEAD = "def truncate_number(number: float) -> float:\n"
FIXED = HEAD + "    return number % 1.0\n"
HALF = HEAD + "    return 0.5\n"  # passes the first check (3.5), fails the second
BROKEN = HEAD + "    return (\n"
PARAMS = GenParams(max_tokens=384, seed=7)


def reply(text: str, error: str | None = None) -> Completion:
    return Completion(text=text, prompt_tokens=10, completion_tokens=5, finish_reason="stop", latency_s=0.0,
                      error=error)


def call(tool: str, **args: str) -> str:
    return f"THOUGHT: go.\nTOOL_CALL: {json.dumps({'tool': tool, 'args': args})}"


def write(content: str, path: str = TARGET) -> str:
    return call("write_file", path=path, content=content)


READ = call("read_file", path=TARGET)


class Model:
    """Replies by turn and candidate (`turns[t][n]`, the last one repeated; FINAL past the script); keeps the
    batches it was asked."""

    def __init__(self, *turns: Sequence[str | Completion]) -> None:
        self.turns, self.batches = turns, []  # type: ignore[var-annotated]

    def answer(self, request: Request) -> Completion:
        _, _, meta = request
        said = self.turns[meta.turn] if meta.turn < len(self.turns) else ["THOUGHT: done.\nFINAL: done"]
        one = said[min(meta.candidate, len(said) - 1)]
        return one if isinstance(one, Completion) else reply(one)

    def many(self, requests: Sequence[Request]) -> list[Completion]:
        self.batches.append(list(requests))
        return [self.answer(r) for r in requests]


@pytest.fixture
def ws() -> Iterator[Workspace]:
    w = Workspace.create(TASK.files, test_cmd=TASK.test_cmd)
    yield w
    w.cleanup()


def search(ws: Workspace, k: int, **agent: object) -> SearchEpisode:
    return SearchEpisode(TASK, ws, PARAMS, AgentConfig(candidates=k, **agent))  # type: ignore[arg-type]


def candidates(ep: SearchEpisode, turn: int) -> list[Candidate]:
    return [s for s in ep.steps if isinstance(s, Candidate) and s.turn == turn]


def test_the_first_passing_candidate_is_taken_and_the_search_stops(ws: Workspace) -> None:
    model = Model([READ], [write(HALF), write(FIXED), write(HALF)])
    ep = search(ws, 3)
    ep.run(Asker(model.many))
    assert [len(b) for b in model.batches] == [3, 3]  # each turn's candidates asked at once
    assert ep.exit_reason == "submitted" and ep.turn == 2 and "candidate 1 of turn 2" in (ep.final or "")
    turn1 = candidates(ep, 1)
    assert [(c.candidate, c.verdict, c.chosen) for c in turn1] == [(0, "failed", False), (1, "passed", True),
                                                                   (2, "not_tried", False)]
    assert turn1[0].tests == {"passed": False, "at": "assert abs(truncate_number(1.33) - 0.33) < 1e-6"}
    assert turn1[1].raw is None and turn1[0].raw == write(HALF)  # the chosen reply is on the turn's own steps
    assert (Path(ws.root) / TARGET).read_text() == FIXED and SCENARIO.score(TASK, ws, []).passed
    assert [c.verdict for c in candidates(ep, 0)] == ["unchanged"] * 3
    # every reply counted in the totals; the budget counts the conversation continued
    assert ep.prompt_tokens == 60 and ep.completion_tokens == 30 and ep._spent() == 30


def test_seeds_and_temperatures_per_candidate(ws: Workspace) -> None:
    model = Model([READ], [write(FIXED)])
    ep = search(ws, 4, search_temperature=0.9)
    ep.run(Asker(model.many))
    for turn, batch in enumerate(model.batches):
        params = [p for _, p, _ in batch]
        assert [p.seed for p in params] == [candidate_seed(7, TASK.id, 0, turn, n) for n in range(4)]
        assert params[0].seed == request_seed(7, TASK.id, 0, turn)  # candidate 0 asks as react asks
        assert [p.temperature for p in params] == [0.0, 0.9, 0.9, 0.9]
        assert [c.seed for c in candidates(ep, turn)] == [p.seed for p in params]
    assert len({p.seed for _, p, _ in model.batches[0]}) == 4


def test_the_furthest_failing_check_wins_and_a_read_beats_a_regression(ws: Workspace) -> None:
    model = Model([write(BROKEN), READ, write(HALF)], [READ, write(BROKEN)])
    ep = search(ws, 3, max_steps=2)
    ep.run(Asker(model.many))
    first = candidates(ep, 0)
    assert [c.verdict for c in first] == ["failed", "unchanged", "failed"]
    assert [c.chosen for c in first] == [False, False, True]  # HALF gets past the first check
    second = candidates(ep, 1)
    assert [c.chosen for c in second] == [True, False, False]  # a read keeps HALF; BROKEN fails at the import
    assert (Path(ws.root) / TARGET).read_text() == HALF and ep.exit_reason == "max_steps"


@pytest.mark.parametrize("prefer", [False, True])
def test_prefer_changes_breaks_a_tie_at_the_same_check_for_the_write(ws: Workspace, prefer: bool) -> None:
    same = HEAD + "    return number\n"  # fails at the first check, as the file given does
    model = Model([call("run_tests"), write(same)])
    ep = search(ws, 2, max_steps=1, prefer_changes=prefer)
    ep.run(Asker(model.many))
    first = candidates(ep, 0)
    assert [c.verdict for c in first] == ["unchanged", "failed"]
    assert first[0].tests == first[1].tests  # the same failing check: a tie
    assert [c.chosen for c in first] == ([False, True] if prefer else [True, False])
    assert (Path(ws.root) / TARGET).read_text() == (same if prefer else TASK.files[TARGET])


@pytest.mark.parametrize("on", [False, True])
def test_tests_on_write_shows_the_tests_with_the_write(ws: Workspace, on: bool) -> None:
    model = Model([write(HALF)], [write(FIXED)])
    ep = search(ws, 1, max_steps=2, tests_on_write=on)
    ep.run(Asker(model.many))
    result = next(s for s in ep.steps if s.type == "tool_result")
    shown = ep.exchanges[0].answer
    assert shown is not None and isinstance(shown["content"], str)
    if on:
        assert "The visible tests, run on it:" in result.text and "Tests FAILED" in result.text
        assert result.tests is not None and result.tests["passed"] is False and result.tests["at"]
        assert "Fix the failing code with write_file." in shown["content"]  # not "Now run_tests"
    else:
        assert "visible tests" not in result.text and result.tests is None
        assert "Now run_tests to check your change." in shown["content"]
    assert ep.exit_reason == "submitted"  # FIXED passes on its scratch copy either way


CHEAT = "print('All tests passed.')\n"


@pytest.mark.parametrize("protect", [True, False])
def test_rewriting_the_tests_does_not_pass(ws: Workspace, protect: bool) -> None:
    model = Model([write(CHEAT, TEST_FILE), write(FIXED)])
    ep = search(ws, 2, protect_tests=protect)
    ep.run(Asker(model.many))
    first = candidates(ep, 0)
    # refused before it is tried; unprotected, tried with the task's tests put back on the copy: they fail
    assert [c.verdict for c in first] == ["refused" if protect else "failed", "passed"] and first[1].chosen
    assert (Path(ws.root) / TEST_FILE).read_text() == TASK.files[TEST_FILE]  # the copy's rewrite stayed there


@pytest.mark.parametrize("path", [TEST_FILE, f"./{TEST_FILE}", f"/workspace/{TEST_FILE}"])
def test_a_write_to_the_tests_is_refused_in_the_workspace_with_a_note(ws: Workspace, path: str) -> None:
    model = Model([write(CHEAT, path)], [call("run_tests")])  # every candidate the same write, then a test run
    ep = search(ws, 2, max_steps=2)
    ep.run(Asker(model.many))
    assert [c.verdict for c in candidates(ep, 0)] == ["refused", "refused"]
    result = next(s for s in ep.steps if s.type == "tool_result")
    assert result.text.startswith(f"ERROR: {TEST_FILE} holds the task's tests") and TARGET in result.text
    assert (Path(ws.root) / TEST_FILE).read_text() == TASK.files[TEST_FILE]
    assert ep.exit_reason == "max_steps"  # the tests still fail: no pass, nothing submitted


def test_unprotected_the_workspace_takes_the_write(ws: Workspace) -> None:
    model = Model([write(CHEAT)], [write(CHEAT, TEST_FILE)])
    ep = search(ws, 1, max_steps=2, protect_tests=False, search_restart=False)
    ep.run(Asker(model.many))
    assert (Path(ws.root) / TEST_FILE).read_text() == CHEAT


def test_a_candidates_fault_never_stops_the_episode(ws: Workspace) -> None:
    bad = reply("", error="the server sent nonsense")
    model = Model([bad, write(FIXED)])
    ep = search(ws, 2)
    ep.run(Asker(model.many))
    first = candidates(ep, 0)
    assert [c.verdict for c in first] == ["fault", "passed"] and "nonsense" in first[0].text
    assert ep.exit_reason == "submitted"

    w = Workspace.create(TASK.files, test_cmd=TASK.test_cmd)
    try:
        with pytest.raises(UnusableReply, match="nonsense"):  # no candidate usable: as a single bad reply
            search(w, 2).run(Asker(Model([bad]).many))
    finally:
        w.cleanup()


def test_a_fault_trying_a_candidate_is_its_verdict(ws: Workspace) -> None:
    """A workspace that cannot be copied (over its file bound) makes every trial fail: the candidates say so,
    the turn goes on from candidate 0, and the episode ends by its budget, not by the fault."""
    from dataclasses import replace

    ws.limits = replace(ws.limits, disk_files=1)
    ep = search(ws, 2, max_steps=1)
    ep.run(Asker(Model([write(HALF), write(FIXED)]).many))
    first = candidates(ep, 0)
    assert [c.verdict for c in first] == ["fault", "fault"] and "trying it failed" in first[0].text
    assert first[0].chosen and ep.exit_reason == "max_steps"


def test_a_plain_ask_gets_the_candidates_one_by_one(ws: Workspace) -> None:
    model = Model([READ], [write(FIXED)])
    ep = search(ws, 2)
    ep.run(lambda c, p, m: model.answer((c, p, m)))
    assert ep.exit_reason == "submitted" and len(candidates(ep, 1)) == 2


def test_scratch_copies_are_removed(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    own = Path(tempfile.mkdtemp(prefix="search-test-"))  # this test's own temp folder: other tests make copies too
    own.chmod(0o755)  # the sandbox's uid must reach the copies
    try:
        monkeypatch.setattr(tempfile, "tempdir", str(own))
        ep = search(ws, 3)
        ep.run(Asker(Model([write(HALF), write(BROKEN), READ], [write(FIXED)]).many))
        assert ep.exit_reason == "submitted"
        assert any(s.type == "candidate" for s in ep.steps)  # copies were made
        assert not list(own.glob("agent-harness-cand-*"))
    finally:
        shutil.rmtree(own, ignore_errors=True)


def test_reflect_search_hands_over_to_the_search() -> None:
    w = Workspace.create(TASK.files, test_cmd=TASK.test_cmd)
    try:
        chain = ReflectThenReact(TASK, w, PARAMS, SCENARIO, ReflectConfig(iters=1, draft="chat"),
                                 AgentConfig(candidates=2), search=True)
        wrong = f"```python\n{HALF}```"
        model = Model([wrong], [READ], [write(HALF), write(FIXED)])

        def many(requests: Sequence[Request]) -> list[Completion]:  # reflect's turns count from 0 again
            return model.many([(c, p, m if m.strategy == "reflect" else type(m)(m.task, m.strategy, m.turn + 1,
                                                                                 m.candidate)) for c, p, m in requests])

        chain.run(Asker(many))
        assert chain.exit_reason == "submitted" and isinstance(chain.current, SearchEpisode)
        kinds = [(s.type, s.phase) for s in chain.steps]
        assert kinds[:3] == [("attempt", "reflect"), ("feedback", "reflect"), ("handoff", "react")]
        assert [s.verdict for s in chain.steps if isinstance(s, Candidate)] == ["unchanged"] * 2 + ["failed", "passed"]
        assert chain.prompt_tokens == 50  # 1 reflect reply and 4 candidates
    finally:
        w.cleanup()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "run_agents.py"), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def test_search_end_to_end_with_per_candidate_scripts(tmp_path: Path) -> None:
    """Through the CLI: a script whose second turn differs by candidate; the passing candidate is found, the
    trace records every candidate with its seed, and a second run records the same seeds."""
    script = tmp_path / "s.jsonl"
    script.write_text(json.dumps({"task": TASK.id, "replies": [READ, [write(HALF), write(BROKEN), write(FIXED)]]})
                      + "\n")
    reg = tmp_path / "models.yaml"
    reg.write_text(f"models:\n  - {{name: replay, backend: scripted, script: {json.dumps(str(script))}}}\n")
    traces = []
    for run in ("a", "b"):
        out = tmp_path / run
        r = cli("--registry", str(reg), "--models", "replay", "--agent", "search", "--candidates", "3", "--tasks",
                TASK.id, "--out", str(out), "--no-embed", "--no-progress", "--seed", "5")
        assert r.returncode == 0, r.stderr
        [path] = out.rglob("run_*.json")
        traces.append(json.loads(path.read_text()))
    t = traces[0]
    assert validate_trace(t) == [] and t["outcome"]["passed"] is True and t["outcome"]["exit_reason"] == "submitted"
    assert t["agent"]["strategy"] == "search" and t["agent"]["search"]["candidates"] == 3
    cands = [s for s in t["steps"] if s["type"] == "candidate"]
    assert [(s["turn"], s["candidate"], s["verdict"]) for s in cands] == [
        (0, 0, "unchanged"), (0, 1, "unchanged"), (0, 2, "unchanged"), (1, 0, "failed"), (1, 1, "failed"),
        (1, 2, "passed")]
    assert [s["seed"] for s in cands] == [candidate_seed(5, TASK.id, 0, turn, n) for turn in (0, 1) for n in range(3)]
    assert [s.get("seed") for s in traces[1]["steps"]] == [s.get("seed") for s in t["steps"]]
    assert t["outcome"]["prompt_tokens"] == sum(s.get("tokens", {}).get("prompt", 0) for s in t["steps"]
                                                if isinstance(s.get("tokens"), dict))  # each reply on one step


@pytest.mark.parametrize("restart", [True, False])
def test_search_begins_again_after_a_stale_write(ws: Workspace, restart: bool) -> None:
    ep = search(ws, 2, max_steps=3, search_restart=restart)
    ep.run(Asker(Model([write(HALF)], [write(HALF)], [READ]).many))
    kinds = [s.type for s in ep.steps]
    assert ("restart" in kinds) == restart
    # after the restart the files are as given, and the tests on them are tried again
    assert (Path(ws.root) / TARGET).read_text() == (TASK.files[TARGET] if restart else HALF)
    last = candidates(ep, 2)
    assert last[0].tests == ({"passed": False, "at": "assert truncate_number(3.5) == 0.5"} if restart else
                             {"passed": False, "at": "assert abs(truncate_number(1.33) - 0.33) < 1e-6"})
