"""The state every strategy's episode carries. Each strategy is a plain loop over it, `run(ask)`: ask the
model (`Ask`, the runner's way to the backend), take the reply, until `done`."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..traces.steps import Place, Step
from ..types import Completion, Conversation, GenParams, RequestMeta

if TYPE_CHECKING:
    from ..traces.model import Trace

S = TypeVar("S", bound=Step)


class Ask(Protocol):
    """The model, as a strategy sees it: one conversation in, one reply out (the runner batches)."""

    def __call__(self, conversation: Conversation, params: GenParams, meta: RequestMeta) -> Completion: ...


@dataclass(kw_only=True)
class EpisodeState:
    """Steps so far, turns, token counters and how the episode ended (None while it runs)."""

    steps: list[Step] = field(default_factory=list)
    turn: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    exit_reason: str | None = None
    final: str | None = None
    started: float = field(default_factory=time.monotonic)
    demo: list[Any] = field(default_factory=list)  # earlier chat turns shown before the task (the agent's demo)

    @property
    def done(self) -> bool:
        return self.exit_reason is not None

    def run(self, ask: Ask) -> None:
        """Work on the task until done (each strategy's loop)."""
        raise NotImplementedError

    def annotate(self, trace: Trace) -> None:
        """Add the strategy's own records to the trace header (nothing by default)."""

    def _at(self) -> Place:
        """Where the next step stands: the next position in the record, the current turn."""
        return {"i": len(self.steps), "turn": self.turn}

    def _add(self, step: S) -> S:
        self.steps.append(step)
        return step

    def _count(self, c: Completion) -> None:
        """Add one reply's token counts to the episode's."""
        self.prompt_tokens += c.prompt_tokens or 0  # an unknown count adds nothing
        self.completion_tokens += c.completion_tokens or 0
        self.cached_tokens += c.cached_tokens or 0
