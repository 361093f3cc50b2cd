"""--resume checks the run configuration fingerprint; trace files are named by task id (CLI, scripted models)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from agent_harness.sandbox import safewrite
from agent_harness.traces.model import SCHEMA_VERSION
from agent_harness.traces.store import (
    load_traces,
    resume_status,
    task_slug,
    task_slugs,
    validate_trace,
    write_json_atomic,
)

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "run_agents.py"), "--no-embed", "--agent", "react", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})})


def resume_line(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("resume:")]
    assert len(lines) == 1, r.stderr
    return lines[0]


def mtimes(out: Path) -> dict[str, int]:
    return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in out.rglob("run_*.json")}


def test_resume_same_config_redoes_nothing_and_changed_config_redoes_all(tmp_path: Path) -> None:
    out = tmp_path / "t"
    base = ["--models", "oracle", "--n", "3", "--out", str(out)]
    assert cli(*base).returncode == 0
    before = mtimes(out)
    assert sorted(before) == [f"oracle/humanevalfix/gold/run_Python-{i}__s0.json" for i in range(3)]
    header = json.loads((out / "oracle/humanevalfix/gold/run_Python-1__s0.json").read_text())
    assert header["schema_version"] == SCHEMA_VERSION and validate_trace(header) == []
    fp = header["fingerprint"]
    assert len(fp["hash"]) == 64 and fp["config"]["agent"]["demo"] is True
    assert fp["config"]["task"]["id"] == "Python/1" and fp["config"]["model"]["name"] == "oracle"

    r = cli(*base, "--resume")
    assert resume_line(r) == "resume: reused 3, redid 0 (0 config changed, 0 incomplete)"
    assert mtimes(out) == before

    r = cli(*base, "--resume", "--no-demo")
    assert resume_line(r) == "resume: reused 0, redid 3 (3 config changed, 0 incomplete)"
    after = mtimes(out)
    assert sorted(after) == sorted(before) and all(after[k] != before[k] for k in before)
    for p in out.rglob("run_*.json"):
        trace = json.loads(p.read_text())
        assert trace["agent"]["demo"] is False and trace["fingerprint"]["hash"] != fp["hash"]

    # Unfinished and pre-1.3 traces (no fingerprint) are redone too, and said so.
    p0, p2 = (out / f"oracle/humanevalfix/gold/run_Python-{i}__s0.json" for i in (0, 2))
    t0 = json.loads(p0.read_text())
    t0["outcome"]["completed"] = False
    write_json_atomic(p0, t0)
    t2 = json.loads(p2.read_text())
    t2["schema_version"] = "1.2"
    del t2["fingerprint"]
    write_json_atomic(p2, t2)
    r = cli(*base, "--resume", "--no-demo", "--n", "4")
    assert resume_line(r) == "resume: reused 1, redid 3 (1 config changed, 1 incomplete, 1 new)"


def test_seed_and_model_change_the_fingerprint(tmp_path: Path) -> None:
    out = tmp_path / "t"
    base = ["--models", "oracle", "--n", "2", "--out", str(out)]
    assert cli(*base).returncode == 0
    assert resume_line(cli(*base, "--resume", "--seed", "1")) == \
        "resume: reused 0, redid 2 (2 config changed, 0 incomplete)"
    assert resume_line(cli(*base, "--resume", "--seed", "1", "--max-steps", "11")) == \
        "resume: reused 0, redid 2 (2 config changed, 0 incomplete)"
    registry = tmp_path / "models.yaml"
    registry.write_text((ROOT / "models.yaml").read_text().replace("name: oracle", "name: oracle\n    max_tokens: 99"))
    assert resume_line(cli(*base, "--registry", str(registry), "--resume", "--seed", "1", "--max-steps", "11")) == \
        "resume: reused 0, redid 2 (2 config changed, 0 incomplete)"


SCENARIO = """\
description: resume test
labels:
  gold: {}
defaults:
  test_cmd: [python3, -m, unittest, discover, -s, tests]
score:
  pass:
    - {kind: tests_pass}
tasks:
"""


def task(tid: str) -> str:
    return (f"  - id: {tid}\n    statement: Set x to 2 in a.py.\n"
            f'    files: {{a.py: "x = 1\\n", tests/test_a.py: "import unittest\\n"}}\n'
            f'    oracle:\n      - {{tool: write_file, args: {{path: a.py, content: "x = 2\\n"}}}}\n')


def test_inserting_a_task_moves_no_file(tmp_path: Path) -> None:
    scen = tmp_path / "scen" / "ins"
    scen.mkdir(parents=True)
    env = {"AGENT_HARNESS_SCENARIOS": str(tmp_path / "scen")}
    out = tmp_path / "t"
    args = ["--models", "oracle", "--scenario", "ins", "--out", str(out)]
    (scen / "scenario.yaml").write_text(SCENARIO + task("alpha/1") + task("gamma"))
    assert cli(*args, env=env).returncode == 0
    before = mtimes(out)
    assert sorted(before) == ["oracle/ins/gold/run_alpha-1__s0.json", "oracle/ins/gold/run_gamma__s0.json"]

    (scen / "scenario.yaml").write_text(SCENARIO + task("alpha/1") + task("beta") + task("gamma"))
    r = cli(*args, "--resume", env=env)
    assert resume_line(r) == "resume: reused 2, redid 1 (0 config changed, 0 incomplete, 1 new)"
    after = mtimes(out)
    assert {k: after[k] for k in before} == before and "oracle/ins/gold/run_beta__s0.json" in after
    by_id = {json.loads(p.read_text())["task_id"]: p.name for p in out.rglob("run_*.json")}
    assert by_id == {"alpha/1": "run_alpha-1__s0.json", "beta": "run_beta__s0.json", "gamma": "run_gamma__s0.json"}


def test_table_and_summary_cover_this_run_only(tmp_path: Path) -> None:
    out = tmp_path / "t"
    assert cli("--models", "oracle", "--n", "2", "--out", str(out)).returncode == 0
    r = cli("--models", "null", "--n", "3", "--out", str(out))
    assert r.returncode == 0, r.stderr
    notes = [line for line in r.stderr.splitlines() if line.startswith("note:")]
    assert notes == [f"note: {out} also holds 2 trace(s) of other configurations; "
                     "the table and summary.json cover this run's 3 episode(s) only"]
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary) == ["null"] and summary["null"]["humanevalfix"]["n_episodes"] == 3
    assert "oracle" not in r.stdout

    r = cli("--models", "null", "--n", "3", "--out", str(out), "--no-format-reminder")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["null"]["humanevalfix"]["n_episodes"] == 3  # the rewritten traces, not old plus new
    assert "also holds 2 trace(s)" in r.stderr


def test_old_traces_still_load_for_analysis(tmp_path: Path) -> None:
    out = tmp_path / "t"
    assert cli("--models", "oracle", "--n", "1", "--out", str(out)).returncode == 0
    [new] = out.rglob("run_*.json")
    old: dict[str, Any] = json.loads(new.read_text())
    old["schema_version"] = "1.2"
    del old["fingerprint"]
    write_json_atomic(new.with_name("run_000.json"), old)  # a 1.2 trace, named by position
    assert validate_trace(old) == []
    frames = load_traces(out)
    assert frames.skipped == [] and len(frames.runs) == 2
    assert sorted(frames.runs["fingerprint"].isna()) == [False, True]
    assert resume_status(new.with_name("run_000.json"), "x") == "changed"
    assert resume_status(new.with_name("missing.json"), "x") == "new"


def test_task_slugs_are_safe_stable_and_distinct() -> None:
    assert task_slug("Python/5") == "Python-5"
    assert task_slug("../../etc/passwd") == "etc-passwd"
    assert task_slug("...").startswith("") and "/" not in task_slug("...") and task_slug("...")
    long = task_slug("x" * 300)
    assert len(long) <= 90 and long != task_slug("x" * 299)
    ids = ["a/b", "a-b", "a b", "c"]
    slugs = task_slugs(ids)
    assert slugs == task_slugs(reversed(ids))  # independent of the order tasks come in
    assert len(set(slugs.values())) == 4 and slugs["c"] == "c"
    assert all(s.startswith("a-b.") for t, s in slugs.items() if t != "c")


def test_shards_split_a_run_and_the_last_summary_covers_all(tmp_path: Path) -> None:
    """Two processes with --shard 0/2 and 1/2 and one --out: disjoint tasks, one summary of all, same traces."""
    out = tmp_path / "t"
    base = [sys.executable, str(ROOT / "run_agents.py"), "--no-embed", "--agent", "react", "--models", "oracle,null",
            "--n", "5", "--samples", "2", "--out", str(out)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    procs = [subprocess.Popen([*base, "--shard", f"{i}/2"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in (0, 1)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    names = sorted(str(p.relative_to(out)) for p in out.rglob("run_*.json"))
    assert names == sorted(f"{m}/humanevalfix/gold/run_Python-{i}__s{k}.json"
                           for m in ("oracle", "null") for i in range(5) for k in range(2))
    # the unsharded run with the same flags finds every trace done (shards do not enter the
    # fingerprint) and rewrites the summary of all: the recipe after the last shard
    (out / "summary.json").unlink()
    r = cli("--models", "oracle,null", "--n", "5", "--samples", "2", "--out", str(out), "--resume")
    assert resume_line(r) == "resume: reused 20, redid 0 (0 config changed, 0 incomplete)"
    summary = json.loads((out / "summary.json").read_text())
    for model, rate in (("oracle", 1.0), ("null", 0.0)):
        row = summary[model]["humanevalfix"]
        assert (row["n_tasks"], row["n_episodes"], row["pass@1"]) == (5, 10, rate)
    # a shard resumes its own tasks only
    r = cli("--models", "oracle", "--n", "5", "--samples", "2", "--out", str(out), "--resume", "--shard", "1/2")
    assert resume_line(r) == "resume: reused 4, redid 0 (0 config changed, 0 incomplete)"

    for bad in ("2/2", "1", "-1/2", "a/b", "0/0"):
        r = cli("--models", "oracle", "--n", "1", "--out", str(tmp_path / "bad"), "--shard", bad)
        assert r.returncode == 2 and "--shard" in r.stderr and "I/N" in r.stderr, (bad, r.stderr)
        assert not (tmp_path / "bad").exists()


def test_a_run_removes_a_killed_writes_temp_files_not_a_live_ones(tmp_path: Path) -> None:
    """Shards of one run share their folders, and a run removes the temp files a killed run's last write left.
    It once removed another shard's write in progress too (that episode ended in an error, scored failed):
    a write holds a lock on its temp file, and only an unlocked one a minute old is removed."""
    gold = tmp_path / "t" / "oracle" / "humanevalfix" / "gold"
    gold.mkdir(parents=True)
    hour_ago = time.time() - 3600
    killed = gold / ".run_Python-1__s0.json.0123456789ab.tmp"
    killed.write_text("{")
    os.utime(killed, (hour_ago, hour_ago))
    fresh = gold / ".run_Python-2__s0.json.0123456789ab.tmp"  # a moment old: kept, in case it is live
    fresh.write_text("{")
    started, release = threading.Event(), threading.Event()

    def slow(f: Any) -> None:
        f.write(b"{}")
        f.flush()
        live = next(gold.glob(".run_Python-3__s0.json.*.tmp"))
        os.utime(live, (hour_ago, hour_ago))  # the lock alone keeps it
        started.set()
        release.wait(120)

    writer = threading.Thread(target=safewrite.write_file, args=(gold, "run_Python-3__s0.json", slow))
    writer.start()
    try:
        assert started.wait(30)
        r = cli("--models", "oracle", "--n", "1", "--out", str(tmp_path / "t"))
        assert r.returncode == 0, r.stderr
    finally:
        release.set()
        writer.join(30)
    assert (gold / "run_Python-3__s0.json").read_text() == "{}"  # the live write landed
    assert not killed.exists() and fresh.exists()
    assert json.loads((gold / "run_Python-0__s0.json").read_text())["outcome"]["passed"]


def test_replaced_traces_are_set_aside_not_overwritten(tmp_path: Path) -> None:
    """A complete trace a run replaces (another configuration under --resume, any without it) is kept
    beside it as run_*.json.superseded-<fingerprint>; partial traces are redone; no loader reads the kept ones."""
    out = tmp_path / "t"
    base = ["--models", "oracle", "--n", "2", "--out", str(out)]
    assert cli(*base).returncode == 0
    p1 = out / "oracle/humanevalfix/gold/run_Python-1__s0.json"
    first = json.loads(p1.read_text())
    p0 = p1.with_name("run_Python-0__s0.json")
    first0 = json.loads(p0.read_text())["fingerprint"]["hash"][:12]

    r = cli(*base, "--resume", "--no-demo")
    assert resume_line(r) == "resume: reused 0, redid 2 (2 config changed, 0 incomplete)"
    assert "kept 2 complete trace(s)" in r.stderr
    kept = p1.with_name(f"{p1.name}.superseded-{first['fingerprint']['hash'][:12]}")
    assert json.loads(kept.read_text()) == first
    assert json.loads(p1.read_text())["agent"]["demo"] is False

    r = cli(*base, "--resume", "--no-demo")  # same configuration: reused, nothing set aside
    assert resume_line(r) == "resume: reused 2, redid 0 (0 config changed, 0 incomplete)"
    assert "kept" not in r.stderr

    t0 = json.loads(p0.read_text())
    t0["outcome"]["completed"] = False
    write_json_atomic(p0, t0)
    r = cli(*base, "--no-demo")  # no --resume: the complete one is kept, the partial one is not
    assert r.returncode == 0 and "kept 1 complete trace(s)" in r.stderr, r.stderr
    now = json.loads(p1.read_text())["fingerprint"]["hash"][:12]
    assert sorted(p.name for p in p1.parent.iterdir()) == sorted([
        "run_Python-0__s0.json", f"run_Python-0__s0.json.superseded-{first0}",
        "run_Python-1__s0.json", kept.name, f"{p1.name}.superseded-{now}",
    ])
    assert len(load_traces(out).runs) == 2 and "also holds" not in r.stderr
