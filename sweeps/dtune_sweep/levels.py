"""The machine's level through a rung's runs, read from every run (readings with `within`; without
it, from the incumbent runs beside each run, as paired.py describes).

A slow period of a shared node slows every run started in it by 30-80% and lasts seconds to
minutes: several runs. Read against the incumbent runs alone (one in every REF_EVERY + 1), a run's
level is off by half the slow-down whenever a period's edge falls between its two incumbent
neighbours. Every run tells the level once its candidate's own figure is known: its residual

    r = log f - theta_candidate        (theta_incumbent = 0)

is the level plus the run's noise. So the residuals of the rung's runs in the order they ran are
split into stretches of one level (optimal partitioning: the least sum of squares over the noise
variance plus PENALTY x log n per stretch, exact by dynamic programming), a run's level is the mean
residual of the other runs of its stretch, its y = log f - level, and theta is read again from the
y values (each candidate's mean less the incumbent's), ITERATIONS times from the incumbent-neighbour
readings' estimate (the median of each candidate's).

A run alone in its stretch (a short slow period, or a figure its candidate's estimate does not
explain) is left out, unless its candidate has no other reading. What it gains over the incumbent
runs alone: benchmarks/tune_research/README.md ("The level read from every run", "Layers").
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

PENALTY = 2.0  # per stretch, times log(runs): BIC's for one more mean
ITERATIONS = 3
MIN_REPEATS = 2  # runs of the median candidate below which a rung is read against its incumbent runs


def partition(r, var: float, pen: float) -> list[tuple[int, int]]:
    """[(start, end)] of the stretches of r (end exclusive) minimising the sum of squares about each
    stretch's mean over var plus pen per stretch (exact, O(n^2))."""
    r = np.asarray(r, float)
    n = len(r)
    c1 = np.concatenate([[0.0], np.cumsum(r)])
    c2 = np.concatenate([[0.0], np.cumsum(np.square(r))])
    var = max(var, 1e-12)
    best = np.full(n + 1, math.inf)
    best[0] = 0.0
    back = np.zeros(n + 1, int)
    for j in range(1, n + 1):
        i = np.arange(j)
        m = j - i
        ss = c2[j] - c2[i] - (c1[j] - c1[i]) ** 2 / m
        total = best[i] + np.maximum(ss, 0.0) / var + pen
        back[j] = int(np.argmin(total))
        best[j] = total[back[j]]
    out, j = [], n
    while j > 0:
        out.append((int(back[j]), j))
        j = back[j]
    return out[::-1]


def noise_var(r, within: float) -> float:
    """The noise variance of one residual: what the runs' steps resolve (within, 1.5 times: a run
    and the level it is read against), or more where the successive differences say so (1.4826 x
    their median absolute value, over sqrt 2; an edge between two runs is one outlier there)."""
    d = np.abs(np.diff(np.asarray(r, float)))
    from_runs = (1.4826 * float(np.median(d))) ** 2 / 2 if len(d) >= 3 else 0.0
    return max(1.5 * within, from_runs)


def readings(seq: list, within: float | None = None) -> list[tuple]:
    """seq: the rung's runs in the order they ran, (key or None for the incumbent, block, log figure
    or nan). With `within` (the mean variance of a run's figure from its steps) the level is read
    from every run (read: stretches of one level through the rung's runs; a run alone in its
    stretch left out), else from the incumbent runs alone, as follows. Returns (key, block, y, gap)
    for every run that measured and has an incumbent run beside it: y its log figure less the local
    level (the mean of the nearest incumbent runs before and after it), gap half the difference of
    those two (0 with one): how far the level can be off when a slow period's edge falls between
    them (the run was at one side's level or the other's)."""
    if within is not None:
        got = read(seq, within)
        if got is not None:
            return got
    refs = [i for i, (k, _, v) in enumerate(seq) if k is None and math.isfinite(v)]
    out = []
    for i, (k, b, v) in enumerate(seq):
        if not math.isfinite(v):
            continue
        before = [j for j in refs if j < i]
        after = [j for j in refs if j > i]
        near = ([seq[before[-1]][2]] if before else []) + ([seq[after[0]][2]] if after else [])
        if near:
            out.append((k, b, v - float(np.mean(near)), abs(near[0] - near[-1]) / 2))
    return out


def read(seq: list, within: float) -> list[tuple] | None:
    """seq: a rung's runs in the order they ran, (key or None for the incumbent, block, log figure or
    nan); within: the mean variance of a run's figure from its steps. Returns (key, block, y, gap)
    for every run read (that measured and is not left out, _kept), y its log figure less the level
    of its stretch (the incumbent's y values centred on 0), gap the sd of that level (sqrt(var /
    others in the stretch); a run alone, half the difference of its neighbours' residuals, as
    readings). None when no incumbent run measured (nothing to read the candidates
    against), or the median candidate ran fewer than MIN_REPEATS times: a candidate's one run only
    echoes the level it was read against (a rung of the 48-point synthetic space in one block found
    the optimum far less often read this way)."""
    runs = [(k, b, v) for k, b, v in seq if math.isfinite(v)]
    repeats = Counter(k for k, _, _ in runs if k is not None)
    if not repeats or np.median(list(repeats.values())) < MIN_REPEATS:
        return None  # the gate first: the caller then reads the incumbent runs, once
    first = readings(seq)
    if not first:  # no incumbent run measured
        return None
    start: dict = {}
    for k, _, y, _ in first:
        start.setdefault(k, []).append(y)
    theta = {k: float(np.median(v)) for k, v in start.items()} | {None: 0.0}
    lf = np.array([v for _, _, v in runs])
    keys = [k for k, _, _ in runs]
    n = len(runs)  # at least 3: the gate asks for two runs of a candidate, and an incumbent run
    pen = PENALTY * math.log(n)
    for _ in range(ITERATIONS):
        r = lf - np.array([theta[k] for k in keys])
        var = noise_var(r, within)
        level, gap, alone = np.empty(n), np.zeros(n), [False] * n
        for i, j in partition(r, var, pen):
            for t in range(i, j):
                if j - i >= 2:
                    level[t] = (r[i:j].sum() - r[t]) / (j - i - 1)
                    gap[t] = math.sqrt(var / (j - i - 1))
                else:  # alone: read against the residuals beside it (n >= 3: there is one)
                    near = [r[u] for u in (t - 1, t + 1) if 0 <= u < n]
                    level[t], gap[t], alone[t] = float(np.mean(near)), abs(near[0] - near[-1]) / 2, True
        y = lf - level
        use = _kept(keys, alone)  # every candidate and the incumbent keep a run at least
        base = float(np.mean([y[t] for t in use if keys[t] is None]))
        for k in set(keys):
            theta[k] = float(np.mean([y[t] for t in use if keys[t] == k])) - base  # the incumbent's: 0
    return [(keys[t], runs[t][1], float(y[t] - base), float(gap[t])) for t in use]


def _kept(keys: list, alone: list) -> list[int]:
    """The runs read: a run alone in its stretch (a short slow period, or a figure its candidate's
    estimate does not explain) is left out, unless its candidate has no other reading."""
    shared = {k for k, a in zip(keys, alone) if not a}
    return [t for t, (k, a) in enumerate(zip(keys, alone)) if not a or k not in shared]
