"""Writes into folders the harness did not create (a shared traces folder, an existing --out): a symlink, FIFO,
hard link or file planted where an output goes is never written through, followed or opened; a planted
entry where a folder goes is refused with one line and exit 2 before anything is written; and a run's
summary covers every episode it wrote.

Through the real commands (`analyze`, `run`, `export`, `analyze screenshot`) on real folders; the
victims are files and folders outside the output that must come out untouched.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from agent_harness.analysis import _synthetic as syn
from agent_harness.sandbox import safewrite

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 300  # a planted FIFO that were opened would block: the timeout turns that into a failure
VICTIM = "victim: must stay as it is\n"


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "agent_harness.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=TIMEOUT, env=env)


def run(out: Path) -> subprocess.CompletedProcess[str]:
    return cli("run", "--models", "oracle", "--agent", "react", "--n", "1", "--out", str(out), "--no-embed",
               "--no-progress")


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder outside every output, with a file in it that nothing may change."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "victim.txt").write_text(VICTIM)
    return folder


def untouched(outside: Path) -> None:
    assert sorted(p.name for p in outside.iterdir()) == ["victim.txt"]
    assert (outside / "victim.txt").read_text() == VICTIM


def plant(path: Path, kind: str, outside: Path) -> None:
    """A symlink to the victim (or to the outside folder), a FIFO, a hard link to the victim, or a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "link":
        os.symlink(outside / "victim.txt", path)
    elif kind == "dirlink":
        os.symlink(outside, path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "hardlink":
        os.link(outside / "victim.txt", path)
    else:
        path.write_text("a file\n")


def one_line_refusal(r: subprocess.CompletedProcess[str], where: Path) -> None:
    """Exit 2 with one error line naming `where` (the loader may have named a linked folder it skipped)."""
    assert r.returncode == 2, (r.returncode, r.stderr[-3000:])
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error")]
    assert len(errors) == 1 and str(where) in errors[0], r.stderr[-3000:]
    assert r.stderr.rstrip("\n").endswith(errors[0])


# -- analyze: the default output folder inside a traces folder ---------------------------------------------
def test_analyze_replaces_planted_files_and_writes_through_none(tmp_path: Path, outside: Path) -> None:
    traces = tmp_path / "traces"
    syn.oracle_null_set(traces, n_tasks=3, dim=8)
    planted = {"compare_models.md": "link", "pass_at_k.csv": "fifo", "pass_at_1.png": "hardlink",
               "tool_use.png": "link", "report.html": "fifo"}
    for name, kind in planted.items():
        plant(traces / "analysis" / name, kind, outside)
    for analysis in ("compare_models", "report"):
        r = cli("analyze", analysis, str(traces))
        assert r.returncode == 0, r.stderr[-3000:]
    untouched(outside)
    for name in planted:
        st = os.lstat(traces / "analysis" / name)
        assert stat.S_ISREG(st.st_mode) and st.st_nlink == 1, name  # a file of its own, not the planted entry
    assert "# Model comparison" in (traces / "analysis" / "compare_models.md").read_text()
    assert not [p for p in (traces / "analysis").iterdir() if p.name.endswith(".tmp")]  # no temp file left


@pytest.mark.parametrize("kind", ["dirlink", "fifo", "file"])
def test_analyze_refuses_an_output_folder_that_is_not_one(tmp_path: Path, outside: Path, kind: str) -> None:
    traces = tmp_path / "traces"
    syn.oracle_null_set(traces, n_tasks=2, dim=8)
    plant(traces / "analysis", kind, outside)
    r = cli("analyze", "compare_models", str(traces))
    one_line_refusal(r, traces / "analysis")
    untouched(outside)


# -- run: the model / scenario / label folders of an existing --out ----------------------------------------
@pytest.mark.parametrize("level", [1, 2, 3])
@pytest.mark.parametrize("kind", ["dirlink", "fifo"])
def test_a_run_refuses_a_planted_folder_of_its_out_before_any_work(tmp_path: Path, outside: Path, level: int,
                                                                     kind: str) -> None:
    out = tmp_path / "out"
    where = out.joinpath(*["oracle", "humanevalfix", "gold"][:level])
    plant(where, kind, outside)
    r = run(out)
    one_line_refusal(r, where)
    assert "not followed" in r.stderr
    untouched(outside)
    assert not (out / "summary.json").exists() and not list(out.rglob("run_*.json"))


def test_a_run_replaces_planted_files_and_its_summary_covers_its_episode(tmp_path: Path, outside: Path) -> None:
    out = tmp_path / "out"
    mine = out / "oracle" / "humanevalfix" / "gold" / "run_Python-0__s0.json"
    plant(mine, "link", outside)
    plant(out / "summary.json", "hardlink", outside)
    plant(out / "runs.jsonl", "hardlink", outside)  # appended to, not replaced: refused, the run goes on
    plant(out / "oracle" / "humanevalfix" / "gold" / ".run_Python-0__s0.json.stale.tmp", "link", outside)
    os.symlink(outside, out / "other-model")  # not one of the run's folders: left alone, not read
    r = run(out)
    assert r.returncode == 0, r.stderr[-3000:]
    untouched(outside)
    assert mine.is_file() and not mine.is_symlink() and json.loads(mine.read_text())["outcome"]["completed"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["oracle"]["humanevalfix"]["n_episodes"] == 1
    assert os.lstat(out / "summary.json").st_nlink == 1
    assert re.search(r"runs.jsonl: not written \(a file with \d names \(a hard link\)", r.stderr), r.stderr
    assert not list((out / "oracle" / "humanevalfix" / "gold").glob(".*.tmp"))  # the stale link removed


# -- export and screenshot ----------------------------------------------------------------------------------
def test_export_refuses_a_link_as_its_folder(tmp_path: Path, outside: Path) -> None:
    traces = tmp_path / "traces"
    syn.oracle_null_set(traces, n_tasks=1, dim=8)
    empty = tmp_path / "empty"
    empty.mkdir()
    os.symlink(empty, tmp_path / "ds")
    r = cli("export", str(traces), "--to", str(tmp_path / "ds"))
    one_line_refusal(r, tmp_path / "ds")
    assert not list(empty.iterdir()) and not [p for p in tmp_path.iterdir() if ".partial" in p.name]


@pytest.mark.skipif(shutil.which("chromium") is None, reason="no chromium on PATH")
def test_screenshot_replaces_a_planted_link(tmp_path: Path, outside: Path) -> None:
    page = tmp_path / "page.html"
    page.write_text("<!DOCTYPE html><html><body><h1>hello</h1></body></html>")
    png = tmp_path / "shot.png"
    os.symlink(outside / "victim.txt", png)
    r = cli("analyze", "screenshot", str(page), str(png))
    assert r.returncode == 0, r.stderr[-3000:]
    untouched(outside)
    assert not png.is_symlink() and png.read_bytes().startswith(b"\x89PNG")


# -- the helpers, directly ---------------------------------------------------------------------------------
def test_safewrite_never_leaves_its_root(tmp_path: Path, outside: Path) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    os.symlink(outside, root / "sub" / "link")
    for rel in ("sub/link/x.txt", "../outside/x.txt", "/etc/x.txt"):
        with pytest.raises(safewrite.UnsafePath):
            safewrite.write_file(root, rel, b"x")
    safewrite.write_file(root, "sub/link", b"replaced")  # the link itself is replaced, not followed
    assert not (root / "sub" / "link").is_symlink() and (root / "sub" / "link").read_bytes() == b"replaced"
    (root / "sub" / "dir").mkdir()
    with pytest.raises(safewrite.UnsafePath, match="a folder where a file"):
        safewrite.write_file(root, "sub/dir", b"x")
    untouched(outside)
    assert safewrite.write_file(root, "new/deeper/x.txt", b"ok").read_bytes() == b"ok"
    assert sorted(p.name for p in (root / "new" / "deeper").iterdir()) == ["x.txt"]
