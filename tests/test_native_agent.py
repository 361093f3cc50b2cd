"""The native tool protocol end to end: scripted models speaking native replies, real sandbox and git, the
CLI, traces and pass@1; the prompts a native episode sends rebuild from its trace; the protocol a model
prefers in models.yaml and --protocol's override."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_agent import FIXED, LIMITS, TASK  # the same one-function task as the text agent's tests

from agent_harness.backends.loop import complete_all
from agent_harness.backends.scripted import ScriptedBackend
from agent_harness.errors import ConfigError
from agent_harness.protocol.native import CALL_PREFILL, tool_schemas
from agent_harness.sandbox.workspace import Workspace
from agent_harness.strategies.history import rebuild_prompt
from agent_harness.strategies.react import AgentConfig, Episode
from agent_harness.traces.store import validate_trace
from agent_harness.types import Completion, Conversation, GenParams, NativeCall, RequestMeta, Task, ToolSpec

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "run_agents.py"), "--no-embed", "--no-progress", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=600)


def traces(out: Path, model: str) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((out / model).glob("*/*/run_*.json"))]


@pytest.mark.parametrize("agent", ["react", "reflect-react"])
def test_native_oracle_and_null_end_to_end(tmp_path: Path, agent: str) -> None:
    out = tmp_path / "out"
    r = cli("--models", "oracle,null", "--n", "4", "--agent", agent, "--protocol", "native", "--out", str(out))
    assert r.returncode == 0, r.stderr
    folder = "humanevalfix-native" if agent == "react" else "humanevalfix-reflect_react-native"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["oracle"][folder]["pass@1"] == 1.0 and summary["null"][folder]["pass@1"] == 0.0
    assert "native" in r.stdout and "…" not in r.stdout  # the table names the folder, wrapped, never cut
    for model in ("oracle", "null"):
        for t in traces(out, model):
            assert validate_trace(t) == [], t["task_id"]
            assert t["agent"]["protocol"] == "native" and t["scenario"] == folder
            assert {s["function"]["name"] for s in t["prompt"]["tools"]} >= {"read_file", "write_file", "run_tests"}
            assert "TOOL_CALL" not in t["prompt"]["system"]
    oracle = [s for t in traces(out, "oracle") for s in t["steps"] if s.get("phase", "react") == "react"]
    calls = [s for s in oracle if s["type"] == "tool_call"]
    if agent == "react":  # the oracle's calls alternate: <tool_call> text, then a server's structured call
        assert calls and all(s["repairs"] == [] for s in calls)
        assert any("server_calls" in s for s in oracle) and any("<tool_call>" in s.get("raw", "") for s in oracle)
    null = traces(out, "null")
    assert all(t["outcome"]["exit_reason"] == "submitted" for t in null)
    # null's reply without a call is the protocol's FINAL; the submit check refuses it once (tests fail)
    assert all(sum(s["type"] == "submit_check" for s in t["steps"]) == 1 for t in null)


def test_text_and_native_runs_keep_apart_and_fingerprints_differ(tmp_path: Path) -> None:
    out = tmp_path / "out"
    for protocol in ("text", "native"):
        r = cli("--models", "oracle", "--n", "2", "--agent", "react", "--protocol", protocol, "--out", str(out))
        assert r.returncode == 0, r.stderr
    text = sorted((out / "oracle" / "humanevalfix" / "gold").glob("run_*.json"))
    native = sorted((out / "oracle" / "humanevalfix-native" / "gold").glob("run_*.json"))
    assert len(text) == len(native) == 2
    t, n = (json.loads(p[0].read_text()) for p in (text, native))
    assert "protocol" not in t["agent"] and "tools" not in t["prompt"]  # text traces as before 1.8
    assert t["fingerprint"]["hash"] != n["fingerprint"]["hash"]
    before = [p.read_text() for p in native]
    r = cli("--models", "oracle", "--n", "2", "--agent", "react", "--protocol", "native", "--resume", "--out",
            str(out))
    assert r.returncode == 0, r.stderr
    assert [p.read_text() for p in native] == before  # the native traces' fingerprints match: reused as they are


def test_model_preference_and_override(tmp_path: Path) -> None:
    """models.yaml's `protocol` picks the protocol; --protocol overrides it; reflect calls no tools."""
    (tmp_path / "models.yaml").write_text(
        "models:\n  - name: native-oracle\n    backend: scripted\n    script: oracle\n    protocol: native\n")
    out = tmp_path / "out"
    assert cli("--models", "native-oracle", "--n", "1", "--agent", "react", "--out", str(out),
               cwd=tmp_path).returncode == 0
    assert [t["agent"]["protocol"] for t in traces(out, "native-oracle")] == ["native"]
    out2 = tmp_path / "out2"
    assert cli("--models", "native-oracle", "--n", "1", "--agent", "react", "--protocol", "text", "--out",
               str(out2), cwd=tmp_path).returncode == 0
    assert ["protocol" in t["agent"] for t in traces(out2, "native-oracle")] == [False]
    out3 = tmp_path / "out3"
    assert cli("--models", "native-oracle", "--n", "1", "--agent", "reflect", "--out", str(out3),
               cwd=tmp_path).returncode == 0
    [t] = traces(out3, "native-oracle")
    assert t["scenario"] == "humanevalfix-reflect" and "protocol" not in t["agent"]


def test_condensed_history_is_refused_with_native() -> None:
    with pytest.raises(ConfigError, match="condensed"):
        AgentConfig(protocol="native", history="condensed")
    r = cli("--models", "oracle", "--n", "1", "--protocol", "native", "--history", "condensed", "--out", "/tmp/x")
    assert r.returncode != 0 and "condensed" in r.stderr and len(r.stderr.strip().splitlines()) == 1


# -- one episode, driven by hand ----------------------------------------------------------------------------

class Recorder:
    """The scripted backend, with each prompt and sampling parameters the episode sent."""

    def __init__(self, replies: list[Completion]) -> None:
        self.replies = replies
        self.prompts: list[Conversation] = []
        self.params: list[GenParams] = []

    def __call__(self, conversation: Conversation, params: GenParams, meta: RequestMeta) -> Completion:
        self.prompts.append(conversation)
        self.params.append(params)
        return self.replies[meta.turn]


def reply(text: str, *calls: NativeCall) -> Completion:
    return Completion(text, 10, 5, "stop", 0.01, tool_calls=calls)


def tagged(name: str, **args: object) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"


@pytest.fixture
def workspace() -> Iterator[Workspace]:
    ws = Workspace.create(TASK.files, test_cmd=TASK.test_cmd, limits=LIMITS)
    yield ws
    ws.cleanup()


def trace_of(ep: Episode) -> dict[str, Any]:
    return json.loads(json.dumps({
        "prompt": {"system": ep.system_prompt, "task": ep.user_prompt, "demo": ep.demo},
        "agent": {"format_reminder": ep.config.format_reminder, "protocol": "native"},
        "steps": [s.dump() for s in ep.steps]}))


def test_native_episode_messages_and_rebuilt_prompts(workspace: Workspace) -> None:
    script = [
        reply("I read it first.\n" + tagged("read_file", path="calc.py")),
        reply("", NativeCall("write_file", json.dumps({"path": "calc.py", "content": FIXED}), "srv_1")),
        reply('```json\n{"name": "run_tests", "arguments": {}}\n```'),  # a fence: repaired, recorded
        reply("<tool_call>{not json}</tool_call>"),  # a broken call: a format error, not a FINAL
        reply("Fixed add."),
    ]
    rec = Recorder(script)
    ep = Episode(TASK, workspace, GenParams(max_tokens=200), AgentConfig(protocol="native", submit_checks=1))
    ep.run(rec)
    assert ep.exit_reason == "submitted" and ep.final == "Fixed add."
    assert (workspace.root / "calc.py").read_text() == FIXED
    assert all(p.tools and {t.name for t in p.tools} == set(ep.tools) for p in rec.params)
    assert "\nTHOUGHT:" not in rec.params[0].stop and "<|im_end|>" in rec.params[0].stop
    last = rec.prompts[-1][ep.first_turn:]
    roles = [m["role"] for m in last]
    assert roles == ["assistant", "tool", "assistant", "tool", "assistant", "tool", "assistant", "user"]
    assert last[0]["content"] == "I read it first." and last[0]["tool_calls"][0]["function"] == {
        "name": "read_file", "arguments": {"path": "calc.py"}}
    assert last[1]["tool_call_id"] == last[0]["tool_calls"][0]["id"] and "def add" in last[1]["content"]
    assert not last[1]["content"].startswith("OBSERVATION")
    assert last[7]["content"].startswith("FORMAT ERROR:") and "<tool_call>" in last[7]["content"]
    steps = [s.dump() for s in ep.steps]
    assert [s["repairs"] for s in steps if s["type"] == "tool_call"] == [[], [], ["json_fence"]]
    assert [s for s in steps if "server_calls" in s][0]["server_calls"] == [
        {"name": "write_file", "arguments": json.dumps({"path": "calc.py", "content": FIXED}), "id": "srv_1"}]
    assert sum(s["type"] == "parse_error" for s in steps) == 1
    for turn, sent in enumerate(rec.prompts):
        assert rebuild_prompt(trace_of(ep), turn) == sent


def test_native_demo_and_schemas_are_the_tools_the_episode_has(workspace: Workspace) -> None:
    ep = Episode(TASK, workspace, GenParams(), AgentConfig(protocol="native"))
    ep.begin()
    demo_roles = [m["role"] for m in ep.demo]
    assert demo_roles == ["user", "assistant", "tool", "assistant", "tool", "assistant", "tool", "assistant"]
    assert all("THOUGHT" not in m["content"] for m in ep.demo)
    names = [s["function"]["name"] for s in tool_schemas(ep.params.tools)]
    assert names == list(ep.tools)


def test_the_scripted_backend_answers_native_requests_natively() -> None:
    backend = ScriptedBackend("oracle")
    task = Task(id="t", scenario="unit", statement="s", files={}, oracle=[
        {"tool": "read_file", "args": {"path": "a.py"}}, {"tool": "run_tests", "args": {}}])
    try:
        text = complete_all(backend, [[{"role": "user", "content": "go"}]], GenParams(),
                            [RequestMeta(task, "react", 0)])[0]
        assert text.text.startswith("THOUGHT:") and text.tool_calls == ()
        native = GenParams(tools=(ToolSpec("read_file", "read"), ToolSpec("run_tests", "test")))
        first, second, last = (complete_all(backend, [[{"role": "user", "content": "go"}]], native,
                                            [RequestMeta(task, "react", k)])[0] for k in range(3))
        assert "<tool_call>" in first.text and first.tool_calls == ()
        assert second.tool_calls == (NativeCall("run_tests", "{}", "scripted_1"),) and "<tool_call>" not in second.text
        assert last.tool_calls == () and "FINAL" not in last.text
    finally:
        backend.close()


# -- tool_choice required: every reply is a prefilled call, the submit tool finishes ------------------------

@pytest.mark.parametrize("agent", ["react", "reflect-react"])
def test_required_tool_choice_end_to_end(tmp_path: Path, agent: str) -> None:
    out = tmp_path / "out"
    r = cli("--models", "oracle,null", "--n", "3", "--agent", agent, "--protocol", "native", "--tool-choice",
            "required", "--out", str(out))
    assert r.returncode == 0, r.stderr
    folder = "humanevalfix" + ("" if agent == "react" else "-reflect_react") + "-native-required"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["oracle"][folder]["pass@1"] == 1.0 and summary["null"][folder]["pass@1"] == 0.0
    for model in ("oracle", "null"):
        for t in traces(out, model):
            assert validate_trace(t) == [], t["task_id"]
            assert t["agent"]["tool_choice"] == "required" and t["prompt"]["prefill"] == CALL_PREFILL
            assert "submit" in {s["function"]["name"] for s in t["prompt"]["tools"]}
            react = [s for s in t["steps"] if s.get("phase", "react") == "react" and "raw" in s]
            assert all(s["raw"].startswith(CALL_PREFILL) for s in react)  # the prefill is in the record
            assert react or (model, agent) == ("oracle", "reflect-react")  # that oracle passes in the reflect phase
    for t in traces(out, "null"):  # null submits at once: refused once (tests fail), then accepted
        kinds = [s["type"] for s in t["steps"] if s.get("phase", "react") == "react"]
        assert kinds.count("final") == 2 and kinds.count("submit_check") == 1
        assert t["outcome"]["exit_reason"] == "submitted" and t["outcome"]["final"] == "no changes"


def test_required_tool_choice_needs_native() -> None:
    with pytest.raises(ConfigError, match="tool-choice"):
        AgentConfig(protocol="text", tool_choice="required")
    r = cli("--models", "oracle", "--n", "1", "--protocol", "text", "--tool-choice", "required", "--out", "/tmp/x")
    assert r.returncode != 0 and "tool-choice" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_required_episode_prefills_every_turn_and_rebuilds(workspace: Workspace) -> None:
    def rest(name: str, **args: object) -> str:  # what a model writes after the prefilled start of a call
        return tagged(name, **args)[len(CALL_PREFILL):]

    script = [
        reply(rest("read_file", path="calc.py")),
        reply("oops, prose"),  # after the prefill: a broken call, a format error
        reply(rest("write_file", path="calc.py", content=FIXED)),
        reply(rest("run_tests")),
        reply(rest("submit", summary="Fixed add.")),
    ]
    rec = Recorder(script)
    config = AgentConfig(protocol="native", tool_choice="required")
    ep = Episode(TASK, workspace, GenParams(max_tokens=200), config)
    ep.run(rec)
    assert ep.exit_reason == "submitted" and ep.final == "Fixed add."
    assert (workspace.root / "calc.py").read_text() == FIXED
    assert all(p[-1] == {"role": "assistant", "content": CALL_PREFILL} for p in rec.prompts)
    assert all("submit" in {t.name for t in p.tools} for p in rec.params)
    assert "call submit" in ep.system_prompt and "no tool call" not in ep.system_prompt
    assert ep.demo[-1]["tool_calls"][0]["function"]["name"] == "submit"
    assert all(m["content"] == "" for m in ep.demo if m["role"] == "assistant")  # bare calls, as the prefill makes
    sent = rec.prompts[-1]
    assert sent[-2]["role"] == "tool" and "call submit" in sent[-2]["content"]
    error = next(m for m in sent if m["role"] == "user" and m["content"].startswith("FORMAT ERROR"))
    assert "call submit" in error["content"] and "no tool call" not in error["content"]
    steps = [s.dump() for s in ep.steps]
    assert [s["type"] for s in steps if s["type"] in ("tool_call", "parse_error", "final")] == [
        "tool_call", "parse_error", "tool_call", "tool_call", "final"]
    record = trace_of(ep) | {"agent": {"protocol": "native", "tool_choice": "required"}}
    for turn, prompt in enumerate(rec.prompts):
        assert rebuild_prompt(record, turn) == prompt


def test_the_prefilled_call_start_is_the_templates_token_and_nothing_else_is() -> None:
    """The harness's prefill writes the `<tool_call>` token the template writes for calls; the same text in a
    message, or in a continued turn that is not the prefill, stays text."""
    transformers = pytest.importorskip("transformers")
    from agent_harness.backends.chat_ids import chat_ids
    from agent_harness.backends.weights import converted_dir
    from agent_harness.registry import load_registry

    folder = converted_dir(load_registry().resolve("qwen2.5-coder-0.5b")[0])
    if not (folder / "tokenizer.json").is_file():
        pytest.skip(f"the 0.5B folder is not prepared ({folder}; make setup builds it)")
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    tag = tok.convert_tokens_to_ids("<tool_call>")
    said: Conversation = [{"role": "user", "content": f"see {CALL_PREFILL}"}]
    assert chat_ids(tok, [*said, {"role": "assistant", "content": CALL_PREFILL}]).count(tag) == 1
    assert chat_ids(tok, [*said, {"role": "assistant", "content": CALL_PREFILL + "x"}]).count(tag) == 0
    assert chat_ids(tok, said).count(tag) == 0
