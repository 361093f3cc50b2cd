"""vLLM's engine output goes to a log file in the output folder, not the terminal (-v shows it)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = textwrap.dedent("""
    import subprocess, sys
    from agent_harness.backends.engine_process import StderrTee
    log = sys.argv[1] or None
    with StderrTee(log_path=log) as tee:  # as around the engine's start: children inherit fd 2
        print("parent warning", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-c", "import sys; print('engine warning', file=sys.stderr)"])
    tee.root_cause(wait_s=2)
    print("table", flush=True)
    print("after", file=sys.stderr, flush=True)
""")


def run(log: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CHILD, log], capture_output=True, text=True, cwd=ROOT, timeout=60)


def test_engine_lines_go_to_the_log_file(tmp_path: Path) -> None:
    log = tmp_path / "out" / "engine.log"
    r = run(str(log))
    assert r.returncode == 0, r.stderr
    assert "engine warning" not in r.stderr and "parent warning" not in r.stderr
    assert r.stdout == "table\n" and r.stderr == "after\n"
    assert log.read_text().splitlines() == ["parent warning", "engine warning"]


def test_without_a_log_file_they_stay_on_stderr() -> None:
    r = run("")
    assert r.returncode == 0
    assert "parent warning\nengine warning\n" in r.stderr
