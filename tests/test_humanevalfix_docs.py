"""The docs label of humanevalfix (bigcode's HumanEvalFixDocs): the buggy function with its docstring."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent_harness.errors import ConfigError
from agent_harness.scenarios import TaskQuery
from agent_harness.scenarios.humanevalfix import SCENARIO, build_task, load_rows, run_hidden_test
from agent_harness.types import Task

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def docs() -> list[Task]:
    return SCENARIO.load_tasks(TaskQuery(label="docs"))


def test_every_docs_task_starts_from_the_prompt(docs: list[Task]) -> None:
    rows = {r["task_id"]: r for r in load_rows()}
    gold = {t.id: t for t in SCENARIO.load_tasks(TaskQuery())}
    assert len(docs) == 164
    for t in docs:
        row, md = rows[t.id], t.metadata
        buggy = t.files[md["module"]]
        assert buggy == row["prompt"] + row["buggy_solution"] and md["docs"] is True
        assert row["docstring"].strip().splitlines()[0] in buggy  # the docstring is there
        ast.parse(buggy)
        assert t.files[md["test_file"]] == gold[t.id].files[md["test_file"]]  # same visible tests as gold
        assert md["hidden_test"] == gold[t.id].metadata["hidden_test"] and t.label == "docs"
        assert "docstring" in t.statement


def test_docs_single_shot_prompt_has_the_docstring_and_no_tests(docs: list[Task]) -> None:
    t = docs[0]
    user = SCENARIO.single_shot_prompt(t)[-1]["content"]
    assert user == (t.files["has_close_elements.py"] + "\nFix bugs in has_close_elements.").strip()
    assert "def check" not in user and "Check if in given list of numbers" in user


@pytest.mark.parametrize("index", [0, 10, 38, 100, 163])
def test_docs_reference_passes_and_buggy_fails(docs: list[Task], index: int) -> None:
    t = docs[index]
    md = t.metadata
    fixed = next(c["args"]["content"] for c in t.oracle if c["tool"] == "write_file")
    h = md["helpers"]  # the reference's helpers (Python/38's encode_cyclic) for the hidden test
    assert run_hidden_test(fixed, md["module"], md["entry_point"], md["hidden_test"], helpers=h).passed
    assert not run_hidden_test(t.files[md["module"]], md["module"], md["entry_point"], md["hidden_test"],
                               helpers=h).passed


def test_docs_body_only_answer_keeps_the_docstring(docs: list[Task]) -> None:
    t = docs[2]  # truncate_number
    source = SCENARIO.fixed_source(t, "    return number % 1.0\n")
    assert source is not None and '"""' in source and source.rstrip().endswith("return number % 1.0")
    assert run_hidden_test(source, "truncate_number.py", "truncate_number", t.metadata["hidden_test"]).passed


def test_docs_needs_the_prompt_field() -> None:
    row = {k: v for k, v in load_rows()[0].items() if k != "prompt"}
    with pytest.raises(ConfigError, match="no 'prompt' field"):
        build_task(row, 0, label="docs")


@pytest.mark.parametrize("agent", ["react", "reflect", "single-shot"])
def test_docs_label_through_the_cli(tmp_path: Path, agent: str) -> None:
    out = tmp_path / "t"
    r = subprocess.run([sys.executable, str(ROOT / "run_agents.py"), "--models", "oracle,null", "--label", "docs",
                        "--agent", agent, "--n", "2", "--out", str(out), "--no-embed"], capture_output=True,
                       text=True, cwd=ROOT, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "summary.json").read_text())
    scenario = "humanevalfix" if agent == "react" else f"humanevalfix-{agent.replace('-', '_')}"
    assert summary["oracle"][scenario]["by_label"]["docs"]["pass@1"] == 1.0
    assert summary["null"][scenario]["by_label"]["docs"]["pass@1"] == 0.0
    assert (out / "oracle" / scenario / "docs" / "run_Python-0__s0.json").is_file()
