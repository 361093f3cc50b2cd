"""A run killed with SIGKILL (as the OOM killer does) cannot remove its workspaces; the next run removes them
(issue 44). Temp folders carry their owner's pid and start time; only those of a dead owner, in this boot
and pid namespace, are removed, and never through a link."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent_harness.sandbox.tempdirs import owned_tempdir, reap_orphans, start_time

psutil = pytest.importorskip("psutil")
ROOT = Path(__file__).resolve().parent.parent
OURS = ("agent-harness-ws-", "agent-harness-score-", "agent-harness-home-", "agent-harness-etc-",
        "agent-harness-probe-")


def registry(tmp_path: Path, script: Path) -> Path:
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"default": "held", "models": [
        {"name": "held", "backend": "scripted", "script": str(script)}]}))
    return path


def run_args(reg: Path, out: Path, *more: str) -> list[str]:
    return [sys.executable, str(ROOT / "run_agents.py"), "--registry", str(reg), "--agent", "react", "--n", "3",
            "--concurrency", "3", "--out", str(out), "--no-embed", "--no-progress", *more]


def leftovers(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith(OURS))


def test_workspaces_of_a_killed_run_are_removed_by_the_next(tmp_path: Path) -> None:
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TMPDIR": str(tmp)}
    script = tmp_path / "script.jsonl"
    hold = "THOUGHT: wait\nTOOL_CALL: " + json.dumps({"tool": "run_cmd", "args": {"cmd": "sleep 60 && echo held"}})
    script.write_text("\n".join(json.dumps(hold) for _ in range(3)) + "\n")
    reg, out = registry(tmp_path, script), tmp_path / "out"
    proc = subprocess.Popen(run_args(reg, out), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    commands: list[Any] = []
    try:
        deadline = time.monotonic() + 120
        while len([n for n in leftovers(tmp) if n.startswith("agent-harness-ws-")]) < 3 or not _sleeping(proc):
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()[1][-3000:]
            time.sleep(0.1)
        commands = psutil.Process(proc.pid).children(recursive=True)
        os.kill(proc.pid, signal.SIGKILL)  # the harness alone, as the OOM killer would
        proc.communicate(timeout=60)
    finally:
        _kill_group(proc.pid)
        for p in commands:  # the rlimit fallback's commands outlive the harness (bwrap's do not)
            with contextlib.suppress(psutil.Error):
                p.kill()
    left = leftovers(tmp)
    assert len([n for n in left if n.startswith("agent-harness-ws-")]) >= 3, left  # what the kill leaves
    assert all(f".{proc.pid}." in n for n in left), left

    script.write_text(json.dumps("THOUGHT: done\nFINAL: done") + "\n")  # same path: same configuration
    r = subprocess.run(run_args(reg, out, "--resume"), cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert not [n for n in leftovers(tmp) if f".{proc.pid}." in n or n.startswith(("agent-harness-ws-",
                                                                                   "agent-harness-score-"))]


def _sleeping(proc: subprocess.Popen[str]) -> bool:
    """Whether the run's commands are running (each episode is mid-command)."""
    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        return False
    found = 0
    for k in kids:
        try:
            found += "sleep 60" in " ".join(k.cmdline())
        except psutil.Error:
            continue
    return found >= 3


def _kill_group(pgid: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return
        time.sleep(0.1)


def dead_owner_dirs(tmp: Path, n: int) -> list[Path]:
    """`n` owned temp folders made by one process that has exited since."""
    code = ("from agent_harness.sandbox.tempdirs import owned_tempdir\n"
            f"for _ in range({n}):\n    d = owned_tempdir('ws'); (d / 'f').write_text('x'); print(d)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT)})
    return [Path(line) for line in r.stdout.split()]


def test_only_folders_of_dead_owners_are_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    live = owned_tempdir("ws")  # this process's (its first one reaps: made before the dead ones)
    dead, link = dead_owner_dirs(tmp, 2)
    assert live.parent == tmp and start_time(os.getpid()) is not None
    reused = tmp / dead.name.replace(f".{dead.name.split('.')[1]}.", f".{os.getpid()}.")  # our pid, another start
    reused.mkdir()
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("x")
    os.rename(link, tmp_path / "gone")
    link.symlink_to(victim)  # a link with an owned name: never followed, never removed
    plain = tmp / "agent-harness-ws-notours"
    plain.mkdir()
    other_scope = tmp / ("agent-harness-ws-00000000" + dead.name[len("agent-harness-ws-") + 8:])
    other_scope.mkdir()
    removed = reap_orphans(tmp)
    assert sorted(removed) == sorted([dead.name, reused.name])
    assert not dead.exists() and not reused.exists()
    assert live.is_dir() and plain.is_dir() and other_scope.is_dir() and link.is_symlink()
    assert (victim / "keep").exists()
    live.rmdir()


def test_names_carry_the_owner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    d = owned_tempdir("hef-score")
    _, pid, start, _rand = d.name.removeprefix("agent-harness-hef-score-").split(".")
    assert (int(pid), int(start)) == (os.getpid(), start_time(os.getpid()))
    d.rmdir()
    with pytest.raises(ValueError):
        owned_tempdir("../x")
