"""Run summary: pass@k per model × scenario (× label), computed from the traces on disk."""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

from .trace import load_traces, write_json_atomic


def _stats(runs: Any) -> dict[str, Any]:
    from .metrics import aggregate_pass_at_k, wilson_interval

    per_task: dict[str, list[bool]] = {}
    for task, passed in zip(runs["task_id"], runs["passed"], strict=True):
        per_task.setdefault(task, []).append(bool(passed))
    max_n = min(len(v) for v in per_task.values())
    ks = [k for k in (1, 5, 10) if k <= max_n]
    passes = int(runs["passed"].fillna(False).astype(bool).sum())
    lo, hi = wilson_interval(passes, len(runs))
    out: dict[str, Any] = {
        **{f"pass@{k}": round(v, 4) for k, v in aggregate_pass_at_k(per_task, ks).items()},
        "pass@1_ci95": [round(lo, 4), round(hi, 4)],
        "n_tasks": len(per_task),
        "n_episodes": len(runs),
        "mean_steps": round(float(runs["num_turns"].fillna(0).mean()), 2),
        "mean_completion_tokens": round(float(runs["completion_tokens"].fillna(0).mean()), 1),
        "mean_seconds": round(float(runs["elapsed_seconds"].fillna(0).mean()), 2),
        "parse_error_rate": round(float(runs["parse_errors"].sum() / max(runs["num_turns"].fillna(0).sum(), 1)), 4),
        "exit_reasons": {str(k): int(v) for k, v in runs["exit_reason"].value_counts().items()},
        "backends": sorted({str(b) for b in runs["backend"]}),
    }
    if runs["compromised"].notna().any():
        out["compromise_rate"] = round(float(runs["compromised"].fillna(False).astype(bool).mean()), 4)
    return out


def summarize(out_dir: Path, fingerprints: Collection[str] | None = None) -> dict[str, Any]:
    """`{model: {scenario: {"pass@1", "n_tasks", ..., "by_label": {label: {...}}}}}` over complete traces.

    With `fingerprints`, only traces whose configuration fingerprint is one of them (one run's) count.
    """
    frames = load_traces(out_dir)
    runs = frames.runs[frames.runs["completed"].fillna(False).astype(bool)]
    if fingerprints is not None:
        runs = runs[runs["fingerprint"].isin(set(fingerprints))]
    summary: dict[str, Any] = {}
    for (model, scenario), group in runs.groupby(["model", "scenario"], sort=True):
        entry = _stats(group)
        entry["by_label"] = {str(label): _stats(g) for label, g in group.groupby("label", sort=True)}
        summary.setdefault(str(model), {})[str(scenario)] = entry
    return summary


def write_summary(out_dir: Path, summary: dict[str, Any]) -> Path:
    path = Path(out_dir) / "summary.json"
    write_json_atomic(path, summary)
    return path


def print_table(summary: dict[str, Any], console: Any = None) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="pass@1 per model × scenario × label")
    for col in ("model", "scenario", "label", "pass@1", "95% CI", "tasks", "episodes", "steps", "compromised"):
        table.add_column(col, justify="left" if col in ("model", "scenario", "label") else "right")
    for model, scenarios in summary.items():
        for scenario, entry in scenarios.items():
            for label, s in entry["by_label"].items():
                lo, hi = s["pass@1_ci95"]
                comp = f"{s['compromise_rate']:.2f}" if "compromise_rate" in s else "-"
                table.add_row(model, scenario, label, f"{s['pass@1']:.3f}", f"{lo:.2f}–{hi:.2f}", str(s["n_tasks"]),
                              str(s["n_episodes"]), f"{s['mean_steps']:.1f}", comp)
    import shutil

    # Not a terminal (CI logs, pipes): rich would squeeze the table into 80 columns.
    (console or Console(width=max(shutil.get_terminal_size((160, 40)).columns, 120))).print(table)


def load_summary(out_dir: Path) -> dict[str, Any]:
    return json.loads((Path(out_dir) / "summary.json").read_text(encoding="utf-8"))
