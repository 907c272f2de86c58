"""Successive halving with noise-aware promotion, the arithmetic of `dtune tune` (tune.py runs it).

The resource is the measured steps of a run (dtune-train --steps, dtune-comm --iters). A schedule
is a list of rungs (candidates, steps): steps double from rung to rung up to the sweep's own steps
(the top rung measures what the grid would), starting no lower than `min_steps` (enough samples
for the U test to reach p < alpha); the candidates shrink by the factor that leaves two at the top
rung (at least halving), so the winner is always measured beside a runner-up at full length.

Promotion from one rung to the next is noise-aware: the candidates are ranked by their median;
the one at the nominal cut (the k-th best, k the next rung's size) sets the threshold, and a
candidate below the cut is dropped only when it is clearly below that threshold: the Mann-Whitney
U test separates the two (p < alpha) and the 95% bootstrap interval of the ratio of medians lies
wholly on the worse side of 1 (compare.py, as `dtune compare` decides). Near-ties are promoted
together; a budget that cannot pay for every tie keeps the best of them by median.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


def schedule(n_all: int, n0: int, s_max: int, min_steps: int) -> list[tuple[int, int]]:
    """[(candidates, steps)] per rung for n0 candidates drawn from n_all. The number of rungs
    depends on n_all and s_max only, so that a smaller draw (a tighter budget) keeps the steps of
    every rung and the runs already made stay usable."""
    r_steps = 1 + int(math.floor(math.log2(s_max / min_steps))) if s_max >= 2 * min_steps else 1
    r_count = 1 + int(math.ceil(math.log2(n_all / 2))) if n_all > 2 else 1
    rungs = max(1, min(r_steps, r_count))
    steps = [max(1, int(round(s_max / 2 ** (rungs - 1 - k)))) for k in range(rungs)]
    if rungs == 1:
        return [(n0, s_max)]
    f = max(2.0, (n0 / 2) ** (1 / (rungs - 1)))
    counts = [n0] + [max(min(2, n0), int(math.ceil(n0 / f**k - 1e-9))) for k in range(1, rungs)]
    return list(zip(counts, steps))


def cost(plan: list[tuple[int, int]], per_run) -> float:
    """What a schedule costs: per_run(steps) summed over its runs."""
    return sum(n * per_run(s) for n, s in plan)


@dataclass
class Measured:
    """One candidate's outcome in one rung."""

    key: int  # the candidate's index in the shuffled order (ties rank by it)
    status: str  # ok, oom, failed, timeout, skipped (a failed run of it recorded earlier), ...
    samples: np.ndarray = field(default_factory=lambda: np.array([]))

    @property
    def ok(self) -> bool:
        return self.status == "ok" and len(self.samples) > 0

    @property
    def median(self) -> float:
        return float(np.median(self.samples)) if self.ok else float("nan")


def rank(measured: list[Measured], higher: bool) -> list[Measured]:
    """The candidates that measured, best first (by median; the earlier key first on a tie)."""
    ok = [m for m in measured if m.ok]
    return sorted(ok, key=lambda m: ((-m.median if higher else m.median), m.key))


def separation(a: Measured, b: Measured, alpha: float) -> dict:
    """b against a: ratio of medians b/a with its 95% bootstrap interval, the U test's p and
    whether the difference is significant (p < alpha)."""
    from dtune_report.compare import bootstrap_ratio_ci, mann_whitney_p

    p = mann_whitney_p(a.samples, b.samples)
    if a.median == 0:  # no ratio to a zero (busbw of 1 rank): only the U test speaks
        return {"ratio": float("nan"), "lo": float("nan"), "hi": float("nan"), "p": p, "significant": False}
    lo, hi = bootstrap_ratio_ci(a.samples, b.samples)
    return {"ratio": b.median / a.median, "lo": lo, "hi": hi, "p": p, "significant": bool(p < alpha)}


def no_pick(ranked: list[Measured], objective: str, unit: str, higher: bool, ranks: int) -> str | None:
    """Why the measured candidates (rank's order) give no pick, or None: the best of a
    higher-is-better objective is 0, so every one measured 0 (dtune-comm's busbw with 1 rank, where
    no byte crosses a link) and a pick among them would be the shuffle's, not the objective's.
    Candidates tied at a real figure still give a pick, said to be tied with the rest (separation)."""
    if not ranked:
        return None
    best = ranked[0].median
    if not (higher and best == 0):
        return None
    why = (
        f"every candidate measured {best:.4g} {unit} ({objective}): the objective cannot tell them apart, "
        f"so there is no pick"
    )
    if objective == "busbw" and best == 0 and ranks == 1:
        why += "; busbw is 0 with 1 rank (no data crosses a link): tune a sweep of 2 or more ranks"
    return why


def clearly_below(cand: Measured, threshold: Measured, higher: bool, alpha: float) -> tuple[bool, dict]:
    s = separation(threshold, cand, alpha)
    worse = s["hi"] < 1 if higher else s["lo"] > 1
    return s["significant"] and worse, s


def promote(measured: list[Measured], k: int, higher: bool, alpha: float, cap: int | None = None) -> tuple:
    """(promoted keys, {key: why}) from one rung: the k best, and every other candidate that is
    not clearly below the k-th; `cap` (what the budget pays for) keeps the best of them."""
    ranked = rank(measured, higher)
    why = {m.key: f"did not measure ({m.status})" for m in measured if not m.ok}
    if not ranked:
        return [], why
    k = max(1, min(k, len(ranked)))
    threshold = ranked[k - 1]
    keep = []
    for i, m in enumerate(ranked):
        if i < k:
            keep.append(m.key)
            why[m.key] = "in the top" if i < k - 1 or k == 1 else "sets the threshold"
            continue
        below, s = clearly_below(m, threshold, higher, alpha)
        evidence = f"ratio {s['ratio']:.3f} [{s['lo']:.3f}, {s['hi']:.3f}], p={s['p']:.3g}"
        if below:
            why[m.key] = f"clearly below the threshold ({evidence})"
        else:
            keep.append(m.key)
            why[m.key] = f"tied with the threshold ({evidence})"
    if cap is not None and len(keep) > cap:
        for key in keep[cap:]:
            why[key] += "; cut: the budget pays for no more"
        keep = keep[: max(cap, 0)]
    return keep, why
