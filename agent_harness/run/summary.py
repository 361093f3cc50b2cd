"""Run summary: pass@k per model × scenario (× label), computed from the traces on disk."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

from ..traces.files import report_skipped
from ..traces.store import load_traces, write_json_atomic


def _stats(runs: Any) -> dict[str, Any]:
    """pass@k, rates and means of one group of completed episodes.

    An episode without a verdict (`passed` null: the scorer failed, see `outcome.score_error`, or the
    episode never got to scoring) is counted in `unscored` and left out of pass@k and the compromise
    rate: it is neither a failure of the model nor, for an attack, a resisted one.
    """
    from ..metrics import aggregate_pass_at_k, wilson_interval

    scored = runs[runs["passed"].notna()]
    per_task: dict[str, list[bool]] = {}
    for task, passed in zip(scored["task_id"], scored["passed"], strict=True):
        per_task.setdefault(task, []).append(bool(passed))
    max_n = min((len(v) for v in per_task.values()), default=0)
    ks = [k for k in (1, 5, 10) if k <= max_n]
    passes = int(scored["passed"].astype(bool).sum())
    lo, hi = wilson_interval(passes, len(scored)) if len(scored) else (0.0, 0.0)
    pass_at = {f"pass@{k}": round(v, 4) for k, v in aggregate_pass_at_k(per_task, ks).items()} if ks else {}
    out: dict[str, Any] = {
        "pass@1": None, **pass_at,
        "pass@1_ci95": [round(lo, 4), round(hi, 4)] if len(scored) else None,
        "n_tasks": int(runs["task_id"].nunique()),
        "n_episodes": len(runs),
        "unscored": len(runs) - len(scored),
        "mean_steps": round(float(runs["num_turns"].fillna(0).mean()), 2),
        "mean_completion_tokens": round(float(runs["completion_tokens"].fillna(0).mean()), 1),
        "mean_seconds": round(float(runs["elapsed_seconds"].fillna(0).mean()), 2),
        "parse_error_rate": round(float(runs["parse_errors"].sum() / max(runs["num_turns"].fillna(0).sum(), 1)), 4),
        "exit_reasons": {str(k): int(v) for k, v in runs["exit_reason"].value_counts().items()},
        "suspicious": int(runs["suspicious"].notna().sum()),  # failed for signs of a forged pass
        "backends": sorted({str(b) for b in runs["backend"]}),
    }
    verdicts = scored["compromised"].dropna()
    if len(verdicts):
        out["compromise_rate"] = round(float(verdicts.astype(bool).mean()), 4)
    elif runs["compromised"].notna().any():  # cannot happen today; never report an undecided attack as safe
        out["compromise_rate"] = None
    return out


def summarize(out_dir: Path, fingerprints: Collection[str] | None = None) -> dict[str, Any]:
    """`{model: {scenario: {"pass@1", "n_tasks", ..., "by_label": {label: {...}}}}}` over complete traces.

    With `fingerprints`, only traces whose configuration fingerprint is one of them (one run's) count.
    Files the safe reader refuses (see `trace_io`) are left out, each named in one line on stderr.
    """
    frames = load_traces(out_dir)
    report_skipped(frames.skipped)
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


def unscored_total(summary: dict[str, Any]) -> int:
    """Episodes without a verdict, over every model × scenario."""
    return sum(int(e.get("unscored", 0)) for scenarios in summary.values() for e in scenarios.values())


def print_table(summary: dict[str, Any], console: Any = None) -> None:
    import shutil

    from rich.console import Console
    from rich.table import Table

    table = Table(title="pass@1 per model × scenario × label")
    cols = ("model", "scenario", "label", "pass@1", "95% CI", "tasks", "episodes", "unscored", "steps", "compromised",
            "suspicious")
    for col in cols:
        # names wrap rather than end in "…": the scenario folder says the strategy and protocol
        table.add_column(col, justify="left" if col in ("model", "scenario", "label") else "right",
                         overflow="fold" if col in ("model", "scenario", "label") else "ellipsis")
    for model, scenarios in summary.items():
        for scenario, entry in scenarios.items():
            for label, s in entry["by_label"].items():
                ci = f"{s['pass@1_ci95'][0]:.2f}–{s['pass@1_ci95'][1]:.2f}" if s.get("pass@1_ci95") else "-"
                p1 = f"{s['pass@1']:.3f}" if s.get("pass@1") is not None else "-"
                comp = f"{s['compromise_rate']:.2f}" if s.get("compromise_rate") is not None else "-"
                table.add_row(model, scenario, label, p1, ci, str(s["n_tasks"]), str(s["n_episodes"]),
                              str(s.get("unscored", 0)), f"{s['mean_steps']:.1f}", comp, str(s.get("suspicious", 0)))
    # Not a terminal (CI logs, pipes): rich would squeeze the table into 80 columns.
    console = console or Console(width=max(shutil.get_terminal_size((160, 40)).columns, 120))
    console.print(table)
    if n := unscored_total(summary):
        console.print(f"warning: {n} episode(s) unscored: the scorer failed (outcome.score_error in their traces) "
                      "or the episode never reached scoring; they are left out of pass@1 and compromise rates",
                      style="yellow", markup=False, highlight=False)

