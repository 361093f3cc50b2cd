"""Traces as DataFrames: `load_traces` reads a folder of traces into one row per episode and one per step,
with the steps' embeddings as one float32 matrix; `reread` reads one trace of it again.

Every file goes through the safe reader (`trace_io`) and the model check (`trace_check`); refused files are
skipped and listed, never fatal. `agent_harness.traces.store` re-exports the public names.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .check import MAX_EMBEDDING_DIM, check_trace, validate_trace
from .files import MAX_TRACE_BYTES, Unreadable, skip_line, trace_files
from .jsontext import MAX_DEPTH, parse_json, too_deep
from .model import LOADER_REQUIRED, STEP_KEYS
from .model import RUN_COLUMNS as RUN_SPEC
from .model import STEP_COLUMNS as STEP_SPEC

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd


@dataclass
class TraceFrames:
    """Traces as DataFrames: one row per episode (`runs`) and one per step (`steps`).

    `embeddings` is a float32 matrix with one row per row of `steps` (same order); a step without
    an embedding (``--no-embed`` runs, or a vector of another size) has a row of NaN and
    ``steps.has_embedding`` False. Its width is 0 when no step has an embedding.
    """

    runs: pd.DataFrame
    steps: pd.DataFrame
    skipped: list[str] = field(default_factory=list)  # "path: reason" for refused files (printable)
    embeddings: np.ndarray = field(default_factory=lambda: _empty_matrix(0))
    root: str = ""  # the folder loaded; `runs.path` lies under it (read a trace again with `reread`)


RUN_COLUMNS = list(RUN_SPEC)  # one row per episode; trace_model.RUN_COLUMNS says what each reads
STEP_COLUMNS = [*STEP_KEYS, *STEP_SPEC]


def _getter(path: str, default: Any) -> Callable[[dict[str, Any]], Any]:
    """Read `path` (dotted) from a trace or step; a field in LOADER_REQUIRED raises KeyError when missing."""
    keys = path.split(".")
    walk = [(k, ".".join(keys[:n + 1]) in LOADER_REQUIRED) for n, k in enumerate(keys[:-1])]
    leaf, required = keys[-1], path in LOADER_REQUIRED

    def get(data: dict[str, Any]) -> Any:
        for k, must in walk:
            data = data[k] if must else (data.get(k) or {})
        return data[leaf] if required else data.get(leaf, default)

    return get


_RUN_GET = {name: _getter(c.field, c.default) for name, c in RUN_SPEC.items() if c.field}
_STEP_GET = {name: _getter(c.field, c.default) for name, c in STEP_SPEC.items() if c.field}


# A step's embedding array, cut out of the raw JSON so that its floats are parsed in bulk (pandas'
# C float parser) rather than as one Python float each: that is most of the load time. The
# preceding `{` or `,` proves the match is a key (inside a JSON string every quote is escaped).
# json.loads never sees these bytes: what pandas cannot read as finite float32s is no vector (see flush).
_EMBEDDING = re.compile(rb'([{,]"embedding":)\[(-?[0-9][-+0-9.eE,]*)\]')
_FLUSH_BYTES = 32 << 20


def _empty_matrix(dim: int) -> np.ndarray:
    import numpy as np

    return np.zeros((0, dim), dtype=np.float32)


def _parse(raw: bytes, cut: bool) -> tuple[dict[str, Any], list[bytes]]:
    """The trace, checked, with each step's embedding replaced by the index of its raw array in the list."""
    if not cut:
        return check_trace(parse_json(raw)), []
    arrays: list[bytes] = []

    def take(m: re.Match[bytes]) -> bytes:
        arrays.append(m.group(2))
        return m.group(1) + b"%d" % (len(arrays) - 1)

    cut_raw = _EMBEDDING.sub(take, raw)
    # The cut takes out leaf arrays only (never inside a string: there every quote is escaped), one level.
    if too_deep(cut_raw, MAX_DEPTH - 1) and too_deep(raw):
        raise Unreadable(f"JSON nested deeper than {MAX_DEPTH}")
    data = parse_json(cut_raw, depth_checked=True)
    steps = data.get("steps") if isinstance(data, dict) else None
    marks = [s.get("embedding") for s in steps if isinstance(s, dict)] if isinstance(steps, list) else []
    if [m for m in marks if type(m) is int] != list(range(len(arrays))):
        return check_trace(parse_json(raw)), []  # a numeric "embedding" list outside a step (in tool args?)
    return check_trace(data, cut=True), arrays


def _rows(path: Path, data: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    steps = data["steps"]
    run = {name: get(data) for name, get in _RUN_GET.items()}
    if "num_steps" not in data["outcome"]:
        run["num_steps"] = len(steps)
    turns = [s.get("turn") or 0 for s in steps if s.get("type") not in ("initial_tests", "restart")]  # no model turns
    details = data["outcome"].get("score_details") or {}
    run.update(path=str(path), turns_used=max(turns, default=-1) + 1, suspicious=_reason(details.get("suspicious")),
               parse_errors=sum(s["type"] == "parse_error" for s in steps),
               tool_calls=sum(s["type"] == "tool_call" for s in steps), settings=settings_json(data.get("agent")))
    keys = {k: run[k] for k in STEP_KEYS}
    return {name: run[name] for name in RUN_COLUMNS}, [_step_row(keys, s) for s in steps]


# Agent fields that are no configuration of the strategy: its names, the protocol (a column of its own), and how
# many episodes ran at once.
NOT_SETTINGS = frozenset(("mode", "strategy", "protocol", "tool_choice", "concurrency"))


def settings_json(agent: Any) -> str:
    """A trace's `agent` as canonical JSON without `NOT_SETTINGS` and nulls: equal for two runs of one
    configuration, whatever order or harness wrote them."""
    if not isinstance(agent, dict):
        return "{}"
    kept = {k: v for k, v in agent.items() if k not in NOT_SETTINGS and v is not None}
    return json.dumps(kept, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _reason(value: Any) -> str | None:
    """`score_details.suspicious` as text: the scorer writes its reason; any other true value counts too."""
    if not value:
        return None
    return value if isinstance(value, str) else "yes" if value is True else json.dumps(value)[:200]


def _step_row(keys: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    return {**keys, **{name: get(s) for name, get in _STEP_GET.items()}, "embedding": s.get("embedding")}


def _vector(raw: bytes, length: int) -> np.ndarray:
    """One cut-out array as float32, or a row of NaN (no vector) when it is not a list of JSON numbers."""
    import numpy as np

    try:
        with np.errstate(over="ignore"):
            return np.asarray(json.loads(b"[" + raw + b"]", parse_constant=float), dtype=np.float32)
    except ValueError:
        return np.full(length, np.nan, dtype=np.float32)


class _Embeddings:
    """Collects step embeddings (raw JSON arrays or lists) and turns them into one float32 matrix.

    The matrix width is the most common vector length; steps whose vector has another length
    (another embedding model) get a NaN row, as do steps without one.
    """

    def __init__(self) -> None:
        self.n = 0
        self.blocks: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}  # length -> [(rows, vectors)]
        self.pending: dict[int, list[tuple[int, bytes | list[float]]]] = {}
        self.pending_bytes = 0

    def add(self, value: object) -> None:
        """Queue the next step's vector (a raw JSON array, a list, or nothing)."""
        row, self.n = self.n, self.n + 1
        if isinstance(value, bytes):
            length = value.count(b",") + 1
        elif isinstance(value, list) and value:
            length = len(value)
        else:
            return
        if length > MAX_EMBEDDING_DIM:  # the matrix is steps × dim: one such vector must not size it
            return
        self.pending_bytes += len(value) if isinstance(value, bytes) else 0
        self.pending.setdefault(length, []).append((row, value))
        if self.pending_bytes > _FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        import io

        import numpy as np
        import pandas as pd

        for length, items in self.pending.items():
            raw = [(r, v) for r, v in items if isinstance(v, bytes)]
            lists = [(r, v) for r, v in items if not isinstance(v, bytes)]
            if raw:
                csv = io.BytesIO(b"\n".join(v for _, v in raw))
                try:
                    vecs = pd.read_csv(csv, header=None, dtype=np.float32, engine="c").to_numpy()
                except (ValueError, OverflowError):  # a malformed number (such as 1-2) somewhere: one at a time
                    vecs = np.stack([_vector(v, length) for _, v in raw])
                self.blocks.setdefault(length, []).append((np.array([r for r, _ in raw]), vecs))
            if lists:
                with np.errstate(over="ignore"):  # beyond float32: inf, a row `matrix` drops
                    vecs = np.asarray([v for _, v in lists], dtype=np.float32)
                self.blocks.setdefault(length, []).append((np.array([r for r, _ in lists]), vecs))
        self.pending, self.pending_bytes = {}, 0

    def matrix(self) -> tuple[np.ndarray, np.ndarray]:
        """(n × dim float32 matrix, which rows hold a vector)."""
        import numpy as np

        self.flush()
        has = np.zeros(self.n, dtype=bool)
        if not self.blocks:
            return np.zeros((self.n, 0), dtype=np.float32), has
        dim = max(self.blocks, key=lambda k: sum(len(r) for r, _ in self.blocks[k]))
        out = np.full((self.n, dim), np.nan, dtype=np.float32)
        for rows, vecs in self.blocks[dim]:
            out[rows] = vecs
            has[rows] = True
        bad = has & ~np.isfinite(out).all(axis=1)  # a value beyond float32 (1e39): no usable vector
        out[bad] = np.nan
        return out, has & ~bad


def load_traces(root: str | os.PathLike[str], validate: bool = False) -> TraceFrames:
    """Load every ``run_*.json`` under `root` into DataFrames; refused files are skipped and listed.

    Files are read by the safe reader (`trace_io`: regular files only, no symlink followed, size and
    nesting caps, finite numbers) and checked against the trace model (`trace_check`: types, ranges,
    required fields, a known ``schema_version``); with `validate` they must also pass the JSON schema.
    Step embeddings go to ``TraceFrames.embeddings``.
    """
    import pandas as pd

    runs: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []
    skipped: list[str] = []
    emb = _Embeddings()
    for rel, raw in trace_files(root):
        path = Path(root) / rel
        try:
            if isinstance(raw, Unreadable):
                raise raw
            data, arrays = _parse(raw, cut=not validate)
            if validate and (errs := validate_trace(data)):
                raise Unreadable(errs[0])
            run, step_rows = _rows(path, data)
        except Unreadable as e:
            skipped.append(skip_line(path, e))
            continue
        runs.append(run)
        for row in step_rows:
            value = row.pop("embedding")
            emb.add(arrays[value] if type(value) is int and 0 <= value < len(arrays) else value)
        steps.extend(step_rows)
    matrix, has = emb.matrix()
    frame = pd.DataFrame(steps, columns=STEP_COLUMNS)
    frame["has_embedding"] = has
    return TraceFrames(pd.DataFrame(runs, columns=RUN_COLUMNS), frame, skipped, matrix, str(root))


def reread(frames: TraceFrames, path: str) -> dict[str, Any] | None:
    """The trace at `path` (a `runs.path` of `frames`) read again, as safely as `load_traces` read it;
    None when it is gone or now refused (it may have been swapped for a link since)."""
    from .files import read_rel

    try:
        rel = Path(path).relative_to(frames.root).as_posix()
        return check_trace(parse_json(read_rel(frames.root, rel, MAX_TRACE_BYTES)))
    except (ValueError, Unreadable):  # ValueError: not under the root
        return None
