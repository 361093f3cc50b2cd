"""Scenario registry: names map to import paths of objects that satisfy `Scenario`."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..errors import ConfigError
from ..types import Conversation, ScoreResult, Task

if TYPE_CHECKING:
    from ..workspace import Workspace


@dataclass(frozen=True)
class TaskQuery:
    """Which tasks to load: the first `n`, or the ids in `task_ids`, for one label."""

    label: str = "gold"
    n: int | None = None
    task_ids: tuple[str, ...] = ()
    dataset_path: Path | None = None
    options: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Scenario(Protocol):
    """A family of tasks and how to judge them (on behaviour and files, not on claims)."""

    name: str
    description: str
    labels: tuple[str, ...]

    def load_tasks(self, query: TaskQuery) -> list[Task]: ...

    def score(self, task: Task, ws: Workspace, tool_calls: list[dict[str, Any]]) -> ScoreResult: ...


@runtime_checkable
class SingleShot(Protocol):
    """Optional: scenarios that support the no-tools, one-completion baseline."""

    def single_shot_prompt(self, task: Task) -> Conversation: ...

    def apply_single_shot(self, task: Task, ws: Workspace, completion: str) -> None: ...


# name -> "module:attribute"
SCENARIOS: dict[str, str] = {
    "humanevalfix": "agent_harness.scenarios.humanevalfix:SCENARIO",
    "bogus": "agent_harness.scenarios.bogus:SCENARIO",
}


def scenario_names() -> list[str]:
    """The Python scenarios above plus every `scenarios/<name>/scenario.yaml`."""
    from .yaml_scenario import find_yaml_scenarios

    return sorted(set(SCENARIOS) | set(find_yaml_scenarios()))


def get_scenario(name: str) -> Scenario:
    if name in SCENARIOS:
        module, _, attr = SCENARIOS[name].partition(":")
        return getattr(importlib.import_module(module), attr)
    from .yaml_scenario import find_yaml_scenarios, load_yaml_scenario

    found = find_yaml_scenarios()
    if name not in found:
        raise ConfigError(f"unknown scenario '{name}'; valid: {', '.join(scenario_names())}")
    return load_yaml_scenario(found[name])
