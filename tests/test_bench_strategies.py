"""bench/strategies.py with scripted models: the table, per-config folders, --only and --resume."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "bench" / "strategies.py"), "--quiet", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})


def test_strategy_table_only_and_resume(tmp_path: Path) -> None:
    out, results = tmp_path / "out", tmp_path / "RESULTS.md"
    common = ("--models", "oracle,null", "--n", "2", "--out", str(out), "--results", str(results))
    r = bench(*common, "--only", "reflect,single-shot-pass5-T0.8")
    assert r.returncode == 0, r.stderr
    rows = {tuple(c.strip() for c in line.split("|")[1:3]): line for line in r.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| config")}
    assert set(rows) == {("reflect", "oracle"), ("reflect", "null"), ("single-shot-pass5-T0.8", "oracle"),
                         ("single-shot-pass5-T0.8", "null")}
    assert "| 1.000 [" in rows["reflect", "oracle"] and "| 0.000 [" in rows["reflect", "null"]
    assert "pass@5 1.000" in rows["single-shot-pass5-T0.8", "oracle"]
    assert "AVX-512 BF16: " in r.stdout and results.read_text().count("## Strategies") == 1
    assert len(list((out / "single-shot-pass5-T0.8" / "oracle").rglob("run_*.json"))) == 10  # 2 tasks × 5
    assert (out / "single-shot-pass5-T0.8" / "models.yaml").is_file() and (out / "reflect" / "done-null.json").is_file()

    again = bench(*common, "--only", "reflect")  # a folder with traces is not overwritten
    assert again.returncode == 2 and "pass --resume" in again.stderr

    resumed = bench(*common, "--only", "reflect", "--resume", "--no-append")
    assert resumed.returncode == 0, resumed.stderr
    assert "reflect × oracle: already done (skipped)" in resumed.stdout and "[strategies]" not in resumed.stderr
    assert results.read_text().count("## Strategies") == 1
    marker = out / "reflect" / "done-null.json"
    marker.write_text(json.dumps(json.loads(marker.read_text()) | {"defaults": "other"}))  # a default changed since
    changed = bench(*common, "--only", "reflect", "--resume", "--no-append")
    assert changed.returncode == 0, changed.stderr
    assert "reflect × null: already done" not in changed.stdout and "reflect × oracle: already done" in changed.stdout
    assert json.loads(marker.read_text())["defaults"] != "other"

    more = bench(*common[:3], "3", *common[4:], "--only", "reflect", "--resume", "--no-append")  # a third task
    assert more.returncode == 0, more.stderr
    assert "already done" not in more.stdout and len(list((out / "reflect" / "null").rglob("run_*.json"))) == 3
    assert '"n": 3' in (out / "reflect" / "done-null.json").read_text()

    report = bench(*common[:3], "10", *common[4:], "--only", "reflect,react-full", "--report")  # runs nothing
    assert report.returncode == 0, report.stderr
    assert "[strategies]" not in report.stderr and not (out / "react-full").exists()
    assert len(list((out / "reflect" / "null").rglob("run_*.json"))) == 3
    assert "| reflect | null | 3 |" in report.stdout and results.read_text().count("## Strategies") == 1


def test_the_default_runs_the_tables_configs_and_no_ablation(tmp_path: Path) -> None:
    r = bench("--models", "oracle", "--n", "1", "--out", str(tmp_path / "out"), "--no-append")
    assert r.returncode == 0, r.stderr
    configs = {line.split("|")[1].strip() for line in r.stdout.splitlines()
               if line.startswith("| ") and not line.startswith("| config")}
    assert configs == {"single-shot", "reflect", "react-full", "react-condensed", "single-shot-pass5-T0.8",
                       "reflect-react", "reflect-react · reflect phase"}  # the oracle never reaches react
    assert sorted(d.name for d in (tmp_path / "out").iterdir() if d.is_dir()) == sorted(
        ["single-shot", "reflect", "react-full", "react-condensed", "single-shot-pass5-T0.8", "reflect-react"])


def test_a_chained_strategy_gets_a_row_per_phase(tmp_path: Path) -> None:
    """reflect-react: besides its own row, one per phase: the episodes that reached it and those it solved."""
    r = bench("--models", "oracle,null", "--n", "2", "--out", str(tmp_path / "out"), "--only", "reflect-react",
              "--no-append")
    assert r.returncode == 0, r.stderr
    rows = {tuple(c.strip() for c in line.split("|")[1:4]): line for line in r.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| config")}
    assert set(rows) == {("reflect-react", "oracle", "2"), ("reflect-react · reflect phase", "oracle", "2"),
                         ("reflect-react", "null", "2"), ("reflect-react · reflect phase", "null", "2"),
                         ("reflect-react · react phase", "null", "2")}  # the oracle never reaches react
    assert "| 1.000 [" in rows["reflect-react · reflect phase", "oracle", "2"]
    assert "| 0.000 [" in rows["reflect-react · react phase", "null", "2"]
    assert rows["reflect-react · react phase", "null", "2"].split("|")[11].strip() == "–"  # no wall time of its own


def test_unknown_config_and_missing_flag(tmp_path: Path) -> None:
    r = bench("--models", "oracle", "--n", "1", "--only", "nope", "--out", str(tmp_path))
    assert r.returncode == 2 and r.stderr.strip().startswith("error: unknown config 'nope'")
    listing = bench("--list")
    assert listing.returncode == 0 and "react-condensed" in listing.stdout and "--history condensed" in listing.stdout


def test_a_served_model_keeps_its_port_so_resume_matches() -> None:
    """--serve writes the server's URL into the registry entry: the same port at the next start keeps the
    served registry file as it was (the fingerprint leaves the URL out)."""
    import socket

    from vllm_server import free_port, stable_port

    port = stable_port("qwen2.5-coder-1.5b-offline")
    assert port == stable_port("qwen2.5-coder-1.5b-offline") and 20000 <= port < 40000
    assert port != stable_port("qwen2.5-coder-0.5b")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        assert free_port(taken) != taken  # in use: another free port
    assert free_port(taken) == taken  # free again: the preferred one


def test_a_port_in_time_wait_is_free_again() -> None:
    """A stopped server's port lingers in TIME_WAIT while its connections close; the next server binds it
    (SO_REUSEADDR), so the probe must count it as free, or the served URL changes and resume redoes all."""
    import socket

    from vllm_server import free_port

    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        conn, _ = server.accept()
        conn.close()  # the server side closes first: its end of the connection goes to TIME_WAIT
        client.close()
    assert free_port(port) == port


def test_a_split_runs_its_tasks_only_and_rows_get_single_shots_pass_at_their_budget(tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = bench("--models", "oracle", "--n", "4", "--split", "odd", "--out", str(out), "--no-append",
              "--only", "search-k1,single-shot-pass5-T0.8")
    assert r.returncode == 0, r.stderr
    assert "first 4 tasks, the odd-numbered (untuned) split" in r.stdout and "--split odd" in r.stdout
    names = sorted(p.name for p in (out / "search-k1" / "oracle").rglob("run_*.json"))
    assert names == ["run_Python-1__s0.json", "run_Python-3__s0.json"]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[1:]] for line in r.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| config")}
    assert rows["search-k1"][2] == "2" and rows["search-k1"][5].startswith("pass@")  # single-shot at its budget
    assert rows["single-shot-pass5-T0.8"][5] == "–"
    assert '"split": "odd"' in (out / "search-k1" / "done-oracle.json").read_text()
    again = bench("--models", "oracle", "--n", "4", "--split", "even", "--out", str(out), "--no-append",
                  "--only", "search-k1", "--resume")  # another split is not "done"
    assert again.returncode == 0 and "already done" not in again.stdout
    assert len(list((out / "search-k1" / "oracle").rglob("run_*.json"))) == 4


def test_the_untuned_table_runs_both_sets_in_one_command(tmp_path: Path) -> None:
    """bench/untuned.py: the odd HumanEvalFix tasks and the held-out set, each config in its own folder."""
    out, results = tmp_path / "out", tmp_path / "RESULTS.md"
    args = [sys.executable, str(ROOT / "bench" / "untuned.py"), "--models", "oracle,null", "--n", "4", "--no-serve",
            "--only", "single-shot,best-of-n-search", "--out", str(out), "--results", str(results), "--quiet"]
    r = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=600,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    odd = sorted(p.name for p in (out / "odd" / "single-shot" / "oracle").rglob("run_*.json"))
    assert odd == ["run_Python-1__s0.json", "run_Python-3__s0.json"]  # the odd tasks of the first 4
    held = sorted(p.name for p in (out / "heldout" / "best-of-n-search" / "null").rglob("run_*.json"))
    assert held == [f"run_Heldout-{i}__s0.json" for i in range(4)]  # all of the held-out set's first 4
    assert "| best-of-n-search | oracle |" in r.stdout and "| best-of-n-search · react phase | null |" in r.stdout
    assert results.read_text().count("## Strategies") == 2
    bad = subprocess.run([*args[:2], "--sets", "odd,nope"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert bad.returncode == 2 and "unknown set(s): nope" in bad.stderr


def test_the_untuned_table_has_humanevalfixs_default_in_both_sets() -> None:
    """Issue 45's one command reproduces the default's row: each set runs a config with exactly the default's
    strategy and settings (`DEFAULT_PRESETS`), so a change of the default cannot leave the table behind."""
    from strategies import CONFIGS  # bench/ (tests/conftest.py puts it on the path)
    from untuned import SETS

    from agent_harness.run.episodes import DEFAULT_PRESETS, default_strategy
    from agent_harness.scenarios import get_scenario
    from agent_harness.strategies.config import ReflectConfig

    name = default_strategy(get_scenario("humanevalfix"), ReflectConfig()).name
    flags = {"--agent", name.replace("_", "-")}
    for key, value in DEFAULT_PRESETS.get(name, {}).items():
        flags |= {f"--{key.replace('_', '-')}"} | ({str(value)} if value is not True else set())
    for s in SETS:
        assert [c for c in s.configs if set(CONFIGS[c].args) == flags], (s.name, sorted(flags))
