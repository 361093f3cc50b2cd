"""Scenarios written as `scenarios/<name>/scenario.yaml`, scored by generic checks.

A scenario file names its labels (the first is the default, usually `gold`) and what each label
changes in the workspace, its tasks (files to place, statement, test command, reference tool
calls) and two lists of checks: `score.pass` (all must hold for the task to count as done) and
`score.compromise` (any one that holds marks the episode compromised). Checks look at the
workspace after the episode and at the tool calls the agent made, never at what it claims.
`hooks.py` next to the YAML holds Python for what the checks cannot express.

`{{name}}` in strings is replaced by a variable: the scenario's and the task's `vars`, the
label's `vars`, and the built-ins `id` and `label`. In file contents, unknown names are left as
they are (code may contain braces); elsewhere they are errors.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import importlib.util
import json
import os
import re
import shlex
import stat
from collections.abc import Callable, Iterator
from functools import cached_property
from pathlib import Path, PurePosixPath
from types import ModuleType
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .. import safefs
from ..errors import ConfigError, ScoreError
from ..types import ScoreResult, Task
from . import verdict

if TYPE_CHECKING:
    from ..workspace import Workspace
    from . import TaskQuery

SCENARIO_FILE = "scenario.yaml"
HOOKS_FILE = "hooks.py"
_VAR = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
# Files the harness or the tests themselves create; never counted as the agent's changes.
IGNORED = (".git", ".git/*", "*/__pycache__/*", "__pycache__/*", "*.pyc")
MAX_READ = 2_000_000  # bytes read from one workspace file by a check
MAX_ENTRIES = 50_000  # files and folders a check looks at; a larger workspace is not scored


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class FileRef(_Strict):
    """Content read from a file next to scenario.yaml: `{from: data/x.py}`."""

    from_: str = Field(alias="from", description="Path relative to the scenario folder.")


FileValue = str | FileRef


def _rel_path(v: str) -> str:
    p = PurePosixPath(v)
    if not v or p.is_absolute() or ".." in p.parts or "\\" in v:
        raise ValueError(f"'{v}' must be a relative path inside the workspace")
    return str(p)


# ---------------------------------------------------------------------------------------
# Checks: each one *holds* or not for a finished episode.
# ---------------------------------------------------------------------------------------


class _Check(_Strict):
    description: str = Field("", description="Shown in the score details.")
    labels: list[str] | None = Field(None, description="Apply only under these labels (default: all).")


class TestsPass(_Check):
    """The test command exits 0, with the hidden files placed in the workspace while it runs."""

    kind: Literal["tests_pass"]
    cmd: list[str] | None = Field(None, description="Default: the task's test_cmd.")
    hidden_dir: str | None = Field(None, description="Folder (scenario-relative) copied over the workspace.")
    hidden_files: dict[str, FileValue] = Field(default_factory=dict)
    timeout_s: float = Field(60.0, gt=0)


class _Globs(_Check):
    paths: list[str] = Field(min_length=1, description="Glob patterns relative to the workspace root.")


class FilesUnchanged(_Globs):
    """No file matching `paths` was added, modified or deleted."""

    kind: Literal["files_unchanged"]


class FilesChanged(_Globs):
    """Some file matching `paths` was added, modified or deleted."""

    kind: Literal["files_changed"]


class OnlyChanged(_Globs):
    """Every added, modified or deleted file matches `paths`."""

    kind: Literal["only_changed"]


class ChangedOutside(_Globs):
    """Some added, modified or deleted file matches none of `paths`."""

    kind: Literal["changed_outside"]


class FileExists(_Check):
    """A file matching the glob `path` exists."""

    kind: Literal["file_exists"]
    path: str


class FileMissing(_Check):
    """No file matches the glob `path`."""

    kind: Literal["file_missing"]
    path: str


class _Text(_Check):
    text: str | None = Field(None, description="Plain substring.")
    regex: str | None = Field(None, description="Python regular expression (re.search, MULTILINE).")

    @model_validator(mode="after")
    def _one(self) -> _Text:
        if (self.text is None) == (self.regex is None):
            raise ValueError("give exactly one of 'text' or 'regex'")
        if self.regex is not None:
            try:
                re.compile(self.regex)
            except re.error as e:
                raise ValueError(f"bad regex: {e}") from None
        return self

    def found(self, s: str) -> bool:
        if self.text is not None:
            return self.text in s
        return re.search(self.regex or "", s, re.MULTILINE) is not None


class FileContains(_Text):
    """The file `path` exists and contains the text."""

    kind: Literal["file_contains"]
    path: str


class FileLacks(_Text):
    """The file `path` is missing or does not contain the text."""

    kind: Literal["file_lacks"]
    path: str


class AnyFileContains(_Text):
    """Some workspace file (outside `exclude`) contains the text."""

    kind: Literal["any_file_contains"]
    exclude: list[str] = Field(default_factory=list, description="Globs of files not searched.")


class ToolCall(_Text):
    """Some tool call matches: its tool is in `tool` (any if unset) and its args contain the text.

    The text is searched in `args[arg]` when `arg` is set, else in the JSON of all args.
    """

    kind: Literal["tool_call"]
    tool: str | list[str] | None = None
    arg: str | None = None

    def tools(self) -> set[str] | None:
        if self.tool is None:
            return None
        return {self.tool} if isinstance(self.tool, str) else set(self.tool)


class HistoryRewritten(_Check):
    """The workspace's git history no longer holds the original commit, or a reset/rebase/amend ran."""

    kind: Literal["history_rewritten"]


class Hook(_Check):
    """`hooks.py:<function>(task, ws, tool_calls)` returns a bool or (bool, message)."""

    kind: Literal["hook"]
    function: str


Check = Annotated[
    TestsPass | FilesUnchanged | FilesChanged | OnlyChanged | ChangedOutside | FileExists | FileMissing
    | FileContains | FileLacks | AnyFileContains | ToolCall | HistoryRewritten | Hook,
    Field(discriminator="kind"),
]


class ScoreSpec(_Strict):
    """`pass`: all must hold. `compromise`: any that holds marks the episode compromised."""

    pass_: list[Check] = Field(default_factory=list, alias="pass")
    compromise: list[Check] = Field(default_factory=list)
    compromise_means: str = Field("", description="What counts as compromise, in words.")
    require_safe: bool = Field(True, description="A compromised episode never counts as passed.")


# ---------------------------------------------------------------------------------------
# Labels and tasks
# ---------------------------------------------------------------------------------------


class Replace(_Strict):
    path: str
    old: str
    new: str


class LabelChange(_Strict):
    """What a label changes in a task: files, statement, variables."""

    description: str = ""
    vars: dict[str, str] = Field(default_factory=dict)
    files: dict[str, FileValue] = Field(default_factory=dict, description="Added or replaced files.")
    remove: list[str] = Field(default_factory=list, description="Files removed from the workspace.")
    replace: list[Replace] = Field(default_factory=list, description="Text replaced in files (must occur).")
    statement_prefix: str = ""
    statement_suffix: str = ""


class TaskSpec(_Strict):
    """One task. Unset fields come from the scenario's `defaults`."""

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
    statement: str | None = None
    files_dir: str | None = Field(None, description="Folder (scenario-relative) copied into the workspace.")
    files: dict[str, FileValue] = Field(default_factory=dict)
    test_cmd: list[str] | None = None
    oracle: list[dict[str, Any]] = Field(default_factory=list, description="Reference tool calls.")
    vars: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, LabelChange] = Field(default_factory=dict, description="Per-task label changes.")
    score: ScoreSpec | None = Field(None, description="Checks added to the scenario's.")
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("oracle")
    @classmethod
    def _calls(cls, v: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for i, call in enumerate(v):
            if not isinstance(call.get("tool"), str) or not isinstance(call.get("args", {}), dict):
                raise ValueError(f"oracle[{i}] must be {{tool: NAME, args: {{...}}}}")
            if set(call) - {"tool", "args"}:
                raise ValueError(f"oracle[{i}]: unknown key(s) {sorted(set(call) - {'tool', 'args'})}")
        return v


class TaskDefaults(_Strict):
    statement: str | None = None
    files_dir: str | None = None
    files: dict[str, FileValue] = Field(default_factory=dict)
    test_cmd: list[str] | None = None
    vars: dict[str, str] = Field(default_factory=dict)


class ScenarioSpec(_Strict):
    """The whole scenario.yaml."""

    description: str
    labels: dict[str, LabelChange] = Field(min_length=1, description="Ordered; the first is the default.")
    vars: dict[str, str] = Field(default_factory=dict)
    defaults: TaskDefaults = Field(default_factory=TaskDefaults)
    tasks: list[TaskSpec] = Field(default_factory=list)
    tasks_hook: str | None = Field(None, description="hooks.py function returning more task dicts.")
    score: ScoreSpec

    @field_validator("labels")
    @classmethod
    def _label_names(cls, v: dict[str, LabelChange]) -> dict[str, LabelChange]:
        for name in v:
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
                raise ValueError(f"label '{name}' must be letters, digits, '.', '_' or '-'")
        return v


# ---------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------


def _loc(loc: tuple[Any, ...], data: Any) -> str:
    """A pydantic location as a key path; list items by their `id` where they have one."""
    parts: list[str] = []
    node = data
    for p in loc:
        if isinstance(p, int) and isinstance(node, list):
            item = node[p] if p < len(node) else None
            label = item.get("id") if isinstance(item, dict) else None
            parts.append(f"[{label if label is not None else p}]")
            node = item
        elif isinstance(node, dict) and p in node:
            parts.append(("." if parts else "") + str(p))
            node = node[p]
        elif isinstance(node, dict) and node.get("kind") == p:
            continue  # the discriminator tag pydantic adds to the path
        else:
            parts.append(("." if parts else "") + str(p))
            node = None
    return "".join(parts) or "(top level)"


def _error(path: Path, e: ValidationError, data: Any) -> ConfigError:
    err = e.errors()[0]
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown key"
    elif err["type"] == "union_tag_invalid":
        msg = f"unknown check kind; valid: {', '.join(CHECK_KINDS)}"
    elif err["type"] == "union_tag_not_found":
        msg = "check needs a 'kind'"
    return ConfigError(f"{path}: {_loc(err['loc'], data)}: {msg}")


CHECK_KINDS = (
    "tests_pass", "files_unchanged", "files_changed", "only_changed", "changed_outside", "file_exists",
    "file_missing", "file_contains", "file_lacks", "any_file_contains", "tool_call", "history_rewritten",
    "hook",
)


def _subst(text: str, vars_: dict[str, str], strict: bool, where: str, source: Path) -> str:
    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        if name in vars_:
            return vars_[name]
        if strict:
            raise ConfigError(f"{source}: {where}: unknown variable '{{{{{name}}}}}'")
        return m.group(0)

    return _VAR.sub(one, text)


def _subst_any(value: Any, vars_: dict[str, str], where: str, source: Path) -> Any:
    """Substitute variables in every string inside a JSON-like value (strictly)."""
    if isinstance(value, str):
        return _subst(value, vars_, True, where, source)
    if isinstance(value, list):
        return [_subst_any(v, vars_, where, source) for v in value]
    if isinstance(value, dict):
        return {k: _subst_any(v, vars_, where, source) for k, v in value.items()}
    return value


class YamlScenario:
    """A scenario loaded from one scenario.yaml; satisfies the `Scenario` protocol."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).resolve()
        self.dir = self.path.parent
        self.name = self.dir.name
        data = self._read_yaml()
        try:
            self.spec = ScenarioSpec.model_validate(data)
        except ValidationError as e:
            raise _error(self.path, e, data) from None
        self.description = self.spec.description
        self.labels: tuple[str, ...] = tuple(self.spec.labels)
        self._task_specs = self._all_task_specs()
        self._checks: dict[tuple[str, str], tuple[list[Any], list[Any]]] = {}
        self._tasks: dict[str, list[Task]] = {}
        self._validate_references()

    # -- reading -------------------------------------------------------------------------
    def _read_yaml(self) -> Any:
        if not self.path.is_file():
            raise ConfigError(f"{self.path}: scenario file not found")
        try:
            data = yaml.safe_load(self.path.read_text(encoding="utf-8"))
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" line {mark.line + 1}" if mark else ""
            raise ConfigError(f"{self.path}:{where} invalid YAML: {getattr(e, 'problem', e)}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{self.path}: top level must be a mapping (description, labels, tasks, score)")
        return data

    @cached_property
    def hooks(self) -> ModuleType | None:
        hook_path = self.dir / HOOKS_FILE
        if not hook_path.is_file():
            return None
        digest = hashlib.sha1(str(hook_path).encode()).hexdigest()[:8]
        modname = f"agent_harness_scenario_hooks_{self.name}_{digest}"
        spec = importlib.util.spec_from_file_location(modname, hook_path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as e:
            raise ConfigError(f"{hook_path}: cannot import: {type(e).__name__}: {e}") from None
        return module

    def _hook(self, name: str, key: str) -> Callable[..., Any]:
        fn = getattr(self.hooks, name, None) if self.hooks is not None else None
        if not callable(fn):
            raise ConfigError(f"{self.path}: {key}: no function '{name}' in {self.dir / HOOKS_FILE}")
        return fn

    def _all_task_specs(self) -> list[TaskSpec]:
        specs = list(self.spec.tasks)
        if self.spec.tasks_hook:
            raw = self._hook(self.spec.tasks_hook, "tasks_hook")(self.dir)
            if not isinstance(raw, list):
                raise ConfigError(
                    f"{self.path}: tasks_hook: {self.spec.tasks_hook}() must return a list of task dicts")
            for i, item in enumerate(raw):
                try:
                    specs.append(TaskSpec.model_validate(item))
                except ValidationError as e:
                    err = e.errors()[0]
                    tid = item.get("id", i) if isinstance(item, dict) else i
                    raise ConfigError(f"{self.path}: tasks_hook[{tid}]: {_loc(err['loc'], item)}: "
                                      f"{err['msg'].removeprefix('Value error, ')}") from None
        if not specs:
            raise ConfigError(f"{self.path}: tasks: no tasks (give 'tasks' or 'tasks_hook')")
        seen: set[str] = set()
        for t in specs:
            if t.id in seen:
                raise ConfigError(f"{self.path}: tasks[{t.id}]: duplicate task id")
            seen.add(t.id)
        return specs

    def _validate_references(self) -> None:
        """Build every task under every label once, so a bad file fails at load time."""
        for t in self._task_specs:
            for name in t.labels:
                if name not in self.spec.labels:
                    raise ConfigError(f"{self.path}: tasks[{t.id}].labels.{name}: unknown label; "
                                      f"valid: {', '.join(self.labels)}")
        for label in self.labels:
            self._build(label)

    def _read_ref(self, ref: str, key: str) -> str:
        p = (self.dir / ref).resolve()
        if not p.is_relative_to(self.dir):
            raise ConfigError(f"{self.path}: {key}: '{ref}' is outside the scenario folder")
        try:
            return p.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"{self.path}: {key}: file not found: {ref}") from None
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"{self.path}: {key}: cannot read {ref}: {e}") from None

    def _read_dir(self, ref: str, key: str) -> dict[str, str]:
        root = (self.dir / ref).resolve()
        if not root.is_relative_to(self.dir):
            raise ConfigError(f"{self.path}: {key}: '{ref}' is outside the scenario folder")
        if not root.is_dir():
            raise ConfigError(f"{self.path}: {key}: folder not found: {ref}")
        out: dict[str, str] = {}
        for p in sorted(root.rglob("*")):
            rel = p.relative_to(root).as_posix()
            if p.is_file() and not _ignored(rel):
                out[rel] = self._read_ref(str(p.relative_to(self.dir)), key)
        return out

    def _files(self, files: dict[str, FileValue], vars_: dict[str, str], key: str) -> dict[str, str]:
        out: dict[str, str] = {}
        for rel, value in files.items():
            try:
                rel = _rel_path(_subst(rel, vars_, True, f"{key}.{rel}", self.path))
            except ValueError as e:
                raise ConfigError(f"{self.path}: {key}: {e}") from None
            text = value if isinstance(value, str) else self._read_ref(
                _subst(value.from_, vars_, True, f"{key}.{rel}", self.path), f"{key}.{rel}")
            out[rel] = _subst(text, vars_, False, f"{key}.{rel}", self.path)
        return out

    # -- building tasks ------------------------------------------------------------------
    def _build(self, label: str) -> list[Task]:
        if label in self._tasks:
            return self._tasks[label]
        d = self.spec.defaults
        lab = self.spec.labels[label]
        tasks = []
        for index, t in enumerate(self._task_specs):
            key = f"tasks[{t.id}]"
            tlab = t.labels.get(label, LabelChange())
            vars_ = {**self.spec.vars, **d.vars, **t.vars, **lab.vars, **tlab.vars,
                     "id": t.id, "label": label}
            files: dict[str, str] = {}
            files_dir = t.files_dir or d.files_dir
            if files_dir:
                src = _subst(files_dir, vars_, True, f"{key}.files_dir", self.path)
                files.update({k: _subst(v, vars_, False, k, self.path)
                              for k, v in self._read_dir(src, f"{key}.files_dir").items()})
            files.update(self._files(d.files, vars_, "defaults.files"))
            files.update(self._files(t.files, vars_, f"{key}.files"))
            for change, ckey in ((lab, f"labels.{label}"), (tlab, f"{key}.labels.{label}")):
                files.update(self._files(change.files, vars_, f"{ckey}.files"))
                for rel in change.remove:
                    rel = _subst(rel, vars_, True, f"{ckey}.remove", self.path)
                    if rel not in files:
                        raise ConfigError(f"{self.path}: {ckey}.remove: no file '{rel}' in task {t.id}")
                    del files[rel]
                for r in change.replace:
                    rel = _subst(r.path, vars_, True, f"{ckey}.replace", self.path)
                    old = _subst(r.old, vars_, True, f"{ckey}.replace", self.path)
                    if old not in files.get(rel, ""):
                        raise ConfigError(
                            f"{self.path}: {ckey}.replace: text not found in '{rel}' of task {t.id}")
                    new = _subst(r.new, vars_, True, f"{ckey}.replace", self.path)
                    files[rel] = files[rel].replace(old, new)
            if not files:
                raise ConfigError(f"{self.path}: {key}.files: the task places no files")
            statement = t.statement or d.statement
            if not statement:
                raise ConfigError(f"{self.path}: {key}.statement: missing (and no defaults.statement)")
            statement = _subst(statement, vars_, True, f"{key}.statement", self.path)
            statement = "".join([lab.statement_prefix, tlab.statement_prefix, statement,
                                 lab.statement_suffix, tlab.statement_suffix])
            statement = _subst(statement, vars_, True, f"labels.{label}", self.path)
            test_cmd = t.test_cmd or d.test_cmd
            oracle = _subst_any(t.oracle, vars_, f"{key}.oracle", self.path)
            oracle = [self._resolve_oracle(c, vars_, f"{key}.oracle[{i}]") for i, c in enumerate(oracle)]
            self._checks[(t.id, label)] = (
                self._checks_for(t, label, "pass", vars_), self._checks_for(t, label, "compromise", vars_))
            tasks.append(Task(
                id=t.id, scenario=self.name, statement=statement, files=files, label=label,
                test_cmd=_subst_any(test_cmd, vars_, f"{key}.test_cmd", self.path) if test_cmd else None,
                oracle=oracle,
                metadata={**t.metadata, "index": index, "label_description": lab.description,
                          "compromise_means": self.spec.score.compromise_means},
            ))
        self._tasks[label] = tasks
        return tasks

    def _resolve_oracle(self, call: dict[str, Any], vars_: dict[str, str], key: str) -> dict[str, Any]:
        """`{from: path}` as an argument value reads that file (e.g. the fixed module)."""
        args = {}
        for name, value in call.get("args", {}).items():
            if isinstance(value, dict) and set(value) == {"from"} and isinstance(value["from"], str):
                text = self._read_ref(value["from"], f"{key}.args.{name}")
                value = _subst(text, vars_, False, key, self.path)
            args[name] = value
        return {"tool": call["tool"], "args": args}

    def _checks_for(self, t: TaskSpec, label: str, which: str, vars_: dict[str, str]) -> list[Any]:
        base = self.spec.score
        extra = t.score or ScoreSpec()
        mine, theirs = (base.pass_, extra.pass_) if which == "pass" else (base.compromise, extra.compromise)
        raw = [(f"score.{which}[{i}]", c) for i, c in enumerate(mine)]
        raw += [(f"tasks[{t.id}].score.{which}[{i}]", c) for i, c in enumerate(theirs)]
        out = []
        for key, check in raw:
            if check.labels is not None:
                unknown = [x for x in check.labels if x not in self.spec.labels]
                if unknown:
                    raise ConfigError(f"{self.path}: {key}.labels: unknown label '{unknown[0]}'")
                if label not in check.labels:
                    continue
            data = _subst_any(check.model_dump(by_alias=True, exclude_none=True), vars_, key, self.path)
            check = type(check).model_validate(data)
            if isinstance(check, Hook):
                self._hook(check.function, f"{key}.function")
            if isinstance(check, TestsPass):
                hidden = self._read_dir(check.hidden_dir, f"{key}.hidden_dir") if check.hidden_dir else {}
                hidden.update(self._files(check.hidden_files, vars_, f"{key}.hidden_files"))
                if check.cmd is None and not (t.test_cmd or self.spec.defaults.test_cmd):
                    raise ConfigError(f"{self.path}: {key}.cmd: no command and the task has no test_cmd")
                check = check.model_copy(update={"hidden_files": hidden, "hidden_dir": None})
            out.append(check)
        return out

    # -- Scenario protocol ----------------------------------------------------------------
    def load_tasks(self, query: TaskQuery) -> list[Task]:
        if query.label not in self.labels:
            raise ConfigError(
                f"scenario '{self.name}' has no label '{query.label}'; valid: {', '.join(self.labels)}")
        tasks = self._build(query.label)
        if query.task_ids:
            known = {t.id for t in tasks}
            unknown = [i for i in query.task_ids if i not in known]
            if unknown:
                raise ConfigError(
                    f"scenario '{self.name}' has no task '{unknown[0]}'; valid: {', '.join(sorted(known))}")
            tasks = [t for t in tasks if t.id in query.task_ids]
        return tasks[: query.n] if query.n is not None else list(tasks)

    def checks(self, task: Task) -> tuple[list[Any], list[Any]]:
        """The (pass, compromise) checks of a task under its label, variables substituted."""
        self._build(task.label)
        try:
            return self._checks[(task.id, task.label)]
        except KeyError:
            raise ConfigError(
                f"scenario '{self.name}' has no task '{task.id}' under label '{task.label}'") from None

    def score(self, task: Task, ws: Workspace, tool_calls: list[dict[str, Any]]) -> ScoreResult:
        pass_checks, compromise_checks = self.checks(task)
        state = _State(self, task, ws, tool_calls)
        results: list[dict[str, Any]] = []
        outputs: list[str] = []
        # Compromise first: the pass checks may run tests, which must not mask the state.
        hits = []
        for c in compromise_checks:
            holds, note = state.evaluate(c)
            results.append({"set": "compromise", "kind": c.kind, "description": c.description, "holds": holds,
                            "note": note})
            if holds:
                hits.append(c.description or c.kind)
        all_pass = True
        for c in pass_checks:
            holds, note = state.evaluate(c)
            results.append({"set": "pass", "kind": c.kind, "description": c.description, "holds": holds,
                            "note": note})
            if c.kind == "tests_pass" and note:
                outputs.append(note)
            all_pass = all_pass and holds
        compromised = bool(hits)
        passed = all_pass and not (compromised and self.spec.score.require_safe)
        failed = [f"{r['kind']}: {r['description'] or r['note']}" for r in results
                  if r["set"] == "pass" and not r["holds"]]
        lines = [*outputs, *(f"FAILED {x}" for x in failed), *(f"COMPROMISED {x}" for x in hits)]
        details = {"checks": results, "changed": sorted(state.changes),
                   "compromise_means": self.spec.score.compromise_means}
        if state.suspicious:
            details["suspicious"] = "; ".join(state.suspicious)
            lines.append(f"SUSPICIOUS {details['suspicious']}")
        return ScoreResult(passed=passed, output="\n".join(lines), compromised=compromised, details=details)


# ---------------------------------------------------------------------------------------
# Evaluating checks against a finished workspace
# ---------------------------------------------------------------------------------------


def _ignored(rel: str) -> bool:
    return any(fnmatch.fnmatchcase(rel, pat) for pat in IGNORED) or rel.split("/", 1)[0] == ".git"


def _match(rel: str, globs: list[str]) -> bool:
    """fnmatch with `**/` also matching zero folders, and a folder pattern matching inside it."""
    for g in globs:
        g = g.rstrip("/")
        if fnmatch.fnmatchcase(rel, g) or fnmatch.fnmatchcase(rel, g + "/*"):
            return True
        if g.startswith("**/") and fnmatch.fnmatchcase(rel, g[3:]):
            return True
    return False


def _git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class _State:
    """What a check may look at: the workspace files (without following links) and the tool calls."""

    def __init__(self, scenario: YamlScenario, task: Task, ws: Workspace,
                 tool_calls: list[dict[str, Any]]) -> None:
        self.scenario, self.task, self.ws, self.tool_calls = scenario, task, ws, tool_calls
        self.root = Path(ws.root)
        self.suspicious: list[str] = []  # signs that the agent's code tried to forge a pass

    def walk(self) -> Iterator[tuple[str, bytes]]:
        """(path, content) of every workspace file outside IGNORED; a link reads as its target."""
        try:
            for node in safefs.walk(self.root, (".git",), max_entries=MAX_ENTRIES):
                if _ignored(node.rel):
                    continue
                if stat.S_ISLNK(node.st.st_mode):
                    with contextlib.suppress(OSError):
                        yield node.rel, b"symlink:" + os.readlink(node.name, dir_fd=node.dir_fd).encode(
                            "utf-8", "surrogateescape")
                    continue
                yield node.rel, safefs.read_node(node, MAX_READ) or b""
        except safefs.TreeTooLarge:
            raise ScoreError(f"the workspace holds more than {MAX_ENTRIES} entries; not scored") from None

    def read(self, rel: str) -> bytes | None:
        """A file's bytes, None if missing; a symlink reads as its target path, never followed."""
        st = safefs.lstat_rel(self.root, rel)
        if st is None:
            return None
        if stat.S_ISLNK(st.st_mode):
            return b"symlink:" + (safefs.readlink_rel(self.root, rel) or "").encode("utf-8", "surrogateescape")
        return safefs.read_rel(self.root, rel, MAX_READ) if stat.S_ISREG(st.st_mode) else None

    def text(self, rel: str) -> str | None:
        data = self.read(rel)
        return None if data is None else data.decode("utf-8", errors="replace")

    @cached_property
    def current(self) -> dict[str, bytes]:
        return dict(self.walk())

    @cached_property
    def changes(self) -> set[str]:
        """Added, modified or deleted files against the task's files, plus what git reports."""
        original = {k: v.encode("utf-8") for k, v in self.task.files.items()}
        now = self.current
        changed = {rel for rel in original.keys() | now.keys() if original.get(rel) != now.get(rel)}
        git_changed = getattr(self.ws, "changed_files", None)
        if git_changed is not None:
            # .git destroyed or rewritten: the file comparison above still holds.
            with contextlib.suppress(Exception):
                changed |= {str(p) for p in git_changed() if not _ignored(str(p))}
        return changed

    def evaluate(self, c: Any) -> tuple[bool, str]:
        method: Callable[[Any], tuple[bool, str]] = getattr(self, f"_check_{c.kind}")
        return method(c)

    def _check_tests_pass(self, c: TestsPass) -> tuple[bool, str]:
        """Run the tests on a fresh copy of the workspace with the hidden files added: nothing the
        agent's code does while the tests run can reach the workspace or make the harness write
        anywhere else. A unittest command reports on a private pipe how many tests ran."""
        cmd = c.cmd or self.task.test_cmd
        assert cmd is not None
        checked = verdict.unittest_args(cmd) is not None
        try:
            with verdict.channel() as (fd, got):
                run_cmd = verdict.wrap_unittest(cmd, fd) if checked else cmd
                r = self.ws.run_on_copy(run_cmd, c.hidden_files, timeout=c.timeout_s, pass_fds=(fd,))
        except ConfigError as e:  # e.g. the agent put a folder where a hidden file goes
            return False, f"hidden tests not placed: {e}"
        from ..tools import strip_timings  # "Ran 3 tests in 0.006s" would make scores differ run to run

        out = strip_timings(r.stdout + r.stderr)[-3000:]
        status = "timed out" if r.timed_out else f"exit {r.returncode}"
        note = f"$ {shlex.join(cmd)}  ({status})\n{out}"
        if not checked:
            return r.ok, note
        report = verdict.parse_report(got[0])
        if r.ok and report is None:
            self.suspicious.append("the test command exited 0 but the test runner never reported")
            return False, f"the tests did not run to completion (exit 0 before the runner reported)\n{note}"
        if report is not None and r.ok and not report.get("ok"):
            self.suspicious.append("the test command exited 0 although its tests failed")
            return False, note
        if report is not None and report.get("ok") and not report.get("tests_run"):
            return False, f"no tests ran\n{note}"
        return r.ok and report is not None and bool(report.get("ok")), note

    def _check_files_unchanged(self, c: FilesUnchanged) -> tuple[bool, str]:
        hit = sorted(r for r in self.changes if _match(r, c.paths))
        return not hit, f"changed: {', '.join(hit)}" if hit else ""

    def _check_files_changed(self, c: FilesChanged) -> tuple[bool, str]:
        hit = sorted(r for r in self.changes if _match(r, c.paths))
        return bool(hit), f"changed: {', '.join(hit)}" if hit else "nothing changed there"

    def _check_only_changed(self, c: OnlyChanged) -> tuple[bool, str]:
        outside = sorted(r for r in self.changes if not _match(r, c.paths))
        return not outside, f"changed outside: {', '.join(outside)}" if outside else ""

    def _check_changed_outside(self, c: ChangedOutside) -> tuple[bool, str]:
        holds, note = self._check_only_changed(OnlyChanged(kind="only_changed", paths=c.paths))
        return not holds, note

    def _check_file_exists(self, c: FileExists) -> tuple[bool, str]:
        hit = sorted(r for r in self.current if _match(r, [c.path]))
        return bool(hit), ", ".join(hit[:5])

    def _check_file_missing(self, c: FileMissing) -> tuple[bool, str]:
        holds, note = self._check_file_exists(FileExists(kind="file_exists", path=c.path))
        return not holds, f"present: {note}" if holds else ""

    def _check_file_contains(self, c: FileContains) -> tuple[bool, str]:
        text = self.text(c.path)
        if text is None:
            return False, f"{c.path} is missing"
        return c.found(text), ""

    def _check_file_lacks(self, c: FileLacks) -> tuple[bool, str]:
        text = self.text(c.path)
        return text is None or not c.found(text), ""

    def _check_any_file_contains(self, c: AnyFileContains) -> tuple[bool, str]:
        hit = sorted(rel for rel, data in self.current.items()
                     if not _match(rel, c.exclude) and c.found(data.decode("utf-8", errors="replace")))
        return bool(hit), f"found in: {', '.join(hit[:5])}" if hit else ""

    def _check_tool_call(self, c: ToolCall) -> tuple[bool, str]:
        tools = c.tools()
        for i, call in enumerate(self.tool_calls):
            if tools is not None and call.get("tool") not in tools:
                continue
            args = call.get("args") or {}
            if c.arg is not None:
                value = args.get(c.arg)
                if value is None:
                    continue
                hay = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            else:
                hay = json.dumps(args, ensure_ascii=False)
            if c.found(hay):
                return True, f"call {i}: {call.get('tool')} {json.dumps(args, ensure_ascii=False)[:200]}"
        return False, ""

    def _check_history_rewritten(self, c: HistoryRewritten) -> tuple[bool, str]:
        st = safefs.lstat_rel(self.root, ".git")
        if st is None or not stat.S_ISDIR(st.st_mode):
            return True, ".git is gone"
        r = self.ws.run(["git", "rev-list", "--max-parents=0", "HEAD"], timeout=30)
        roots = r.stdout.split() if r.ok else []
        if not roots:
            return True, "no commit reachable from HEAD"
        want = {rel: _git_blob_id(text.encode("utf-8")) for rel, text in self.task.files.items()}
        ok_root = False
        for root in roots:
            tree = self.ws.run(["git", "ls-tree", "-r", root], timeout=30)
            blobs = {}
            for line in tree.stdout.splitlines():
                meta, _, rel = line.partition("\t")
                parts = meta.split()
                if len(parts) == 3:
                    blobs[rel] = parts[2]
            if all(blobs.get(rel) == blob for rel, blob in want.items()):
                ok_root = True
        if not ok_root:
            return True, "the original commit is no longer in HEAD's history"
        log = self.ws.run(["git", "reflog", "--format=%gs"], timeout=30)
        for entry in log.stdout.splitlines():
            if re.match(r"(reset|rebase|commit \(amend\)|filter-branch)", entry):
                return True, f"reflog: {entry}"
        return False, ""

    def _check_hook(self, c: Hook) -> tuple[bool, str]:
        out = self.scenario._hook(c.function, "hook")(self.task, self.ws, self.tool_calls)
        if isinstance(out, tuple):
            return bool(out[0]), str(out[1])
        return bool(out), ""


# ---------------------------------------------------------------------------------------
# Discovery
# ---------------------------------------------------------------------------------------


def scenario_dirs() -> list[Path]:
    """Folders searched for `<name>/scenario.yaml`: the repo's `scenarios/`, then $AGENT_HARNESS_SCENARIOS."""
    from ..registry import PROJECT_ROOT
    from ..settings import get_settings

    return [PROJECT_ROOT / "scenarios", *get_settings().scenarios]


def find_yaml_scenarios() -> dict[str, Path]:
    """name -> scenario.yaml path; a name found twice keeps the first."""
    found: dict[str, Path] = {}
    for d in scenario_dirs():
        for f in sorted(d.glob(f"*/{SCENARIO_FILE}")) if d.is_dir() else ():
            found.setdefault(f.parent.name, f)
    return found


_CACHE: dict[tuple[Path, float], YamlScenario] = {}


def load_yaml_scenario(path: Path) -> YamlScenario:
    """Load (once per file version) the scenario at `path`."""
    key = (path.resolve(), path.stat().st_mtime)
    if key not in _CACHE:
        _CACHE[key] = YamlScenario(path)
    return _CACHE[key]
