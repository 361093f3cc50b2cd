"""One model's episodes, scheduled: a batched tick loop (`ModelRun.run`) or continuous batching
(`ModelRun.run_streaming`), and each episode's lifecycle (start, advance, score, embed, finish).

Every step of the lifecycle catches the faults of its own episode: that episode ends with exit_reason
"error" and the others go on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import replace
from typing import Any

from .errors import BackendError
from .planning import Job, RunConfig
from .registry import ModelSpec
from .run_trace import Live, Unstarted, new_trace
from .scenarios import Scenario, get_scenario
from .strategies.chain import ReflectThenReact
from .strategies.react import Episode
from .strategies.reflect import ReflectEpisode, require_reflectable
from .strategies.single_shot import Calibrated, ChatSingleShotEpisode, SingleShotEpisode
from .text import error_message, error_text, safe_text
from .trace import BACKEND_FAULT, UNSCORED_BACKEND, write_json_atomic
from .trace_model import Embeddings, ScoreError, Trace
from .types import Backend, Completion, GenParams, RequestMeta, StreamingBackend, request_seed
from .workspace import Workspace

log = logging.getLogger(__name__)


class ModelRun:
    """Runs one model's jobs (any scenarios and labels) with a batched tick loop.

    Progress goes to `on_done`; counters (tokens, time inside `generate`) feed the run log.
    """

    def __init__(self, cfg: RunConfig, spec: ModelSpec, backend: Backend, embedder: Any,
                 pool: ThreadPoolExecutor, on_done: Callable[[Trace], None]) -> None:
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
        ep = live.episode
        if isinstance(ep, ReflectThenReact):  # the phase's strategy and turn, as that strategy alone sends them
            return RequestMeta(live.job.task, ep.phase, ep.current.turn)
        return RequestMeta(live.job.task, self.cfg.strategy, ep.turn)

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
        self.tokens += sum(c.completion_tokens or 0 for c in completions)  # an unknown count adds nothing
        self.prompt_tokens += sum(c.prompt_tokens or 0 for c in completions)
        self.cached_tokens += sum(c.cached_tokens or 0 for c in completions)

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
        live.trace.outcome.add_error(msg)
        live.trace.outcome.exit_reason = live.episode.exit_reason = "error"

    def _start(self, job: Job) -> Live:
        """A live episode with its first trace written; never raises (a set-up fault ends it at once)."""
        ws: Workspace | None = None
        params = self.spec.gen_params(seed=self.cfg.seed)  # the run seed; each request's derives from it
        reflect = self.cfg.reflect.for_model(self.spec.bigcode_prompt)
        try:
            ws = Workspace.create(job.task.files, test_cmd=job.task.test_cmd)
            ep: Episode | SingleShotEpisode | ChatSingleShotEpisode | ReflectEpisode | ReflectThenReact
            shot = replace(params, seed=request_seed(self.cfg.seed, job.task.id, job.sample, 0))
            if self.cfg.strategy == "single_shot":
                scenario = self.scenario(job)
                if not isinstance(scenario, Calibrated):
                    raise TypeError(f"scenario '{job.scenario_name}' has no bigcode-style prompt")
                ep = SingleShotEpisode(job.task, ws, shot, scenario, self.spec.bigcode_prompt)
            elif self.cfg.strategy == "single_shot_chat":
                ep = ChatSingleShotEpisode(job.task, ws, shot, self.scenario(job))
            elif self.cfg.strategy == "reflect":
                ep = ReflectEpisode(job.task, ws, params, require_reflectable(job.scenario_name, self.scenario(job)),
                                    reflect, self.cfg.agent.tool_options, sample=job.sample)
            elif self.cfg.strategy == "reflect_react":
                ep = ReflectThenReact(job.task, ws, params, require_reflectable(job.scenario_name, self.scenario(job)),
                                      reflect, self.cfg.agent, self.spec.temperature_schedule, job.sample)
            else:
                ep = Episode(job.task, ws, params, self.cfg.agent, temperature_schedule=self.spec.temperature_schedule,
                             sample=job.sample)
            trace = new_trace(self.cfg, self.spec, self.backend.info, job, ep.params, ep.system_prompt, ws.sandbox,
                              ep.demo)
            trace.prompt.task = ep.user_prompt
            if isinstance(ep, ReflectEpisode | ReflectThenReact):
                trace.agent.reflect = reflect.record()
            if isinstance(ep, SingleShotEpisode):
                trace.agent.single_shot, trace.prompt.prefill = ep.record(), ep.prefill
            live = Live(job, ep, trace)
        except Exception as e:
            if ws is not None:
                ws.cleanup()
            live = Live(job, Unstarted(job.task), new_trace(self.cfg, self.spec, self.backend.info, job, params, "",
                                                            "none"))
            self._fault(live, "starting the episode", e)
        self._save(live)
        return live

    def _sync(self, live: Live) -> None:
        live.sync()
        write_json_atomic(live.job.path, live.trace.to_json())

    def _save(self, live: Live) -> None:
        try:
            self._sync(live)
        except Exception as e:
            self._fault(live, "writing the trace", e)
            try:  # the outcome alone, in case a step is what broke the write
                write_json_atomic(live.job.path, {**live.trace.to_json(), "steps": []})
            except Exception:
                log.error("%s %s: the trace cannot be written to %s", self.spec.name, live.job.task.id, live.job.path)

    def _advance(self, live: Live, completion: Completion) -> Live:
        if completion.error is not None:  # no usable reply (a bad server reply): this episode ends
            live.backend_fault = completion.error
            self._fault(live, "the model's reply", BackendError(completion.error))
        else:
            try:
                live.episode.advance(completion)  # type: ignore[union-attr]
            except Exception as e:
                self._fault(live, "the agent step", e)
        self._save(live)
        return live

    def _score(self, live: Live) -> None:
        """Score the final workspace. A scorer fault is no verdict: `score_error`, passed/compromised None;
        nor is an episode a bad server reply ended (the server failed, not the model; --resume redoes it)."""
        ep, out = live.episode, live.trace.outcome
        assert ep.ws is not None
        hide = (str(ep.ws.root), str(ep.ws.root.resolve()))
        if live.backend_fault is not None:
            out.passed = out.compromised = None
            out.score_error = ScoreError(type=BACKEND_FAULT, message=UNSCORED_BACKEND)
        else:
            try:
                tool_calls = [{"tool": s["tool"], "args": s["args"]} for s in ep.steps if s["type"] == "tool_call"]
                score = self.scenario(live.job).score(ep.task, ep.ws, tool_calls)
                out.passed, out.compromised = score.passed, score.compromised
                out.test_output, out.score_details = score.output[-4000:], score.details
            except Exception as e:
                out.passed = out.compromised = None
                out.score_error = ScoreError(type=type(e).__name__, message=error_message(e, hide))
                self._fault(live, "scoring", e)
        try:
            out.diff = ep.ws.diff()[-20000:]
        except Exception as e:
            self._fault(live, "the final diff", e)

    def _finish(self, live: Live) -> Trace:
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
                live.vectors = [vec for _, vec in zip(ep.steps, vectors, strict=True)]
                live.trace.embeddings = Embeddings(model=self.embedder.name, dim=self.embedder.dim)
            except Exception as e:
                live.vectors = None
                self._fault(live, "embedding", e)
        live.trace.outcome.completed = True
        self._save(live)
        return live.trace

    def _recover(self, kind: str, item: Any, e: BaseException) -> Any:
        """The result a worker should have returned when it raised after all (the last line of defence)."""
        if kind == "start":
            live = Live(item, Unstarted(item.task), new_trace(self.cfg, self.spec, self.backend.info, item,
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
            key = lv.trace.run_id
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
