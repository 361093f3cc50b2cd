"""`agent-harness validate`: prove that a dataset can be scored before comparing models on it.

Each task is scored twice by the scenario's own scorer, in the sandbox, exactly as an episode is:
once as it is handed to the agent (the buggy version), once after its reference tool calls (the
oracle's edits). A task is *scorable* when the reference passes, the buggy version fails and neither
is flagged suspicious; any other task would count a correct fix as wrong, a wrong one as right, or
an honest one as a forgery, so comparing models on it says nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import stop
from ..errors import ConfigError, HarnessError
from ..text import printable
from ..types import ScoreResult, Task

if TYPE_CHECKING:
    from ..scenarios import Scenario

REASON_CHARS = 160


@dataclass(frozen=True)
class Verdict:
    """What the scorer said of one version of a task (`error`: it could not score it at all)."""

    passed: bool
    suspicious: str | None
    reason: str
    error: str | None = None


@dataclass(frozen=True)
class TaskCheck:
    task_id: str
    reference: Verdict
    buggy: Verdict

    def problems(self) -> list[str]:
        """Why this task cannot be scored as it stands; empty when it can."""
        out = []
        for name, v, want in (("reference", self.reference, True), ("buggy version", self.buggy, False)):
            if v.error:
                out.append(f"the {name} could not be scored: {v.error}")
            elif v.suspicious:
                out.append(f"the {name} is flagged suspicious: {v.suspicious}")
            elif v.passed != want:
                out.append(f"the {name} {'fails' if want else 'passes'}" + (f": {v.reason}" if v.reason else ""))
        return out


def _reason(result: ScoreResult) -> str:
    """The line of the scorer's output that says the most: its failure, else the last line."""
    failure = result.details.get("failure")
    if isinstance(failure, str) and failure:
        return failure[:REASON_CHARS]
    lines = [ln.strip() for ln in (result.output or "").splitlines() if ln.strip()]
    return lines[-1][:REASON_CHARS] if lines else ""


def _verdict(result: ScoreResult) -> Verdict:
    suspicious = result.details.get("suspicious")
    return Verdict(bool(result.passed), str(suspicious) if suspicious else None, _reason(result))


def score_version(scenario: Scenario, task: Task, reference: bool) -> Verdict:
    """Score the task's files as handed out, or after replaying its reference tool calls."""
    from ..errors import ToolError
    from ..sandbox.workspace import Workspace
    from ..tools import ToolOptions, execute

    try:
        with Workspace.create(task.files, test_cmd=task.test_cmd, image=task.metadata.get("image")) as ws:
            calls = list(task.oracle) if reference else []
            for call in calls:
                if call.get("tool") in ("run_tests", "read_file", "list_dir", "git_diff", "grep"):
                    continue  # they change nothing: the scorer decides
                execute(ws, str(call.get("tool")), call.get("args") or {}, ToolOptions())
            ws.end_session()  # as after an episode: the scorer's commands run in a fresh sandbox
            return _verdict(scenario.score(task, ws, calls))
    except (HarnessError, ToolError) as e:
        return Verdict(False, None, "", error=str(e)[:REASON_CHARS])


def check_task(scenario: Scenario, task: Task) -> TaskCheck:
    if not task.oracle:
        missing = Verdict(False, None, "", error="the task has no reference tool calls")
        return TaskCheck(task.id, missing, score_version(scenario, task, reference=False))
    return TaskCheck(task.id, score_version(scenario, task, True), score_version(scenario, task, False))


def check_tasks(scenario: Scenario, tasks: list[Task], jobs: int) -> Iterator[TaskCheck]:
    """Every task's check, in the tasks' order, `jobs` at a time (each scoring runs in the sandbox)."""
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(check_task, scenario, t) for t in tasks]
        try:
            for f in futures:
                stop.check()
                yield f.result()
        finally:
            for f in futures:
                f.cancel()


@dataclass
class Report:
    checked: int = 0
    unscorable: int = 0


def validate(scenario_name: str, labels: list[str] | None, n: int | None, task_ids: tuple[str, ...],
             dataset_path: Path | None, hub: bool, jobs: int, out: Any) -> Report:
    """Check every task of the scenario's labels; print a line per unscorable task and a summary."""
    from ..scenarios import TaskQuery, get_scenario

    scenario = get_scenario(scenario_name)
    wanted = list(scenario.labels) if labels and "all" in labels else labels or [scenario.labels[0]]
    report = Report()
    for label in wanted:
        if label not in scenario.labels:
            raise ConfigError(f"{scenario_name}: unknown label '{label}'; valid: {', '.join(scenario.labels)}, all")
        tasks = scenario.load_tasks(TaskQuery(label=label, n=n, task_ids=task_ids, dataset_path=dataset_path,
                                              options={"hub": True} if hub else {}))
        bad = 0
        for check in check_tasks(scenario, tasks, jobs):
            problems = check.problems()
            if problems:
                bad += 1
                print(printable(f"{scenario_name} [{label}] {check.task_id}: {'; '.join(problems)}"), file=out)
        report.checked += len(tasks)
        report.unscorable += bad
        print(printable(f"{scenario_name} [{label}]: {len(tasks)} tasks, {len(tasks) - bad} scorable, "
                        f"{bad} unscorable"), file=out)
    return report


def unscorable_in_run(out: Path, oracle_models: set[str], null_models: set[str],
                      fingerprints: set[str] | None = None) -> list[str]:
    """Tasks of a finished run that its own oracle or null episodes show to be unscorable: the oracle
    failed or was flagged, or the null model (which changes nothing) passed."""
    from ..traces.store import load_traces

    runs = load_traces(out).runs  # files it refuses were named by the run's summary
    if runs.empty:
        return []
    runs = runs[runs["completed"].fillna(False).astype(bool)]
    if fingerprints is not None:
        runs = runs[runs["fingerprint"].isin(fingerprints)]
    bad: set[str] = set()
    for row in runs.itertuples(index=False):
        passed, flagged = bool(row.passed is True or row.passed == True), isinstance(row.suspicious, str)  # noqa: E712
        if (row.model in oracle_models and (not passed or flagged)) or (row.model in null_models and passed):
            bad.add(f"{row.scenario}:{row.task_id}")
    return sorted(bad)
