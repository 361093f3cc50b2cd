"""Strategies: how a model works on a task, each a plain loop (`run(ask)`) over an episode's state.

`react` (react.py: tool calls in the THOUGHT/TOOL_CALL/FINAL protocol), `search` (search.py: react with
each turn sampled K times, every candidate tried against the visible tests on a scratch copy), `reflect`
(whole-function proposals tested and reflected on), `reflect_react` and `reflect_search` (chain.py: reflect,
then the tool agent on the files as given), `single_shot` (bigcode's recipe) and `single_shot_chat` (one
chat answer). `extract` pulls the
code out of a completion. `STRATEGIES` is the one registry: each strategy's name, builder, trace folder,
command-line spelling and what it needs of a scenario; `default_strategy` picks a scenario's default.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..scenarios import SingleShot
from ..types import GenParams, request_seed
from ..workspace import Workspace
from .chain import ReflectThenReact
from .config import ReflectConfig
from .react import Episode
from .reflect import Reflectable, ReflectEpisode
from .search import SearchEpisode
from .single_shot import Calibrated, ChatSingleShotEpisode, SingleShotEpisode

if TYPE_CHECKING:
    from ..planning import Job, RunConfig
    from ..registry import ModelSpec

AnyEpisode = Episode | SingleShotEpisode | ChatSingleShotEpisode | ReflectEpisode | ReflectThenReact
Builder = Callable[["RunConfig", "ModelSpec", "Job", Any, Workspace, GenParams], AnyEpisode]


@dataclass(frozen=True)
class Need:
    """Something a strategy needs of a scenario: a protocol it implements, and the one line when it does not
    ("{name}": the scenario, "{flag}": the strategy's --agent spelling)."""

    protocol: type
    refusal: str

    def met(self, scenario: object) -> bool:
        return isinstance(scenario, self.protocol)


SINGLE_SHOT = Need(SingleShot, "scenario '{name}' has no single-shot baseline")
CALIBRATED = Need(Calibrated, "scenario '{name}' has no bigcode-style prompt (single-shot, --reflect-draft bigcode); "
                              "--agent single-shot-chat asks it in chat form")
REFLECTABLE = Need(Reflectable, "scenario '{name}' cannot run --agent {flag}: it has no single function to extract "
                                "and test (use --agent react)")


@dataclass(frozen=True)
class StrategyInfo:
    """One strategy: `name` is the trace's `agent.strategy`; its traces go to `<scenario><suffix>/`."""

    name: str
    build: Builder
    help: str
    suffix: str
    needs: tuple[Need, ...] = ()  # react: none, the tool agent works on every scenario
    reflects: bool = False  # runs the reflect loop: ReflectConfig (--iters, --reflect-draft) applies
    uses_tools: bool = False  # runs the tool agent: --protocol applies

    @property
    def flag(self) -> str:
        """Its --agent spelling."""
        return self.name.replace("_", "-")

    @property
    def mode(self) -> str:
        """The trace's older name for it (`agent.mode`): 'agent' for react."""
        return "agent" if self.name == "react" else self.name

    def dirname(self, scenario: str, protocol: str = "text", tool_choice: str = "auto") -> str:
        """Its trace folder for `scenario`; native-protocol episodes get one of their own (and one more with
        tool_choice required), so a model's protocols never mix."""
        native = "-native" + ("-required" if tool_choice == "required" else "")
        return scenario + self.suffix + (native if protocol == "native" else "")

    def requirements(self, reflect: ReflectConfig) -> tuple[Need, ...]:
        """What it needs of a scenario under `reflect`: the bigcode draft adds a bigcode-style prompt."""
        return self.needs + ((CALIBRATED,) if self.reflects and reflect.draft == "bigcode" else ())

    def supports(self, scenario: object, reflect: ReflectConfig) -> bool:
        return all(n.met(scenario) for n in self.requirements(reflect))

    def check(self, name: str, scenario: object, reflect: ReflectConfig) -> None:
        """Refuse, in one line, a scenario this strategy cannot run."""
        for need in self.requirements(reflect):
            if not need.met(scenario):
                raise ConfigError(need.refusal.format(name=name, flag=self.flag))


def _single_shot(cfg: RunConfig, spec: ModelSpec, job: Job, scenario: Any, ws: Workspace,
                 params: GenParams) -> AnyEpisode:
    return SingleShotEpisode(job.task, ws, _first_seed(cfg, job, params), scenario, spec.bigcode_prompt)


def _single_shot_chat(cfg: RunConfig, spec: ModelSpec, job: Job, scenario: Any, ws: Workspace,
                      params: GenParams) -> AnyEpisode:
    return ChatSingleShotEpisode(job.task, ws, _first_seed(cfg, job, params), scenario)


def _reflect(cfg: RunConfig, spec: ModelSpec, job: Job, scenario: Any, ws: Workspace,
             params: GenParams) -> AnyEpisode:
    return ReflectEpisode(job.task, ws, params, scenario, cfg.reflect.for_model(spec.bigcode_prompt),
                          cfg.agent.tool_options, sample=job.sample)


def _reflect_react(cfg: RunConfig, spec: ModelSpec, job: Job, scenario: Any, ws: Workspace,
                   params: GenParams) -> AnyEpisode:
    return ReflectThenReact(job.task, ws, params, scenario, cfg.reflect.for_model(spec.bigcode_prompt),
                            cfg.agent_for(spec, job.strategy), spec.temperature_schedule, job.sample)


def _reflect_search(cfg: RunConfig, spec: ModelSpec, job: Job, scenario: Any, ws: Workspace,
                    params: GenParams) -> AnyEpisode:
    return ReflectThenReact(job.task, ws, params, scenario, cfg.reflect.for_model(spec.bigcode_prompt),
                            cfg.agent_for(spec, job.strategy), spec.temperature_schedule, job.sample, search=True)


def _react(cfg: RunConfig, spec: ModelSpec, job: Job, scenario: Any, ws: Workspace,
           params: GenParams) -> AnyEpisode:
    return Episode(job.task, ws, params, cfg.agent_for(spec, job.strategy),
                   temperature_schedule=spec.temperature_schedule, sample=job.sample)


def _search(cfg: RunConfig, spec: ModelSpec, job: Job, scenario: Any, ws: Workspace,
            params: GenParams) -> AnyEpisode:
    return SearchEpisode(job.task, ws, params, cfg.agent_for(spec, job.strategy),
                         temperature_schedule=spec.temperature_schedule, sample=job.sample)


def _first_seed(cfg: RunConfig, job: Job, params: GenParams) -> GenParams:
    return replace(params, seed=request_seed(cfg.seed, job.task.id, job.sample, 0))


STRATEGIES: dict[str, StrategyInfo] = {s.name: s for s in (
    StrategyInfo("react", _react, "the tool agent (text or native tool calls, --protocol); runs on every "
                 "scenario", "", uses_tools=True),
    StrategyInfo("reflect", _reflect, "the whole function, the visible tests, reflect on the failing check, "
                 "--iters times", "-reflect", (REFLECTABLE,), reflects=True),
    StrategyInfo("single_shot", _single_shot, "one completion, no tools, asked and post-processed as "
                 "bigcode-evaluation-harness does: the baseline", "-single_shot", (CALIBRATED,)),
    StrategyInfo("single_shot_chat", _single_shot_chat, "the earlier chat-style single-shot: a code block asked "
                 "for", "-single_shot_chat", (SINGLE_SHOT,)),
    StrategyInfo("reflect_react", _reflect_react, "reflect; when it fails, the files put back and react",
                 "-reflect_react", (REFLECTABLE,), reflects=True, uses_tools=True),
    StrategyInfo("search", _search, "the tool agent, each turn --candidates replies sampled at once, each tried on "
                 "a scratch copy against the visible tests, continued from the best; stops at the first that "
                 "passes", "-search", uses_tools=True),
    StrategyInfo("reflect_search", _reflect_search, "reflect; when it fails, the files put back and search",
                 "-reflect_search", (REFLECTABLE,), reflects=True, uses_tools=True),
)}

# The defaults, best first as measured (README "Strategies", bench/RESULTS.md: over all 164 HumanEvalFix
# tasks reflect-react beat react, reflect and single-shot on both models); a scenario runs the first it supports.
DEFAULT_ORDER = ("reflect_react", "react")


def default_strategy(scenario: object, reflect: ReflectConfig) -> StrategyInfo:
    """The strategy a scenario runs without --agent: the best measured one it supports (react supports all)."""
    return next(s for s in (STRATEGIES[n] for n in DEFAULT_ORDER) if s.supports(scenario, reflect))


def build_episode(cfg: RunConfig, spec: ModelSpec, job: Job, scenario: Any, params: GenParams) -> AnyEpisode:
    """The episode `job.strategy` runs on `job`, in a fresh workspace of the task's files (removed again when
    the episode cannot be built). Nothing runs in the sandbox here: that is the loop's."""
    strategy = STRATEGIES[job.strategy]
    strategy.check(job.scenario_name, scenario, cfg.reflect)
    ws = Workspace.create(job.task.files, test_cmd=job.task.test_cmd, image=job.task.metadata.get("image"))
    try:
        return strategy.build(cfg, spec, job, scenario, ws, params)
    except BaseException:
        ws.cleanup()
        raise
