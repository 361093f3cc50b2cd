"""Ctrl-C (SIGINT) and SIGTERM stop a run cleanly at any moment: while the backend starts (its engine
loading in a child process, whose wait swallows KeyboardInterrupt as vLLM's does) and while episodes
run. The run exits 130 with one line, leaves no process behind, its traces are whole JSON, and
`--resume` finishes the rest. (SIGTERM during episodes: tests/test_runner.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

psutil = pytest.importorskip("psutil")

ROOT = Path(__file__).resolve().parent.parent
START_DELAY_S = 300  # the fake engine's load: a run that does not act on the signal outlives the test's wait
EXIT_WAIT_S = 60


def registry(tmp_path: Path, **fields: Any) -> Path:
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"default": "slow", "models": [{"name": "slow", "backend": "scripted", **fields}]}))
    return path


def launch(*args: str) -> subprocess.Popen[str]:
    """run_agents.py in its own session: its process group holds it and everything it starts."""
    return subprocess.Popen([sys.executable, str(ROOT / "run_agents.py"), "--no-embed", "--no-progress", "--agent",
                             "react", *args],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"}, start_new_session=True)


def wait_for_child(proc: subprocess.Popen[str], marker: str) -> Any:
    """The descendant of `proc` whose command line holds `marker`, once it runs."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            for child in psutil.Process(proc.pid).children(recursive=True):
                try:
                    if marker in " ".join(child.cmdline()):
                        return child
                except psutil.Error:
                    continue
        except psutil.Error:
            break
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"no process with {marker!r} appeared; stderr: {proc.communicate()[1][-2000:]}")


def stop(proc: subprocess.Popen[str], signum: int) -> str:
    """Send `signum`; the run must exit with 130 and say it was interrupted. Returns its stderr."""
    proc.send_signal(signum)
    try:
        _, err = proc.communicate(timeout=EXIT_WAIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError(f"{signal.Signals(signum).name} was not acted on") from None
    assert proc.returncode == 130, err[-3000:]
    assert f"interrupted ({signal.Signals(signum).name})" in err and "rerun with --resume" in err, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    return err


def assert_nothing_left(proc: subprocess.Popen[str], procs: list[Any]) -> None:
    """The processes seen during the run are gone, and so is every process of the run's group."""
    _, alive = psutil.wait_procs(procs, timeout=30)
    assert not alive, f"left running: {alive}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError("the run's process group still has processes")


def summary_of(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return data


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_stop_while_the_backend_starts(tmp_path: Path, signum: int) -> None:
    """The signal comes while the engine loads: the start is abandoned at once (no fallback, no
    episode), the engine process is ended by its pid, and --resume then runs everything."""
    out = tmp_path / "out"
    proc = launch("--registry", str(registry(tmp_path, script="oracle", start_delay_s=START_DELAY_S)),
                  "--n", "2", "--out", str(out))
    engine = wait_for_child(proc, "time.sleep(float(sys.argv[1]))")
    stop(proc, signum)
    assert_nothing_left(proc, [engine])
    assert not list(out.rglob("run_*.json"))  # no episode began

    # The delay is no part of the run's configuration: the same model without it resumes the run.
    r = subprocess.run([sys.executable, str(ROOT / "run_agents.py"), "--registry",
                        str(registry(tmp_path, script="oracle")), "--agent", "react", "--n", "2", "--out", str(out),
                        "--no-embed", "--resume"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    entry = summary_of(out)["slow"]["humanevalfix"]
    assert entry["n_tasks"] == 2 and entry["pass@1"] == 1.0


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_stop_while_episodes_run(tmp_path: Path, signum: int) -> None:
    """The signal comes while a tool's command runs: the run stops (no further episode starts), the
    command is not left behind, the traces are whole JSON, and --resume finishes every task."""
    script = tmp_path / "script.jsonl"
    hold = "THOUGHT: wait\nTOOL_CALL: " + json.dumps({"tool": "run_cmd", "args": {"cmd": "sleep 7 && echo held"}})
    script.write_text("\n".join(json.dumps(hold) for _ in range(3)) + "\n")
    reg = registry(tmp_path, script=str(script))
    out = tmp_path / "out"
    proc = launch("--registry", str(reg), "--n", "4", "--concurrency", "1", "--out", str(out))
    held = wait_for_child(proc, "sleep 7")
    stop(proc, signum)
    assert_nothing_left(proc, [held])
    traces = [json.loads(p.read_text()) for p in out.rglob("run_*.json")]
    assert traces and len(traces) < 4
    assert not all(t["outcome"]["completed"] for t in traces)

    script.write_text(json.dumps("THOUGHT: done\nFINAL: done") + "\n")  # same path: same configuration
    r = subprocess.run([sys.executable, str(ROOT / "run_agents.py"), "--registry", str(reg), "--agent", "react",
                        "--n", "4", "--concurrency", "1", "--out", str(out), "--no-embed", "--resume"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "resume: reused" in r.stderr
    entry = summary_of(out)["slow"]["humanevalfix"]
    assert entry["n_tasks"] == 4 and entry["n_episodes"] == 4
    for p in out.rglob("run_*.json"):
        assert json.loads(p.read_text())["outcome"]["completed"]
