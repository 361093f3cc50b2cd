"""Traces as a Hugging Face dataset: `agent-harness export TRACES --to DIR [--push-to-hub REPO]`.

DIR gets parquet shards (`data/train-NNNNN-of-MMMMM.parquet`, one row per episode, its steps as a
list of structs, step embeddings as float32 lists) and a dataset card `README.md` with the run
configuration and the pass@1 summary. ``datasets.load_dataset("parquet", data_dir=DIR)`` loads it.
Typed columns hold what every trace has; parts whose shape varies between backends, scenarios or
schema versions (model details, sampling parameters, agent settings, score details, tool args,
unknown keys) are JSON strings, so that one schema fits every run.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections import Counter
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import ConfigError, HarnessError
from ...sandbox import safefs, safewrite
from ...secrets import redact, redact_value
from ...text import md_inline
from ..check import check_trace
from ..files import Unreadable, report_skipped, skip_line, trace_files
from ..jsontext import parse_json, read_json, read_json_lines
from ..model import STEP_FIELDS, Outcome, Trace

if TYPE_CHECKING:
    import pyarrow as pa

ROWS_PER_SHARD = 500
DATA_DIR = "data"

# Fields of the trace model (trace_model.py) without a typed column of their own: like keys the model does not
# know (newer or foreign traces), they go to the row's JSON `extra` column. Every other field has a column.
UNTYPED_HEADER = ("sandbox_bounds", "fingerprint", "source")
UNTYPED_OUTCOME = ("score_error",)
UNTYPED_STEP = ("endpoint", "seed", "check", "output", "temperature", "elided", "file", "tests", "stale", "note")
_HEADER = tuple(f for f in Trace.model_fields if f not in UNTYPED_HEADER)
_OUTCOME = tuple(f for f in Outcome.model_fields if f not in UNTYPED_OUTCOME)
_STEP = tuple(f for f in STEP_FIELDS if f not in UNTYPED_STEP)


class HubPushError(HarnessError):
    """The Hub could not be reached or refused the upload."""


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, sort_keys=True)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _embedding(value: Any) -> list[float] | None:
    if not isinstance(value, list) or not value:
        return None
    if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in value):
        return None
    return [float(x) for x in value]


def step_row(s: dict[str, Any]) -> dict[str, Any]:
    """One step as a struct (see `schema()`); keys the schema does not know go to `extra`."""
    tokens = _dict(s.get("tokens"))
    repairs = s.get("repairs")
    extra = {k: v for k, v in s.items() if k not in _STEP}
    return {
        "i": _int(s.get("i")), "turn": _int(s.get("turn")), "type": _str(s.get("type")), "text": _str(s.get("text")),
        "raw": _str(s.get("raw")), "tool": _str(s.get("tool")), "args": _json(s.get("args")),
        "call_id": _str(s.get("call_id")),
        "repairs": [r for r in repairs if isinstance(r, str)] if isinstance(repairs, list) else None,
        "finish_reason": _str(s.get("finish_reason")), "prompt_tokens": _int(tokens.get("prompt")),
        "completion_tokens": _int(tokens.get("completion")), "cached_tokens": _int(tokens.get("cached")),
        "latency_s": _float(s.get("latency_s")), "embedding": _embedding(s.get("embedding")),
        "extra": _json(extra) if extra else None,
    }


def episode_row(data: dict[str, Any], source: str) -> dict[str, Any]:
    """One trace as one row (see `schema()`)."""
    model = _dict(data.get("model"))
    prompt = _dict(data.get("prompt"))
    out = _dict(data.get("outcome"))
    emb = _dict(data.get("embeddings"))
    steps = data.get("steps")
    steps = steps if isinstance(steps, list) else []
    extra = {k: v for k, v in data.items() if k not in _HEADER}
    extra.update({f"outcome.{k}": v for k, v in out.items() if k not in _OUTCOME})
    agent = _dict(data.get("agent"))
    return {
        "run_id": _str(data.get("run_id")), "schema_version": _str(data.get("schema_version")),
        "scenario": _str(data.get("scenario")), "task_id": _str(data.get("task_id")),
        "task_index": _int(data.get("task_index")), "label": _str(data.get("label")),
        "sample": _int(data.get("sample")) or 0, "timestamp": _str(data.get("timestamp")),
        "mode": _str(agent.get("mode")) or "agent",
        "model": _str(model.get("name")), "model_hf_id": _str(model.get("hf_id")),
        "backend": _str(model.get("backend")), "backend_requested": _str(model.get("backend_requested")),
        "fallback_reason": _str(model.get("fallback_reason")), "device": _str(model.get("device")),
        "model_details": _json(model.get("details")), "generation": _json(data.get("generation")),
        "agent": _json(data.get("agent")), "sandbox": _str(data.get("sandbox")),
        "harness_version": _str(data.get("harness_version")),
        "prompt_system": _str(prompt.get("system")), "prompt_task": _str(prompt.get("task")),
        "prompt_demo": _json(prompt.get("demo")),
        "embedding_model": _str(emb.get("model")), "embedding_dim": _int(emb.get("dim")),
        "completed": _bool(out.get("completed")), "passed": _bool(out.get("passed")),
        "compromised": _bool(out.get("compromised")), "exit_reason": _str(out.get("exit_reason")),
        "num_steps": _int(out.get("num_steps")), "num_turns": _int(out.get("num_turns")),
        "elapsed_seconds": _float(out.get("elapsed_seconds")), "prompt_tokens": _int(out.get("prompt_tokens")),
        "cached_prompt_tokens": _int(out.get("cached_prompt_tokens")),
        "completion_tokens": _int(out.get("completion_tokens")), "error": _str(out.get("error")),
        "final": _str(out.get("final")), "test_output": _str(out.get("test_output")), "diff": _str(out.get("diff")),
        "score_details": _json(out.get("score_details")),
        "steps": [step_row(s) for s in steps if isinstance(s, dict)],
        "source_path": source, "extra": _json(extra) if extra else None,
    }


def schema() -> pa.Schema:
    """The parquet schema of one episode row."""
    import pyarrow as pa

    s, i, f, b = pa.string(), pa.int64(), pa.float64(), pa.bool_()
    step = pa.struct([
        ("i", i), ("turn", i), ("type", s), ("text", s), ("raw", s), ("tool", s), ("args", s), ("call_id", s),
        ("repairs", pa.list_(s)), ("finish_reason", s), ("prompt_tokens", i), ("completion_tokens", i),
        ("cached_tokens", i), ("latency_s", f), ("embedding", pa.list_(pa.float32())), ("extra", s),
    ])
    return pa.schema([
        ("run_id", s), ("schema_version", s), ("scenario", s), ("task_id", s), ("task_index", i), ("label", s),
        ("sample", i), ("timestamp", s), ("mode", s), ("model", s), ("model_hf_id", s), ("backend", s),
        ("backend_requested", s), ("fallback_reason", s), ("device", s), ("model_details", s), ("generation", s),
        ("agent", s), ("sandbox", s), ("harness_version", s), ("prompt_system", s), ("prompt_task", s),
        ("prompt_demo", s), ("embedding_model", s), ("embedding_dim", i), ("completed", b), ("passed", b),
        ("compromised", b), ("exit_reason", s), ("num_steps", i), ("num_turns", i), ("elapsed_seconds", f),
        ("prompt_tokens", i), ("cached_prompt_tokens", i), ("completion_tokens", i), ("error", s), ("final", s),
        ("test_output", s), ("diff", s), ("score_details", s), ("steps", pa.list_(step)), ("source_path", s),
        ("extra", s),
    ])


def read_episodes(traces: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """(rows, skipped) for every ``run_*.json`` under `traces`, read by the safe reader and checked
    against the trace model (`trace_io`, `trace_check`); refused files are listed, not fatal."""
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    for rel, raw in trace_files(traces):
        try:
            if isinstance(raw, Unreadable):
                raise raw
            data = check_trace(parse_json(raw))
        except Unreadable as e:
            skipped.append(skip_line(rel, e))
            continue
        rows.append(episode_row(redact_value(data), rel))  # traces written before secrets were redacted
    return rows, skipped


def _read_json(path: Path, skipped: list[str]) -> Any:
    if not path.exists() and not path.is_symlink():
        return None
    try:
        return read_json(path)
    except Unreadable as e:
        skipped.append(skip_line(path.name, e))
        return None


def _run_records(traces: Path, skipped: list[str]) -> list[dict[str, Any]]:
    path = traces / "runs.jsonl"
    if not path.exists() and not path.is_symlink():
        return []
    try:
        lines = read_json_lines(path)
    except Unreadable as e:
        skipped.append(skip_line(path.name, e))
        return []
    bad = [n for n, rec in lines if not isinstance(rec, dict)]
    if bad:
        skipped.append(skip_line(path.name, f"{len(bad)} line(s) not a JSON object (first: line {bad[0]})"))
    return [rec for _, rec in lines if isinstance(rec, dict)]


def _json_block(value: Any, **kw: Any) -> str:
    """JSON for a fenced code block: ASCII only, so no string in it holds a line ending of any kind."""
    return json.dumps(value, ensure_ascii=True, sort_keys=True, **kw)


def dataset_card(rows: list[dict[str, Any]], skipped: list[str], traces: Path, shards: int) -> str:
    """The README.md of the exported dataset: YAML metadata, run configuration and summary."""
    from ...metrics import wilson_interval

    lines = [
        "---", "configs:", "- config_name: default", "  data_files:", "  - split: train",
        f"    path: {DATA_DIR}/train-*.parquet", "tags:", "- agent-traces", "- agent-harness", "---", "",
        "# agent-harness traces", "",
        f"{len(rows)} episodes exported from {md_inline(traces.name or traces)} by `agent-harness export` "
        f"({shards} parquet shard(s), one row per episode; `steps` is a list of structs, step embeddings "
        "are float32 lists; JSON-string columns hold the parts whose shape varies).", "",
        "```python", "import datasets", 'ds = datasets.load_dataset("parquet", data_dir="<this folder>")["train"]',
        "```", "", "## Summary", "",
        "| model | scenario | label | mode | episodes | pass@1 (episodes) | 95% CI | compromised |",
        "|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        key = (r["model"] or "?", r["scenario"] or "?", r["label"] or "?", r["mode"] or "agent")
        groups.setdefault(key, []).append(r)
    for key, rs in sorted(groups.items()):
        k = sum(bool(r["passed"]) for r in rs)
        lo, hi = wilson_interval(k, len(rs))
        comp = [r["compromised"] for r in rs if r["compromised"] is not None]
        lines.append(f"| {' | '.join(md_inline(x) for x in key)} | {len(rs)} | {k / len(rs):.3f} | {lo:.2f}–{hi:.2f} | "
                     f"{(f'{sum(comp) / len(comp):.3f}') if comp else '-'} |")
    summary = _read_json(traces / "summary.json", skipped)
    if isinstance(summary, dict):
        lines += ["", "`summary.json` of the run (per model and scenario; pass@1 averaged over tasks):", "",
                  "```json", _json_block(summary, indent=1)[:20_000], "```"]
    lines += ["", "## Run configuration", ""]
    by_model: dict[str, dict[str, Any]] = {}
    for r in rows:
        by_model.setdefault(r["model"] or "?", r)
    for name, r in sorted(by_model.items()):
        v = {k: md_inline(r[k]) for k in ("backend", "backend_requested", "device", "model_hf_id", "harness_version",
                                           "sandbox", "generation", "agent", "model_details")}
        lines += [f"### {md_inline(name)}", "", f"- backend: {v['backend']} (requested {v['backend_requested']}), "
                  f"device {v['device']}, hf_id {v['model_hf_id']}",
                  f"- harness_version: {v['harness_version']}, sandbox: {v['sandbox']}, "
                  f"embeddings: {md_inline(r['embedding_model'] or 'none')}",
                  f"- generation: {v['generation']}", f"- agent: {v['agent']}",
                  f"- model details: {v['model_details']}", ""]
    runs = _run_records(traces, skipped)
    if runs:
        lines += ["Runs (`runs.jsonl`):", "", "```json", *(_json_block(x) for x in runs[-50:]), "```", ""]
    exits = Counter(r["exit_reason"] for r in rows)
    exit_text = ", ".join(f"{md_inline(k)}: {n}" for k, n in sorted(exits.items(), key=lambda kv: str(kv[0])))
    lines += ["## Contents", "", f"- exit reasons: {exit_text}",
              f"- scenarios: {', '.join(md_inline(s) for s in sorted({r['scenario'] for r in rows if r['scenario']}))}",
              f"- skipped files: {len(skipped)}"]
    lines += [f"  - {md_inline(s)}" for s in skipped[:50]]
    return "\n".join(lines) + "\n"


def export(traces: Path, to: Path, rows_per_shard: int = ROWS_PER_SHARD) -> tuple[int, int]:
    """Write the dataset; returns (episodes, shards). DIR must be new or empty (never overwritten)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not traces.is_dir():
        raise ConfigError(f"{traces}: traces folder not found")
    if os.path.lexists(to) and (to.is_symlink() or not to.is_dir() or any(to.iterdir())):
        raise ConfigError(f"{to}: exists and is not an empty folder (choose a new --to)")
    rows, skipped = read_episodes(traces)
    if not rows:
        report_skipped(skipped)
        why = f" ({len(skipped)} skipped)" if skipped else ""
        raise ConfigError(f"{traces}: no readable run_*.json traces{why}")
    rows.sort(key=lambda r: (r["model"] or "", r["scenario"] or "", r["label"] or "", r["task_index"] or 0,
                             r["task_id"] or "", r["sample"]))
    to.parent.mkdir(parents=True, exist_ok=True)  # the folder the user named, as given
    tmp = Path(tempfile.mkdtemp(prefix=f".{to.name}.partial-", dir=to.parent))  # new: nothing planted in it
    try:
        os.chmod(tmp, 0o755)  # a dataset folder, readable like the ones `mkdir` makes
        sch = schema()
        n = math.ceil(len(rows) / rows_per_shard)
        data = safewrite.Folder(tmp, DATA_DIR).create()
        for k in range(n):
            part = rows[k * rows_per_shard:(k + 1) * rows_per_shard]
            table = pa.Table.from_pylist(part, schema=sch)
            data.write(f"train-{k:05d}-of-{n:05d}.parquet", partial(pq.write_table, table))
        safewrite.Folder(tmp).write("README.md", redact(dataset_card(rows, skipped, traces, n)).encode("utf-8"))
        report_skipped(skipped, "file(s)")  # the card lists them too
        safewrite.move_into_place(tmp, to)
    except BaseException:
        safefs.remove_tree(tmp)
        raise
    return len(rows), n


def push_to_hub(folder: Path, repo: str) -> None:
    """Push the exported dataset (its shards, then its card) to the Hub; one-line HubPushError on failure."""
    try:
        import datasets
        from huggingface_hub import DatasetCard
    except ImportError as e:
        raise HubPushError(f"--push-to-hub needs 'datasets' and 'huggingface_hub': {e}") from None
    try:
        ds = datasets.load_dataset("parquet", data_dir=str(folder / DATA_DIR), split="train")
        ds.push_to_hub(repo, split="train")
        DatasetCard((folder / "README.md").read_text(encoding="utf-8")).push_to_hub(repo, repo_type="dataset")
    except Exception as e:  # the Hub client raises many types (offline mode, HTTP, auth)
        msg = " ".join(str(e).split())[:300] or type(e).__name__
        raise HubPushError(f"push to the Hub as {repo} failed ({type(e).__name__}: {msg})") from None
