"""The single-shot baselines as episodes: no tools, one completion, applied to the workspace.

- `SingleShotEpisode` (``--agent single-shot``, strategy ``single_shot``): calibrated to
  bigcode-evaluation-harness. The model gets bigcode's prompt for its family (the registry's
  `bigcode_prompt` recipe, rendered by the recipe's own chat template; without one, the same two
  messages through the model's template), continues the prefilled declaration, stops at bigcode's
  stop words, and the completion is post-processed as bigcode does (scenarios/bigcode_prompt.py).
- `ChatSingleShotEpisode` (``--agent single-shot-chat``, strategy ``single_shot_chat``): the earlier
  baseline, kept for continuity: a system message asks for the fixed function in a code block, which
  is extracted and applied. Traces of strategy ``single_shot`` before schema 1.7 were this one.

Each is one completion, as `run` reads top to bottom (`prompt`, `gen_params` and `advance` are its
parts, which the tests drive one at a time); the trace has the same form as the tool agents': one
`final` step.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..scenarios.bigcode_prompt import MODEL_TEMPLATE, STOP_WORDS, FixPrompt, chat_template
from ..traces.steps import Final, Step, reply_record
from ..types import Completion, Conversation, GenParams, RequestMeta, Task
from .episode import Ask, EpisodeState

if TYPE_CHECKING:
    from ..sandbox.workspace import Workspace
    from ..traces.model import Trace

MIN_TOKENS = 768  # room for a whole function and a few words around it


@runtime_checkable
class Calibrated(Protocol):
    """A scenario that can be asked as bigcode-evaluation-harness asks it (HumanEvalFix and its kin)."""

    def fix_prompt(self, task: Task) -> FixPrompt: ...

    def apply_program(self, task: Task, ws: Workspace, module: str) -> None: ...


def recipe_record(recipe: str | None) -> dict[str, Any]:
    """The trace's record of the prompt a bigcode-style request used."""
    return {"prompt": "bigcode", "recipe": recipe or MODEL_TEMPLATE}


def bigcode_params(params: GenParams, recipe: str | None) -> GenParams:
    """`params` for a bigcode-style request: its stop words, its recipe's template, room for a function."""
    return replace(params, max_tokens=max(params.max_tokens, MIN_TOKENS), stop=STOP_WORDS,
                   chat_template=chat_template(recipe))


@dataclass
class SingleShotEpisode(EpisodeState):
    task: Task
    ws: Workspace
    params: GenParams
    scenario: Calibrated
    recipe: str | None = None  # the model's `bigcode_prompt`; None: its own chat template

    def __post_init__(self) -> None:
        self.fix = self.scenario.fix_prompt(self.task)
        self.messages: Conversation = self.fix.conversation()
        self.system_prompt = ""
        self.user_prompt = self.fix.user
        self.prefill = self.fix.prefill
        self.params = bigcode_params(self.params, self.recipe)

    def record(self) -> dict[str, Any]:
        return recipe_record(self.recipe)

    def run(self, ask: Ask) -> None:
        """One completion of the prefilled declaration; its program goes into the workspace."""
        self.advance(ask(self.prompt(), self.gen_params(), RequestMeta(self.task, "single_shot", 0)))

    def annotate(self, trace: Trace) -> None:
        trace.agent.single_shot, trace.prompt.prefill = self.record(), self.prefill

    def prompt(self) -> Conversation:
        return list(self.messages)

    def gen_params(self) -> GenParams:
        return self.params

    def advance(self, c: Completion, prefix: str = "") -> list[Step]:
        """`c`'s program into the workspace (`prefix`: the text before the reply that its request prefilled)."""
        self.scenario.apply_program(self.task, self.ws, self.fix.module(prefix + c.text))
        self._add(Final(**self._at(), text=self.fix.program(prefix + c.text), **reply_record(c)))
        self._count(c)
        context_full = c.finish_reason == "length" and c.completion_tokens == 0
        self.turn, self.exit_reason = 1, "context" if context_full else "submitted"
        return self.steps


@dataclass
class ChatSingleShotEpisode(EpisodeState):
    task: Task
    ws: Workspace
    params: GenParams
    scenario: Any  # a scenarios.SingleShot

    def __post_init__(self) -> None:
        self.messages: Conversation = self.scenario.single_shot_prompt(self.task)
        self.system_prompt = next((m["content"] for m in self.messages if m["role"] == "system"), "")
        self.user_prompt = self.messages[-1]["content"]
        # No stop strings: the agent protocol's would cut a plain answer.
        self.params = replace(self.params, max_tokens=max(self.params.max_tokens, MIN_TOKENS), stop=())

    def run(self, ask: Ask) -> None:
        """One chat answer; its code goes into the workspace."""
        self.advance(ask(self.prompt(), self.gen_params(), RequestMeta(self.task, "single_shot_chat", 0)))

    def prompt(self) -> Conversation:
        return list(self.messages)

    def gen_params(self) -> GenParams:
        return self.params

    def advance(self, c: Completion) -> list[Step]:
        self.scenario.apply_single_shot(self.task, self.ws, c.text)
        self._add(Final(**self._at(), text=c.text, **reply_record(c)))
        self._count(c)
        self.turn, self.exit_reason = 1, "submitted"  # the answer is the step's text; no FINAL line
        return self.steps
