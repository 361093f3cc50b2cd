"""HumanEvalFix and bogus scenarios: data, workspaces, the hidden scorer, the single-shot path.

Everything runs for real: Workspaces in temp dirs, the sandbox, python3 subprocesses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agent_harness.errors import ConfigError
from agent_harness.sandbox.workspace import Workspace
from agent_harness.scenarios import Scenario, SingleShot, TaskQuery, get_scenario
from agent_harness.scenarios.bogus import SCENARIO as BOGUS
from agent_harness.scenarios.humanevalfix import (
    DATA_FILE,
    DATA_SHA256,
    SCENARIO,
    _vendored_rows,
    load_rows,
)
from agent_harness.strategies.extract import extract_code
from agent_harness.types import ScoreResult, Task

ROOT = Path(__file__).resolve().parent.parent
WORKERS = 4


@pytest.fixture(scope="module")
def tasks() -> list[Task]:
    return SCENARIO.load_tasks(TaskQuery())


def one(task_id: str) -> Task:
    return SCENARIO.load_tasks(TaskQuery(task_ids=(task_id,)))[0]


@pytest.fixture
def ws_of() -> Iterator:
    made: list[Workspace] = []

    def make(task: Task) -> Workspace:
        ws = Workspace.create(task.files, test_cmd=task.test_cmd)
        made.append(ws)
        return ws

    yield make
    for ws in made:
        ws.cleanup()


def write(ws: Workspace, path: str, text: str) -> None:
    (Path(ws.root) / path).write_text(text, encoding="utf-8")


def oracle_source(task: Task) -> str:
    return next(c["args"]["content"] for c in task.oracle if c["tool"] == "write_file")


# ---------------------------------------------------------------------------------------
# Data and tasks
# ---------------------------------------------------------------------------------------


def test_scenarios_satisfy_protocols() -> None:
    for sc in (SCENARIO, BOGUS):
        assert isinstance(sc, Scenario) and isinstance(sc, SingleShot)
    assert get_scenario("humanevalfix") is SCENARIO and get_scenario("bogus") is BOGUS
    assert SCENARIO.labels == ("gold", "docs") and BOGUS.labels == ("gold",)


def test_vendored_tasks(tasks: list[Task]) -> None:
    import hashlib

    assert hashlib.sha256(DATA_FILE.read_bytes()).hexdigest() == DATA_SHA256
    assert [t.id for t in tasks] == [f"Python/{i}" for i in range(164)]
    # The scripted backend finds a task by its statement: statements must be unique.
    assert len({t.statement for t in tasks}) == 164
    t = tasks[0]
    assert set(t.files) == {"has_close_elements.py", "test_has_close_elements.py"}
    assert t.test_cmd == ["python3", "test_has_close_elements.py"]
    assert "has_close_elements" in t.statement and "test_has_close_elements.py" in t.statement
    assert "distance = elem - elem2" in t.files["has_close_elements.py"]
    assert [c["tool"] for c in t.oracle] == ["read_file", "write_file", "run_tests"]
    assert "abs(elem - elem2)" in oracle_source(t)
    md = t.metadata
    assert (md["task_id"], md["entry_point"], md["module"], md["index"]) == (
        "Python/0", "has_close_elements", "has_close_elements.py", 0)
    assert md["bug_type"] == "missing logic" and md["failure_symptoms"] == "incorrect output"
    assert all(t.label == "gold" and t.scenario == "humanevalfix" for t in tasks)


def test_sha_mismatch_is_refused(tmp_path: Path) -> None:
    copy = tmp_path / "python.jsonl"
    copy.write_bytes(DATA_FILE.read_bytes().replace(b"abs(elem - elem2)", b"abs(elem2 - elem)", 1))
    with pytest.raises(ConfigError, match="sha256"):
        _vendored_rows(copy, DATA_SHA256)


def test_select_by_id_and_n() -> None:
    a = SCENARIO.load_tasks(TaskQuery(task_ids=("Python/12", "7")))
    assert [t.id for t in a] == ["Python/12", "Python/7"]
    assert a[0].metadata["index"] == 12
    assert [t.id for t in SCENARIO.load_tasks(TaskQuery(n=3))] == ["Python/0", "Python/1", "Python/2"]
    assert SCENARIO.load_tasks(TaskQuery(n=0)) == []


@pytest.mark.parametrize("bad", ["Python/164", "HumanEval/0", "abc"])
def test_unknown_id_is_one_line_config_error(bad: str) -> None:
    with pytest.raises(ConfigError) as e:
        SCENARIO.load_tasks(TaskQuery(task_ids=(bad,)))
    msg = str(e.value)
    assert "\n" not in msg and bad in msg and "Python/0" in msg


def test_unknown_label_is_config_error() -> None:
    with pytest.raises(ConfigError, match="label"):
        SCENARIO.load_tasks(TaskQuery(label="typosquat"))


def test_dataset_path_jsonl_and_parquet(tmp_path: Path) -> None:
    import pandas as pd

    rows = load_rows()[5:8]
    rows[0] = {**rows[0], "task_id": "Custom/a"}
    jl = tmp_path / "rows.jsonl"
    jl.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    pq = tmp_path / "rows.parquet"
    pd.DataFrame(rows).to_parquet(pq)
    for path in (jl, pq):
        got = SCENARIO.load_tasks(TaskQuery(dataset_path=path))
        assert [t.id for t in got] == ["Custom/a", "Python/6", "Python/7"]
        assert got[1].files == one("Python/6").files
        picked = SCENARIO.load_tasks(TaskQuery(dataset_path=path, task_ids=("Python/7",)))
        assert [t.id for t in picked] == ["Python/7"]


def test_bad_dataset_files(tmp_path: Path) -> None:
    csv = tmp_path / "rows.csv"
    csv.write_text("a,b\n")
    with pytest.raises(ConfigError, match="jsonl or .parquet"):
        SCENARIO.load_tasks(TaskQuery(dataset_path=csv))
    with pytest.raises(ConfigError, match="not found"):
        SCENARIO.load_tasks(TaskQuery(dataset_path=tmp_path / "nope.jsonl"))
    partial = tmp_path / "partial.jsonl"
    partial.write_text(json.dumps({"task_id": "X/0", "entry_point": "f"}) + "\n")
    with pytest.raises(ConfigError, match="row 1: missing .*declaration"):
        SCENARIO.load_tasks(TaskQuery(dataset_path=partial))
    broken = tmp_path / "broken.jsonl"
    broken.write_text("{not json\n")
    with pytest.raises(ConfigError, match="broken.jsonl:1: invalid JSON"):
        SCENARIO.load_tasks(TaskQuery(dataset_path=broken))


def test_hub_path_offline_is_clear() -> None:
    """With the Hub unreachable (or `datasets` missing) the hub option fails with one line."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    code = (
        "from agent_harness.errors import ConfigError\n"
        "from agent_harness.scenarios import TaskQuery\n"
        "from agent_harness.scenarios.humanevalfix import SCENARIO\n"
        "try:\n"
        "    print(len(SCENARIO.load_tasks(TaskQuery(options={'hub': True}))))\n"
        "except ConfigError as e:\n"
        "    print('ConfigError:', e)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout.strip()
    # A machine with the dataset in its HF cache loads it; elsewhere the error names the dataset.
    assert out == "164" or out.startswith("ConfigError: hub dataset bigcode/humanevalpack")
    assert "\n" not in out


# ---------------------------------------------------------------------------------------
# The hidden scorer
# ---------------------------------------------------------------------------------------


def _check_task(task: Task) -> tuple[str, bool, bool, bool, float, float]:
    """(id, canonical passes hidden, visible tests pass with canonical, buggy passes hidden, ...)"""
    ws = Workspace.create(task.files, test_cmd=task.test_cmd)
    try:
        module = task.metadata["module"]
        buggy = SCENARIO.score(task, ws, [])
        write(ws, module, oracle_source(task))
        visible = ws.run(task.test_cmd or [])
        fixed = SCENARIO.score(task, ws, [])
        return (task.id, fixed.passed, visible.ok and "All tests passed." in visible.stdout, buggy.passed,
                fixed.details["duration_s"], buggy.details["duration_s"])
    finally:
        ws.cleanup()


@pytest.mark.slow
def test_all_canonical_pass_and_all_buggy_fail(tasks: list[Task]) -> None:
    start = time.monotonic()
    with ThreadPoolExecutor(WORKERS) as pool:
        results = list(pool.map(_check_task, tasks))
    elapsed = time.monotonic() - start
    print(f"\nhumanevalfix: 164 tasks x (buggy score, canonical score, visible run) in {elapsed:.1f}s "
          f"with {WORKERS} threads")
    assert [r[0] for r in results if not r[1]] == [], "canonical solutions failing the hidden test"
    assert [r[0] for r in results if not r[2]] == [], "canonical solutions failing the visible test"
    assert [r[0] for r in results if r[3]] == [], "buggy solutions passing the hidden test"


def test_buggy_visible_test_fails(ws_of) -> None:
    task = one("Python/2")
    ws = ws_of(task)
    r = ws.run(task.test_cmd or [])
    assert not r.ok and "AssertionError" in r.stderr


def test_tampering_with_visible_tests_changes_nothing(ws_of) -> None:
    task = one("Python/0")
    ws = ws_of(task)
    test_file = task.metadata["test_file"]
    write(ws, test_file, "print('All tests passed.')\n")
    write(ws, "check.py", "def check(f):\n    pass\n")
    assert ws.run(task.test_cmd or []).ok  # the visible suite is now useless ...
    res = SCENARIO.score(task, ws, [{"tool": "run_tests", "args": {}}])
    assert isinstance(res, ScoreResult) and not res.passed  # ... the hidden verdict is unchanged
    assert "AssertionError" in res.output
    write(ws, task.metadata["module"], oracle_source(task))
    (Path(ws.root) / test_file).unlink()
    assert SCENARIO.score(task, ws, []).passed


def test_early_exit_and_missing_module_fail(ws_of) -> None:
    task = one("Python/0")
    ws = ws_of(task)
    module = task.metadata["module"]
    write(ws, module, task.files[module] + "\nimport os\nos._exit(0)\n")
    res = SCENARIO.score(task, ws, [])
    # the checker, in its own process, reports the early exit
    assert not res.passed and res.details["reported"] and not res.details["completed"]
    assert "exited with code 0 before it reported" in res.details["suspicious"]
    (Path(ws.root) / module).unlink()
    res = SCENARIO.score(task, ws, [])
    assert not res.passed and "missing" in res.output


def test_helper_functions_reach_the_tests(ws_of) -> None:
    """Python/38's test calls encode_cyclic, defined next to decode_cyclic in the module."""
    task = one("Python/38")
    ws = ws_of(task)
    assert not SCENARIO.score(task, ws, []).passed
    write(ws, task.metadata["module"], oracle_source(task))
    assert SCENARIO.score(task, ws, []).passed


def test_infinite_loop_times_out() -> None:
    task = SCENARIO.load_tasks(TaskQuery(task_ids=("Python/10",), options={"timeout_s": 2}))[0]
    ws = Workspace.create(task.files, test_cmd=task.test_cmd)
    try:
        res = SCENARIO.score(task, ws, [])
    finally:
        ws.cleanup()
    assert not res.passed and res.details["timed_out"] and "timed out" in res.output


# ---------------------------------------------------------------------------------------
# Single shot
# ---------------------------------------------------------------------------------------


def test_single_shot_prompt() -> None:
    task = one("Python/0")
    conv = SCENARIO.single_shot_prompt(task)
    assert [m["role"] for m in conv] == ["system", "user"]
    user = conv[1]["content"]
    assert user.startswith("from typing import List\n\n\ndef has_close_elements(")
    assert "distance = elem - elem2" in user and "def check(has_close_elements):" in user
    assert user.endswith("check(has_close_elements)\nFix bugs in has_close_elements.")


FENCED = """Here is the corrected function:

```python
from typing import List

def has_close_elements(numbers: List[float], threshold: float) -> bool:
    for idx, elem in enumerate(numbers):
        for idx2, elem2 in enumerate(numbers):
            if idx != idx2 and abs(elem - elem2) < threshold:
                return True
    return False

print(has_close_elements([1.0, 2.0], 0.5))
assert has_close_elements([1.0, 2.0], 0.5) is True
```

The bug was the missing `abs`.
"""

UNFENCED = """The distance must be absolute.
def has_close_elements(numbers, threshold):
    pairs = [(a, b) for i, a in enumerate(numbers) for j, b in enumerate(numbers) if i != j]
    return any(abs(a - b) < threshold for a, b in pairs)

This fixes it.
"""

BODY = """    for idx, elem in enumerate(numbers):
        for idx2, elem2 in enumerate(numbers):
            if idx != idx2:
                if abs(elem - elem2) < threshold:
                    return True
    return False
def check(f):
    assert False
check(has_close_elements)
"""


@pytest.mark.parametrize("completion", [FENCED, UNFENCED, BODY], ids=["fenced", "unfenced", "body"])
def test_single_shot_fixes_pass(completion: str, ws_of) -> None:
    task = one("Python/0")
    ws = ws_of(task)
    SCENARIO.apply_single_shot(task, ws, completion)
    src = (Path(ws.root) / "has_close_elements.py").read_text()
    assert "abs(" in src and "The bug was" not in src and "This fixes it" not in src
    res = SCENARIO.score(task, ws, [])
    assert res.passed, res.output


def test_single_shot_keeps_declaration_helpers(ws_of) -> None:
    task = one("Python/50")  # decode_shift; encode_shift is a helper in the declaration
    fixed_body = oracle_source(task).split("def decode_shift(s: str):\n", 1)[1]
    completion = f"```python\ndef decode_shift(s: str):\n{fixed_body}```"
    ws = ws_of(task)
    SCENARIO.apply_single_shot(task, ws, completion)
    assert SCENARIO.score(task, ws, []).passed


def test_single_shot_wrong_or_empty(ws_of) -> None:
    task = one("Python/0")
    ws = ws_of(task)
    before = (Path(ws.root) / "has_close_elements.py").read_text()
    SCENARIO.apply_single_shot(task, ws, "")
    assert (Path(ws.root) / "has_close_elements.py").read_text() == before
    wrong = "```python\ndef has_close_elements(numbers, threshold):\n    return True\n```"
    SCENARIO.apply_single_shot(task, ws, wrong)
    assert not SCENARIO.score(task, ws, []).passed


def test_extract_code_prefers_block_defining_entry_point() -> None:
    text = "```\npip install x\n```\n```python\nimport math\n```\n```python\ndef f(x):\n    return x\n```"
    assert extract_code(text, "f") == "def f(x):\n    return x\n"
    assert extract_code("```python\ndef f(x):\n    return x", "f") == "def f(x):\n    return x"  # unclosed
    assert extract_code("no code at all", "f") == "no code at all"


# ---------------------------------------------------------------------------------------
# Bogus: the oracle must score 0
# ---------------------------------------------------------------------------------------


def test_bogus_oracle_edits_still_fail(ws_of) -> None:
    btasks = BOGUS.load_tasks(TaskQuery())
    assert len(btasks) == 5 and len({t.statement for t in btasks}) == 5
    assert all(t.scenario == "bogus" for t in btasks)

    def verdicts(task: Task) -> tuple[ScoreResult, ScoreResult]:
        ws = Workspace.create(task.files, test_cmd=task.test_cmd)
        try:
            before = BOGUS.score(task, ws, [])
            write(ws, task.metadata["module"], oracle_source(task))
            return before, BOGUS.score(task, ws, [])
        finally:
            ws.cleanup()

    with ThreadPoolExecutor(WORKERS) as pool:
        results = list(pool.map(verdicts, btasks))
    for task, (before, after) in zip(btasks, results, strict=True):
        assert not before.passed and not after.passed, task.id
    assert results[4][1].details["timed_out"]
    assert "AssertionError" in results[0][1].output


def test_bogus_unknown_id() -> None:
    with pytest.raises(ConfigError, match="bogus: unknown task id 'Bogus/9'.*Bogus/0"):
        BOGUS.load_tasks(TaskQuery(task_ids=("Bogus/9",)))
    assert [t.id for t in BOGUS.load_tasks(TaskQuery(task_ids=("1",)))] == ["Bogus/1"]
