"""Loading a scenario.yaml: read and validate it, substitute variables, build the tasks of each label.

`{{name}}` in strings is replaced by a variable: the scenario's and the task's `vars`, the
label's `vars`, and the built-ins `id` and `label`. In file contents, unknown names are left as
they are (code may contain braces); elsewhere they are errors. Every task is built under every
label at load time, so a bad file fails when it is loaded, with the file and the key on one line.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ..errors import ConfigError, validation_error
from ..types import ScoreResult, Task
from ..yaml_file import read_yaml
from .yaml_checks import CheckState, ignored, score_checks
from .yaml_schema import (
    CHECK_KINDS,
    FileValue,
    Hook,
    LabelChange,
    ScenarioSpec,
    ScoreSpec,
    TaskSpec,
    TestsPass,
    rel_path,
)

if TYPE_CHECKING:
    from ..sandbox.workspace import Workspace
    from .base import TaskQuery

SCENARIO_FILE = "scenario.yaml"
HOOKS_FILE = "hooks.py"
_VAR = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


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
            raise validation_error(self.path, e, data, tagged="check", kinds=CHECK_KINDS) from None
        self.description = self.spec.description
        self.labels: tuple[str, ...] = tuple(self.spec.labels)
        self._task_specs = self._all_task_specs()
        self._checks: dict[tuple[str, str], tuple[list[Any], list[Any]]] = {}
        self._tasks: dict[str, list[Task]] = {}
        self._validate_references()

    # -- reading -------------------------------------------------------------------------
    def _read_yaml(self) -> Any:
        data = read_yaml(self.path, "scenario")
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
                    tid = item.get("id", i) if isinstance(item, dict) else i
                    raise validation_error(f"{self.path}: tasks_hook[{tid}]", e, item, tagged="check",
                                           kinds=CHECK_KINDS) from None
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
            if p.is_file() and not ignored(rel):
                out[rel] = self._read_ref(str(p.relative_to(self.dir)), key)
        return out

    def _files(self, files: dict[str, FileValue], vars_: dict[str, str], key: str) -> dict[str, str]:
        out: dict[str, str] = {}
        for rel, value in files.items():
            try:
                rel = rel_path(_subst(rel, vars_, True, f"{key}.{rel}", self.path))
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
                          "compromise_means": self.spec.score.compromise_means,
                          **({"image": t.image or self.spec.image} if t.image or self.spec.image else {})},
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
            try:  # a variable's value can break the check, e.g. a regex RE2 refuses
                check = type(check).model_validate(data)
            except ValidationError as e:
                raise ConfigError(f"{self.path}: {key}: {e.errors()[0]['msg'].removeprefix('Value error, ')}"
                                  ) from None
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
        state = CheckState(task, ws, tool_calls, lambda name: self._hook(name, "hook"))
        score = self.spec.score
        return score_checks(pass_checks, compromise_checks, state, score.require_safe, score.compromise_means)
