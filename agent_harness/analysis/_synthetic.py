"""Synthetic episode traces shaped exactly like the runner's (`run_trace.new_trace` + `ModelRun._finish`).

Used by the tests and by `bench/load_traces.py`; every trace validates against `trace_schema.json`.
Step embeddings are unit vectors; `direction`/`spread` control how concentrated a trajectory is.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..sandbox.safewrite import write_file
from ..traces.store import SCHEMA_VERSION, task_slug, trace_path

EMBEDDING_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
TOOLS = ("read_file", "write_file", "run_tests", "list_dir")


def header(model: str, scenario: str, label: str, task_id: str, task_index: int, sample: int = 0,
           backend: str = "scripted", protocol: str = "text") -> dict[str, Any]:
    """The trace a fresh episode starts with (mirrors `run_trace.new_trace`); `agent.protocol` is written
    only for the native protocol (absent means text)."""
    trace: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "run_id": uuid.uuid4().hex,
        "scenario": scenario,
        "task_id": task_id,
        "task_index": task_index,
        "label": label,
        "sample": sample,
        "timestamp": "2026-11-22T12:00:00+00:00",
        "model": {"name": model, "hf_id": None, "backend": backend, "backend_requested": backend,
                  "fallback_reason": None, "device": "cpu", "details": {}},
        "generation": {"max_tokens": 512, "temperature": 0.0, "top_p": 1.0, "stop": [], "seed": sample,
                       "temperature_schedule": None, "context_length": 8192},
        "sandbox": "rlimit",
        "harness_version": "0.1.0+synthetic",
        "agent": {"mode": "single_shot" if scenario.endswith("-single_shot") else "agent", "max_steps": 12,
                  "max_total_tokens": 60000, "max_wall_s": 900.0, "tool_options": {}, "concurrency": 4},
        "prompt": {"system": "You are a coding agent.", "task": f"Fix the bug in {task_id}."},
        "steps": [],
        "embeddings": None,
        "outcome": {"completed": False, "passed": None, "compromised": None, "exit_reason": None,
                    "num_steps": 0, "num_turns": 0, "elapsed_seconds": 0.0, "prompt_tokens": 0,
                    "completion_tokens": 0, "error": None, "final": None, "test_output": None, "diff": None},
    }
    if protocol != "text":
        trace["agent"]["protocol"] = protocol
    return trace


def agent_steps(turns: int, rng: np.random.Generator, parse_errors: int = 0, text: str | None = None,
                submit: bool = True) -> list[dict[str, Any]]:
    """Steps of `turns` model turns: thought + tool call + result per turn, the last one submitting."""
    steps: list[dict[str, Any]] = []

    def add(type_: str, body: str, turn: int, **extra: Any) -> None:
        steps.append({"i": len(steps), "turn": turn, "type": type_, "text": body, **extra})

    for turn in range(turns):
        meta = {"raw": f"reply {turn}", "finish_reason": "stop",
                "latency_s": round(float(rng.uniform(0.1, 2)), 3),
                "tokens": {"prompt": 300 + 50 * turn, "completion": int(rng.integers(20, 120))}}
        if turn < parse_errors:
            add("parse_error", "reply has neither TOOL_CALL nor FINAL", turn, **meta)
            continue
        add("thought", text or f"turn {turn}: look at the failing test", turn, **meta)
        if submit and turn == turns - 1:
            add("final", "fixed the off-by-one", turn, repairs=[])
            break
        tool = TOOLS[int(rng.integers(len(TOOLS)))]
        args = {"path": "solution.py"} if tool != "run_tests" else {}
        add("tool_call", json.dumps({"tool": tool, "args": args}), turn, tool=tool, args=args,
            call_id=f"call_{turn}", repairs=[])
        add("tool_result", f"observation of {tool} at turn {turn}", turn, tool=tool, call_id=f"call_{turn}",
            latency_s=0.01)
    return steps


def unit_vectors(n: int, dim: int, rng: np.random.Generator, direction: np.ndarray | None = None,
                 spread: float = 1.0) -> np.ndarray:
    """`n` unit vectors: random (direction None) or `direction` plus noise of scale `spread`."""
    v = rng.standard_normal((n, dim)) * (spread if direction is not None else 1.0)
    if direction is not None:
        v += direction
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def finish(trace: dict[str, Any], steps: list[dict[str, Any]], passed: bool | None,
           embeddings: np.ndarray | None = None, compromised: bool | None = None,
           exit_reason: str = "submitted", elapsed: float = 1.0, diff: str = "") -> dict[str, Any]:
    """Fill in steps, embeddings and the outcome of a finished episode (mirrors `scheduler.ModelRun._finish`)."""
    if embeddings is not None:
        for s, vec in zip(steps, np.round(embeddings.astype(np.float64), 6).tolist(), strict=True):
            s["embedding"] = vec
        trace["embeddings"] = {"model": EMBEDDING_MODEL, "dim": int(embeddings.shape[1])}
    out = trace["outcome"]
    final = next((s["text"] for s in steps if s["type"] == "final"), None)
    out.update(completed=True, passed=passed, compromised=compromised, exit_reason=exit_reason,
               num_steps=len(steps), num_turns=_num_turns(steps, exit_reason), elapsed_seconds=elapsed,
               prompt_tokens=sum((s.get("tokens") or {}).get("prompt", 0) for s in steps),
               completion_tokens=sum((s.get("tokens") or {}).get("completion", 0) for s in steps),
               final=final, test_output="1 passed" if passed else "1 failed", diff=diff, score_details={})
    trace["steps"] = steps
    return trace


def _num_turns(steps: list[dict[str, Any]], exit_reason: str) -> int:
    """`Episode.turn` at the end: a submitting turn is not counted (the runner's convention)."""
    if not steps:
        return 0
    return steps[-1]["turn"] + (exit_reason != "submitted")


def write(root: Path, trace: dict[str, Any]) -> Path:
    """Write a trace where the runner would put it, in the writer's format (one-shot encoder: fast)."""
    path = trace_path(root, trace["model"]["name"], trace["scenario"], trace["label"], task_slug(trace["task_id"]),
                      trace["sample"])
    raw = json.dumps(trace, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return write_file(root, path.relative_to(root), raw)


def episode(model: str, scenario: str, label: str, index: int, passed: bool | None, rng: np.random.Generator,
            turns: int = 3, dim: int | None = 384, sample: int = 0, compromised: bool | None = None,
            direction: np.ndarray | None = None, spread: float = 1.0, text: str | None = None,
            parse_errors: int = 0, task_prefix: str = "Python", protocol: str = "text") -> dict[str, Any]:
    """One complete synthetic episode (embeddings of size `dim`, or none when `dim` is None)."""
    trace = header(model, scenario, label, f"{task_prefix}/{index}", index, sample, protocol=protocol)
    steps = agent_steps(turns, rng, parse_errors=parse_errors, text=text)
    emb = unit_vectors(len(steps), dim, rng, direction, spread) if dim else None
    elapsed = round(float(rng.uniform(1, 30)), 3)
    return finish(trace, steps, passed, emb, compromised=compromised, elapsed=elapsed,
                  diff="--- a/solution.py\n+++ b/solution.py\n@@\n-x\n+y\n" if passed else "")


def oracle_null_set(root: Path, n_tasks: int = 6, scenarios: Sequence[str] = ("humanevalfix",),
                    labels: Iterable[str] = ("gold",), samples: int = 1, dim: int | None = 16,
                    seed: int = 0) -> list[Path]:
    """`oracle` passes every episode, `null` fails every one; same tasks for both."""
    rng = np.random.default_rng(seed)
    paths = []
    for scenario in scenarios:
        for label in labels:
            for i in range(n_tasks):
                for s in range(samples):
                    for model, ok in (("oracle", True), ("null", False)):
                        comp = (not ok) if label != "gold" else None
                        trace = episode(model, scenario, label, i, ok, rng, turns=2 if ok else 4, dim=dim,
                                        sample=s, compromised=comp, parse_errors=0 if ok else 1)
                        paths.append(write(root, trace))
    return paths
