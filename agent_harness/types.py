"""Core value types shared by backends, tools, the agent loop and traces.

These are plain dataclasses so that every module can import them without pulling in
heavy dependencies.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, Required, TypedDict, runtime_checkable


class NativeCallDict(TypedDict):
    """A tool call inside an assistant message, in the OpenAI shape every chat template reads."""

    id: str
    type: Literal["function"]
    function: dict[str, Any]  # {"name": str, "arguments": dict (templates) or JSON text (OpenAI API)}


class Message(TypedDict, total=False):
    """One chat message, as every chat template and OpenAI-style API understands it.

    The native tool protocol adds `tool_calls` to an assistant message and the `tool` role, whose
    message answers the call named by `tool_call_id`.
    """

    role: Required[Literal["system", "user", "assistant", "tool"]]
    content: Required[str]
    tool_calls: list[NativeCallDict]
    tool_call_id: str


Conversation = list[Message]


def request_seed(run_seed: int, task_id: str, sample: int, turn: int) -> int:
    """The sampling seed of one request: a function of (run seed, task id, sample, turn) only.

    Nothing about the batch a request lands in (its batch-mates, its row, the backend's request
    key) enters, so a sampled episode draws the same tokens however the run is scheduled.
    """
    key = f"{run_seed}\0{task_id}\0{sample}\0{turn}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:4], "big") & 0x7FFFFFFF


def row_seeds(params: GenParams, n: int, seeds: Sequence[int | None] | None) -> list[int | None]:
    """Per-row seeds of a batch: `seeds` when given (one per row), else `params.seed + row` (or None)."""
    if seeds is not None:
        if len(seeds) != n:
            raise ValueError(f"{len(seeds)} seeds for {n} conversations")
        return list(seeds)
    return [None if params.seed is None else params.seed + i for i in range(n)]


@dataclass(frozen=True)
class GenParams:
    """Sampling parameters for one `generate` call (shared by the whole batch).

    `seed` is the seed of one request (`request_seed`); a batch gives each row its own through
    `generate(..., seeds=...)`. `chat_template`: a Jinja template that renders these requests instead
    of the model's own (the calibrated single-shot's bigcode recipe); None: the model's. `tools`: the
    native protocol's tools, rendered by the chat template (local backends, token-id mode) or sent as
    the API's `tools` (chat mode); empty for the text protocol. `prompt_logprobs` > 0 makes the request a
    scoring one: nothing is generated, and the reply's `scores` hold each token of the conversation's last
    (assistant) message with that many of the tokens the model would rather have put there (vLLM's name).
    """

    max_tokens: int = 512
    temperature: float = 0.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    chat_template: str | None = None
    tools: tuple[ToolSpec, ...] = ()  # native protocol: the tools the template (or server) is given, as `tools=`
    prompt_logprobs: int = 0  # > 0: score the prefilled reply instead of continuing it (`Completion.scores`)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


FinishReason = Literal["stop", "length", "error"]


@dataclass(frozen=True)
class TokenScore:
    """One token of a prefilled reply as the model scored it (`GenParams.prompt_logprobs`): where its text
    starts in the message's content, the text, its log-probability, and the other tokens the model ranked
    highest at that place, best first, as (text, log-probability)."""

    start: int
    text: str
    logprob: float
    others: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class NativeCall:
    """A structured tool call as an OpenAI-compatible server returns it (`Completion.tool_calls`)."""

    name: str
    arguments: str  # JSON text, as the API sends it (not checked: the native parser reads it)
    id: str | None = None


@dataclass
class Completion:
    """The model's reply to one conversation."""

    text: str
    prompt_tokens: int | None  # None: unknown (a server's usage record missing or not sane)
    completion_tokens: int | None
    finish_reason: FinishReason
    latency_s: float
    cached_tokens: int | None = 0  # prompt tokens served from a cache (vLLM prefix cache, transformers KV reuse)
    endpoint: str | None = None  # the server that answered (openai backend with several base URLs)
    error: str | None = None  # no usable reply (a server's bad reply, one line): the episode ends with it
    tool_calls: tuple[NativeCall, ...] = ()  # structured calls a server parsed out of the reply (native protocol)
    scores: tuple[TokenScore, ...] = ()  # a scoring request's reply (`GenParams.prompt_logprobs`); else empty

    def token_counts(self) -> dict[str, int]:
        """The trace step's ``tokens`` record; an unknown count is left out."""
        counts = {"prompt": self.prompt_tokens, "completion": self.completion_tokens, "cached": self.cached_tokens}
        return {k: v for k, v in counts.items() if v is not None}


@dataclass
class BackendInfo:
    """What was asked for and what actually runs; recorded in every trace header."""

    requested: str
    used: str
    fallback_reason: str | None = None
    device: str = "cpu"
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RequestMeta:
    """Who sends a request: the episode's task, strategy and turn (0 for its first reply).

    Backends that run a model ignore it; the scripted backend answers by it (the oracle replays the
    task's reference calls), so it never has to recognise a task from the prompt's text.
    """

    task: Task
    strategy: str = "react"  # react | reflect | single_shot | single_shot_chat | search | best_of_n | branch
    turn: int = 0
    candidate: int = 0  # search, best_of_n, branch: which of the turn's candidates (scripted replies may differ by it)


@runtime_checkable
class Backend(Protocol):
    """Completes one conversation; concurrent calls are batched inside the backend.

    Implementations: transformers (a queue that gathers concurrent requests into one batched
    generate), vllm (vLLM's `AsyncLLM` engine in this process), openai (an async client over an
    endpoint pool), scripted. `params.seed` is this request's own seed
    (`request_seed`): a sampled reply never depends on which requests share its batch. A
    conversation that ends with an assistant message is continued (a prefilled turn). `meta` says
    which episode asks; only scripted models use it. `close` frees the model; it is called once, from
    the thread that created the backend, after the last `complete` has returned.
    """

    info: BackendInfo

    async def complete(self, conversation: Conversation, params: GenParams,
                       meta: RequestMeta | None = None) -> Completion: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class ToolParam:
    """One argument of a tool: its name, JSON type and a short description."""

    name: str
    type: Literal["string", "array", "integer", "boolean", "object", "string|array"]
    doc: str
    required: bool = True


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the model sees it; the system prompt is rendered from these."""

    name: str
    doc: str
    params: tuple[ToolParam, ...] = ()

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params if p.required)

    def signature(self) -> str:
        # "string|array" shows as string: the form small models get right; arrays are accepted too.
        args = ", ".join(f"{p.name}: {p.type.split('|')[0]}" + ("" if p.required else "?") for p in self.params)
        return f"{self.name}({args})"


@dataclass
class CmdResult:
    """Result of one sandboxed command."""

    returncode: int
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    killed_reason: str | None = None  # e.g. "timeout", "cpu", "memory", "output"
    sandbox: str = "bwrap"  # "bwrap" or "rlimit"

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


@dataclass
class Task:
    """One task of a scenario: the files placed in the workspace and how it is judged.

    `oracle` is the list of tool calls (``{"tool": ..., "args": {...}}``) that solves the task;
    the scripted `oracle` backend replays it through the normal text protocol.
    """

    id: str
    scenario: str
    statement: str
    files: dict[str, str]
    label: str = "gold"
    test_cmd: list[str] | None = None
    oracle: list[dict[str, Any]] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    # The file(s) to fix, shown in the agent's task message when AgentConfig.initial_files is on. Not in
    # the task digest: that switch is in the fingerprint, and the focus follows from the files.
    focus: list[str] = field(default_factory=list)


@dataclass
class ScoreResult:
    """Outcome of scoring an episode's final workspace, independent of what the agent claims."""

    passed: bool
    output: str = ""
    compromised: bool | None = None  # None: the scenario does not check for compromise
    details: dict[str, Any] = field(default_factory=dict)

