"""Stragglers, named only beyond noise: in a run, rank r is slow when its median step time lies
above the 95% bootstrap interval of the other ranks' median (compare.bootstrap_median_ci over
their pooled measured steps) and above it by at least MIN_GAP; a rank is a straggler of a results
file when it is slow in most (more than half) of the file's runs with that rank. The gap reported
is the median over those runs of (its median / the others' median - 1).

MIN_GAP: ranks of one data-parallel step wait for each other in every gradient reduction, so step
totals differ by little more than the work done outside the step's collectives; rank 0 also
gathers and writes the results, a constant cost of a few hundred microseconds. A rank slower by
less than MIN_GAP is not worth moving work for.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .compare import bootstrap_median_ci

MIN_GAP = 0.05


def slow_ranks(steps: pd.DataFrame) -> pd.DataFrame:
    """Per (file, run, rank): median step time, the others' median and interval, and `slow`.

    `steps`: loader.load_train rows; warm-up and profiled steps are left out."""
    rows = []
    s = steps[~steps.warmup & ~steps.profiled]
    for (f, run), g in s.groupby(["file", "run"]):
        ranks = sorted(g["rank"].unique())
        if len(ranks) < 2:
            continue
        for r in ranks:
            own = g.loc[g["rank"] == r, "total_ms"].to_numpy(float)
            other = g.loc[g["rank"] != r, "total_ms"].to_numpy(float)
            med, omed = float(np.median(own)), float(np.median(other))
            lo, hi = bootstrap_median_ci(other) if len(other) > 1 else (omed, omed)
            gap = med / omed - 1 if omed > 0 else 0.0
            rows.append(
                {
                    "file": f,
                    "run": run,
                    "rank": int(r),
                    "median_ms": med,
                    "others_ms": omed,
                    "others_high_ms": hi,
                    "gap": gap,
                    "slow": bool(med > hi and gap >= MIN_GAP),
                }
            )
    return pd.DataFrame(
        rows, columns=["file", "run", "rank", "median_ms", "others_ms", "others_high_ms", "gap", "slow"]
    )


def stragglers(steps: pd.DataFrame) -> list[dict]:
    """[{file, rank, runs_slow, runs, gap}] for ranks slow in most of their file's runs."""
    if steps.empty:
        return []
    per = slow_ranks(steps)
    out = []
    for (f, r), g in per.groupby(["file", "rank"]):
        if g.slow.sum() * 2 > len(g):
            out.append(
                {
                    "file": f,
                    "rank": int(r),
                    "runs_slow": int(g.slow.sum()),
                    "runs": len(g),
                    "gap": float(np.median(g.gap[g.slow])),
                }
            )
    return out
