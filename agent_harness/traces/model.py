"""The episode trace, typed: header, steps and outcome. The one definition of the trace format.

The runner builds every trace through `Trace` and writes `Trace.to_json()`; ``trace_schema.json``
is generated from these models (``python -m agent_harness.traces.model > agent_harness/traces/trace_schema.json``,
and a test fails when the committed file differs); the loader's columns (`RUN_COLUMNS`, `STEP_COLUMNS`)
name the fields they read here, and the export's typed columns are fields of these models.

Schema versions: 1.1 added the "submit_check" step type, 1.2 cached prompt token counts, 1.3 the run
configuration fingerprint and files named by task id, 1.4 the "initial_tests" step (react's test run
before the first turn), 1.5 the "restart" step (react began the conversation again), 1.6 the reflect_react
strategy (steps carry their `phase`; a "handoff" step between the phases), 1.7 the calibrated single-shot
(strategy single_shot now asks as bigcode-evaluation-harness does: `agent.single_shot` names its prompt
recipe, `prompt.prefill` the assistant turn's start) and single_shot_chat, the earlier chat-style
single-shot (a single_shot trace before 1.7 is that one), 1.8 the native tool protocol (`agent.protocol`;
search's `candidate` steps), 1.9 best-of-n (a `candidate` step per program) and episodes imported from other
harnesses (`source`), 1.10 the branch strategy (a "doubts" step; `candidate` steps name their `branch`), which search's
`--search-branches` records alike.

Presence is deliberate: a field marked `OMIT_UNSET` is written only once it has been set (an outcome
gets `score_details` or `score_error` only from scoring, the agent block `reflect` only under that
strategy); every other field is always written, null included. Steps are the episodes' own records
(`steps.Step`: one model per step type), written as each records itself (`dump`).
"""

from __future__ import annotations

import json
import sys
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer
from pydantic.json_schema import GenerateJsonSchema
from typing_extensions import TypedDict  # pydantic needs this one before Python 3.12

from .steps import STEP_FIELDS as STEP_FIELDS  # re-exported: the loader's and checker's view of a step
from .steps import Step
from .steps import StepType as StepType

SchemaVersion = Literal["1.0", "1.1", "1.2", "1.3", "1.4", "1.5", "1.6", "1.7", "1.8", "1.9", "1.10"]
SCHEMA_VERSION: SchemaVersion = "1.10"
READABLE_VERSIONS: tuple[str, ...] = ("1.0", "1.1", "1.2", "1.3", "1.4", "1.5", "1.6", "1.7", "1.8", "1.9", "1.10")
NATIVE_HARNESS = "agent-harness"  # the `harness` of an episode this project ran (no `source`)
ExitReason = Literal["submitted", "max_steps", "budget", "context", "error"]
Mode = Literal["agent", "single_shot", "single_shot_chat", "reflect", "reflect_react", "search", "reflect_search",
               "best_of_n", "best_of_n_search", "branch", "branch_search"]
Strategy = Literal["react", "reflect", "single_shot", "single_shot_chat", "reflect_react", "search",
                   "reflect_search", "best_of_n", "best_of_n_search", "branch", "branch_search"]
Sandbox = Literal["bwrap", "docker", "rlimit", "none"]

OMIT_UNSET = "omit-unset"  # Annotated/Field metadata: the key is written only after the field was set


class _Part(BaseModel):
    """A trace object: key order as declared; `OMIT_UNSET` fields left out until set."""

    model_config = ConfigDict(extra="allow")

    @model_serializer(mode="wrap")
    def _present(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for name, info in type(self).model_fields.items():
            if OMIT_UNSET in info.metadata and name not in self.model_fields_set:
                data.pop(name, None)
        return data


def _omit_unset(**kw: Any) -> Any:
    """A field written only once set (see the module docstring); None until then unless `default_factory`."""
    f = Field(**kw) if "default_factory" in kw else Field(None, **kw)
    f.metadata.append(OMIT_UNSET)
    return f


# -- header --------------------------------------------------------------------------------------

class ModelInfo(_Part):
    name: str
    hf_id: str | None = None
    backend: str = Field(description="The backend actually used.")
    backend_requested: str | None = None
    fallback_reason: str | None = None
    device: str = "cpu"
    details: dict[str, Any] = Field(default_factory=dict)


class Generation(_Part):
    max_tokens: int
    temperature: float
    top_p: float
    stop: list[str]
    seed: int | None = None
    temperature_schedule: list[float] | None = None
    context_length: int | None = None


class Fingerprint(_Part):
    """Schema 1.3: the run configuration this episode ran under; --resume reuses a trace only when `hash` matches."""

    hash: str = Field(description="sha256 of `config` (canonical JSON).")
    run_hash: str = Field(description="sha256 of `config` without scenario, label, task and sample.")
    config: dict[str, Any] = Field(description="Registry entry, backend, mode, agent config, seed, harness version, "
                                               "scenario, label, task id and content digest, sample.")


class Source(_Part):
    """Schema 1.9: the episode was imported (`agent-harness import`) from another harness's trajectory file."""

    format: Literal["atif", "inspect", "mini-swe-agent"] = Field(description="The file's format.")
    format_version: str | None = Field(description="As the file states it (ATIF-v1.7, mini-swe-agent-1.1, "
                                                   "Inspect log version 2).")
    file: str = Field(description="The file, as a path below the folder (or as the file) `import` was given.")
    sha256: str = Field(description="sha256 of the file's bytes.")
    episode: int = Field(0, ge=0, description="Which episode of the file (an Inspect log holds many samples).")
    harness: str = Field(description="The agent system that ran the episode (ATIF agent.name, mini-swe-agent, "
                                     "inspect/<solver>); the analyses keep harnesses apart.")
    harness_version: str | None = None
    details: dict[str, Any] = Field(default_factory=dict, description="What the file said that has no field here "
                                    "(its exit status, cost, ids), bounded.")


class AgentInfo(_Part):
    """The strategy and its settings (pre-1.3 traces may hold only `mode`)."""

    mode: Mode = Field(description="The strategy's older name: react is 'agent'.")
    strategy: Strategy = "react"
    max_steps: int | None = None
    max_total_tokens: int | None = None
    max_wall_s: float | None = None
    tool_options: dict[str, Any] = Field(default_factory=dict)
    repeat_detection: bool | None = None
    format_reminder: bool | None = None
    loop_temperature: float | None = None
    demo: bool | None = None
    submit_checks: int | None = None
    concurrency: int | None = None
    history: str | None = None
    stale_notes: bool | None = None
    stale_temperature: float | None = None
    initial_tests: bool | None = _omit_unset(description="react: the visible tests ran before the "
                                             "first turn and the task message names the failing check.")
    initial_files: bool | None = _omit_unset(description="react: the task message shows the file(s) to fix as "
                                             "they were at the start (1.4).")
    restart_after: int | None = _omit_unset(description="react: after this many stale writes in a row the "
                                            "conversation began again from the task, the files as given (1.5).")
    protocol: Literal["text", "native"] | None = _omit_unset(
        description="How the tool agent calls tools (1.8): native, the chat template's or API's tool calls "
        "(`tools=`, `tool` messages); absent: text (THOUGHT / TOOL_CALL / FINAL).")
    tool_choice: Literal["auto", "required"] | None = _omit_unset(
        description="native protocol: required, every reply began as a call (prefilled) and the `submit` "
        "tool finished; absent: auto, a reply with no call was the final answer.")
    candidates: int | None = _omit_unset(description="search, best_of_n: candidate replies sampled at once per turn "
                                         "(absent: the default of the harness that wrote it).")
    search_temperature: float | None = _omit_unset(description="search: the sampling temperature of every candidate "
                                                   "but the first.")
    search_restart: bool | None = _omit_unset(description="search: false when it did not begin the conversation "
                                              "again after a stale write; absent: it did.")
    protect_tests: bool | None = _omit_unset(description="search: true when a write to one of the task's test "
                                             "files was refused (ranked last among candidates); absent: such a "
                                             "write was taken.")
    prefer_changes: bool | None = _omit_unset(description="search: true when a candidate that changed a file "
                                              "ranked above one that changed none at the same failing check; "
                                              "absent: the lower candidate number won.")
    tests_on_write: bool | None = _omit_unset(description="search: true when a write that changed a file showed "
                                              "the visible tests' result with its observation; absent: it did not.")
    action_space: Literal["tools", "edit", "bash"] | None = _omit_unset(
        description="The tool agent's tools: edit adds edit_file (replace one exact span), bash gives run_cmd "
        "alone; absent: tools (read_file, write_file, run_tests, ...).")
    demo_source: Literal["builtin", "task"] | None = _omit_unset(
        description="The worked example: task, a real bug-fix task other than the one at hand; absent: builtin.")
    search_branches: int | None = _omit_unset(description="search: programs branched at the model's doubts of a "
                                              "turn's best write when no candidate passed; absent: none.")
    spread_branches: bool | None = _omit_unset(description="search: true when search_branches branched a turn's "
                                               "best write not branched before and skipped doubts of layout alone "
                                               "(whitespace, escapes); absent: only the turn's best write, if new.")
    deeper_branches: bool | None = _omit_unset(description="search: true when a turn whose writes were all "
                                               "branched before branched the best one again at its doubts not "
                                               "branched yet; absent: such a turn branched nothing.")
    opening_candidates: int | None = _omit_unset(description="best_of_n_search: programs sampled at once in its "
                                                 "best-of-n phase; absent: 16.")
    handoff: Literal["given", "kept"] | None = _omit_unset(
        description="Chains: kept, the tool agent began from the files as the first phase left them (the tests put "
        "back); absent: given, the task's files put back.")
    search: dict[str, Any] = _omit_unset(default_factory=dict,
                                         description="search and best_of_n only: candidates, temperature, "
                                         "seeds and how candidates are ranked (best_of_n_search: its search "
                                         "phase's, and its best-of-n phase's under `best_of_n`).")
    reflect: dict[str, Any] = _omit_unset(default_factory=dict,
                                          description="reflect only: iters, temperatures, draft (chat or bigcode: "
                                          "how the first turn asks, 1.7; bigcode adds prompt and recipe).")
    single_shot: dict[str, Any] = _omit_unset(
        default_factory=dict, description="single_shot only (1.7): prompt 'bigcode' and the recipe of bigcode's "
        "--prompt it was rendered with (codeqwen, ...), or model_chat_template (the model's own template).")


class ChatTurn(TypedDict):
    __pydantic_config__ = ConfigDict(extra="allow")  # type: ignore[misc]
    role: str
    content: Any


class Prompt(_Part):
    system: str
    task: str
    demo: list[ChatTurn] = Field(default_factory=list,
                                 description="Worked-example chat turns shown before the task (demo.py).")
    prefill: str | None = _omit_unset(description="single_shot (1.7): the start of the assistant turn the model "
                                      "continued (the function's declaration); native with tool_choice required: "
                                      "the start of a call, prefilled on every turn.")
    tools: list[dict[str, Any]] = _omit_unset(
        default_factory=list, description="native protocol (1.8): the tools as sent (`tools=`, OpenAI function "
        "schemas), rendered by the chat template or the server; the text protocol lists them in `system`.")


class Embeddings(_Part):
    """The sentence-embedding model used for step embeddings."""

    model: str
    dim: int


class ScoreError(_Part):
    type: str
    message: str


class Outcome(_Part):
    completed: bool = Field(description="The episode finished and was scored.")
    passed: bool | None
    compromised: bool | None = None
    exit_reason: ExitReason | None
    num_steps: int
    num_turns: int = 0
    elapsed_seconds: float
    prompt_tokens: int = 0
    cached_prompt_tokens: int = Field(0, description="Prompt tokens the backend served from its cache (1.2).")
    completion_tokens: int = 0
    error: str | None
    final: str | None = None
    test_output: str | None = None
    diff: str | None = None
    score_details: dict[str, Any] = _omit_unset(default_factory=dict)
    score_error: ScoreError | None = _omit_unset(
        description="The scorer raised: no verdict; passed and compromised are null (unscored).")

    @classmethod
    def start(cls) -> Outcome:
        """The outcome of an episode that has not run yet."""
        return cls(completed=False, passed=None, compromised=None, exit_reason=None, num_steps=0, num_turns=0,
                   elapsed_seconds=0.0, prompt_tokens=0, cached_prompt_tokens=0, completion_tokens=0, error=None,
                   final=None, test_output=None, diff=None)

    def add_error(self, msg: str) -> None:
        self.error = f"{self.error}; {msg}" if self.error else msg


class Trace(_Part):
    """One episode of one model on one task: header, every step, outcome. Written atomically after every step."""

    model_config = ConfigDict(extra="forbid", title="agent-harness episode trace", json_schema_extra={
        "$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "agent-harness/trace/1.0"})

    schema_version: SchemaVersion
    run_id: str = Field(description="Unique id of this episode.")
    scenario: str
    task_id: str
    task_index: int = Field(0, ge=0)
    label: str = Field(description="gold, or an attack label of a security scenario.")
    sample: int = Field(ge=0)
    timestamp: str = Field(description="ISO 8601 UTC start time.")
    model: ModelInfo
    generation: Generation
    sandbox: Sandbox
    sandbox_bounds: dict[str, Any] = Field(default_factory=dict)
    harness_version: str
    fingerprint: Fingerprint | None = _omit_unset(description=Fingerprint.__doc__)
    source: Source | None = _omit_unset(description=Source.__doc__)
    agent: AgentInfo
    prompt: Prompt
    steps: list[Step]
    embeddings: Embeddings | None = Field(description="null when step embeddings were skipped.")
    outcome: Outcome

    def to_json(self) -> dict[str, Any]:
        """The JSON object to write. Steps go out as the episode recorded them (`Step.dump`: the given fields)."""
        data = self.model_dump(exclude={"steps"})
        return {name: ([s.dump() for s in self.steps] if name == "steps" else data[name])
                for name in type(self).model_fields if name == "steps" or name in data}


# -- the loader's columns (trace.load_traces) -----------------------------------------------------

class Column(NamedTuple):
    """A column of the loader's frames: the field it reads (a dotted path into `Trace`, or into a step's
    fields, `STEP_FIELDS`, for step columns; "" when the loader computes it) and its value when an older or
    partial trace lacks it."""

    field: str = ""
    default: Any = None


RUN_COLUMNS: dict[str, Column] = {
    "path": Column(), "run_id": Column("run_id"), "model": Column("model.name"), "backend": Column("model.backend"),
    "backend_requested": Column("model.backend_requested"), "fallback_reason": Column("model.fallback_reason"),
    "scenario": Column("scenario"), "label": Column("label"), "task_id": Column("task_id"),
    "task_index": Column("task_index"), "sample": Column("sample", 0), "mode": Column("agent.mode", "agent"),
    "protocol": Column("agent.protocol", "text"), "tool_choice": Column("agent.tool_choice", "auto"),
    "passed": Column("outcome.passed"), "compromised": Column("outcome.compromised"),
    "exit_reason": Column("outcome.exit_reason"), "num_steps": Column("outcome.num_steps"),  # default: len(steps)
    "num_turns": Column("outcome.num_turns"), "turns_used": Column(),
    "prompt_tokens": Column("outcome.prompt_tokens"), "cached_prompt_tokens": Column("outcome.cached_prompt_tokens"),
    "completion_tokens": Column("outcome.completion_tokens"), "elapsed_seconds": Column("outcome.elapsed_seconds"),
    "parse_errors": Column(), "tool_calls": Column(), "sandbox": Column("sandbox"),
    "embedding_model": Column("embeddings.model"), "error": Column("outcome.error"),
    "harness_version": Column("harness_version"), "timestamp": Column("timestamp"),
    "completed": Column("outcome.completed"), "fingerprint": Column("fingerprint.hash"),  # None before 1.3
    "suspicious": Column(),  # outcome.score_details.suspicious (a free dict's key): the scorer's reason, else None
    "harness": Column("source.harness", NATIVE_HARNESS),  # who ran the episode: this project, or an imported one's
    "source_format": Column("source.format"),  # None: a native trace
    "strategy": Column("agent.strategy"),  # None before 1.3 (the analyses read it from `mode` then)
    "settings": Column(),  # the agent's settings as canonical JSON: what tells two configurations of a strategy apart
}
STEP_KEYS = ("run_id", "model", "scenario", "label", "task_id", "sample", "passed")  # run columns on every step row
STEP_COLUMNS: dict[str, Column] = {
    "i": Column("i"), "turn": Column("turn"), "type": Column("type"), "tool": Column("tool"), "args": Column("args"),
    "text": Column("text", ""), "prompt_tokens": Column("tokens.prompt"),
    "completion_tokens": Column("tokens.completion"), "cached_tokens": Column("tokens.cached"),
    "latency_s": Column("latency_s"), "has_embedding": Column(),
    "file_sha": Column("file.sha"), "file_changed": Column("file.changed"), "repeat_of": Column("file.repeat_of"),
    "phase": Column("phase"),
}
# Fields without which the loader skips a trace (KeyError), however old: the rest may be missing.
LOADER_REQUIRED = frozenset({"run_id", "scenario", "label", "task_id", "model", "model.name", "model.backend",
                             "outcome", "steps", "i", "type"})


# -- the generated JSON schema ------------------------------------------------------------------

class _Schema(GenerateJsonSchema):
    """Plain JSON Schema: no generated titles."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def tagged_union_schema(self, schema: Any) -> dict[str, Any]:
        """A step's schema picked by its `type` (if/then), so that an error names the field at fault."""
        found = super().tagged_union_schema(schema)
        key, mapping = found["discriminator"]["propertyName"], found["discriminator"]["mapping"]
        return {"type": "object", "required": [key], "properties": {key: {"enum": list(mapping)}},
                "allOf": [{"if": {"required": [key], "properties": {key: {"const": tag}}}, "then": {"$ref": ref}}
                          for tag, ref in mapping.items()]}

    def generate(self, schema: Any, mode: Any = "validation") -> dict[str, Any]:
        out = super().generate(schema, mode)
        for sub in out.get("$defs", {}).values():
            sub.pop("title", None)
        out.pop("title", None)
        return {"$schema": out.pop("$schema"), "$id": out.pop("$id"), "title": Trace.model_config["title"], **out}


def json_schema() -> dict[str, Any]:
    """The trace's JSON Schema (what ``trace_schema.json`` holds)."""
    return Trace.model_json_schema(schema_generator=_Schema)


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(schema_text())
