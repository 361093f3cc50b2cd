"""Progress bar and per-model timing statistics of a run (`<out>/runs.jsonl`)."""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from typing import Any

from .. import stop
from ..registry import ModelSpec
from ..text import printable, terminal_stream
from ..traces.model import Trace
from ..traces.store import harness_version
from ..types import Backend
from .planning import RunConfig
from .scheduler import ModelRun


def progress_bar(cfg: RunConfig, total: int, model: str) -> Any:
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), disable=not cfg.progress,
                        console=Console(file=terminal_stream(sys.stdout)))
    progress.add_task(escape(printable(model)), total=total, stats="")  # the column reads markup
    return progress


class Ticker:
    """Advances the progress bar as episodes finish: passed so far and output tokens per second. Each
    finished episode is also a checkpoint for a stop request (`stop.check`)."""

    def __init__(self, progress: Any) -> None:
        self.progress: Any = progress
        self.run: ModelRun | None = None
        self.n = self.passed = 0
        self.t0 = time.monotonic()

    def __call__(self, trace: Trace) -> None:
        self.n += 1
        self.passed += bool(trace.outcome.passed)
        rate = (self.run.tokens if self.run else 0) / max(time.monotonic() - self.t0, 1e-9)
        self.progress.update(self.progress.task_ids[0], advance=1,
                             stats=f"pass {self.passed}/{self.n}  {rate:.0f} tok/s")
        stop.check()


def run_stats(spec: ModelSpec, backend: Backend, mr: ModelRun, episodes: int, load_s: float,
              wall_s: float, cfg: RunConfig) -> dict[str, Any]:
    """One line of `<out>/runs.jsonl`: where the time went for one model in one invocation."""
    return {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"), "model": spec.name,
        "backend": backend.info.used, "backend_requested": backend.info.requested,
        "fallback_reason": backend.info.fallback_reason, "scenarios": cfg.scenarios, "mode": cfg.mode,
        "episodes": episodes, "concurrency": cfg.concurrency, "load_s": round(load_s, 2),
        "wall_s": round(wall_s, 2), "generate_s": round(mr.gen_s, 2),
        "overhead_share": round(1 - mr.gen_s / wall_s, 4) if wall_s > 0 else None,
        "requests": mr.busy.requests, "mean_batch": round(mr.busy.mean_in_flight, 2),
        **({"backend_stats": stats()} if callable(stats := getattr(backend, "stats", None)) else {}),
        "prompt_tokens": mr.prompt_tokens, "cached_prompt_tokens": mr.cached_tokens,
        "completion_tokens": mr.tokens,
        "completion_tok_per_s": round(mr.tokens / wall_s, 2) if wall_s > 0 else None,
        "episodes_per_hour": round(episodes * 3600 / wall_s, 1) if wall_s > 0 else None,
        "harness_version": harness_version(),
    }
