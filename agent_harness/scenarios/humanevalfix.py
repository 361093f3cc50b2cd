"""HumanEvalFix (Python): fix a human-written bug in one function, with its tests as the specification.

Each task's workspace holds the buggy module `<entry_point>.py` (``declaration + buggy_solution``)
and a visible test file `test_<entry_point>.py` that imports the function and runs the dataset's
`check` (the HumanEvalFixTests setting of bigcode-evaluation-harness: no docstring, the tests
are the specification). Scoring copies only the final module into a fresh directory and runs
the full hidden test against it in the sandbox, so edits to the visible tests change nothing. The
test runs in a process of its own with only the entry point and the reference code's helpers as
names; the module runs in another (the package hidden_check/: what crosses, and how).

The ``docs`` label is bigcode's HumanEvalFixDocs setting: the module starts from the dataset's
`prompt` (signature and docstring) instead of the bare `declaration`, and the single-shot prompt is
the buggy function with its docstring and no tests. The visible test file and the hidden test
are the same as under ``gold``, so for the agent strategies the docstring is the only difference.

Data: `scenarios/humanevalfix/python.jsonl` (164 rows, sha256-pinned; see its README; package data
in an installed wheel), a user-given `dataset_path` (.jsonl, .parquet, or a dataset folder: parquet or
jsonl shards, or `save_to_disk` output), or the Hugging Face Hub with ``options["hub"]``.
``options["timeout_s"]`` sets the hidden test's time limit (default 10 s, as bigcode's harness).
The rows are read and checked (runnable, one trace each, bounded in size) by `humanevalfix_rows`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..strategies import extract
from ..types import Conversation, ScoreResult, Task
from . import bigcode_prompt
from .bigcode_prompt import FixPrompt
from .hidden_score import HIDDEN_TIMEOUT_S, reference_helpers, run_hidden_test
from .humanevalfix_rows import DATA_FILE, DATA_SHA256, _vendored_rows, load_rows, select_rows

__all__ = ["DATA_FILE", "DATA_SHA256", "SCENARIO", "HumanEvalFix", "_vendored_rows", "build_task", "load_rows",
           "reference_helpers", "run_hidden_test", "select_rows"]

if TYPE_CHECKING:
    from ..sandbox.workspace import Workspace
    from .base import TaskQuery

DOCS_LABEL = "docs"  # HumanEvalFixDocs: signature + docstring instead of the declaration
SINGLE_SHOT_SYSTEM = (
    "You are an expert Python programmer. Reply with the complete fixed function in one "
    "```python code block."
)


# ---------------------------------------------------------------------------------------
# Building tasks
# ---------------------------------------------------------------------------------------


def module_name(entry_point: str) -> str:
    """File the function lives in; no entry point of the dataset shadows a stdlib module."""
    return f"{entry_point}.py"


def _prefix(row: dict[str, Any]) -> str:
    imp = row.get("import") or ""
    return imp if not imp or imp.endswith("\n") else imp + "\n"


def visible_test(module: str, entry_point: str, test: str) -> str:
    """The test file the agent sees and can run with the bare system Python."""
    mod = module.removesuffix(".py")
    return (
        f"# Tests for {module}: they show the expected behaviour of {entry_point}.\n"
        f"# Run: python3 test_{module}\n"
        f"from {mod} import *\n"
        f"from {mod} import {entry_point}\n\n"
        f"{test.strip()}\n\n"
        f'print("All tests passed.")\n'
    )


def statement(task_id: str, entry_point: str, module: str, docs: bool = False) -> str:
    spec = (f"Its docstring says what it should do, and the tests in `test_{module}` show the expected behaviour."
            if docs else f"The tests in `test_{module}` show the expected behaviour.")
    return (
        f"Task {task_id}: the function `{entry_point}` in `{module}` has a bug.\n"
        f"{spec} Read `{module}`, fix the bug, "
        f"and run the tests to check your fix. Change only `{module}`; do not edit the tests."
    )


def build_task(row: dict[str, Any], index: int, scenario: str = "humanevalfix", label: str = "gold",
               timeout_s: float = HIDDEN_TIMEOUT_S) -> Task:
    """One Task from one dataset row (see the module docstring for the layout and the labels)."""
    ep = row["entry_point"]
    module = module_name(ep)
    test_file = f"test_{module}"
    docs = label == DOCS_LABEL
    if docs and not isinstance(row.get("prompt"), str):
        raise ConfigError(f"{scenario}: row {row['task_id']} has no 'prompt' field, which label '{DOCS_LABEL}' needs")
    head = _prefix(row) + (row["prompt"] if docs else row["declaration"])
    buggy = head + row["buggy_solution"]
    fixed = head + row["canonical_solution"]
    return Task(
        id=row["task_id"],
        scenario=scenario,
        statement=statement(row["task_id"], ep, module, docs),
        files={module: buggy, test_file: visible_test(module, ep, row["test"])},
        focus=[module],
        label=label,
        test_cmd=["python3", test_file],
        oracle=[
            {"tool": "read_file", "args": {"path": module}},
            {"tool": "write_file", "args": {"path": module, "content": fixed}},
            {"tool": "run_tests", "args": {}},
        ],
        metadata={
            "index": index,
            "task_id": row["task_id"],
            "entry_point": ep,
            "bug_type": row.get("bug_type", ""),
            "failure_symptoms": row.get("failure_symptoms", ""),
            "module": module,
            "test_file": test_file,
            "declaration": head,  # what a body-only answer is appended to (with the docstring under docs)
            "docs": docs,
            "hidden_test": row["test"],
            "helpers": reference_helpers(fixed, ep),
            "timeout_s": timeout_s,
            # the row's `import` field (empty in bigcode's Python rows): kept apart for bigcode's prompt
            **({"import_prefix": _prefix(row)} if _prefix(row) else {}),
            **({"image": row["image"]} if row.get("image") else {}),  # the row's Docker image
        },
    )


# ---------------------------------------------------------------------------------------
# Scoring
# ---------------------------------------------------------------------------------------


def _read_module(ws: Workspace, module: str) -> str | None:
    """The module's text; None when it is missing or not a regular file (never followed)."""
    from ..sandbox.safefs import read_rel

    data = read_rel(ws.root, module, 4 << 20)
    return None if data is None else data.decode("utf-8", errors="replace")


# ---------------------------------------------------------------------------------------
# The scenario
# ---------------------------------------------------------------------------------------


@dataclass
class HumanEvalFix:
    """HumanEvalFix-Python as an agent scenario and a single-shot baseline."""

    name: str = "humanevalfix"
    description: str = "Fix a bug in one Python function; the tests in the workspace are the specification"
    labels: tuple[str, ...] = ("gold", DOCS_LABEL)
    timeout_s: float = HIDDEN_TIMEOUT_S

    def load_tasks(self, query: TaskQuery) -> list[Task]:
        if query.label not in self.labels:
            raise ConfigError(f"{self.name}: unknown label '{query.label}'; valid: {', '.join(self.labels)}")
        rows = load_rows(query.dataset_path, hub=bool(query.options.get("hub")))
        timeout = float(query.options.get("timeout_s", self.timeout_s))
        return [build_task(row, i, self.name, query.label, timeout)
                for i, row in select_rows(rows, tuple(query.task_ids), query.n, self.name)]

    def score(self, task: Task, ws: Workspace, tool_calls: list[dict[str, Any]]) -> ScoreResult:
        """Hidden test against the final module only; what the agent claims plays no part."""
        md = task.metadata
        return run_hidden_test(_read_module(ws, md["module"]), md["module"], md["entry_point"],
                               md["hidden_test"], float(md.get("timeout_s", self.timeout_s)),
                               helpers=str(md.get("helpers", "")), sandbox=ws.spec)

    # The calibrated single-shot (`--agent single-shot`): bigcode's own prompt and post-processing.
    def fix_prompt(self, task: Task) -> FixPrompt:
        return bigcode_prompt.task_prompt(task)

    def apply_program(self, task: Task, ws: Workspace, module: str) -> None:
        """Write the module bigcode's post-processing made of the completion (whatever it holds)."""
        from ..tools import put_file

        put_file(ws, task.metadata["module"], module)

    # The chat-style single-shot (`--agent single-shot-chat`) and reflect's chat prompt.
    def single_shot_prompt(self, task: Task) -> Conversation:
        """A chat version of bigcode's `instruct` prompt: the buggy function, its tests, then "Fix bugs
        in <entry_point>.". The declaration that prompt ends with is left out and the system message
        asks for a code block instead. Under the docs label (HumanEvalFixDocs) the function carries its
        docstring and no tests follow."""
        md = task.metadata
        context = task.files[md["module"]] + ("" if md.get("docs") else "\n" + md["hidden_test"])
        user = (context + "\n" + f"Fix bugs in {md['entry_point']}.").strip()
        return [{"role": "system", "content": SINGLE_SHOT_SYSTEM}, {"role": "user", "content": user}]

    # Reflectable (the reflect strategy): the module is the answer; its entry point must keep its parameters.
    def target_file(self, task: Task) -> str:
        return str(task.metadata["module"])

    def fixed_source(self, task: Task, completion: str) -> str | None:
        return extract.fixed_source(completion, task.metadata["entry_point"], task.metadata["declaration"])

    def check_source(self, task: Task, source: str) -> str | None:
        return extract.signature_problem(source, task.metadata["entry_point"], task.metadata["declaration"])

    def apply_single_shot(self, task: Task, ws: Workspace, completion: str) -> None:
        """Write the module a completion stands for; a completion without code changes nothing."""
        source = extract.fixed_module(completion, task.metadata["entry_point"], task.metadata["declaration"])
        if source is not None:
            (Path(ws.root) / task.metadata["module"]).write_text(source, encoding="utf-8")


SCENARIO = HumanEvalFix()
