"""Scripted runs give the same traces as the stored ones (timestamps, durations, ids and version masked).

A refactor must leave these byte-identical. When a change is meant to alter the trace, regenerate
the stored copies with `python tests/test_golden_traces.py [SET ...]` and review the diff before committing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "data" / "golden_traces"
STRATEGIES = ("react", "reflect", "single-shot", "single-shot-chat", "reflect-react", "search", "reflect-search",
              "best-of-n", "best-of-n-search", "branch", "branch-search")
# Each stored set: its folder under GOLDEN and the run's flags (the tool strategies in both protocols).
RUNS = {**{s: ("--agent", s) for s in STRATEGIES},
        **{f"{s}-native": ("--agent", s, "--protocol", "native")
           for s in ("react", "reflect-react", "search", "reflect-search", "best-of-n-search", "branch-search")}}
# Values that differ between two runs of the same code, or between commits of behaviour-equal code.
VOLATILE = {"run_id", "timestamp", "latency_s", "elapsed_seconds", "duration_s", "harness_version", "hash",
            "run_hash", "memory_cgroup"}


def _mask(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: ("<masked>" if k in VOLATILE else _mask(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_mask(v) for v in obj]
    return obj


def _run(strategy: str, out: Path) -> dict[str, str]:
    cmd = [sys.executable, str(ROOT / "run_agents.py"), "--models", "oracle,null", "--n", "3", "--no-embed",
           "--no-progress", *RUNS[strategy], "--out", str(out)]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True, timeout=600)
    traces = {}
    for path in sorted(out.glob("*/*/*/run_*.json")):
        masked = _mask(json.loads(path.read_text()))
        traces[path.relative_to(out).as_posix()] = json.dumps(masked, indent=1, sort_keys=True) + "\n"
    return traces


@pytest.mark.parametrize("strategy", RUNS)
def test_scripted_traces_match_the_stored_ones(strategy: str, tmp_path: Path) -> None:
    traces = _run(strategy, tmp_path / "out")
    stored = {p.relative_to(GOLDEN / strategy).as_posix(): p.read_text()
              for p in sorted((GOLDEN / strategy).rglob("*.json"))}
    assert len(traces) == 6
    assert sorted(traces) == sorted(stored)
    for name, text in traces.items():
        assert text == stored[name], f"{strategy}/{name} differs from the stored trace"


def _regenerate(names: list[str]) -> None:
    import shutil
    import tempfile

    for strategy in names or RUNS:
        with tempfile.TemporaryDirectory() as tmp:
            traces = _run(strategy, Path(tmp) / "out")
        shutil.rmtree(GOLDEN / strategy, ignore_errors=True)
        for name, text in traces.items():
            dest = GOLDEN / strategy / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text)
        print(f"{strategy}: {len(traces)} traces")


if __name__ == "__main__":
    _regenerate(sys.argv[1:])  # the sets named (e.g. search search-native), else every one
