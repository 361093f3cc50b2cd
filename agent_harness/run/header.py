"""The trace of one running episode: its header built from the run configuration, then kept in step
with the episode (steps copied, outcome counters, embeddings) until it is written for the last time."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from ..registry import ModelSpec
from ..sandbox import SandboxSpec, describe_bounds
from ..strategies.episode import EpisodeState
from ..traces.model import (
    AgentInfo,
    Fingerprint,
    Generation,
    Mode,
    ModelInfo,
    Outcome,
    Prompt,
    Sandbox,
    Strategy,
    Trace,
)
from ..traces.store import SCHEMA_VERSION, harness_version
from ..types import BackendInfo, GenParams, Task
from .episodes import STRATEGIES, AnyEpisode
from .planning import Job, RunConfig


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
    episode: AnyEpisode | Unstarted
    trace: Trace
    started: float = field(default_factory=time.monotonic)
    vectors: list[list[float]] | None = None  # step embeddings, once the episode is done
    backend_fault: str | None = None  # the backend failed a request (bad reply, fault): no verdict

    def sync(self) -> None:
        """Copy the episode's steps and counters into the trace (the episode's own records stay its own)."""
        ep, out = self.episode, self.trace.outcome
        task_message = getattr(ep, "user_prompt", "")  # as the model got it (made when the loop began)
        if isinstance(task_message, str) and task_message:
            self.trace.prompt.task = task_message
        vectors = self.vectors or []
        self.trace.steps = [s.model_copy(update={"embedding": vectors[n]}) if n < len(vectors) else s
                            for n, s in enumerate(ep.steps)]  # steps are frozen: the episode's own stay as they are
        out.num_steps, out.num_turns = len(ep.steps), ep.turn
        out.prompt_tokens, out.cached_prompt_tokens = ep.prompt_tokens, ep.cached_tokens
        out.completion_tokens = ep.completion_tokens
        out.elapsed_seconds = round(time.monotonic() - self.started, 3)
        out.exit_reason, out.final = ep.exit_reason, ep.final  # type: ignore[assignment]  # an ExitReason


def new_trace(cfg: RunConfig, spec: ModelSpec, info: BackendInfo, job: Job, ep_params: GenParams,
              system: str, sandbox: str | SandboxSpec, demo: list[Any] | None = None) -> Trace:
    """The trace an episode starts with: the header, no steps, an empty outcome (validated here: the casts)."""
    strategy = STRATEGIES[job.strategy]
    fingerprint: dict[str, Any] = {"fingerprint": Fingerprint(**job.fingerprint)} if job.fingerprint else {}
    return Trace(
        schema_version=SCHEMA_VERSION,
        run_id=uuid.uuid4().hex,
        scenario=job.scenario,
        task_id=job.task.id,
        task_index=job.index,
        label=job.task.label,
        sample=job.sample,
        timestamp=datetime.now(UTC).isoformat(timespec="seconds"),
        model=ModelInfo(name=spec.name, hf_id=spec.hf_id, backend=info.used, backend_requested=info.requested,
                        fallback_reason=info.fallback_reason, device=info.device, details=info.details),
        generation=Generation(max_tokens=ep_params.max_tokens, temperature=ep_params.temperature,
                              top_p=ep_params.top_p, stop=list(ep_params.stop), seed=cfg.seed,
                              temperature_schedule=spec.temperature_schedule, context_length=spec.context_length),
        sandbox=cast(Sandbox, sandbox.kind if isinstance(sandbox, SandboxSpec) else sandbox),
        sandbox_bounds=describe_bounds(sandbox=sandbox),
        harness_version=harness_version(),
        **fingerprint,
        agent=AgentInfo(mode=cast(Mode, strategy.mode), strategy=cast(Strategy, strategy.name),
                        concurrency=cfg.concurrency, **cfg.agent_for(spec, job.strategy).dump()),
        prompt=Prompt(system=system, task=job.task.statement, demo=demo or []),
        steps=[],
        embeddings=None,
        outcome=Outcome.start(),
    )
