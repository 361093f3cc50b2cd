"""JSON traces: one file per episode, written atomically after every step, loadable in one call.

Layout: ``<out>/<model>/<scenario>/<label>/run_<task>__s<K>.json`` where <task> is a filename-safe
slug of the task id (``Python/5`` → ``run_Python-5__s0.json``) and K the sample, so inserting a task
moves no other task's file. Schema 1.0-1.2 traces were named ``run_NNN.json`` by task position; they
still load.
The format is defined by `trace_model.Trace`; ``trace_schema.json`` next to this module is generated from it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from .text import safe_text
from .trace_model import LOADER_REQUIRED, READABLE_VERSIONS, SCHEMA_VERSION, STEP_KEYS, StepType
from .trace_model import RUN_COLUMNS as RUN_SPEC
from .trace_model import STEP_COLUMNS as STEP_SPEC

__all__ = ["READABLE_VERSIONS", "SCHEMA_VERSION", "STEP_TYPES", "TraceFrames", "load_traces", "validate_trace"]

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

SCHEMA_PATH = Path(__file__).with_name("trace_schema.json")  # generated from trace_model
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


def trace_path(out: Path, model: str, scenario: str, label: str, slug: str, sample: int = 0) -> Path:
    """Where an episode's trace lives; `slug` comes from `task_slugs` (or `task_slug`)."""
    return Path(out) / model / scenario / label / f"run_{slug}__s{sample}.json"


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that a crash at any moment leaves either the old or the new file."""
    # dumps() uses the C encoder; dump() streams through the pure-Python one (several times slower).
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from the model (a JSON escape like \ud800)
        raw = safe_text(text).encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@cache
def harness_version() -> str:
    """Package version plus the git sha of the checkout (and '+dirty' when modified)."""
    from . import __version__

    root = Path(__file__).resolve().parent.parent
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


def resume_status(path: Path, fingerprint: str) -> ResumeStatus:
    """What `--resume` does with the trace at `path` for an episode whose fingerprint hash is `fingerprint`.

    "reuse": complete and made with the same configuration; "changed": complete, but another
    configuration (or an older schema without a fingerprint); "incomplete": unreadable or unfinished;
    "new": no trace yet.
    """
    if not path.exists():
        return "new"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        done = bool(data["outcome"]["completed"]) and data.get("schema_version") in READABLE_VERSIONS
    except (OSError, ValueError, KeyError, TypeError):
        return "incomplete"
    if not done:
        return "incomplete"
    stored = data.get("fingerprint")
    return "reuse" if isinstance(stored, dict) and stored.get("hash") == fingerprint else "changed"


def set_aside(path: Path) -> Path | None:
    """Keep the complete trace at `path` out of the way of a new episode: renamed to
    `<name>.superseded-<its fingerprint>` (not `run_*.json`, so no loader reads it as this run's).

    Returns where it went, or None when `path` holds no complete trace (nothing there, unreadable,
    or unfinished: a killed run's partial trace is redone, as `--resume` does).
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not data["outcome"]["completed"]:
            return None
        fingerprint = data.get("fingerprint")
        tag = str(fingerprint["hash"])[:12] if isinstance(fingerprint, dict) else "unfingerprinted"
    except (OSError, ValueError, KeyError, TypeError):
        return None
    dest = path.with_name(f"{path.name}.superseded-{tag}")
    n = 1
    while dest.exists():
        n += 1
        dest = path.with_name(f"{path.name}.superseded-{tag}-{n}")
    path.rename(dest)
    return dest


def is_complete(path: Path, fingerprint: str) -> bool:
    """True when `--resume` may keep the trace at `path` (complete, same configuration)."""
    return resume_status(path, fingerprint) == "reuse"


@cache
def _validator() -> Any:
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema)


def validate_trace(data: dict[str, Any]) -> list[str]:
    """Schema errors of one trace, as short strings (empty when valid)."""
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in _validator().iter_errors(data)]


@dataclass
class TraceFrames:
    """Traces as DataFrames: one row per episode (`runs`) and one per step (`steps`).

    `embeddings` is a float32 matrix with one row per row of `steps` (same order); a step without
    an embedding (``--no-embed`` runs, or a vector of another size) has a row of NaN and
    ``steps.has_embedding`` False. Its width is 0 when no step has an embedding.
    """

    runs: pd.DataFrame
    steps: pd.DataFrame
    skipped: list[str] = field(default_factory=list)  # "path: reason" for unreadable files
    embeddings: np.ndarray = field(default_factory=lambda: _empty_matrix(0))


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
_EMBEDDING = re.compile(rb'([{,]"embedding":)\[(-?[0-9][-+0-9.eE,]*)\]')
_FLUSH_BYTES = 32 << 20


def _empty_matrix(dim: int) -> np.ndarray:
    import numpy as np

    return np.zeros((0, dim), dtype=np.float32)


def _parse(raw: bytes, cut: bool) -> tuple[dict[str, Any], list[bytes]]:
    """The trace, with each step's embedding replaced by the index of its raw array in the list."""
    if not cut:
        return json.loads(raw), []
    arrays: list[bytes] = []

    def take(m: re.Match[bytes]) -> bytes:
        arrays.append(m.group(2))
        return m.group(1) + b"%d" % (len(arrays) - 1)

    data = json.loads(_EMBEDDING.sub(take, raw))
    steps = data.get("steps") if isinstance(data, dict) else None
    marks = [s.get("embedding") for s in steps or () if isinstance(s, dict)]
    if [m for m in marks if type(m) is int] != list(range(len(arrays))):
        return json.loads(raw), []  # a numeric "embedding" list outside a step (in tool args?): parse plainly
    return data, arrays


def _rows(path: Path, data: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    steps = data["steps"]
    run = {name: get(data) for name, get in _RUN_GET.items()}
    if "num_steps" not in data["outcome"]:
        run["num_steps"] = len(steps)
    turns = [s.get("turn") or 0 for s in steps if s.get("type") not in ("initial_tests", "restart")]  # no model turns
    run.update(path=str(path), turns_used=max(turns, default=-1) + 1,
               parse_errors=sum(s["type"] == "parse_error" for s in steps),
               tool_calls=sum(s["type"] == "tool_call" for s in steps))
    keys = {k: run[k] for k in STEP_KEYS}
    return {name: run[name] for name in RUN_COLUMNS}, [_step_row(keys, s) for s in steps]


def _step_row(keys: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    return {**keys, **{name: get(s) for name, get in _STEP_GET.items()}, "embedding": s.get("embedding")}


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
            self.pending_bytes += len(value)
        elif isinstance(value, list) and value:
            length = len(value)
        else:
            return
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
                vecs = pd.read_csv(csv, header=None, dtype=np.float32, engine="c").to_numpy()
                self.blocks.setdefault(length, []).append((np.array([r for r, _ in raw]), vecs))
            if lists:
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
        return out, has


def load_traces(root: str | os.PathLike[str], validate: bool = False) -> TraceFrames:
    """Load every ``run_*.json`` under `root` into DataFrames; corrupt files are skipped and listed.

    A file is skipped when it does not parse, has an unknown ``schema_version``, lacks a required
    field, or (with `validate`) breaks the schema. Step embeddings go to ``TraceFrames.embeddings``.
    """
    import pandas as pd

    runs: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []
    skipped: list[str] = []
    emb = _Embeddings()
    for path in sorted(Path(root).rglob("run_*.json")):
        try:
            data, arrays = _parse(path.read_bytes(), cut=not validate)
            if not isinstance(data, dict):
                raise ValueError(f"top level is {type(data).__name__}, not an object")
            if data.get("schema_version") not in READABLE_VERSIONS:
                raise ValueError(f"schema_version {data.get('schema_version')!r} not in {READABLE_VERSIONS}")
            if validate and (errs := validate_trace(data)):
                raise ValueError(errs[0])
            run, step_rows = _rows(path, data)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            skipped.append(f"{path}: {type(e).__name__}: {e}")
            continue
        runs.append(run)
        for row in step_rows:
            value = row.pop("embedding")
            emb.add(arrays[value] if type(value) is int and 0 <= value < len(arrays) else value)
        steps.extend(step_rows)
    matrix, has = emb.matrix()
    frame = pd.DataFrame(steps, columns=STEP_COLUMNS)
    frame["has_embedding"] = has
    return TraceFrames(pd.DataFrame(runs, columns=RUN_COLUMNS), frame, skipped, matrix)
