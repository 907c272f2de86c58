"""A/B comparison of two sets of dtune results, as benchstat prints it: for every configuration in
both, the medians, the change in %, a 95% bootstrap confidence interval of the ratio of medians,
the two-sided Mann-Whitney U p-value, and `~` where the change is not significant (p >= alpha or
the interval contains 1); a geometric-mean row; and a regression gate for users' CI.

Samples: dtune-comm, every timed iteration of every rank (time_us) per (collective, dtype, op,
placement, size, backend); dtune-train, each measured step's total of its slowest rank (total_ms)
per (model, precision, batch, ranks, ...)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .loader import load_comm, load_train


@dataclass
class Row:
    config: str
    unit: str
    median_a: float
    median_b: float
    ratio: float          # median_b / median_a (time: > 1 is slower)
    ci_low: float
    ci_high: float
    p_value: float
    significant: bool


def mann_whitney_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided Mann-Whitney U test, normal approximation with tie and continuity corrections
    (what scipy.stats.mannwhitneyu does with method="asymptotic")."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        return float("nan")
    both = np.concatenate([a, b])
    order = both.argsort(kind="mergesort")
    ranks = np.empty(len(both))
    sorted_vals = both[order]
    i = 0
    while i < len(both):  # average ranks over ties
        j = i
        while j + 1 < len(both) and sorted_vals[j + 1] == sorted_vals[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    u1 = ranks[:n1].sum() - n1 * (n1 + 1) / 2
    _, counts = np.unique(both, return_counts=True)
    n = n1 + n2
    tie = (counts ** 3 - counts).sum() / (n * (n - 1)) if n > 1 else 0
    sigma = math.sqrt(n1 * n2 / 12 * ((n + 1) - tie))
    if sigma == 0:
        return 1.0
    mu = n1 * n2 / 2
    z = (abs(u1 - mu) - 0.5) / sigma
    return float(min(1.0, math.erfc(max(z, 0) / math.sqrt(2))))


def bootstrap_ratio_ci(a, b, resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of median(b) / median(a), deterministic for `seed`."""
    rng = np.random.default_rng(seed)
    a, b = np.asarray(a, float), np.asarray(b, float)
    ma = np.median(rng.choice(a, (resamples, len(a))), axis=1)
    mb = np.median(rng.choice(b, (resamples, len(b))), axis=1)
    r = mb / ma
    return float(np.percentile(r, 2.5)), float(np.percentile(r, 97.5))


def compare_samples(groups_a: dict, groups_b: dict, unit: str, alpha: float = 0.05, label=str) -> list[Row]:
    """Groups map a configuration key (sortable) to its samples; `label` names a key."""
    rows = []
    for key in sorted(set(groups_a) & set(groups_b)):
        a, b = np.asarray(groups_a[key], float), np.asarray(groups_b[key], float)
        ma, mb = float(np.median(a)), float(np.median(b))
        lo, hi = bootstrap_ratio_ci(a, b)
        p = mann_whitney_p(a, b)
        sig = p < alpha and not (lo <= 1.0 <= hi)
        rows.append(Row(label(key), unit, ma, mb, mb / ma, lo, hi, p, sig))
    return rows


def _comm_groups(paths) -> dict:
    df = load_comm(paths)
    if df.empty:
        return {}
    keys = ["backend", "collective", "dtype", "op", "placement", "size_bytes"]
    return {k: g.time_us.to_numpy() for k, g in df.groupby(keys)}


def _train_groups(paths) -> dict:
    df = load_train(paths)
    if df.empty:
        return {}
    df = df[~df.warmup]
    per_step = df.groupby(["file", "run", "model", "precision", "step"]).total_ms.max().reset_index()
    from .loader import load_train_summary
    s = load_train_summary(paths)[["file", "run", "batch", "world_size", "accum_steps", "overlap", "bucket_mb"]]
    per_step = per_step.merge(s, on=["file", "run"])
    keys = ["model", "precision", "batch", "world_size", "accum_steps", "overlap", "bucket_mb"]
    return {k: g.total_ms.to_numpy() for k, g in per_step.groupby(keys)}


def compare_results(a, b, alpha: float = 0.05) -> list[Row]:
    comm = lambda k: f"{k[0]} {k[1]} {k[2]} {k[3]} {k[4]} {k[5]} B"  # noqa: E731
    train = lambda k: f"{k[0]} {k[1]} batch {k[2]} np {k[3]} accum {k[4]} overlap {k[5]} bucket {k[6]:g} MiB"  # noqa: E731
    return (compare_samples(_comm_groups(a), _comm_groups(b), "us", alpha, comm) +
            compare_samples(_train_groups(a), _train_groups(b), "ms", alpha, train))


def geomean_ratio(rows: list[Row]) -> float:
    return float(np.exp(np.mean([np.log(r.ratio) for r in rows]))) if rows else float("nan")


def format_table(rows: list[Row]) -> str:
    width = max([len(r.config) for r in rows] + [len("geomean")])
    lines = [f"{'config':<{width}}  {'A median':>12}  {'B median':>12}  {'delta':>8}  {'95% CI of B/A':>17}  {'p':>6}"]
    for r in rows:
        delta = f"{(r.ratio - 1) * 100:+.1f}%" if r.significant else "~"
        lines.append(f"{r.config:<{width}}  {r.median_a:10.3f}{r.unit:>2}  {r.median_b:10.3f}{r.unit:>2}  "
                     f"{delta:>8}  [{r.ci_low:6.3f}, {r.ci_high:6.3f}]  {r.p_value:6.3f}")
    g = geomean_ratio(rows)
    lines.append(f"{'geomean':<{width}}  {'':>12}  {'':>12}  {(g - 1) * 100:+7.1f}%")
    return "\n".join(lines)


def regressions(rows: list[Row], pct: float) -> list[Row]:
    """Significant slowdowns (time up) by more than `pct` percent."""
    return [r for r in rows if r.significant and (r.ratio - 1) * 100 > pct]
