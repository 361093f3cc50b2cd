#!/usr/bin/env python3
"""Throughput of a HumanEvalFix agent sweep: the sequential baseline against batched engines.

    .venv/bin/python bench/throughput.py [--n 20] [--configs sequential,batched,vllm] [--concurrency 16]
    .venv/bin/python bench/throughput.py --old-tree /tmp/old --configs old:vllm,vllm   # a commit against HEAD
    .venv/bin/python bench/throughput.py ... --load 8       # the same with a second engine loading the cores
    .venv/bin/python bench/throughput.py ... --load 8 --load-cpus 1   # that engine pinned to core 1

A config prefixed `old:` runs from `--old-tree` (a `git worktree` of an earlier commit), so two commits
are compared side by side in one run on one machine; the old tree reads this checkout's prepared
weights (AGENT_HARNESS_CACHE). `--load N` runs every config beside a second vLLM engine of the same
model decoding N sampled requests at a time (bench/load_engine.py), as when two sweeps share the cores;
`--load-cpus` pins that engine to some cores (on 2 cores an unpinned one took 150-170 % of the CPU and
left the measured engine 5-25 %; pinned to one core it shares only that core with the row).

Every configuration runs `run_agents.py` in its own process on the same model, tasks and greedy
settings, with embeddings on unless `--args=--no-embed` (they are part of the harness overhead):

- sequential:   transformers, one episode at a time, transformers' `generate` recomputing the whole
                conversation every step (KV reuse off) — the loop most small harnesses use;
- batched:      transformers, `--concurrency` episodes per batch, KV caches reused across steps;
- batched-int8: the same with int8 dynamic quantization (the `-int8` registry entry);
- batched-c32:  the same with 32 episodes in flight whatever `--concurrency` says;
- vllm-ticks:   (commits before the async backends only) vLLM, one batch per tick;
- vllm:         vLLM: each episode's next request goes out as soon as its tool ran (the `vllm` backend's
                default engine of the tree it runs from);
- vllm-c32:     the same with 32 episodes in flight whatever `--concurrency` says (the in-flight default
                against twice as many, side by side);
- vllm-b128:    the same with vLLM's own CPU block size, 128 tokens (the project's CPU default is 32);
- vllm-ngram:   the same with n-gram speculative decoding, 4 draft tokens (replies copy the file they read);
- vllm-serve:   a local `vllm serve` of the model with the `vllm` backend's engine flags, reached through an
                `openai` entry (the `vllm` backend's engine until issue 27 moved it in process); its
                start is outside the row's wall and load time, and its log is `<row>/server.log`;
- vllm-si16:    the same server streaming 16 tokens per chunk instead of each token (less work for its API
                process, which shares the cores with the engine).

"computed prompt" is the prompt tokens the engine actually ran (prompt - cached, from the traces'
`tokens.cached`): with prefix caching / KV reuse most of each turn's prompt is served from cache.

Numbers come from each run's `runs.jsonl` (wall time, time inside `generate`, tokens, load time)
and `summary.json`; pass/fail agreement is per task against the first configuration. Appends a
section to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _machine import cpu_flags, cpu_name, mem_gib, run_row  # bench/ is on sys.path when a benchmark runs as a script
from load_engine import cpu_list, engine_load

from agent_harness.backends.vllm_config import cpu_id_list

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "RESULTS.md"

CONFIGS: dict[str, dict[str, Any]] = {
    "sequential": {"backend": "transformers", "concurrency": 1, "env": {"AGENT_HARNESS_HF_KV_REUSE": "0"}},
    "batched": {"backend": "transformers", "concurrency": None, "env": {}},
    "batched-int8": {"backend": "transformers", "concurrency": None, "env": {}, "model_suffix": "-int8"},
    "batched-c32": {"backend": "transformers", "concurrency": 32, "env": {}},
    "vllm-ticks": {"backend": "vllm", "concurrency": None, "env": {}, "flags": ["--no-streaming"]},
    "vllm": {"backend": "vllm", "concurrency": None, "env": {}},
    "vllm-c32": {"backend": "vllm", "concurrency": 32, "env": {}},
    "vllm-b128": {"backend": "vllm", "concurrency": None, "env": {"AGENT_HARNESS_VLLM_BLOCK_SIZE": "128"}},
    "vllm-ngram": {"backend": "vllm", "concurrency": None, "env": {"AGENT_HARNESS_VLLM_NGRAM": "4"}},
    "vllm-serve": {"backend": "openai", "concurrency": None, "env": {}, "serve": True},
    "vllm-si16": {"backend": "openai", "concurrency": None, "env": {"AGENT_HARNESS_VLLM_STREAM_INTERVAL": "16"},
                  "serve": True},
}


def _machine() -> str:
    cpu = cpu_name()
    flags = cpu_flags()
    isa = "AMX" if "amx_tile" in flags else "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "?"
    cores = len(os.sched_getaffinity(0))
    return f"{cpu}, {cores} cores ({isa}), {mem_gib():.1f} GiB RAM, Python {platform.python_version()}"


def _git(tree: Path = ROOT) -> str:
    try:
        return subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


@contextlib.contextmanager
def served(model: str, out: Path, env: dict[str, str]) -> Iterator[Path]:
    """A local `vllm serve` of `model` (the `vllm` backend's engine flags, `env` applied) while the block
    runs; yields a registry whose entry of the same name is an openai client of it."""
    from vllm_server import serving

    from agent_harness.registry import load_registry
    from agent_harness.settings import scoped_environ

    spec = load_registry().resolve(model)[0]
    registry = out / "served.json"
    with scoped_environ(env), serving(spec, out / "server.log", registry) as healthy_s:
        print(f"[{model}] vllm serve healthy after {healthy_s:.0f} s", flush=True)
        yield registry


def run_config(name: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    tree = ROOT
    if name.startswith("old:"):
        if args.old_tree is None:
            raise SystemExit(f"[{name}] needs --old-tree")
        tree = args.old_tree.resolve()
    cfg = CONFIGS[name.removeprefix("old:")]
    conc = cfg["concurrency"] or args.concurrency
    model = args.model + cfg.get("model_suffix", "")
    agent = ["--agent", args.agent] if args.agent else []
    cmd = [sys.executable, str(tree / "run_agents.py"), "--models", model, "--backend", cfg["backend"],
           "--concurrency", str(conc), "--max-steps", str(args.max_steps), "--out", str(out), "--no-progress",
           *agent, *cfg.get("flags", []), *shlex.split(args.args)]
    cmd += ["--tasks", args.tasks] if args.tasks else ["--n", str(args.n)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **cfg["env"]}
    env.setdefault("AGENT_HARNESS_CACHE", str(ROOT / ".cache"))
    with served(model, out, cfg["env"]) if cfg.get("serve") else contextlib.nullcontext() as registry:
        if registry is not None:
            cmd += ["--registry", str(registry)]
        print(f"[{name}] {' '.join(cmd[1:])}", flush=True)
        proc = run_row(cmd, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if proc.returncode != 0:
        raise SystemExit(f"[{name}] failed ({proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
    stats = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines() if line.strip()][-1]
    summary = json.loads((out / "summary.json").read_text())
    passed: dict[str, bool] = {}
    for p in out.rglob("run_*.json"):
        t = json.loads(p.read_text())
        passed[t["task_id"]] = bool(t["outcome"]["passed"])
    entry = next(v for k, v in summary[model].items() if k.startswith("humanevalfix"))  # -<strategy> suffix
    return {"config": name, "stats": stats, "pass@1": entry["pass@1"], "passed": passed,
            "mean_steps": entry["mean_steps"], "exit_reasons": entry["exit_reasons"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--tasks", default=None, help="comma-separated task ids instead of --n")
    ap.add_argument("--configs", default="sequential,batched,vllm-ticks,vllm", help=f"from {', '.join(CONFIGS)}")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-steps", type=int, default=8)
    ap.add_argument("--agent", default="react", help="the strategy every config runs (react, reflect-react, ...)")
    ap.add_argument("--old-tree", type=Path, default=None, help="a worktree of an earlier commit, for `old:` configs")
    ap.add_argument("--args", default="", help="more run_agents.py flags for every config, as --args='--flag value'")
    ap.add_argument("--load", type=int, default=0, help="a second engine decoding this many requests (0: quiet)")
    ap.add_argument("--load-cpus", type=cpu_list, default=None,
                    help="pin the second engine to these cores (e.g. 1): it then shares only them with the rows")
    ap.add_argument("--keep", type=Path, default=None, help="keep the traces under this folder")
    ap.add_argument("--no-write", action="store_true", help="print only; do not append to RESULTS.md")
    args = ap.parse_args()
    names = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in names if c.removeprefix("old:") not in CONFIGS]
    if unknown:
        raise SystemExit(f"unknown config(s) {unknown}; valid: {', '.join(CONFIGS)}")
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        for name in [n for n in names if CONFIGS[n.removeprefix("old:")]["backend"] == "vllm"]:
            print(f"[{name}] skipped: vllm is not installed", flush=True)
            names.remove(name)
    base = args.keep or Path(tempfile.mkdtemp(prefix="bench-throughput-"))
    # SIGTERM unwinds: run_row stops the row's run and engine_load stops the second engine
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results, shares = [], []
    with (engine_load(args.model, base, args.load, cpus=args.load_cpus) if args.load
          else contextlib.nullcontext()) as load:
        for name in names:
            t0, k0 = time.monotonic(), load.completion_tokens if load else 0
            results.append(run_config(name, args, base / name))
            if load:
                shares.append(f"{name} {(load.completion_tokens - k0) / (time.monotonic() - t0):.1f}")
        load_note = "quiet machine" if not load else (
            f"loaded: a second vLLM engine of {args.model} decoding {args.load} sampled requests at a time "
            + (f"pinned to core(s) {cpu_id_list(args.load_cpus)} " if args.load_cpus else "")
            + f"throughout (its own tok/s while each row ran, load included: {', '.join(shares)}; "
            f"{load.errors} errors)")

    ref = results[0]
    rows = []
    for r in results:
        s = r["stats"]
        common = sorted(set(ref["passed"]) & set(r["passed"]))
        agree = sum(ref["passed"][t] == r["passed"][t] for t in common)
        speedup = ref["stats"]["wall_s"] / s["wall_s"] if s["wall_s"] else float("nan")
        computed = s["prompt_tokens"] - s.get("cached_prompt_tokens", 0)
        rows.append(
            f"| {r['config']} | {s['backend']} | {s['concurrency']} | {s['episodes']} | {s['wall_s']:.0f} "
            f"| {s['load_s']:.1f} | {s['episodes_per_hour']:.0f} | {speedup:.2f}× | {s['completion_tok_per_s']:.1f} "
            f"| {s['prompt_tokens']:,} | {computed:,} | {s['completion_tokens']:,} "
            f"| {s['mean_batch']:.1f} | {100 * s['overhead_share']:.1f} % | {r['pass@1']:.3f} | {r['mean_steps']:.1f} "
            f"| {agree}/{len(common)} |"
        )
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    tasks = args.tasks or f"first {args.n} HumanEvalFix tasks"
    section = "\n".join([
        f"## Throughput: {args.model}, {tasks} (`bench/throughput.py`, {when})", "",
        f"Machine: {_machine()}; git {_git()}"
        + (f", `old:` rows from {args.old_tree} (git {_git(args.old_tree)})" if args.old_tree else "")
        + f". {load_note}. --agent {args.agent}{' ' + args.args if args.args else ''}, greedy, "
        f"max {args.max_steps} steps, embeddings {'off' if '--no-embed' in shlex.split(args.args) else 'on'}. "
        "Overhead = wall time with no request at the backend (parsing, tools, sandbox, scoring, traces, "
        "embeddings; before the async backends: time outside `generate`). Mean batch = requests in flight "
        "while the backend is busy (before: rows per generate call or engine step). Agreement = tasks with "
        "the same pass/fail as the first row.", "",
        "| config | backend | concurrency | episodes | wall s | load s | episodes/h | speed-up | completion tok/s "
        "| prompt tok | computed prompt tok | completion tok | mean batch | overhead | pass@1 | mean steps "
        "| agreement |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *rows, "",
    ])
    print(section)
    if not args.no_write:
        with RESULTS.open("a", encoding="utf-8") as f:
            f.write("\n" + section)
        print(f"appended to {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
