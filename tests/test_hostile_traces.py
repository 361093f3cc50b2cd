"""A hostile or corrupt traces folder (traces are shared as datasets) through the real commands:
`analyze compare_models`, `analyze report`, `export`, and runs with and without `--resume` whose --out
holds it. Each bad file is skipped with one line naming it, the good traces are all counted, nothing
hangs (subprocess timeouts), and no file outside the folder reaches the output.

The good traces come from a real scripted run through the CLI; the bad ones are mutations of them.
"""

from __future__ import annotations

import copy
import json
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_harness.sandbox import safefs
from agent_harness.traces.jsontext import MAX_DEPTH, parse_json, too_deep
from agent_harness.traces.store import load_traces, write_json_atomic

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 300
SECRET = "OUTSIDE-SECRET-7f3a"
DEEP_DIRS = 1200  # deeper than Python's recursion limit: a recursive walk (Path.rglob) fails here
ESC_NAME = "run_\x1b[31mred.json"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "agent_harness.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=TIMEOUT, env=env)


def run(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return cli("run", "--models", "oracle,null", "--agent", "react", "--n", "2", "--out", str(out), "--no-embed",
               "--no-progress", *extra)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four real traces (two scripted models × two HumanEvalFix tasks), with step embeddings added."""
    out = tmp_path_factory.mktemp("base") / "traces"
    r = run(out)
    assert r.returncode == 0, r.stderr[-3000:]
    rng = random.Random(0)
    for p in out.rglob("run_*.json"):
        t = json.loads(p.read_text())
        for s in t["steps"]:
            s["embedding"] = [round(rng.uniform(-1, 1), 6) for _ in range(8)]
        t["embeddings"] = {"model": "test-embedder", "dim": 8}
        p.write_text(json.dumps(t))
    return out


def _variant(trace: dict[str, Any], name: str, change: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    t = copy.deepcopy(trace)
    t["run_id"] = name
    t["fingerprint"]["hash"] = name  # not this run's configuration: the run's summary leaves it out
    change(t)
    return t


BAD = {  # file name -> what its skip line says
    "run_deep.json": f"nested deeper than {MAX_DEPTH}",
    "run_fifo.json": "a FIFO, not a regular file",
    "run_zero.json": "a symbolic link (not followed)",
    "run_sparse.json": "larger than",
    "run_types.json": "outcome/passed: expected true or false, got str 'yes'",
    "run_nan.json": "non-finite number NaN",
    "run_inf.json": "non-finite number Infinity",
    "run_overflow.json": "out of range for a float",
    "run_turn.json": "steps/1/turn: 1000000000 is out of range",
    "run_nanemb.json": "non-finite number NaN",
    "run_latin1.json": "not UTF-8",
    "run_outside.json": "a symbolic link (not followed)",
    "elsewhere": "a symbolic link to a folder (not followed)",
    ESC_NAME: "JSONDecodeError",
}
GOOD_MODELS = ("$\\frac{}$ $x^$", "sur\ufffdrogate", "huge-emb", "long-turns")  # as loaded


def plant(folder: Path, outside: Path) -> Path:
    """Copy nothing; add to `folder` (a copy of the base run) every bad file of BAD and four good traces
    whose values are odd but allowed. Returns the folder of deep nesting (to be removed by the caller)."""
    gold = folder / "oracle" / "humanevalfix" / "gold"
    trace = json.loads((gold / "run_Python-0__s0.json").read_text())

    def write(name: str, t: dict[str, Any], text: str | None = None) -> None:
        (gold / name).write_text(text if text is not None else json.dumps(t), encoding="utf-8")

    deep = json.dumps(_variant(trace, "deep", lambda t: None))
    write("run_deep.json", {}, deep[:-1] + ',"x":' + "[" * 200_000 + "]" * 200_000 + "}")
    os.mkfifo(gold / "run_fifo.json")
    os.symlink("/dev/zero", gold / "run_zero.json")
    with open(gold / "run_sparse.json", "wb") as f:
        f.truncate(16 << 30)
    write("run_types.json", _variant(trace, "types", lambda t: t["outcome"].update(passed="yes")))
    write("run_nan.json", _variant(trace, "nan", lambda t: t["outcome"].update(elapsed_seconds=float("nan"))))
    write("run_inf.json", _variant(trace, "inf", lambda t: t["steps"][0].update(latency_s=float("inf"))))
    write("run_overflow.json", {}, json.dumps(_variant(trace, "ovf", lambda t: t["outcome"].update(
        elapsed_seconds=12345.5))).replace("12345.5", "1e999"))
    write("run_turn.json", _variant(trace, "turn", lambda t: t["steps"][1].update(turn=1_000_000_000)))
    write("run_nanemb.json", _variant(trace, "nanemb", lambda t: [s.update(embedding=[float("nan")] * 8)
                                                                  for s in t["steps"]]))
    (gold / "run_latin1.json").write_bytes(json.dumps(_variant(trace, "latin1", lambda t: None)).encode()
                                           .replace(b'"gold"', b'"g\xf6ld"'))
    write(ESC_NAME, {}, "{")
    secret = _variant(trace, "outside", lambda t: t["model"].update(name=SECRET))
    (outside / "run_secret.json").write_text(json.dumps(secret))
    os.symlink(outside / "run_secret.json", gold / "run_outside.json")
    os.symlink(outside, folder / "elsewhere")

    # Good: odd but allowed values. Model names matplotlib would read as math text; a lone surrogate
    # escape; vectors beyond float32 (1e300: no usable vector) or squaring past it (1e38); a turn near the
    # cap and a label 50,000 characters long.
    write("run_math.json", _variant(trace, "math", lambda t: t["model"].update(name=GOOD_MODELS[0])))
    write("run_surrogate.json", {}, json.dumps(_variant(trace, "sur", lambda t: (
        t["model"].update(name="sur@@rogate"), t["steps"][0].update(text="a @@ b"))))
        .replace("@@", "\\ud800"))
    write("run_huge_emb.json", _variant(trace, "huge", lambda t: (t["model"].update(name="huge-emb"), [
        s.update(embedding=[1e300 if n % 2 else 1e38] * 8) for n, s in enumerate(t["steps"])])))
    write("run_long_turns.json", _variant(trace, "long", lambda t: (t.update(label="L" * 50_000),  # plot labels
        t["model"].update(name="long-turns"), t["steps"][-1].update(turn=999_999))))
    top = folder / "deepdirs"
    top.mkdir()
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(DEEP_DIRS):
        os.mkdir("d", dir_fd=fd)
        sub = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = sub
    os.close(fd)
    return top


@pytest.fixture
def hostile(base: Path, tmp_path: Path) -> Any:
    folder = tmp_path / "traces"
    shutil.copytree(base, folder)
    outside = tmp_path / "outside"
    outside.mkdir()
    deep = plant(folder, outside)
    yield folder
    safefs.remove_tree(deep)  # 1200 deep: shutil.rmtree (pytest's cleanup) recurses


def named_once(output: str) -> None:
    """Each bad file is named exactly once, with its reason; no raw control character reaches the output."""
    assert "\x1b" not in output
    lines = output.splitlines()
    for name, why in BAD.items():
        shown = name.replace("\x1b", "\\x1b")
        hits = [ln for ln in lines if shown in ln]
        assert len(hits) == 1, (name, hits, output[-4000:])
        assert why in hits[0], (name, hits[0])


def test_compare_models_skips_each_bad_file_once_and_counts_the_good(hostile: Path, tmp_path: Path) -> None:
    import pandas as pd

    r = cli("analyze", "compare_models", str(hostile), "--out", str(tmp_path / "cm"))
    assert r.returncode == 0, r.stderr[-4000:]
    named_once(r.stdout + r.stderr)
    assert f"skipped {len(BAD)} unreadable trace file(s)" in r.stderr
    table = pd.read_csv(tmp_path / "cm" / "pass_at_k.csv", keep_default_na=False)
    assert table["episodes"].sum() == 8  # the four real traces and the four odd but valid ones
    assert set(GOOD_MODELS) | {"oracle", "null"} == set(table["model"])
    assert table["suspicious"].sum() == 0
    # A turn of 999,999 does not make a row per turn: the budget curve grows with the episodes only.
    assert len(pd.read_csv(tmp_path / "cm" / "pass_vs_steps.csv")) < 8 * 60


def test_report_renders_every_allowed_value_and_nothing_from_outside(hostile: Path, tmp_path: Path) -> None:
    r = cli("analyze", "report", str(hostile), "--out", str(tmp_path / "rep"))
    assert r.returncode == 0, r.stderr[-4000:]
    named_once(r.stdout + r.stderr)
    page = (tmp_path / "rep" / "report.html").read_text(encoding="utf-8")
    assert SECRET not in page
    assert "$\\\\frac{}$ $x^$" in page and "sur\ufffdrogate" in page  # as text (JSON-escaped in the viewer)
    assert f"{len(BAD)} unreadable trace file(s) skipped" in page
    assert (tmp_path / "rep" / "spectral.md").is_file() and (tmp_path / "rep" / "pass_at_1.png").stat().st_size


def test_export_skips_each_bad_file_once(hostile: Path, tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    (hostile / "runs.jsonl").unlink()
    os.mkfifo(hostile / "runs.jsonl")
    (hostile / "summary.json").unlink()
    os.symlink("/dev/zero", hostile / "summary.json")
    r = cli("export", str(hostile), "--to", str(tmp_path / "ds"))
    assert r.returncode == 0, r.stderr[-4000:]
    named_once(r.stdout + r.stderr)
    assert "runs.jsonl: a FIFO, not a regular file" in r.stderr and "summary.json: a symbolic link" in r.stderr
    table = pq.read_table(tmp_path / "ds" / "data")
    assert table.num_rows == 8 and SECRET not in (tmp_path / "ds" / "README.md").read_text()


@pytest.mark.parametrize("resume", [True, False])
def test_a_run_into_the_folder_finishes_with_a_summary(hostile: Path, resume: bool) -> None:
    """The run's own traces are reused (--resume) or redone; a bad file at one of its own trace paths is
    named and replaced; the rest are named once by the summary, which covers this run's 4 episodes."""
    mine = hostile / "null" / "humanevalfix" / "gold" / "run_Python-1__s0.json"
    mine.unlink()
    os.mkfifo(mine)
    (hostile / "runs.jsonl").unlink(missing_ok=True)
    os.mkfifo(hostile / "runs.jsonl")  # appending to it would block the run forever
    r = run(hostile, *(["--resume"] if resume else []))
    assert r.returncode == 0, r.stderr[-4000:]
    assert "runs.jsonl: not written (a FIFO, not a regular file)" in r.stderr
    named_once(r.stdout + r.stderr)
    assert sum(str(mine) in ln for ln in r.stderr.splitlines()) == 1
    assert "a FIFO, not a regular file" in next(ln for ln in r.stderr.splitlines() if str(mine) in ln)
    summary = json.loads((hostile / "summary.json").read_text())
    assert {m: s["humanevalfix"]["n_episodes"] for m, s in summary.items()} == {"oracle": 2, "null": 2}
    assert summary["oracle"]["humanevalfix"]["pass@1"] == 1.0 and summary["null"]["humanevalfix"]["suspicious"] == 0
    assert mine.is_file() and json.loads(mine.read_text())["outcome"]["completed"] is True
    if resume:
        assert "resume: reused 3, redid 1 (0 config changed, 1 incomplete)" in r.stderr


# -- the pieces, directly --------------------------------------------------------------------------------

def test_append_refuses_what_is_not_a_regular_file_without_blocking(tmp_path: Path) -> None:
    from agent_harness.traces.files import append_text

    os.mkfifo(tmp_path / "fifo")
    os.symlink(tmp_path / "target", tmp_path / "link")
    for name in ("fifo", "link"):
        with pytest.raises(OSError):
            append_text(tmp_path / name, "x\n")
    assert not (tmp_path / "target").exists()
    append_text(tmp_path / "log", "a\n")
    append_text(tmp_path / "log", "b\n")
    assert (tmp_path / "log").read_text() == "a\nb\n"

def _depth_by_hand(raw: bytes) -> int:
    """Bracket depth outside strings, one character at a time (the reference for `too_deep`)."""
    depth = deepest = 0
    in_string = escaped = False
    for c in raw.decode("utf-8"):
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


def _random_value(rng: random.Random, depth: int) -> Any:
    pieces = ["\\", '"', "[", "]", "{", "}", "\\\\", '\\"', "a", "\n", "é"]
    if depth <= 0 or rng.random() < 0.3:
        return "".join(rng.choice(pieces) for _ in range(rng.randint(0, 6)))
    if rng.random() < 0.5:
        return [_random_value(rng, depth - 1) for _ in range(rng.randint(0, 3))]
    return {_random_value(rng, 0): _random_value(rng, depth - 1) for _ in range(rng.randint(0, 3))}


def test_the_nesting_scan_agrees_with_a_character_by_character_count() -> None:
    """Strings full of brackets, quotes and backslashes; chunk edges inside runs of backslashes."""
    import agent_harness.traces.jsontext as tio

    rng = random.Random(1)
    chunk = tio._CHUNK
    try:
        tio._CHUNK = 7  # many chunk edges, some inside strings and backslash runs
        for _ in range(400):
            raw = json.dumps(_random_value(rng, rng.randint(1, 12)), ensure_ascii=False).encode()
            depth = _depth_by_hand(raw)
            for limit in (depth - 1, depth):
                if limit >= 0:
                    assert tio.too_deep(raw, limit) is (depth > limit), (raw, limit)
    finally:
        tio._CHUNK = chunk
    assert too_deep(b"[" * 200_000) and not too_deep(b'"' + b"[" * 200_000 + b'"')


def test_the_writer_keeps_model_nesting_within_what_the_reader_takes(tmp_path: Path) -> None:
    """Tool args a model nested 500 deep or holding NaN (strict JSON allows both) are stored as text past
    the cap and as null, so the episode's trace is not refused (which would drop it from pass@1)."""
    args: Any = "leaf"
    for _ in range(500):
        args = {"k": [args]}
    trace = {"steps": [{"i": 0, "args": args}, {"args": {"x": float("nan"), "y": [1e999]}, "embedding": [0.5, 1e999]}],
             "note": "\ud800"}
    write_json_atomic(tmp_path / "t.json", trace)
    raw = (tmp_path / "t.json").read_bytes()
    assert not too_deep(raw)
    back = parse_json(raw)
    node = back["steps"][0]["args"]
    levels = 0
    while not isinstance(node, str):
        node = node["k"] if isinstance(node, dict) else node[0]
        levels += 1
    assert levels > 100 and "leaf" in node and json.loads(node) and back["note"] == "\ufffd"
    assert back["steps"][1] == {"args": {"x": None, "y": [None]}, "embedding": None}


def test_a_lone_surrogate_and_huge_vectors_load_as_usable_values(hostile: Path) -> None:
    import numpy as np

    frames = load_traces(hostile)
    assert len(frames.skipped) == len(BAD) and len(frames.runs) == 8
    assert "sur\ufffdrogate" in set(frames.runs["model"])
    huge = frames.steps["run_id"] == "huge"
    flags = frames.steps.loc[huge, "has_embedding"].tolist()
    assert flags == [n % 2 == 0 for n in range(len(flags))]  # 1e300 is no float32: that row has no vector
    assert np.isfinite(frames.embeddings[frames.steps["has_embedding"].to_numpy()]).all()
