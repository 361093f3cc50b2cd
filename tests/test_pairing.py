"""Strict pairing: one completion per conversation, or the run stops naming the row."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent_harness.backends.local import complete
from agent_harness.errors import BackendError
from agent_harness.registry import PROJECT_ROOT
from agent_harness.types import Completion

# The scripted backend with one completion dropped from every batch of two or more, run through the CLI.
DROPPING = r"""
import sys
from agent_harness import backends
from agent_harness.backends import scripted
from agent_harness.cli import run_agents_main

class Dropping(scripted.ScriptedBackend):
    def generate(self, conversations, params, seeds=None, meta=None):
        out = super().generate(conversations, params, seeds, meta)
        return out[:-1] if len(out) > 1 else out

def create(spec):
    return Dropping(spec.script)

scripted.create_dropping = create
backends.BACKENDS["scripted"] = "agent_harness.backends.scripted:create_dropping"
sys.exit(run_agents_main(sys.argv[1:]))
"""


def test_complete_names_the_missing_row() -> None:
    c = Completion("x", 1, 1, "stop", 0.0)
    assert complete([c, c]) == [c, c]
    with pytest.raises(BackendError, match=r"no completion for conversation 1 of 3 \(2 missing\)"):
        complete([c, None, None])


def test_a_backend_dropping_a_completion_stops_the_run(tmp_path: Path) -> None:
    out = tmp_path / "t"
    args = ["--models", "oracle", "--n", "3", "--out", str(out), "--no-embed", "--no-streaming", "--concurrency", "3"]
    proc = subprocess.run([sys.executable, "-c", DROPPING, *args], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 1, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert errors == ["error: scripted returned 2 completions for 3 conversations (row 2 unpaired)"], proc.stderr
