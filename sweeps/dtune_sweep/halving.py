"""Successive halving's schedule and a candidate's measured outcome, the arithmetic under `dtune
tune`'s rungs (interleaved.py measures them paired).

The resource is the measured steps of a run (dtune-train --steps, dtune-comm --iters). A schedule
is a list of rungs (candidates, steps): steps double from rung to rung up to the top rung's steps
(the sweep's own, unless a budget shortens every rung), starting no lower than `min_steps`; the
candidates shrink by the factor that leaves two at the top rung (at least halving), so the winner
is always measured beside a runner-up.
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


@dataclass
class Measured:
    """One candidate's outcome in one rung."""

    key: int  # the candidate's index in the shuffled order (ties rank by it)
    status: str  # ok, oom, failed, timeout, invalid (figures not finite, tune.invalid_figures), ...
    samples: np.ndarray = field(default_factory=lambda: np.array([]))
    why: str = ""  # for a status but ok, what the run recorded instead of a measurement

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
