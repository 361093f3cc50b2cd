#!/usr/bin/env python3
"""Issue 45's table in one command: each scaffold against the calibrated single-shot on data nobody tuned on,
for both offline models.

    .venv/bin/python bench/untuned.py                  # both models, both sets (hours on a 2-core CPU)
    .venv/bin/python bench/untuned.py --report         # the tables of what the folders hold; runs nothing

Two sets: HumanEvalFix's odd-numbered tasks (`--split odd`: helpers and settings are tuned on the even ones)
and the held-out set written for this project (`tests/data/heldout/python.jsonl`, all its tasks). Each set
runs through `bench/strategies.py` (one folder per config under `<out>/<set>/`, `--resume` always, so a
stopped run continues), which prints each model's table with pass@1 and its 95 % interval, the phase rows of
the chains (what the tool agent solved of the tasks handed to it), turns, tokens and wall time per solved
task and the engine's mean batch, and appends it to bench/RESULTS.md unless `--no-append`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HELDOUT = "tests/data/heldout/python.jsonl"


@dataclass(frozen=True)
class Set:
    name: str
    split: str
    n: int
    configs: tuple[str, ...]
    cli_args: str = ""


SETS = (
    Set("odd", "odd", 164, ("single-shot", "reflect-react", "search-k4", "best-of-n-k16", "best-of-n-k32",
                            "best-of-n-search-o16", "best-of-n-search", "branch", "branch-search-branches-files",
                            "branch-search-spread-files", "branch-search-deeper-files")),
    Set("heldout", "all", 42, ("single-shot", "search-k4", "best-of-n-k16", "best-of-n-k32", "best-of-n-search-o16",
                               "best-of-n-search", "branch", "branch-search-branches-files",
                               "branch-search-spread-files", "branch-search-deeper-files"),
        f"--dataset-path {HELDOUT}"),
)


def command(s: Set, args: argparse.Namespace) -> list[str]:
    """The bench/strategies.py command of one set."""
    out = args.out / s.name
    cmd = [sys.executable, str(ROOT / "bench" / "strategies.py"), "--models", args.models, "--n",
           str(args.n or s.n), "--split", s.split, "--only", args.only or ",".join(s.configs), "--out", str(out),
           "--results", str(args.results)]
    cmd += ["--cli-args", s.cli_args] if s.cli_args else []
    cmd += ["--report"] if args.report else ["--resume"] + (["--serve"] if args.serve else [])
    return cmd + (["--no-append"] if args.no_append else []) + (["--quiet"] if args.quiet else [])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="qwen2.5-coder-0.5b,qwen2.5-coder-1.5b-offline")
    p.add_argument("--sets", default=",".join(s.name for s in SETS), help="which sets: odd, heldout")
    p.add_argument("--only", default=None, help="these configs instead of each set's own")
    p.add_argument("--n", type=int, default=None, help="the first N tasks of each set (default: all of it)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "untuned")
    p.add_argument("--results", type=Path, default=ROOT / "bench" / "RESULTS.md")
    p.add_argument("--no-serve", dest="serve", action="store_false",
                   help="each run starts its own backend instead of one local `vllm serve` per model")
    p.add_argument("--report", action="store_true", help="print the tables of what the folders hold; run nothing")
    p.add_argument("--no-append", action="store_true", help="print the tables only")
    p.add_argument("--quiet", action="store_true", help="hide the runs' own tables")
    args = p.parse_args(argv)
    names = {s.name: s for s in SETS}
    wanted = [n.strip() for n in args.sets.split(",") if n.strip()]
    if unknown := [n for n in wanted if n not in names]:
        p.error(f"unknown set(s): {', '.join(unknown)} (known: {', '.join(names)})")
    for name in wanted:
        r = subprocess.run(command(names[name], args), cwd=ROOT)
        if r.returncode != 0:
            print(f"error: the {name} set stopped (exit {r.returncode}); run again to continue it", file=sys.stderr)
            return r.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
