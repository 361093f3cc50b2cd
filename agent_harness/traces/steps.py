"""The steps of an episode, typed: one model per step type, `type` the discriminator (`Step`).

The strategies build these and the trace writes them (`Step.dump`); ``trace_schema.json`` is generated
from them through `trace_model.Trace`. Each model declares exactly the fields its type carries, in the
order they are written. A field is written once it was given, except that a field which cannot be null
(`Absent`) is left out when given None: a step records what happened, nothing more (a test run's `tests`
only when the tests ran, `phase` only under reflect_react, `embedding` only once embedded).

The first step of a react turn (`thought`, else `final`, `tool_call` or `parse_error`) carries the
record of the model's reply (`Opening`: raw text, finish reason, tokens, temperature, elisions).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, Required, TypeVar, Union, cast, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from typing_extensions import TypedDict  # pydantic needs this one before Python 3.12

if TYPE_CHECKING:
    from ..types import Completion

StepType = Literal["thought", "tool_call", "tool_result", "final", "parse_error", "submit_check", "attempt",
                   "feedback", "initial_tests", "restart", "handoff", "candidate", "doubts"]
Phase = Literal["reflect", "best_of_n", "branch", "react"]
Role = Literal["assistant", "user"]
CheckResult = Literal["passed", "failed", "syntax", "signature", "no_code", "repeat", "write_error", "error"]
# search: what trying a candidate on a scratch copy found (see strategies/search.py)
Verdict = Literal["passed", "failed", "unchanged", "invalid", "refused", "fault", "not_tried", "unverified"]

ABSENT = "absent-when-none"  # field metadata: never null in a trace; None means the key is left out
T = TypeVar("T")
Absent = Annotated[T | None, ABSENT]


def _doc(text: str) -> Any:
    return Field(description=text)


# -- the parts of a step -------------------------------------------------------------------------

class StepTokens(TypedDict, total=False):
    prompt: int
    completion: int
    cached: Annotated[int, _doc("Prompt tokens not computed: vLLM prefix cache, transformers KV reuse, an "
                                "endpoint's cached_tokens (1.2).")]


class ElidedMessage(TypedDict):
    turn: int
    role: Role
    text: str


class FileVersion(TypedDict, total=False):
    __pydantic_config__ = ConfigDict(extra="allow")  # type: ignore[misc]
    path: Required[str]
    sha: Required[str]
    changed: Annotated[bool, _doc("write_file: whether the write changed the file.")]
    attempt: Annotated[int | None, _doc("write_file: the how-many-th version of this file that changed it.")]
    repeat_of: Annotated[int | None, _doc("write_file: turn of an earlier write of this version that failed.")]


class TestsResult(TypedDict, total=False):
    __pydantic_config__ = ConfigDict(extra="allow")  # type: ignore[misc]
    passed: Required[Any]
    at: Required[Any]


# -- fields shared by several step types (one annotation each) -----------------------------------

Raw = Annotated[Absent[str], _doc("Full model reply; on the first step of each turn.")]
FinishReason = Absent[str]
Latency = float | None
Tokens = StepTokens | None
Temperature = Annotated[Absent[float], _doc("The turn's sampling temperature (react: on its first step; reflect: "
                                            "on its attempt step).")]
Elided = Annotated[Absent[list[ElidedMessage]], _doc("Messages this turn's prompt showed condensed for the first "
                                                     "time (history: condensed).")]
Endpoint = Annotated[str | None, _doc("The server that answered (openai backend).")]


class ServerCall(TypedDict):
    name: str
    arguments: str
    id: str | None


ServerCalls = Annotated[Absent[list[ServerCall]], _doc("native protocol (1.8): the tool calls the server parsed out "
                                                       "of the reply (`tool_calls`), as it sent them.")]
Tool = str | None
CallId = Annotated[str | None, _doc("Links a tool_result to its tool_call.")]
Repairs = Absent[list[str]]
Tests = Annotated[Absent[TestsResult], _doc("run_tests results, submit checks and the initial test run.")]
StepPhase = Annotated[Absent[Phase], _doc("chains (reflect_react, reflect_search, best_of_n_search): the phase "
                                          "the step belongs to.")]
Embedding = list[float] | None
Seed = Annotated[int | None, _doc("The request's sampling seed (reflect: the attempt's; search: the candidate's).")]


class Reply(TypedDict, total=False):
    """The record of a model reply each strategy keeps on a step of its turn (the fields of that name)."""

    raw: str
    finish_reason: str
    latency_s: float | None
    tokens: StepTokens | None


class Opening(Reply, total=False):
    """react: the record of a reply on the first step of its turn, with the turn's sampling and condensing."""

    temperature: float
    elided: list[ElidedMessage]
    endpoint: str | None
    server_calls: list[ServerCall]


def reply_record(c: Completion) -> Reply:
    """What every strategy records of a reply: its text, why it ended, its latency and token counts."""
    return {"raw": c.text, "finish_reason": c.finish_reason, "latency_s": c.latency_s,
            "tokens": cast(StepTokens, c.token_counts())}  # the same keys, left out when unknown


def server_calls(c: Completion) -> list[ServerCall]:
    """The structured tool calls of a reply (native protocol, a server that parsed them), for its step."""
    return [{"name": t.name, "arguments": t.arguments, "id": t.id} for t in c.tool_calls]


class Place(TypedDict):
    """Where a step stands: its position in the episode's record and its turn."""

    i: int
    turn: int


# -- the step types ------------------------------------------------------------------------------

def _schema(schema: dict[str, Any], cls: Any) -> None:
    """A step's JSON Schema as the trace is written: `type` required, no defaults, `Absent` fields not null."""
    fields = cls.model_fields
    props = schema["properties"]
    for name, prop in props.items():
        prop.pop("default", None)
        if ABSENT in fields[name].metadata and "anyOf" in prop:
            [kept] = [o for o in prop.pop("anyOf") if o != {"type": "null"}]
            props[name] = {**kept, **prop}
    required = set(schema.get("required", ())) | {"type"}
    schema["required"] = [n for n in fields if n in required]


class _Step(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_schema)

    i: int = Field(ge=0)
    turn: int = Field(ge=0, description="Model turn this step belongs to (initial_tests and restart: the turn "
                                        "whose prompt showed it).")
    type: StepType
    text: str

    def dump(self) -> dict[str, Any]:
        """The step as the trace writes it: its given fields, in declared order (values as given)."""
        given = self.model_fields_set | {"type"}
        return {k: v for k, f in type(self).model_fields.items() if k in given
                for v in (getattr(self, k),) if v is not None or ABSENT not in f.metadata}


class _Opening(_Step):
    """A step that may open a react turn and so carry the reply's record (see `Opening`)."""

    raw: Raw = None
    finish_reason: FinishReason = None
    latency_s: Latency = None
    tokens: Tokens = None
    temperature: Temperature = None
    elided: Elided = None
    endpoint: Endpoint = None
    server_calls: ServerCalls = None
    phase: StepPhase = None
    embedding: Embedding = None


class Thought(_Opening):
    """The reasoning before a tool call or FINAL."""

    type: Literal["thought"] = "thought"


class ParseError(_Opening):
    """A reply the parser refused; `text` is the error shown to the model."""

    type: Literal["parse_error"] = "parse_error"


class Final(_Step):
    """The model's FINAL (react), or the single-shot answer (its program)."""

    type: Literal["final"] = "final"
    repairs: Repairs = None
    raw: Raw = None
    finish_reason: FinishReason = None
    latency_s: Latency = None
    tokens: Tokens = None
    temperature: Temperature = None
    elided: Elided = None
    endpoint: Endpoint = None
    server_calls: ServerCalls = None
    phase: StepPhase = None
    embedding: Embedding = None


class ToolCall(_Step):
    """A tool call as parsed; `text` is its JSON."""

    type: Literal["tool_call"] = "tool_call"
    tool: Tool = None
    args: dict[str, Any] | None = None
    call_id: CallId = None
    repairs: Repairs = None
    raw: Raw = None
    finish_reason: FinishReason = None
    latency_s: Latency = None
    tokens: Tokens = None
    temperature: Temperature = None
    elided: Elided = None
    endpoint: Endpoint = None
    server_calls: ServerCalls = None
    phase: StepPhase = None
    embedding: Embedding = None


class ToolResult(_Step):
    """A tool's observation, as shown to the model."""

    type: Literal["tool_result"] = "tool_result"
    tool: Tool = None
    call_id: CallId = None
    latency_s: Latency = None
    file: Annotated[Absent[FileVersion], _doc("read_file/write_file results: the file version shown or "
                                              "written.")] = None
    tests: Tests = None
    stale: Annotated[Absent[bool], _doc("A write that changed nothing or repeated a failed version, told so.")] = None
    phase: StepPhase = None
    embedding: Embedding = None


class SubmitCheck(_Step):
    """A FINAL refused while the visible tests fail (schema 1.1); `text` is the test output."""

    type: Literal["submit_check"] = "submit_check"
    tool: Tool = None
    note: Annotated[Absent[str], _doc("Text shown before a submit check's test output.")] = None
    tests: Tests = None
    phase: StepPhase = None
    embedding: Embedding = None


class InitialTests(_Step):
    """The visible tests run before the first turn (schema 1.4), or after a restart."""

    type: Literal["initial_tests"] = "initial_tests"
    tool: Tool = None
    tests: Tests = None
    phase: StepPhase = None
    embedding: Embedding = None


class Restart(_Step):
    """The conversation began again from the task, the files as given (schema 1.5)."""

    type: Literal["restart"] = "restart"
    phase: StepPhase = None
    embedding: Embedding = None


class Handoff(_Step):
    """reflect_react: reflect ended without a pass and the react phase begins (schema 1.6)."""

    type: Literal["handoff"] = "handoff"
    phase: StepPhase = None
    system_prompt: Annotated[Absent[str], _doc("handoff: the react phase's system prompt.")] = None
    task_message: Annotated[Absent[str], _doc("handoff: the react phase's task message.")] = None
    embedding: Embedding = None


class Attempt(_Step):
    """reflect: one reply; `text` is the code extracted from it ("" when none)."""

    type: Literal["attempt"] = "attempt"
    raw: Raw = None
    finish_reason: FinishReason = None
    latency_s: Latency = None
    tokens: Tokens = None
    temperature: Temperature = None
    seed: Seed = None
    phase: StepPhase = None
    embedding: Embedding = None


class Feedback(_Step):
    """reflect: what the checks or the visible test run found of the last attempt; `text` is told the model."""

    type: Literal["feedback"] = "feedback"
    check: Annotated[Absent[CheckResult], _doc("reflect feedback: what the checks or the visible test run "
                                               "found.")] = None
    tool: Tool = None
    output: Annotated[Absent[str], _doc("reflect feedback: the visible test run's output.")] = None
    phase: StepPhase = None
    embedding: Embedding = None


class BranchPoint(TypedDict):
    """branch: a token of the code the model was given that it would rather not have written there."""

    at: int  # where the token starts, in characters of the reply the model was given
    code: str  # the given code's token
    model: list[str]  # the tokens the model preferred there, best first (those branched at)
    margin: float  # log p(the model's best other token) - log p(the code's token)


class Doubts(_Step):
    """branch (1.10): the model's doubts of the code it was given, read by one scoring request (no text is
    generated): the most doubted tokens, most doubted first; `text` lists them. Each `candidate` step after it
    that branched names its doubt (`branch`). search with --search-branches (1.10): the same for a turn's best
    candidate's write, `at` counted in that candidate's reply."""

    type: Literal["doubts"] = "doubts"
    doubts: Annotated[Absent[list[BranchPoint]], _doc("branch: the doubted tokens, most doubted first.")] = None
    latency_s: Latency = None
    tokens: Tokens = None
    phase: StepPhase = None
    embedding: Embedding = None


class Candidate(_Step):
    """search: one of a turn's candidate replies and what trying it on a scratch copy of the workspace found
    (later in 1.8). `text` is its action: the call as JSON, the FINAL, or why it could not be used. The one
    chosen is continued from: its reply is recorded on the turn's next steps, as react records a reply, and
    the others' replies here (each model reply on exactly one step). best_of_n (1.9): one per sampled
    program, `text` the program; the chosen one's reply is on the `final` step. branch (1.10): the same, one
    per program it tried, `raw` the completion after the branch (the given code up to the doubt and the model's
    token there were its prefill). search with --search-branches: a branched reply is a candidate numbered after
    the sampled ones, with `branch`; its `raw` is the whole reply (the prefill with the completion)."""

    type: Literal["candidate"] = "candidate"
    candidate: Annotated[Absent[int], Field(ge=0), _doc("search: the candidate's position in its turn (0: sampled "
                                                        "as react samples, the others warmer).")] = None
    chosen: Annotated[Absent[bool], _doc("search: the turn continued from this candidate.")] = None
    verdict: Annotated[Absent[Verdict], _doc(
        "search: passed or failed (the visible tests on a scratch copy after its action), unchanged (its action "
        "changes no file: the tests as before it), invalid (no usable action), refused (it writes one of the task's "
        "test files, which search keeps as given), fault (trying it failed), not_tried "
        "(an earlier one passed), unverified (no visible tests).")] = None
    tool: Tool = None
    tests: Tests = None
    seed: Seed = None
    temperature: Temperature = None
    branch: Annotated[Absent[BranchPoint], _doc("branch (1.10): the doubt this program branched at: the given "
                                                 "code up to it, one of the model's tokens there (`model`: that "
                                                 "one alone), the rest completed greedily. Absent on candidate 0, "
                                                 "the greedy program. search: the doubt in the reply of the "
                                                 "`doubts` step before it.")] = None
    raw: Raw = None
    finish_reason: FinishReason = None
    latency_s: Latency = None
    tokens: Tokens = None
    phase: StepPhase = None
    embedding: Embedding = None


Step = Annotated[Thought | ToolCall | ToolResult | Final | ParseError | SubmitCheck | Attempt | Feedback
                 | InitialTests | Restart | Handoff | Candidate | Doubts, Field(discriminator="type")]
STEP_MODELS: tuple[type[_Step], ...] = get_args(get_args(Step)[0])
_STEPS: TypeAdapter[list[Step]] = TypeAdapter(list[Step])


def parse_steps(data: Any) -> list[Step]:
    """Steps read from a trace (JSON values), as models."""
    return _STEPS.validate_python(data)


# -- the union of the fields, for readers of any step (trace_check, export, the loader's columns) -------

def _as_written(f: Any) -> Any:
    """A field's type as a trace holds it: an `Absent` field is never null."""
    if ABSENT not in f.metadata:
        return f.annotation
    kept = [a for a in get_args(f.annotation) if a is not type(None)]
    return kept[0] if len(kept) == 1 else Union[tuple(kept)]  # noqa: UP007


def _step_fields() -> dict[str, tuple[Any, list[Any]]]:
    out: dict[str, tuple[Any, list[Any]]] = {}
    for model in STEP_MODELS:
        for name, f in model.model_fields.items():
            tp = StepType if name == "type" else _as_written(f)
            meta = [m for m in f.metadata if m != ABSENT]
            if out.setdefault(name, (tp, meta)) != (tp, meta):
                raise TypeError(f"step field {name!r} has two types: {out[name][0]} and {tp} ({model.__name__})")
    return out


STEP_FIELDS = _step_fields()  # name -> (type as written, constraints), over every step type
if {m.model_fields["type"].default for m in STEP_MODELS} != set(get_args(StepType)):
    raise TypeError("steps: StepType and the step models name different types")
