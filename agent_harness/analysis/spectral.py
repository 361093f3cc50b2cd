"""Spectral features of step-embedding trajectories, and whether they separate labels and pass/fail.

Usage: python analysis/spectral.py TRACES_DIR [--out DIR] [--boot N]
   or: agent-harness analyze spectral TRACES_DIR ...
Writes spectral.md, spectral_features.csv, spectral_auroc.csv, laplacian_eigenvalues.csv,
spectral_features.png and laplacian_spectrum.png.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..sandbox.safewrite import Folder
from ..traces.store import TraceFrames
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

TOP_K = 4
GRAM_FEATURES = [f"lambda_{i + 1}" for i in range(TOP_K)] + [
    "spectral_entropy", "entropy_norm", "effective_rank", "participation_ratio"]
GRAPH_DIMS = 8
GRAPH_NEIGHBOURS = 10
MIN_CLASS = 4
SHUFFLES = 5
# The most steps of one trajectory whose spectrum is computed when its vectors are wider still: the
# decomposed matrix is at most this square, whatever a trace holds.
MAX_SPECTRUM = 1024
MATMUL_FLOPS = 1 << 27  # about the most multiply-adds of one matrix product (a fraction of a second)
DENSE_GRAPH = 500  # the kNN graph's Laplacian is decomposed densely up to this many trajectories
BOOT_BLOCK = 1 << 20  # bootstrap resamples × episodes drawn at once

METHOD = """\
**Per-trajectory spectrum.** For an episode with n ≥ 2 embedded steps, X is the n × d matrix of its
L2-normalised step embeddings and G = X Xᵀ its Gram (step-similarity) matrix. Its eigenvalues
λ₁ ≥ … ≥ λₙ ≥ 0 sum to n; p = λ / n. (They are computed from the smaller of X Xᵀ and Xᵀ X; a trajectory
longer than {cap} steps whose vectors are also wider than {cap} is taken over its first {cap} steps.)
Features: lambda_1…lambda_{k} = p₁…p_{k} (0 past n), spectral
entropy H = −Σ p log p, entropy_norm = H / log n, effective rank exp(H) and participation ratio
1 / Σ p². A trajectory that keeps saying the same thing has p₁ near 1 and an effective rank near 1.

**Cross-run graph.** Trajectory vectors (mean of normalised step vectors) are joined to their {nn}
nearest neighbours by cosine; the symmetric normalised Laplacian of that graph gives the eigenvalues in
`laplacian_eigenvalues.csv` (a gap after the m-th suggests m clusters) and, from its first {dims}
non-trivial eigenvectors, the "graph" feature set. The graph is built without labels.

**AUROC.** For each comparison (gold vs an attack label within a scenario; pass vs fail; compromised vs
not), a standardised logistic regression on a feature set is scored by out-of-fold probabilities from
stratified k-fold cross-validation (k = min(5, size of the smaller class, number of tasks)); folds are
grouped by task_id (StratifiedGroupKFold) so that one task's episodes never sit in both the training and
the test fold.
AUROC is computed once over the pooled out-of-fold scores: no number is fitted and scored on the same
episodes. The 95 % interval is a percentile bootstrap of those scores over episodes ({boot} resamples; it
does not refit). Controls: the same procedure with labels shuffled (mean of {shuffles} permutations;
expect ≈ 0.5) and with the trajectory length (log n) as the only feature (does the spectrum add anything
beyond length?). "best single" picks the single feature and its sign on one half of the tasks and reports
its AUROC on the other half. Comparisons with fewer than {min_class} episodes in a class are listed
without scores. With few episodes, values well below 0.5 are not a reversed signal but the known bias of
cross-validation when the classes cannot be told apart (each held-out fold shifts the training balance
the other way); read them as "no signal", like the shuffled control.
"""


def gram_eigenvalues(x: np.ndarray) -> np.ndarray:
    """The eigenvalues of X Xᵀ (descending, clipped at 0; zeros past min(n, d) left out), from the smaller of
    X Xᵀ and Xᵀ X (they share their non-zero eigenvalues): linear in the steps for a given width. The product
    is summed over blocks of at most about MATMUL_FLOPS, so that a stop request waits for no long call."""
    n, d = x.shape
    side, other = min(n, d), max(n, d)
    g = np.zeros((side, side))
    step = max(1, MATMUL_FLOPS // (side * side))
    for start in range(0, other, step):
        b = (x[:, start:start + step] if n <= d else x[start:start + step].T).astype(np.float64)
        g += b @ b.T
    return np.clip(np.linalg.eigvalsh(g)[::-1], 0.0, None)


def truncated(blocks: list[np.ndarray]) -> int:
    """How many trajectories `gram_features` takes over their first MAX_SPECTRUM steps only."""
    return sum(min(x.shape) > MAX_SPECTRUM for x in blocks)


def gram_features(blocks: list[np.ndarray]) -> pd.DataFrame:
    """Spectral features of each trajectory's step-similarity matrix (rows: unit step vectors); one longer
    than MAX_SPECTRUM steps whose vectors are wider still is taken over its first MAX_SPECTRUM steps."""
    rows = []
    for x in blocks:
        length = len(x)
        if min(x.shape) > MAX_SPECTRUM:
            x = x[:MAX_SPECTRUM]
        n = len(x)
        lam = gram_eigenvalues(x)
        p = lam / lam.sum() if lam.sum() > 0 else np.full(n, 1.0 / n)
        nz = p[p > 1e-12]
        h = float(-(nz * np.log(nz)).sum())
        top = np.zeros(TOP_K)
        top[: min(len(p), TOP_K)] = p[:TOP_K]
        rows.append([length, *top, h, h / np.log(n), np.exp(h), 1.0 / float((p * p).sum())])
    return pd.DataFrame(rows, columns=["n_steps", *GRAM_FEATURES])


def graph_spectrum(vecs: np.ndarray, n_eig: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """Smallest eigenvalues of the kNN graph's normalised Laplacian, and the spectral embedding."""
    from scipy.sparse import identity
    from scipy.sparse.csgraph import laplacian
    from scipy.sparse.linalg import eigsh
    from sklearn.neighbors import kneighbors_graph

    n = len(vecs)
    adj = kneighbors_graph(vecs, n_neighbors=min(GRAPH_NEIGHBOURS, n - 1), metric="cosine",
                           include_self=False)
    lap = laplacian(adj.maximum(adj.T), normed=True)
    m = min(n_eig, n - 1)
    if n <= DENSE_GRAPH:
        vals, vecs_ = np.linalg.eigh(lap.toarray())
    else:  # largest of 2I − L = smallest of L, and converges far faster than which="SM"
        start = np.random.default_rng(0).standard_normal(n)
        vals, vecs_ = eigsh(2 * identity(n) - lap, k=m, which="LA", v0=start)
        vals = 2 - vals
    order = np.argsort(vals)
    vals, vecs_ = vals[order], vecs_[:, order]
    return np.clip(vals[:m], 0, 2), vecs_[:, 1: GRAPH_DIMS + 1]


@dataclass
class Comparison:
    name: str
    mask: np.ndarray  # episodes in the comparison
    y: np.ndarray  # 1 = the class named second (attack, pass, compromised)


def comparisons(runs: pd.DataFrame) -> list[Comparison]:
    """Gold vs each attack label per scenario; pass vs fail per scenario and overall; compromised vs not."""
    out: list[Comparison] = []
    ok = passed(runs).to_numpy()
    for scenario, g in runs.groupby("scenario", sort=True):
        in_s = (runs["scenario"] == scenario).to_numpy()
        labels = set(g["label"])
        if "gold" in labels:
            for label in sorted(labels - {"gold"}):
                mask = in_s & runs["label"].isin(["gold", label]).to_numpy()
                attack = (runs["label"] == label).to_numpy()
                out.append(Comparison(f"{scenario}: gold vs {label}", mask, attack))
        out.append(Comparison(f"{scenario}: fail vs pass", in_s, ok))
        comp = runs["compromised"]
        known = in_s & comp.notna().to_numpy()
        if known.any():
            out.append(Comparison(f"{scenario}: safe vs compromised", known,
                                  comp.astype("boolean").fillna(False).to_numpy(bool)))
    if runs["scenario"].nunique() > 1:
        out.append(Comparison("all scenarios: fail vs pass", np.ones(len(runs), bool), ok))
    return out


def oof_scores(x: np.ndarray, y: np.ndarray, groups: np.ndarray, seed: int = 0) -> np.ndarray:
    """Out-of-fold P(y = 1) of a standardised logistic regression; folds never split a task."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    n_groups = len(np.unique(groups))
    k = int(min(5, y.sum(), (1 - y).sum(), n_groups if n_groups >= 2 else 5))
    if n_groups >= 2:
        splits = StratifiedGroupKFold(k, shuffle=True, random_state=seed).split(x, y, groups)
    else:
        splits = StratifiedKFold(k, shuffle=True, random_state=seed).split(x, y)
    scores = np.full(len(y), np.nan)
    model = make_pipeline(StandardScaler(), LogisticRegression(solver="liblinear"))
    for train, test in splits:
        if len(np.unique(y[train])) == 2:
            scores[test] = model.fit(x[train], y[train]).predict_proba(x[test])[:, 1]
    return scores


def auroc(y: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve via the Mann–Whitney rank sum (ties averaged); NaN scores are left out."""
    return float(_auroc_rows(y[None, :], scores[None, :])[0])


def _auroc_rows(y: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """AUROC of each row (vectorised, for the bootstrap); NaN where a row lacks a class."""
    from scipy.stats import rankdata

    ok = ~np.isnan(scores)
    if not ok.all():  # only whole columns are ever NaN (a fold that could not be fitted)
        cols = ok.all(axis=0)
        y, scores = y[:, cols], scores[:, cols]
    ranks = rankdata(scores, axis=1)
    pos = y.sum(axis=1)
    neg = y.shape[1] - pos
    with np.errstate(invalid="ignore", divide="ignore"):
        auc = ((ranks * y).sum(axis=1) - pos * (pos + 1) / 2) / (pos * neg)
    return np.where((pos > 0) & (neg > 0), auc, np.nan)


def bootstrap_auroc(y: np.ndarray, scores: np.ndarray, n_boot: int, seed: int = 0) -> tuple[float, float]:
    """Percentile interval of the AUROC over episodes resampled with replacement (scores fixed)."""
    ok = ~np.isnan(scores)
    y, scores = y[ok], scores[ok]
    if n_boot < 1 or len(y) == 0:
        return np.nan, np.nan
    rng = np.random.default_rng(seed)
    rows = max(1, BOOT_BLOCK // len(y))  # in blocks: bounded memory, and short calls a stop request can end
    parts = []
    for start in range(0, n_boot, rows):
        idx = rng.integers(0, len(y), size=(min(rows, n_boot - start), len(y)))
        parts.append(_auroc_rows(y[idx], scores[idx]))
    values = np.concatenate(parts)
    if np.isnan(values).all():
        return np.nan, np.nan
    lo, hi = np.nanquantile(values, [0.025, 0.975])
    return float(lo), float(hi)


def best_single(x: np.ndarray, y: np.ndarray, groups: np.ndarray, names: list[str]) -> tuple[str, float]:
    """Feature and sign chosen on half of the tasks; its AUROC on the other half."""
    from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold

    if len(np.unique(groups)) >= 2:
        train, test = next(StratifiedGroupKFold(2, shuffle=True, random_state=0).split(x, y, groups))
    else:
        train, test = next(StratifiedKFold(2, shuffle=True, random_state=0).split(x, y))
    if len(np.unique(y[train])) < 2 or len(np.unique(y[test])) < 2:
        return "–", np.nan
    fits = [auroc(y[train], x[train, j]) for j in range(x.shape[1])]
    j = int(np.nanargmax([abs(a - 0.5) for a in fits]))
    sign = 1.0 if fits[j] >= 0.5 else -1.0
    return f"{'+' if sign > 0 else '−'}{names[j]}", auroc(y[test], sign * x[test, j])


def evaluate(feats: pd.DataFrame, sets: dict[str, list[str]], runs: pd.DataFrame,
             n_boot: int) -> pd.DataFrame:
    """AUROC of every feature set on every comparison, with the controls (see METHOD)."""
    rows = []
    groups_all = pd.factorize(runs["task_id"])[0]
    length = np.log(feats["n_steps"].to_numpy(float))[:, None]
    rng = np.random.default_rng(0)
    for comp in comparisons(runs):
        y, groups = comp.y[comp.mask].astype(int), groups_all[comp.mask]
        negatives, positives = int((y == 0).sum()), int(y.sum())
        base = {"comparison": comp.name, "episodes": int(comp.mask.sum()), "negatives": negatives,
                "positives": positives}
        if min(negatives, positives) < MIN_CLASS:
            rows.append({**base, "features": "–", "note": f"fewer than {MIN_CLASS} episodes in a class"})
            continue
        length_auc = auroc(y, oof_scores(length[comp.mask], y, groups))
        for set_name, cols in sets.items():
            x = feats.loc[comp.mask, cols].to_numpy(float)
            scores = oof_scores(x, y, groups)
            lo, hi = bootstrap_auroc(y, scores, n_boot)
            shuffled = np.nanmean([auroc(perm, oof_scores(x, perm, groups, seed=s))
                                   for s, perm in enumerate(rng.permutation(y) for _ in range(SHUFFLES))])
            feature, single = best_single(x, y, groups, cols)
            rows.append({**base, "features": set_name, "AUROC (CV logreg)": auroc(y, scores), "AUROC lo": lo,
                         "AUROC hi": hi, "shuffled labels": shuffled, "length only": length_auc,
                         "best single (held out)": feature, "its AUROC": single, "note": ""})
    return pd.DataFrame(rows)


def plot_features(feats: pd.DataFrame, runs: pd.DataFrame, out: Folder | Path) -> Path:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4))
    outcome = np.where(passed(runs), "pass", "fail")
    for ax, (title, values) in zip(axes, (("label", runs["label"].to_numpy()), ("pass/fail", outcome)),
                                   strict=True):
        values = legend_groups(values)
        names = sorted(set(values))
        col = {"pass": "tab:green", "fail": "tab:red"} if title == "pass/fail" else colors(names)
        for name in names:
            m = values == name
            ax.scatter(feats.loc[m, "lambda_1"], feats.loc[m, "entropy_norm"], s=10, alpha=0.6,
                       color=col[name], label=f"{name} ({m.sum()})")
        ax.set_xlabel("lambda_1 (share of the top eigenvalue)")
        ax.set_ylabel("spectral entropy / log n")
        ax.set_title(f"trajectory spectra by {title}")
        ax.legend(fontsize=7)
    return savefig(fig, out, "spectral_features.png")


def plot_laplacian(vals: np.ndarray, out: Folder | Path) -> Path:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.4))
    ax.plot(np.arange(1, len(vals) + 1), vals, "o-")
    ax.set_xlabel("index")
    ax.set_ylabel("eigenvalue")
    ax.set_title("normalised Laplacian of the trajectory kNN graph")
    return savefig(fig, out, "laplacian_spectrum.png")


def analyze(frames: TraceFrames, out: Folder | Path, n_boot: int = 500) -> Section:
    runs, blocks = trajectories(frames, min_steps=2)
    sec = Section("Spectral analysis of trajectories")
    if len(runs) == 0:
        sec.text.append(no_embeddings_note(frames) if frames.embeddings.shape[1] == 0 else
                        "No episode has two or more embedded steps: nothing to analyse.")
        return sec
    sec.text.append(METHOD.format(k=TOP_K, nn=GRAPH_NEIGHBOURS, dims=GRAPH_DIMS, boot=n_boot,
                                  shuffles=SHUFFLES, min_class=MIN_CLASS, cap=MAX_SPECTRUM))
    sec.text.append(f"{len(runs)} of {len(frames.runs)} episodes have at least two embedded steps.")
    feats = gram_features(blocks)
    if cut := truncated(blocks):
        sec.caps.append(f"{cut} episode(s) longer than {MAX_SPECTRUM} steps, with embeddings wider than "
                        f"{MAX_SPECTRUM}, were truncated to their first {MAX_SPECTRUM} steps for their spectra "
                        "(n_steps keeps their full length).")
    sets = {"gram": GRAM_FEATURES}
    if len(runs) > GRAPH_DIMS + 2:
        vals, coords = graph_spectrum(mean_vectors(blocks))
        graph_cols = [f"graph_{i + 1}" for i in range(coords.shape[1])]
        feats[graph_cols] = coords
        sets["graph"] = graph_cols
        sec.tables.append(("laplacian_eigenvalues", "Smallest Laplacian eigenvalues of the kNN graph",
                           pd.DataFrame({"index": np.arange(1, len(vals) + 1), "eigenvalue": vals})))
        sec.plots.append(("Laplacian spectrum", plot_laplacian(vals, out)))
    table = evaluate(feats, sets, runs, n_boot)
    ids = runs[["run_id", "model", "scenario", "label", "task_id", "sample", "passed", "compromised"]]
    sec.tables = [("spectral_auroc", "Do spectral features separate the classes? (AUROC)", table),
                  ("spectral_features", "Features per episode", pd.concat([ids, feats], axis=1)), *sec.tables]
    sec.plots.insert(0, ("Top eigenvalue share vs normalised entropy", plot_features(feats, runs, out)))
    return sec


def main(argv: list[str] | None = None) -> int:
    p = parser("spectral", __doc__.splitlines()[0])
    p.add_argument("--boot", type=int, default=500, help="bootstrap resamples for the AUROC interval")
    args = p.parse_args(argv)
    frames, out = prepare(args)
    section = analyze(frames, out, args.boot)
    say_caps(section)
    if not section.tables:
        print(section.text[0], file=sys.stderr)
    print(f"wrote {write_section(section, out, 'spectral')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
