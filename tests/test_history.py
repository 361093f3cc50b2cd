"""Stale attempts named and condensed history (history.py), with the scripted backend in real workspaces."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agent_harness.backends.loop import complete_all
from agent_harness.backends.scripted import ScriptedBackend
from agent_harness.errors import ConfigError
from agent_harness.protocol import OBSERVATION_HEADER
from agent_harness.sandbox import Limits
from agent_harness.sandbox.workspace import Workspace
from agent_harness.scenarios import TaskQuery, get_scenario
from agent_harness.strategies.history import STALE_HINT, elisions, rebuild_prompt
from agent_harness.strategies.react import AgentConfig, Episode
from agent_harness.traces.model import SCHEMA_VERSION
from agent_harness.traces.store import validate_trace
from agent_harness.types import Completion, Conversation, GenParams, RequestMeta, Task, request_seed

ROOT = Path(__file__).resolve().parent.parent
BUGGY = "def add(a, b):\n    return a - b\n"
TIMES = "def add(a, b):\n    return a * b\n"
FIRST = "def add(a, b):\n    return b - a\n"
FIXED = "def add(a, b):\n    return a + b\n"
TESTS = ("import unittest\n\nfrom calc import add\n\n\n"
         "class T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n")
CHECK = "self.assertEqual(add(2, 3), 5)"
TASK = Task(id="calc", scenario="unit", statement="Fix add() in calc.py so the tests pass.",
            files={"calc.py": BUGGY, "test_calc.py": TESTS}, test_cmd=["python3", "-m", "unittest", "-q"])
LIMITS = Limits(cpu_s=5, wall_s=10.0, mem_bytes=512 << 20, nproc=32)
DONE = "THOUGHT: done\nFINAL: fixed"


def call(tool: str, thought: str = "next", **args: object) -> str:
    return f"THOUGHT: {thought}\nTOOL_CALL: {json.dumps({'tool': tool, 'args': args})}"


def write(content: str, thought: str = "fix") -> str:
    return call("write_file", thought, path="calc.py", content=content)


@dataclass
class Run:
    """An episode driven to the end, with every prompt and sampling parameter it sent."""

    ep: Episode
    prompts: list[Conversation] = field(default_factory=list)
    params: list[GenParams] = field(default_factory=list)

    @property
    def steps(self) -> list[dict[str, Any]]:
        """The episode's steps as the trace writes them."""
        return [s.dump() for s in self.ep.steps]

    def results(self) -> list[str]:
        return [s["text"] for s in self.steps if s["type"] == "tool_result"]

    def result_steps(self) -> list[dict[str, Any]]:
        return [s for s in self.steps if s["type"] == "tool_result"]

    def trace(self) -> dict[str, Any]:
        """The parts of a trace that rebuild_prompt reads, through JSON as on disk."""
        ep = self.ep
        return json.loads(json.dumps({
            "prompt": {"system": ep.system_prompt, "task": ep.user_prompt, "demo": ep.demo},
            "agent": {"format_reminder": ep.config.format_reminder, "history": ep.config.history},
            "steps": self.steps}))


@pytest.fixture
def episode(tmp_path: Path) -> Iterator[Callable[..., Run]]:
    made: list[Workspace] = []

    def run(replies: list[str], seed: int | None = None, **config: Any) -> Run:
        script = tmp_path / f"script{len(made)}.jsonl"
        script.write_text("".join(json.dumps(r) + "\n" for r in replies))
        backend = ScriptedBackend("replay", script)
        ws = Workspace.create(TASK.files, test_cmd=TASK.test_cmd, limits=LIMITS)
        made.append(ws)
        config.setdefault("submit_checks", 0)
        config.setdefault("max_steps", 20)
        out = Run(Episode(TASK, ws, GenParams(max_tokens=400, seed=seed), AgentConfig(**config)))

        def ask(conversation: Conversation, params: GenParams, meta: RequestMeta) -> Completion:
            out.prompts.append(conversation)
            out.params.append(params)
            return complete_all(backend, [conversation], params, [meta])[0]

        out.ep.run(ask)
        return out

    yield run
    for ws in made:
        ws.cleanup()


def observation(run: Run, turn: int) -> str:
    """The user message that followed the reply of `turn`, as the model saw it next."""
    return run.prompts[turn + 1][run.ep.first_turn + 2 * turn + 1]["content"]


# --------------------------------------------------------------------------------------------
# Stale notes


def test_unchanged_write_is_told_no_change(episode: Callable[..., Run]) -> None:
    run = episode([write(BUGGY), call("run_tests"), write(BUGGY), DONE], initial_tests=False)
    untested, _, tested = (s for s in run.result_steps() if s["tool"] in ("write_file", "run_tests"))
    assert untested["text"] == "No change: the content is identical to the file."
    assert tested["text"] == f"No change: the content is identical to the file; the tests still fail at {CHECK}."
    assert untested["stale"] and untested["file"]["changed"] is False and untested["file"]["attempt"] is None
    assert STALE_HINT in observation(run, 2) and "Now run_tests" not in observation(run, 2)
    assert run.ep.ws.changed_files() == []


def test_initial_test_run_is_a_step_the_first_stale_note_cites(episode: Callable[..., Run]) -> None:
    """The test run before the first turn is recorded (turn 0, before the reply), so an unchanged write at
    the first turn is told where the tests fail; it is no model turn, and the prompts rebuild as sent."""
    run = episode([write(BUGGY), DONE])
    first, reply = run.steps[0], run.steps[1]
    assert first["type"] == "initial_tests" and first["turn"] == 0 and first["tool"] == "run_tests"
    assert first["tests"] == {"passed": False, "at": CHECK} and "raw" not in first and "raw" in reply
    assert run.results()[0] == f"No change: the content is identical to the file; the tests still fail at {CHECK}."
    assert run.ep.user_prompt.endswith(f"The tests fail now at:\n{CHECK}")
    for turn, sent in enumerate(run.prompts):
        assert rebuild_prompt(run.trace(), turn) == sent


def test_unchanged_write_after_a_pass_is_not_urged_to_change(episode: Callable[..., Run]) -> None:
    run = episode([write(FIXED), call("run_tests"), write(FIXED), DONE])
    assert run.results()[2] == "No change: the content is identical to the file; the tests pass."
    assert STALE_HINT not in observation(run, 2) and "stale" not in run.result_steps()[2]


def test_stale_notes_off_keeps_the_tool_output(episode: Callable[..., Run]) -> None:
    run = episode([write(BUGGY), DONE], stale_notes=False)
    [result] = run.result_steps()
    assert result["text"] == "Wrote calc.py (2 lines)." and "stale" not in result
    assert result["file"]["changed"] is False  # still recorded: the condenser and the temperature use it
    assert observation(run, 0).split("\n\n")[-1].startswith("Now run_tests")


def test_repeated_failed_version_names_its_turn_and_warms_the_sampling(episode: Callable[..., Run]) -> None:
    run = episode([
        write(FIRST),  # 0: attempt 1
        call("run_tests"),  # 1: fails
        write(TIMES),  # 2: attempt 2
        call("run_tests"),  # 3: fails
        write(FIRST),  # 4: attempt 1 again -> "tried at turn 1"
        call("run_tests"),  # 5
        write(FIRST),  # 6: no change
        call("run_tests"),  # 7
        write(FIXED),  # 8: a new version
        call("run_tests"),  # 9
        DONE,  # 10
    ], seed=7)
    writes = [s for s in run.result_steps() if s["tool"] == "write_file"]
    assert writes[2]["text"] == ("Wrote calc.py (2 lines).\n"
                                 f"You tried this exact version at turn 1; it failed at {CHECK}.")
    assert writes[2]["file"]["repeat_of"] == 0 and writes[2]["file"]["attempt"] == 3 and writes[2]["stale"]
    assert writes[3]["text"].startswith("No change") and "stale" not in writes[4]
    temps = [p.temperature for p in run.params]
    assert temps == [0.0] * 5 + [0.3, 0.3, 0.5, 0.5, 0.0, 0.0]
    assert [s["temperature"] for s in run.steps if "raw" in s] == temps  # the trace shows each turn's
    # warmer sampling changes the temperature, never the seed: each turn's is request_seed(run seed, task, sample, turn)
    assert [p.seed for p in run.params] == [request_seed(7, run.ep.task.id, 0, t) for t in range(len(run.params))]
    assert run.ep.ws.changed_files() == ["calc.py"] and run.ep.exit_reason == "submitted"


def test_stale_temperature_off_stays_greedy(episode: Callable[..., Run]) -> None:
    run = episode([write(BUGGY), call("run_tests"), write(BUGGY), call("run_tests"), DONE], stale_temperature=None)
    assert {p.temperature for p in run.params} == {0.0}
    assert run.result_steps()[2]["text"].startswith("No change")


def test_stale_temperature_is_capped(episode: Callable[..., Run]) -> None:
    run = episode([write(BUGGY)] * 7 + [DONE], loop_temperature=None)
    assert [p.temperature for p in run.params] == [0.0, 0.3, 0.5, 0.7, 0.9, 1.0, 1.0, 1.0]


def test_swapped_files_are_not_followed(episode: Callable[..., Run]) -> None:
    """The agent's commands may turn the file into a fifo or a link out: notes never block or escape."""
    run = episode([
        call("run_cmd", cmd="rm calc.py && mkfifo calc.py"),
        write(FIXED),  # replaces the fifo: a new version
        call("run_cmd", cmd="rm calc.py && ln -s /etc/hostname calc.py"),
        write(FIXED),  # refused: the link leads outside
        call("read_file", path="calc.py"),
        DONE,
    ])
    _, replaced, _, refused, read = run.result_steps()
    assert replaced["text"] == "Wrote calc.py (2 lines)." and replaced["file"]["changed"]
    assert refused["text"].startswith("ERROR:") and "file" not in refused
    assert read["text"].startswith("ERROR:") and "file" not in read


# --------------------------------------------------------------------------------------------
# Condensed history

READ_FIX = [
    call("read_file", "Look.", path="calc.py"),  # 0
    call("run_tests", "Run."),  # 1
    write(TIMES, "Try *."),  # 2: attempt 1
    call("run_tests", "Check."),  # 3: fails
    write(FIXED, "Use +."),  # 4: attempt 2
    call("run_tests", "Check again."),  # 5: passes
    DONE,  # 6
]


def test_condensed_history_elides_exactly_the_stale_steps(episode: Callable[..., Run]) -> None:
    run = episode(READ_FIX, history="condensed")
    first = run.ep.first_turn
    def changed(t: int) -> set[int]:
        """Messages of prompt t-1 that prompt t shows differently (counted from the first reply)."""
        return {i - first for i, (a, b) in enumerate(zip(run.prompts[t - 1], run.prompts[t], strict=False)) if a != b}

    # Earlier messages change only in the prompt after a write that changes the file (turns 2 and 4).
    assert [changed(t) for t in range(1, 7)] == [set(), set(), {1, 3}, set(), {4, 5, 7}, set()]
    after = run.prompts[5]
    assert after[first + 1]["content"] == f"{OBSERVATION_HEADER}\n[read of calc.py, since rewritten]"
    assert after[first + 3]["content"] == f"{OBSERVATION_HEADER}\n[test run of the files as given: failed at {CHECK}]"
    assert after[first + 4] == {"role": "assistant", "content": 'THOUGHT: Try *.\nTOOL_CALL: {"tool": "write_file", '
                                '"args": {"path": "calc.py"}}\n[content of attempt 1 of calc.py elided]'}
    assert after[first + 5]["content"] == f"{OBSERVATION_HEADER}\n[attempt 1 of calc.py: tests failed at {CHECK}]"
    assert after[first + 7]["content"] == (f"{OBSERVATION_HEADER}\n"
                                           f"[test run of attempt 1 of calc.py: failed at {CHECK}]")
    assert after[first + 8]["content"] == write(FIXED, "Use +.")  # the latest version stays whole
    assert run.prompts[6][:len(after)] == after
    elided = {s["turn"]: s["elided"] for s in run.steps if "elided" in s}
    assert {t: sorted((e["turn"], e["role"]) for e in es) for t, es in elided.items()} == {
        3: [(0, "user"), (1, "user")], 5: [(2, "assistant"), (2, "user"), (3, "user")]}
    assert run.ep.exit_reason == "submitted" and run.ep.ws.changed_files() == ["calc.py"]


def test_an_unchanged_write_stays_whole_until_the_file_changes(episode: Callable[..., Run]) -> None:
    replies = [call("run_tests"), write(BUGGY, "Same."), call("run_tests"), write(FIXED), call("run_tests"), DONE]
    run = episode(replies, history="condensed")
    first = run.ep.first_turn
    assert run.prompts[3] == run.prompts[2] + run.prompts[3][len(run.prompts[2]):]
    assert run.prompts[3][first + 2]["content"] == write(BUGGY, "Same.")
    stub = 'THOUGHT: Same.\nTOOL_CALL: {"tool": "write_file", "args": {"path": "calc.py"}}\n'
    assert run.prompts[4][first + 2]["content"] == stub + "[content elided: it was identical to the file]"
    assert run.prompts[4][first + 3]["content"].startswith(f"{OBSERVATION_HEADER}\nNo change")
    assert set(elisions(run.ep.steps)) == {(0, "user"), (1, "assistant"), (2, "user")}


@pytest.mark.parametrize("history", ["full", "condensed"])
def test_rebuilt_prompts_equal_the_sent_ones(episode: Callable[..., Run], history: str) -> None:
    replies = [*READ_FIX[:4], "not a reply", write(BUGGY), DONE, write(TIMES), write(FIXED), DONE]
    run = episode(replies, history=history, submit_checks=1)
    assert [s["type"] for s in run.steps].count("submit_check") == 1
    assert "You tried this exact version at turn 3" in run.results()[5]
    assert run.ep.exit_reason == "submitted" and run.ep.turn == len(replies)
    trace = run.trace()
    assert [rebuild_prompt(trace, t) for t in range(len(run.prompts))] == run.prompts


def test_full_history_is_the_plain_conversation(episode: Callable[..., Run]) -> None:
    run = episode(READ_FIX, history="full")
    for before, after in zip(run.prompts, run.prompts[1:], strict=False):
        assert after[:len(before)] == before and len(after) == len(before) + 2
    replies = [m["content"] for m in run.prompts[-1][run.ep.first_turn:] if m["role"] == "assistant"]
    assert replies == READ_FIX[:6]
    assert not any("elided" in s for s in run.steps)
    condensed = episode(READ_FIX, history="condensed")
    assert condensed.prompts[:3] == run.prompts[:3]  # the same until a file changes


# --------------------------------------------------------------------------------------------
# Restarts


def test_restart_after_stale_writes_begins_again_from_the_task(episode: Callable[..., Run]) -> None:
    """Two stale writes in a row: the next prompt is the first one again, the files are as given, and the
    sampling stays warm; a version that failed before the restart is still named when written after it."""
    run = episode([
        write(FIRST),  # 0: attempt 1
        call("run_tests"),  # 1: fails
        write(FIRST),  # 2: no change (stale 1)
        write(FIRST),  # 3: no change (stale 2) -> restart before turn 4
        write(FIRST),  # 4: the failed version again, on the file as given: "tried at turn 1" (stale 1)
        write(FIXED),  # 5: a new version
        call("run_tests"),  # 6: passes
        DONE,  # 7
    ], seed=3, restart_after=2)
    restart = next(s for s in run.steps if s["type"] == "restart")
    assert restart["turn"] == 4 and restart["text"].startswith("2 stale writes in a row")
    after = run.steps[restart["i"] + 1]
    assert after["type"] == "initial_tests" and after["turn"] == 4 and after["tests"] == {"passed": False, "at": CHECK}
    assert run.prompts[4] == run.prompts[0]  # the conversation began again
    assert run.prompts[5][:len(run.prompts[0])] == run.prompts[0] and len(run.prompts[5]) == len(run.prompts[0]) + 2
    writes = [s for s in run.result_steps() if s["tool"] == "write_file"]
    assert writes[3]["file"]["changed"] is True  # the file was BUGGY again
    assert writes[3]["text"].endswith(f"You tried this exact version at turn 1; it failed at {CHECK}.")
    assert [p.temperature for p in run.params][3:7] == [0.3, 0.7, 0.7, 0.0]  # warm across the restart
    assert sum(s["type"] == "restart" for s in run.steps) == 1 and run.ep.exit_reason == "submitted"
    assert [rebuild_prompt(run.trace(), t) for t in range(len(run.prompts))] == run.prompts


def test_restart_puts_back_a_file_swapped_for_a_link(episode: Callable[..., Run]) -> None:
    run = episode([call("run_cmd", cmd="rm calc.py test_calc.py && ln -s /etc/hostname calc.py"),
                   write(BUGGY), DONE], restart_after=1)
    # The write went to the link, which leads outside: refused, no version recorded, so no restart yet.
    assert not any(s["type"] == "restart" for s in run.steps)
    swap = "rm test_calc.py && ln -s /etc/hostname test_calc.py && mv calc.py o.py && ln -s o.py calc.py"
    run = episode([write(FIRST), call("run_cmd", cmd=swap), write(FIRST), DONE], restart_after=1)
    [restart] = [s for s in run.steps if s["type"] == "restart"]  # the write through the link changed nothing
    assert restart["turn"] == 3 and "Not restored" not in restart["text"]
    root = run.ep.ws.root
    assert not (root / "calc.py").is_symlink() and (root / "calc.py").read_text() == BUGGY
    assert not (root / "test_calc.py").is_symlink() and (root / "test_calc.py").read_text() == TESTS
    assert (root / "o.py").read_text() == FIRST  # a file the task did not give stays


def test_no_restart_while_the_tests_pass_or_when_off(episode: Callable[..., Run]) -> None:
    run = episode([write(FIXED), call("run_tests"), write(FIXED), write(FIXED), DONE], restart_after=1)
    assert not any(s["type"] == "restart" for s in run.steps)
    run = episode([write(BUGGY)] * 3 + [DONE])
    assert not any(s["type"] == "restart" for s in run.steps)


def test_condensed_history_restarts_and_rebuilds(episode: Callable[..., Run]) -> None:
    replies = [*READ_FIX[:4], write(TIMES), write(TIMES), call("read_file", path="calc.py"), write(FIXED),
               call("run_tests"), DONE]
    run = episode(replies, history="condensed", restart_after=2)
    [restart] = [s for s in run.steps if s["type"] == "restart"]
    assert restart["turn"] == 6 and run.prompts[6] == run.prompts[0]
    assert run.ep.exit_reason == "submitted"
    assert [rebuild_prompt(run.trace(), t) for t in range(len(run.prompts))] == run.prompts


def test_restart_after_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="--restart-after must be > 0"):
        AgentConfig(restart_after=0)


# --------------------------------------------------------------------------------------------
# Through the CLI


def test_cli_condensed_trace_rebuilds_the_prompts(tmp_path: Path, episode: Callable[..., Run]) -> None:
    task = get_scenario("humanevalfix").load_tasks(TaskQuery(n=1))[0]
    path, fixed = task.oracle[1]["args"]["path"], task.oracle[1]["args"]["content"]
    wrong = task.files[path] + "\n# tried\n"
    replies = [call("read_file", path=path), call("write_file", path=path, content=wrong), call("run_tests"),
               call("write_file", path=path, content=wrong), call("write_file", path=path, content=fixed),
               call("run_tests"), DONE]
    script = tmp_path / "s.jsonl"
    script.write_text(json.dumps({"task": task.id, "replies": replies}) + "\n")
    registry = tmp_path / "models.yaml"
    registry.write_text(f"models:\n  - {{name: replay, backend: scripted, script: {json.dumps(str(script))}}}\n")
    out = tmp_path / "t"
    r = subprocess.run([sys.executable, str(ROOT / "run_agents.py"), "--registry", str(registry), "--models", "replay",
                        "--agent", "react", "--n", "1", "--out", str(out), "--no-embed", "--history", "condensed"],
                       capture_output=True, text=True, cwd=ROOT, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr
    [trace_file] = out.rglob("run_*.json")
    trace = json.loads(trace_file.read_text())
    assert validate_trace(trace) == []
    assert trace["outcome"]["passed"] is True
    assert {k: trace["agent"][k] for k in ("history", "stale_notes", "stale_temperature")} == {
        "history": "condensed", "stale_notes": True, "stale_temperature": 0.3}
    results = [s for s in trace["steps"] if s["type"] == "tool_result"]
    assert results[3]["text"].startswith("No change: the content is identical to the file; the tests still fail")
    assert [s["temperature"] for s in trace["steps"] if "raw" in s] == [0.0] * 4 + [0.3, 0.0, 0.0]
    assert [s["turn"] for s in trace["steps"] if "elided" in s] == [2, 5]
    # The same script driven directly: the prompts it sends are the ones the trace rebuilds.
    ws = Workspace.create(task.files, test_cmd=task.test_cmd)
    backend = ScriptedBackend("replay", script)
    ep = Episode(task, ws, GenParams(max_tokens=384), AgentConfig(history="condensed"))
    turns: list[int] = []

    def ask(conversation: Conversation, params: GenParams, meta: RequestMeta) -> Completion:
        assert rebuild_prompt(trace, meta.turn) == conversation
        turns.append(meta.turn)
        return complete_all(backend, [conversation], params, [meta])[0]

    try:
        ep.run(ask)
    finally:
        ws.cleanup()
    assert ep.done and turns == list(range(len(replies)))


def test_unknown_history_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="history must be 'full' or 'condensed'"):
        AgentConfig(history="short")  # type: ignore[arg-type]


def test_cli_helpers_off(tmp_path: Path) -> None:
    out = tmp_path / "t"
    r = subprocess.run([sys.executable, str(ROOT / "run_agents.py"), "--models", "null", "--n", "1", "--out", str(out),
                        "--no-embed", "--no-stale-notes", "--no-stale-temperature"],
                       capture_output=True, text=True, cwd=ROOT, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr
    [trace_file] = out.rglob("run_*.json")
    agent = json.loads(trace_file.read_text())["agent"]
    assert (agent["history"], agent["stale_notes"], agent["stale_temperature"]) == ("full", False, None)


def test_cli_restart_after(tmp_path: Path) -> None:
    task = get_scenario("humanevalfix").load_tasks(TaskQuery(n=1))[0]
    path, fixed = task.oracle[1]["args"]["path"], task.oracle[1]["args"]["content"]
    same = call("write_file", path=path, content=task.files[path])
    replies = [same, same, call("write_file", path=path, content=fixed), call("run_tests"), DONE]
    script = tmp_path / "s.jsonl"
    script.write_text(json.dumps({"task": task.id, "replies": replies}) + "\n")
    registry = tmp_path / "models.yaml"
    registry.write_text(f"models:\n  - {{name: replay, backend: scripted, script: {json.dumps(str(script))}}}\n")
    base = [sys.executable, str(ROOT / "run_agents.py"), "--registry", str(registry), "--models", "replay",
            "--agent", "react", "--n", "1", "--no-embed"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    bad = subprocess.run([*base, "--out", str(tmp_path / "bad"), "--restart-after", "0"],
                         capture_output=True, text=True, cwd=ROOT, timeout=600, env=env)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "--restart-after must be > 0" in bad.stderr
    out = tmp_path / "t"
    r = subprocess.run([*base, "--out", str(out), "--restart-after", "2"],
                       capture_output=True, text=True, cwd=ROOT, timeout=600, env=env)
    assert r.returncode == 0, r.stderr
    [trace_file] = out.rglob("run_*.json")
    trace = json.loads(trace_file.read_text())
    assert validate_trace(trace) == [] and trace["schema_version"] == SCHEMA_VERSION
    assert trace["outcome"]["passed"] is True and trace["outcome"]["num_turns"] == 5
    assert trace["agent"]["restart_after"] == 2 and trace["fingerprint"]["config"]["agent"]["restart_after"] == 2
    assert [s["turn"] for s in trace["steps"] if s["type"] in ("restart", "initial_tests")] == [0, 2, 2]


class CountingSteps(list):  # type: ignore[type-arg]
    """Steps that count the passes made over them."""

    passes = 0

    def __iter__(self) -> Iterator[Any]:
        self.passes += 1
        return super().__iter__()


def _write_test_turns(turns: int) -> CountingSteps:
    """`turns` turns of a write (a new version, or a repeat) and a failing test run, as react records them."""
    from agent_harness.traces.steps import Thought, ToolCall, ToolResult

    steps = CountingSteps()
    for t in range(turns):
        write = t % 2 == 0
        steps.append(Thought(i=len(steps), turn=t, text="next", raw="reply"))
        steps.append(ToolCall(i=len(steps), turn=t, text="call", tool="write_file" if write else "run_tests",
                              args={"path": "calc.py"} if write else {}))
        if write:
            file = {"path": "calc.py", "sha": str(t % 6), "changed": True, "attempt": t // 2 + 1, "repeat_of": None}
            steps.append(ToolResult(i=len(steps), turn=t, text="Wrote", tool="write_file", file=file))
        else:
            steps.append(ToolResult(i=len(steps), turn=t, text="FAILED", tool="run_tests",
                                    tests={"passed": False, "at": CHECK}))
    return steps


def test_history_passes_over_the_steps_a_fixed_number_of_times() -> None:
    """What a turn's prompt needs of the history (elisions, the stale run and temperature) takes a fixed number
    of passes over the steps however long the episode is, so each turn costs time linear in its steps."""
    from agent_harness.strategies.history import stale_run, stale_temperature

    counts = []
    for turns in (10, 80):
        steps = _write_test_turns(turns)
        condensed = elisions(steps)
        stale_run(steps)
        stale_temperature(steps, 0.3)
        counts.append(steps.passes)
        assert len(condensed) >= turns - 2  # every turn but the last ones is condensed
    assert counts[0] == counts[1] <= 10
