"""The axes model of a rung: each candidate's paired estimate shrunk toward what its axis values
predict, so that a candidate measured once borrows the runs of every candidate that shares a value
with it (empirical Bayes over a factorial sweep, as in a meta-regression).

A rung of many candidates at one or two blocks measures each of them with the noise of one or two
runs: on the 48-point synthetic space (5-20% step noise, slow periods) that cannot tell a 5% slower
candidate from the optimum, and the paired estimate of the best of 35 such candidates is mostly the
luckiest draw. Yet the axes carry most of the differences between configurations (a precision, a
batch size, a worker count: each slows or speeds every configuration that has it), and the runs of
the eight candidates that share `--x 3` say more about `--x 3` than one run does.

The model, on the log scale of the paired estimates y_c (the rung's means, the incumbent at 0):

    y_c = theta_c + e_c,   e_c ~ N(0, v_c)           (v_c: the paired estimate's variance, sd^2)
    theta_c = x_c beta + u_c,   u_c ~ N(0, tau^2)    (x_c: intercept and one column per axis value
                                                      but the first of each axis; u_c: what the axes
                                                      do not explain, the interactions)

tau^2 is estimated by moments from the least-squares residuals (their spread, from the median
absolute deviation so that one candidate far off does not count as everyone's spread, scaled by
the residual degrees of freedom, less the mean v_c; at least 0), beta by weighted least squares
with weights 1 / (v_c + tau^2). Each candidate's estimate is then the posterior mean

    theta_c = x_c beta + (1 - B_c) (y_c - x_c beta),   B_c = v_c / (v_c + tau^2)

so where the axes explain the differences (tau^2 small against the noise) a candidate's estimate is
its axis values' prediction, and where they do not (large interactions) it stays its own paired
estimate. Draws for the probability of being the best sample beta from its posterior and each
theta_c given it (candidates that share axis values are correlated, and the draws keep that).

It applies only where the residual degrees of freedom are at least MIN_DOF (candidates measured
less the model's columns): a one-axis sweep is saturated (every candidate its own column) and keeps
its paired estimates; a 2 x 2 one has one degree of freedom, too few to estimate tau^2.
"""

from __future__ import annotations

import math

import numpy as np

MIN_DOF = 8
SPECIAL_P = 0.05  # prior probability that a candidate is an interaction of its own
SPECIAL_SD = 0.25  # and the spread of such interactions on the log scale


def design(values: list[dict]) -> tuple[np.ndarray, list[str]]:
    """The model's matrix for candidates with these values: an intercept, and per key whose values
    differ among them (an axis) one indicator column per value but the first seen (a column that
    the columns before it already span, as a value derived from an axis, left out)."""
    keys = list(dict.fromkeys(k for v in values for k in v))
    cols, names = [np.ones(len(values))], ["(intercept)"]
    for k in keys:
        levels = list(dict.fromkeys(repr(v.get(k)) for v in values))
        for lv in levels[1:]:
            col = np.array([float(repr(v.get(k)) == lv) for v in values])
            # a value that follows the columns already there (one derived from an axis) adds nothing
            if np.linalg.matrix_rank(np.column_stack(cols + [col])) > len(cols):
                cols.append(col)
                names.append(f"{k}={lv}")
    return np.column_stack(cols), names


def replicate_var(ys: list[list[float]]) -> float | None:
    """The variance of one paired figure from candidates measured in two or more blocks (their
    figures' spread about their own means, pooled); None below MIN_DOF degrees of freedom. It is
    the noise the model weighs against what the axes leave unexplained: the incumbent's spread
    (paired.sigma_y) reads a slow period's edge between its more distant neighbours as noise, up to
    three times the candidates' own variance on the drifting synthetic machine, and would leave
    every interaction unseen."""
    ss = dof = 0.0
    for a in map(np.asarray, ys):
        if len(a) >= 2:
            ss += float(np.sum((a - a.mean()) ** 2))
            dof += len(a) - 1
    return ss / dof if dof >= MIN_DOF else None


def fit(values: list[dict], y: np.ndarray, v: np.ndarray) -> dict | None:
    """The model fitted to paired estimates y (variances v) of candidates with these axis values;
    None where the residual degrees of freedom are below MIN_DOF. The fit: {"mean", "sd" (the
    posterior's, per candidate), "tau", "shrink" (B_c), "beta", "cov" (beta's), "x", "names", "dof"}."""
    y, v = np.asarray(y, float), np.asarray(v, float)
    x, names = design(values)
    n, p = x.shape
    if n - p < MIN_DOF:
        return None
    # tau^2 by moments from the least-squares residuals' median absolute deviation (one candidate
    # far off the axes, below, does not pass for the spread of every candidate), corrected for the
    # columns fitted.
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    r = y - x @ coef
    spread = (1.4826 * float(np.median(np.abs(r - np.median(r))))) ** 2 * n / (n - p)
    tau2 = max(spread - float(np.mean(v)), 0.0)
    w = 1.0 / (v + tau2)
    cov = np.linalg.inv(x.T @ (x * w[:, None]))
    beta = cov @ (x.T @ (w * y))
    pred = x @ beta
    var_pred = np.einsum("ij,jk,ik->i", x, cov, x)
    r = y - pred
    # Each candidate is ordinary (u_c ~ N(0, tau^2)) or, with prior probability SPECIAL_P, an
    # interaction of its own (u_c ~ N(0, tau^2 + SPECIAL_SD^2)): the weight of the second is its
    # posterior probability given the residual, so a candidate far above what its axes predict,
    # by more than the noise explains, keeps its own estimate.
    t0, t1 = v + var_pred + tau2, v + var_pred + tau2 + SPECIAL_SD**2
    lik0, lik1 = np.exp(-0.5 * r**2 / t0) / np.sqrt(t0), np.exp(-0.5 * r**2 / t1) / np.sqrt(t1)
    special = SPECIAL_P * lik1 / ((1 - SPECIAL_P) * lik0 + SPECIAL_P * lik1)
    b0, b1 = v / (v + tau2) if tau2 > 0 else np.ones(n), v / (v + tau2 + SPECIAL_SD**2)
    shrink = (1 - special) * b0 + special * b1
    mean = pred + (1 - shrink) * r
    # Var(theta_c | data): each part's (1 - B) v + B^2 Var(x_c beta), and the spread between them
    var0, var1 = (1 - b0) * v + b0**2 * var_pred, (1 - b1) * v + b1**2 * var_pred
    sd = np.sqrt((1 - special) * var0 + special * var1 + special * (1 - special) * ((b0 - b1) * r) ** 2)
    return {
        "mean": mean,
        "sd": sd,
        "tau": math.sqrt(tau2),
        "shrink": shrink,
        "b": (b0, b1),
        "special": special,
        "beta": beta,
        "cov": cov,
        "x": x,
        "y": y,
        "v": v,
        "names": names,
        "dof": n - p,
    }


def draws(f: dict, seed: int = 0, n: int = 4000) -> np.ndarray:
    """n seeded draws (rows) of every candidate's theta from the fit's posterior: beta, then each
    candidate ordinary or an interaction of its own (by its posterior probability), then theta
    given those. Their mean and spread are the fit's `mean` and `sd`."""
    rng = np.random.default_rng(seed)
    x, y, v = f["x"], f["y"], f["v"]
    chol = np.linalg.cholesky(f["cov"] + 1e-15 * np.eye(len(f["beta"])))
    beta = f["beta"][None, :] + rng.standard_normal((n, len(f["beta"]))) @ chol.T
    pred = beta @ x.T
    b = np.where(rng.random(pred.shape) < f["special"][None, :], f["b"][1][None, :], f["b"][0][None, :])
    theta = pred + (1 - b) * (y[None, :] - pred)
    return theta + rng.standard_normal(theta.shape) * np.sqrt((1 - b) * v[None, :])


def p_best(f: dict, higher: bool, seed: int = 0, n: int = 4000) -> np.ndarray:
    """Each candidate's probability of being the best under the fit (over `draws`; the candidates
    that share axis values are correlated, and the draws keep that)."""
    theta = draws(f, seed, n)
    theta = theta if higher else -theta
    best = theta.max(axis=1, keepdims=True)
    return (theta >= best - 1e-12).mean(axis=0)
