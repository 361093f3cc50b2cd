"""The state every strategy's episode carries; the strategies (agent, reflect, single-shot) are step
functions over it: `prompt()`, `gen_params()`, `advance(completion)` until `done`."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from .types import Completion


@dataclass(kw_only=True)
class EpisodeState:
    """Steps so far, turns, token counters and how the episode ended (None while it runs)."""

    steps: list[dict[str, Any]] = field(default_factory=list)
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

    def _step(self, type_: str, text: str, **extra: Any) -> dict[str, Any]:
        step = {"i": len(self.steps), "turn": self.turn, "type": type_, "text": text, **extra}
        self.steps.append(step)
        return step

    def _count(self, c: Completion) -> None:
        """Add one reply's token counts to the episode's."""
        self.prompt_tokens += c.prompt_tokens or 0  # an unknown count adds nothing
        self.completion_tokens += c.completion_tokens or 0
        self.cached_tokens += c.cached_tokens or 0
