"""Traces in other tools' formats: ATIF and Inspect exports (round trips), imports of the real tools' files
(mini-swe-agent and Inspect, made by tests/data/formats/make_fixtures.py), and the analyses over a folder
that mixes native and imported episodes (issue 47's done-when).

The native traces come from real scripted runs (CLI -> agent -> sandbox -> trace) of every strategy.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent_harness.traces.formats import atif
from agent_harness.traces.formats._episode import EXTRA_KEY
from agent_harness.traces.formats.importing import import_traces, load_verdicts, task_from_path
from agent_harness.traces.store import load_traces, validate_trace

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data" / "formats"
MINI, INSPECT = DATA / "mini", DATA / "inspect"
RUNS = {"react": ("--agent", "react"), "native": ("--agent", "react", "--protocol", "native"),
        "reflect": ("--agent", "reflect"), "single-shot": ("--agent", "single-shot"),
        "reflect-react": ("--agent", "reflect-react")}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent_harness.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def traces_in(folder: Path) -> dict[str, dict[str, Any]]:
    """run_id -> trace, for every trace under `folder`."""
    found = {}
    for p in folder.rglob("run_*.json"):
        data = json.loads(p.read_text())
        found[data["run_id"]] = data
    return found


def without(trace: dict[str, Any], *keys: str) -> dict[str, Any]:
    """`trace` without `keys` and without step embeddings (imports compute them again)."""
    out = {k: v for k, v in trace.items() if k not in keys}
    out["steps"] = [{k: v for k, v in s.items() if k != "embedding"} for s in trace["steps"]]
    return out


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Scripted runs of every strategy (and both tool protocols) on Python/0 and Python/1."""
    out = tmp_path_factory.mktemp("native")
    for name, flags in RUNS.items():
        r = cli("run", "--models", "oracle,null", *flags, "--n", "2", "--out", str(out / name), "--no-embed",
                "--no-progress")
        assert r.returncode == 0, r.stderr[-3000:]
    assert len(list(out.rglob("run_*.json"))) == 20
    return out


# -- ATIF -------------------------------------------------------------------------------------------------
def test_every_atif_export_validates_and_an_import_gives_the_traces_back(native: Path, tmp_path: Path) -> None:
    r = cli("export", str(native), "--to", str(tmp_path / "atif"), "--format", "atif")
    assert r.returncode == 0, r.stderr
    files = sorted((tmp_path / "atif").rglob("*.atif.json"))
    assert len(files) == 20 and "20 ATIF trajectories" in r.stdout
    schema = json.loads(atif.SCHEMA_PATH.read_text())
    assert "v1.7" in schema["title"]
    for f in files:
        doc = json.loads(f.read_text())
        assert doc["schema_version"] == "ATIF-v1.7" and atif.check(doc) == [], f
    r = cli("import", str(tmp_path / "atif"), "--to", str(tmp_path / "back"), "--no-embed")
    assert r.returncode == 0, r.stderr
    before, after = traces_in(native), traces_in(tmp_path / "back")
    assert sorted(before) == sorted(after)
    for run_id, trace in before.items():
        back = after[run_id]
        # the same steps (every field), verdicts and token counts: the whole trace, with its source added
        assert without(back, "schema_version", "source") == without(trace, "schema_version", "source"), run_id
        assert back["source"]["format"] == "atif" and back["source"]["harness"] == "agent-harness"
        assert validate_trace(back) == []


def test_the_atif_fields_hold_the_episode_without_our_extras(native: Path, tmp_path: Path) -> None:
    """What another ATIF reader sees: a plain import (our records taken out) types the same steps."""
    assert cli("export", str(native / "react"), "--to", str(tmp_path / "atif"), "--format", "atif").returncode == 0
    plain = tmp_path / "plain"
    plain.mkdir()
    for f in (tmp_path / "atif").rglob("*.atif.json"):
        doc = json.loads(f.read_text())
        doc.pop("extra")
        for step in doc["steps"]:
            step.pop("extra", None)
        assert atif.check(doc) == []
        (plain / f.parent.relative_to(tmp_path / "atif")).mkdir(parents=True, exist_ok=True)
        (plain / f.relative_to(tmp_path / "atif")).write_text(json.dumps(doc))
    done = import_traces(plain, tmp_path / "back", scenario="humanevalfix", label="gold")
    assert len(done.written) == 4 and not done.skipped
    back = {(t["model"]["name"], t["task_id"]): t for t in traces_in(tmp_path / "back").values()}
    for trace in traces_in(native / "react").values():
        got = back[(trace["model"]["name"], trace["task_id"])]
        model_steps = [s for s in trace["steps"] if s["type"] in ("thought", "tool_call", "tool_result", "final")]
        kinds = [s["type"] for s in got["steps"] if s["type"] != "feedback"]
        assert kinds == [s["type"] for s in model_steps]
        for mine, theirs in zip(model_steps, (s for s in got["steps"] if s["type"] != "feedback"), strict=True):
            assert (theirs.get("tool"), theirs.get("args"), theirs.get("call_id")) == (
                mine.get("tool"), mine.get("args"), mine.get("call_id"))
            if mine["type"] != "final":  # FINAL's text is its reply's; the payload has no ATIF field
                assert theirs["text"] == mine["text"]
            if mine["type"] == "thought":  # the reply's record: raw text and tokens (ATIF message and metrics)
                assert (theirs["raw"], theirs.get("tokens")) == (mine["raw"], mine.get("tokens"))
        # initial_tests, submit checks: what the harness told the model, as feedback
        told = [s["text"] for s in trace["steps"] if s["type"] not in ("thought", "tool_call", "tool_result", "final")]
        assert [s["text"] for s in got["steps"] if s["type"] == "feedback"] == told
        for key in ("prompt_tokens", "completion_tokens", "cached_prompt_tokens"):
            assert got["outcome"][key] == trace["outcome"][key]
        assert len(got["prompt"]["demo"]) == len(trace["prompt"]["demo"]) == 8  # the worked example: copied context
        assert got["outcome"]["passed"] is None  # no verdict in plain ATIF: from --verdicts, else none


def test_an_atif_trajectory_written_from_the_rfc_fields(tmp_path: Path) -> None:
    """A trajectory shaped as the RFC lays it out (user prompt, an agent step with two calls, a final answer)."""
    doc = {"schema_version": "ATIF-v1.5", "session_id": "s-1", "agent": {"name": "some-agent", "version": "0.3",
                                                                           "model_name": "m-1"},
           "steps": [{"step_id": 1, "source": "user", "message": "Fix Python/0."},
                     {"step_id": 2, "source": "agent", "message": "Looking.", "reasoning_content": "Two reads.",
                      "tool_calls": [{"tool_call_id": "a", "function_name": "read", "arguments": {"p": "x.py"}},
                                     {"tool_call_id": "b", "function_name": "read", "arguments": {"p": "y.py"}}],
                      "observation": {"results": [{"source_call_id": "a", "content": "X"},
                                                  {"source_call_id": "b", "content": [{"type": "text", "text": "Y"}]}]},
                      "metrics": {"prompt_tokens": 100, "completion_tokens": 10, "cached_tokens": 40}},
                     {"step_id": 3, "source": "agent", "message": "Done: fixed.",
                      "metrics": {"prompt_tokens": 130, "completion_tokens": 5}}],
           "final_metrics": {"total_prompt_tokens": 230, "total_completion_tokens": 15, "total_cached_tokens": 40}}
    assert atif.check(doc) == []
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "Python-0.json").write_text(json.dumps(doc))
    done = import_traces(tmp_path / "src", tmp_path / "out", scenario="humanevalfix")
    [trace] = traces_in(tmp_path / "out").values()
    assert len(done.written) == 1 and trace["task_id"] == "Python/0" and trace["source"]["harness"] == "some-agent"
    assert [s["type"] for s in trace["steps"]] == ["thought", "tool_call", "tool_call", "tool_result", "tool_result",
                                                   "final"]
    assert trace["steps"][0]["tokens"] == {"prompt": 100, "completion": 10, "cached": 40}
    assert [s["text"] for s in trace["steps"][3:]] == ["X", "Y", "Done: fixed."]
    assert trace["steps"][4]["tool"] == "read" and trace["steps"][4]["call_id"] == "b"
    assert (trace["outcome"]["prompt_tokens"], trace["outcome"]["cached_prompt_tokens"]) == (230, 40)
    assert trace["outcome"]["exit_reason"] == "submitted" and trace["prompt"]["task"] == "Fix Python/0."
    bad = copy.deepcopy(doc)
    bad["steps"][1]["observation"]["results"][0]["source_call_id"] = "nope"
    bad["steps"][2]["step_id"] = 7
    assert len(atif.check(bad)) == 2
    user_metrics = copy.deepcopy(doc)
    user_metrics["steps"][0]["metrics"] = {"prompt_tokens": 1}
    assert atif.check(user_metrics)  # agent-only fields on a user step


# -- mini-swe-agent ---------------------------------------------------------------------------------------
def test_mini_swe_agent_trajectories_import_with_typed_steps_tokens_and_verdicts(tmp_path: Path) -> None:
    verdicts = load_verdicts(MINI / "verdicts.json")
    assert verdicts == {"Python/0": True, "Python/1": False}
    done = import_traces(MINI, tmp_path, scenario="humanevalfix", verdicts=verdicts)
    assert len(done.written) == 2 and not done.skipped and len(done.ignored) == 1  # verdicts.json is no trajectory
    by_task = {t["task_id"]: t for t in traces_in(tmp_path).values()}
    assert set(by_task) == {"Python/0", "Python/1"}  # file names (Python-0) mapped to the scenario's ids
    fixed, broken = by_task["Python/0"], by_task["Python/1"]
    raw = json.loads((MINI / "Python-0.traj.json").read_text())
    for t in (fixed, broken):
        assert t["source"]["format"] == "mini-swe-agent" and t["source"]["harness"] == "mini-swe-agent"
        assert t["source"]["format_version"] == raw["trajectory_format"]
        assert t["model"]["name"] == "openai/scripted-fixer" and t["agent"]["protocol"] == "native"
        assert t["outcome"]["exit_reason"] == "submitted" and validate_trace(t) == []
        assert t["prompt"]["task"].startswith("Please solve this issue: Task " + t["task_id"])
    assert (fixed["outcome"]["passed"], broken["outcome"]["passed"]) == (True, False)
    assert fixed["source"]["details"]["verdict_from"] == "verdicts file"
    assert [s["type"] for s in fixed["steps"]] == ["thought", "tool_call", "tool_result"] * 4 + ["final"]
    assert fixed["steps"][1]["args"]["command"].startswith("cat ") and fixed["steps"][1]["tool"] == "bash"
    assert fixed["outcome"]["final"].startswith("diff --git") and "abs(elem - elem2)" in fixed["outcome"]["final"]
    usage = [m["extra"]["response"]["usage"] for m in raw["messages"] if m["role"] == "assistant"]
    assert fixed["outcome"]["prompt_tokens"] == sum(u["prompt_tokens"] for u in usage)
    assert fixed["outcome"]["completion_tokens"] == sum(u["completion_tokens"] for u in usage)
    assert fixed["outcome"]["cached_prompt_tokens"] == sum(u["prompt_tokens_details"]["cached_tokens"] for u in usage)
    # the reply mini refused (no tool call) is a parse_error: the reply as raw, mini's format error as text
    [refused] = [s for s in broken["steps"] if s["type"] == "parse_error"]
    assert refused["raw"] == "The module looks right to me." and "No tool calls found" in refused["text"]
    again = import_traces(MINI, tmp_path, scenario="humanevalfix", verdicts=verdicts)
    assert again.already == 2 and not again.written  # the same file's episodes are not imported twice


def test_task_ids_from_file_names() -> None:
    assert task_from_path("Python-0.traj.json") == "Python-0"
    assert task_from_path("job/Python-3__abc/agent/trajectory.json") == "Python-3__abc"
    assert task_from_path("x/trajectory.atif.json") == "x"
    assert task_from_path("oracle/humanevalfix/gold/run_Python-0__s3.atif.json") == "Python-0"


# -- Inspect ----------------------------------------------------------------------------------------------
def test_an_inspect_log_made_by_inspect_imports(tmp_path: Path) -> None:
    [log] = INSPECT.glob("*.eval")
    done = import_traces(log, tmp_path, label="gold")
    assert len(done.written) == 2 and not done.skipped
    by_task = {t["task_id"]: t for t in traces_in(tmp_path).values()}
    fixed, not_fixed = by_task["Python/0"], by_task["Python/1"]
    assert fixed["scenario"] == "humanevalfix" and fixed["model"]["name"] == "mockllm/model"
    assert (fixed["outcome"]["passed"], not_fixed["outcome"]["passed"]) == (True, False)  # the scores C and I
    assert [s["type"] for s in fixed["steps"]] == ["thought", "tool_call", "tool_result"] * 2 + ["final"]
    assert fixed["steps"][1]["tool"] == "write_module" and "abs(" in fixed["steps"][1]["args"]["content"]
    assert fixed["steps"][5]["text"] == "Tests PASSED."
    assert [s["tokens"]["prompt"] for s in fixed["steps"] if "tokens" in s] == [100, 150, 200]  # per model event
    assert fixed["outcome"]["prompt_tokens"] == 450 and fixed["outcome"]["completion_tokens"] == 60
    assert fixed["source"]["harness"] == "inspect" and fixed["source"]["episode"] in (0, 1)
    assert fixed["outcome"]["score_details"]["inspect_score"]["value"] == "C"


def test_the_inspect_export_reads_back_with_read_eval_log(native: Path, tmp_path: Path) -> None:
    from inspect_ai.log import read_eval_log

    r = cli("export", str(native), "--to", str(tmp_path / "logs"), "--format", "inspect")
    assert r.returncode == 0, r.stderr
    logs = sorted((tmp_path / "logs").glob("*.eval"))
    assert len(logs) == 10  # oracle and null x 4 scenarios, and the native protocol's two arms
    traces = list(traces_in(native).values())
    seen = 0
    for path in logs:
        log = read_eval_log(str(path))
        assert log.status == "success" and log.samples
        harness, model = log.eval.model.split("/", 1)
        assert harness == "agent-harness"
        for s in log.samples:
            [t] = [t for t in traces if t["task_id"] == s.id and t["model"]["name"] == model
                   and t["scenario"] == log.eval.task and t["run_id"] == s.metadata[EXTRA_KEY]["header"]["run_id"]]
            out = t["outcome"]
            assert s.epoch == t["sample"] + 1 and s.input == t["prompt"]["task"]
            assert s.scores is not None and s.scores["agent_harness"].value == ("C" if out["passed"] else "I")
            usage = s.model_usage[log.eval.model]
            assert usage.input_tokens + (usage.input_tokens_cache_read or 0) == out["prompt_tokens"]
            assert usage.output_tokens == out["completion_tokens"]
            calls = [c.function for m in s.messages if m.role == "assistant" for c in (m.tool_calls or [])]
            assert calls == [st["tool"] for st in t["steps"] if st["type"] == "tool_call" and st.get("call_id")]
            tool_texts = [m.text for m in s.messages if m.role == "tool"]
            assert tool_texts == [st["text"] for st in t["steps"] if st["type"] == "tool_result"]
            seen += 1
        assert log.results is not None and log.results.scores[0].metrics["accuracy"].value in (0.0, 1.0)
    assert seen == 20
    r = cli("import", str(tmp_path / "logs"), "--to", str(tmp_path / "back"), "--no-embed")
    assert r.returncode == 0, r.stderr
    before, after = traces_in(native), traces_in(tmp_path / "back")
    for run_id, trace in before.items():
        assert without(after[run_id], "schema_version", "source") == without(trace, "schema_version", "source")


def test_export_format_errors_are_one_line(native: Path, tmp_path: Path) -> None:
    r = cli("export", str(native), "--to", str(tmp_path / "x"), "--format", "atif", "--push-to-hub", "a/b")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--format hf" in r.stderr
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("x")
    r = cli("export", str(native), "--to", str(tmp_path / "full"), "--format", "inspect")
    assert r.returncode == 2 and "not an empty folder" in r.stderr
    r = cli("import", str(tmp_path / "missing"), "--to", str(tmp_path / "y"), "--no-embed")
    assert r.returncode == 2 and "not found" in r.stderr


# -- the analyses over native and imported episodes (issue 47's done-when) -----------------------------------
def test_compare_models_and_the_report_keep_harnesses_apart(native: Path, tmp_path: Path) -> None:
    mixed = tmp_path / "mixed"
    assert cli("run", "--models", "oracle,null", "--agent", "react", "--n", "2", "--out", str(mixed), "--no-embed",
               "--no-progress").returncode == 0
    r = cli("import", str(MINI), "--to", str(mixed), "--scenario", "humanevalfix", "--verdicts",
            str(MINI / "verdicts.json"), "--no-embed")
    assert r.returncode == 0 and "imported 2 episode(s)" in r.stdout, r.stderr
    frames = load_traces(mixed)
    assert sorted(frames.runs["harness"].unique()) == ["agent-harness", "mini-swe-agent"]
    assert set(frames.runs.loc[frames.runs["harness"] == "mini-swe-agent", "source_format"]) == {"mini-swe-agent"}
    r = cli("analyze", "report", str(mixed), "--skip", "similarity,spectral")
    assert r.returncode == 0, r.stderr
    import pandas as pd

    table = pd.read_csv(mixed / "analysis" / "pass_at_k.csv", keep_default_na=False)  # a model named null
    assert set(zip(table["harness"], table["model"], strict=True)) == {
        ("agent-harness", "oracle"), ("agent-harness", "null"), ("mini-swe-agent", "openai/scripted-fixer")}
    pairs = pd.read_csv(mixed / "analysis" / "pairwise.csv", keep_default_na=False)
    # arms: "model (protocol) [harness]" (mini-swe-agent calls tools natively, the scripted runs in text)
    arm, oracle = "openai/scripted-fixer (native) [mini-swe-agent]", "oracle (text) [agent-harness]"
    [vs_oracle] = pairs[((pairs["model A"] == arm) & (pairs["model B"] == oracle))
                        | ((pairs["model B"] == arm) & (pairs["model A"] == oracle))].to_dict("records")
    assert vs_oracle["common tasks"] == 2 and vs_oracle["both"] == 1 and 0 <= vs_oracle["McNemar p"] <= 1
    html = (mixed / "analysis" / "report.html").read_text()
    data = json.loads(re.search(r'<script type="application/json" id="trace-data">(.*?)</script>', html, re.S)[1])
    for task in data["tasks"]:  # each task: the native episodes and mini-swe-agent's, side by side, named as above
        shown = {data["episodes"][i]["model"] for i in task["episodes"]}
        assert shown == {oracle, "null (text) [agent-harness]", arm}
    assert arm in html.split('id="trace-data"')[0]  # the headline's column


@pytest.mark.slow
def test_imported_episodes_are_embedded_and_their_trajectories_compared(tmp_path: Path) -> None:
    """Embeddings on import (all-MiniLM-L6-v2, offline): the similarity analyses see both harnesses' arms."""
    pytest.importorskip("sentence_transformers")
    mixed = tmp_path / "mixed"
    assert cli("run", "--models", "oracle", "--agent", "react", "--n", "2", "--out", str(mixed),
               "--no-progress").returncode == 0
    r = cli("import", str(MINI), "--to", str(mixed), "--scenario", "humanevalfix")
    assert r.returncode == 0, r.stderr
    imported = [t for t in traces_in(mixed).values() if "source" in t]
    assert len(imported) == 2
    for t in imported:
        assert t["embeddings"] == {"model": "sentence-transformers/all-MiniLM-L6-v2", "dim": 384}
        assert all(len(s["embedding"]) == 384 for s in t["steps"])
    r = cli("analyze", "trajectory_similarity", str(mixed))
    assert r.returncode == 0, r.stderr
    text = (mixed / "analysis" / "trajectory_similarity.md").read_text()
    assert "openai/scripted-fixer \\[mini-swe-agent\\]" in text and "oracle \\[agent-harness\\]" in text
