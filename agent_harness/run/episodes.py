"""Which strategies a run can use and how it builds their episodes; each strategy is a plain loop
(`run(ask)`) over an episode's state, in agent_harness/strategies/.

`react` (react.py: tool calls in the THOUGHT/TOOL_CALL/FINAL protocol), `search` (search.py: react with
each turn sampled K times, every candidate tried against the visible tests on a scratch copy), `reflect`
(whole-function proposals tested and reflected on), `reflect_react`, `reflect_search` and `best_of_n_search`
(chain.py: reflect or best-of-n, then the tool agent), `single_shot` (bigcode's recipe), `best_of_n` (best_of_n.py:
single-shot sampled K times, each program tried against the visible tests), `branch` and `branch_search`
(branch.py: programs branched where the model doubts the given code; the chain adds the search) and
`single_shot_chat` (one chat answer). `extract` pulls the code out of a completion. `STRATEGIES` is the one
registry: each strategy's name, builder, trace folder, command-line spelling and what it needs of a scenario;
`default_strategy` picks a scenario's default.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..sandbox.workspace import Workspace
from ..scenarios import SingleShot
from ..strategies.best_of_n import BestOfNEpisode
from ..strategies.branch import BranchEpisode
from ..strategies.chain import Chain
from ..strategies.config import AgentConfig, ReflectConfig
from ..strategies.react import Episode
from ..strategies.reflect import Reflectable, ReflectEpisode
from ..strategies.search import SearchEpisode
from ..strategies.single_shot import Calibrated, ChatSingleShotEpisode, SingleShotEpisode
from ..traces.store import scenario_folder
from ..types import GenParams, Task, request_seed

if TYPE_CHECKING:
    from ..registry import ModelSpec

AnyEpisode = Episode | SingleShotEpisode | ChatSingleShotEpisode | ReflectEpisode | Chain


@dataclass(frozen=True)
class EpisodeInputs:
    """What a strategy's episode is built from: the task and sample, the run seed, the model, and the settings
    already resolved for that model (the agent's protocol, reflect's draft)."""

    task: Task
    sample: int
    run_seed: int
    model: ModelSpec
    agent: AgentConfig
    reflect: ReflectConfig


Builder = Callable[[EpisodeInputs, Any, Workspace, GenParams], AnyEpisode]


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
    """One strategy: `name` is the trace's `agent.strategy`; its traces go to `dirname(scenario)`."""

    name: str
    build: Builder
    help: str
    needs: tuple[Need, ...] = ()  # react: none, the tool agent works on every scenario
    reflects: bool = False  # runs the reflect loop: ReflectConfig (--iters, --reflect-draft) applies
    uses_tools: bool = False  # runs the tool agent: --protocol applies
    searches: bool = False  # runs the tool agent's search: the SEARCH_ONLY settings apply
    opens: bool = False  # opens with best-of-n (--opening-candidates): the OPENING_ONLY settings apply
    scores: bool = False  # reads the model's log-probabilities of a given reply: the backend must give them

    def recorded(self, agent: AgentConfig) -> AgentConfig:
        """`agent` as this strategy's traces record it (the settings it never reads as before they existed)."""
        return agent.recorded(self.searches, self.opens)

    @property
    def flag(self) -> str:
        """Its --agent spelling."""
        return self.name.replace("_", "-")

    @property
    def mode(self) -> str:
        """The trace's older name for it (`agent.mode`): 'agent' for react."""
        return "agent" if self.name == "react" else self.name

    def dirname(self, scenario: str, protocol: str = "text", tool_choice: str = "auto") -> str:
        """Its trace folder for `scenario` (`scenario_folder`: one per strategy and protocol)."""
        return scenario_folder(scenario, self.name, protocol, tool_choice)

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


def _single_shot(inp: EpisodeInputs, scenario: Any, ws: Workspace, params: GenParams) -> AnyEpisode:
    return SingleShotEpisode(inp.task, ws, _first_seed(inp, params), scenario, inp.model.bigcode_prompt)


def _single_shot_chat(inp: EpisodeInputs, scenario: Any, ws: Workspace, params: GenParams) -> AnyEpisode:
    return ChatSingleShotEpisode(inp.task, ws, _first_seed(inp, params), scenario)


def _reflect(inp: EpisodeInputs, scenario: Any, ws: Workspace, params: GenParams) -> AnyEpisode:
    return ReflectEpisode(inp.task, ws, params, scenario, inp.reflect, inp.agent.tool_options, sample=inp.sample)


def _reflect_react(inp: EpisodeInputs, scenario: Any, ws: Workspace, params: GenParams) -> AnyEpisode:
    return Chain(inp.task, ws, params, scenario, inp.reflect, inp.agent, inp.model.temperature_schedule,
                            inp.sample)


def _reflect_search(inp: EpisodeInputs, scenario: Any, ws: Workspace, params: GenParams) -> AnyEpisode:
    return Chain(inp.task, ws, params, scenario, inp.reflect, inp.agent, inp.model.temperature_schedule,
                            inp.sample, search=True)


def _react(inp: EpisodeInputs, scenario: Any, ws: Workspace, params: GenParams) -> AnyEpisode:
    return Episode(inp.task, ws, params, inp.agent, temperature_schedule=inp.model.temperature_schedule,
                   sample=inp.sample)


def _search(inp: EpisodeInputs, scenario: Any, ws: Workspace, params: GenParams) -> AnyEpisode:
    return SearchEpisode(inp.task, ws, params, inp.agent, temperature_schedule=inp.model.temperature_schedule,
                         sample=inp.sample)


def _best_of_n(inp: EpisodeInputs, scenario: Any, ws: Workspace, params: GenParams,
               candidates: int | None = None) -> BestOfNEpisode:
    return BestOfNEpisode(inp.task, ws, _first_seed(inp, params), scenario, inp.model.bigcode_prompt,
                          candidates=candidates or inp.agent.candidates, temperature=inp.agent.search_temperature,
                          options=inp.agent.tool_options, run_seed=inp.run_seed, sample=inp.sample)


def _best_of_n_search(inp: EpisodeInputs, scenario: Any, ws: Workspace, params: GenParams) -> AnyEpisode:
    opening = _best_of_n(inp, scenario, ws, params, inp.agent.opening_candidates)
    return Chain(inp.task, ws, params, scenario, None, inp.agent, inp.model.temperature_schedule, inp.sample,
                 search=True, opening=opening)


def _branch(inp: EpisodeInputs, scenario: Any, ws: Workspace, params: GenParams) -> BranchEpisode:
    return BranchEpisode(inp.task, ws, _first_seed(inp, params), scenario, inp.model.bigcode_prompt,
                         candidates=inp.agent.opening_candidates, options=inp.agent.tool_options,
                         run_seed=inp.run_seed, sample=inp.sample)


def _branch_search(inp: EpisodeInputs, scenario: Any, ws: Workspace, params: GenParams) -> AnyEpisode:
    return Chain(inp.task, ws, params, scenario, None, inp.agent, inp.model.temperature_schedule, inp.sample,
                 search=True, opening=_branch(inp, scenario, ws, params))


def _first_seed(inp: EpisodeInputs, params: GenParams) -> GenParams:
    return replace(params, seed=request_seed(inp.run_seed, inp.task.id, inp.sample, 0))


STRATEGIES: dict[str, StrategyInfo] = {s.name: s for s in (
    StrategyInfo("react", _react, "the tool agent (text or native tool calls, --protocol); runs on every "
                 "scenario", uses_tools=True),
    StrategyInfo("reflect", _reflect, "the whole function, the visible tests, reflect on the failing check, "
                 "--iters times", (REFLECTABLE,), reflects=True),
    StrategyInfo("single_shot", _single_shot, "one completion, no tools, asked and post-processed as "
                 "bigcode-evaluation-harness does: the baseline", (CALIBRATED,)),
    StrategyInfo("single_shot_chat", _single_shot_chat, "the earlier chat-style single-shot: a code block asked "
                 "for", (SINGLE_SHOT,)),
    StrategyInfo("reflect_react", _reflect_react, "reflect; when it fails, the files put back and react",
                 (REFLECTABLE,), reflects=True, uses_tools=True),
    StrategyInfo("search", _search, "the tool agent, each turn --candidates replies sampled at once, each tried on "
                 "a scratch copy against the visible tests, continued from the best; stops at the first that "
                 "passes", uses_tools=True, searches=True),
    StrategyInfo("reflect_search", _reflect_search, "reflect; when it fails, the files put back and search",
                 (REFLECTABLE,), reflects=True, uses_tools=True, searches=True),
    StrategyInfo("best_of_n", _best_of_n, "single-shot asked --candidates times at once, each program tried on a "
                 "scratch copy against the visible tests; the first that passes is submitted",
                 (CALIBRATED,)),
    StrategyInfo("best_of_n_search", _best_of_n_search, "best-of-n (--opening-candidates programs); when none "
                 "passes, the tool agent's search (--handoff: from the files as given or best-of-n's best)",
                 (CALIBRATED,), uses_tools=True, searches=True, opens=True),
    StrategyInfo("branch", _branch, "single-shot's answer, then the given code branched where the model most "
                 "doubts it (--opening-candidates programs: at each doubted token one of its 2 preferred tokens, "
                 "the rest completed greedily), each tried against the visible tests; the first that passes is "
                 "submitted. Needs a backend that scores a reply (vllm, transformers, openai with a tokenizer)",
                 (CALIBRATED,), opens=True, scores=True),
    StrategyInfo("branch_search", _branch_search, "branch; when no program passes, the tool agent's search "
                 "(--handoff as best-of-n-search)", (CALIBRATED,), uses_tools=True,
                 searches=True, opens=True, scores=True),
)}

# The defaults, best first as measured on the split nobody tuned on (docs/results.md "The untuned split": on
# HumanEvalFix's odd tasks branch-search with its search branching its writes and the file in view scored highest
# on both models); a scenario runs the first it supports and its model's backend can run: a calibrated one
# (HumanEvalFix, bogus) branch-search (best-of-n-search where the backend cannot score a reply), one with a
# function to reflect on reflect-react, the repository and security scenarios react.
DEFAULT_ORDER = ("branch_search", "best_of_n_search", "reflect_react", "react")
# The settings a default strategy was measured with: a run without --agent uses them unless its flags give them
# (spread_branches: the 0.5B's search phase solved more on the even split and both untuned sets, losing none;
# deeper_branches: more on the even split and both untuned sets again, paired on one machine).
DEFAULT_PRESETS: dict[str, dict[str, Any]] = {
    "branch_search": {"search_branches": 32, "spread_branches": True, "deeper_branches": True, "initial_files": True}}


def with_presets(agent: AgentConfig, strategy: str, given: Collection[str] = ()) -> AgentConfig:
    """`agent` with the settings default `strategy` was measured with (`DEFAULT_PRESETS`), but those in `given`."""
    return replace(agent, **{k: v for k, v in DEFAULT_PRESETS.get(strategy, {}).items() if k not in given})


def default_strategy(scenario: object, reflect: ReflectConfig, scores: bool = True) -> StrategyInfo:
    """The strategy a scenario runs without --agent: the best measured one it supports (react supports all),
    of those that need no scored replies when the backend cannot give them (`scores` False)."""
    return next(s for s in (STRATEGIES[n] for n in DEFAULT_ORDER)
                if s.supports(scenario, reflect) and (scores or not s.scores))


def build_episode(strategy_name: str, scenario_name: str, inp: EpisodeInputs, scenario: Any,
                  params: GenParams) -> AnyEpisode:
    """The episode of strategy `strategy_name` on `inp.task`, in a fresh workspace of the task's files (removed
    again when the episode cannot be built). Nothing runs in the sandbox here: that is the loop's."""
    strategy = STRATEGIES[strategy_name]
    strategy.check(scenario_name, scenario, inp.reflect)
    task = inp.task
    ws = Workspace.create(task.files, test_cmd=task.test_cmd, image=task.metadata.get("image"))
    try:
        return strategy.build(inp, scenario, ws, params)
    except BaseException:
        ws.cleanup()
        raise
