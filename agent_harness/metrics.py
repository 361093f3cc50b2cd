"""Scoring statistics: the unbiased pass@k estimator and confidence intervals.

pass@k follows Chen et al. 2021 (the Codex paper): with n samples of which c pass,
pass@k = 1 - C(n-c, k) / C(n, k), computed as a stable product. Intervals are Wilson score
intervals for a proportion, and a percentile bootstrap over tasks for pass@k means.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased probability that at least one of k samples (drawn from n, c correct) passes."""
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    # 1 - prod_{i=n-c+1}^{n} (1 - k/i): no huge binomials, no float overflow.
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def aggregate_pass_at_k(per_task: Mapping[str, Sequence[bool]], ks: Iterable[int]) -> dict[int, float]:
    """Mean pass@k over tasks, for each k that every task has enough samples for."""
    if not per_task:
        return {}
    out: dict[int, float] = {}
    min_n = min(len(v) for v in per_task.values())
    for k in ks:
        if k > min_n:
            continue
        out[k] = float(np.mean([pass_at_k(len(v), sum(map(bool, v)), k) for v in per_task.values()]))
    return out


def wilson_interval(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval for a proportion (95 % by default); (0, 1) when n is 0."""
    if n <= 0:
        return 0.0, 1.0
    if not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got {successes}/{n}")
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def bootstrap_interval(
    per_task: Mapping[str, Sequence[bool]], k: int = 1, n_boot: int = 2000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of mean pass@k, resampling tasks with replacement."""
    scores = np.array([pass_at_k(len(v), sum(map(bool, v)), k) for v in per_task.values()])
    if scores.size == 0:
        return 0.0, 1.0
    rng = np.random.default_rng(seed)
    means = scores[rng.integers(0, scores.size, size=(n_boot, scores.size))].mean(axis=1)
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)
