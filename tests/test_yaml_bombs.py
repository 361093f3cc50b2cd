"""Registry and scenario YAML bombs (issue 44): a file nested 50,000 deep, an alias tree that expands to
9^9 nodes, an alias cycle, a huge or non-regular file. Through the real CLI each is one line and exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent_harness.errors import ConfigError
from agent_harness.yaml_file import MAX_NODES, read_yaml

ROOT = Path(__file__).resolve().parent.parent


def laughs(indent: str = "") -> str:
    """An alias tree: 9 names, each a list of 9 aliases of the one before (9^9 leaves once expanded)."""
    lines = [f"{indent}a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        lines.append(f"{indent}a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]")
    return "\n".join(lines) + "\n"


DEEP = "models:\n  - " + "[" * 50_000 + "]" * 50_000 + "\n"
SCENARIO_BOMB = f"""\
description: small file, huge tree
labels: {{gold: {{}}}}
score:
  pass: [{{kind: file_exists, path: a.py}}]
tasks:
  - id: t1
    statement: Do it.
    files: {{a.py: "x = 1\\n"}}
    metadata:
{laughs("      ")}"""


def cli(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent_harness.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), **(env or {})})


def one_line_exit_2(r: subprocess.CompletedProcess[str], *words: str) -> None:
    assert r.returncode == 2, r.stderr[-3000:]
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("error: ") and all(w in line for w in words), line


@pytest.mark.parametrize("text, why", [
    (DEEP, "nested more than"),
    ("models:\n" + laughs("  "), "nodes once its aliases are expanded"),
    ("models: &m [{name: x, backend: scripted, script: oracle, aliases: *m}]\n", "holds it"),
    ("models: []\nmodels: []\n", "duplicate key 'models'"),
    ("models: [" + "1, " * 3_000_000 + "]\n", "larger than"),
], ids=["deep", "alias-tree", "alias-cycle", "duplicate-key", "4-mb"])
def test_registry_bombs_are_one_line(tmp_path: Path, text: str, why: str) -> None:
    reg = tmp_path / "models.yaml"
    reg.write_text(text)
    one_line_exit_2(cli("models", "--registry", str(reg)), "models.yaml", why)
    one_line_exit_2(cli("run", "--registry", str(reg), "--no-embed", "--out", str(tmp_path / "o")), why)
    one_line_exit_2(cli("run", "--no-embed", "--out", str(tmp_path / "o"), cwd=tmp_path), why)  # found in cwd


def test_scenario_alias_tree_is_one_line(tmp_path: Path) -> None:
    assert len(SCENARIO_BOMB) < 2500
    (tmp_path / "bomb").mkdir()
    (tmp_path / "bomb" / "scenario.yaml").write_text(SCENARIO_BOMB)
    env = {"AGENT_HARNESS_SCENARIOS": str(tmp_path)}
    r = cli("run", "--models", "oracle", "--scenario", "bomb", "--no-embed", "--no-progress",
            "--out", str(tmp_path / "o"), env=env)
    one_line_exit_2(r, "scenario.yaml", f"more than {MAX_NODES} nodes")
    one_line_exit_2(cli("scenarios", env=env), "scenario.yaml", "nodes")


def test_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "models.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        read_yaml(fifo, "registry")


def test_ordinary_files_still_read(tmp_path: Path) -> None:
    p = tmp_path / "x.yaml"
    p.write_text("base: &b {a: 1, b: [1, 2]}\nmore: {<<: *b, a: 2}\nlist: [*b, *b]\n")
    assert read_yaml(p, "scenario") == {"base": {"a": 1, "b": [1, 2]}, "more": {"a": 2, "b": [1, 2]},
                                        "list": [{"a": 1, "b": [1, 2]}] * 2}
