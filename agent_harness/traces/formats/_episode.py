"""One episode of another harness as a trace of this project's model, and the step records that let an
episode this project exported come back whole.

Importers fill an `Episode` from what a file states (every value type-checked and bounded here: the file
is hostile input) and `to_trace` makes the trace: validated by the trace model (`Trace`) and the checker
(`trace_check`) before anything writes it. A file our own export wrote carries the native header and, per
step, a record of the fields its format has no place for (`record` / `restore`): the trace comes back as
it was, with `source` added.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ...text import safe_text
from ..check import check_trace
from ..files import Unreadable
from ..model import SCHEMA_VERSION, Trace

MAX_TEXT = 1 << 20  # characters of one imported text field; the rest is cut, and the cut said in the text
MAX_STEPS = 50_000  # steps imported from one episode
MAX_DETAILS = 8192  # characters of JSON kept in `source.details`
MAX_COUNT = 10**12  # token counts and other numbers read from a file (as trace_check bounds them)
EXTRA_KEY = "agent_harness"  # where our exports keep what the format has no field for
MOVED = "moved"  # a record's list of the step fields its format holds in its own fields
DEFAULT_SCENARIO = "imported"
ExitStatus = dict[str, str]


# -- values read from a hostile file ---------------------------------------------------------------------
def text(value: Any, limit: int = MAX_TEXT) -> str:
    """A text field: a string, or the text parts of a content list (chat content parts); cut at `limit`."""
    if isinstance(value, list):
        parts = [p.get("text") or p.get("reasoning") or "" for p in value if isinstance(p, dict)]
        value = "\n".join(p for p in parts if isinstance(p, str) and p)
    if not isinstance(value, str):
        return ""
    value = safe_text(value)
    return value if len(value) <= limit else f"{value[:limit]}\n… [{len(value) - limit} more characters cut on import]"


def opt_text(value: Any, limit: int = MAX_TEXT) -> str | None:
    return text(value, limit) if isinstance(value, str | list) else None


def count(value: Any) -> int | None:
    """A non-negative integer within bounds (a float with an integer value counts); else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return None
    return int(value) if 0 <= value <= MAX_COUNT else None


def seconds(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value) if 0 <= value <= MAX_COUNT else None


def obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def bounded(value: Any, limit: int = MAX_DETAILS) -> Any:
    """`value` if its JSON is at most `limit` characters, else that JSON cut (a string)."""
    raw = json.dumps(value, ensure_ascii=False, default=str)
    return value if len(raw) <= limit else raw[:limit] + "…"


def arguments(value: Any) -> dict[str, Any]:
    """Tool-call arguments as an object: a JSON string is parsed (safely), anything else kept under "value"."""
    if isinstance(value, str):
        from ..jsontext import parse_json

        try:
            value = parse_json(value.encode("utf-8", "replace"))
        except Unreadable:
            return {"value": text(value)}
    return value if isinstance(value, dict) else {"value": value}


def call_text(tool: str | None, args: dict[str, Any] | None) -> str:
    """A tool_call step's text as this project writes it: the call as JSON."""
    return json.dumps({"tool": tool, "args": args}, ensure_ascii=False)


def tokens(prompt: Any, completion: Any, cached: Any = None) -> dict[str, int] | None:
    """A step's token counts from what a file states (keys left out when unknown; None when none is known)."""
    out = {k: v for k, v in (("prompt", count(prompt)), ("completion", count(completion)), ("cached", count(cached)))
           if v is not None}
    return out or None


# -- records of our own exports ---------------------------------------------------------------------------
def record(step: dict[str, Any], moved: tuple[str, ...]) -> dict[str, Any]:
    """What a format needs besides its own fields to give `step` back: every other field (no embedding: it is
    computed again on import), and the names of the fields it moved (`MOVED`)."""
    held = [k for k in moved if k in step]
    out = {k: v for k, v in step.items() if k not in held and k != "embedding"}
    out[MOVED] = held
    return out


def restore(rec: Any, values: dict[str, Any]) -> dict[str, Any] | None:
    """The step `record` made `rec` of, its moved fields taken from `values`; None if `rec` is not a record."""
    if not isinstance(rec, dict) or not isinstance(rec.get(MOVED), list) or not isinstance(rec.get("type"), str):
        return None
    step = {k: v for k, v in rec.items() if k != MOVED}
    for k in rec[MOVED]:
        if isinstance(k, str) and k in values:
            step[k] = values[k]
    return step


REPLY_TYPES = frozenset({"thought", "parse_error", "attempt", "tool_call", "final"})


def blocks(steps: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The steps grouped as other formats see an episode: ("reply", the steps of one model reply and the tool
    results it got) or ("event", one step the harness told the model: test runs, feedback, restarts)."""
    out: list[tuple[str, list[dict[str, Any]]]] = []
    for s in steps:
        cur = out[-1] if out and out[-1][0] == "reply" else None
        same = cur is not None and (cur[1][0].get("turn"), cur[1][0].get("phase")) == (s.get("turn"), s.get("phase"))
        kind = s.get("type")
        if kind in REPLY_TYPES:
            if cur is not None and same and s.get("raw") is None and not (kind in ("thought", "attempt") and any(
                    x.get("type") == kind for x in cur[1])):
                cur[1].append(s)
            else:
                out.append(("reply", [s]))
        elif kind == "tool_result" and cur is not None and same:
            cur[1].append(s)
        else:
            out.append(("event", [s]))
    return out


# -- the episode ----------------------------------------------------------------------------------------
@dataclass
class Episode:
    """One episode read from another format, in this project's terms (see the module docstring)."""

    fmt: str
    format_version: str | None
    harness: str
    task_id: str
    model: str
    backend: str = "imported"
    harness_version: str | None = None
    episode: int = 0
    system: str = ""
    task: str = ""
    demo: list[dict[str, Any]] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    passed: bool | None = None
    exit_reason: str | None = None
    final: str | None = None
    error: str | None = None
    elapsed: float = 0.0
    timestamp: str | None = None
    scenario: str | None = None
    label: str | None = None
    sample: int | None = None
    protocol: str | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    totals: dict[str, int] | None = None  # prompt, completion, cached token totals when the file states them
    score_details: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    native: dict[str, Any] | None = None  # the trace our own export carried (header, prompt extras, outcome)

    def add(self, kind: str, turn: int, **fields: Any) -> dict[str, Any]:
        """Append a step of type `kind` (fields that are None left out) and return it."""
        if len(self.steps) >= MAX_STEPS:
            raise Unreadable(f"more than {MAX_STEPS} steps in one episode")
        step = {"i": len(self.steps), "turn": turn, "type": kind, "text": fields.pop("text", "") or ""}
        step.update({k: v for k, v in fields.items() if v is not None})
        self.steps.append(step)
        return step


def _header(ep: Episode, source: dict[str, Any]) -> dict[str, Any]:
    native = ep.native or {}
    head = dict(obj(native.get("header")))
    if not head:
        head = {
            "run_id": f"{ep.fmt}-{source['sha256'][:16]}-{ep.episode}",
            "task_index": 0, "timestamp": ep.timestamp or "",
            "model": {"name": ep.model, "hf_id": None, "backend": ep.backend, "backend_requested": None,
                      "fallback_reason": None, "device": "unknown", "details": {}},
            "generation": {"max_tokens": 0, "temperature": 0.0, "top_p": 1.0, "stop": []},
            "sandbox": "none", "harness_version": ep.harness_version or "unknown",
            "agent": {"mode": "agent", "strategy": "react",
                      **({"protocol": ep.protocol} if ep.protocol in ("text", "native") else {})},
        }
    return head


def to_trace(ep: Episode, *, file: str, sha256: str, scenario: str | None, label: str | None,
             verdict: bool | None = None) -> dict[str, Any]:
    """The trace of `ep` (a JSON object, checked); Unreadable saying why when it cannot be one.

    `scenario` and `label` (from the command line) win over what the file says; `verdict`, from a verdicts
    file, over the file's own."""
    details = bounded({k: v for k, v in ep.details.items() if v is not None})
    details = details if isinstance(details, dict) else {"cut": details}
    if verdict is not None:
        details["verdict_from"] = "verdicts file"
    source: dict[str, Any] = {"format": ep.fmt, "format_version": ep.format_version, "file": file, "sha256": sha256,
              "episode": ep.episode, "harness": ep.harness, "harness_version": ep.harness_version,
              "details": details}
    head = _header(ep, source)
    native = ep.native or {}
    passed = ep.passed if verdict is None else verdict
    steps = ep.steps
    sums = ep.totals or {k: sum(count(obj(s.get("tokens")).get(k)) or 0 for s in steps)
                         for k in ("prompt", "completion", "cached")}
    outcome = dict(obj(native.get("outcome"))) or {
        "completed": True, "passed": passed, "compromised": None, "exit_reason": ep.exit_reason,
        "num_steps": len(steps), "num_turns": max((s["turn"] for s in steps), default=-1) + 1,
        "elapsed_seconds": ep.elapsed, "prompt_tokens": sums.get("prompt", 0),
        "cached_prompt_tokens": sums.get("cached", 0), "completion_tokens": sums.get("completion", 0),
        "error": ep.error, "final": ep.final, "test_output": None, "diff": None,
        **({"score_details": ep.score_details} if ep.score_details else {})}
    if verdict is not None:
        outcome["passed"] = verdict
    prompt = {"system": ep.system, "task": ep.task, "demo": ep.demo, **obj(native.get("prompt"))}
    if ep.tools and "tools" not in prompt:
        prompt["tools"] = ep.tools
    data = {**head, "schema_version": SCHEMA_VERSION, "scenario": scenario or head.get("scenario") or ep.scenario
            or DEFAULT_SCENARIO, "task_id": head.get("task_id") or ep.task_id,
            "label": label or head.get("label") or ep.label or "gold",
            "sample": head.get("sample", ep.sample or 0), "source": source, "prompt": prompt,
            "steps": steps, "embeddings": None, "outcome": outcome}
    if label or scenario:  # the command line names them: the file's own go
        data["scenario"], data["label"] = scenario or data["scenario"], label or data["label"]
    try:
        trace = Trace.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = "/".join(str(p) for p in first.get("loc", ()))
        raise Unreadable(f"not a trace of this project's model: {where}: {first.get('msg')}") from None
    return check_trace(trace.to_json())


def embed(trace: dict[str, Any], embedder: Any) -> None:
    """Put each step's embedding on `trace` (the run's embedder, see `embeddings.Embedder`)."""
    steps = trace["steps"]
    if embedder is None or not steps:
        return
    vectors = embedder.embed([safe_text(s.get("text") or "") for s in steps])
    for s, v in zip(steps, vectors, strict=True):
        s["embedding"] = v
    trace["embeddings"] = {"model": embedder.name, "dim": embedder.dim}
