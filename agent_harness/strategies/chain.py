"""Reflect, then react (or search): the reflect loop first; when it ends without a pass, the task's files
are put back and the tool agent starts as it would alone (`search`: the search over verified candidates,
`reflect_search`).

Each phase is its strategy's own episode, with its own turns, seeds and budgets, so the react phase
asks exactly what `--agent react` would: on a greedy (or batch-invariant seeded) backend the chain
solves the union of what the two strategies solve, at the cost of the reflect turns it spends first.
Steps are copied into the chain's record with the chain's turn and a `phase`; a `handoff` step
between the phases records the react phase's system prompt and task message (its worked example is
the standard one, `agent.demo` in the header says whether it was shown).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..protocol.native import CALL_PREFILL, tool_schemas
from ..sandbox.workspace import Workspace
from ..tools import restore_files
from ..traces.steps import Handoff, Phase
from ..types import Completion, GenParams, Task
from .asking import Asker, Request, ask_all
from .episode import Ask, EpisodeState
from .react import AgentConfig, Episode, agent_tools
from .reflect import Reflectable, ReflectConfig, ReflectEpisode
from .search import SearchEpisode

if TYPE_CHECKING:
    from ..traces.model import Trace


@dataclass
class ReflectThenReact(EpisodeState):
    task: Task
    ws: Workspace
    params: GenParams
    scenario: Reflectable
    reflect: ReflectConfig
    agent: AgentConfig
    temperature_schedule: list[float] | None = None
    sample: int = 0
    search: bool = False  # the tool agent's phase searches over verified candidates (reflect_search)
    current: ReflectEpisode | Episode = field(init=False)
    _offset: int = 0  # chain turns before the current phase
    _copied: int = 0  # steps of the current phase already in the chain's record

    def __post_init__(self) -> None:
        self.current = ReflectEpisode(self.task, self.ws, self.params, self.scenario, self.reflect,
                                      self.agent.tool_options, sample=self.sample)
        self.system_prompt, self.user_prompt = self.current.system_prompt, self.current.user_prompt

    @property
    def phase(self) -> Phase:
        return "reflect" if isinstance(self.current, ReflectEpisode) else "react"

    def run(self, ask: Ask) -> None:
        """Reflect; unless that passed, put the files back and run the tool agent."""
        self.current.run(self._phase(ask))
        self._sync()
        if self.current.exit_reason != "submitted":
            self._handoff()
            self.current.run(self._phase(ask))
            self._sync()
        self.exit_reason, self.final = self.current.exit_reason, self.current.final

    def annotate(self, trace: Trace) -> None:
        trace.agent.reflect = self.reflect.record()
        if self.search:
            SearchEpisode.record(trace, self.agent)
        if self.agent.protocol == "native":  # the react phase's tools, as it will send them
            trace.prompt.tools = tool_schemas(agent_tools(self.ws, self.agent))
        if self.agent.forced_calls:  # the react phase's turns begin with it
            trace.prompt.prefill = CALL_PREFILL

    def _phase(self, ask: Ask) -> Asker:
        """`ask` for the current phase: the chain's record is brought up to date before each request
        (the runner writes it then) and the replies' tokens are counted for the chain too."""
        def many(requests: Sequence[Request]) -> list[Completion]:
            self._sync()
            replies = ask_all(ask, requests)
            for reply in replies:
                self._count(reply)
            return replies

        return Asker(many)

    def _sync(self) -> None:
        """Copy the current phase's new steps into the chain's record, with the chain's turn and the phase."""
        for s in self.current.steps[self._copied:]:
            self.steps.append(s.model_copy(update={"i": len(self.steps), "turn": s.turn + self._offset,
                                                   "phase": self.phase}))
        self._copied = len(self.current.steps)
        self.turn = self._offset + self.current.turn

    def _handoff(self) -> None:
        """Put the task's files back and begin the react phase (its initial test run included)."""
        ended, attempts = self.current.exit_reason, self.current.turn
        lost = restore_files(self.ws, self.task.files)
        self._offset, self._copied = self.turn, 0
        agent = SearchEpisode if self.search else Episode
        react = self.current = agent(self.task, self.ws, self.params, self.agent,
                                     temperature_schedule=self.temperature_schedule, sample=self.sample)
        react.begin()
        note = (f"reflect ended ({ended}) after {attempts} attempt(s): the files are put back as given and the "
                "tool agent starts.")
        self._add(Handoff(**self._at(), text=note + (f" Not restored: {'; '.join(lost)}." if lost else ""),
                          phase="react", system_prompt=react.system_prompt, task_message=react.user_prompt))
        self._sync()
