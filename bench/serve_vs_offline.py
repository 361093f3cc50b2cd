"""Episodes per hour: the offline vLLM backend against one local `vllm serve` behind the openai backend.

The same model folder, dtype, engine flags (eager, prefix caching, CPU block size), tasks, strategy
and concurrency on both sides; the rounds alternate (offline, served, offline, served, ...) so that
a load that drifts over the run hits both sides alike. The served side's engine load is the time to
`/health`; the offline side's is the run's `load_s` (runs.jsonl). Episodes/hour is counted over the
episode phase (after the engine is up) and over the whole (load included). One engine at a time.

    .venv/bin/python bench/serve_vs_offline.py --n 20 --rounds 2 --out /tmp/svo
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _machine import cpu_name  # bench/ is on sys.path when a benchmark runs as a script

ROOT = Path(__file__).resolve().parents[1]
SERVED = "served"


def registry(path: Path, spec: Any, base_url: str, concurrency: int) -> None:
    """A registry with one openai entry that has the offline entry's generation settings."""
    from agent_harness.backends.vllm_serve import openai_entry

    entry = openai_entry(spec, SERVED, base_url, concurrency)
    path.write_text(json.dumps({"models": [entry]}, indent=1))  # JSON is YAML


def harness(args: argparse.Namespace, out: Path, model: str, registry_path: Path | None) -> float:
    cmd = [sys.executable, str(ROOT / "run_agents.py"), "--models", model, "--n", str(args.n), "--agent", args.agent,
           "--concurrency", str(args.concurrency), "--no-embed", "--no-progress", "--out", str(out)]
    if registry_path is not None:
        cmd += ["--registry", str(registry_path)]
    t0 = time.monotonic()
    with (out.parent / f"{out.name}.log").open("w") as log:
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=log, stderr=subprocess.STDOUT)
    return time.monotonic() - t0


def result(out: Path, side: str, load_s: float, total_s: float) -> dict[str, Any]:
    runs = [json.loads(x) for x in (out / "runs.jsonl").read_text().splitlines() if x.strip()]
    traces = [json.loads(p.read_text()) for p in out.rglob("run_*.json")]
    passed = [t["outcome"]["passed"] for t in traces]
    wall = sum(r["wall_s"] for r in runs)
    load = load_s if side == "served" else sum(r["load_s"] for r in runs)
    n = len(traces)
    return {"side": side, "episodes": n, "pass@1": sum(bool(p) for p in passed) / n if n else 0.0,
            "load_s": round(load, 1), "episode_s": round(wall, 1), "total_s": round(total_s + load_s, 1),
            "eph": round(3600 * n / wall, 1) if wall else 0.0,
            "eph_with_load": round(3600 * n / (wall + load), 1) if wall + load else 0.0,
            "completion_tokens": sum(t["outcome"].get("completion_tokens") or 0 for t in traces)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b", help="an offline vLLM entry of the registry")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--agent", default="react")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--results", type=Path, default=None, help="append the table to this markdown file")
    args = ap.parse_args(argv)

    from agent_harness.backends.vllm_serve import ServerError, VllmServer
    from agent_harness.registry import load_registry

    spec = load_registry().resolve(args.model)[0]
    try:  # checks the folder is prepared before any round; each round then starts its own server
        dtype = VllmServer.for_spec(spec, args.out / "server.log", SERVED).dtype
    except ServerError as e:
        print(e, file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=False)
    rows = []
    for r in range(args.rounds):
        out = args.out / f"offline-{r}"
        total = harness(args, out, args.model, None)
        rows.append(result(out, "offline", 0.0, total))
        print(json.dumps(rows[-1]), flush=True)

        srv = VllmServer.for_spec(spec, args.out / f"server-{r}.log", SERVED)
        reg = args.out / f"served-{r}.yaml"
        registry(reg, spec, srv.base_url, args.concurrency)
        out = args.out / f"served-{r}"
        try:
            srv.start()
            load_s = srv.wait_healthy()
            total = harness(args, out, SERVED, reg)
        finally:
            srv.stop()
        rows.append(result(out, "served", load_s, total))
        print(json.dumps(rows[-1]), flush=True)

    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    cpu = cpu_name(platform.processor() or "unknown")
    lines = [f"Machine: {cpu}, {os.cpu_count()} cores, dtype {dtype}; {args.model}, first {args.n} tasks, "
             f"--agent {args.agent}, concurrency {args.concurrency}, greedy, eager; {stamp}.", "",
             "| round | side | episodes | pass@1 | engine load s | episode s | episodes/h | episodes/h incl. load |"
             " completion tok |", "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {i // 2} | {x['side']} | {x['episodes']} | {x['pass@1']:.3f} | {x['load_s']} | {x['episode_s']} | "
              f"{x['eph']} | {x['eph_with_load']} | {x['completion_tokens']:,} |" for i, x in enumerate(rows)]
    print("\n".join(lines))
    if args.results:
        with args.results.open("a") as f:
            f.write("\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
