"""Chains: a first phase, then the tool agent. `reflect_react` and `reflect_search` begin with the reflect
loop, `best_of_n_search` with best-of-n (`opening_candidates` programs sampled at once, each tried against
the visible tests), `branch_search` with branching at the model's doubts (as many programs); when the first
phase ends without a pass the tool agent starts: react, or the search over verified candidates (`search`).

Where the tool agent starts is `handoff`: `given`, the task's files put back as given, so the tool phase asks
exactly what `--agent react` (or search) would alone; `kept`, the files as the first phase left them (best-of-n:
its best failing program, the one whose failing check is furthest down a test file), the test files put back,
and a restart of the search begins from those files again.

Each phase is its strategy's own episode, with its own turns, seeds and budgets, so on a greedy (or
batch-invariant seeded) backend a `given` chain solves the union of what its strategies solve, at the cost of
the first phase's turns. Steps are copied into the chain's record with the chain's turn and a `phase`; a
`handoff` step between the phases records the tool phase's system prompt and task message (its worked example
is the standard one, `agent.demo` in the header says whether it was shown).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..protocol.native import CALL_PREFILL, tool_schemas
from ..sandbox import safefs
from ..sandbox.workspace import Workspace
from ..tools import restore_files
from ..tools.files import MAX_READ_BYTES
from ..traces.steps import Handoff, Phase
from ..types import Completion, GenParams, Task
from .asking import Asker, Request, ask_all
from .best_of_n import BestOfNEpisode
from .branch import BranchEpisode
from .episode import Ask, EpisodeState
from .react import AgentConfig, Episode, agent_tools
from .reflect import ReflectConfig, ReflectEpisode
from .scratch import is_test_file, test_files
from .search import SearchEpisode

if TYPE_CHECKING:
    from ..traces.model import Trace


@dataclass
class Chain(EpisodeState):
    task: Task
    ws: Workspace
    params: GenParams
    scenario: Any  # a Reflectable for reflect's opening; best-of-n's was built with its own
    reflect: ReflectConfig | None  # the reflect opening's settings; None when `opening` is given
    agent: AgentConfig
    temperature_schedule: list[float] | None = None
    sample: int = 0
    search: bool = False  # the tool agent's phase searches over verified candidates (reflect_search, ...)
    opening: BestOfNEpisode | None = None  # the first phase when it is not reflect (best_of_n_search, branch_search)
    current: ReflectEpisode | BestOfNEpisode | Episode = field(init=False)
    _offset: int = 0  # chain turns before the current phase
    _copied: int = 0  # steps of the current phase already in the chain's record

    def __post_init__(self) -> None:
        if self.opening is not None:
            self.current = self.opening
        else:
            assert self.reflect is not None, "a chain opens with reflect unless given its opening"
            self.current = ReflectEpisode(self.task, self.ws, self.params, self.scenario, self.reflect,
                                          self.agent.tool_options, sample=self.sample)
        self.system_prompt, self.user_prompt = self.current.system_prompt, self.current.user_prompt

    @property
    def phase(self) -> Phase:
        if isinstance(self.current, ReflectEpisode):
            return "reflect"
        if isinstance(self.current, BranchEpisode):
            return "branch"
        return "best_of_n" if isinstance(self.current, BestOfNEpisode) else "react"

    def run(self, ask: Ask) -> None:
        """The first phase; unless it passed, hand the workspace over and run the tool agent."""
        self.current.run(self._phase(ask))
        self._sync()
        if not self._passed():
            self._handoff()
            self.current.run(self._phase(ask))
            self._sync()
        self.exit_reason, self.final = self.current.exit_reason, self.current.final

    def annotate(self, trace: Trace) -> None:
        if self.opening is not None:
            self.opening.annotate(trace)  # its prompt's prefill and its sampling (agent.search)
        if self.reflect is not None:
            trace.agent.reflect = self.reflect.record()
        if self.search:
            opened = dict(trace.agent.search)
            SearchEpisode.record(trace, self.agent)
            if opened:
                trace.agent.search["best_of_n"] = opened
        if self.agent.protocol == "native":  # the react phase's tools, as it will send them
            trace.prompt.tools = tool_schemas(agent_tools(self.ws, self.agent))
        if self.agent.forced_calls:  # the react phase's turns begin with it
            trace.prompt.prefill = CALL_PREFILL

    def _passed(self) -> bool:
        """The first phase passed the visible tests (best-of-n always submits: `final` names the one that passed)."""
        if isinstance(self.current, BestOfNEpisode):
            return self.current.final is not None
        return self.current.exit_reason == "submitted"

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

    def _ended(self) -> str:
        if isinstance(self.current, BranchEpisode):
            return "branching found no program that passes the visible tests"
        if isinstance(self.current, BestOfNEpisode):
            return f"best-of-n found no program of {self.current.candidates} that passes the visible tests"
        return f"reflect ended ({self.current.exit_reason}) after {self.current.turn} attempt(s)"

    def _handoff(self) -> None:
        """Put the files back (or keep what the first phase left) and begin the tool agent's phase (its
        initial test run included)."""
        ended, task = self._ended(), self.task
        if self.agent.handoff == "kept":
            task = replace(self.task, files=self._kept())
            lost = restore_files(self.ws, test_files(self.task.files))
            where = "the files are kept as it left them (the tests put back)"
        else:
            lost = restore_files(self.ws, self.task.files)
            where = "the files are put back as given"
        self._offset, self._copied = self.turn, 0
        agent = SearchEpisode if self.search else Episode
        react = self.current = agent(task, self.ws, self.params, self.agent,
                                     temperature_schedule=self.temperature_schedule, sample=self.sample)
        react.begin()
        note = f"{ended}: {where} and the tool agent starts."
        self._add(Handoff(**self._at(), text=note + (f" Not restored: {'; '.join(lost)}." if lost else ""),
                          phase="react", system_prompt=react.system_prompt, task_message=react.user_prompt))
        self._sync()

    def _kept(self) -> dict[str, str]:
        """The task's files as the first phase left them; a test file, or one no longer a readable text file,
        as given."""
        kept = {}
        for rel, given in self.task.files.items():
            data = None if is_test_file(rel) else safefs.read_rel(self.ws.root, rel, MAX_READ_BYTES + 1)
            try:
                kept[rel] = given if data is None or len(data) > MAX_READ_BYTES else data.decode()
            except UnicodeDecodeError:
                kept[rel] = given
        return kept


ReflectThenReact = Chain  # the name of reflect_react's episode before best_of_n_search
