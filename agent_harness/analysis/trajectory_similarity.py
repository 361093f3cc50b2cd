"""Trajectory embeddings across models: same-task similarity, nearest-neighbour agreement, 2-D maps.

Usage: python analysis/trajectory_similarity.py TRACES_DIR [--out DIR] [--weighting typed] [--tsne]
   or: agent-harness analyze trajectory_similarity TRACES_DIR ...
Writes trajectory_similarity.md, similarity_matrix.csv, similarity_by_group.csv, nn_agreement.csv,
similarity_heatmap.png and projection_pca.png (projection_tsne.png with --tsne).
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from ..sandbox.safewrite import Folder
from ..text import md_inline
from ..traces.store import TraceFrames
from . import arms
from ._common import (
    Section,
    colors,
    legend_groups,
    mean_vectors,
    no_embeddings_note,
    parser,
    passed,
    prepare,
    savefig,
    say_caps,
    trajectories,
    write_section,
)

# "typed" halves the weight of tool results: they are mostly the environment's text (file contents,
# test output), shared by every model on a task, and would otherwise dominate the mean.
WEIGHTINGS: dict[str, dict[str, float] | None] = {
    "uniform": None,
    "typed": {"thought": 1.0, "tool_call": 1.0, "final": 1.0, "parse_error": 1.0, "tool_result": 0.5,
              "submit_check": 0.5, "initial_tests": 0.5, "restart": 0.5},
}
MAX_POINTS = 5000  # plotted, and the most a t-SNE map is fitted on
MAX_QUERIES = 20_000  # episodes whose nearest other-model neighbour is looked up
MAX_MODELS = 40  # similarity tables and heatmap: the models with the most episodes (pairs grow with the square)


def trajectory_vectors(frames: TraceFrames, weighting: str = "uniform") -> tuple[pd.DataFrame, np.ndarray]:
    """Episodes with embeddings and one unit vector each (mean of normalised, weighted step vectors)."""
    runs, blocks = trajectories(frames, WEIGHTINGS[weighting])
    return runs, mean_vectors(blocks)


def _mean_cos(a: np.ndarray, b: np.ndarray, same: bool) -> tuple[float, int]:
    """Sum of cosines over all pairs (distinct pairs when `a` is `b`) and the number of pairs."""
    s = float(a.sum(0) @ b.sum(0))
    if same:
        return s - float((a * a).sum()), len(a) * (len(a) - 1)
    return s, len(a) * len(b)


def similarity(runs: pd.DataFrame, vecs: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Mean cosine between two models' trajectories on the same task (and, as a baseline, on other tasks).

    Within each scenario × label, the same-task value averages each shared task's mean pairwise
    cosine; on the diagonal it compares a model's different samples of a task.
    """
    models = sorted(runs["model"].unique())
    rows = []
    for (scenario, label), g in runs.groupby(["scenario", "label"], sort=True):
        idx = {m: {t: gi.index.to_numpy() for t, gi in gm.groupby("task_id")} for m, gm in g.groupby("model")}
        for a, b in itertools.combinations_with_replacement(models, 2):
            if a not in idx or b not in idx:
                continue
            same = a == b
            per_task, s_same, n_same = [], 0.0, 0
            for task in idx[a].keys() & idx[b].keys():
                s, n = _mean_cos(vecs[idx[a][task]], vecs[idx[b][task]], same)
                s_same, n_same = s_same + s, n_same + n
                if n:
                    per_task.append(s / n)
            va = vecs[np.concatenate(list(idx[a].values()))]
            vb = vecs[np.concatenate(list(idx[b].values()))]
            s_all, n_all = _mean_cos(va, vb, same)
            other = (s_all - s_same) / (n_all - n_same) if n_all > n_same else np.nan
            rows.append({"scenario": scenario, "label": label, "model A": a, "model B": b,
                         "tasks": len(per_task), "same-task cos": np.mean(per_task) if per_task else np.nan,
                         "other-task cos": other})
    long = pd.DataFrame(rows, columns=["scenario", "label", "model A", "model B", "tasks", "same-task cos",
                                       "other-task cos"])
    matrix = pd.DataFrame(np.nan, index=models, columns=models)
    for (a, b), g in long.dropna(subset=["same-task cos"]).groupby(["model A", "model B"]):
        matrix.loc[a, b] = matrix.loc[b, a] = np.average(g["same-task cos"], weights=g["tasks"])
    matrix.index.name = "model"
    return long, matrix


def nn_queries(n: int) -> np.ndarray:
    """The episodes whose neighbours `nn_agreement` looks up: all, or a fixed random MAX_QUERIES of them
    (each query compares with every episode: the cost stays linear in the folder's size)."""
    if n <= MAX_QUERIES:
        return np.arange(n)
    return np.sort(np.random.default_rng(0).choice(n, MAX_QUERIES, replace=False))


def nn_agreement(runs: pd.DataFrame, vecs: np.ndarray, block: int = 1024) -> pd.DataFrame:
    """Does an episode's nearest trajectory from another model share its pass/fail (and its task)?

    chance is the agreement expected if the neighbour were a random episode of the other models. Only
    the episodes `nn_queries` picks are looked up (their neighbours are searched among all).
    """
    model = pd.factorize(runs["model"])[0]
    ok = passed(runs).to_numpy()
    key = pd.factorize(runs[["scenario", "label", "task_id"]].astype(str).agg("\0".join, axis=1))[0]
    v = vecs.astype(np.float32)
    queries = nn_queries(len(v))
    nn = np.empty(len(queries), dtype=int)
    for start in range(0, len(queries), block):
        q_idx = queries[start:start + block]
        sims = v[q_idx] @ v.T
        sims[model[q_idx, None] == model[None, :]] = -np.inf
        nn[start:start + block] = sims.argmax(axis=1)
    n_model = np.bincount(model)[model]
    pass_model = np.bincount(model, weights=ok)[model]
    q = ((ok.sum() - pass_model) / np.maximum(len(ok) - n_model, 1))[queries]
    ok_q = ok[queries]
    frame = pd.DataFrame({"model": runs["model"].to_numpy()[queries], "agrees": ok_q == ok[nn],
                          "chance": np.where(ok_q, q, 1 - q), "same task": key[queries] == key[nn]})
    table = frame.groupby("model", sort=True).agg(episodes=("agrees", "size"), **{
        "nn shares pass/fail": ("agrees", "mean"), "chance": ("chance", "mean"),
        "nn on same task": ("same task", "mean")})
    total = pd.DataFrame({"episodes": [len(frame)], "nn shares pass/fail": [frame["agrees"].mean()],
                          "chance": [frame["chance"].mean()], "nn on same task": [frame["same task"].mean()]},
                         index=["(all)"])
    return pd.concat([table, total]).rename_axis("model").reset_index()


def plot_heatmap(matrix: pd.DataFrame, out: Folder | Path) -> Path:
    import matplotlib.pyplot as plt

    n = len(matrix)
    values = matrix.to_numpy(float)
    finite = values[np.isfinite(values)]  # all NaN with one model on one sample: no pair to compare
    fig, ax = plt.subplots(figsize=(2.5 + 0.8 * n, 2 + 0.7 * n))
    im = ax.imshow(values, cmap="viridis", vmin=min(0.0, finite.min(initial=0.0)), vmax=1.0)
    ax.set_xticks(range(n), matrix.columns, rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(n), matrix.index, fontsize=8)
    for i, j in itertools.product(range(n), range(n)):
        value = matrix.iat[i, j]
        ax.text(j, i, "–" if np.isnan(value) else f"{value:.2f}", ha="center", va="center", color="w",
                fontsize=8)
    fig.colorbar(im, ax=ax, label="mean cosine, same task")
    ax.set_title("trajectory similarity on the same tasks")
    return savefig(fig, out, "similarity_heatmap.png")


def plot_projection(runs: pd.DataFrame, xy: np.ndarray, method: str, out: Folder | Path) -> Path:
    import matplotlib.pyplot as plt

    if len(runs) > MAX_POINTS:  # plot a fixed random subset; the projection used every episode
        pick = np.sort(np.random.default_rng(0).choice(len(runs), MAX_POINTS, replace=False))
        runs, xy = runs.iloc[pick], xy[pick]
    outcome = np.where(passed(runs), "pass", "fail")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    for ax, (title, values) in zip(axes, (("model", runs["model"].to_numpy()), ("pass/fail", outcome),
                                          ("label", runs["label"].to_numpy())), strict=True):
        values = legend_groups(values)
        names = sorted(set(values))
        col = {"pass": "tab:green", "fail": "tab:red"} if title == "pass/fail" else colors(names)
        for name in names:
            m = values == name
            ax.scatter(xy[m, 0], xy[m, 1], s=10, alpha=0.7, color=col[name], label=f"{name} ({m.sum()})")
        ax.set_title(f"{method}, coloured by {title}")
        ax.legend(fontsize=7, markerscale=1.5)
    return savefig(fig, out, f"projection_{method.lower().replace('-', '')}.png")


def analyze(frames: TraceFrames, out: Folder | Path, weighting: str = "uniform", tsne: bool = False) -> Section:
    runs, vecs = trajectory_vectors(frames, weighting)
    if len(runs):  # "model" names the arm, as in compare_models (row order kept: vecs align with it)
        runs = arms.with_arms(runs)
        runs = runs.assign(model=arms.arm_names(runs))
    sec = Section("Trajectory similarity")
    if len(runs) == 0:
        sec.text.append(no_embeddings_note(frames))
        return sec
    emb_model = runs["embedding_model"].dropna()
    sec.text += [
        f"{len(runs)} of {len(frames.runs)} episodes have step embeddings "
        f"({md_inline(emb_model.iloc[0]) if len(emb_model) else 'embedding model unknown'}).",
        f"Trajectory vector: the mean of the episode's L2-normalised step embeddings (weighting: {weighting}"
        + ("; tool results count half" if weighting == "typed" else "") + "), normalised again. "
        "Similarity of two trajectories is the cosine of their vectors.",
        "Same-task cos: within each scenario × label, the mean cosine between model A's and model B's "
        "trajectories on each task both ran, averaged over tasks (diagonal: between a model's different "
        "samples of a task, so empty with one sample). Other-task cos: the same pairs of models on different "
        "tasks of that scenario × label, as a baseline. The matrix averages the groups, weighted by tasks.",
        "Nearest-neighbour agreement: for each episode, its most similar trajectory among all episodes of "
        "the other models; the share whose neighbour has the same pass/fail, against the share expected from "
        "a random neighbour (chance), and the share whose neighbour is on the same task.",
    ]
    top = runs["model"].value_counts(sort=True).index[:MAX_MODELS]
    if (n_models := runs["model"].nunique()) > MAX_MODELS:
        sec.caps.append(f"{n_models} models: the similarity tables and heatmap cover the {MAX_MODELS} with the "
                        "most episodes.")
    long, matrix = similarity(runs[runs["model"].isin(top)], vecs)
    sec.tables += [("similarity_matrix", "Mean same-task cosine between models", matrix.reset_index()),
                   ("similarity_by_group", "Same-task vs other-task cosine per scenario × label", long)]
    if runs["model"].nunique() > 1:
        sec.tables.append(("nn_agreement", "Nearest other-model neighbour", nn_agreement(runs, vecs)))
        if len(runs) > MAX_QUERIES:
            sec.caps.append(f"Nearest-neighbour agreement: {MAX_QUERIES} of the {len(runs)} episodes (a fixed "
                            "random sample) were looked up; their neighbours were searched among all.")
    else:
        sec.text.append("Only one model has embeddings: no cross-model neighbours.")
    sec.plots.append(("Trajectory similarity heatmap", plot_heatmap(matrix, out)))
    if len(runs) >= 3:
        from sklearn.decomposition import PCA

        pca = PCA(n_components=2, random_state=0).fit(vecs)
        ratio = ", ".join(f"{r:.0%}" for r in pca.explained_variance_ratio_)
        sec.plots.append((f"PCA of trajectory vectors (variance explained {ratio})",
                          plot_projection(runs, pca.transform(vecs), "PCA", out)))
    if tsne and len(runs) >= 5:
        from sklearn.manifold import TSNE

        pick = np.arange(len(runs))
        if len(runs) > MAX_POINTS:
            pick = np.sort(np.random.default_rng(0).choice(len(runs), MAX_POINTS, replace=False))
            sec.caps.append(f"t-SNE: fitted on {MAX_POINTS} of the {len(runs)} episodes (a fixed random sample).")
        sub = runs.iloc[pick].reset_index(drop=True)
        xy = TSNE(n_components=2, init="pca", perplexity=min(30.0, (len(sub) - 1) / 3), random_state=0,
                  metric="cosine").fit_transform(vecs[pick])
        sec.plots.append(("t-SNE of trajectory vectors (cosine)", plot_projection(sub, xy, "t-SNE", out)))
    return sec


def main(argv: list[str] | None = None) -> int:
    p = parser("trajectory_similarity", __doc__.splitlines()[0])
    p.add_argument("--weighting", choices=sorted(WEIGHTINGS), default="uniform",
                   help="step weights in the trajectory mean (typed: tool results count half)")
    p.add_argument("--tsne", action="store_true", help="also a t-SNE map (slow for thousands of episodes)")
    args = p.parse_args(argv)
    frames, out = prepare(args)
    section = analyze(frames, out, args.weighting, args.tsne)
    say_caps(section)
    if not section.tables:
        print(section.text[0], file=sys.stderr)
    print(f"wrote {write_section(section, out, 'trajectory_similarity')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
