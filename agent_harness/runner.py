"""Run models × scenarios × tasks with episode-level batching, traces, scoring and resume.

For each model, up to `concurrency` episodes are live at once. Every tick the prompts of all
live episodes go to the backend as one batch; each reply is then parsed and its tool run in a
worker thread; a finished episode is scored, embedded and replaced by the next task.
"""

from __future__ import annotations

import logging
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .agent import AgentConfig, Episode
from .backends import load_backend
from .baseline import SingleShotEpisode
from .errors import BackendError, ConfigError
from .fingerprint import episode_fingerprint, run_config
from .registry import ModelSpec
from .scenarios import Scenario, SingleShot, TaskQuery, get_scenario
from .trace import SCHEMA_VERSION, harness_version, resume_status, task_slugs, trace_path, write_json_atomic
from .types import Backend, Completion, GenParams, StreamingBackend, Task, request_seed
from .workspace import Workspace

log = logging.getLogger(__name__)


@dataclass
class RunConfig:
    """Everything one invocation of the runner needs (the CLI fills it from flags)."""

    models: list[ModelSpec]
    scenarios: list[str] = field(default_factory=lambda: ["humanevalfix"])
    labels: list[str] | None = None  # None: each scenario's first label (gold)
    n: int | None = None
    task_ids: tuple[str, ...] = ()
    samples: int = 1
    out: Path = Path("traces")
    resume: bool = False
    concurrency: int = 16
    seed: int = 0
    embed: bool = True
    mode: str = "agent"  # or "single_shot"
    dataset_path: Path | None = None
    dataset_hub: bool = False  # HumanEvalFix from the Hugging Face Hub instead of the vendored copy
    agent: AgentConfig = field(default_factory=AgentConfig)
    workers: int = 4  # threads running tools, tests and workspace set-up
    progress: bool = True
    backend: str | None = None  # force this backend for every model (default: each model's own)
    streaming: bool = True  # continuous batching when the backend supports it (else one batch per tick)


@dataclass
class Job:
    task: Task
    index: int
    sample: int
    scenario: str  # directory name: scenario, or "<scenario>-single_shot"
    path: Path
    scenario_name: str = ""  # the registry name (scoring)
    fingerprint: dict[str, Any] = field(default_factory=dict)  # the header's block (fingerprint.py)


@dataclass
class Live:
    """One running episode and the trace that mirrors it on disk."""

    job: Job
    episode: Episode | SingleShotEpisode
    trace: dict[str, Any]
    started: float = field(default_factory=time.monotonic)


def _task_index(task: Task, position: int) -> int:
    return int(task.metadata.get("index", position))


def plan_jobs(cfg: RunConfig) -> Iterator[tuple[str, str, list[Job]]]:
    """Yield (scenario, label, jobs) for every scenario × label, jobs in a stable order."""
    scenarios = {name: get_scenario(name) for name in cfg.scenarios}
    known = {label for sc in scenarios.values() for label in sc.labels}
    unknown = [label for label in cfg.labels or [] if label != "all" and label not in known]
    if unknown:
        raise ConfigError(f"unknown label '{unknown[0]}' for scenario(s) {', '.join(scenarios)}; "
                          f"valid: {', '.join(sorted(known))}, all")
    for name, scenario in scenarios.items():
        wanted = scenario.labels if cfg.labels and "all" in cfg.labels else cfg.labels or [scenario.labels[0]]
        for label in wanted:
            if label not in scenario.labels:
                continue
            if cfg.mode == "single_shot" and not isinstance(scenario, SingleShot):
                raise ConfigError(f"scenario '{name}' has no single-shot baseline")
            query = TaskQuery(label=label, n=cfg.n, task_ids=cfg.task_ids, dataset_path=cfg.dataset_path,
                              options={"hub": True} if cfg.dataset_hub else {})
            tasks = scenario.load_tasks(query)
            dirname = name if cfg.mode == "agent" else f"{name}-single_shot"
            yield name, label, [
                Job(t, _task_index(t, i), s, dirname, Path(), name)
                for i, t in enumerate(tasks)
                for s in range(cfg.samples)
            ]


def _header(cfg: RunConfig, spec: ModelSpec, backend: Backend, job: Job, ep_params: GenParams,
            system: str, sandbox: str, demo: list[Any] | None = None) -> dict[str, Any]:
    info = backend.info
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": uuid.uuid4().hex,
        "scenario": job.scenario,
        "task_id": job.task.id,
        "task_index": job.index,
        "label": job.task.label,
        "sample": job.sample,
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "model": {"name": spec.name, "hf_id": spec.hf_id, "backend": info.used, "backend_requested": info.requested,
                  "fallback_reason": info.fallback_reason, "device": info.device, "details": info.details},
        "generation": {"max_tokens": ep_params.max_tokens, "temperature": ep_params.temperature,
                       "top_p": ep_params.top_p, "stop": list(ep_params.stop), "seed": cfg.seed,
                       "temperature_schedule": spec.temperature_schedule, "context_length": spec.context_length},
        "sandbox": sandbox,
        "harness_version": harness_version(),
        "fingerprint": job.fingerprint,
        "agent": {"mode": cfg.mode, "max_steps": cfg.agent.max_steps, "max_total_tokens": cfg.agent.max_total_tokens,
                  "max_wall_s": cfg.agent.max_wall_s, "tool_options": asdict(cfg.agent.tool_options),
                  "repeat_detection": cfg.agent.repeat_detection, "format_reminder": cfg.agent.format_reminder,
                  "loop_temperature": cfg.agent.loop_temperature, "demo": cfg.agent.demo,
                  "submit_checks": cfg.agent.submit_checks, "concurrency": cfg.concurrency},
        "prompt": {"system": system, "task": job.task.statement, "demo": demo or []},
        "steps": [],
        "embeddings": None,
        "outcome": {"completed": False, "passed": None, "compromised": None, "exit_reason": None, "num_steps": 0,
                    "num_turns": 0, "elapsed_seconds": 0.0, "prompt_tokens": 0, "cached_prompt_tokens": 0,
                    "completion_tokens": 0,
                    "error": None, "final": None, "test_output": None, "diff": None},
    }


class ModelRun:
    """Runs one model's jobs (any scenarios and labels) with a batched tick loop.

    Progress goes to `on_done`; counters (tokens, time inside `generate`) feed the run log.
    """

    def __init__(self, cfg: RunConfig, spec: ModelSpec, backend: Backend, embedder: Any,
                 pool: ThreadPoolExecutor, on_done: Callable[[dict[str, Any]], None]) -> None:
        self.cfg, self.spec, self.backend, self.embedder = cfg, spec, backend, embedder
        self._scenarios: dict[str, Scenario] = {}
        self.pool, self.on_done = pool, on_done
        self.tokens = 0  # completion tokens
        self.prompt_tokens = 0
        self.cached_tokens = 0  # prompt tokens the backend served from its cache
        self.gen_s = 0.0  # wall time inside backend.generate
        self.calls = 0
        self.rows = 0

    def _generate(self, prompts: list[Any], params: GenParams, seeds: list[int | None]) -> list[Completion]:
        t0 = time.perf_counter()
        completions = self.backend.generate(prompts, params, seeds)
        self.gen_s += time.perf_counter() - t0
        if len(completions) != len(prompts):  # the pairing with episodes below must never truncate
            raise BackendError(f"{self.backend.info.used} returned {len(completions)} completions for "
                               f"{len(prompts)} conversations (row {min(len(completions), len(prompts))} unpaired)")
        self.calls += 1
        self.rows += len(prompts)
        self._count(completions)
        return completions

    def _count(self, completions: list[Completion]) -> None:
        self.tokens += sum(c.completion_tokens for c in completions)
        self.prompt_tokens += sum(c.prompt_tokens for c in completions)
        self.cached_tokens += sum(c.cached_tokens for c in completions)

    def scenario(self, job: Job) -> Scenario:
        if job.scenario_name not in self._scenarios:
            self._scenarios[job.scenario_name] = get_scenario(job.scenario_name)
        return self._scenarios[job.scenario_name]

    # -- episode lifecycle -------------------------------------------------------------
    def _start(self, job: Job) -> Live:
        ws = Workspace.create(job.task.files, test_cmd=job.task.test_cmd)
        params = self.spec.gen_params(seed=self.cfg.seed)  # the run seed; each request's derives from it
        ep: Episode | SingleShotEpisode
        if self.cfg.mode == "single_shot":
            shot = replace(params, seed=request_seed(self.cfg.seed, job.task.id, job.sample, 0))
            ep = SingleShotEpisode(job.task, ws, shot, self.scenario(job))
        else:
            ep = Episode(job.task, ws, params, self.cfg.agent, temperature_schedule=self.spec.temperature_schedule,
                         sample=job.sample)
        trace = _header(self.cfg, self.spec, self.backend, job, ep.params, ep.system_prompt, ws.sandbox, ep.demo)
        if isinstance(ep, SingleShotEpisode):
            trace["prompt"]["task"] = ep.user_prompt
        write_json_atomic(job.path, trace)
        return Live(job, ep, trace)

    def _sync(self, live: Live) -> None:
        ep, out = live.episode, live.trace["outcome"]
        live.trace["steps"] = ep.steps
        out.update(num_steps=len(ep.steps), num_turns=ep.turn, prompt_tokens=ep.prompt_tokens,
                   cached_prompt_tokens=ep.cached_tokens, completion_tokens=ep.completion_tokens,
                   elapsed_seconds=round(time.monotonic() - live.started, 3),
                   exit_reason=ep.exit_reason, final=ep.final)
        write_json_atomic(live.job.path, live.trace)

    def _advance(self, live: Live, completion: Completion) -> Live:
        live.episode.advance(completion)
        self._sync(live)
        return live

    def _finish(self, live: Live) -> dict[str, Any]:
        ep, out = live.episode, live.trace["outcome"]
        try:
            tool_calls = [{"tool": s["tool"], "args": s["args"]} for s in ep.steps if s["type"] == "tool_call"]
            score = self.scenario(live.job).score(ep.task, ep.ws, tool_calls)
            out.update(passed=score.passed, compromised=score.compromised, test_output=score.output[-4000:],
                       score_details=score.details, diff=ep.ws.diff()[-20000:])
        except Exception as e:  # a scorer fault is recorded, never lost
            log.exception("scoring failed for %s", ep.task.id)
            out.update(passed=False, error=f"scoring failed: {type(e).__name__}: {e}", exit_reason="error")
        finally:
            ep.ws.cleanup()
        if self.embedder is not None:
            texts = [s["text"] for s in ep.steps]
            for s, vec in zip(ep.steps, self.embedder.embed(texts), strict=True):
                s["embedding"] = vec
            live.trace["embeddings"] = {"model": self.embedder.name, "dim": self.embedder.dim}
        self._sync(live)
        out["completed"] = True
        write_json_atomic(live.job.path, live.trace)
        return live.trace

    # -- the tick loop -----------------------------------------------------------------
    def run(self, jobs: list[Job]) -> None:
        queue = list(jobs)
        queue.reverse()
        live: list[Live] = []
        while queue or live:
            want = min(len(queue), self.cfg.concurrency - len(live))
            starting = [queue.pop() for _ in range(want)]
            live.extend(self.pool.map(self._start, starting))
            by_params: dict[GenParams, list[Live]] = {}
            for lv in live:  # one batch per sampling setting; each row keeps its own request seed
                by_params.setdefault(replace(lv.episode.gen_params(), seed=None), []).append(lv)
            advanced: list[Live] = []
            for params, group in by_params.items():
                completions = self._generate([lv.episode.prompt() for lv in group], params,
                                             [lv.episode.gen_params().seed for lv in group])
                advanced.extend(self.pool.map(self._advance, group, completions))
            live = [lv for lv in advanced if not lv.episode.done]
            for trace in self.pool.map(self._finish, [lv for lv in advanced if lv.episode.done]):
                self.on_done(trace)

    def run_streaming(self, jobs: list[Job]) -> None:
        """Continuous batching: an episode's next prompt goes to the backend as soon as its tool has run.

        The main thread steps the engine; workers start episodes, run tools and score. Nobody waits
        for the slowest reply of a tick, so short replies are not held up by long ones.
        """
        backend = self.backend
        assert isinstance(backend, StreamingBackend)
        queue = list(reversed(jobs))
        waiting: dict[str, Live] = {}  # run_id -> episode whose prompt is with the backend
        work: dict[Future[Any], str] = {}  # future -> "start" | "advance" | "finish"
        live = 0

        def fill() -> None:
            nonlocal live
            while queue and live < self.cfg.concurrency:
                live += 1
                work[self.pool.submit(self._start, queue.pop())] = "start"

        def ask(lv: Live) -> None:
            t0 = time.perf_counter()
            waiting[lv.trace["run_id"]] = lv
            backend.submit(lv.trace["run_id"], lv.episode.prompt(), lv.episode.gen_params())
            self.gen_s += time.perf_counter() - t0

        fill()
        while work or backend.pending():
            if backend.pending():
                in_flight = backend.pending()
                t0 = time.perf_counter()
                finished = backend.poll()
                self.gen_s += time.perf_counter() - t0
                self.calls += 1
                self.rows += in_flight
                self._count([c for _, c in finished])
                for key, c in finished:
                    work[self.pool.submit(self._advance, waiting.pop(key), c)] = "advance"
            if not work:
                continue
            ready, _ = wait(list(work), timeout=0 if backend.pending() else None, return_when=FIRST_COMPLETED)
            for f in ready:
                kind, result = work.pop(f), f.result()
                if kind == "finish":
                    self.on_done(result)
                    live -= 1
                    fill()
                elif kind == "advance" and result.episode.done:
                    work[self.pool.submit(self._finish, result)] = "finish"
                else:  # a new episode, or one whose tool has run: its next prompt
                    ask(result)


def _progress(cfg: RunConfig, total: int, model: str) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), disable=not cfg.progress)
    progress.add_task(model, total=total, stats="")
    return progress


class _Ticker:
    """Advances the progress bar as episodes finish: passed so far and output tokens per second."""

    def __init__(self, progress: Any) -> None:
        self.progress, self.run = progress, None
        self.n = self.passed = 0
        self.t0 = time.monotonic()

    def __call__(self, trace: dict[str, Any]) -> None:
        self.n += 1
        self.passed += bool(trace["outcome"]["passed"])
        rate = (self.run.tokens if self.run else 0) / max(time.monotonic() - self.t0, 1e-9)
        self.progress.update(self.progress.task_ids[0], advance=1,
                             stats=f"pass {self.passed}/{self.n}  {rate:.0f} tok/s")


def _stats(spec: ModelSpec, backend: Backend, mr: ModelRun, episodes: int, load_s: float,
           wall_s: float, cfg: RunConfig) -> dict[str, Any]:
    """One line of `<out>/runs.jsonl`: where the time went for one model in one invocation."""
    return {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"), "model": spec.name,
        "backend": backend.info.used, "backend_requested": backend.info.requested,
        "fallback_reason": backend.info.fallback_reason, "scenarios": cfg.scenarios, "mode": cfg.mode,
        "episodes": episodes, "concurrency": cfg.concurrency, "load_s": round(load_s, 2),
        "wall_s": round(wall_s, 2), "generate_s": round(mr.gen_s, 2),
        "overhead_share": round(1 - mr.gen_s / wall_s, 4) if wall_s > 0 else None,
        "generate_calls": mr.calls, "mean_batch": round(mr.rows / mr.calls, 2) if mr.calls else 0,
        "streaming": cfg.streaming and isinstance(backend, StreamingBackend),
        "prompt_tokens": mr.prompt_tokens, "cached_prompt_tokens": mr.cached_tokens,
        "completion_tokens": mr.tokens,
        "completion_tok_per_s": round(mr.tokens / wall_s, 2) if wall_s > 0 else None,
        "episodes_per_hour": round(episodes * 3600 / wall_s, 1) if wall_s > 0 else None,
        "harness_version": harness_version(),
    }


def run(cfg: RunConfig) -> dict[str, Any]:
    """Run everything in `cfg`; returns the summary (also written to `<out>/summary.json`).

    Each model's pending episodes, across all scenarios and labels, share one tick loop; the model is
    loaded once and freed before the next. `<out>/runs.jsonl` gets one timing line per model.
    """
    import json

    from .embeddings import get_embedder
    from .sandbox import detect_sandbox
    from .settings import get_settings

    get_settings()  # a bad AGENT_HARNESS_* value stops the run here, before any work
    log.info("sandbox: %s", detect_sandbox())
    embedder = get_embedder(cfg.embed)
    with ThreadPoolExecutor(max_workers=cfg.workers) as pool:
        planned = [j for _scenario, _label, jobs in plan_jobs(cfg) for j in jobs]
        work = {spec.name: model_jobs(cfg, spec, planned) for spec in cfg.models}
        counts: Counter[str] = Counter()
        todo = {name: _pending(cfg, jobs, counts) for name, jobs in work.items()}
        if cfg.resume:
            _report_resume(counts)
        for spec in cfg.models:
            all_jobs, pending = work[spec.name], todo[spec.name]
            if not pending:
                log.info("%s: nothing to do (all traces complete)", spec.name)
                continue
            t_load = time.perf_counter()
            backend = load_backend(spec, force=cfg.backend)
            load_s = time.perf_counter() - t_load
            if backend.info.fallback_reason:
                log.warning("%s: using %s (%s)", spec.name, backend.info.used, backend.info.fallback_reason)
            if hasattr(backend, "bind_tasks"):  # the scripted backend finds each conversation's task
                shots = {}
                if cfg.mode == "single_shot":
                    for j in all_jobs:
                        sc = get_scenario(j.scenario_name)
                        if isinstance(sc, SingleShot):
                            shots[sc.single_shot_prompt(j.task)[-1]["content"]] = j.task
                backend.bind_tasks([j.task for j in all_jobs], shots)
            try:
                with _progress(cfg, len(pending), spec.name) as progress:
                    ticker = _Ticker(progress)
                    mr = ModelRun(cfg, spec, backend, embedder, pool, ticker)
                    ticker.run = mr
                    streaming = cfg.streaming and isinstance(backend, StreamingBackend)
                    (mr.run_streaming if streaming else mr.run)(pending)
                    stats = _stats(spec, backend, mr, len(pending), load_s, time.monotonic() - ticker.t0, cfg)
                cfg.out.mkdir(parents=True, exist_ok=True)
                with (cfg.out / "runs.jsonl").open("a", encoding="utf-8") as f:
                    f.write(json.dumps(stats) + "\n")
                log.info("%s: %s", spec.name, stats)
            finally:
                backend.close()
    from .summary import summarize, write_summary

    ours = [j for jobs in work.values() for j in jobs]
    _report_foreign(cfg.out, ours)
    summary = summarize(cfg.out, fingerprints={j.fingerprint["hash"] for j in ours})
    write_summary(cfg.out, summary)
    return summary


def model_jobs(cfg: RunConfig, spec: ModelSpec, planned: list[Job]) -> list[Job]:
    """`planned` for one model: each job with its trace path and fingerprint; stale temp files removed."""
    run_cfg = run_config(spec, cfg.backend, cfg.mode, cfg.agent, cfg.seed)
    slugs: dict[tuple[str, str], dict[str, str]] = {}
    for j in planned:
        slugs.setdefault((j.scenario, j.task.label), {})[j.task.id] = ""
    for key, ids in slugs.items():
        slugs[key] = task_slugs(ids)
    jobs = [replace(j, path=trace_path(cfg.out, spec.name, j.scenario, j.task.label,
                                       slugs[(j.scenario, j.task.label)][j.task.id], j.sample),
                    fingerprint=episode_fingerprint(run_cfg, j.scenario_name, j.task, j.sample))
            for j in planned]
    for d in {j.path.parent for j in jobs}:  # temp files of a killed run's last write
        for stale in d.glob(".run_*.tmp") if d.is_dir() else ():
            stale.unlink(missing_ok=True)
    return jobs


def _pending(cfg: RunConfig, jobs: list[Job], counts: Counter[str]) -> list[Job]:
    """The jobs to run: all of them, or with --resume those without a reusable trace (tallied in `counts`)."""
    if not cfg.resume:
        return list(jobs)
    pending = []
    for j in jobs:
        status = resume_status(j.path, j.fingerprint["hash"])
        counts[status] += 1
        if status != "reuse":
            pending.append(j)
    return pending


def _report_resume(counts: Counter[str]) -> None:
    redid = counts["changed"] + counts["incomplete"] + counts["new"]
    new = f", {counts['new']} new" if counts["new"] else ""
    print(f"resume: reused {counts['reuse']}, redid {redid} ({counts['changed']} config changed, "
          f"{counts['incomplete']} incomplete{new})", file=sys.stderr)


def _report_foreign(out: Path, ours: list[Job]) -> None:
    """One line when `out` holds traces this run did not plan (other models, tasks, settings or older runs)."""
    mine = {j.path for j in ours}
    foreign = sum(1 for p in Path(out).rglob("run_*.json") if p not in mine)
    if foreign:
        print(f"note: {out} also holds {foreign} trace(s) of other configurations; the table and summary.json "
              f"cover this run's {len(mine)} episode(s) only", file=sys.stderr)
