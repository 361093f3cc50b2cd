"""Benchmark: time `load_traces` on 10,000 synthetic traces (≈10 steps, 384-d step embeddings each).

Usage: python bench/load_traces.py [--n 10000] [--turns 4] [--dim 384] [--keep DIR] [--no-write]
The traces come from `agent_harness/analysis/_synthetic.py` (the runner's format; embeddings rounded to 6 decimals
as the embedder writes them) and are loaded in a fresh process, twice; the files are in the page
cache then (just written). Appends a section to bench/RESULTS.md unless --no-write.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

from _machine import cpu_name, mem_gib  # bench/ is on sys.path when a benchmark runs as a script

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "RESULTS.md"
sys.path.insert(0, str(ROOT))

LOAD = """
import json, resource, sys, time
import numpy, pandas
from agent_harness.traces.store import load_traces
t = time.perf_counter()
f = load_traces(sys.argv[1])
dt = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": dt, "runs": len(f.runs), "steps": len(f.steps), "dim": f.embeddings.shape[1],
                  "skipped": len(f.skipped), "rss_mb": rss}))
"""


def _generate(args: tuple[Path, int, int, int, int, int]) -> int:
    """Write traces number `start` .. `stop` - 1 (4 models, tasks numbered per model)."""
    import numpy as np

    from agent_harness.analysis import _synthetic as syn

    root, start, stop, turns, dim, models = args
    rng = np.random.default_rng(start)
    for k in range(start, stop):
        trace = syn.episode(f"model-{k % models}", "humanevalfix", "gold", k // models, bool(k % 3), rng,
                            turns=turns, dim=dim)
        syn.write(root, trace)
    return stop - start


def generate(root: Path, n: int, turns: int, dim: int, models: int = 4, workers: int = 2) -> float:
    t = time.perf_counter()
    chunks = [(root, i, min(i + 500, n), turns, dim, models) for i in range(0, n, 500)]
    with ProcessPoolExecutor(workers) as pool:
        assert sum(pool.map(_generate, chunks)) == n
    return time.perf_counter() - t


def load_once(root: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", LOAD, str(root)], capture_output=True, text=True, cwd=ROOT,
                          check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def machine() -> str:
    cpu, mem = cpu_name(platform.processor() or "?"), f"{mem_gib():.1f}"
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return (f"Machine: {cpu}, {os.cpu_count()} cores, {mem} GiB RAM, load average {os.getloadavg()[0]:.1f} "
            f"at the end. Python {platform.python_version()}, numpy {version('numpy')}, pandas "
            f"{version('pandas')}; git {rev.stdout.strip() or '?'}.")


def render(n: int, turns: int, dim: int, size_mb: float, gen_s: float, loads: list[dict[str, Any]]) -> str:
    first = loads[0]
    best = min(r["seconds"] for r in loads)
    each = " / ".join(f"{r['seconds']:.1f}" for r in loads)
    steps = first["steps"] // max(first["runs"], 1)
    return "\n".join([
        f"## Trace loading: load_traces ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC)", "",
        machine(),
        f"`bench/load_traces.py`: {n:,} synthetic traces from `agent_harness/analysis/_synthetic.py` ({turns} turns, "
        f"{steps} steps and {dim}-d embeddings each), loaded by `agent_harness.traces.store.load_traces` in a fresh "
        "process (imports not timed), files in the page cache.", "",
        "| traces | steps | JSON MB | generate s | load s (each run) | traces/s (best) | MB/s (best) "
        "| peak RSS MB |",
        "|---|---|---|---|---|---|---|---|",
        f"| {first['runs']:,} | {first['steps']:,} | {size_mb:.0f} | {gen_s:.1f} | {each} "
        f"| {first['runs'] / best:,.0f} | {size_mb / best:.0f} | {max(r['rss_mb'] for r in loads):.0f} |", "",
    ])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10_000, help="number of traces")
    p.add_argument("--turns", type=int, default=4, help="model turns per trace (4 turns = 11 steps)")
    p.add_argument("--dim", type=int, default=384, help="embedding size")
    p.add_argument("--runs", type=int, default=2, help="timed loads")
    p.add_argument("--keep", type=Path, default=None, help="write the traces here and keep them")
    p.add_argument("--no-write", action="store_true", help="do not append to bench/RESULTS.md")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="load-bench-") as tmp:
        root = a.keep or Path(tmp)
        print(f"generating {a.n} traces in {root} ...", file=sys.stderr, flush=True)
        gen_s = generate(root, a.n, a.turns, a.dim)
        size_mb = sum(f.stat().st_size for f in root.rglob("run_*.json")) / 1e6
        loads = []
        for i in range(a.runs):
            loads.append(load_once(root))
            print(f"load {i + 1}: {loads[-1]['seconds']:.2f} s", file=sys.stderr, flush=True)
        if loads[0]["runs"] != a.n or loads[0]["skipped"]:
            print(f"error: loaded {loads[0]['runs']} of {a.n} traces", file=sys.stderr)
            return 1
    section = render(a.n, a.turns, a.dim, size_mb, gen_s, loads)
    print(section)
    if not a.no_write:
        with RESULTS.open("a", encoding="utf-8") as f:
            f.write("\n" + section)
        print(f"appended to {RESULTS.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
