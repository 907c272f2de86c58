"""Paired, interleaved measurement for `dtune tune`: the order of a rung's runs, each run's figure
read against the incumbent's runs beside it, the noise floor measured from the incumbent's own
repeats, each candidate's probability of being the best, and the paired verdict between two.

Why: on a shared node the machine drifts between runs (slow periods that slow every run started in
them by 30-80%), and a comparison of two runs made at different times measures the drift as much as
the configurations. So a rung runs its candidates in blocks, the order shuffled per block, with a run
of the incumbent (the best so far) before the first candidate and after every `REF_EVERY` of them:

    I c3 c1 c4 c7 I c2 c6 c5 I | c5 c2 c7 c1 I c4 c3 c6 I | ...      (blocks of one rung)

A run's figure (log f: the 20% trimmed mean of its per-step objective's logs, run_figure) is read
against the local level of the machine, the mean log figure of the nearest incumbent runs before
and after it:

    y = log f - (log f_I,before + log f_I,after) / 2        (one value per candidate and block)

so a slow period that covers a candidate and its neighbouring incumbent runs cancels. Two candidates
compare by their paired differences y_c,b - y_d,b over the blocks b they share (the incumbent has
y = 0 against itself). The incumbent's own runs, each read against its neighbours in the same way,
are repeats of one configuration: their spread is the noise of one y (sigma_y, never below what one
run's steps can resolve), and the floor of a comparison over B blocks is 1.96 sigma_y sqrt(k / B)
(k = 2 sides, 1 against the incumbent): a smaller difference is called a tie.

A slow period's edge that falls between a run's two incumbent neighbours is the drift pairing does
not cancel: the run was at one side's level or the other's, and its y is off by half the slow-down
(6-15 times a 5% difference). Its level is known to within half the neighbours' gap, so a
candidate's mean over its blocks weighs each by 1 / (sd^2 + gap^2) (level_weighted_mean; sd the
noise of one y read robustly, robust_sd, where such a y is an outlier, not noise). The verdict
between two candidates stays the plain paired mean with the conservative floor above.

A tune reads the level from every run of the rung instead (levels.readings with `within`): each
run's residual from its candidate's estimate tells the level, and the rung's runs are split into
stretches of one level, so an edge between two incumbent runs is placed at the run where it fell.
"""

from __future__ import annotations

import math
import random

import numpy as np

from .levels import readings

REF_EVERY = 4  # candidates between two runs of the incumbent
TRIM = 0.2  # a run's figure: the mean of its log steps, this share trimmed at each end (run_figure)
MIN_BLOCKS_SIGNIFICANT = 6  # the signed-rank test's p falls below 0.05 from 6 blocks on
Z95 = 1.959963984540054


def block_order(others: list[int], seed: int, rung: int, block: int) -> list[int | None]:
    """One block's runs: `others` (candidate keys) shuffled (seeded by seed, rung and block) with
    None (an incumbent run) after every REF_EVERY of them and at the end."""
    keys = list(others)
    random.Random(f"{seed}-{rung}-{block}").shuffle(keys)
    out: list[int | None] = []
    for i, k in enumerate(keys):
        out.append(k)
        if (i + 1) % REF_EVERY == 0 and i + 1 < len(keys):
            out.append(None)
    out.append(None)
    return out


def runs_per_block(n_candidates: int) -> int:
    """Runs of one block for n candidates (one of them the incumbent)."""
    others = max(n_candidates - 1, 0)
    return others + max(1, math.ceil(others / REF_EVERY))


def rung_runs(n_candidates: int, blocks: int) -> int:
    """Runs of a rung: the opening incumbent run, then its blocks."""
    return 1 + blocks * runs_per_block(n_candidates)


def read(seq: list, within: float | None = None) -> tuple[dict, list, dict]:
    """levels.readings(seq, within), split: ({key: {block: y}} of the candidates, [y of each incumbent run
    against its neighbours], {key: {block: gap}} of the candidates)."""
    ys: dict = {}
    inc = []
    gap: dict = {}
    for k, b, y, g in readings(seq, within):
        if k is None:
            inc.append(y)
        else:
            ys.setdefault(k, {})[b] = y
            gap.setdefault(k, {})[b] = g
    return ys, inc, gap


def robust_sd(ys: dict, inc_y: list) -> float | None:
    """The noise of one y, read robustly: 1.4826 x the median absolute deviation of the incumbent's
    y values (about 0) and of the candidates' repeats about their own means (scaled by
    sqrt(n / (n - 1)), n of them); a y that a slow period moved is an outlier here, not noise. None
    with fewer than 3 deviations."""
    dev = [abs(y) for y in inc_y]
    for v in ys.values():
        if len(v) >= 2:
            x = np.array(list(v.values()))
            dev += list(np.abs(x - x.mean()) * math.sqrt(len(x) / (len(x) - 1)))
    return 1.4826 * float(np.median(dev)) if len(dev) >= 3 else None


def level_weights(blocks, gap: dict, var: float) -> np.ndarray:
    """Each block's weight 1 / (var + gap^2) (var at least 1e-12): the inverse of a y's variance
    when its level is known only to within the gap. 1 / their sum is the variance of the weighted
    mean."""
    var = max(var, 1e-12)
    return np.array([1.0 / (var + gap.get(b, 0.0) ** 2) for b in blocks])


def level_weighted_mean(y: dict, gap: dict, sd: float) -> float:
    """A candidate's mean y over its blocks, each weighted by level_weights (var sd^2): a block whose
    incumbent neighbours disagree (a slow period's edge between them) counts for less, as its level
    is known only to within the gap. On a drifting machine (tests/sweeps/test_halving.py) the plain
    mean barely gains from blocks, one such block moving it by a slow period's share."""
    w = level_weights(y, gap, sd**2)
    return float(np.dot(w, list(y.values())) / w.sum())


def sigma_y(inc_y: list, within_var: float) -> float:
    """The noise of one y: the root mean square of the incumbent's own y values (its repeats read
    against their neighbours), at least sqrt(1.5 x within_var), what the steps of a run resolve
    (a run and half of each of its two neighbours)."""
    measured = float(np.sqrt(np.mean(np.square(inc_y)))) if len(inc_y) else 0.0
    return max(measured, math.sqrt(1.5 * max(within_var, 0.0)))


def level_means(ys: dict, gap: dict, pool: list, within: float) -> dict:
    """{key: each candidate's level-weighted mean y} (level_weighted_mean; a candidate missing from
    `gap` has every gap 0) as a rung reads it: the weights' noise is robust_sd of the candidates'
    ys and the incumbent's y values `pool`, at least sqrt(1.5 x within) (what a run's steps
    resolve, sigma_y's floor), and that floor alone where robust_sd has fewer than 3 deviations
    (then no candidate has two blocks beside an incumbent y: the weights do not matter, or the pool
    is empty and sigma_y would give the floor too)."""
    s = max(robust_sd(ys, pool) or 0.0, math.sqrt(1.5 * max(within, 0.0)))
    return {k: level_weighted_mean(v, gap.get(k, {}), s) for k, v in ys.items()}


def run_figure(log_steps) -> tuple[float, float]:
    """(a run's log figure, its variance from the run's steps): the TRIM-trimmed mean of its log
    step figures (floor(TRIM x n) of the lowest and of the highest left out), and that mean's
    variance by Tukey and McLaughlin (the winsorized variance over (1 - 2g/n)^2 n: the steps as
    independent draws); (nan, 0) without a finite one. A stray slow step (a collection, a loader's
    stall) is left out as the median would leave it, yet the figure reads nearly every step: with
    normal log steps the median's variance is 1.2-1.5 times the mean's over 4-64 steps (pi/2 at
    length), the 20% trimmed mean's 1.0-1.13 (tests/sweeps/test_halving.py checks the variance)."""
    x = np.sort(np.asarray(log_steps, float))
    x = x[np.isfinite(x)]
    n = len(x)
    if not n:
        return float("nan"), 0.0
    g = int(TRIM * n)
    mean = float(np.mean(x[g : n - g]))
    if n < 2:
        return mean, 0.0
    w = np.clip(x, x[g], x[n - 1 - g])  # winsorized: the trimmed ends set to the nearest kept
    return mean, float(np.var(w, ddof=1) / ((1 - 2 * g / n) ** 2 * n))


def figure_rows(runs) -> tuple[list, float]:
    """runs: a rung's runs in the order they ran, (key or None, block, halving.Measured). Returns
    ([(key, block, log figure)], the mean variance of those figures from their steps, 0 with none):
    a run's figure by run_figure of its log samples, nan for one that did not measure or measured
    a figure of 0 or less (seq for levels.readings and its `within`, as both methods read a rung)."""
    rows, within = [], []
    for k, b, m in runs:
        lf = float("nan")
        if m.ok and np.all(m.samples > 0):
            lf, wv = run_figure(np.log(m.samples))
            if math.isfinite(lf):
                within.append(wv)
        rows.append((k, b, lf))
    return rows, (float(np.mean(within)) if within else 0.0)


def p_best(means: dict, sds: dict, higher: bool, seed: int = 0, draws: int = 4000) -> dict:
    """{key: probability that it is the best} with each candidate's mean y normal with its sd (a
    seeded Monte Carlo). Exact ties (sd 0) all count as the best."""
    keys = list(means)
    if not keys:
        return {}
    sign = 1.0 if higher else -1.0
    rng = np.random.default_rng(seed)
    m = np.array([sign * means[k] for k in keys])
    s = np.array([sds[k] for k in keys])
    x = m[None, :] + rng.standard_normal((draws, len(keys))) * s[None, :]
    best = x.max(axis=1, keepdims=True)
    hit = x >= best - 1e-12
    return {k: float(hit[:, i].mean()) for i, k in enumerate(keys)}


def verdict(y_pick: dict, y_other: dict, sig: float, sides: int, alpha: float, higher: bool) -> dict:
    """The pick against another candidate over the blocks both measured: the ratio of figures
    pick / other (exp of the mean paired log difference) with its 95% interval, the Wilcoxon
    signed-rank p over the blocks, the floor (the smallest ratio these blocks resolve, from the
    incumbent's noise), whether the pick is significantly better (the interval excludes 1 on the
    better side and p < alpha, which needs MIN_BLOCKS_SIGNIFICANT blocks) and how many blocks
    would separate the two at the difference measured."""
    from scipy.stats import wilcoxon

    common = sorted(set(y_pick) & set(y_other))
    d = np.array([y_pick[b] - y_other[b] for b in common])
    n = len(d)
    if n == 0:
        return {"ratio": None, "lo": None, "hi": None, "p": None, "blocks": 0, "significant": False}
    delta = float(d.mean())
    emp = float(np.var(d, ddof=1)) / n if n >= 2 else 0.0
    se = math.sqrt(max(emp, sides * sig**2 / n))
    lo, hi = math.exp(delta - Z95 * se), math.exp(delta + Z95 * se)
    p = 1.0 if not np.any(d != 0) else float(wilcoxon(d).pvalue)
    better = lo > 1 if higher else hi < 1
    floor = math.exp(Z95 * se) - 1
    need = None
    if delta != 0:
        need = max(MIN_BLOCKS_SIGNIFICANT, math.ceil(n * (Z95 * se / abs(delta)) ** 2))
    return {
        "ratio": math.exp(delta),
        "lo": lo,
        "hi": hi,
        "p": p,
        "blocks": n,
        "floor": floor,
        "significant": bool(better and p < alpha),
        "blocks_to_separate": need,
    }
