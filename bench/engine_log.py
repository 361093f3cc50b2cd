#!/usr/bin/env python3
"""How busy the engine was: vLLM's periodic stats lines of an engine log (the `vllm` backend's
`<out>/engine.log`, or a `vllm serve` log), summed up.

    .venv/bin/python bench/engine_log.py traces/engine.log [more logs...]

vLLM logs one line every ~10 s while it works (``Avg prompt throughput: X tokens/s, Avg generation
throughput: Y tokens/s, Running: N reqs, Waiting: M reqs, ... Prefix cache hit rate: P%``). Over the
intervals in which the engine held a request (Running > 0), this prints the mean batch (requests
running), the mean and peak generation and prompt tokens/s, the share of intervals with requests
waiting, and the last prefix-cache hit rate. Compare the mean batch and tokens/s with
bench/generation.py's peak at that batch size: the gap is what the harness leaves idle.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

STATS = re.compile(
    r"Avg prompt throughput: (?P<prompt>[0-9.]+) tokens/s, Avg generation throughput: (?P<gen>[0-9.]+) tokens/s, "
    r"Running: (?P<running>\d+) reqs, Waiting: (?P<waiting>\d+) reqs"
    r"(?:.*?Prefix cache hit rate: (?P<hit>[0-9.]+)%)?")


@dataclass(frozen=True)
class Interval:
    prompt: float
    gen: float
    running: int
    waiting: int
    hit: float | None


def intervals(text: str) -> list[Interval]:
    out = []
    for m in STATS.finditer(text):
        out.append(Interval(float(m["prompt"]), float(m["gen"]), int(m["running"]), int(m["waiting"]),
                            float(m["hit"]) if m["hit"] else None))
    return out


def summary(items: list[Interval]) -> dict[str, float | int | None]:
    busy = [i for i in items if i.running > 0]
    if not busy:
        return {"intervals": len(items), "busy intervals": 0}
    n = len(busy)
    hits = [i.hit for i in items if i.hit is not None]
    return {
        "intervals": len(items),
        "busy intervals": n,
        "mean batch (running)": round(sum(i.running for i in busy) / n, 2),
        "max batch": max(i.running for i in busy),
        "mean generation tok/s": round(sum(i.gen for i in busy) / n, 1),
        "peak generation tok/s": max(i.gen for i in busy),
        "mean prompt tok/s": round(sum(i.prompt for i in busy) / n, 1),
        "share of intervals with requests waiting": round(sum(i.waiting > 0 for i in busy) / n, 3),
        "prefix cache hit rate % (last)": hits[-1] if hits else None,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("logs", nargs="+", type=Path)
    args = p.parse_args(argv)
    for log in args.logs:
        try:
            text = log.read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            print(f"error: {log}: {e.strerror or e}", file=sys.stderr)
            return 1
        print(f"{log}:")
        for key, value in summary(intervals(text)).items():
            print(f"  {key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
