"""`agent-harness export TRACES --to DIR --format inspect|atif`: traces in other tools' formats.

Every trace is read by the safe reader and checked (`trace_io`, `trace_check`) as for the dataset export,
secrets redacted (`secrets.redact_value`); refused files are listed, never fatal. DIR must be new or empty:
the files are written into a fresh folder beside it (`safewrite`: no link followed) that then takes its name.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from ...errors import ConfigError, HarnessError
from ...sandbox import safefs, safewrite
from ...secrets import redact_value
from ..check import check_trace
from ..files import Unreadable, report_skipped, skip_line, trace_files
from ..jsontext import parse_json
from ..model import NATIVE_HARNESS
from ..store import task_slug


def read_traces(traces: Path) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """((path from `traces`, checked trace), ...) in path order, and the skip lines of refused files."""
    found, skipped = [], []
    for rel, raw in trace_files(traces):
        try:
            if isinstance(raw, Unreadable):
                raise raw
            found.append((rel, redact_value(check_trace(parse_json(raw)))))
        except Unreadable as e:
            skipped.append(skip_line(rel, e))
    return found, skipped


def harness(trace: dict[str, Any]) -> str:
    return (trace.get("source") or {}).get("harness") or NATIVE_HARNESS


def _atif(found: list[tuple[str, dict[str, Any]]], out: safewrite.Folder) -> int:
    from .atif import check, trajectory

    names: set[str] = set()
    for rel, trace in found:
        h = harness(trace)
        parts = ([] if h == NATIVE_HARNESS else [task_slug(h)]) + [
            task_slug(trace["model"]["name"]), task_slug(trace["scenario"]), task_slug(trace["label"])]
        name = "/".join([*parts, f"run_{task_slug(trace['task_id'])}__s{trace.get('sample', 0)}"])
        if name in names:
            name = f"{name}.{task_slug(trace['run_id'])[:12]}"
        names.add(name)
        doc = trajectory(trace, rel)
        if errors := check(doc):  # a bug here, not bad input: the trace was checked
            raise HarnessError(f"the ATIF export of {rel} is not valid ATIF: {errors[0]}")
        safewrite.write_file(out.path, f"{name}.atif.json",
                             json.dumps(doc, ensure_ascii=False, indent=1).encode("utf-8", "replace"))
    return len(names)


def _inspect(found: list[tuple[str, dict[str, Any]]], out: safewrite.Folder) -> int:
    from .inspect_log import write_log

    groups: dict[tuple[str, str, str, str, str], list[dict[str, Any]]] = {}
    for _, trace in found:  # a model under another tool protocol is another arm: a log of its own
        key = (harness(trace), trace["model"]["name"], trace["scenario"], trace["label"],
               str((trace.get("agent") or {}).get("protocol")))
        groups.setdefault(key, []).append(trace)
    for group in groups.values():
        seen: set[tuple[str, int]] = set()  # (id, epoch) is a sample's key in a log: a repeat goes to its own log
        first: list[dict[str, Any]] = []
        rest: list[dict[str, Any]] = []
        for t in sorted(group, key=lambda t: (t["task_index"], t["task_id"], t.get("sample", 0))):
            sample_key = (t["task_id"], t.get("sample", 0))
            (rest if sample_key in seen else first).append(t)
            seen.add(sample_key)
        write_log(first, out)
        if rest:
            write_log(rest, out)
    return len(groups)


def export(traces: Path, to: Path, fmt: str) -> tuple[int, int]:
    """Write the traces under `traces` to the new folder `to` as `fmt`; returns (episodes, files or logs)."""
    if not traces.is_dir():
        raise ConfigError(f"{traces}: traces folder not found")
    if os.path.lexists(to) and (to.is_symlink() or not to.is_dir() or any(to.iterdir())):
        raise ConfigError(f"{to}: exists and is not an empty folder (choose a new --to)")
    found, skipped = read_traces(traces)
    report_skipped(skipped)
    if not found:
        why = f" ({len(skipped)} skipped)" if skipped else ""
        raise ConfigError(f"{traces}: no readable run_*.json traces{why}")
    to.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{to.name}.partial-", dir=to.parent))
    try:
        os.chmod(tmp, 0o755)
        folder = safewrite.Folder(tmp).create()
        files = _atif(found, folder) if fmt == "atif" else _inspect(found, folder)
        safewrite.move_into_place(tmp, to)
    except BaseException:
        safefs.remove_tree(tmp)
        raise
    return len(found), files
