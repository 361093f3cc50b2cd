"""Run models × scenarios × tasks: traces, scoring and resume, one model at a time.

For each model, up to `concurrency` episodes run at once (by default its backend's `in_flight`), each
a plain loop in a worker thread; the backend batches the requests they have in flight. A finished
episode is scored, embedded and written, and the next task starts.

The parts live apart: `planning` (configuration, jobs, resume), `scheduler` (one model's episodes),
`run_trace` (each episode's trace), `progress` (progress bar, timing statistics). Their public names
are importable from here.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Any

from .. import stop
from ..backends import load_backend, scores_replies
from ..backends.engine_process import children, reap
from ..errors import ConfigError
from ..registry import ModelSpec
from ..traces.files import append_text
from ..types import Backend
from .header import Live, Unstarted, new_trace
from .planning import (
    STRATEGIES,
    Job,
    RunConfig,
    in_shard,
    model_jobs,
    pending_jobs,
    plan_jobs,
    report_foreign,
    report_resume,
    report_set_aside,
)
from .progress import Ticker, progress_bar, run_stats
from .scheduler import ModelRun

__all__ = ["STRATEGIES", "Job", "Live", "ModelRun", "RunConfig", "Unstarted", "model_jobs", "new_trace",
           "pending_jobs", "plan_jobs", "run"]

log = logging.getLogger(__name__)


def run(cfg: RunConfig) -> dict[str, Any]:
    """Run everything in `cfg`; returns the summary (also written to `<out>/summary.json`).

    Each model's pending episodes, across all scenarios and labels, share one tick loop; the model is
    loaded once and freed before the next. `<out>/runs.jsonl` gets one timing line per model.
    """
    from ..sandbox import detect_sandbox
    from ..settings import get_settings
    from ..traces.embeddings import get_embedder

    get_settings()  # a bad AGENT_HARNESS_* value stops the run here, before any work
    log.info("sandbox: %s", detect_sandbox())
    embedder = get_embedder(cfg.embed)
    work = _run_models(cfg, embedder)
    from .summary import summarize, write_summary

    ours = [j for jobs in work.values() for j in jobs]
    report_foreign(cfg.out, ours)
    summary = summarize(cfg.out, fingerprints={j.fingerprint["hash"] for j in ours})
    write_summary(cfg.out, summary)
    return summary


def start_backend(spec: ModelSpec, force: str | None) -> Backend:
    """`load_backend`, and a start that does not complete (a stop request, a fault) leaves no process behind:
    engine processes that appeared during it are terminated by their own pids. A stop requested during
    the start is acted on even if the backend's libraries swallowed it."""
    before = set(children())
    backend: Backend | None = None
    try:
        backend = load_backend(spec, force=force)
        stop.check()
        return backend
    except BaseException:
        if backend is not None:
            backend.close()
        reap(before)
        raise


def refuse_unscored(spec: ModelSpec, force: str | None, jobs: list[Job], search_branches: int = 0) -> None:
    """A strategy that reads the model's log-probabilities of a given reply (branch, a search with
    `--search-branches`) on a backend that cannot give them is refused before any model loads, in one line."""
    needs = sorted({STRATEGIES[j.strategy].flag + (" --search-branches" if not STRATEGIES[j.strategy].scores else "")
                    for j in jobs if STRATEGIES[j.strategy].scores
                    or (search_branches and STRATEGIES[j.strategy].searches)})
    if needs and not scores_replies(spec, force):
        raise ConfigError(f"model '{spec.name}': --agent {needs[0]} reads the model's log-probabilities of a given "
                          f"reply, which its backend ({force or spec.backend}) cannot give; it needs vllm, "
                          "transformers, or openai with openai.tokenizer set (a vllm serve: prompts as token ids)")


def _run_models(cfg: RunConfig, embedder: Any) -> dict[str, list[Job]]:
    """Every model's pending episodes, one model at a time; returns each model's planned jobs."""
    import json

    planned = [j for _scenario, _label, jobs in plan_jobs(cfg) for j in jobs]
    work = {spec.name: model_jobs(cfg, spec, planned) for spec in cfg.models}
    counts: Counter[str] = Counter()
    todo = {name: pending_jobs(cfg, [j for j in jobs if in_shard(cfg, j)], counts) for name, jobs in work.items()}
    if cfg.resume:
        report_resume(counts)
    report_set_aside(counts)
    for spec in cfg.models:
        refuse_unscored(spec, cfg.backend, todo[spec.name], cfg.agent.search_branches)
    for spec in cfg.models:
        stop.check()
        pending = todo[spec.name]
        if not pending:
            log.info("%s: nothing to do (all traces complete)", spec.name)
            continue
        backend: Backend | None = None
        try:
            t_load = time.perf_counter()
            backend = start_backend(spec, cfg.backend)
            load_s = time.perf_counter() - t_load
            if backend.info.fallback_reason:
                log.warning("%s: using %s (%s)", spec.name, backend.info.used, backend.info.fallback_reason)
            with progress_bar(cfg, len(pending), spec.name) as progress:
                ticker = Ticker(progress)
                mr = ModelRun(cfg, spec, backend, embedder, ticker)
                ticker.run = mr
                mr.run(pending)
                stats = run_stats(spec, backend, mr, len(pending), load_s, time.monotonic() - ticker.t0, mr.cfg)
            cfg.out.mkdir(parents=True, exist_ok=True)
            try:
                append_text(cfg.out / "runs.jsonl", json.dumps(stats) + "\n")
            except OSError as e:  # a FIFO or link planted there: the run's traces and summary still count
                log.warning("%s: not written (%s)", cfg.out / "runs.jsonl", e.strerror or e)
            log.info("%s: %s", spec.name, stats)
        finally:
            if backend is not None:
                backend.close()
    return work
