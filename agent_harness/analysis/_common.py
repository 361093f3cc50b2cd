"""Shared plumbing of the analysis scripts: arguments, loading, result sections, tables, figures."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display anywhere these run
# Names in plots come from trace files: shown as text, never read as math markup ("$\\frac{}$" would
# raise at draw time) nor handed to TeX.
matplotlib.rcParams.update({"text.parse_math": False, "text.usetex": False})

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from ..sandbox.safewrite import Folder, UnsafePath  # noqa: E402
from ..text import md_inline, printable  # noqa: E402
from ..traces.files import report_skipped  # noqa: E402
from ..traces.store import TraceFrames, load_traces  # noqa: E402

MAX_LABEL = 80  # characters of a name shown in a plot (tables have it whole)
MAX_LEGEND = 20  # names coloured apart in one plot; the rest share one colour
MAX_FIGURE_INCHES = 120.0  # at 90 dpi, within matplotlib's 2**16-pixel limit whatever the number of models


@dataclass
class Section:
    """What one analysis found: prose (Markdown; trace text in it through `md_inline`), named tables (also
    written as CSV), plots, and `caps`: what it left out to stay within its bounds (said in the output)."""

    title: str
    text: list[str] = field(default_factory=list)
    caps: list[str] = field(default_factory=list)
    tables: list[tuple[str, str, pd.DataFrame]] = field(default_factory=list)  # (name, caption, table)
    plots: list[tuple[str, Path]] = field(default_factory=list)  # (caption, png)

    def table(self, name: str) -> pd.DataFrame:
        return next(t for n, _, t in self.tables if n == name)


def parser(name: str, description: str) -> argparse.ArgumentParser:
    """The arguments every analysis takes; `name` is the analysis's name in `agent-harness analyze NAME`."""
    p = argparse.ArgumentParser(prog=f"agent-harness analyze {name}", description=description)
    p.add_argument("traces", type=Path, help="traces folder (as written by run_agents.py --out)")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: TRACES/analysis)")
    return p


def prepare(args: argparse.Namespace) -> tuple[TraceFrames, Folder]:
    """Load the traces (exit 1 when none load), then create the output folder: --out as given, else
    `analysis` in the traces folder, reached without following a link (exit 2, one line, when something
    else than a folder is in the way)."""
    frames = load(args.traces)
    out = Folder(args.out) if args.out is not None else Folder(args.traces, "analysis")
    try:
        return frames, out.create()
    except UnsafePath as e:
        print(f"error: {printable(str(e))}", file=sys.stderr)
        raise SystemExit(2) from None


def load(traces: Path, completed_only: bool = True) -> TraceFrames:
    """Load a traces folder, saying on stderr what was skipped; exit 1 when nothing loads."""
    if not traces.is_dir():
        sys.exit(f"error: {traces} is not a folder")
    frames = load_traces(traces)
    report_skipped(frames.skipped)
    if completed_only:
        frames = only_completed(frames)
    if frames.runs.empty:
        sys.exit(f"error: no complete traces under {traces}")
    return frames


def only_completed(frames: TraceFrames) -> TraceFrames:
    """Episodes that finished and were scored (a killed run leaves partial traces behind)."""
    done = frames.runs["completed"].fillna(False).astype(bool)
    if done.all():
        return frames
    print(f"ignoring {int((~done).sum())} incomplete episode(s)", file=sys.stderr)
    keep = frames.steps["run_id"].isin(set(frames.runs.loc[done, "run_id"])).to_numpy()
    return TraceFrames(frames.runs[done].reset_index(drop=True), frames.steps[keep].reset_index(drop=True),
                       frames.skipped, frames.embeddings[keep], frames.root)


def passed(runs: pd.DataFrame) -> pd.Series:
    """`passed` as bool: an unscored episode (None, see report.unscored_counts) reads as not passed here;
    summary.py leaves such episodes out of pass@k instead."""
    return runs["passed"].astype("boolean").fillna(False).astype(bool)


def fmt(x: object, digits: int = 3) -> str:
    if isinstance(x, float | np.floating):
        return "–" if np.isnan(x) else f"{x:.{digits}f}"
    return "–" if x is None or x is pd.NA else str(x)


def md_table(df: pd.DataFrame, max_rows: int = 60) -> str:
    """A GitHub markdown table, every cell and header inline text (`md_inline`); long tables are cut with a
    pointer to the CSV."""
    shown = df.head(max_rows)
    cols = [md_inline(c) for c in shown.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(md_inline(fmt(v)) for v in row) + " |" for row in shown.itertuples(index=False)]
    if len(df) > max_rows:
        lines.append(f"\n({len(df) - max_rows} more rows in the CSV)")
    return "\n".join(lines)


def write_section(section: Section, out: Folder | Path, name: str) -> Path:
    """Write `<name>.md` plus one CSV per table (no link followed, see `safewrite`); returns the markdown path."""
    out = Folder.of(out)
    parts = [f"# {section.title}", *section.caps, *section.text]
    for table_name, caption, df in section.tables:
        out.write(f"{table_name}.csv", df.to_csv(index=False).encode("utf-8"))
        parts += [f"## {caption}", f"`{table_name}.csv`", md_table(df)]
    for caption, png in section.plots:
        parts.append(f"## {caption}\n\n![{caption}]({png.name})")
    return out.write(f"{name}.md", ("\n\n".join(parts) + "\n").encode("utf-8"))


def say_caps(section: Section) -> None:
    """Print what the analysis capped (also in its output) on stderr."""
    for line in section.caps:
        print(f"{section.title}: {line}", file=sys.stderr)


def savefig(fig: matplotlib.figure.Figure, out: Folder | Path, name: str) -> Path:
    """Save the figure as the PNG `name` in `out` (rendered in memory, written without following a link)."""
    import io

    import matplotlib.pyplot as plt

    w, h = fig.get_size_inches()
    fig.set_size_inches(min(w, MAX_FIGURE_INCHES), min(h, MAX_FIGURE_INCHES))
    _shorten_labels(fig)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return Folder.of(out).write(name, buf.getvalue())


def _short(text: str) -> str:
    return text if len(text) <= MAX_LABEL else text[: MAX_LABEL - 1] + "…"


def _shorten_labels(fig: matplotlib.figure.Figure) -> None:
    """Names from traces can be any length: legends, titles and category ticks show at most MAX_LABEL
    characters (tick labels are made at draw time, so their formatters are wrapped)."""
    from matplotlib.category import StrCategoryFormatter
    from matplotlib.ticker import FixedFormatter, FuncFormatter

    for text in fig.findobj(matplotlib.text.Text):
        text.set_text(_short(text.get_text()))
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            fmt = axis.get_major_formatter()
            if isinstance(fmt, FixedFormatter | FuncFormatter | StrCategoryFormatter):  # not numbers
                axis.set_major_formatter(FuncFormatter(lambda x, pos, f=fmt: _short(f(x, pos))))


def legend_groups(values: np.ndarray, limit: int = MAX_LEGEND) -> np.ndarray:
    """`values` (names, one per point) with all but the `limit` most frequent merged into one group, so that a
    plot coloured by name draws at most `limit` + 1 series and legend entries however many names there are."""
    counts = pd.Series(values).value_counts(sort=True)
    if len(counts) <= limit:
        return values
    rest = f"({len(counts) - limit} others)"
    return np.where(pd.Series(values).isin(set(counts.index[:limit])).to_numpy(), values, rest)


def colors(names: Sequence[str]) -> dict[str, tuple[float, ...]]:
    import matplotlib.pyplot as plt

    cmap = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")
    return {n: cmap(i % cmap.N) for i, n in enumerate(names)}


def trajectories(frames: TraceFrames, weights: dict[str, float] | None = None,
                 min_steps: int = 1) -> tuple[pd.DataFrame, list[np.ndarray]]:
    """Per episode, its unit-normalised step vectors (in step order), for episodes that have embeddings.

    Episodes embedded by a model other than the most common embedding model are left out: their
    vectors live in another space. `weights` (by step type) scale each normalised vector. When the episodes
    come from several harnesses (imported ones, see `agent-harness import`), `model` names "model [harness]":
    the analyses compare harnesses as they compare models.
    """
    steps, emb = frames.steps, frames.embeddings
    keep = steps["has_embedding"].to_numpy(bool, copy=True) if len(steps) else np.zeros(0, bool)
    if emb.shape[1] == 0 or not keep.any():
        return frames.runs.iloc[:0], []
    runs = frames.runs
    main_model = runs["embedding_model"].dropna().mode()
    if len(main_model):
        ok_ids = set(runs.loc[runs["embedding_model"] == main_model.iloc[0], "run_id"])
        keep &= steps["run_id"].isin(ok_ids).to_numpy()
    vecs = emb[keep]
    norms = np.linalg.norm(vecs.astype(np.float64), axis=1, keepdims=True)  # float32 squares overflow at 1e19
    vecs = (vecs / np.where(norms > 0, norms, 1.0)).astype(np.float32)
    if weights:
        vecs *= steps.loc[keep, "type"].map(weights).fillna(1.0).to_numpy()[:, None]
    run_ids = steps.loc[keep, "run_id"].to_numpy()
    starts = np.flatnonzero(np.r_[True, run_ids[1:] != run_ids[:-1]]) if len(run_ids) else np.zeros(0, int)
    ends = np.r_[starts[1:], len(run_ids)]
    blocks = {run_ids[s]: vecs[s:e] for s, e in zip(starts, ends, strict=True) if e - s >= min_steps}
    sel = runs[runs["run_id"].isin(blocks.keys())].reset_index(drop=True)
    if "harness" in sel and sel["harness"].nunique() > 1:
        sel = sel.assign(model=sel["model"].astype(str) + " [" + sel["harness"].astype(str) + "]")
    return sel, [blocks[r] for r in sel["run_id"]]


def mean_vectors(blocks: list[np.ndarray]) -> np.ndarray:
    """One unit vector per trajectory: the normalised mean of its (normalised) step vectors."""
    if not blocks:
        return np.zeros((0, 0))
    v = np.stack([b.mean(axis=0) for b in blocks])
    n = np.linalg.norm(v, axis=1, keepdims=True)
    return v / np.where(n > 0, n, 1.0)


def no_embeddings_note(frames: TraceFrames) -> str:
    return (f"No step embeddings in these {len(frames.runs)} episode(s): the traces were written with "
            "`--no-embed` (or before embedding finished). Rerun with embeddings on to use this analysis.")
