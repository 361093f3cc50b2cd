"""HumanEvalFix dataset rows: read from the vendored file, a user's .jsonl / .parquet / dataset folder, or
the Hub, and checked before any task is built. A dataset is hostile input.

- Every row must be runnable: the fields a task needs are strings, `task_id` is one printable line,
  `entry_point` an ASCII identifier that is no Python keyword and no standard library module (its
  module file `<entry_point>.py` would shadow that module). A bad row is one ConfigError line naming it.
- Every row is its own episode and trace: two rows with one task id are refused (the second would
  overwrite the first's trace).
- Memory is bounded whatever the compression ratio: at most `MAX_ROWS` rows and `MAX_BYTES` of data
  in all (for parquet, checked against the file's metadata before anything is decompressed, and again
  batch by batch while reading), `MAX_FIELD_CHARS` per string, `MAX_SHARDS` files in a folder.
"""

from __future__ import annotations

import hashlib
import keyword
import os
import re
import stat
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..jsonl import read_jsonl
from ..registry import PROJECT_ROOT
from ..sandbox.docker_image import check_image_name

DATA_DIR = PROJECT_ROOT / "scenarios" / "humanevalfix"
DATA_FILE = DATA_DIR / "python.jsonl"
DATA_SHA256 = "8c10bb7ecb532e15932da3509a9ab3c490966060e47e3fc8302be3d3062b5650"
HUB_DATASET = ("bigcode/humanevalpack", "python")
REQUIRED_FIELDS = ("task_id", "declaration", "buggy_solution", "canonical_solution", "entry_point", "test")
OPTIONAL_TEXT = ("prompt", "import", "bug_type", "failure_symptoms", "image")  # str or null where present
MAX_ROWS = 20_000  # HumanEvalFix has 164
MAX_BYTES = 64 << 20  # all rows together (the vendored file: 0.5 MB)
MAX_FIELD_CHARS = 1 << 20  # one string field
MAX_SHARDS = 1000  # files of a dataset folder
MAX_FOLDER_ENTRIES = 100_000  # files and folders looked at in a dataset folder
MAX_ID_CHARS = 200
MAX_ENTRY_POINT_CHARS = 100
BATCH_ROWS = 64  # parquet rows decoded at once
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _Budget:
    """The rows and bytes one dataset (all of its files together) has used."""

    def __init__(self) -> None:
        self.rows = 0
        self.bytes = 0

    def check(self, rows: int, size: int, source: object) -> None:
        """ConfigError unless `rows` more rows and `size` more bytes fit."""
        if self.rows + rows > MAX_ROWS:
            raise ConfigError(f"{source}: more than {MAX_ROWS} rows")
        if self.bytes + size > MAX_BYTES:
            raise ConfigError(f"{source}: more than {MAX_BYTES} bytes of data (uncompressed)")

    def add(self, rows: int, size: int, source: object) -> None:
        self.check(rows, size, source)
        self.rows += rows
        self.bytes += size


def _shown(value: str, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def _entry_point_problem(ep: str) -> str | None:
    if not _IDENT.fullmatch(ep) or len(ep) > MAX_ENTRY_POINT_CHARS:
        return "is not a Python name (ASCII letters, digits and _, at most 100)"
    if keyword.iskeyword(ep):
        return "is a Python keyword"
    if ep in sys.stdlib_module_names:
        return "is a standard library module, which its module file would shadow"
    return None


def _row_problem(row: Any) -> str | None:
    """Why a row cannot be run (None: it can)."""
    if not isinstance(row, dict):
        return f"expected an object, got {type(row).__name__}"
    missing = [k for k in REQUIRED_FIELDS if not isinstance(row.get(k), str)]
    if missing:
        return f"missing or non-string field(s): {', '.join(missing)}"
    bad = [k for k in OPTIONAL_TEXT if row.get(k) is not None and not isinstance(row[k], str)]
    if bad:
        return f"field(s) {', '.join(bad)} must be strings"
    long = [k for k, v in row.items() if isinstance(v, str) and len(v) > MAX_FIELD_CHARS]
    if long:
        return f"field {_shown(str(long[0]))} is longer than {MAX_FIELD_CHARS} characters"
    tid = row["task_id"]
    if not tid or len(tid) > MAX_ID_CHARS or not tid.isprintable() or tid != tid.strip():
        return f"task_id {_shown(tid)} is not one printable line of 1 to {MAX_ID_CHARS} characters"
    why = _entry_point_problem(row["entry_point"])
    if why:
        return f"entry_point {_shown(row['entry_point'])} {why}"
    try:  # the Docker image the task runs in (never pulled), where the row names one
        check_image_name(row["image"], "image") if row.get("image") else None
    except ConfigError as e:
        return str(e)
    return None


def _check_rows(rows: list[Any], source: str) -> list[dict[str, Any]]:
    """`rows` when every one can run and has a task id of its own; else ConfigError naming the first bad row."""
    seen: dict[str, int] = {}
    for i, row in enumerate(rows):
        why = _row_problem(row)
        tid = row.get("task_id") if isinstance(row, dict) else None
        if why:
            named = f" (task_id {_shown(tid)})" if isinstance(tid, str) and "task_id" not in why else ""
            raise ConfigError(f"{source}: row {i + 1}: {why}{named}")
        tid = row["task_id"]
        first = seen.setdefault(tid, i)
        if first != i:
            raise ConfigError(f"{source}: row {i + 1}: task_id {_shown(tid)} repeats row {first + 1} "
                              "(each row is one episode and needs an id of its own)")
    if not rows:
        raise ConfigError(f"{source}: no rows")
    return rows


def _row_bytes(row: Any) -> int:
    return sum(len(v) for v in row.values() if isinstance(v, str)) if isinstance(row, dict) else 0


def _read_jsonl(path: Path, budget: _Budget | None = None) -> list[dict[str, Any]]:
    budget = budget or _Budget()
    rows = [row for _, row in read_jsonl(path, "dataset", limit=MAX_BYTES - budget.bytes)]
    budget.add(len(rows), sum(map(_row_bytes, rows)), path)
    return _check_rows(rows, str(path))


def _parquet_file(path: Path) -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise ConfigError(f"{path}: reading parquet needs pyarrow (pip install pyarrow): {e}") from None
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise ConfigError(f"{path}: not a regular file")
        return pq.ParquetFile(path, thrift_string_size_limit=1 << 20, thrift_container_size_limit=100_000,
                              schema_depth_limit=16, pre_buffer=False)
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
        raise ConfigError(f"{path}: cannot read parquet: {(str(e).splitlines() or [''])[0][:200]}") from None


def _text_type(t: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
                or pa.types.is_large_binary(t))


def _check_columns(schema: Any, path: Path) -> None:
    """Columns of text (plain or dictionary-encoded) or of single numbers only: a row holds nothing else, and
    the size of these can be told before they become Python objects."""
    import pyarrow as pa

    for field in schema:
        t = field.type
        if not (_text_type(t) or (pa.types.is_dictionary(t) and _text_type(t.value_type)) or pa.types.is_integer(t)
                or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_null(t)):
            raise ConfigError(f"{path}: column {_shown(field.name)} is of type {str(t)[:60]}; "
                              "a HumanEvalFix row holds text and numbers only")


def _batch_bytes(batch: Any, path: Path) -> int:
    """The bytes `batch` holds once decoded (a dictionary-encoded value counts once per row that uses it),
    computed without decoding it; ConfigError when one value is over the field cap."""
    import pyarrow.compute as pc

    total = 0
    for name, col in zip(batch.schema.names, batch.columns, strict=True):
        if hasattr(col, "dictionary"):
            lengths = pc.take(pc.binary_length(col.dictionary), col.indices)
        elif _text_type(col.type):
            lengths = pc.binary_length(col)
        else:
            total += col.nbytes
            continue
        if (pc.max(lengths).as_py() or 0) > 4 * MAX_FIELD_CHARS:
            raise ConfigError(f"{path}: a value of column {_shown(name)} is longer than {MAX_FIELD_CHARS} characters")
        total += pc.sum(lengths).as_py() or 0
    return total


def _read_parquet(path: Path, budget: _Budget | None = None) -> list[dict[str, Any]]:
    """The rows of a parquet file, its declared sizes checked first, then read a few rows at a time, each batch
    measured before it becomes Python objects (the footer and dictionary encoding may understate it)."""
    budget = budget or _Budget()
    pf = _parquet_file(path)
    md = pf.metadata
    _check_columns(pf.schema_arrow, path)
    declared = sum(md.row_group(g).column(c).total_uncompressed_size
                   for g in range(md.num_row_groups) for c in range(md.num_columns))
    budget.check(md.num_rows, declared, path)  # before anything is decompressed
    rows: list[Any] = []
    try:
        for batch in pf.iter_batches(batch_size=BATCH_ROWS, use_threads=False):
            budget.add(batch.num_rows, _batch_bytes(batch, path), path)
            rows += batch.to_pylist()
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: cannot read parquet: {(str(e).splitlines() or [''])[0][:200]}") from None
    if len(rows) != md.num_rows:
        raise ConfigError(f"{path}: {len(rows)} rows where its metadata says {md.num_rows}")
    return _check_rows(rows, str(path))


def _from_datasets(ds: Any, source: object) -> list[dict[str, Any]]:
    """The rows of a `datasets.Dataset` (memory-mapped), its size checked before they are made objects."""
    _Budget().add(ds.num_rows, int(getattr(ds.data, "nbytes", 0)), source)
    return _check_rows([dict(r) for r in ds], str(source))


def _read_hub() -> list[dict[str, Any]]:
    source = f"hub dataset {HUB_DATASET[0]} ({HUB_DATASET[1]})"
    try:
        import datasets
    except ImportError:
        raise ConfigError(f"{source}: package 'datasets' is not installed (pip install datasets)") from None
    try:
        ds = datasets.load_dataset(*HUB_DATASET)["test"]
    except Exception as e:  # the hub client raises many types (offline, HTTP, cache misses)
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"{source}: cannot load ({type(e).__name__}: {msg})") from None
    return _from_datasets(ds, source)


def _read_saved_dataset(path: Path) -> list[dict[str, Any]]:
    """A folder written by `datasets`' save_to_disk (a Dataset, or a DatasetDict: its 'test' or only split)."""
    try:
        import datasets
    except ImportError:
        raise ConfigError(f"{path}: reading a save_to_disk folder needs 'datasets' (pip install datasets)") from None
    try:
        ds = datasets.load_from_disk(str(path))
    except Exception as e:  # datasets raises several types for a damaged folder
        raise ConfigError(f"{path}: cannot load the saved dataset ({type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else ''})") from None
    if isinstance(ds, datasets.DatasetDict):
        splits = list(ds)
        if "test" not in ds and len(splits) != 1:
            raise ConfigError(f"{path}: splits {', '.join(splits)}; expected 'test' or a single split")
        ds = ds["test" if "test" in ds else splits[0]]
    return _from_datasets(ds, path)


def _shards(path: Path, suffix: str) -> list[Path]:
    """The `suffix` files under `path` (hidden ones left out, links not followed), at most MAX_SHARDS."""
    found: list[Path] = []
    seen = 0
    for top, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        seen += len(dirs) + len(files)
        if seen > MAX_FOLDER_ENTRIES:
            raise ConfigError(f"{path}: more than {MAX_FOLDER_ENTRIES} files and folders")
        for name in files:
            p = Path(top, name)
            if name.endswith(suffix) and not name.startswith(".") and stat.S_ISREG(os.lstat(p).st_mode):
                found.append(p)
        if len(found) > MAX_SHARDS:
            raise ConfigError(f"{path}: more than {MAX_SHARDS} {suffix} files")
    return sorted(found)


def _read_dataset_dir(path: Path) -> list[dict[str, Any]]:
    """A dataset folder: save_to_disk's layout, or parquet / jsonl shards (e.g. `data/test-*.parquet`)."""
    if (path / "dataset_info.json").is_file() or (path / "dataset_dict.json").is_file():
        return _read_saved_dataset(path)
    for suffix, read in ((".parquet", _read_parquet), (".jsonl", _read_jsonl)):
        shards = _shards(path, suffix)
        if shards:
            budget = _Budget()
            return _check_rows([r for shard in shards for r in read(shard, budget)], str(path))
    raise ConfigError(f"{path}: no .parquet or .jsonl files and not a save_to_disk folder")


@lru_cache(maxsize=4)
def _vendored_rows(path: Path, sha256: str) -> tuple[dict[str, Any], ...]:
    if not path.is_file():
        raise ConfigError(f"{path}: vendored HumanEvalFix data is missing")
    actual = hashlib.sha256(path.read_bytes()).hexdigest()
    if actual != sha256:
        raise ConfigError(f"{path}: sha256 {actual} does not match the pinned {sha256}")
    return tuple(_read_jsonl(path))


def load_rows(dataset_path: Path | None = None, *, hub: bool = False) -> list[dict[str, Any]]:
    """Dataset rows: the Hub, a .jsonl/.parquet file or dataset folder, or the vendored, sha256-checked file."""
    if hub:
        return _read_hub()
    if dataset_path is None:
        return [dict(r) for r in _vendored_rows(DATA_FILE, DATA_SHA256)]
    path = Path(dataset_path)
    if path.is_dir():
        return _read_dataset_dir(path)
    if not path.is_file():
        raise ConfigError(f"{path}: dataset file not found")
    if path.suffix == ".parquet":
        return _read_parquet(path)
    if path.suffix in (".jsonl", ".json"):
        return _read_jsonl(path)
    raise ConfigError(f"{path}: dataset must be .jsonl or .parquet")


def select_rows(rows: list[dict[str, Any]], task_ids: tuple[str, ...] = (), n: int | None = None,
                scenario: str = "humanevalfix") -> list[tuple[int, dict[str, Any]]]:
    """(position, row) for the given ids (``Python/12`` or ``12``) or all rows, then the first `n`."""
    if n is not None and n < 0:
        raise ConfigError(f"n must be >= 0, got {n}")
    picked = list(enumerate(rows))
    if task_ids:
        by_id = {r["task_id"]: (i, r) for i, r in picked}
        prefix = rows[0]["task_id"].split("/")[0] if "/" in rows[0]["task_id"] else ""
        picked = []
        for tid in dict.fromkeys(task_ids):
            key = tid if tid in by_id else f"{prefix}/{tid}"
            if key not in by_id:
                first, last = rows[0]["task_id"], rows[-1]["task_id"]
                short = f" or {first.split('/')[-1]}" if prefix else ""
                raise ConfigError(f"{scenario}: unknown task id '{tid}'; ids look like {first}{short} "
                                  f"({len(rows)} tasks, {first} … {last})")
            picked.append(by_id[key])
    return picked if n is None else picked[:n]
