"""`agent-harness import SRC --to TRACES`: other harnesses' episodes as traces of this project's model.

SRC is a file or a folder (walked without following a link; `*.json` and `*.eval` are read). Each file's
format is told from its name and content (ATIF: `schema_version` ATIF-v1.x; mini-swe-agent:
`trajectory_format` or `info.mini_version`; Inspect: an `.eval` archive or a JSON log), unless `--format`
names one. Each episode becomes `TRACES/<harness>/<model>/<scenario>/<label>/run_<task>__s<K>.json`, with
`source` in its header (format, file, sha256, harness); an episode already imported from the same file is
left as it is. A file that cannot be read, is malformed or hostile is one skip line, and the rest goes on.

Task ids: what the file says (an ATIF export's header, mini's `instance_id`, an Inspect sample id), else
the file's name (`Python-0.traj.json`); with `--scenario` naming a registered scenario, a name that is one
of its tasks' slugs (`Python-0`) becomes that task's id (`Python/0`), so imported episodes pair with this
project's own. Verdicts: the file's own (our exports, Inspect scores) unless `--verdicts FILE` gives them
(SWE-bench style `resolved_ids` / `unresolved_ids`, or an object of task id -> true/false).
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from ...errors import ConfigError, HarnessError
from ..files import MAX_SMALL_BYTES, Unreadable, skip_line
from ..jsontext import read_json
from ..store import read_trace, task_slug, task_slugs, write_json_atomic
from . import atif, inspect_log, mini
from ._episode import Episode, embed, to_trace
from ._read import json_object, source_files

FORMATS = ("auto", "atif", "inspect", "mini")
GENERIC = frozenset({"trajectory", "traj", "agent", "logs", "trajectories", "trajectory.atif", "atif"})
MAX_ATTEMPTS = 10_000  # sample numbers tried for one episode's file name
_OWN_NAME = re.compile(r"run_(.+)__s[0-9]+")


@dataclass
class Imported:
    """What an import did: traces written, episodes already there, skip lines, files in no known format."""

    written: list[Path] = field(default_factory=list)
    already: int = 0
    skipped: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)


def load_verdicts(path: Path) -> dict[str, bool]:
    """Task id -> passed, from a SWE-bench style report or a plain object (ConfigError when it is neither)."""
    try:
        data = read_json(path, MAX_SMALL_BYTES, finite=True)
    except Unreadable as e:
        raise ConfigError(f"--verdicts {skip_line(path, e)}") from None
    if isinstance(data, dict) and ("resolved_ids" in data or "unresolved_ids" in data):
        out = {str(t): False for t in data.get("unresolved_ids") or [] if isinstance(t, str | int)}
        out.update({str(t): True for t in data.get("resolved_ids") or [] if isinstance(t, str | int)})
        return out
    if isinstance(data, dict):
        named = {"passed": True, "resolved": True, "failed": False, "unresolved": False}
        out = {}
        for k, v in data.items():
            ok = v if isinstance(v, bool) else named.get(v) if isinstance(v, str) else (
                v == 1 if isinstance(v, int) and v in (0, 1) else None)
            if ok is not None:
                out[k] = ok
        return out
    raise ConfigError(f"--verdicts {path}: expected resolved_ids/unresolved_ids or an object of task id -> true/false")


def task_from_path(rel: str) -> str:
    """A task id from where a file lies: its name without the suffixes, or the first folder above that is not
    a generic name (Harbor keeps `<trial>/agent/trajectory.json`)."""
    parts = PurePosixPath(rel).parts
    for part in reversed(parts):
        stem = part.removesuffix(".json").removesuffix(".traj").removesuffix(".atif").removesuffix(".eval")
        if ours := _OWN_NAME.fullmatch(stem):  # run_<task slug>__s<sample>, as our exports name files
            return ours[1]
        if stem and stem not in GENERIC:
            return stem
    return "unknown"


def _scenario_ids(scenario: str | None, label: str | None) -> dict[str, str]:
    """Slug -> task id of a registered scenario (empty when there is none by that name or it cannot load)."""
    if not scenario:
        return {}
    from ...scenarios import TaskQuery, get_scenario, scenario_names

    if scenario not in scenario_names():
        return {}
    try:
        ids = [t.id for t in get_scenario(scenario).load_tasks(TaskQuery(label=label or "gold"))]
    except HarnessError:
        return {}
    return {slug: t for t, slug in task_slugs(ids).items()}


def _episodes(rel: str, raw: bytes, fmt: str) -> list[Episode] | None:
    """The episodes of one file; None when it holds no format this reads (or not the one `fmt` names)."""
    if rel.endswith(".eval"):
        return inspect_log.episodes(raw, rel) if fmt in ("auto", "inspect") else None
    data = json_object(raw)
    task = task_from_path(rel)
    if atif.is_atif(data) and fmt in ("auto", "atif"):
        return [atif.episode(data, task)]
    if mini.is_mini(data) and fmt in ("auto", "mini"):
        return [mini.episode(data, task)]
    if isinstance(data.get("eval"), dict) and fmt in ("auto", "inspect"):
        return inspect_log.episodes(raw, rel)
    return None


def _place(to: Path, trace: dict[str, Any]) -> Path | None:
    """Where the trace goes: the first free sample number from its own; None when the same episode of the
    same file is already there."""
    source = trace["source"]
    folder = to.joinpath(*(task_slug(str(x)) for x in (source["harness"], trace["model"]["name"], trace["scenario"],
                                                        trace["label"])))
    slug = task_slug(trace["task_id"])
    for k in range(trace["sample"], trace["sample"] + MAX_ATTEMPTS):
        path = folder / f"run_{slug}__s{k}.json"
        if not os.path.lexists(path):
            trace["sample"] = k
            return path
        old = read_trace(path)
        held = (old or {}).get("source") or {}
        if (held.get("sha256"), held.get("episode")) == (source["sha256"], source["episode"]):
            return None
    raise Unreadable(f"{MAX_ATTEMPTS} episodes of task {trace['task_id']!r} already there")


def import_traces(src: Path, to: Path, fmt: str = "auto", scenario: str | None = None, label: str | None = None,
                  verdicts: dict[str, bool] | None = None, embedder: Any = None) -> Imported:
    """Import every episode under `src` into the traces folder `to` (see the module docstring)."""
    if not os.path.lexists(src):
        raise ConfigError(f"{src}: not found")
    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt}: expected one of {', '.join(FORMATS)}")
    slugs = _scenario_ids(scenario, label)
    verdicts = verdicts or {}
    done = Imported()
    to.mkdir(parents=True, exist_ok=True)  # the folder the user named, as given
    for rel, raw in source_files(src):
        try:
            if isinstance(raw, Unreadable):
                raise raw
            found = _episodes(rel, raw, fmt)
            if found is None:
                done.ignored.append(skip_line(rel, "no trajectory format this reads" if fmt == "auto" else
                                              f"not {fmt}"))
                continue
            sha = hashlib.sha256(raw).hexdigest()
            traces = []
            for ep in found:
                named = ep.task_id
                ep.task_id = slugs.get(named, named)
                verdict = verdicts.get(ep.task_id, verdicts.get(named))  # by task id, or as the file named it
                traces.append(to_trace(ep, file=rel, sha256=sha, scenario=scenario, label=label, verdict=verdict))
        except HarnessError:
            raise
        except Unreadable as e:
            done.skipped.append(skip_line(rel, e))
            continue
        except Exception as e:  # a shape no check foresaw: the file is skipped, the import goes on
            done.skipped.append(skip_line(rel, f"{type(e).__name__}: {str(e)[:200]}"))
            continue
        for trace in traces:
            try:
                path = _place(to, trace)
            except Unreadable as e:
                done.skipped.append(skip_line(rel, e))
                continue
            if path is None:
                done.already += 1
                continue
            embed(trace, embedder)
            write_json_atomic(path, trace, root=to)
            done.written.append(path)
    return done
