"""Hostile and malformed files given to `agent-harness import` (and hostile traces given to the exports): each
is one skip line naming the file and the rest goes on; nothing crashes, hangs, or lands outside the folder.

The good files are the real tools' fixtures (tests/data/formats); the hostile ones are made from them here
(links, FIFOs, sizes and zip archives cannot sensibly be committed).
"""

from __future__ import annotations

import copy
import io
import json
import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from agent_harness.traces.formats import _read
from agent_harness.traces.formats.importing import import_traces
from agent_harness.traces.store import validate_trace

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data" / "formats"
GOOD_MINI = json.loads((DATA / "mini" / "Python-0.traj.json").read_text())
[GOOD_EVAL] = (DATA / "inspect").glob("*.eval")
ATIF = {"schema_version": "ATIF-v1.7", "agent": {"name": "a", "version": "1", "model_name": "m"},
        "steps": [{"step_id": 1, "source": "user", "message": "do it"},
                  {"step_id": 2, "source": "agent", "message": "done"}]}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent_harness.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)


def written(folder: Path) -> list[Path]:
    return sorted(folder.rglob("run_*.json"))


def one_skip(src: Path, to: Path, name: str, why: str) -> None:
    """Importing `src` (a folder with one good ATIF file and the hostile `name`) imports the good one and gives
    one skip line naming `name` that says `why`."""
    (src / "good.json").write_text(json.dumps(ATIF))
    done = import_traces(src, to)
    assert len(done.written) == 1, done.skipped
    lines = [s for s in done.skipped if name in s]
    assert len(lines) == 1 and why in lines[0] and "\n" not in lines[0], done.skipped
    for path in written(to):
        assert to.resolve() in path.resolve().parents


@pytest.mark.parametrize("case", ["symlink", "fifo", "big", "deep", "nan", "binary", "not-object"])
def test_hostile_files(case: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    name = f"{case}.json"
    path = src / name
    why = {"symlink": "symbolic link", "fifo": "not a regular file", "big": "larger than", "deep": "nested deeper",
           "nan": "", "binary": "", "not-object": "not an object"}[case]
    if case == "symlink":
        (tmp_path / "outside.json").write_text(json.dumps(ATIF))
        path.symlink_to(tmp_path / "outside.json")
    elif case == "fifo":
        os.mkfifo(path)  # nobody writes: a blocking open would hang the import
    elif case == "big":
        with open(path, "wb") as f:
            f.truncate(_read.MAX_SOURCE_BYTES + 10)  # sparse: the reader stops at the cap, whatever st_size says
    elif case == "deep":
        path.write_text("[" * 100_000 + "]" * 100_000)
    elif case == "nan":
        path.write_text('{"schema_version": "ATIF-v1.7", "x": NaN}')
    elif case == "binary":
        path.write_bytes(b"\xff\xfe\x00garbage\x80")
    else:
        path.write_text("[1, 2]")
    one_skip(src, tmp_path / "out", name, why)


def test_a_linked_folder_is_not_entered(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "t.json").write_text(json.dumps(ATIF))
    src = tmp_path / "src"
    src.mkdir()
    (src / "linked").symlink_to(tmp_path / "elsewhere")
    (src / "good.json").write_text(json.dumps(ATIF))
    done = import_traces(src, tmp_path / "out")
    assert len(done.written) == 1  # only good.json: the linked folder is named, never entered
    assert done.skipped == ["linked: a symbolic link to a folder (not followed)"], done.skipped


def atif_variant(change: Any) -> dict[str, Any]:
    doc = copy.deepcopy(ATIF)
    change(doc)
    return doc


ATIF_CASES = {
    "step-id-string": (lambda d: d["steps"][0].update(step_id="1"), "not a valid ATIF"),
    "message-int": (lambda d: d["steps"][1].update(message=5), "not a valid ATIF"),
    "unknown-source": (lambda d: d["steps"][1].update(source="root"), "not a valid ATIF"),
    "steps-not-list": (lambda d: d.update(steps={"a": 1}), "not a valid ATIF"),
    "ids-out-of-order": (lambda d: d["steps"][1].update(step_id=5), "expected 2"),
    "dangling-call": (lambda d: d["steps"][1].update(observation={"results": [{"source_call_id": "x"}]}),
                      "no tool call"),
    "bad-record": (lambda d: d["steps"][1].update(extra={"agent_harness": {"steps": [
        {"i": 0, "turn": 0, "type": "nonsense", "text": "x", "moved": []}]}}), "not a trace"),
    "record-negative": (lambda d: d["steps"][1].update(extra={"agent_harness": {"steps": [
        {"i": -4, "turn": 0, "type": "final", "text": "x", "moved": []}]}}), "not a trace"),
    "record-not-dict": (lambda d: d["steps"][1].update(extra={"agent_harness": {"steps": ["x"]}}), "malformed"),
    "header-hostile": (lambda d: d.update(extra={"agent_harness": {"header": {"run_id": 5, "model": "x"}}}),
                       "not a trace"),
}


@pytest.mark.parametrize("case", ATIF_CASES)
def test_malformed_atif(case: str, tmp_path: Path) -> None:
    change, why = ATIF_CASES[case]
    src = tmp_path / "src"
    src.mkdir()
    (src / f"{case}.json").write_text(json.dumps(atif_variant(change)))
    one_skip(src, tmp_path / "out", f"{case}.json", why)


def test_hostile_names_stay_inside_the_folder(tmp_path: Path) -> None:
    agent = {"name": "../../../escaped", "version": "1", "model_name": "../up/../x"}
    doc = atif_variant(lambda d: d.update(agent=agent, extra={"task_id": "../../a/b\n\x1b[31m"}))
    src = tmp_path / "src"
    src.mkdir()
    (src / "t.json").write_text(json.dumps(doc))
    to = tmp_path / "deep" / "out"
    done = import_traces(src, to)
    [path] = done.written
    assert to.resolve() in path.resolve().parents and not (tmp_path / "escaped").exists()
    trace = json.loads(path.read_text())
    assert trace["task_id"] == "../../a/b\n\x1b[31m" and trace["source"]["harness"] == "../../../escaped"
    assert validate_trace(trace) == []
    r = cli("import", str(src), "--to", str(tmp_path / "cli"), "--no-embed")
    assert r.returncode == 0 and "\x1b" not in r.stdout + r.stderr


def test_numbers_out_of_range_are_dropped(tmp_path: Path) -> None:
    doc = atif_variant(lambda d: d["steps"][1].update(metrics={"prompt_tokens": 10**30, "completion_tokens": 3}))
    (tmp_path / "t.json").write_text(json.dumps(doc))
    done = import_traces(tmp_path / "t.json", tmp_path / "out")
    [path] = done.written
    trace = json.loads(path.read_text())
    assert trace["steps"][-1]["tokens"] == {"completion": 3} and trace["outcome"]["prompt_tokens"] == 0


def test_long_texts_are_cut_and_too_many_steps_refused(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    long = atif_variant(lambda d: d["steps"][1].update(message="x" * (3 << 20)))
    (src / "long.json").write_text(json.dumps(long))
    many = atif_variant(lambda d: d.update(steps=[d["steps"][0]] + [
        {"step_id": n, "source": "agent", "message": "m"} for n in range(2, 60_002)]))
    (src / "many.json").write_text(json.dumps(many))
    done = import_traces(src, tmp_path / "out")
    [path] = done.written
    final = json.loads(path.read_text())["steps"][-1]["text"]
    assert len(final) < (1 << 20) + 100 and final.endswith("cut on import]")
    assert len(done.skipped) == 1 and "many.json" in done.skipped[0] and "steps" in done.skipped[0]


def mini_variant(change: Any) -> dict[str, Any]:
    doc = copy.deepcopy(GOOD_MINI)
    change(doc)
    return doc


MINI_CASES = {
    "messages-not-list": (lambda d: d.update(messages="x"), "no 'messages' list"),
    "message-not-dict": (lambda d: d["messages"].insert(2, 7), "not an object"),
}


@pytest.mark.parametrize("case", MINI_CASES)
def test_malformed_mini(case: str, tmp_path: Path) -> None:
    change, why = MINI_CASES[case]
    src = tmp_path / "src"
    src.mkdir()
    (src / f"{case}.traj.json").write_text(json.dumps(mini_variant(change)))
    one_skip(src, tmp_path / "out", f"{case}.traj.json", why)


def test_odd_mini_values_are_read_safely(tmp_path: Path) -> None:
    """Values of the wrong type or out of range are dropped, not trusted: the episode still imports."""
    def change(d: dict[str, Any]) -> None:
        first = d["messages"][2]
        first["tool_calls"][0]["function"]["arguments"] = "{not json"
        first["extra"]["response"]["usage"] = {"prompt_tokens": -5, "completion_tokens": True,
                                               "prompt_tokens_details": "x"}
        first["extra"]["timestamp"] = 1e300
        d["messages"][3]["content"] = [{"type": "text", "text": "part"}, 5, {"type": "image"}]
        d["info"]["model_stats"] = {"instance_cost": -1, "api_calls": 10**40}
        d["messages"].append({"role": "narrator", "content": {"nested": [1, 2]}})
    src = tmp_path / "src"
    src.mkdir()
    (src / "odd.traj.json").write_text(json.dumps(mini_variant(change)))
    done = import_traces(src, tmp_path / "out")
    [path] = done.written
    trace = json.loads(path.read_text())
    assert validate_trace(trace) == [] and not done.skipped
    call = trace["steps"][1]
    assert call["args"] == {"value": "{not json"} and "tokens" not in trace["steps"][0]
    assert trace["steps"][2]["text"] == "part" and trace["steps"][-1]["type"] == "feedback"


# -- Inspect .eval archives ------------------------------------------------------------------------------------
def eval_with(members: dict[str, bytes], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def good_members() -> dict[str, bytes]:
    pytest.importorskip("zstandard")
    archive = _read.Archive(GOOD_EVAL.read_bytes())
    return {n: archive.read(n) for n in archive.names()}


def lie_about_size(raw: bytes, size: int) -> bytes:
    """`raw` (a one-member zip) with the central directory claiming `size` bytes decompressed."""
    at = raw.rfind(b"PK\x01\x02")
    return raw[:at + 24] + struct.pack("<I", size) + raw[at + 28:]


def test_eval_archives_within_caps(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    members = good_members()
    (src / "good.eval").write_bytes(eval_with(members))  # deflate instead of zstd: read all the same
    (src / "garbage.eval").write_bytes(b"PK\x03\x04 not really a zip")
    (src / "honest-bomb.eval").write_bytes(eval_with({"header.json": b"\0" * (_read.MAX_MEMBER_BYTES + 1)}))
    lying = eval_with({"header.json": b"\0" * (_read.MAX_MEMBER_BYTES + 1024)})
    (src / "lying-bomb.eval").write_bytes(lie_about_size(lying, 100))
    enc = bytearray(eval_with({"header.json": b"{}"}))
    at = enc.rfind(b"PK\x01\x02")
    enc[at + 8] |= 1  # the encrypted flag
    (src / "encrypted.eval").write_bytes(bytes(enc))
    (src / "no-header.eval").write_bytes(eval_with({"samples/x.json": b"{}"}))
    hostile = dict(members)
    sample = next(n for n in hostile if n.startswith("samples/"))
    data = json.loads(hostile[sample])
    data["messages"] = "x"
    hostile[sample] = json.dumps(data).encode()
    (src / "bad-sample.eval").write_bytes(eval_with(hostile))
    loop = dict(members)
    data = json.loads(loop[sample])
    data["attachments"] = {"a": "attachment://a"}
    data["messages"][1]["content"] = "attachment://a"
    loop[sample] = json.dumps(data).encode()
    (src / "attachment-loop.eval").write_bytes(eval_with(loop))
    done = import_traces(src, tmp_path / "out")
    by_file = {line.split(":")[0]: line for line in done.skipped}
    assert set(by_file) == {"garbage.eval", "honest-bomb.eval", "lying-bomb.eval", "encrypted.eval",
                            "no-header.eval", "bad-sample.eval"}, done.skipped
    assert "not a readable zip" in by_file["garbage.eval"] and "over the cap" in by_file["honest-bomb.eval"]
    assert "over the cap" in by_file["lying-bomb.eval"] and "encrypted" in by_file["encrypted.eval"]
    assert len(done.written) == 4  # good.eval and attachment-loop.eval: two samples each


# -- hostile traces given to the exports ------------------------------------------------------------------------
def test_exports_of_hostile_traces_stay_inside_and_redact_secrets(tmp_path: Path) -> None:
    import numpy as np

    from agent_harness import secrets
    from agent_harness.analysis import _synthetic
    from agent_harness.sandbox.safewrite import write_file
    from agent_harness.traces.formats.atif import check
    from agent_harness.traces.formats.exporting import export

    key = "sk-formats-test-0123456789abcdef"
    secrets.register(key)
    traces = tmp_path / "traces"
    rng = np.random.default_rng(0)
    for n, model in enumerate(("../../escaped", "a/b\x1b[2J", "ok")):
        trace = _synthetic.episode(model, "../scen", "gold", n, n % 2 == 0, rng, dim=8,
                                   text=f"the key is {key}", task_prefix="../../t")
        trace["timestamp"] = ["not a date", "2026-13-45", "2026-11-29T06:00:00"][n]  # text, of any kind
        write_file(traces, f"m{n}/s/l/run_x__s0.json", json.dumps(trace).encode())
    (traces / "m9").mkdir()
    (traces / "m9" / "run_bad__s0.json").write_text('{"schema_version": "1.9"}')
    for fmt in ("atif", "inspect"):
        if fmt == "inspect":
            pytest.importorskip("inspect_ai")
        to = tmp_path / fmt
        episodes, _ = export(traces, to, fmt)
        assert episodes == 3
        files = [p for p in tmp_path.rglob("*") if p.is_file() and to in p.parents]
        assert files and all(to.resolve() in p.resolve().parents for p in files)
        assert not (tmp_path / "escaped").exists()
        for p in files:
            assert key.encode() not in p.read_bytes()  # nor in the .eval archive's members:
            if p.suffix == ".eval":
                archive = _read.Archive(p.read_bytes())
                assert all(key.encode() not in archive.read(n) for n in archive.names())
            else:
                assert check(json.loads(p.read_text())) == []
