"""Strict pairing: one completion per request, or the requests of that batch fail, naming the count;
a backend that is down ends the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent_harness.backends.local import complete
from agent_harness.errors import BackendError
from agent_harness.registry import PROJECT_ROOT
from agent_harness.types import Completion

# The scripted backend with one completion dropped from every batch (its batch function), or down, run
# through the CLI.
BROKEN = r"""
import sys
from agent_harness import backends
from agent_harness.backends import scripted
from agent_harness.cli import run_agents_main
from agent_harness.errors import BackendUnavailable

class Dropping(scripted.ScriptedBackend):
    def _answer(self, conversations, params, seeds, metas):
        return super()._answer(conversations, params, seeds, metas)[:-1]

class Down(scripted.ScriptedBackend):
    async def complete(self, conversation, params, meta=None):
        raise BackendUnavailable("http://127.0.0.1:9/v1: gave up after 3 attempt(s); last: connection refused")

def create(spec):
    return {"drop": Dropping, "down": Down}[sys.argv[1]](spec.script)

scripted.create_broken = create
backends.BACKENDS["scripted"] = "agent_harness.backends.scripted:create_broken"
sys.exit(run_agents_main(sys.argv[2:]))
"""


def _run(how: str, out: Path) -> subprocess.CompletedProcess[str]:
    args = ["--models", "oracle", "--agent", "react", "--n", "3", "--out", str(out), "--no-embed", "--concurrency", "3"]
    return subprocess.run([sys.executable, "-c", BROKEN, how, *args], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def test_complete_names_the_missing_row() -> None:
    c = Completion("x", 1, 1, "stop", 0.0)
    assert complete([c, c]) == [c, c]
    with pytest.raises(BackendError, match=r"no completion for conversation 1 of 3 \(2 missing\)"):
        complete([c, None, None])


def test_a_batch_missing_a_completion_fails_its_requests_unscored(tmp_path: Path) -> None:
    """No reply is paired with the wrong episode: each request of a short batch fails, its episode ends
    with the count named and no verdict (the backend failed, not the model); the run goes on."""
    out = tmp_path / "t"
    proc = _run("drop", out)
    assert proc.returncode == 0, proc.stderr
    traces = [json.loads(p.read_text()) for p in sorted(out.rglob("run_*.json"))]
    assert len(traces) == 3
    for t in traces:
        o = t["outcome"]
        assert o["completed"] and o["exit_reason"] == "error" and o["passed"] is None
        assert "sending the prompt failed: BackendError: scripted oracle: " in o["error"]
        assert "completions for a batch of" in o["error"]
        assert o["score_error"]["type"] == "BackendError"
    summary = json.loads((out / "summary.json").read_text())["oracle"]["humanevalfix"]
    assert summary["unscored"] == 3


def test_a_backend_that_is_down_ends_the_run(tmp_path: Path) -> None:
    out = tmp_path / "t"
    proc = _run("down", out)
    assert proc.returncode == 1, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "gave up after 3 attempt(s)" in errors[0], proc.stderr
    for p in out.rglob("run_*.json"):  # begun, never finished: --resume runs them
        assert not json.loads(p.read_text())["outcome"]["completed"]
