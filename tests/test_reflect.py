"""The reflect strategy: through the CLI with scripted models, and its step function on real workspaces.

Workspaces are real temp folders, the visible tests run in the sandbox, the hidden scorer is the real one.
"""

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
from agent_harness.scenarios.bogus import SCENARIO as BOGUS
from agent_harness.scenarios.humanevalfix import SCENARIO
from agent_harness.strategies.reflect import Reflectable, ReflectConfig, ReflectEpisode
from agent_harness.traces.steps import Feedback
from agent_harness.traces.store import validate_trace
from agent_harness.types import Completion, GenParams, Task, request_seed

ROOT = Path(__file__).resolve().parent.parent
TASK = SCENARIO.load_tasks(TaskQuery(task_ids=("Python/2",)))[0]  # truncate_number: return number % 1.0
FIX = "```python\ndef truncate_number(number: float) -> float:\n    return number % 1.0\n```"
WRONG = "```python\ndef truncate_number(number: float) -> float:\n    return number\n```"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "run_agents.py"), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def reply(text: str) -> Completion:
    return Completion(text=text, prompt_tokens=10, completion_tokens=5, finish_reason="stop", latency_s=0.0)


CHAT = ReflectConfig(draft="chat")


@pytest.fixture
def episode() -> Iterator[ReflectEpisode]:
    ws = Workspace.create(TASK.files, test_cmd=TASK.test_cmd)
    # the chat draft: every turn answered with a code block (the bigcode draft: test_bigcode_prompt.py)
    yield ReflectEpisode(TASK, ws, GenParams(max_tokens=384, seed=7), SCENARIO, CHAT)
    ws.cleanup()


def module(ep: ReflectEpisode) -> str:
    return (Path(ep.ws.root) / ep.target).read_text(encoding="utf-8")


def hidden_pass(ep: ReflectEpisode) -> bool:
    return SCENARIO.score(ep.task, ep.ws, []).passed


# ---------------------------------------------------------------------------------------
# Through the CLI
# ---------------------------------------------------------------------------------------


def test_reflect_end_to_end_oracle_and_null(tmp_path: Path) -> None:
    out = tmp_path / "traces"
    r = cli("--models", "oracle,null", "--agent", "reflect", "--n", "3", "--out", str(out), "--no-embed")
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["oracle"]["humanevalfix-reflect"]["pass@1"] == 1.0
    assert summary["null"]["humanevalfix-reflect"]["pass@1"] == 0.0
    assert "humanevalfix-reflect" in r.stdout
    for who, turns in (("oracle", 1), ("null", 4)):
        for p in sorted((out / who / "humanevalfix-reflect" / "gold").glob("run_*.json")):
            data = json.loads(p.read_text())
            assert validate_trace(data) == [], p
            assert data["agent"]["strategy"] == "reflect" and data["agent"]["reflect"]["iters"] == 4
            assert data["outcome"]["num_turns"] == turns
            attempts = [s for s in data["steps"] if s["type"] == "attempt"]
            assert [s["temperature"] for s in attempts] == [0.0, 0.4, 0.7, 1.0][:turns]
            want = [request_seed(0, data["task_id"], 0, t) for t in range(turns)]
            assert [s["seed"] for s in attempts] == want  # the run's one seed derivation
    null0 = json.loads((out / "null" / "humanevalfix-reflect" / "gold" / "run_Python-0__s0.json").read_text())
    assert [s["check"] for s in null0["steps"] if s["type"] == "feedback"] == ["no_code"] * 4
    assert null0["outcome"]["exit_reason"] == "max_steps" and null0["outcome"]["diff"] == ""


def test_iters_and_strategy_flags(tmp_path: Path) -> None:
    out = tmp_path / "t"
    r = cli("--models", "null", "--agent", "reflect", "--iters", "2", "--n", "1", "--out", str(out), "--no-embed")
    assert r.returncode == 0, r.stderr
    data = json.loads((out / "null" / "humanevalfix-reflect" / "gold" / "run_Python-0__s0.json").read_text())
    assert data["outcome"]["num_turns"] == 2 and data["agent"]["reflect"]["iters"] == 2
    for bad, why in ((["--agent", "react", "--iters", "2"],
                      "--iters applies to --agent reflect, reflect-react and reflect-search"),
                     (["--agent", "reflect", "--mode", "single-shot"], "disagree"),
                     (["--agent", "reflect", "--iters", "0"], "--iters must be > 0")):
        r = cli("--models", "null", "--n", "1", "--out", str(tmp_path / "x"), "--no-embed", *bad)
        assert r.returncode == 2 and why in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_single_shot_under_both_spellings(tmp_path: Path) -> None:
    for flags in (["--agent", "single-shot"], ["--mode", "single-shot"]):
        out = tmp_path / flags[0].strip("-")
        r = cli("--models", "oracle", "--n", "2", "--out", str(out), "--no-embed", *flags)
        assert r.returncode == 0, r.stderr
        data = json.loads((out / "oracle" / "humanevalfix-single_shot" / "gold" / "run_Python-0__s0.json").read_text())
        assert data["agent"]["strategy"] == "single_shot" and data["agent"]["mode"] == "single_shot"
        assert data["outcome"]["passed"] is True


def test_reflect_refuses_a_scenario_without_a_function(tmp_path: Path) -> None:
    r = cli("--models", "oracle", "--agent", "reflect", "--scenario", "repo_bugfix", "--out", str(tmp_path / "t"),
            "--no-embed")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "error: scenario 'repo_bugfix' cannot run --agent reflect: it has no single function to extract and test "
        "(use --agent react)"]
    assert not (tmp_path / "t" / "oracle").exists()


def test_reflectable_scenarios() -> None:
    assert isinstance(SCENARIO, Reflectable) and isinstance(BOGUS, Reflectable)


# ---------------------------------------------------------------------------------------
# The step function
# ---------------------------------------------------------------------------------------


def test_fix_passes_at_once(episode: ReflectEpisode) -> None:
    steps = episode.advance(reply(FIX))
    assert [s.type for s in steps] == ["attempt", "feedback"]
    assert steps[1].dump()["check"] == "passed" and steps[1].dump()["output"].startswith("Tests PASSED")
    assert episode.done and episode.exit_reason == "submitted" and hidden_pass(episode)


def test_feedback_is_the_last_code_and_the_failing_check(episode: ReflectEpisode) -> None:
    episode.advance(reply(WRONG))
    assert episode.steps[-1].check == "failed"
    episode.advance(reply("```python\ndef truncate_number(number: float) -> float:\n    return 0.0\n```"))
    prompt = episode.prompt()
    assert [m["role"] for m in prompt] == ["system", "user", "assistant", "user"]
    assert prompt[1]["content"] == episode.user_prompt  # the task, then only the latest attempt
    assert "return 0.0" in prompt[2]["content"] and "return number\n" not in json.dumps(prompt)
    assert "assert" in prompt[3]["content"] and "```python" in prompt[3]["content"]
    assert episode.gen_params().temperature == 0.7 and episode.gen_params().seed == request_seed(7, TASK.id, 0, 2)
    assert not episode.done


def test_syntax_error_and_signature_are_not_tested(episode: ReflectEpisode) -> None:
    before = module(episode)
    episode.advance(reply("```python\ndef truncate_number(number: float) -> float:\n    return (number\n```"))
    assert episode.steps[-1].check == "syntax" and "output" not in episode.steps[-1].dump()
    assert "SyntaxError" in episode.steps[-1].text
    episode.advance(reply("```python\ndef truncate_number(x, y):\n    return x % 1.0\n```"))
    assert episode.steps[-1].check == "signature" and "must keep its parameters (number)" in \
        episode.steps[-1].text
    episode.advance(reply("```python\ndef truncate(number):\n    return number % 1.0\n```"))
    assert episode.steps[-1].check == "signature" and "does not define the function" in episode.steps[-1].text
    assert module(episode) == before  # nothing untestable was written
    episode.advance(reply(FIX))
    assert episode.exit_reason == "submitted" and episode.turn == 4


def test_same_code_twice_gets_a_different_approach_note(episode: ReflectEpisode) -> None:
    episode.advance(reply(WRONG))
    runs = sum("output" in s.dump() for s in episode.steps)
    episode.advance(reply(WRONG.replace("return number", "return number  ")))  # trailing blanks do not count
    note = episode.steps[-1]
    assert isinstance(note, Feedback) and note.check == "repeat" and "attempt 1" in note.text
    assert "Try a different approach" in note.text
    assert "assert" in note.text and sum("output" in s.dump() for s in episode.steps) == runs  # no second test run
    assert "Try a different approach" in episode.prompt()[-1]["content"]


def test_unchanged_original_is_named(episode: ReflectEpisode) -> None:
    episode.advance(reply(f"```python\n{TASK.files['truncate_number.py']}\n```"))
    assert episode.steps[-1].check == "failed" and "original code, unchanged" in episode.steps[-1].text


def test_iters_bound_the_episode(episode: ReflectEpisode) -> None:
    episode.config = ReflectConfig(iters=2, draft="chat")
    episode.advance(reply("no code here"))
    episode.advance(reply("still none"))
    assert episode.done and episode.exit_reason == "max_steps" and not hidden_pass(episode)


HOSTILE = """```python
import os
_a = open("test_truncate_number.py", "w").write("print('All tests passed.')\\n")
_b = os.replace("truncate_number.py", "moved.py")
_c = os.symlink("test_truncate_number.py", "truncate_number.py")
def truncate_number(number: float) -> float:
    return number
```"""


def test_code_that_rewrites_tests_and_links_its_module_forges_nothing(episode: ReflectEpisode) -> None:
    episode.advance(reply(HOSTILE))  # fails its own run, then leaves a stub test and a symlinked module
    assert episode.steps[-1].check == "failed"
    assert (Path(episode.ws.root) / "truncate_number.py").is_symlink()
    episode.advance(reply(WRONG))  # a wrong fix must still fail: the tests are restored, the link replaced
    assert episode.steps[-1].check == "failed"
    assert not (Path(episode.ws.root) / "truncate_number.py").is_symlink()
    assert "return number\n" in module(episode)
    assert (Path(episode.ws.root) / "test_truncate_number.py").read_text() == TASK.files["test_truncate_number.py"]
    episode.advance(reply(FIX))
    assert episode.exit_reason == "submitted" and hidden_pass(episode)


def test_context_overflow_ends_the_episode(episode: ReflectEpisode) -> None:
    episode.advance(Completion(text="", prompt_tokens=9000, completion_tokens=0, finish_reason="length",
                               latency_s=0.0))
    assert episode.exit_reason == "context"


def test_task_with_docstring_label() -> None:
    task: Task = SCENARIO.load_tasks(TaskQuery(label="docs", task_ids=("Python/2",)))[0]
    ws = Workspace.create(task.files, test_cmd=task.test_cmd)
    try:
        ep = ReflectEpisode(task, ws, GenParams(), SCENARIO, CHAT)
        assert "Return the decimal part of the number." in ep.user_prompt and "def check" not in ep.user_prompt
        ep.advance(reply(FIX))
        assert ep.exit_reason == "submitted" and SCENARIO.score(task, ws, []).passed
    finally:
        ws.cleanup()


def test_a_multiline_assert_is_shown_whole() -> None:
    task = SCENARIO.load_tasks(TaskQuery(task_ids=("Python/1",)))[0]
    ws = Workspace.create(task.files, test_cmd=task.test_cmd)
    try:
        ep = ReflectEpisode(task, ws, GenParams(), SCENARIO, CHAT)
        ep.advance(reply("```python\nfrom typing import List\n\n\n"
                         "def separate_paren_groups(paren_string: str) -> List[str]:\n    return []\n```"))
        text = ep.steps[-1].text
        assert ep.steps[-1].check == "failed"
        assert "'(()())', '((()))', '()', '((())()())'\n    ]" in text and "line 7" in text
    finally:
        ws.cleanup()
