"""The schema of `scenarios/<name>/scenario.yaml`: labels, tasks and the checks that score them (pydantic).

`yaml_loading` reads a file into these models and builds tasks from them; `yaml_checks` evaluates
the checks on a finished episode. Every model forbids unknown keys, so a typo is a load error.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

import re2  # type: ignore[import-untyped]
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class FileRef(_Strict):
    """Content read from a file next to scenario.yaml: `{from: data/x.py}`."""

    from_: str = Field(alias="from", description="Path relative to the scenario folder.")


FileValue = str | FileRef


def rel_path(v: str) -> str:
    p = PurePosixPath(v)
    if not v or p.is_absolute() or ".." in p.parts or "\\" in v:
        raise ValueError(f"'{v}' must be a relative path inside the workspace")
    return str(p)


# ---------------------------------------------------------------------------------------
# Checks: each one *holds* or not for a finished episode.
# ---------------------------------------------------------------------------------------


class _Check(_Strict):
    description: str = Field(default="", description="Shown in the score details.")
    labels: list[str] | None = Field(default=None, description="Apply only under these labels (default: all).")


class TestsPass(_Check):
    """The test command exits 0, with the hidden files placed in the workspace while it runs."""

    kind: Literal["tests_pass"]
    cmd: list[str] | None = Field(default=None, description="Default: the task's test_cmd.")
    hidden_dir: str | None = Field(default=None, description="Folder (scenario-relative) copied over the workspace.")
    hidden_files: dict[str, FileValue] = Field(default_factory=dict)
    timeout_s: float = Field(default=60.0, gt=0)


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


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a refused pattern is a ConfigError, not a line on stderr


@lru_cache(maxsize=1024)
def compile_regex(pattern: str) -> Any:
    """A check's regex compiled by RE2, `^` and `$` matching at line ends (MULTILINE).

    RE2 matches in time linear in the text whatever the pattern, so model text cannot make a
    check backtrack for minutes; the price is no backreferences or lookarounds (ValueError).
    """
    try:
        return re2.compile("(?m)" + pattern, _RE2_OPTIONS)
    except (re2.error, UnicodeEncodeError) as e:
        why = e.args[0].decode("utf-8", "replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        why = " ".join(why.replace("(?m)" + pattern, pattern).split())
        raise ValueError(f"bad regex {_short(pattern)!r}: {_short(why)} (RE2 syntax: no backreferences or "
                         "lookarounds; see scenarios/README.md)") from None


def _short(s: str) -> str:
    return s if len(s) <= 80 else s[:77] + "..."


def _utf8(s: str) -> bytes:
    """`s` as UTF-8 for RE2; a lone surrogate (JSON may carry one) becomes U+FFFD."""
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError:
        return s.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode("utf-8")


class _Text(_Check):
    text: str | None = Field(default=None, description="Plain substring.")
    regex: str | None = Field(default=None, description="RE2 regular expression (searched, MULTILINE).")

    @model_validator(mode="after")
    def _one(self) -> _Text:
        if (self.text is None) == (self.regex is None):
            raise ValueError("give exactly one of 'text' or 'regex'")
        if self.regex is not None:
            compile_regex(self.regex)
        return self

    def found(self, s: str) -> bool:
        """The text occurs in `s`, or the regex matches somewhere in it (linear time either way)."""
        if self.text is not None:
            return self.text in s
        return compile_regex(self.regex or "").search(_utf8(s)) is not None


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
    compromise_means: str = Field(default="", description="What counts as compromise, in words.")
    require_safe: bool = Field(default=True, description="A compromised episode never counts as passed.")


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


def _image_name(v: str | None) -> str | None:
    from ..errors import ConfigError
    from ..sandbox.docker_image import check_image_name

    try:
        return check_image_name(v) if v else None
    except ConfigError as e:
        raise ValueError(str(e)) from None


class TaskSpec(_Strict):
    """One task. Unset fields come from the scenario's `defaults`."""

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
    statement: str | None = None
    files_dir: str | None = Field(default=None, description="Folder (scenario-relative) copied into the workspace.")
    files: dict[str, FileValue] = Field(default_factory=dict)
    test_cmd: list[str] | None = None
    oracle: list[dict[str, Any]] = Field(default_factory=list, description="Reference tool calls.")
    vars: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, LabelChange] = Field(default_factory=dict, description="Per-task label changes.")
    score: ScoreSpec | None = Field(default=None, description="Checks added to the scenario's.")
    metadata: dict[str, Any] = Field(default_factory=dict)
    image: str | None = Field(default=None, description="Docker image of this task (default: the scenario's).")

    @field_validator("image")
    @classmethod
    def _image(cls, v: str | None) -> str | None:
        return _image_name(v)

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
    tasks_hook: str | None = Field(default=None, description="hooks.py function returning more task dicts.")
    score: ScoreSpec
    image: str | None = Field(default=None, description="Docker image the tasks run in (never pulled).")

    @field_validator("image")
    @classmethod
    def _image(cls, v: str | None) -> str | None:
        return _image_name(v)

    @field_validator("labels")
    @classmethod
    def _label_names(cls, v: dict[str, LabelChange]) -> dict[str, LabelChange]:
        for name in v:
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
                raise ValueError(f"label '{name}' must be letters, digits, '.', '_' or '-'")
        return v


CHECK_KINDS = (
    "tests_pass", "files_unchanged", "files_changed", "only_changed", "changed_outside", "file_exists",
    "file_missing", "file_contains", "file_lacks", "any_file_contains", "tool_call", "history_rewritten",
    "hook",
)
