"""What every scenario is: the query that selects its tasks and the protocols a scenario meets."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..types import Conversation, ScoreResult, Task

if TYPE_CHECKING:
    from ..sandbox.workspace import Workspace


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
