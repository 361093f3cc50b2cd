"""One episode's length does not decide how long an analysis runs: a valid trace of 12,000 steps goes through
`analyze spectral` and `analyze report`, what an analysis caps it says, and SIGTERM stops a real
`agent-harness analyze` in the middle of its work (a long maths call in the main thread would hold the signal
back until it returns).

The traces are synthetic (`analysis/_synthetic.py`), shaped like the runner's, through the real commands.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from agent_harness.analysis import _synthetic as syn
from agent_harness.analysis import spectral

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
HANG = 600  # a guard against a hang, not a speed target
LONG_TURNS = 4000  # three steps a turn: about 12,000 steps, the length that made spectral take 10 minutes


def analyze(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent_harness.cli", "analyze", *args], capture_output=True,
                          text=True, cwd=ROOT, env=ENV, timeout=HANG)


def long_folder(root: Path, long_episodes: int = 1, dim: int = 16) -> Path:
    """Twelve ordinary episodes (oracle passes, null fails) and `long_episodes` of about 12,000 steps."""
    syn.oracle_null_set(root, n_tasks=6, dim=16)
    rng = np.random.default_rng(1)
    for i in range(long_episodes):
        syn.write(root, syn.episode("long", "humanevalfix", "gold", 100 + i, i % 2 == 0, rng, turns=LONG_TURNS,
                                    dim=dim))
    return root


def test_a_12000_step_episode_goes_through_spectral_and_report(tmp_path: Path) -> None:
    traces = long_folder(tmp_path / "traces")
    r = analyze("spectral", str(traces), "--out", str(tmp_path / "spectral"))
    assert r.returncode == 0, r.stderr[-3000:]
    import pandas as pd

    feats = pd.read_csv(tmp_path / "spectral" / "spectral_features.csv")
    long = feats[feats["model"] == "long"].iloc[0]
    assert long["n_steps"] > 11_000 and 0 < long["lambda_1"] < 1  # its whole spectrum: 16 wide, nothing cut
    r = analyze("report", str(traces), "--out", str(tmp_path / "report"))
    assert r.returncode == 0, r.stderr[-3000:]
    page = (tmp_path / "report" / "report.html").read_text(encoding="utf-8")
    assert f"episodes to their first {400} steps" in page and "more steps not shown" in page


def test_spectral_says_which_episodes_it_truncated(tmp_path: Path) -> None:
    """Longer than MAX_SPECTRUM steps with vectors wider than that: the spectrum is of the first MAX_SPECTRUM
    steps, and the output (stderr, spectral.md) says so."""
    cap = spectral.MAX_SPECTRUM
    traces = tmp_path / "traces"
    rng = np.random.default_rng(0)
    syn.oracle_null_set(traces, n_tasks=3, dim=cap + 40)
    syn.write(traces, syn.episode("wide", "humanevalfix", "gold", 50, True, rng, turns=(cap + 60) // 3, dim=cap + 40))
    r = analyze("spectral", str(traces), "--out", str(tmp_path / "out"), "--boot", "20")
    assert r.returncode == 0, r.stderr[-3000:]
    said = f"1 episode(s) longer than {cap} steps, with embeddings wider than {cap}, were truncated to their first"
    assert said in r.stderr and said in (tmp_path / "out" / "spectral.md").read_text(encoding="utf-8")


def test_the_spectrum_is_the_same_from_either_side() -> None:
    """Eigenvalues from Xᵀ X (the smaller side) equal those of X Xᵀ, the matrix the method names."""
    rng = np.random.default_rng(0)
    for n, d in ((300, 16), (16, 300), (50, 50)):
        x = syn.unit_vectors(n, d, rng).astype(np.float32)
        full = np.clip(np.linalg.eigvalsh((x @ x.T).astype(np.float64))[::-1], 0, None)[: min(n, d)]
        np.testing.assert_allclose(spectral.gram_eigenvalues(x), full, atol=1e-4)


def _wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_analyze_in_the_middle_of_its_maths(tmp_path: Path, sig: signal.Signals) -> None:
    """The output folder appears once the traces are loaded; a few seconds later the command is in its maths
    (the spectra of 12,000-step episodes, then a bootstrap that a --boot this large keeps busy for minutes):
    the signal stops it at once, with 130."""
    traces = long_folder(tmp_path / "traces", long_episodes=4)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "agent_harness.cli", "analyze", "spectral", str(traces), "--out",
                             str(out), "--boot", "100000000"], cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(out, proc)
        time.sleep(10)  # past the loading, into the per-episode spectra (an n × n eigen-decomposition took 3 min)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)  # generous: a behaviour check, not a speed target
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130, err[-3000:]
    assert f"interrupted ({sig.name})" in err and not (out / "spectral.md").exists()
