"""Run configuration fingerprints: everything that decides an episode's result, hashed.

Every trace header records ``fingerprint = {"hash", "run_hash", "config"}``. `config` holds the
registry entry (less an openai entry's transport: its URLs, keys, timeouts, retries and concurrency),
the requested backend, the agent's budgets and helper switches, the run seed, the scenario, label,
task (id and a digest of its content), the sample and the harness version; `hash` is the sha256 of
its canonical JSON. `run_hash` leaves out what differs between the episodes of one run (scenario,
label, task, sample), so the traces of one configuration share it.

`--resume` reuses a trace only when its `hash` equals the one this run computes for the episode.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from ..traces.store import harness_version

if TYPE_CHECKING:
    from ..registry import ModelSpec
    from ..strategies.config import AgentConfig
    from ..types import Task

# How an openai entry reaches its servers, not what answers: a fleet that loses or gains a node, or a server
# restarted on another port, resumes its run. The trace header's `model.details` still records them.
TRANSPORT = {"base_url", "api_key_env", "timeout_s", "stream", "deadline_s", "max_retries", "concurrency"}


def _digest(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def task_digest(task: Task) -> str:
    """sha256 of what the agent sees and is judged by: statement, files, test command, oracle, metadata.

    The task's position (``metadata.index``) is left out, so inserting a task changes no other task's digest.
    """
    metadata = {k: v for k, v in task.metadata.items() if k != "index"}
    return _digest({"id": task.id, "scenario": task.scenario, "label": task.label, "statement": task.statement,
                    "files": task.files, "test_cmd": task.test_cmd, "oracle": task.oracle, "metadata": metadata})


def run_config(spec: ModelSpec, backend: str | None, mode: str, agent: AgentConfig, seed: int,
               strategy: dict[str, Any] | None = None) -> dict[str, Any]:
    """The part of the configuration shared by every episode of a run (one model).

    `strategy`: the options of a strategy that has its own (reflect's iters and temperatures). The agent's
    settings are `AgentConfig.dump()`: those added after schema 1.3 are left out while they behave as before
    they existed, so older traces still match (--resume).
    """
    return {
        "harness_version": harness_version(),
        "model": spec.model_dump(mode="json", exclude={"aliases": True, "description": True, "openai": TRANSPORT}),
        "backend": backend or spec.backend,
        "mode": mode,
        "agent": agent.dump(),
        "seed": seed,
        **({"strategy": strategy} if strategy else {}),
    }


def episode_fingerprint(run: dict[str, Any], scenario: str, task: Task, sample: int) -> dict[str, Any]:
    """The header's ``fingerprint`` block for one episode of the run configured by `run`."""
    config = {**run, "scenario": scenario, "label": task.label,
              "task": {"id": task.id, "sha256": task_digest(task)}, "sample": sample}
    return {"hash": _digest(config), "run_hash": _digest(run), "config": config}
