"""Reflect, then react: the reflect loop first; when it ends without a pass, the task's files are put
back and the tool agent starts as it would alone.

Each phase is its strategy's own episode, with its own turns, seeds and budgets, so the react phase
asks exactly what `--agent react` would: on a greedy (or batch-invariant seeded) backend the chain
solves the union of what the two strategies solve, at the cost of the reflect turns it spends first.
Steps are copied into the chain's record with the chain's turn and a `phase`; a `handoff` step
between the phases records the react phase's system prompt and task message (its worked example is
the standard one, `agent.demo` in the header says whether it was shown).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..episode import EpisodeState
from ..tools import restore_files
from ..types import Completion, Conversation, GenParams, Task
from ..workspace import Workspace
from .react import AgentConfig, Episode
from .reflect import Reflectable, ReflectConfig, ReflectEpisode

Phase = Literal["reflect", "react"]


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

    def prompt(self) -> Conversation:
        return self.current.prompt()

    def gen_params(self) -> GenParams:
        return self.current.gen_params()

    def advance(self, c: Completion) -> list[dict[str, Any]]:
        first = len(self.steps)
        self.current.advance(c)
        self._count(c)
        self.turn = self._offset + self.current.turn
        self._sync()
        if self.current.done:
            if self.phase == "reflect" and self.current.exit_reason != "submitted":
                self._handoff()
            else:
                self.exit_reason, self.final = self.current.exit_reason, self.current.final
        return self.steps[first:]

    def _sync(self) -> None:
        for s in self.current.steps[self._copied:]:
            self.steps.append({**s, "i": len(self.steps), "turn": s["turn"] + self._offset, "phase": self.phase})
        self._copied = len(self.current.steps)

    def _handoff(self) -> None:
        """Put the task's files back and start the react phase (its initial test run included)."""
        ended, attempts = self.current.exit_reason, self.current.turn
        lost = restore_files(self.ws, self.task.files)
        self._offset, self._copied = self.turn, 0
        self.current = Episode(self.task, self.ws, self.params, self.agent,
                               temperature_schedule=self.temperature_schedule, sample=self.sample)
        note = (f"reflect ended ({ended}) after {attempts} attempt(s): the files are put back as given and the "
                "tool agent starts.")
        self._step("handoff", note + (f" Not restored: {'; '.join(lost)}." if lost else ""), phase="react",
                   system_prompt=self.current.system_prompt, task_message=self.current.user_prompt)
        self._sync()
