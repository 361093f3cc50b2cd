#!/usr/bin/env python3
"""The HumanEvalFix scorer's time per task: the hidden test of each task against its reference fix and
its buggy version, in the sandbox, as `run_hidden_test` does for every episode.

    .venv/bin/python bench/scorer.py [--n 164] [--rounds 2] [--old-tree /tmp/old] [--dataset PATH] [--no-write]

With `--old-tree` (a `git worktree` of an earlier commit) the same tasks are scored by both trees,
one round of each after the other, in one run on one machine, so the two columns compare. Prints a
markdown table (median and p95 seconds per scoring, passes of the references, fails of the buggy
versions) and appends it as a dated section to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from _machine import cpu_name  # bench/ is on sys.path when a benchmark runs as a script

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "RESULTS.md"

CHILD = r"""
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from agent_harness.scenarios import TaskQuery
from agent_harness.scenarios.humanevalfix import SCENARIO
from agent_harness.scenarios.hidden_score import run_hidden_test
dataset = Path(sys.argv[3]) if sys.argv[3] else None
tasks = SCENARIO.load_tasks(TaskQuery(n=int(sys.argv[2]), dataset_path=dataset))
rows = []
for t in tasks:
    md = t.metadata
    fixed = next(c["args"]["content"] for c in t.oracle if c["tool"] == "write_file")
    for kind, source in (("reference", fixed), ("buggy", t.files[md["module"]])):
        start = time.perf_counter()
        res = run_hidden_test(source, md["module"], md["entry_point"], md["hidden_test"], md["timeout_s"],
                              helpers=md["helpers"])
        rows.append({"task": t.id, "kind": kind, "s": time.perf_counter() - start, "passed": res.passed,
                     "suspicious": "suspicious" in res.details})
print(json.dumps(rows))
"""


def git_rev(tree: Path) -> str:
    r = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or "?"


def score_tree(tree: Path, n: int, dataset: str) -> list[dict[str, Any]]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-c", CHILD, str(tree), str(n), dataset], capture_output=True, text=True,
                       env=env, cwd=tree)
    if r.returncode != 0:
        raise SystemExit(f"scoring with {tree} failed:\n{r.stderr[-3000:]}")
    rows: list[dict[str, Any]] = json.loads(r.stdout.strip().splitlines()[-1])
    return rows


def p95(xs: list[float]) -> float:
    s = sorted(xs)
    return s[max(math.ceil(0.95 * len(s)) - 1, 0)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=164)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--old-tree", type=Path, default=None)
    ap.add_argument("--dataset", default="", help="a HumanEvalPack-format file (default: the vendored HumanEvalFix)")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    trees = {"HEAD": ROOT, **({"old": args.old_tree.resolve()} if args.old_tree else {})}
    got: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            got[name] += score_tree(tree, args.n, args.dataset)
    lines = ["| tree | commit | scorings | median s | p95 s | references passed | buggy failed | suspicious |",
             "|---|---|---|---|---|---|---|---|"]
    for name, rows in got.items():
        times = [r["s"] for r in rows]
        ref = [r for r in rows if r["kind"] == "reference"]
        bug = [r for r in rows if r["kind"] == "buggy"]
        lines.append(f"| {name} | {git_rev(trees[name])} | {len(rows)} | {statistics.median(times):.3f} | "
                     f"{p95(times):.3f} | {sum(r['passed'] for r in ref)}/{len(ref)} | "
                     f"{sum(not r['passed'] for r in bug)}/{len(bug)} | {sum(r['suspicious'] for r in rows)} |")
    data = args.dataset or "HumanEvalFix (vendored)"
    head = (f"## Scorer time per task ({dt.date.today()}, {cpu_name()}, {os.cpu_count()} cores)\n\n"
            f"`bench/scorer.py --n {args.n} --rounds {args.rounds}`: {data}; each task's reference fix and buggy "
            f"version scored by `run_hidden_test` in the sandbox, every round of each tree in turn.\n")
    text = head + "\n" + "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        with RESULTS.open("a", encoding="utf-8") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
