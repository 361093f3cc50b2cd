"""The comparison's plots: pass@1 bars, pass@1 within a turn budget, tokens and wall time, tool use.

Each plot takes a table of `compare_models` whose `model` column already names the arm (compare_models
makes it "model (protocol)" when the traces hold several protocols).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from ..sandbox.safewrite import Folder
from ._common import colors, savefig

MAX_PANELS = 12


def _group_name(scenario: str, label: str) -> str:
    return f"{scenario}\n{label}"


def plot_pass(table: pd.DataFrame, out: Folder | Path) -> Path:
    """pass@1 bars per arm and scenario × label."""
    import matplotlib.pyplot as plt

    models = sorted(table["model"].unique())
    groups = sorted({(s, lab) for s, lab in zip(table["scenario"], table["label"], strict=True)})
    width = 0.8 / len(models)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(groups) * max(1, len(models) / 3)), 4.2))
    col = colors(models)
    for j, model in enumerate(models):
        t = table[table["model"] == model].set_index(["scenario", "label"]).reindex(groups)
        x = np.arange(len(groups)) + (j - (len(models) - 1) / 2) * width
        y = t["pass@1"].to_numpy(float)
        lo, hi = t["pass@1 lo"].to_numpy(float), t["pass@1 hi"].to_numpy(float)
        err = np.clip(np.vstack([y - lo, hi - y]), 0, None)  # rounding can leave -1e-17
        with warnings.catch_warnings():  # matplotlib's yerr check calls math.isfinite on a 1-element row
            warnings.simplefilter("ignore", DeprecationWarning)
            ax.bar(x, y, width, yerr=err, capsize=3, label=model, color=col[model])
    rotate = len(groups) > 4
    ax.set_xticks(np.arange(len(groups)), [_group_name(*g) for g in groups], fontsize=8,
                  rotation=30 if rotate else 0, ha="right" if rotate else "center")
    ax.set_ylim(0, 1.2)
    ax.set_yticks(np.linspace(0, 1, 6))
    ax.set_ylabel("pass@1 (95 % Wilson CI)")
    ax.legend(fontsize=8, ncols=min(4, len(models)), loc="upper center")
    ax.set_title("pass@1 by model")
    return savefig(fig, out, "pass_at_1.png")


def plot_pass_vs_steps(curve: pd.DataFrame, out: Folder | Path) -> Path:
    """One panel per scenario × label, a step curve per arm."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    groups = sorted({(s, lab) for s, lab in zip(curve["scenario"], curve["label"], strict=True)})[:MAX_PANELS]
    ncols = min(3, len(groups))
    nrows = -(-len(groups) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.2 * nrows), squeeze=False, sharey=True)
    col = colors(sorted(curve["model"].unique()))
    for ax, (scenario, label) in zip(axes.flat, groups, strict=False):
        part = curve[(curve["scenario"] == scenario) & (curve["label"] == label)]
        for model, g in part.groupby("model"):
            ax.step(g["max turns"], g["pass@1"], where="post", label=model, color=col[model], marker="o",
                    ms=3)
        ax.set_title(f"{scenario} / {label}", fontsize=9)
        ax.set_xlabel("max model turns")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(-0.02, 1.02)
    for ax in axes.flat[len(groups):]:
        ax.axis("off")
    axes[0, 0].set_ylabel("pass@1 within the budget")
    axes[0, 0].legend(fontsize=7)
    return savefig(fig, out, "pass_vs_steps.png")


def plot_tokens_time(runs: pd.DataFrame, out: Folder | Path) -> Path:
    """Box plots per arm of tokens and wall time per task (mean over samples)."""
    import matplotlib.pyplot as plt

    runs = runs.assign(tokens=runs["prompt_tokens"].fillna(0) + runs["completion_tokens"].fillna(0))
    per_task = runs.groupby(["model", "scenario", "label", "task_id"])[["tokens", "elapsed_seconds"]].mean()
    models = sorted(runs["model"].unique())
    fig, axes = plt.subplots(1, 2, figsize=(max(8.0, 1.6 * len(models) * 2), 3.8))
    panels = ((axes[0], "tokens", "tokens per task"), (axes[1], "elapsed_seconds", "wall s per task"))
    for ax, metric, title in panels:
        data = [per_task.loc[m, metric].dropna().to_numpy() for m in models]
        ax.boxplot(data, tick_labels=models, showmeans=True)
        ax.set_title(title + " (mean over samples)")
        ax.tick_params(axis="x", labelrotation=20, labelsize=8)
    return savefig(fig, out, "tokens_time.png")


def plot_tools(tools: pd.DataFrame, out: Folder | Path) -> Path:
    """Calls per episode of each tool, a bar per arm."""
    import matplotlib.pyplot as plt

    wide = tools.pivot_table(index="tool", columns="model", values="calls/episode", fill_value=0.0)
    fig, ax = plt.subplots(figsize=(7, 0.5 + 0.45 * max(1, len(wide)) * max(1, len(wide.columns) / 2)))
    if wide.empty:
        ax.text(0.5, 0.5, "no tool calls", ha="center", va="center")
        ax.axis("off")
    else:
        col = colors(list(wide.columns))
        wide.plot.barh(ax=ax, color=[col[m] for m in wide.columns])
        ax.set_xlabel("calls per episode")
        ax.legend(fontsize=8)
    ax.set_title("tool use")
    return savefig(fig, out, "tool_use.png")
