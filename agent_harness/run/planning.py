"""What a run does: its configuration, the jobs (model × scenario × label × task × sample) and which of
them `--resume` still has to run."""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ..backends import scores_replies
from ..errors import ConfigError
from ..registry import ModelSpec
from ..sandbox import safewrite
from ..scenarios import Scenario, TaskQuery, get_scenario
from ..strategies.config import AgentConfig, ReflectConfig
from ..strategies.single_shot import recipe_record
from ..traces.files import trace_paths
from ..traces.store import resume_status, set_aside, task_slugs, trace_path
from ..types import Task
from .episodes import STRATEGIES, EpisodeInputs, StrategyInfo, default_strategy, with_presets
from .fingerprint import episode_fingerprint, run_config

# Episodes in flight per model when --concurrency is not given, by the backend that runs them. vLLM's
# in-process engine: 32 ran all 164 HumanEvalFix tasks (react, 0.5B) 1.16x faster than 16 at a mean batch
# of 29.4 against 14.9 (bench/RESULTS.md, 2026-11-28). The others keep 16: transformers (0.99x at 32) pads one batched
# generate to its longest row, and an openai endpoint caps its own requests (`concurrency` in models.yaml).
# A model's own `in_flight` in models.yaml comes first (the 1.5B ran no faster at 32).
IN_FLIGHT = {"vllm": 32}
DEFAULT_IN_FLIGHT = 16


def in_flight(concurrency: int | None, backend: str, model: Mapping[Any, int] | None = None) -> int:
    """Episodes in flight for a model that `backend` runs: --concurrency, else the model's own number for
    that backend (`in_flight` in models.yaml), else the backend's default."""
    if concurrency is not None:
        return concurrency
    return (model or {}).get(backend) or IN_FLIGHT.get(backend, DEFAULT_IN_FLIGHT)


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
    shard: tuple[int, int] | None = None  # (i, n): only tasks whose index % n == i; not in the fingerprint
    concurrency: int | None = None  # episodes in flight per model; None: its backend's default (`in_flight`)
    seed: int = 0
    embed: bool = True
    strategy: str | None = None  # a name in episodes.STRATEGIES for every scenario; None: each scenario's default
    dataset_path: Path | None = None
    dataset_hub: bool = False  # HumanEvalFix from the Hugging Face Hub instead of the vendored copy
    agent: AgentConfig = field(default_factory=AgentConfig)
    # The agent settings the command line gave: a default strategy's presets never override them. None: those
    # `agent` holds away from their defaults.
    given: frozenset[str] | None = None
    workers: int = 4  # threads running tools, tests and workspace set-up
    progress: bool = True
    backend: str | None = None  # force this backend for every model (default: each model's own)
    reflect: ReflectConfig = field(default_factory=ReflectConfig)

    def __post_init__(self) -> None:
        if self.strategy is not None and self.strategy not in STRATEGIES:
            raise ConfigError(f"unknown strategy '{self.strategy}'; valid: {', '.join(STRATEGIES)}")

    @property
    def mode(self) -> str:
        """The trace's older name for the strategy ('agent' for react; `<out>/runs.jsonl`), 'default' when each
        scenario runs its own default."""
        return STRATEGIES[self.strategy].mode if self.strategy else "default"

    def agent_for(self, spec: ModelSpec, strategy: str) -> AgentConfig:
        """The agent settings `spec`'s episodes of `strategy` run with: --protocol, else the model's preferred
        protocol, for a strategy that calls tools; text (and no tool choice) for one that calls none. The settings
        only search reads (SEARCH_ONLY) and those only an opening best-of-n reads (OPENING_ONLY) are kept for
        the strategies that read them; the others record them as before they existed, so their fingerprints do
        not change with them. A run without --agent adds the settings its default was measured with
        (`DEFAULT_PRESETS`, under the text protocol) where its flags do not give them."""
        info = STRATEGIES[strategy]
        agent = info.recorded(self.agent)
        if not info.uses_tools:
            return replace(agent, protocol="text", tool_choice="auto")
        agent = replace(agent, protocol=agent.protocol or spec.protocol)
        if self.strategy is None and agent.protocol == "text":
            given = self.given if self.given is not None else _away_from_defaults(self.agent)
            agent = with_presets(agent, strategy, given)
        return agent

    def folder(self, spec: ModelSpec, strategy: str, scenario: str) -> str:
        """The trace folder of `spec`'s episodes of `strategy` on `scenario` (its protocol's own under native)."""
        agent = self.agent_for(spec, strategy)
        return STRATEGIES[strategy].dirname(scenario, agent.protocol or "text", agent.tool_choice)

    def strategy_for(self, scenario: Scenario, spec: ModelSpec | None = None) -> StrategyInfo:
        """The strategy `scenario` runs: --agent's for every scenario, else the scenario's default (for `spec`:
        one its backend can run)."""
        if self.strategy:
            return STRATEGIES[self.strategy]
        return default_strategy(scenario, self.reflect, spec is None or scores_replies(spec, self.backend))


def _away_from_defaults(agent: AgentConfig) -> frozenset[str]:
    """The settings `agent` holds at other values than their defaults."""
    default = AgentConfig()
    return frozenset(f.name for f in fields(AgentConfig) if getattr(agent, f.name) != getattr(default, f.name))


def scenario_strategies(cfg: RunConfig) -> dict[str, StrategyInfo]:
    """Each scenario of the run and the strategy it runs (not yet checked against the scenario)."""
    return {name: cfg.strategy_for(get_scenario(name)) for name in cfg.scenarios}


@dataclass
class Job:
    task: Task
    index: int
    sample: int
    scenario: str  # directory name: the scenario and its strategy's suffix (StrategyInfo.dirname)
    path: Path
    scenario_name: str = ""  # the registry name (scoring)
    fingerprint: dict[str, Any] = field(default_factory=dict)  # the header's block (fingerprint.py)
    strategy: str = "react"  # the name in episodes.STRATEGIES


def episode_inputs(cfg: RunConfig, spec: ModelSpec, job: Job) -> EpisodeInputs:
    """What `job`'s episode is built from, with the run's settings resolved for `spec`."""
    return EpisodeInputs(job.task, job.sample, cfg.seed, spec, cfg.agent_for(spec, job.strategy),
                         cfg.reflect.for_model(spec.bigcode_prompt))


def in_shard(cfg: RunConfig, job: Job) -> bool:
    """Whether this process runs `job`: every sample of a task lands in the same shard, by task index."""
    return cfg.shard is None or job.index % cfg.shard[1] == cfg.shard[0]


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
            strategy = cfg.strategy_for(scenario)
            strategy.check(name, scenario, cfg.reflect)
            query = TaskQuery(label=label, n=cfg.n, task_ids=cfg.task_ids, dataset_path=cfg.dataset_path,
                              options={"hub": True} if cfg.dataset_hub else {})
            tasks = scenario.load_tasks(query)
            yield name, label, [
                Job(t, _task_index(t, i), s, strategy.dirname(name), Path(), name, strategy=strategy.name)
                for i, t in enumerate(tasks)
                for s in range(cfg.samples)
            ]


def strategy_options(cfg: RunConfig, spec: ModelSpec, strategy: str) -> dict[str, Any] | None:
    """The fingerprint's block of the strategy's own options: reflect's (its draft only when it is not the
    chat draft, the one earlier traces used, so they still match theirs), the calibrated single-shot's
    prompt recipe."""
    if STRATEGIES[strategy].reflects:
        return cfg.reflect.for_model(spec.bigcode_prompt).fingerprint()
    if strategy == "single_shot":
        return recipe_record(spec.bigcode_prompt)
    return None


def model_jobs(cfg: RunConfig, spec: ModelSpec, planned: list[Job]) -> list[Job]:
    """`planned` for one model: each job with its trace path and fingerprint (a scenario's default strategy one
    its backend can run); stale temp files removed."""
    if cfg.strategy is None:  # `planned` holds each scenario's default for a backend that scores replies
        best = {j.scenario_name: j.strategy for j in planned}
        ran = {name: cfg.strategy_for(get_scenario(name), spec).name for name in best}
        _note_fallbacks(spec, cfg.backend, best, ran)
        planned = [replace(j, strategy=ran[j.scenario_name]) for j in planned]
    agents = {name: cfg.agent_for(spec, name) for name in {j.strategy for j in planned}}
    run_cfg = {name: run_config(spec, cfg.backend, STRATEGIES[name].mode, agent, cfg.seed,
                                strategy_options(cfg, spec, name)) for name, agent in agents.items()}
    planned = [replace(j, scenario=cfg.folder(spec, j.strategy, j.scenario_name)) for j in planned]
    slugs: dict[tuple[str, str], dict[str, str]] = {}
    for j in planned:
        slugs.setdefault((j.scenario, j.task.label), {})[j.task.id] = ""
    for key, ids in slugs.items():
        slugs[key] = task_slugs(ids)
    jobs = [replace(j, path=trace_path(cfg.out, spec.name, j.scenario, j.task.label,
                                       slugs[(j.scenario, j.task.label)][j.task.id], j.sample),
                    fingerprint=episode_fingerprint(run_cfg[j.strategy], j.scenario_name, j.task, j.sample))
            for j in planned]
    for d in sorted({j.path.parent.relative_to(cfg.out) for j in jobs}):
        _remove_stale(cfg.out, d)
    return jobs


def _note_fallbacks(spec: ModelSpec, backend: str | None, best: dict[str, str], ran: dict[str, str]) -> None:
    """One line on stderr for each scenario whose default `spec`'s backend cannot run (it reads scored replies)."""
    for name in sorted(best):
        if ran[name] != best[name]:
            print(f"model '{spec.name}': {name} runs {STRATEGIES[ran[name]].flag}, not its default "
                  f"{STRATEGIES[best[name]].flag}, which reads the model's log-probabilities of a given reply that "
                  f"its backend ({backend or spec.backend}) cannot give", file=sys.stderr)


def _remove_stale(out: Path, rel: Path) -> None:
    """Refuse (one line, exit 2) a link or non-folder where the folder `rel` of `out` goes, before any work,
    so that no trace of the run lands outside `out`; remove temp files of a killed run's last write
    (not those of a live one: shards of one run share the folder)."""
    fd = safewrite.open_folder(out, rel, create=False) if os.path.lexists(out) else None
    if fd is None:
        return
    try:
        safewrite.remove_stale_temps(fd, ".run_*.tmp")
    finally:
        os.close(fd)


def pending_jobs(cfg: RunConfig, jobs: list[Job], counts: Counter[str]) -> list[Job]:
    """The jobs to run: all of them, or with --resume those without a reusable trace (tallied in `counts`).

    A complete trace in a job's place is set aside (`trace.set_aside`), never overwritten: one made with
    another configuration under --resume, any complete one without it (counted as "set_aside").
    """
    pending = []
    for j in jobs:
        status = resume_status(j.path, j.fingerprint["hash"]) if cfg.resume else "run"
        counts[status] += 1
        if status == "reuse":
            continue
        if status in ("changed", "run") and set_aside(j.path, cfg.out):
            counts["set_aside"] += 1
        pending.append(j)
    return pending


def report_resume(counts: Counter[str]) -> None:
    redid = counts["changed"] + counts["incomplete"] + counts["new"]
    new = f", {counts['new']} new" if counts["new"] else ""
    print(f"resume: reused {counts['reuse']}, redid {redid} ({counts['changed']} config changed, "
          f"{counts['incomplete']} incomplete{new})", file=sys.stderr)


def report_set_aside(counts: Counter[str]) -> None:
    if counts["set_aside"]:
        print(f"kept {counts['set_aside']} complete trace(s) this run replaces beside them, as "
              f"run_*.json.superseded-<fingerprint>", file=sys.stderr)


def report_foreign(out: Path, ours: list[Job]) -> None:
    """One line when `out` holds traces this run did not plan (other models, tasks, settings or older runs)."""
    mine = {j.path for j in ours}
    foreign = sum(1 for rel in trace_paths(out) if Path(out) / rel not in mine)  # never recurses nor follows links
    if foreign:
        print(f"note: {out} also holds {foreign} trace(s) of other configurations; the table and summary.json "
              f"cover this run's {len(mine)} episode(s) only", file=sys.stderr)
