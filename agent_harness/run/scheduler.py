"""One model's episodes: each a plain loop in a worker thread, the model reached through the backend.

Up to `--concurrency` episodes run at once, each in its own thread: set up, the strategy's loop, score,
embed, write. The strategy asks the model through `_ask`, which hands its requests (one, or a search's
candidates at once) to the backend on the run's event loop and waits; the backend batches whatever
requests are in flight together. At most `--workers` episodes do harness work (tools, tests, scoring)
at the same time: an episode gives its slot back while it waits for the model.

Every step catches the faults of its own episode: that episode ends with exit_reason "error" and the
others go on; a request the backend could not complete leaves it without a verdict (the backend
failed, not the model; --resume redoes it). Two things end the whole run instead, each episode at its
next request, unwritten as complete: a stop request, and a backend that is down or misconfigured
(BackendUnavailable, ConfigError from `complete`: every other episode would fail the same way).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace
from typing import Any

from .. import stop
from ..backends.loop import LoopThread
from ..errors import BackendError, BackendUnavailable, ConfigError, ModelCallFailed, StopRequested, UnusableReply
from ..registry import ModelSpec
from ..scenarios import Scenario, get_scenario
from ..strategies.asking import Asker, Request
from ..text import error_message, error_text, safe_text
from ..traces.model import Embeddings, ScoreError, Trace
from ..traces.steps import ToolCall
from ..traces.store import BACKEND_FAULT, UNSCORED_BACKEND, write_json_atomic
from ..types import Backend, Completion
from .episodes import build_episode
from .header import Live, Unstarted, new_trace
from .planning import Job, RunConfig, episode_inputs, in_flight

log = logging.getLogger(__name__)


class Busy:
    """Requests in flight at the backend over time: busy seconds (at least one in flight) and the
    time-weighted mean number in flight while busy (the batch the engine was offered)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.in_flight = self.requests = 0
        self.busy_s = self._area = 0.0
        self._t = time.perf_counter()

    def _tick(self) -> None:
        now = time.perf_counter()
        if self.in_flight:
            self.busy_s += now - self._t
            self._area += self.in_flight * (now - self._t)
        self._t = now

    def add(self, n: int) -> None:
        with self._lock:
            self._tick()
            self.in_flight += n
            self.requests += max(n, 0)

    @property
    def mean_in_flight(self) -> float:
        return self._area / self.busy_s if self.busy_s > 0 else 0.0


class _RunEnds(BaseException):
    """Takes a backend fault that ends the run (`ModelRun._ends`) out of an episode (a BaseException, so no
    strategy's `except Exception` keeps it)."""


class ModelRun:
    """Runs one model's jobs (any scenarios and labels). Progress goes to `on_done`; counters (tokens,
    time the backend was busy, requests in flight) feed the run log."""

    def __init__(self, cfg: RunConfig, spec: ModelSpec, backend: Backend, embedder: Any,
                 on_done: Callable[[Trace], None]) -> None:
        # the backend that runs (after any fallback) sets the default in flight; traces and the run log record it
        n = in_flight(cfg.concurrency, backend.info.used, spec.in_flight)
        self.cfg, self.in_flight = replace(cfg, concurrency=n), max(1, n)
        self.spec, self.backend, self.embedder, self.on_done = spec, backend, embedder, on_done
        self._scenarios: dict[str, Scenario] = {}
        self._scenario_lock = threading.Lock()
        self._count_lock = threading.Lock()
        self._slot = threading.BoundedSemaphore(max(1, cfg.workers))
        self._stopping = threading.Event()
        self._ends: Exception | None = None  # the backend fault that ends the run (it sets _stopping)
        self._loop: LoopThread | None = None
        self.busy = Busy()
        self.tokens = self.prompt_tokens = self.cached_tokens = 0  # completion, prompt, served from a cache

    @property
    def gen_s(self) -> float:
        return self.busy.busy_s

    def scenario(self, job: Job) -> Scenario:
        with self._scenario_lock:
            if job.scenario_name not in self._scenarios:
                self._scenarios[job.scenario_name] = get_scenario(job.scenario_name)
            return self._scenarios[job.scenario_name]

    # -- the run ------------------------------------------------------------------------
    def run(self, jobs: list[Job]) -> None:
        """Every job, `concurrency` at a time; returns when all are written (or raises a stop request)."""
        with LoopThread() as loop:
            self._loop = loop
            with ThreadPoolExecutor(max_workers=self.in_flight, thread_name_prefix="episode") as pool:
                pending: set[Future[Trace]] = {pool.submit(self._episode, job) for job in jobs}
                try:
                    while pending:
                        done, pending = wait(pending, return_when=FIRST_COMPLETED)
                        for f in done:
                            self.on_done(f.result())  # an episode raises only a stop or a backend down
                except BaseException:
                    self._stop(pending)
                    # The fault that ended the run, whichever episode reached here first: the ones it stopped
                    # raise StopRequested, which is no signal (a real one wins).
                    if self._ends is not None and stop.requested() is None:
                        raise self._ends from None
                    raise

    def _stop(self, pending: set[Future[Trace]]) -> None:
        """Episodes under way stop at their next request; those not begun never start."""
        self._stopping.set()
        for f in pending:
            f.cancel()

    def _episode(self, job: Job) -> Trace:
        """One episode from set-up to its last trace write; never raises but a stop request."""
        with self._slot:
            if self._stopping.is_set():
                raise StopRequested(stop.requested() or 2)
            live = self._start(job)
            try:
                if not live.episode.done:
                    self._drive(live)
            except BaseException:  # a stop: the episode stays unfinished on disk (--resume redoes it)
                ws = live.episode.ws
                if ws is not None:
                    ws.cleanup()
                raise
            return self._finish(live)

    def _drive(self, live: Live) -> None:
        try:
            live.episode.run(Asker(lambda requests: self._ask(live, requests)))
        except UnusableReply as e:  # the server failed, not the model: no verdict
            live.backend_fault = str(e)
            self._fault(live, "the model's reply", e)
        except ModelCallFailed as e:  # nor is a request the backend could not complete
            live.backend_fault = str(e)
            self._fault(live, "sending the prompt", e.__cause__ or e)
        except Exception as e:
            self._fault(live, "the agent step", e)

    def _ask(self, live: Live, requests: Sequence[Request]) -> list[Completion]:
        """The strategy's one way to the model: the steps so far are written, the slot is given back
        while the backend works on the requests (all in flight at once: a search's candidates), and the
        replies come back in order; one the server could not make usable has its `error` set."""
        assert self._loop is not None
        if self._stopping.is_set():
            raise StopRequested(stop.requested() or 2)
        self._save(live)
        self._slot.release()
        self.busy.add(len(requests))
        futures = []
        try:
            for conversation, params, meta in requests:
                futures.append(self._loop.submit(self.backend.complete(conversation, params, meta)))
                futures[-1].add_done_callback(lambda _: self.busy.add(-1))
            replies = [self._wait(f) for f in futures]
        except (BackendUnavailable, ConfigError) as e:
            with self._count_lock:
                self._ends = self._ends or e
            self._stopping.set()
            raise _RunEnds(e) from e
        except Exception as e:
            raise ModelCallFailed(str(e)) from e
        finally:
            for f in futures:
                f.cancel()  # the rest, after a fault or a stop (a done one stays done)
            self.busy.add(len(futures) - len(requests))  # any never sent
            self._slot.acquire()
        for c in replies:
            if not isinstance(c, Completion):
                raise ModelCallFailed(f"{self.backend.info.used} returned {type(c).__name__}, not a Completion")
            with self._count_lock:
                self.tokens += c.completion_tokens or 0  # an unknown count adds nothing
                self.prompt_tokens += c.prompt_tokens or 0
                self.cached_tokens += c.cached_tokens or 0
        return replies

    def _wait(self, future: Future[Completion]) -> Completion:
        """The reply of one request, polled so a stop request is seen while the backend works."""
        while True:
            try:
                return future.result(timeout=0.5)
            except FutureTimeout:
                if self._stopping.is_set():
                    raise StopRequested(stop.requested() or 2) from None

    # -- episode lifecycle -------------------------------------------------------------
    def _fault(self, live: Live, where: str, e: BaseException) -> None:
        """End `live` with exit_reason "error", recording what failed in `outcome.error`."""
        ws = getattr(live.episode, "ws", None)
        hide = (str(ws.root), str(ws.root.resolve())) if ws is not None else ()
        lines = (line.strip() for line in error_text(e, hide).splitlines())
        msg = f"{where} failed: {'; '.join(line for line in lines if line)}"  # one line (pydantic's are several)
        log.warning("%s %s: %s", self.spec.name, live.job.task.id, msg, exc_info=log.isEnabledFor(logging.DEBUG))
        live.trace.outcome.add_error(msg)
        live.trace.outcome.exit_reason = live.episode.exit_reason = "error"

    def _start(self, job: Job) -> Live:
        """An episode with its first trace written; never raises (a set-up fault ends it at once)."""
        params = self.spec.gen_params(seed=self.cfg.seed)  # the run seed; each request's derives from it
        try:
            ep = build_episode(job.strategy, job.scenario_name, episode_inputs(self.cfg, self.spec, job),
                               self.scenario(job), params)
        except Exception as e:
            live = Live(job, Unstarted(job.task), new_trace(self.cfg, self.spec, self.backend.info, job, params, "",
                                                            "none"))
            self._fault(live, "starting the episode", e)
        else:
            live = Live(job, ep, new_trace(self.cfg, self.spec, self.backend.info, job, ep.params, ep.system_prompt,
                                           ep.ws.spec, ep.demo))
            ep.annotate(live.trace)
        self._save(live)
        return live

    def _save(self, live: Live) -> None:
        try:
            live.sync()
            write_json_atomic(live.job.path, live.trace.to_json(), self.cfg.out)
        except Exception as e:
            self._fault(live, "writing the trace", e)
            try:  # the outcome alone, in case a step is what broke the write
                write_json_atomic(live.job.path, {**live.trace.to_json(), "steps": []}, self.cfg.out)
            except Exception:
                log.error("%s %s: the trace cannot be written to %s", self.spec.name, live.job.task.id, live.job.path)

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
                ep.ws.end_session()  # the agent's commands are over (Docker: its container goes before the verifier's)
                tool_calls = [{"tool": s.tool, "args": s.args} for s in ep.steps if isinstance(s, ToolCall)]
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
        try:
            if ep.ws is not None:
                self._score(live)
                try:
                    ep.ws.cleanup()
                except Exception as e:
                    self._fault(live, "the workspace clean-up", e)
            if self.embedder is not None and ep.steps:
                try:
                    texts = [safe_text(s.text) for s in ep.steps]
                    vectors = self.embedder.embed(texts)
                    live.vectors = [vec for _, vec in zip(ep.steps, vectors, strict=True)]
                    live.trace.embeddings = Embeddings(model=self.embedder.name, dim=self.embedder.dim)
                except Exception as e:
                    live.vectors = None
                    self._fault(live, "embedding", e)
        except Exception as e:  # the last line of defence: the episode still ends written
            self._fault(live, "finishing", e)
        live.trace.outcome.completed = True
        self._save(live)
        return live.trace


__all__ = ["BackendError", "Busy", "ModelRun"]
