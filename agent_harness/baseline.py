"""The single-shot baseline as an episode: no tools, one completion, applied to the workspace.

It has the shape of `agent.Episode` (prompt, gen_params, advance, done, steps, ...), so the runner's
batched and streaming loops run it unchanged and its trace has the same form: one `final` step.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from .types import Completion, Conversation, GenParams, Task
from .workspace import Workspace

MIN_TOKENS = 768  # room for a whole function and a few words around it


@dataclass
class SingleShotEpisode:
    task: Task
    ws: Workspace
    params: GenParams
    scenario: Any  # a scenarios.SingleShot
    steps: list[dict[str, Any]] = field(default_factory=list)
    turn: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    exit_reason: str | None = None
    final: str | None = None
    started: float = field(default_factory=time.monotonic)
    demo: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.messages: Conversation = self.scenario.single_shot_prompt(self.task)
        self.system_prompt = next((m["content"] for m in self.messages if m["role"] == "system"), "")
        self.user_prompt = self.messages[-1]["content"]
        # No stop strings: the agent protocol's would cut a plain answer.
        self.params = GenParams(**{**asdict(self.params), "max_tokens": max(self.params.max_tokens, MIN_TOKENS),
                                   "stop": ()})

    @property
    def done(self) -> bool:
        return self.exit_reason is not None

    def prompt(self) -> Conversation:
        return list(self.messages)

    def gen_params(self) -> GenParams:
        return self.params

    def advance(self, c: Completion) -> list[dict[str, Any]]:
        self.scenario.apply_single_shot(self.task, self.ws, c.text)
        self.steps.append({"i": 0, "turn": 0, "type": "final", "text": c.text, "raw": c.text,
                           "finish_reason": c.finish_reason, "latency_s": c.latency_s,
                           "tokens": c.token_counts()})
        self.prompt_tokens, self.completion_tokens, self.cached_tokens = (c.prompt_tokens, c.completion_tokens,
                                                                          c.cached_tokens)
        self.turn, self.exit_reason = 1, "submitted"  # the answer is the step's text; no FINAL line
        return self.steps
