"""Traces as a Hugging Face dataset: `agent-harness export`, loaded back with `datasets`; dataset folders as
`--dataset-path`.

The traces come from a real scripted run (CLI -> agent -> sandbox -> trace) plus synthetic episodes with
384-float embeddings (an embedded run would load the sentence model: slow on this CPU).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent_harness.cli import main
from agent_harness.text import md_inline

datasets = pytest.importorskip("datasets")

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent_harness.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})})


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sys.path.insert(0, str(ROOT))
    from agent_harness.analysis import _synthetic

    out = tmp_path_factory.mktemp("export") / "traces"
    r = cli("run", "--models", "oracle,null", "--agent", "react", "--n", "3", "--out", str(out), "--no-embed",
            "--no-progress")
    assert r.returncode == 0, r.stderr
    rng = np.random.default_rng(0)
    for i, ok in enumerate((True, False)):
        _synthetic.write(out, _synthetic.episode("embedded", "humanevalfix", "gold", i, ok, rng, dim=384))
    return out


def load(folder: Path, cache: Path) -> Any:
    return datasets.load_dataset("parquet", data_dir=str(folder), cache_dir=str(cache))["train"]


def test_export_round_trip(traces: Path, tmp_path: Path) -> None:
    to = tmp_path / "ds"
    assert main(["export", str(traces), "--to", str(to), "--rows-per-shard", "3"]) == 0
    shards = sorted((to / "data").glob("train-*.parquet"))
    assert [p.name for p in shards] == [f"train-0000{k}-of-00003.parquet" for k in range(3)]  # 8 episodes / 3
    ds = load(to, tmp_path / "cache")
    files = sorted(traces.rglob("run_*.json"))
    assert ds.num_rows == len(files) == 8
    by_path = {r["source_path"]: r for r in ds}
    for f in files:
        trace = json.loads(f.read_text())
        row = by_path[str(f.relative_to(traces))]
        assert (row["run_id"], row["model"], row["task_id"], row["passed"]) == (
            trace["run_id"], trace["model"]["name"], trace["task_id"], trace["outcome"]["passed"])
        assert row["completion_tokens"] == trace["outcome"]["completion_tokens"]
        assert json.loads(row["generation"]) == trace["generation"]
        assert [s["text"] for s in row["steps"]] == [s["text"] for s in trace["steps"]]
        assert [s["type"] for s in row["steps"]] == [s["type"] for s in trace["steps"]]
        for s, t in zip(row["steps"], trace["steps"], strict=True):
            assert s["prompt_tokens"] == (t.get("tokens") or {}).get("prompt")
            assert (json.loads(s["args"]) if s["args"] else None) == t.get("args")
            if t.get("embedding"):
                assert len(s["embedding"]) == 384
                assert np.allclose(s["embedding"], np.asarray(t["embedding"], dtype=np.float32))
            else:
                assert s["embedding"] is None
    assert ds.features["steps"].feature["embedding"].feature.dtype == "float32"

    summary = json.loads((traces / "summary.json").read_text())
    for model in ("oracle", "null"):
        rows = [r for r in ds if r["model"] == model]
        assert sum(r["passed"] for r in rows) / len(rows) == summary[model]["humanevalfix"]["pass@1"]

    card = (to / "README.md").read_text()
    assert card.startswith("---\nconfigs:")
    assert "| oracle | humanevalfix | gold | agent | 3 | 1.000 |" in card
    assert "| null | humanevalfix | gold | agent | 3 | 0.000 |" in card
    assert "Runs (`runs.jsonl`)" in card and '"temperature": 0.0' in card

    ds.save_to_disk(str(tmp_path / "saved"))
    again = datasets.load_from_disk(str(tmp_path / "saved"))
    assert again.to_list() == ds.to_list()


def test_export_refuses_a_used_folder_and_skips_corrupt_traces(traces: Path, tmp_path: Path) -> None:
    used = tmp_path / "used"
    used.mkdir()
    (used / "keep.txt").write_text("mine")
    r = cli("export", str(traces), "--to", str(used))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "not an empty folder" in r.stderr
    assert (used / "keep.txt").read_text() == "mine" and len(list(used.iterdir())) == 1

    bad = tmp_path / "bad"
    for f in traces.rglob("run_*.json"):
        dest = bad / f.relative_to(traces)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(f.read_bytes())
    broken = sorted(bad.rglob("run_*.json"))[0]
    broken.write_text('{"schema_version": "1.2", "steps": [')
    to = tmp_path / "ds"
    assert main(["export", str(bad), "--to", str(to)]) == 0
    assert load(to, tmp_path / "cache").num_rows == 7
    assert md_inline(f"{broken.relative_to(bad)}: JSONDecodeError") in (to / "README.md").read_text()

    r = cli("export", str(tmp_path / "nothing"), "--to", str(tmp_path / "x"))
    assert r.returncode == 2 and "traces folder not found" in r.stderr and not (tmp_path / "x").exists()


def test_push_to_hub_offline_fails_with_one_line(traces: Path, tmp_path: Path) -> None:
    to = tmp_path / "ds"
    r = cli("export", str(traces), "--to", str(to), "--push-to-hub", "someone/agent-traces",
            env={"HF_DATASETS_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp_path / "cache"), "HF_TOKEN": "hf_x"})
    assert r.returncode == 1
    err = [line for line in r.stderr.splitlines() if line.strip() and "examples/s" not in line]
    assert len(err) == 1 and err[0].startswith("error: push to the Hub as someone/agent-traces failed"), r.stderr
    assert (to / "README.md").is_file()  # the local export is kept


def _humanevalfix_rows(n: int) -> list[dict[str, Any]]:
    from agent_harness.scenarios.humanevalfix import load_rows

    return load_rows()[:n]


@pytest.mark.parametrize("layout", ["save_to_disk", "save_to_disk_dict", "parquet_shards"])
def test_dataset_path_accepts_a_dataset_folder(layout: str, tmp_path: Path) -> None:
    rows = _humanevalfix_rows(3)
    folder = tmp_path / "hef"
    ds = datasets.Dataset.from_list(rows)
    if layout == "save_to_disk":
        ds.save_to_disk(str(folder))
    elif layout == "save_to_disk_dict":
        datasets.DatasetDict({"test": ds}).save_to_disk(str(folder))
    else:
        (folder / "data").mkdir(parents=True)
        ds.select([0, 1]).to_parquet(str(folder / "data" / "test-00000-of-00002.parquet"))
        ds.select([2]).to_parquet(str(folder / "data" / "test-00001-of-00002.parquet"))
    out = tmp_path / "traces"
    r = cli("run", "--models", "oracle", "--agent", "react", "--dataset-path", str(folder), "--out", str(out),
            "--no-embed", "--no-progress")
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["oracle"]["humanevalfix"]["n_tasks"] == 3
    assert math.isclose(summary["oracle"]["humanevalfix"]["pass@1"], 1.0)


def test_dataset_folder_errors_are_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    r = cli("run", "--models", "oracle", "--dataset-path", str(empty), "--out", str(tmp_path / "t"), "--no-embed")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no .parquet or .jsonl files" in r.stderr
    split = tmp_path / "split"
    ds = datasets.Dataset.from_list(_humanevalfix_rows(2))
    datasets.DatasetDict({"a": ds, "b": ds}).save_to_disk(str(split))
    r = cli("run", "--models", "oracle", "--dataset-path", str(split), "--out", str(tmp_path / "t"), "--no-embed")
    assert r.returncode == 2 and "expected 'test' or a single split" in r.stderr
