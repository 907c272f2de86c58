"""The earlier rungs' evidence in a later rung's promotion (`dtune tune --method halving`).

A rung below the top measures its candidates in one block, each with the noise of one run, while
the rung before read every candidate too, often through the axes model (axes.py). So after a rung
below the top each candidate's deciding figure (mean and sd on the log scale) is carried to the
next rung, read against that rung's incumbent, and combined with the new figure by precision:

    m = (m_prior / v_prior + m_rung / v_rung) / (1 / v_prior + 1 / v_rung),
    v_prior = sd_prior^2 + DELTA_LOG^2

DELTA_LOG is what a rung of other steps may be off by (a warm-up or a loader's queue that a short
run sees and a long one does not): halving's premise is that short runs rank roughly, not exactly.
The combined figure, chained rung to rung, ranks the promotion (and names the pick of a tune that
stops below the top). The top rung's pick reads its own runs alone, at the most steps, so that a
short rung's bias cannot decide it. Every verdict (tied, significant) stays the rung's own paired
one. What it gains, and what a short run's bias costs it: benchmarks/tune_research/README.md
("Promotion reads the earlier rungs", "Layers").
"""

from __future__ import annotations

import math

from . import paired

DELTA_LOG = 0.1  # what a rung of other steps may be off by, sd on the log scale
TOP = False  # whether the top rung's pick reads the earlier rungs too (benchmarks/tune_research/carried_rungs.py)


def carried(ev: dict) -> dict:
    """{key: (mean, variance)} of a rung's deciding figures on the log scale (against its incumbent),
    for the next rung to combine."""
    return {k: (ev["means"][k], ev["sds"][k] ** 2) for k in ev["means"]}


def combine(prior: dict, prior_steps: int, ev: dict, inc: int, higher: bool, seed: int) -> dict:
    """ev with its deciding figures (means, sds, p_best) combined with the figures `prior` carried
    from the rung before (carried(), at prior_steps), read against this rung's incumbent `inc`; its
    own stay under "paired" (and the axes model's under "model"), with "earlier" saying what was
    combined. ev unchanged when the incumbent or every other candidate was not carried."""
    base = prior.get(inc)
    means, sds, n = dict(ev["means"]), dict(ev["sds"]), 0
    for k in ev["means"]:
        v = ev["sds"][k] ** 2
        if k == inc or k not in prior or base is None or v <= 0:
            continue
        pm, pv = prior[k][0] - base[0], prior[k][1] + DELTA_LOG**2
        w = 1.0 / pv + 1.0 / v
        means[k], sds[k] = (pm / pv + ev["means"][k] / v) / w, math.sqrt(1.0 / w)
        n += 1
    if n == 0:
        return ev
    out = dict(ev)
    out.setdefault("paired", {"means": ev["means"], "sds": ev["sds"], "p_best": ev["p_best"]})
    out["means"], out["sds"] = means, sds
    out["p_best"] = paired.p_best(means, sds, higher, seed=seed)
    out["earlier"] = {"from_steps": prior_steps, "delta_log": DELTA_LOG, "candidates": n}
    return out
