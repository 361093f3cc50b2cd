"""The typed trace model is the one definition: the committed JSON Schema is generated from it, and the
traces the runner writes (stored golden ones) and older schema versions fit it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent_harness.traces.model import STEP_FIELDS, Outcome, Trace, schema_text
from agent_harness.traces.store import SCHEMA_PATH, validate_trace

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = sorted((Path(__file__).parent / "data" / "golden_traces").rglob("run_*.json"))
OLD = sorted((Path(__file__).parent / "data" / "old_traces").rglob("run_*.json"))


def _unmask(obj: Any, key: str = "") -> Any:
    """A stored golden trace with its masked volatile values replaced by values of the right type."""
    if isinstance(obj, dict):
        return {k: _unmask(v, k) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_unmask(v) for v in obj]
    if obj == "<masked>":
        return 1.5 if key in ("latency_s", "elapsed_seconds", "duration_s") else f"{key}-value"
    return obj


def test_committed_schema_is_the_generated_one() -> None:
    assert SCHEMA_PATH.read_text(encoding="utf-8") == schema_text(), (
        "trace_schema.json is stale: python -m agent_harness.traces.model > agent_harness/traces/trace_schema.json")


def test_the_generator_entry_point_prints_the_schema() -> None:
    r = subprocess.run([sys.executable, "-m", "agent_harness.traces.model"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120, check=True)
    assert r.stdout == schema_text() and json.loads(r.stdout)["title"] == "agent-harness episode trace"


@pytest.mark.parametrize("path", GOLDEN + OLD, ids=lambda p: "/".join(p.parts[-6:]))
def test_written_traces_round_trip_through_the_model(path: Path) -> None:
    """Stored traces (golden, and older commits' as written) validate, and load into the typed steps and out
    again unchanged: the same keys, in the same order, with the same values."""
    data = _unmask(json.loads(path.read_text()))
    assert validate_trace(data) == []
    ordered = path in OLD  # golden copies are stored with sorted keys; the old ones as they were written
    assert json.dumps(Trace.model_validate(data).to_json(), sort_keys=not ordered) == \
        json.dumps(data, sort_keys=not ordered)


def test_golden_traces_cover_every_strategy() -> None:
    modes = {json.loads(p.read_text())["agent"]["mode"] for p in GOLDEN}
    assert modes == {"agent", "reflect", "single_shot", "single_shot_chat", "reflect_react", "search", "reflect_search",
                     "best_of_n", "best_of_n_search", "branch", "branch_search"}


def test_older_schema_versions_fit_the_model_and_the_schema() -> None:
    """A 1.0-style trace: no fingerprint, task index, bounds, cached tokens or agent settings beyond the mode."""
    old = {
        "schema_version": "1.0", "run_id": "r", "scenario": "humanevalfix", "task_id": "Python/0", "label": "gold",
        "sample": 0, "timestamp": "2025-01-01T00:00:00+00:00", "model": {"name": "m", "backend": "hf"},
        "generation": {"max_tokens": 8, "temperature": 0.0, "top_p": 1.0, "stop": []}, "sandbox": "rlimit",
        "harness_version": "0.1.0", "agent": {"mode": "agent"}, "prompt": {"system": "s", "task": "t"},
        "steps": [{"i": 0, "turn": 0, "type": "thought", "text": "x"}], "embeddings": None,
        "outcome": {"completed": True, "passed": False, "exit_reason": "max_steps", "num_steps": 1,
                    "elapsed_seconds": 1.0, "error": None},
    }
    assert validate_trace(old) == []
    trace = Trace.model_validate(old)
    assert trace.fingerprint is None and "fingerprint" not in trace.to_json()
    assert trace.outcome.cached_prompt_tokens == 0 and trace.agent.strategy == "react"


def test_unknown_keys_and_bad_values_break_the_schema() -> None:
    [path, *_] = GOLDEN
    data = _unmask(json.loads(path.read_text()))
    assert validate_trace({**data, "surprise": 1}) != []
    data["steps"][0]["surprise"] = 1
    assert any(e.startswith("steps/0: Additional properties") and "'surprise'" in e for e in validate_trace(data))
    data["steps"][0].pop("surprise")
    data["outcome"]["exit_reason"] = "bored"
    assert any(e.startswith("outcome/exit_reason") for e in validate_trace(data))


def test_scoring_fields_are_written_only_once_set() -> None:
    out = Outcome.start()
    assert "score_details" not in out.model_dump() and "score_error" not in out.model_dump()
    out.score_details = {}
    dumped = out.model_dump()
    assert dumped["score_details"] == {} and "score_error" not in dumped
    assert list(dumped)[:3] == ["completed", "passed", "compromised"]  # declared order, as written before


def _has_field(model: Any, path: str) -> bool:
    """Whether the dotted `path` names a field of a pydantic model or TypedDict (through optional parts); a
    path into a step names a field of some step type (`STEP_FIELDS`)."""
    import types
    import typing

    for key in path.split("."):
        hints = {k: t for k, (t, _) in STEP_FIELDS.items()} if model is STEP_FIELDS else \
            typing.get_type_hints(model, include_extras=False)
        if key not in hints:
            return False
        model = hints[key]
        while typing.get_origin(model) in (typing.Union, types.UnionType):
            model = next(a for a in typing.get_args(model) if a is not type(None))
    return True


def test_loader_columns_read_fields_of_the_model() -> None:
    from agent_harness.traces.model import LOADER_REQUIRED, STEP_KEYS
    from agent_harness.traces.model import RUN_COLUMNS as RUN_SPEC
    from agent_harness.traces.model import STEP_COLUMNS as STEP_SPEC
    from agent_harness.traces.store import RUN_COLUMNS, STEP_COLUMNS

    assert list(RUN_SPEC) == RUN_COLUMNS and [*STEP_KEYS, *STEP_SPEC] == STEP_COLUMNS
    for name, col in RUN_SPEC.items():
        assert not col.field or _has_field(Trace, col.field), name
    for name, col in STEP_SPEC.items():
        assert not col.field or _has_field(STEP_FIELDS, col.field), name
    assert all(_has_field(Trace, f) or _has_field(STEP_FIELDS, f) for f in LOADER_REQUIRED)
    assert not _has_field(Trace, "outcome.nonsense") and not _has_field(STEP_FIELDS, "tokens.nonsense")


def test_export_leaves_only_named_model_fields_untyped() -> None:
    from agent_harness.traces.formats import hf as export

    assert set(export.UNTYPED_HEADER) <= set(Trace.model_fields)
    assert set(export.UNTYPED_OUTCOME) <= set(Outcome.model_fields)
    assert set(export.UNTYPED_STEP) <= set(STEP_FIELDS)
    row = export.step_row({"i": 0, "turn": 0, "type": "thought", "text": "x", "seed": 3})
    assert json.loads(row["extra"]) == {"seed": 3} and row["text"] == "x"


def test_embeddings_go_to_the_trace_not_into_the_episodes_steps(tmp_path: Path) -> None:
    """The trace holds copies of the steps: the embedder's vectors never land in the episode's own records."""
    from agent_harness.backends.scripted import ScriptedBackend
    from agent_harness.registry import ModelSpec
    from agent_harness.run.header import Live
    from agent_harness.run.runner import ModelRun, RunConfig, model_jobs, plan_jobs

    class Lengths:
        name, dim = "lengths", 2

        def embed(self, texts: list[str]) -> list[list[float]]:
            return [[float(len(t)), 1.0] for t in texts]

    class Keeping(ModelRun):
        def _finish(self, live: Live) -> Trace:
            trace = super()._finish(live)
            episodes.append(live.episode.steps)
            return trace

    spec = ModelSpec(name="oracle", backend="scripted", script="oracle")
    cfg = RunConfig(models=[spec], out=tmp_path / "t", n=2, concurrency=2, embed=False, strategy="react")
    [(_, _, planned)] = list(plan_jobs(cfg))
    jobs = model_jobs(cfg, spec, planned)
    backend = ScriptedBackend("oracle")
    episodes: list[list[dict[str, Any]]] = []
    done: list[Trace] = []
    Keeping(cfg, spec, backend, Lengths(), done.append).run(jobs)
    assert len(done) == 2 and all(t.outcome.passed for t in done)
    assert all(steps and not any("embedding" in s for s in steps) for steps in episodes)
    for j in jobs:
        data = json.loads(j.path.read_text())
        assert data["embeddings"] == {"model": "lengths", "dim": 2} and validate_trace(data) == []
        assert [s["embedding"] for s in data["steps"]] == [[float(len(s["text"])), 1.0] for s in data["steps"]]


def test_each_step_type_takes_only_its_own_fields() -> None:
    """One model per step type: a field of another type is refused (schema and model), and the error names
    the step and the field rather than the whole union."""
    from pydantic import ValidationError

    from agent_harness.traces.steps import STEP_MODELS, parse_steps

    path = next(p for p in GOLDEN if "/react/oracle/" in p.as_posix())
    data = _unmask(json.loads(path.read_text()))
    n = next(i for i, s in enumerate(data["steps"]) if s["type"] == "tool_result")
    data["steps"][n]["raw"] = "a reply's text on a tool result"
    [error] = validate_trace(data)
    assert error.startswith(f"steps/{n}: Additional properties are not allowed ('raw' was unexpected)")
    with pytest.raises(ValidationError, match="tool_result.raw"):
        parse_steps(data["steps"])
    data["steps"][n].pop("raw")
    data["steps"][n]["type"] = "tool_call"  # a tool_call carries no file version
    assert any("'file' was unexpected" in e for e in validate_trace(data))
    data["steps"][n]["type"] = "bored"
    assert any(e.startswith(f"steps/{n}/type: 'bored' is not one of") for e in validate_trace(data))
    del data["steps"][n]["type"]
    assert validate_trace(data) == [f"steps/{n}: 'type' is a required property"]
    schema = json.loads(schema_text())
    for model in STEP_MODELS:  # the schema is the models': exactly their fields, `type` always required
        sub = schema["$defs"][model.__name__]
        assert list(sub["properties"]) == list(model.model_fields), model
        assert sub["required"] == ["i", "turn", "type", "text"] and sub["additionalProperties"] is False


def test_a_step_writes_what_it_was_given() -> None:
    """Unset fields stay out of the trace; a field that cannot be null is left out when given None (a test
    run that did not run), one that can is written as null (feedback without a test run has tool null)."""
    from agent_harness.traces.steps import Feedback, ToolResult

    result = ToolResult(i=3, turn=1, text="Wrote a.py", tool="write_file", call_id="call_1", latency_s=0.5,
                        file={"path": "a.py", "sha": "0" * 12}, tests=None, stale=None)
    assert result.dump() == {"i": 3, "turn": 1, "type": "tool_result", "text": "Wrote a.py", "tool": "write_file",
                             "call_id": "call_1", "latency_s": 0.5, "file": {"path": "a.py", "sha": "0" * 12}}
    feedback = Feedback(i=0, turn=0, text="Your reply has no code.", check="no_code", tool=None, output=None)
    assert feedback.dump() == {"i": 0, "turn": 0, "type": "feedback", "text": "Your reply has no code.",
                               "check": "no_code", "tool": None}
    copied = feedback.model_copy(update={"i": 5, "turn": 2, "phase": "reflect", "embedding": [0.5]})
    assert list(copied.dump())[-2:] == ["phase", "embedding"] and "phase" not in feedback.dump()
