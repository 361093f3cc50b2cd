"""The whole path CLI → agent → sandbox → trace → pass@1, with the scripted backend."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agent_harness.run.planning import in_flight
from agent_harness.traces.store import load_traces, validate_trace

ROOT = Path(__file__).resolve().parent.parent
VOLATILE = {"run_id", "timestamp", "latency_s", "elapsed_seconds", "harness_version", "concurrency", "duration_s"}


def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, str(ROOT / "run_agents.py"), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout, env=env)


def strip(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: strip(v) for k, v in obj.items() if k not in VOLATILE}
    if isinstance(obj, list):
        return [strip(v) for v in obj]
    return obj


def traces(out: Path) -> dict[str, dict[str, Any]]:
    return {str(p.relative_to(out)): json.loads(p.read_text()) for p in sorted(out.rglob("run_*.json"))}


def test_oracle_and_null_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "traces"
    r = cli("--models", "oracle,null", "--agent", "react", "--n", "6", "--out", str(out), "--no-embed")
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["oracle"]["humanevalfix"]["pass@1"] == 1.0
    assert summary["null"]["humanevalfix"]["pass@1"] == 0.0
    assert summary["oracle"]["humanevalfix"]["n_tasks"] == 6
    found = traces(out)
    assert len(found) == 12
    for name, data in found.items():
        assert validate_trace(data) == [], name
        assert data["outcome"]["completed"] and data["outcome"]["exit_reason"] == "submitted"
        assert data["sandbox"] in ("bwrap", "rlimit")
        assert data["model"]["backend"] == "scripted"
    oracle0 = found["oracle/humanevalfix/gold/run_Python-0__s0.json"]
    kinds = [s["type"] for s in oracle0["steps"]]
    assert kinds[:4] == ["initial_tests", "thought", "tool_call", "tool_result"] and kinds[-1] == "final"
    assert "has_close_elements" in oracle0["outcome"]["diff"]
    assert found["null/humanevalfix/gold/run_Python-0__s0.json"]["outcome"]["diff"] == ""
    assert "pass@1" in r.stdout and "oracle" in r.stdout
    frames = load_traces(out)
    assert len(frames.runs) == 12 and not frames.skipped
    assert set(frames.steps["type"]) >= {"thought", "tool_call", "tool_result", "final"}


def test_bogus_scenario_scores_zero_for_oracle(tmp_path: Path) -> None:
    out = tmp_path / "t"
    r = cli("--models", "oracle", "--agent", "react", "--scenario", "bogus", "--out", str(out), "--no-embed")
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["oracle"]["bogus"]["pass@1"] == 0.0
    assert summary["oracle"]["bogus"]["n_tasks"] >= 3


def _write_script(path: Path) -> None:
    """A replay script mixing malformed replies, tool errors, a repeated call and a submit."""
    replies = [
        "I think the bug is in the loop.",  # no TOOL_CALL, no FINAL -> parse error
        'THOUGHT: look\nTOOL_CALL: {"tool": "read_file", "args": {"path": "../../etc/passwd"}}',
        'THOUGHT: list\nTOOL_CALL: {"tool": "list_dir", "args": {"path": "."}}',
        'THOUGHT: list again\nTOOL_CALL: {"tool": "list_dir", "args": {"path": "."}}',
        'THOUGHT: tests\nTOOL_CALL: {"tool": "run_tests", "args": {}}',
        "THOUGHT: give up\nFINAL: could not fix",
    ]
    path.write_text("\n".join(json.dumps(r) for r in replies) + "\n")


def _registry(tmp_path: Path, script: Path, batch_delay_s: float = 0.0) -> Path:
    reg = tmp_path / "models.yaml"
    delay = f", batch_delay_s: {batch_delay_s}" if batch_delay_s else ""
    reg.write_text(
        "models:\n"
        f"  - {{name: replay, backend: scripted, script: {json.dumps(str(script))}{delay}}}\n"
        f"  - {{name: oracle, backend: scripted, script: oracle{delay}}}\n"
    )
    return reg


def test_malformed_replies_become_observations(tmp_path: Path) -> None:
    script = tmp_path / "s.jsonl"
    _write_script(script)
    out = tmp_path / "t"
    r = cli("--registry", str(_registry(tmp_path, script)), "--models", "replay", "--agent", "react", "--n", "1",
            "--out", str(out), "--no-embed")
    assert r.returncode == 0, r.stderr
    [data] = traces(out).values()
    steps = [s for s in data["steps"] if s["type"] != "initial_tests"]
    assert steps[0]["type"] == "parse_error" and "TOOL_CALL" in steps[0]["text"]
    results = [s for s in steps if s["type"] == "tool_result"]
    assert "ERROR" in results[0]["text"]  # escape refused, episode goes on
    assert "same call twice" in results[2]["text"]
    assert data["outcome"]["exit_reason"] == "submitted" and data["outcome"]["passed"] is False
    # the first FINAL is refused (the tests fail) and shown the failure; the next one is accepted
    assert [s["type"] for s in steps].count("submit_check") == 1 and data["outcome"]["num_turns"] == 7


def test_batched_equals_sequential(tmp_path: Path) -> None:
    script = tmp_path / "s.jsonl"
    _write_script(script)
    reg = _registry(tmp_path, script)
    outs = {}
    for conc in ("1", "7"):
        out = tmp_path / f"c{conc}"
        r = cli("--registry", str(reg), "--models", "replay,oracle", "--agent", "react", "--n", "7",
                "--concurrency", conc, "--out", str(out), "--no-embed")
        assert r.returncode == 0, r.stderr
        outs[conc] = {k: strip(v) for k, v in traces(out).items()}
    assert len(outs["1"]) == 14
    assert outs["1"] == outs["7"]


def test_concurrent_episodes_share_batches(tmp_path: Path) -> None:
    """Episodes in flight together reach the backend together: the scripted backend's own batches hold
    several requests, and the run log says how many were in flight on average. Each batch takes 0.5 s, as a
    model's would: with instant batches, sharing one hung on requests arriving in the same instant, which a
    loaded machine's staggered sandbox starts made fail."""
    script = tmp_path / "s.jsonl"
    _write_script(script)
    out = tmp_path / "t"
    r = cli("--registry", str(_registry(tmp_path, script, batch_delay_s=0.5)), "--models", "replay,oracle",
            "--agent", "react", "--n", "6",
            "--concurrency", "6", "--out", str(out), "--no-embed")
    assert r.returncode == 0, r.stderr
    stats = [json.loads(x) for x in (out / "runs.jsonl").read_text().splitlines()]
    assert [s["model"] for s in stats] == ["replay", "oracle"]
    for s in stats:
        assert s["requests"] >= 6 and s["mean_batch"] >= 1.0
        assert s["backend_stats"]["batches"] < s["requests"]  # some requests shared a batch
        assert s["backend_stats"]["mean_batch"] > 1.0


def test_max_steps_exit_reason(tmp_path: Path) -> None:
    script = tmp_path / "s.jsonl"
    script.write_text(json.dumps('THOUGHT: x\nTOOL_CALL: {"tool": "list_dir", "args": {}}') + "\n" +
                      json.dumps('THOUGHT: y\nTOOL_CALL: {"tool": "git_diff", "args": {}}') + "\n")
    out = tmp_path / "t"
    r = cli("--registry", str(_registry(tmp_path, script)), "--models", "replay", "--agent", "react", "--n", "1",
            "--max-steps", "2", "--out", str(out), "--no-embed")
    assert r.returncode == 0, r.stderr
    [data] = traces(out).values()
    assert data["outcome"]["exit_reason"] == "max_steps" and data["outcome"]["num_turns"] == 2


def _completed(p: Path) -> bool:
    try:
        return bool(json.loads(p.read_text())["outcome"]["completed"])
    except (OSError, ValueError, KeyError):
        return False


def test_kill_and_resume(tmp_path: Path) -> None:
    out = tmp_path / "t"
    n = 60
    args = [sys.executable, str(ROOT / "run_agents.py"), "--models", "oracle", "--agent", "react", "--n", str(n),
            "--out", str(out), "--no-embed", "--concurrency", "4"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        done = [p for p in out.rglob("run_*.json") if _completed(p)]
        if len(done) >= 8:
            break
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    files = list(out.rglob("run_*.json"))
    for p in files:
        json.loads(p.read_text())  # never corrupt, whatever the moment of the kill
    complete_before = {p: p.stat().st_mtime_ns for p in files if json.loads(p.read_text())["outcome"]["completed"]}
    assert 8 <= len(complete_before) < n
    r = cli("--models", "oracle", "--agent", "react", "--n", str(n), "--out", str(out), "--no-embed", "--resume")
    assert r.returncode == 0, r.stderr
    for p, mtime in complete_before.items():
        assert p.stat().st_mtime_ns == mtime, f"{p} was redone"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["oracle"]["humanevalfix"]["n_tasks"] == n
    assert summary["oracle"]["humanevalfix"]["pass@1"] == 1.0
    assert not list(out.rglob("*.tmp"))


@pytest.mark.parametrize("flags,msg", [
    (["--n", "0"], "--n must be > 0"),
    (["--scenario", "nope"], "unknown scenario 'nope'"),
    (["--dataset-path", "/nonexistent.jsonl"], "file not found"),
    (["--tasks", "Python/999"], "Python/999"),
    (["--label", "nope"], "unknown label 'nope'"),
    (["--dataset-hub"], "bigcode/humanevalpack"),  # datasets missing or the hub unreachable: one line
])
def test_bad_flags_one_line(flags: list[str], msg: str, tmp_path: Path) -> None:
    r = cli("--models", "oracle", "--out", str(tmp_path / "t"), "--no-embed", *flags)
    assert r.returncode == 2, r.stderr
    assert msg in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_single_shot_baseline_oracle_and_null(tmp_path: Path) -> None:
    out = tmp_path / "t"
    r = cli("--models", "oracle,null", "--mode", "single-shot", "--n", "5", "--out", str(out), "--no-embed")
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["oracle"]["humanevalfix-single_shot"]["pass@1"] == 1.0
    assert summary["null"]["humanevalfix-single_shot"]["pass@1"] == 0.0
    for name, data in traces(out).items():
        assert validate_trace(data) == [], name
        assert [s["type"] for s in data["steps"]] == ["final"] and data["outcome"]["completed"]
        assert data["agent"]["mode"] == "single_shot"


def test_sigterm_stops_cleanly(tmp_path: Path) -> None:
    """SIGTERM unwinds like Ctrl-C (backends close, so no engine process outlives the run)."""
    out = tmp_path / "t"
    args = [sys.executable, str(ROOT / "run_agents.py"), "--models", "oracle", "--n", "60", "--out", str(out),
            "--no-embed", "--concurrency", "2"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(_completed(p) for p in out.rglob("run_*.json")):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "rerun with --resume" in err
    for p in out.rglob("run_*.json"):
        json.loads(p.read_text())


@pytest.mark.model
def test_real_model_end_to_end_with_kv_reuse(tmp_path: Path) -> None:
    """The embedded 0.5B on transformers, through the CLI: valid traces, backend recorded, and the
    second turn's prompt served from the KV store (tokens.cached), counted up to runs.jsonl."""
    import yaml

    reg = yaml.safe_load((ROOT / "models.yaml").read_text())
    spec = next(m for m in reg["models"] if m["name"] == reg["default"])
    small = {**spec, "name": "small", "aliases": [], "backend": "transformers", "max_tokens": 48}
    registry = tmp_path / "models.yaml"
    registry.write_text(yaml.safe_dump({"default": "small", "models": [small]}))
    out = tmp_path / "traces"
    r = cli("--registry", str(registry), "--agent", "react", "--n", "2", "--max-steps", "2", "--concurrency", "2",
            "--out", str(out), "--no-embed", "--no-progress")
    assert r.returncode == 0, r.stderr
    found = traces(out)
    assert len(found) == 2
    for name, data in found.items():
        assert validate_trace(data) == [], name
        assert data["model"]["backend"] == "transformers" and data["model"]["device"] == "cpu"
        replies = [s for s in data["steps"] if "tokens" in s]
        assert len(replies) == 2, name  # --max-steps 2; a first FINAL is refused while the tests fail
        first, second = (s["tokens"] for s in replies)
        assert first["cached"] < first["prompt"] and 0 < second["cached"] < second["prompt"], name
        assert second["cached"] >= first["prompt"] - 1  # the whole first prompt was reused
        out_tokens = data["outcome"]
        assert out_tokens["cached_prompt_tokens"] == first["cached"] + second["cached"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["small"]["humanevalfix"]["n_tasks"] == 2
    [timing] = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert timing["cached_prompt_tokens"] == sum(d["outcome"]["cached_prompt_tokens"] for d in found.values())
    frames = load_traces(out)
    assert frames.runs["cached_prompt_tokens"].sum() == timing["cached_prompt_tokens"]
    assert frames.steps["cached_tokens"].notna().sum() == 4


# More files than the workspace quota: the scorer refuses to copy them (ScoreError), so no verdict.
# Three commands, so each stays well inside the scenario's 10-second command limit on a loaded machine.
SABOTAGE = [
    *("THOUGHT: break the scorer\nTOOL_CALL: " + json.dumps(
        {"tool": "run_cmd", "args": {"cmd": f"python3 -c \"[open(f'f{k}_{{i}}', 'w').close() for i in range(3400)]\""}})
      for k in range(3)),
    "THOUGHT: done\nFINAL: done",
    "THOUGHT: done\nFINAL: done",
]


@pytest.mark.parametrize("scenario,label", [("prompt_injection", "delete_files"),
                                            ("supply_chain_poisoning", "all"), ("repo_bugfix", "gold")])
def test_scorer_fault_is_unscored_never_resisted(scenario: str, label: str, tmp_path: Path) -> None:
    """A workspace the scorer cannot copy (a file flood) makes score() raise: no verdict (not a fail, not resisted)."""
    script = tmp_path / "s.jsonl"
    script.write_text("".join(json.dumps(r) + "\n" for r in SABOTAGE))
    out = tmp_path / "t"
    r = cli("--registry", str(_registry(tmp_path, script)), "--models", "replay", "--scenario", scenario,
            "--label", label, "--n", "1", "--out", str(out), "--no-embed", "--no-progress")
    assert r.returncode == 0, r.stderr
    found = traces(out)
    assert found
    for name, data in found.items():
        outcome = data["outcome"]
        assert validate_trace(data) == [], name
        assert outcome["completed"] and outcome["passed"] is None and outcome["compromised"] is None, name
        assert set(outcome["score_error"]) == {"type", "message"} and outcome["score_error"]["type"], name
        assert outcome["exit_reason"] == "error" and outcome["error"].startswith("scoring failed: "), name
    summary = json.loads((out / "summary.json").read_text())
    entry = summary["replay"][scenario]
    assert entry["unscored"] == entry["n_episodes"] == len(found)
    assert entry["pass@1"] is None
    for s in entry["by_label"].values():
        assert s["unscored"] == s["n_episodes"] and s.get("compromise_rate") is None  # never "resisted"
    assert "warning:" in r.stdout and "unscored" in r.stdout


def _call(tool: str, **args: object) -> str:
    # json.dumps escapes a lone surrogate as \ud800: the six characters a model writes
    return "THOUGHT: try\nTOOL_CALL: " + json.dumps({"tool": tool, "args": args})


CRASHERS = {  # each of these replies once ended the whole run with a traceback and no summary
    "surrogate path": (_call("read_file", path="calc\ud800.py"), "ERROR: argument 'path' holds a lone surrogate"),
    "surrogate command": (_call("run_cmd", cmd="echo \udfff"), "ERROR: argument 'cmd' holds a lone surrogate"),
    "huge argv": (_call("run_cmd", cmd="echo " + "a" * 300_000), "ERROR: the command line is too long"),
    "long name": (_call("write_file", path="n" * 300, content="x"), "ERROR: a file or folder name in the path"),
    "long path": (_call("list_dir", path="/".join(["d" * 250] * 20)), "ERROR: the path is too long"),
}


def test_hostile_replies_through_the_cli(tmp_path: Path) -> None:
    script = tmp_path / "s.jsonl"
    replies = [reply for reply, _ in CRASHERS.values()] + ["THOUGHT: done\nFINAL: done"] * 2
    script.write_text("".join(json.dumps(r) + "\n" for r in replies))
    out = tmp_path / "t"
    r = cli("--registry", str(_registry(tmp_path, script)), "--models", "replay", "--agent", "react", "--n", "2",
            "--out", str(out), "--no-embed", "--no-progress")
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["replay"]["humanevalfix"]["n_episodes"] == 2
    for name, data in traces(out).items():
        assert validate_trace(data) == [], name
        assert data["outcome"]["completed"] and data["outcome"]["exit_reason"] == "submitted", name
        results = [s["text"] for s in data["steps"] if s["type"] == "tool_result"]
        assert len(results) == len(CRASHERS)
        for (kind, (_, expected)), text in zip(CRASHERS.items(), results, strict=True):
            assert text.startswith(expected), (kind, text[:200])
        args = [s["args"] for s in data["steps"] if s["type"] == "tool_call"]
        assert args[0]["path"] == "calc\ufffd.py"  # recorded, made valid UTF-8 by the trace writer


def test_episodes_in_flight_default_to_the_backends_measured_number(tmp_path: Path) -> None:
    """Without --concurrency a model runs its own number for the backend that runs it (`in_flight` in
    models.yaml), else that backend's default (32 on vllm, whose engine ran faster so; 16 elsewhere),
    picked by the backend that runs after any fallback; the flag overrides both."""
    assert (in_flight(None, "vllm"), in_flight(None, "transformers"), in_flight(None, "scripted")) == (32, 16, 16)
    assert in_flight(5, "vllm") == 5
    own = {"vllm": 12}
    assert in_flight(None, "vllm", own) == 12 and in_flight(5, "vllm", own) == 5
    assert in_flight(None, "transformers", own) == 16  # after a fallback: that backend's default
    script = tmp_path / "s.jsonl"
    _write_script(script)
    reg = _registry(tmp_path, script)
    reg.write_text(reg.read_text() + "  - {name: own, backend: scripted, script: oracle, in_flight: {scripted: 3}}\n")
    for model, flag, want in (("oracle", (), 16), ("oracle", ("--concurrency", "5"), 5), ("own", (), 3),
                              ("own", ("--concurrency", "5"), 5)):
        out = tmp_path / f"t-{model}-{want}"
        r = cli("--registry", str(reg), "--models", model, "--agent", "react",
                "--n", "2", *flag, "--out", str(out), "--no-embed")
        assert r.returncode == 0, r.stderr
        [stats] = [json.loads(x) for x in (out / "runs.jsonl").read_text().splitlines()]
        assert stats["concurrency"] == want
        assert {t["agent"]["concurrency"] for t in traces(out).values()} == {want}
