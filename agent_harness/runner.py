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
from .episode import EpisodeState
from .errors import BackendError, ConfigError
from .fingerprint import episode_fingerprint, run_config
from .registry import ModelSpec
from .sandbox import describe_bounds
from .scenarios import Scenario, SingleShot, TaskQuery, get_scenario
from .strategies.reflect import ReflectConfig, ReflectEpisode, require_reflectable
from .strategies.single_shot import SingleShotEpisode
from .text import error_message, error_text, safe_text
from .trace import SCHEMA_VERSION, harness_version, resume_status, task_slugs, trace_path, write_json_atomic
from .types import Backend, Completion, GenParams, RequestMeta, StreamingBackend, Task, request_seed
from .workspace import Workspace

log = logging.getLogger(__name__)


STRATEGIES = ("react", "reflect", "single_shot")


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
    strategy: str = "react"  # react (the tool agent) | reflect | single_shot
    dataset_path: Path | None = None
    dataset_hub: bool = False  # HumanEvalFix from the Hugging Face Hub instead of the vendored copy
    agent: AgentConfig = field(default_factory=AgentConfig)
    workers: int = 4  # threads running tools, tests and workspace set-up
    progress: bool = True
    backend: str | None = None  # force this backend for every model (default: each model's own)
    streaming: bool = True  # continuous batching when the backend supports it (else one batch per tick)
    reflect: ReflectConfig = field(default_factory=ReflectConfig)

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"unknown strategy '{self.strategy}'; valid: {', '.join(STRATEGIES)}")

    @property
    def mode(self) -> str:
        """The trace's older name for the strategy: 'agent' for react (readers of schema 1.x use it)."""
        return "agent" if self.strategy == "react" else self.strategy


@dataclass
class Job:
    task: Task
    index: int
    sample: int
    scenario: str  # directory name: scenario, or "<scenario>-<strategy>" (single_shot, reflect)
    path: Path
    scenario_name: str = ""  # the registry name (scoring)
    fingerprint: dict[str, Any] = field(default_factory=dict)  # the header's block (fingerprint.py)


@dataclass
class Unstarted(EpisodeState):
    """Stands in for an episode whose set-up failed, so that the loops finish it like any other."""

    task: Task
    ws: None = None
    exit_reason: str | None = field(default="error", kw_only=True)


@dataclass
class Live:
    """One running episode and the trace that mirrors it on disk."""

    job: Job
    episode: Episode | SingleShotEpisode | ReflectEpisode | Unstarted
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
            if cfg.strategy == "single_shot" and not isinstance(scenario, SingleShot):
                raise ConfigError(f"scenario '{name}' has no single-shot baseline")
            if cfg.strategy == "reflect":
                require_reflectable(name, scenario)
            query = TaskQuery(label=label, n=cfg.n, task_ids=cfg.task_ids, dataset_path=cfg.dataset_path,
                              options={"hub": True} if cfg.dataset_hub else {})
            tasks = scenario.load_tasks(query)
            dirname = name if cfg.strategy == "react" else f"{name}-{cfg.strategy}"
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
        "sandbox_bounds": describe_bounds(sandbox=sandbox),
        "harness_version": harness_version(),
        "fingerprint": job.fingerprint,
        "agent": {"mode": cfg.mode, "strategy": cfg.strategy,
                  "max_steps": cfg.agent.max_steps, "max_total_tokens": cfg.agent.max_total_tokens,
                  "max_wall_s": cfg.agent.max_wall_s, "tool_options": asdict(cfg.agent.tool_options),
                  "repeat_detection": cfg.agent.repeat_detection, "format_reminder": cfg.agent.format_reminder,
                  "loop_temperature": cfg.agent.loop_temperature, "demo": cfg.agent.demo,
                  "submit_checks": cfg.agent.submit_checks, "concurrency": cfg.concurrency,
                  "history": cfg.agent.history, "stale_notes": cfg.agent.stale_notes,
                  "stale_temperature": cfg.agent.stale_temperature},
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

    def _meta(self, live: Live) -> RequestMeta:
        """Which episode a request comes from (the scripted backend answers by it; models ignore it)."""
        return RequestMeta(live.job.task, self.cfg.strategy, live.episode.turn)

    def _generate(self, prompts: list[Any], params: GenParams, seeds: list[int | None],
                  meta: list[RequestMeta]) -> list[Completion]:
        t0 = time.perf_counter()
        completions = self.backend.generate(prompts, params, seeds, meta=meta)
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
    # Each step below catches every fault of its episode (set-up, the agent, scoring, embedding,
    # trace writing, clean-up): the episode ends with exit_reason "error" and the run goes on.
    def _fault(self, live: Live, where: str, e: BaseException) -> None:
        """End `live` with exit_reason "error", recording what failed in `outcome.error`."""
        ws = getattr(live.episode, "ws", None)
        hide = (str(ws.root), str(ws.root.resolve())) if ws is not None else ()
        msg = f"{where} failed: {error_text(e, hide)}"
        log.warning("%s %s: %s", self.spec.name, live.job.task.id, msg, exc_info=log.isEnabledFor(logging.DEBUG))
        out = live.trace["outcome"]
        out["error"] = f"{out['error']}; {msg}" if out.get("error") else msg
        out["exit_reason"] = live.episode.exit_reason = "error"

    def _start(self, job: Job) -> Live:
        """A live episode with its first trace written; never raises (a set-up fault ends it at once)."""
        ws: Workspace | None = None
        params = self.spec.gen_params(seed=self.cfg.seed)  # the run seed; each request's derives from it
        try:
            ws = Workspace.create(job.task.files, test_cmd=job.task.test_cmd)
            ep: Episode | SingleShotEpisode | ReflectEpisode
            if self.cfg.strategy == "single_shot":
                shot = replace(params, seed=request_seed(self.cfg.seed, job.task.id, job.sample, 0))
                ep = SingleShotEpisode(job.task, ws, shot, self.scenario(job))
            elif self.cfg.strategy == "reflect":
                ep = ReflectEpisode(job.task, ws, params, require_reflectable(job.scenario_name, self.scenario(job)),
                                    self.cfg.reflect, self.cfg.agent.tool_options, sample=job.sample)
            else:
                ep = Episode(job.task, ws, params, self.cfg.agent, temperature_schedule=self.spec.temperature_schedule,
                             sample=job.sample)
            trace = _header(self.cfg, self.spec, self.backend, job, ep.params, ep.system_prompt, ws.sandbox, ep.demo)
            if isinstance(ep, SingleShotEpisode | ReflectEpisode):
                trace["prompt"]["task"] = ep.user_prompt
            if isinstance(ep, ReflectEpisode):
                trace["agent"]["reflect"] = asdict(self.cfg.reflect)
            live = Live(job, ep, trace)
        except Exception as e:
            if ws is not None:
                ws.cleanup()
            live = Live(job, Unstarted(job.task), _header(self.cfg, self.spec, self.backend, job, params, "", "none"))
            self._fault(live, "starting the episode", e)
        self._save(live)
        return live

    def _sync(self, live: Live) -> None:
        ep, out = live.episode, live.trace["outcome"]
        live.trace["steps"] = ep.steps
        out.update(num_steps=len(ep.steps), num_turns=ep.turn, prompt_tokens=ep.prompt_tokens,
                   cached_prompt_tokens=ep.cached_tokens, completion_tokens=ep.completion_tokens,
                   elapsed_seconds=round(time.monotonic() - live.started, 3),
                   exit_reason=ep.exit_reason, final=ep.final)
        write_json_atomic(live.job.path, live.trace)

    def _save(self, live: Live) -> None:
        try:
            self._sync(live)
        except Exception as e:
            self._fault(live, "writing the trace", e)
            try:  # the outcome alone, in case a step is what broke the write
                write_json_atomic(live.job.path, {**live.trace, "steps": []})
            except Exception:
                log.error("%s %s: the trace cannot be written to %s", self.spec.name, live.job.task.id, live.job.path)

    def _advance(self, live: Live, completion: Completion) -> Live:
        try:
            live.episode.advance(completion)  # type: ignore[union-attr]
        except Exception as e:
            self._fault(live, "the agent step", e)
        self._save(live)
        return live

    def _score(self, live: Live) -> None:
        """Score the final workspace. A scorer fault is no verdict: `score_error`, passed/compromised None."""
        ep, out = live.episode, live.trace["outcome"]
        assert ep.ws is not None
        hide = (str(ep.ws.root), str(ep.ws.root.resolve()))
        try:
            tool_calls = [{"tool": s["tool"], "args": s["args"]} for s in ep.steps if s["type"] == "tool_call"]
            score = self.scenario(live.job).score(ep.task, ep.ws, tool_calls)
            out.update(passed=score.passed, compromised=score.compromised, test_output=score.output[-4000:],
                       score_details=score.details)
        except Exception as e:
            out.update(passed=None, compromised=None,
                       score_error={"type": type(e).__name__, "message": error_message(e, hide)})
            self._fault(live, "scoring", e)
        try:
            out["diff"] = ep.ws.diff()[-20000:]
        except Exception as e:
            self._fault(live, "the final diff", e)

    def _finish(self, live: Live) -> dict[str, Any]:
        """Score, clean up, embed and write the finished trace; never raises."""
        ep = live.episode
        if ep.ws is not None:
            self._score(live)
            try:
                ep.ws.cleanup()
            except Exception as e:
                self._fault(live, "the workspace clean-up", e)
        if self.embedder is not None and ep.steps:
            try:
                texts = [safe_text(s["text"]) for s in ep.steps]
                vectors = self.embedder.embed(texts)
                for s, vec in zip(ep.steps, vectors, strict=True):
                    s["embedding"] = vec
                live.trace["embeddings"] = {"model": self.embedder.name, "dim": self.embedder.dim}
            except Exception as e:
                for s in ep.steps:
                    s.pop("embedding", None)
                self._fault(live, "embedding", e)
        live.trace["outcome"]["completed"] = True
        self._save(live)
        return live.trace

    def _recover(self, kind: str, item: Any, e: BaseException) -> Any:
        """The result a worker should have returned when it raised after all (the last line of defence)."""
        if kind == "start":
            live = Live(item, Unstarted(item.task), _header(self.cfg, self.spec, self.backend, item,
                                                             self.spec.gen_params(seed=self.cfg.seed), "", "none"))
            self._fault(live, "starting the episode", e)
            return live
        self._fault(item, kind, e)
        return item.trace if kind == "finish" else item

    def _map(self, kind: str, fn: Callable[..., Any], items: list[Any], *more: list[Any]) -> list[Any]:
        futures = [self.pool.submit(fn, item, *rest) for item, *rest in zip(items, *more, strict=True)]
        out = []
        for item, f in zip(items, futures, strict=True):
            try:
                out.append(f.result())
            except Exception as e:
                out.append(self._recover(kind, item, e))
        return out

    # -- the tick loop -----------------------------------------------------------------
    def run(self, jobs: list[Job]) -> None:
        queue = list(jobs)
        queue.reverse()
        live: list[Live] = []
        while queue or live:
            want = min(len(queue), self.cfg.concurrency - len(live))
            started = self._map("start", self._start, [queue.pop() for _ in range(want)])
            live.extend(lv for lv in started if not lv.episode.done)
            by_params: dict[GenParams, list[tuple[Live, int | None]]] = {}
            for lv in live:  # one batch per sampling setting; each row keeps its own request seed
                p = lv.episode.gen_params()  # type: ignore[union-attr]
                by_params.setdefault(replace(p, seed=None), []).append((lv, p.seed))
            advanced: list[Live] = [lv for lv in started if lv.episode.done]
            for params, rows in by_params.items():
                group = [lv for lv, _ in rows]
                completions = self._generate([lv.episode.prompt() for lv in group], params,  # type: ignore[union-attr]
                                             [seed for _, seed in rows], [self._meta(lv) for lv in group])
                advanced.extend(self._map("advance", self._advance, group, completions))
            live = [lv for lv in advanced if not lv.episode.done]
            for trace in self._map("finish", self._finish, [lv for lv in advanced if lv.episode.done]):
                self.on_done(trace)

    def run_streaming(self, jobs: list[Job]) -> None:
        """Continuous batching: an episode's next prompt goes to the backend as soon as its tool has run.

        The main thread steps the engine; workers start episodes, run tools and score. Nobody waits
        for the slowest reply of a tick, so short replies are not held up by long ones. A fault in one
        episode ends that episode (it is never left waiting for a reply); worker faults never escape.
        """
        backend = self.backend
        assert isinstance(backend, StreamingBackend)
        queue = list(reversed(jobs))
        waiting: dict[str, Live] = {}  # run_id -> episode whose prompt is with the backend
        work: dict[Future[Any], tuple[str, Any]] = {}  # future -> ("start" | "advance" | "finish", job or live)
        live = 0

        def fill() -> None:
            nonlocal live
            while queue and live < self.cfg.concurrency:
                live += 1
                job = queue.pop()
                work[self.pool.submit(self._start, job)] = ("start", job)

        def finish(lv: Live) -> None:
            work[self.pool.submit(self._finish, lv)] = ("finish", lv)

        def ask(lv: Live) -> None:
            t0 = time.perf_counter()
            key = lv.trace["run_id"]
            try:
                prompt, params = lv.episode.prompt(), lv.episode.gen_params()  # type: ignore[union-attr]
                waiting[key] = lv
                backend.submit(key, prompt, params, self._meta(lv))
            except Exception as e:  # e.g. a prompt the engine refuses: this episode ends, the others go on
                waiting.pop(key, None)
                self._fault(lv, "sending the prompt", e)
                finish(lv)
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
                    lv = waiting.pop(key, None)
                    if lv is not None:
                        work[self.pool.submit(self._advance, lv, c)] = ("advance", lv)
            if not work:
                continue
            ready, _ = wait(list(work), timeout=0 if backend.pending() else None, return_when=FIRST_COMPLETED)
            for f in ready:
                kind, item = work.pop(f)
                try:
                    result = f.result()
                except Exception as e:
                    result = self._recover(kind, item, e)
                if kind == "finish":
                    self.on_done(result)
                    live -= 1
                    fill()
                elif result.episode.done:
                    finish(result)
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
            pending = todo[spec.name]
            if not pending:
                log.info("%s: nothing to do (all traces complete)", spec.name)
                continue
            t_load = time.perf_counter()
            backend = load_backend(spec, force=cfg.backend)
            load_s = time.perf_counter() - t_load
            if backend.info.fallback_reason:
                log.warning("%s: using %s (%s)", spec.name, backend.info.used, backend.info.fallback_reason)
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
    run_cfg = run_config(spec, cfg.backend, cfg.mode, cfg.agent, cfg.seed,
                         asdict(cfg.reflect) if cfg.strategy == "reflect" else None)
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
