"""Cross-model trace analysis: loader, compare_models, trajectory_similarity, spectral, report, screenshot."""

from __future__ import annotations

import json
import math
import os
import re
import struct
import subprocess
import sys
from pathlib import Path
from subprocess import PIPE

import numpy as np
import pandas as pd
import pytest

from agent_harness.analysis import _synthetic as syn
from agent_harness.analysis import compare_models, report, spectral, trajectory_similarity
from agent_harness.analysis._common import only_completed, write_section
from agent_harness.analysis.screenshot import find_chromium, run_chromium
from agent_harness.metrics import wilson_interval
from agent_harness.traces.store import SCHEMA_VERSION, load_traces, validate_trace, write_json_atomic

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}  # the scripts import this checkout's package, not an installed one
Z = 1.959964
PLANT = "<script>document.title='PWNED'</script></script><img src=x onerror=alert(1)>"


def _load(root: Path):
    return only_completed(load_traces(root))


def _script(name: str, *args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, f"analysis/{name}.py", *map(str, args)], capture_output=True,
                          text=True, cwd=ROOT, timeout=180, env=ENV)


# -- synthetic traces and the loader -------------------------------------------------------------------
def test_synthetic_traces_follow_the_schema(tmp_path: Path) -> None:
    paths = syn.oracle_null_set(tmp_path, n_tasks=2, labels=("gold", "typosquat"))
    paths += syn.oracle_null_set(tmp_path / "noembed", n_tasks=1, dim=None)
    native = syn.episode("m", "humanevalfix", "gold", 0, True, np.random.default_rng(0), dim=None, protocol="native")
    assert native["agent"]["protocol"] == "native"
    paths.append(syn.write(tmp_path / "native", native))
    for p in paths:
        assert validate_trace(json.loads(p.read_text())) == [], p


def test_loader_builds_an_embedding_matrix_aligned_with_steps(tmp_path: Path) -> None:
    paths = syn.oracle_null_set(tmp_path, n_tasks=3, dim=16)
    frames = load_traces(tmp_path)
    assert len(frames.runs) == 6 and not frames.skipped
    assert frames.embeddings.shape == (len(frames.steps), 16) and frames.embeddings.dtype == np.float32
    assert frames.steps["has_embedding"].all()
    expected = [s["embedding"] for p in sorted(paths) for s in json.loads(p.read_text())["steps"]]
    np.testing.assert_allclose(frames.embeddings, np.array(expected, dtype=np.float32), atol=1e-6)
    oracle = frames.runs[frames.runs["model"] == "oracle"].iloc[0]
    # the oracle submits on its second turn: the runner's num_turns does not count that turn
    assert oracle["turns_used"] == 2 and oracle["num_turns"] == 1
    assert oracle["embedding_model"] == syn.EMBEDDING_MODEL


def test_loader_keeps_tool_args_named_embedding_and_odd_vectors(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    trace = syn.episode("m", "humanevalfix", "gold", 0, True, rng, turns=2, dim=8)
    call = next(s for s in trace["steps"] if s["type"] == "tool_call")
    call["args"] = {"embedding": [1, 2, 3], "path": "x.py"}
    call["text"] = '{"embedding":[1,2,3]}'
    trace["steps"][0]["embedding"] = [0.5] * 5  # another size: no row for this step
    assert validate_trace(trace) == []
    syn.write(tmp_path, trace)
    for validate in (False, True):
        frames = load_traces(tmp_path, validate=validate)
        steps = frames.steps
        row = steps[steps["type"] == "tool_call"].iloc[0]
        assert row["args"] == {"embedding": [1, 2, 3], "path": "x.py"} and row["text"] == call["text"]
        assert steps["has_embedding"].tolist() == [False] + [True] * (len(steps) - 1)
        assert np.isnan(frames.embeddings[0]).all()
        np.testing.assert_allclose(frames.embeddings[1], trace["steps"][1]["embedding"], atol=1e-6)


def test_corrupt_and_partial_files_are_skipped_and_reported(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    syn.oracle_null_set(tmp_path, n_tasks=2)
    good = next(tmp_path.rglob("run_*.json"))
    text = good.read_text()
    bad = tmp_path / "oracle" / "humanevalfix" / "gold"
    (bad / "run_101.json").write_text(text[: len(text) // 2])  # truncated mid-write (not via the writer)
    (bad / "run_102.json").write_text(text.replace(f'"schema_version":"{SCHEMA_VERSION}"', '"schema_version":"0.9"'))
    (bad / "run_103.json").write_text("[1, 2]")
    (bad / "run_104.json").write_text(json.dumps({"schema_version": SCHEMA_VERSION, "steps": []}))
    partial = json.loads(text)
    partial["outcome"]["completed"] = False
    write_json_atomic(bad / "run_105.json", partial)
    frames = load_traces(tmp_path)
    assert len(frames.skipped) == 4 and len(frames.runs) == 5
    reasons = "\n".join(frames.skipped)
    assert "run_101.json: JSONDecodeError" in reasons and "schema_version '0.9'" in reasons
    assert "run_103.json" in reasons and "run_104.json: KeyError" in reasons
    assert len(_load(tmp_path).runs) == 4  # the incomplete episode is left out of the analyses
    compare_models.main([str(tmp_path), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert "skipped 4 unreadable trace file(s)" in err and "run_101.json: JSONDecodeError" in err
    assert "ignoring 1 incomplete episode(s)" in err
    assert (tmp_path / "o" / "pass_at_k.csv").is_file()


def test_an_empty_folder_is_an_error_not_a_crash(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no complete traces"):
        compare_models.main([str(tmp_path)])
    with pytest.raises(SystemExit, match="is not a folder"):
        compare_models.main([str(tmp_path / "missing")])


# -- compare_models ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def oracle_null(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("oracle_null")
    syn.oracle_null_set(root, n_tasks=8, scenarios=("humanevalfix", "supply_chain_poisoning"),
                        labels=("gold", "typosquat"), samples=2)
    return root


def test_pass_table_oracle_and_null(oracle_null: Path) -> None:
    table = compare_models.pass_table(_load(oracle_null).runs, n_boot=200)
    table = table.set_index(["model", "scenario", "label"])
    assert len(table) == 8 and set(table["episodes"]) == {16} and set(table["tasks"]) == {8}
    n = 16
    oracle, null = table.xs("oracle"), table.xs("null")
    assert (oracle["pass@1"] == 1.0).all() and (null["pass@1"] == 0.0).all()
    # Wilson at p = 1: lower bound n / (n + z²); at p = 0 the mirror image
    assert np.allclose(oracle["pass@1 lo"], n / (n + Z * Z)) and (oracle["pass@1 hi"] == 1.0).all()
    assert (null["pass@1 lo"] == 0.0).all() and np.allclose(null["pass@1 hi"], 1 - n / (n + Z * Z))
    assert (oracle["pass@2"] == 1.0).all() and (null["pass@2"] == 0.0).all()
    assert (oracle["pass@2 lo"] == 1.0).all() and (null["pass@2 hi"] == 0.0).all()
    attack = table.xs("typosquat", level="label")
    assert attack.loc["null", "compromised"].eq(1.0).all()
    assert attack.loc["oracle", "compromised"].eq(0.0).all()
    assert table.xs("gold", level="label")["compromised"].isna().all()


def test_pass_table_mixed_rates_use_wilson() -> None:
    runs = pd.DataFrame({"model": "m", "scenario": "s", "label": "gold",
                         "task_id": [f"t{i}" for i in range(10)],
                         "passed": [True] * 3 + [False] * 7, "compromised": None})
    row = compare_models.pass_table(runs).iloc[0]
    assert row["pass@1"] == 0.3 and (row["pass@1 lo"], row["pass@1 hi"]) == wilson_interval(3, 10)
    assert math.isclose(row["pass@1 lo"], 0.1078, abs_tol=1e-4)  # textbook Wilson 3/10
    assert "pass@2" not in row.index and "compromised" not in row.index and row["unscored"] == 0


def test_pass_table_leaves_unscored_episodes_out_of_the_rates() -> None:
    """A scorer fault (passed null) is neither a pass nor a fail: as in summary.json, it is counted apart."""
    runs = pd.DataFrame({"model": "m", "scenario": "s", "label": ["gold"] * 10 + ["x"],
                         "task_id": [f"t{i}" for i in range(11)],
                         "passed": [True] * 3 + [False] * 6 + [None, None], "compromised": None})
    gold, x = (r for _, r in compare_models.pass_table(runs).iterrows())
    assert (gold["episodes"], gold["unscored"], gold["passed"]) == (10, 1, 3)
    assert gold["pass@1"] == 3 / 9 and (gold["pass@1 lo"], gold["pass@1 hi"]) == wilson_interval(3, 9)
    assert (x["episodes"], x["unscored"]) == (1, 1) and pd.isna(x["pass@1"])  # nothing scored: no rate


def test_pairwise_counts(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    for i in range(6):
        for model, ok in (("oracle", True), ("null", False), ("even", i % 2 == 0)):
            syn.write(tmp_path, syn.episode(model, "humanevalfix", "gold", i, ok, rng, dim=None))
    syn.write(tmp_path, syn.episode("oracle", "humanevalfix", "gold", 6, True, rng, dim=None))  # only oracle
    pairs, only, matrix = compare_models.pairwise(_load(tmp_path).runs)
    pairs = pairs.set_index(["model A", "model B"])
    row = pairs.loc[("null", "oracle")]
    assert (row["common tasks"], row["both"], row["only A"], row["only B"], row["neither"]) == (6, 0, 0, 6, 0)
    assert math.isclose(row["McNemar p"], 2 * 0.5**6)
    row = pairs.loc[("even", "oracle")]
    assert (row["both"], row["only A"], row["only B"]) == (3, 0, 3)
    row = pairs.loc[("even", "null")]
    assert (row["only A"], row["only B"], row["neither"], row["McNemar p"]) == (3, 0, 3, 0.25)
    m = matrix.set_index(matrix.columns[0])
    assert m.loc["oracle", "null"] == 6 and m.loc["null", "oracle"] == 0 and m.loc["oracle", "even"] == 3
    assert sorted(only.loc[only["solved by"] == "oracle"].groupby("not solved by").size().items()) == [
        ("even", 3), ("null", 6)]
    assert set(only.loc[(only["solved by"] == "oracle") & (only["not solved by"] == "even"), "task_id"]) == {
        "Python/1", "Python/3", "Python/5"}


def test_pass_vs_steps_budget_curve(oracle_null: Path) -> None:
    curve = compare_models.pass_vs_steps(_load(oracle_null).runs)
    oracle = curve[(curve["model"] == "oracle") & (curve["label"] == "gold")]
    oracle = oracle.groupby("max turns")["pass@1"].mean()
    assert oracle[1] == 0.0 and oracle[2] == 1.0 and oracle[4] == 1.0
    assert (curve.loc[curve["model"] == "null", "pass@1"] == 0).all()


def test_tool_usage_and_parse_errors(oracle_null: Path) -> None:
    frames = _load(oracle_null)
    tools = compare_models.tool_usage(frames.runs, frames.steps)
    per_model = tools.groupby("model")["calls/episode"].sum()
    assert per_model["oracle"] == 1.0 and per_model["null"] == 2.0  # 2 turns: 1 call; 4 turns, 1 parse error
    errors = compare_models.parse_errors(frames.runs).groupby("model")["episodes with one"].mean()
    assert errors["null"] == 1.0 and errors["oracle"] == 0.0


def _two_protocols(root: Path) -> None:
    """Model m on five tasks in each protocol. text: tasks 0-1 pass, 3 turns each, parse errors 1 and 2 in
    episodes 0 and 1. native: tasks 0-3 pass, 2 turns each, one parse error in episode 4."""
    rng = np.random.default_rng(4)
    for i in range(5):
        for protocol, ok, turns, errors in (("text", i < 2, 3, (1, 2, 0, 0, 0)[i]),
                                            ("native", i < 4, 2, (0, 0, 0, 0, 1)[i])):
            trace = syn.episode("m", "humanevalfix", "gold", i, ok, rng, turns=turns, dim=None,
                                parse_errors=errors, protocol=protocol)
            syn.write(root / protocol, trace)  # the same task and sample: one folder per protocol


def test_protocols_are_separate_arms(tmp_path: Path) -> None:
    """One model run in both protocols is two rows (never pooled), with its own pass@1 and parse-failure rate."""
    _two_protocols(tmp_path)
    frames = _load(tmp_path)
    assert sorted(frames.runs["protocol"].value_counts().items()) == [("native", 5), ("text", 5)]
    table = compare_models.pass_table(frames.runs, n_boot=50).set_index("protocol")
    assert len(table) == 2 and set(table["model"]) == {"m"} and set(table["episodes"]) == {5}
    assert table.loc["text", "pass@1"] == 2 / 5 and table.loc["native", "pass@1"] == 4 / 5
    assert (table.loc["native", "pass@1 lo"], table.loc["native", "pass@1 hi"]) == wilson_interval(4, 5)

    fails = compare_models.parse_failures(frames.runs).set_index("protocol")
    # text: 5 episodes × 3 turns, 1 + 2 parse errors; native: 5 × 2 turns, 1 parse error
    text, native = fails.loc["text"], fails.loc["native"]
    assert (text["episodes"], text["turns"], text["parse errors"]) == (5, 15, 3)
    assert (native["episodes"], native["turns"], native["parse errors"]) == (5, 10, 1)
    assert math.isclose(text["parse errors/turn"], 0.2) and math.isclose(native["parse errors/turn"], 0.1)
    assert (text["parse errors/turn lo"], text["parse errors/turn hi"]) == wilson_interval(3, 15)
    assert (native["parse errors/turn lo"], native["parse errors/turn hi"]) == wilson_interval(1, 10)
    assert text["episodes with any"] == 2 / 5 and native["episodes with any"] == 1 / 5

    per_scenario = compare_models.parse_errors(frames.runs).set_index("protocol")
    assert per_scenario.loc["text", "parse_errors"] == 3 and per_scenario.loc["native", "parse_errors"] == 1
    tools = compare_models.tool_usage(frames.runs, frames.steps).groupby("protocol")["calls/episode"].sum()
    # a call per turn but the parse errors and the submitting one: text (1 + 0 + 2 + 2 + 2) / 5, native 4 / 5
    assert math.isclose(tools["text"], 7 / 5) and math.isclose(tools["native"], 4 / 5)

    pairs, only, matrix = compare_models.pairwise(frames.runs)
    row = pairs.set_index(["model A", "model B"]).loc[("m (native)", "m (text)")]
    assert (row["common tasks"], row["both"], row["only A"], row["only B"], row["neither"]) == (5, 2, 2, 0, 1)
    assert set(only["solved by"]) == {"m (native)"} and set(only["task_id"]) == {"Python/2", "Python/3"}
    assert matrix.set_index(matrix.columns[0]).loc["m (native)", "m (text)"] == 2

    out = tmp_path / "out"
    out.mkdir()
    md = write_section(compare_models.analyze(frames, out, n_boot=50), out, "compare_models").read_text()
    assert "## Parse failures per protocol" in md and "| m | native | react | 5 | 10 | 1 | 0.100 |" in md
    assert pd.read_csv(out / "parse_failures.csv")["protocol"].tolist() == ["native", "text"]
    assert pd.read_csv(out / "pass_at_k.csv")["protocol"].tolist() == ["native", "text"]
    assert (out / "pass_at_1.png").stat().st_size > 0


def _configs(root: Path, dim: int | None = None) -> None:
    """Model m on five tasks, in the folders a run writes: branch_search with and without deeper_branches
    (tasks 0-3 and 0-1 pass), single_shot (task 0), and react under the native protocol (tasks 0-4)."""
    rng = np.random.default_rng(5)
    branch = {"mode": "branch_search", "strategy": "branch_search", "max_steps": 12, "search_branches": 32,
              "search": {"candidates": 4, "rank": "passed first"}, "concurrency": 16}
    runs = (("deeper", "humanevalfix-branch_search", {**branch, "deeper_branches": True}, 4, "text"),
            ("spread", "humanevalfix-branch_search", {**branch, "concurrency": 8}, 2, "text"),
            ("single", "humanevalfix-single_shot", {"mode": "single_shot", "strategy": "single_shot"}, 1, "text"),
            ("native", "humanevalfix-native", {"mode": "agent", "strategy": "react"}, 5, "native"))
    for folder, scenario, agent, solved, protocol in runs:
        for i in range(5):
            trace = syn.episode("m", scenario, "gold", i, i < solved, rng, dim=dim, protocol=protocol)
            trace["agent"] = {**agent, **({"protocol": "native"} if protocol == "native" else {})}
            syn.write(root / folder, trace)


def test_strategy_configurations_are_arms_that_meet_on_the_same_tasks(tmp_path: Path) -> None:
    """Two configurations of one strategy are two arms (never pooled as samples of one), named by the setting
    that differs; the folder suffixes of strategy and protocol come off the scenario, so every arm of the
    model pairs up with every other on the same five tasks."""
    _configs(tmp_path)
    frames = _load(tmp_path)
    table = compare_models.pass_table(frames.runs, n_boot=50).set_index("config")
    deeper, spread = "branch_search (deeper_branches=true)", "branch_search (deeper_branches=–)"
    assert sorted(table.index) == sorted([deeper, spread, "single_shot", "react"])  # concurrency names none
    assert set(table["scenario"]) == {"humanevalfix"} and set(table["samples/task"]) == {1}
    assert [table.loc[c, "pass@1"] for c in (deeper, spread, "single_shot", "react")] == [0.8, 0.4, 0.2, 1.0]
    assert table.loc["react", "protocol"] == "native" and table.loc[deeper, "protocol"] == "text"

    pairs, only, _ = compare_models.pairwise(frames.runs)
    assert len(pairs) == 6 and set(pairs["common tasks"]) == {5}
    row = pairs.set_index(["model A", "model B"]).loc[(f"m (text) · {deeper}", f"m (text) · {spread}")]
    assert (row["both"], row["only A"], row["only B"], row["neither"]) == (2, 2, 0, 1)
    assert set(only[only["not solved by"] == f"m (text) · {spread}"]["task_id"]) >= {"Python/2", "Python/3"}

    headline = report.summary_table(compare_models.pass_table(frames.runs, n_boot=50))
    assert len(headline) == 1 and headline.loc[0, f"m (text) · {deeper}"].startswith("0.800 [")
    assert headline.loc[0, "m (native) · react"].startswith("1.000 [")

    _configs(tmp_path / "embedded", dim=8)  # the trajectory analysis names the same arms, on the same tasks
    out = tmp_path / "out"
    out.mkdir()
    sec = trajectory_similarity.analyze(_load(tmp_path / "embedded"), out)
    matrix = sec.table("similarity_matrix").set_index("model")
    assert set(matrix.index) == {f"m (text) · {deeper}", f"m (text) · {spread}", "m (text) · single_shot",
                                 "m (native) · react"}
    assert matrix.notna().to_numpy().sum() == 12  # every pair of arms met on the same tasks; none with itself


def test_configuration_labels_stay_apart_when_more_settings_differ_than_they_name() -> None:
    """Four settings differ, three are named: the two configurations alike in those three would share a label,
    so every label carries its digest; a nested record is named only when no setting of its own differs."""
    from agent_harness.analysis import arms

    base = {"a": 1, "b": 1, "c": 1, "d": 1, "search": {"rank": "x"}}
    runs = [json.dumps(v, sort_keys=True) for v in
            (base, {**base, "a": 2}, {**base, "b": 2}, {**base, "c": 2}, {**base, "d": 2})]
    labels = arms._labels("search", runs)
    assert len(set(labels.values())) == 5 and all(re.fullmatch(r".* #[0-9a-f]{6}", v) for v in labels.values())
    assert labels[runs[1]].startswith("search (a=2, b=1, c=1, 1 more) #")
    assert arms._labels("search", runs[:2]) == {runs[0]: "search (a=1)", runs[1]: "search (a=2)"}
    nested = json.dumps({**base, "search": {"rank": "y"}}, sort_keys=True)
    assert arms._labels("search", [runs[0], nested]) == {runs[0]: 'search (search.rank="x")',
                                                         nested: 'search (search.rank="y")'}


def test_two_runs_of_one_model_compare_as_two_arms_from_the_command_line(tmp_path: Path) -> None:
    """The whole path: two real runs of the oracle (react, 12 turns and 1), each its own --out below one folder,
    then `analyze compare_models` on that folder: one pairwise row between the two configurations."""
    def cli(*args: object) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "agent_harness.cli", *map(str, args)], capture_output=True,
                              text=True, cwd=ROOT, timeout=300, env=ENV)

    for name, steps in (("full", 12), ("short", 1)):
        r = cli("run", "--models", "oracle", "--agent", "react", "--max-steps", steps, "--n", 2, "--no-embed",
                "--no-progress", "--out", tmp_path / name)
        assert r.returncode == 0, r.stderr
    r = cli("analyze", "compare_models", tmp_path, "--out", tmp_path / "analysis")
    assert r.returncode == 0, r.stderr
    pairs = pd.read_csv(tmp_path / "analysis" / "pairwise.csv")
    assert pairs[["model A", "model B", "common tasks", "both", "only A", "only B"]].values.tolist() == [
        ["oracle · react (max_steps=1)", "oracle · react (max_steps=12)", 2, 0, 0, 2]]
    table = pd.read_csv(tmp_path / "analysis" / "pass_at_k.csv")
    assert table[["config", "scenario", "episodes", "pass@1"]].values.tolist() == [
        ["react (max_steps=1)", "humanevalfix", 2, 0.0], ["react (max_steps=12)", "humanevalfix", 2, 1.0]]


def test_write_behaviour_shows_a_copy_loop_and_restarts(tmp_path: Path) -> None:
    """Real runs of a scripted model that writes one wrong version again and again, with and without
    --restart-after: the table counts writes, versions, stale writes and restarts per episode."""
    from agent_harness.scenarios import TaskQuery, get_scenario

    task = get_scenario("humanevalfix").load_tasks(TaskQuery(n=1))[0]
    path = task.oracle[1]["args"]["path"]
    wrong = json.dumps({"tool": "write_file", "args": {"path": path, "content": task.files[path] + "\n# v\n"}})
    replies = [f"THOUGHT: fix\nTOOL_CALL: {wrong}"] * 4 + ["THOUGHT: done\nFINAL: done"]
    script = tmp_path / "s.jsonl"
    script.write_text(json.dumps({"task": task.id, "replies": replies}) + "\n")
    registry = tmp_path / "models.yaml"
    registry.write_text(f"models:\n  - {{name: loop, backend: scripted, script: {json.dumps(str(script))}}}\n")
    tables = []
    for extra in ([], ["--restart-after", "2"]):
        out = tmp_path / f"t{len(tables)}"
        r = subprocess.run([sys.executable, "run_agents.py", "--registry", str(registry), "--models", "loop",
                            "--agent", "react", "--n", "1", "--out", str(out), "--no-embed", "--no-submit-check",
                            *extra],
                           capture_output=True, text=True, cwd=ROOT, timeout=300, env={**ENV, "HF_HUB_OFFLINE": "1"})
        assert r.returncode == 0, r.stderr
        frames = _load(out)
        tables.append(compare_models.write_behaviour(frames.runs, frames.steps).iloc[0])
    plain, restarted = tables
    assert (plain["writes/episode"], plain["versions/episode"], plain["stale writes/episode"]) == (4, 1, 3)
    assert plain["restarts/episode"] == 0 and plain["episodes with 2+ versions"] == 0
    # writes 1-3, then a restart puts the file back: write 4 changes it again (not stale), same version
    assert (restarted["writes/episode"], restarted["versions/episode"], restarted["stale writes/episode"]) == (4, 1, 2)
    assert restarted["restarts/episode"] == 1


# -- trajectory_similarity -----------------------------------------------------------------------------
def _identical_pair(root: Path, n_tasks: int = 5, dim: int = 16) -> None:
    """Models a and b take exactly the same steps (same embeddings) on every task."""
    rng = np.random.default_rng(3)
    for i in range(n_tasks):
        steps = syn.agent_steps(3, rng)
        emb = syn.unit_vectors(len(steps), dim, rng)
        for model, ok in (("a", i % 2 == 0), ("b", i % 2 == 0)):
            trace = syn.header(model, "humanevalfix", "gold", f"Python/{i}", i)
            syn.write(root, syn.finish(trace, json.loads(json.dumps(steps)), ok, emb))


def test_identical_trajectories_have_similarity_one(tmp_path: Path) -> None:
    _identical_pair(tmp_path)
    runs, vecs = trajectory_similarity.trajectory_vectors(_load(tmp_path))
    long, matrix = trajectory_similarity.similarity(runs, vecs)
    assert math.isclose(matrix.loc["a", "b"], 1.0, abs_tol=1e-5)
    assert np.isnan(matrix.loc["a", "a"])  # one sample per task: nothing to compare within a model
    assert long.loc[long["model A"] != long["model B"], "other-task cos"].iloc[0] < 0.9
    nn = trajectory_similarity.nn_agreement(runs, vecs).set_index("model")
    assert nn.loc["(all)", "nn shares pass/fail"] == 1.0 and nn.loc["(all)", "nn on same task"] == 1.0
    assert nn.loc["(all)", "chance"] < 1.0


def test_typed_weighting_changes_the_vectors(tmp_path: Path) -> None:
    _identical_pair(tmp_path)
    frames = _load(tmp_path)
    _, uniform = trajectory_similarity.trajectory_vectors(frames, "uniform")
    _, typed = trajectory_similarity.trajectory_vectors(frames, "typed")
    assert np.allclose(np.linalg.norm(typed, axis=1), 1.0) and not np.allclose(uniform, typed)


# -- spectral ------------------------------------------------------------------------------------------
def test_gram_features_on_known_spectra() -> None:
    same = np.tile(np.eye(4)[0], (5, 1))
    orth = np.eye(4)
    f = spectral.gram_features([same, orth]).set_index(pd.Index(["same", "orth"]))
    assert math.isclose(f.loc["same", "lambda_1"], 1.0)
    assert math.isclose(f.loc["same", "effective_rank"], 1.0)
    assert np.allclose(f.loc["orth", [f"lambda_{i}" for i in range(1, 5)]], 0.25)
    assert math.isclose(f.loc["orth", "effective_rank"], 4.0)
    assert math.isclose(f.loc["orth", "entropy_norm"], 1.0)
    assert math.isclose(f.loc["orth", "participation_ratio"], 4.0)


def test_auroc_matches_sklearn_with_ties() -> None:
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200)
    s = rng.integers(0, 5, 200).astype(float) + y
    assert math.isclose(spectral.auroc(y, s), roc_auc_score(y, s))


def _spectral_set(root: Path, separable: bool, n_tasks: int = 24, dim: int = 16) -> None:
    """Gold trajectories wander (random step vectors); attack ones stay near one direction if separable."""
    rng = np.random.default_rng(7)
    direction = rng.standard_normal(dim)
    direction *= 4 / np.linalg.norm(direction)
    for i in range(n_tasks):
        for label in ("gold", "typosquat"):
            focused = separable and label == "typosquat"
            ok = bool(rng.random() < 0.5)
            syn.write(root, syn.episode("m", "supply_chain_poisoning", label, i, ok, rng, turns=3, dim=dim,
                                        direction=direction if focused else None, spread=0.5,
                                        compromised=None if label == "gold" else bool(i % 2)))


GRAM = {"gram": spectral.GRAM_FEATURES}


def _row(table: pd.DataFrame, comparison: str, features: str = "gram") -> pd.Series:
    return table[(table["comparison"] == comparison) & (table["features"] == features)].iloc[0]


def test_spectral_features_separate_focused_attacks(tmp_path: Path) -> None:
    _spectral_set(tmp_path, separable=True)
    frames = _load(tmp_path)
    runs, blocks = spectral.trajectories(frames, min_steps=2)
    table = spectral.evaluate(spectral.gram_features(blocks), GRAM, runs, n_boot=100)
    row = _row(table, "supply_chain_poisoning: gold vs typosquat")
    assert row["AUROC (CV logreg)"] > 0.95 and row["AUROC lo"] > 0.9
    assert abs(row["shuffled labels"] - 0.5) < 0.15
    assert abs(row["length only"] - 0.5) < 0.1  # every trajectory has the same length: no signal there
    assert row["its AUROC"] > 0.95 and row["best single (held out)"] != "–"
    assert (row["episodes"], row["positives"]) == (48, 24)


def test_spectral_finds_nothing_when_there_is_nothing(tmp_path: Path) -> None:
    _spectral_set(tmp_path, separable=False)
    frames = _load(tmp_path)
    runs, blocks = spectral.trajectories(frames, min_steps=2)
    table = spectral.evaluate(spectral.gram_features(blocks), GRAM, runs, n_boot=100)
    assert abs(_row(table, "supply_chain_poisoning: gold vs typosquat")["AUROC (CV logreg)"] - 0.5) < 0.2


def test_spectral_too_few_episodes_is_noted(tmp_path: Path) -> None:
    syn.oracle_null_set(tmp_path, n_tasks=1, labels=("gold", "typosquat"))
    sec = spectral.analyze(_load(tmp_path), tmp_path, n_boot=10)
    table = sec.table("spectral_auroc")
    assert table["note"].str.contains("fewer than").all()


# -- no embeddings ---------------------------------------------------------------------------------------
def test_traces_without_embeddings_get_a_clear_message(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    syn.oracle_null_set(tmp_path, n_tasks=3, dim=None)
    frames = _load(tmp_path)
    assert frames.embeddings.shape == (len(frames.steps), 0) and not frames.steps["has_embedding"].any()
    for name, module in (("trajectory_similarity", trajectory_similarity), ("spectral", spectral)):
        module.main([str(tmp_path), "--out", str(tmp_path / "o")])
        assert "--no-embed" in capsys.readouterr().err
        assert "No step embeddings" in (tmp_path / "o" / f"{name}.md").read_text()


# -- report ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Traces whose model output, tool args, diff, test output, model name and task id carry markup."""
    root = tmp_path_factory.mktemp("planted")
    rng = np.random.default_rng(1)
    for i in range(6):
        for model, ok in (("oracle", True), ("null", False), ("evil<b>", i % 2 == 0)):
            trace = syn.episode(model, "humanevalfix", "gold", i, ok, rng, turns=3, dim=8,
                                text=f"thinking {PLANT}" if model != "oracle" else None)
            trace["task_id"] = f"Python/{i}{PLANT}" if i == 0 else trace["task_id"]
            call = next(s for s in trace["steps"] if s["type"] == "tool_call")
            call["args"] = {"path": PLANT, "content": "</script><script>alert(2)</script>"}
            trace["outcome"]["diff"] = f"+{PLANT}\n-old"
            trace["outcome"]["test_output"] = PLANT
            trace["prompt"]["task"] = f"Fix it. {PLANT}"
            syn.write(root, trace)
    return root


def _report(planted: Path, out: Path, **kw: int) -> str:
    path = report.build(_load(planted), out, "planted", skip={"spectral", "similarity"}, **kw)
    return path.read_text(encoding="utf-8")


def test_report_is_self_contained_and_escapes_trace_text(planted: Path, tmp_path: Path) -> None:
    page = _report(planted, tmp_path)
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", page, re.I)
    assert not re.search(r"@import|url\(\s*['\"]?https?:", page, re.I)
    for raw in ("<img src=x", "<script>document.title", "alert(2)</script>"):
        assert raw not in page
    assert len(re.findall(r"<script\b", page)) == 2  # the data block and the viewer, nothing planted
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert "evil&lt;b&gt;" in page and "evil<b>" not in page
    assert page.count("data:image/png;base64,") == 4
    blob = re.search(r'<script type="application/json" id="trace-data">(.*?)</script>', page, re.S).group(1)
    data = json.loads(blob)  # \u003c escapes keep the JSON valid and the planted text intact
    texts = [s["text"] for ep in data["episodes"] for s in ep["steps"]]
    assert any(PLANT in t for t in texts) and any(PLANT in ep["diff"] for ep in data["episodes"])
    assert data["tasks"][0]["task_id"] == f"Python/0{PLANT}"


def test_report_viewer_is_bounded(planted: Path, tmp_path: Path) -> None:
    page = _report(planted, tmp_path, max_episodes=2, max_text=50)
    blob = re.search(r'id="trace-data">(.*?)</script>', page, re.S).group(1)
    data = json.loads(blob)
    per_model = pd.Series([ep["model"] for ep in data["episodes"]]).value_counts()
    assert per_model.max() == 2 and len(per_model) == 3
    assert "holds 6 of 18 episodes" in page
    assert all(len(s["text"]) <= 50 + 60 for ep in data["episodes"] for s in ep["steps"])


CHROMIUM = find_chromium()


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (Debian: apt-get install -y chromium)")
def test_report_renders_in_headless_chromium(planted: Path, tmp_path: Path) -> None:
    path = report.build(_load(planted), tmp_path, "planted", skip={"spectral", "similarity"})
    png = tmp_path / "shot.png"
    r = _script("screenshot", path, png)
    assert r.returncode == 0, r.stderr
    raw = png.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", raw[16:24]) == (1400, 1800)
    assert len(raw) > 30_000
    import matplotlib.image

    pixels = matplotlib.image.imread(png)[..., :3]
    assert pixels.std() > 0.05  # not a blank page
    greenish = ((pixels[..., 1] > 0.4) & (pixels[..., 0] < 0.3) & (pixels[..., 2] < 0.35)).sum()
    assert greenish > 500  # the PASS column's green border and badge: the viewer rendered a trace
    dom = run_chromium(path, ["--dump-dom"]).stdout
    assert 'class="col pass"' in dom and 'class="col fail"' in dom
    assert "PWNED" not in re.search(r"<title>(.*?)</title>", dom).group(1)
    assert "&lt;script&gt;document.title" in dom and "<img src=\"x\"" not in dom


# -- every script end to end, through its command line ----------------------------------------------------
def test_every_script_runs_from_the_command_line(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    _spectral_set(traces, separable=True, n_tasks=8)
    syn.oracle_null_set(traces, n_tasks=4, dim=16)
    expected = {
        "compare_models": ["compare_models.md", "pass_at_k.csv", "pairwise.csv", "solved_only.csv",
                           "distributions.csv", "exit_reasons.csv", "tool_usage.csv", "parse_errors.csv",
                           "pass_at_1.png", "pass_vs_steps.png", "tokens_time.png", "tool_use.png"],
        "trajectory_similarity": ["trajectory_similarity.md", "similarity_matrix.csv", "nn_agreement.csv",
                                  "similarity_heatmap.png", "projection_pca.png"],
        "spectral": ["spectral.md", "spectral_auroc.csv", "spectral_features.csv",
                     "laplacian_eigenvalues.csv", "spectral_features.png", "laplacian_spectrum.png"],
        "report": ["report.html", "compare_models.md", "spectral.md"],
    }
    procs = {}
    for name in expected:  # in parallel; trajectory_similarity through `agent-harness analyze`
        extra = ["--boot", "50"] if name == "spectral" else []
        args = [str(traces), "--out", str(tmp_path / name), *extra]
        cmd = ([sys.executable, "-m", "agent_harness.cli", "analyze", name] if name == "trajectory_similarity"
               else [sys.executable, f"analysis/{name}.py"])
        procs[name] = subprocess.Popen(cmd + args, cwd=tmp_path if "-m" in cmd else ROOT, stdout=PIPE,
                                       stderr=PIPE, text=True, env=ENV)
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, f"{name}: {err}"
        assert "wrote" in out
        for f in expected[name]:
            assert (tmp_path / name / f).stat().st_size > 0, f"{name}: {f}"
    md = (tmp_path / "spectral" / "spectral.md").read_text()
    assert "StratifiedGroupKFold" in md and "out-of-fold" in md


def test_cli_lists_the_analyses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from agent_harness.cli import main

    assert main(["analyze", "nope", str(tmp_path)]) != 0
    names = capsys.readouterr().err.split("valid:", 1)[1]
    for name in ("compare_models", "trajectory_similarity", "spectral", "report", "screenshot"):
        assert name in names
    assert "_common" not in names and "_synthetic" not in names


def test_report_marks_unscored_episodes(tmp_path: Path) -> None:
    """An episode whose scorer failed is shown as UNSCORED (headline and viewer), not as a fail."""
    root = tmp_path / "traces"
    rng = np.random.default_rng(2)
    for i in range(3):
        trace = syn.episode("m", "prompt_injection", "delete_files", i, i == 0, rng, turns=2, dim=4)
        if i == 2:
            trace["outcome"].update(passed=None, compromised=None, exit_reason="error",
                                    score_error={"type": "FileExistsError", "message": "tests is a symlink"})
        syn.write(root, trace)
    (tmp_path / "out").mkdir()
    page = report.build(_load(root), tmp_path / "out", "t", skip={"spectral", "similarity"}).read_text()
    assert "1 UNSCORED episode(s)" in page and "· 1 UNSCORED" in page
    blob = re.search(r'<script type="application/json" id="trace-data">(.*?)</script>', page, re.S).group(1)
    eps = json.loads(blob)["episodes"]
    assert [ep["unscored"] for ep in eps].count(True) == 1
    assert [ep["score_error"] for ep in eps if ep["unscored"]] == ["FileExistsError: tests is a symlink"]


def test_suspicious_episodes_are_counted_per_model(tmp_path: Path) -> None:
    """score_details.suspicious (the scorer failed an episode for signs of a forged pass) is counted per
    model in compare_models' table, the report's headline and viewer, and summary.json."""
    from agent_harness.run.summary import summarize

    root = tmp_path / "traces"
    rng = np.random.default_rng(3)
    for model, flagged in (("hacker", (0, 1)), ("honest", ())):
        for i in range(3):
            trace = syn.episode(model, "humanevalfix", "gold", i, i == 2, rng, turns=2, dim=4)
            if i in flagged:
                trace["outcome"].update(passed=False, score_details={"suspicious": f"reason {i}"})
            syn.write(root, trace)
    frames = _load(root)
    table = compare_models.pass_table(frames.runs, n_boot=50).set_index("model")
    assert table.loc["hacker", "suspicious"] == 2 and table.loc["honest", "suspicious"] == 0
    (tmp_path / "out").mkdir()
    page = report.build(frames, tmp_path / "out", "t", skip={"spectral", "similarity"}).read_text()
    assert "2 SUSPICIOUS episode(s)" in page and "· 2 SUSPICIOUS" in page
    blob = re.search(r'<script type="application/json" id="trace-data">(.*?)</script>', page, re.S).group(1)
    assert sorted(ep["suspicious"] for ep in json.loads(blob)["episodes"] if ep["suspicious"]) == [
        "reason 0", "reason 1"]
    listed = pd.read_csv(tmp_path / "out" / "suspicious.csv")
    assert listed["suspicious"].tolist() == ["reason 0", "reason 1"] and set(listed["model"]) == {"hacker"}
    summary = summarize(root)
    assert summary["hacker"]["humanevalfix"]["suspicious"] == 2 and summary["honest"]["humanevalfix"]["suspicious"] == 0
