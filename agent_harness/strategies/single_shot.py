"""The single-shot baseline as an episode: no tools, one completion, applied to the workspace.

A step function over `EpisodeState` like `agent.Episode` and `reflect.ReflectEpisode`, so the runner's
batched and streaming loops run it unchanged and its trace has the same form: one `final` step.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..episode import EpisodeState
from ..types import Completion, Conversation, GenParams, Task
from ..workspace import Workspace

MIN_TOKENS = 768  # room for a whole function and a few words around it


@dataclass
class SingleShotEpisode(EpisodeState):
    task: Task
    ws: Workspace
    params: GenParams
    scenario: Any  # a scenarios.SingleShot

    def __post_init__(self) -> None:
        self.messages: Conversation = self.scenario.single_shot_prompt(self.task)
        self.system_prompt = next((m["content"] for m in self.messages if m["role"] == "system"), "")
        self.user_prompt = self.messages[-1]["content"]
        # No stop strings: the agent protocol's would cut a plain answer.
        self.params = GenParams(**{**asdict(self.params), "max_tokens": max(self.params.max_tokens, MIN_TOKENS),
                                   "stop": ()})

    def prompt(self) -> Conversation:
        return list(self.messages)

    def gen_params(self) -> GenParams:
        return self.params

    def advance(self, c: Completion) -> list[dict[str, Any]]:
        self.scenario.apply_single_shot(self.task, self.ws, c.text)
        self._step("final", c.text, raw=c.text, finish_reason=c.finish_reason, latency_s=c.latency_s,
                   tokens=c.token_counts())
        self._count(c)
        self.turn, self.exit_reason = 1, "submitted"  # the answer is the step's text; no FINAL line
        return self.steps
