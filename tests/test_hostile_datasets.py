"""Hostile HumanEvalFix datasets (issue 44): rows the harness cannot run, rows that share a task id, and
files whose size once decoded has nothing to do with their size on disk. Each is one line and exit 2
through the CLI; memory stays bounded whatever the compression ratio."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent_harness.errors import ConfigError
from agent_harness.scenarios import humanevalfix_rows
from agent_harness.scenarios.humanevalfix import load_rows

ROOT = Path(__file__).resolve().parent.parent
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent_harness.cli", "run", "--models", "oracle", "--agent", "react",
                           "--no-embed", "--no-progress", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)})


def one_line_exit_2(r: subprocess.CompletedProcess[str], *words: str) -> str:
    assert r.returncode == 2, r.stderr[-3000:]
    [line] = r.stderr.strip().splitlines()
    assert all(w in line for w in words), line
    return line


def jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("field, value, why", [
    ("entry_point", "has_close_elements\n", "is not a Python name"),  # `$` matched before the newline
    ("entry_point", "class", "is a Python keyword"),
    ("entry_point", "os", "standard library module"),
    ("entry_point", "../evil", "is not a Python name"),
    ("task_id", "Python/1\nTask Python/2", "one printable line"),
    ("task_id", "", "one printable line"),
    ("test", 42, "missing or non-string field(s): test"),
    ("import", ["os"], "must be strings"),
], ids=["newline", "keyword", "stdlib", "path", "id-newline", "id-empty", "test-int", "import-list"])
def test_a_row_that_cannot_run_is_refused_by_name(tmp_path: Path, field: str, value: Any, why: str) -> None:
    rows = load_rows()[:3]
    rows[1] = {**rows[1], field: value}
    line = one_line_exit_2(cli("--dataset-path", str(jsonl(tmp_path / "rows.jsonl", rows)), "--out",
                               str(tmp_path / "o")), "rows.jsonl: row 2", why)
    assert not (tmp_path / "o").exists() or not list((tmp_path / "o").rglob("run_*.json")), line


def test_rows_sharing_a_task_id_are_refused(tmp_path: Path) -> None:
    """Before: both ran, one trace was kept. Within a file, and across the shards of a folder."""
    rows = load_rows()[:3]
    rows[2] = {**rows[2], "task_id": rows[0]["task_id"]}
    one_line_exit_2(cli("--dataset-path", str(jsonl(tmp_path / "rows.jsonl", rows)), "--out", str(tmp_path / "o")),
                    "row 3", "Python/0", "repeats row 1")
    shards = tmp_path / "shards"
    shards.mkdir()
    jsonl(shards / "a.jsonl", load_rows()[:2])
    jsonl(shards / "b.jsonl", load_rows()[1:2])
    with pytest.raises(ConfigError, match="row 3: task_id 'Python/1' repeats row 2"):
        load_rows(shards)


def dictionary_column(value: str, n: int) -> Any:
    """`n` copies of `value`, stored once (dictionary encoding): a tiny file that decodes to n x len(value)."""
    return pa.DictionaryArray.from_arrays(pa.array([0] * n, pa.int32()), pa.array([value]))


def parquet_rows(path: Path, n: int, test: str) -> Path:
    row = load_rows()[0]
    columns = {k: dictionary_column(v, n) for k, v in row.items() if isinstance(v, str) and k != "task_id"}
    columns["test"] = dictionary_column(test, n)
    columns["task_id"] = pa.array([f"Bomb/{i}" for i in range(n)])
    pq.write_table(pa.table(columns), path, compression="zstd")
    return path


def peak_rss_mib(path: Path) -> tuple[str, float]:
    """Load `path` in a fresh process: (its error line, its peak RSS in MiB). The peak is VmHWM, this program's
    own: getrusage's ru_maxrss carries over exec the peak of the (forked) pytest worker, ~1 GB in CI."""
    code = ("import sys\nfrom pathlib import Path\nfrom agent_harness.errors import ConfigError\n"
            "from agent_harness.scenarios.humanevalfix import load_rows\n"
            "try:\n    load_rows(Path(sys.argv[1])); print('loaded')\n"
            "except ConfigError as e:\n    print(e)\n"
            "[hwm] = [ln for ln in open('/proc/self/status') if ln.startswith('VmHWM:')]\n"
            "print(int(hwm.split()[1]) / 1024)\n")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT), "HOME": str(path.parent)}
    r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, cwd=ROOT,
                       timeout=300, env=env)  # a clean environment: nothing another test left behind counts
    assert r.returncode == 0, r.stderr[-3000:]
    message, rss = r.stdout.strip().splitlines()
    return message, float(rss)


def test_a_parquet_file_that_decodes_to_gigabytes_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    """20,000 valid rows whose 64 KB test is stored once: ~100 KB on disk, 1.3 GB once decoded. The
    metadata understates it (dictionary pages), so the batches read are what stop it."""
    path = parquet_rows(tmp_path / "bomb.parquet", 20_000, "assert True\n" + "#" * (64 << 10))
    assert path.stat().st_size < 1 << 20
    message, rss = peak_rss_mib(path)
    assert f"more than {humanevalfix_rows.MAX_BYTES} bytes" in message, message
    assert rss < 600, f"peak RSS {rss:.0f} MiB"  # reading it whole took ~2.6 GiB
    one_line_exit_2(cli("--dataset-path", str(path), "--out", str(tmp_path / "o")), "bomb.parquet", "bytes")


def test_a_parquet_file_with_too_many_rows_is_refused_before_reading(tmp_path: Path) -> None:
    path = parquet_rows(tmp_path / "rows.parquet", 1_000_000, "assert True\n")
    message, rss = peak_rss_mib(path)
    assert f"more than {humanevalfix_rows.MAX_ROWS} rows" in message, message


def test_a_declared_size_over_the_cap_is_refused_before_decompressing(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "big.parquet"
    row = load_rows()[0]
    pq.write_table(pa.table({k: [v] for k, v in {**row, "test": "x" * (3 << 20)}.items()}), path,
                   compression="zstd", use_dictionary=False)
    assert path.stat().st_size < 64 << 10
    monkeypatch.setattr(humanevalfix_rows, "MAX_BYTES", 2 << 20)
    with pytest.raises(ConfigError, match=r"big.parquet: more than 2097152 bytes of data \(uncompressed\)"):
        load_rows(path)


def test_jsonl_and_folders_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(humanevalfix_rows, "MAX_BYTES", 1 << 20)
    big = jsonl(tmp_path / "big.jsonl", [{**load_rows()[0], "test": "x" * (2 << 20)}])
    with pytest.raises(ConfigError, match="larger than"):
        load_rows(big)
    many = tmp_path / "many"
    many.mkdir()
    for i in range(humanevalfix_rows.MAX_SHARDS + 1):
        jsonl(many / f"part-{i:05d}.jsonl", [{**load_rows()[0], "task_id": f"X/{i}"}])
    with pytest.raises(ConfigError, match=f"more than {humanevalfix_rows.MAX_SHARDS} .jsonl files"):
        load_rows(many)


def test_valid_parquet_and_jsonl_still_load(tmp_path: Path) -> None:
    rows = load_rows()[:5]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "ok.parquet")
    assert [r["task_id"] for r in load_rows(tmp_path / "ok.parquet")] == [r["task_id"] for r in rows]
    assert load_rows(tmp_path / "ok.parquet")[3] == rows[3]
