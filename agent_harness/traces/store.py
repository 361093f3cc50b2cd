"""JSON traces: one file per episode, written atomically after every step, loadable in one call.

Layout: ``<out>/<model>/<scenario>/<label>/run_<task>__s<K>.json`` where <task> is a filename-safe
slug of the task id (``Python/5`` → ``run_Python-5__s0.json``) and K the sample, so inserting a task
moves no other task's file. Schema 1.0-1.2 traces were named ``run_NNN.json`` by task position; they
still load.
The format is defined by `model.Trace`; ``trace_schema.json`` next to this module is generated from it.
Loading a folder into DataFrames is `trace_frames` (re-exported here: `load_traces`, `TraceFrames`).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any, Literal, get_args

from ..sandbox import safewrite
from .check import SCHEMA_PATH, check_trace, validate_trace
from .files import MAX_TRACE_BYTES, Unreadable, read_path, skip_line
from .frames import RUN_COLUMNS, STEP_COLUMNS, TraceFrames, load_traces, reread
from .jsontext import encode_json, parse_json
from .model import READABLE_VERSIONS, SCHEMA_VERSION, StepType

__all__ = ["READABLE_VERSIONS", "RUN_COLUMNS", "SCHEMA_PATH", "SCHEMA_VERSION", "STEP_COLUMNS", "STEP_TYPES",
           "TraceFrames", "load_traces", "reread", "validate_trace"]

STEP_TYPES = get_args(StepType)


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
MAX_SLUG = 80


def task_slug(task_id: str) -> str:
    """A filename-safe form of a task id: runs of other characters become '-' (``Python/5`` → ``Python-5``)."""
    slug = _UNSAFE.sub("-", task_id).strip("-.")
    if len(slug) > MAX_SLUG or not slug:
        slug = f"{slug[:MAX_SLUG]}.{hashlib.sha256(task_id.encode()).hexdigest()[:8]}".lstrip(".")
    return slug


def task_slugs(task_ids: Iterable[str]) -> dict[str, str]:
    """Each id's slug; ids whose slugs collide each get a hash of the id appended (order does not matter)."""
    ids = set(task_ids)
    by_slug: dict[str, list[str]] = {}
    for t in ids:
        by_slug.setdefault(task_slug(t), []).append(t)
    return {t: slug if len(same) == 1 else f"{slug}.{hashlib.sha256(t.encode()).hexdigest()[:8]}"
            for slug, same in by_slug.items() for t in same}


def _folder_suffixes(strategy: str, protocol: str, tool_choice: str) -> tuple[str, str]:
    """What a trace folder's name adds to its scenario: "-<strategy>" (none for react), then "-native" (and
    "-required" with tool_choice required) under the native protocol, so a model's strategies and protocols
    never mix."""
    native = "-native" + ("-required" if tool_choice == "required" else "") if protocol == "native" else ""
    return "" if strategy == "react" else f"-{strategy}", native


def scenario_folder(scenario: str, strategy: str, protocol: str = "text", tool_choice: str = "auto") -> str:
    """The trace folder of `strategy`'s episodes on `scenario` (also each such trace's `scenario`)."""
    return scenario + "".join(_folder_suffixes(strategy, protocol, tool_choice))


def task_scenario(folder: str, strategy: str, protocol: str = "text", tool_choice: str = "auto") -> str:
    """`scenario_folder` undone: the scenario whose tasks a trace folder holds (`folder` itself where the
    suffixes are not there, as in an imported episode's)."""
    for suffix in reversed(_folder_suffixes(strategy, protocol, tool_choice)):
        if suffix and folder.endswith(suffix) and len(folder) > len(suffix):
            folder = folder[:-len(suffix)]
    return folder


def trace_path(out: Path, model: str, scenario: str, label: str, slug: str, sample: int = 0) -> Path:
    """Where an episode's trace lives; `slug` comes from `task_slugs` (or `task_slug`)."""
    return Path(out) / model / scenario / label / f"run_{slug}__s{sample}.json"


def write_json_atomic(path: Path, data: Any, root: Path | None = None) -> None:
    """Write JSON so that a crash at any moment leaves either the old or the new file; what is written
    is always what the safe reader takes (`trace_io.encode_json`). Below `root` (the folder the user
    named; default: the file's own folder) no link is followed and nothing planted is written through
    (`safewrite`): a link or non-folder in the way raises `UnsafePath`."""
    raw = encode_json(data)
    base = Path(root) if root is not None else path.parent
    safewrite.write_file(base, path.relative_to(base), raw, mode=0o600)


@cache
def harness_version() -> str:
    """Package version plus the git sha of the checkout (and '+dirty' when modified)."""
    from .. import __version__

    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=5,
        ).stdout.strip()
        return f"{__version__}+g{sha}{'.dirty' if dirty else ''}"
    except (OSError, subprocess.SubprocessError):
        return __version__


ResumeStatus = Literal["reuse", "changed", "incomplete", "new"]


# An episode a bad server reply ended has no verdict (outcome.score_error of this type): --resume redoes it.
BACKEND_FAULT = "BackendError"
UNSCORED_BACKEND = ("not scored: the backend failed this episode's request (a bad server reply or a backend fault, "
                    "outcome.error); --resume runs it again")


def resume_status(path: Path, fingerprint: str) -> ResumeStatus:
    """What `--resume` does with the trace at `path` for an episode whose fingerprint hash is `fingerprint`.

    "reuse": complete and made with the same configuration; "changed": complete, but another
    configuration (or an older schema without a fingerprint); "incomplete": unreadable, unfinished, or
    ended by a server fault; "new": no trace yet.
    """
    if not os.path.lexists(path):
        return "new"
    data = read_trace(path, "resume: redoing")
    if data is None or not data["outcome"].get("completed"):
        return "incomplete"
    if (data["outcome"].get("score_error") or {}).get("type") == BACKEND_FAULT:
        return "incomplete"
    stored = data.get("fingerprint")
    return "reuse" if isinstance(stored, dict) and stored.get("hash") == fingerprint else "changed"


def read_trace(path: Path, doing: str = "") -> dict[str, Any] | None:
    """The trace at `path` read by the safe reader and checked (`trace_check`); None when there is none
    or it is refused, which with `doing` is said in one line on stderr ("<doing> <path>: <why>")."""
    try:
        return check_trace(parse_json(read_path(path, MAX_TRACE_BYTES)))
    except Unreadable as e:
        if doing and os.path.lexists(path):
            print(f"{doing} {skip_line(path, e)}", file=sys.stderr)
        return None


def set_aside(path: Path, root: Path | None = None) -> Path | None:
    """Keep the complete trace at `path` out of the way of a new episode: renamed to
    `<name>.superseded-<its fingerprint>` (not `run_*.json`, so no loader reads it as this run's).

    Returns where it went, or None when `path` holds no complete trace (nothing there, unreadable,
    or unfinished: a killed run's partial trace is redone, as `--resume` does). Below `root` no link is
    followed (`safewrite.rename_in`).
    """
    data = read_trace(path, "replacing")
    if data is None or not data["outcome"].get("completed"):
        return None
    fingerprint = data.get("fingerprint")
    tag = _UNSAFE.sub("-", fingerprint["hash"][:12]) if isinstance(fingerprint, dict) else "unfingerprinted"
    dest = path.with_name(f"{path.name}.superseded-{tag}")
    n = 1
    while os.path.lexists(dest):
        n += 1
        dest = path.with_name(f"{path.name}.superseded-{tag}-{n}")
    base = Path(root) if root is not None else path.parent
    safewrite.rename_in(base, str(path.parent.relative_to(base)), path.name, dest.name)
    return dest
