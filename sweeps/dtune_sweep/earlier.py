"""The earlier rungs' evidence in a later rung's promotion (`dtune tune --method halving`).

Why: a rung below the top measures its candidates in one block, each with the noise of one run
(on the 48-point synthetic space 0.1-0.2 on the log scale, against the 5% to tell apart), while the
rung before it read every candidate too, often through the axes model (axes.py) that pooled the
runs of every candidate sharing its axis values. Promoting by the new rung alone throws that away:
on a live-like model of the 48-point space (5-20% step noise, slow periods on the launch clock)
the optimum never reached the third rung in 17 of 300 tunes (8 with the figures carried).

So after a rung below the top, each candidate's deciding figure (its mean and sd on the log scale,
the axes model's where it applied) is carried to the next rung, read against that rung's incumbent
(a difference of two carried figures), and combined with the new rung's figure by precision:

    m = (m_prior / v_prior + m_rung / v_rung) / (1 / v_prior + 1 / v_rung),
    v_prior = sd_prior^2 + DELTA_LOG^2

DELTA_LOG is what a rung of other steps may be off by (a warm-up or a loader's queue that a short
run sees and a long one does not): the premise of halving is that short runs rank roughly, not
exactly. It trades the gain for the price below: 0.03 found the optimum 277 and 154 times in the
table's two rows, 0.1 271 and 169, 0.2 258 and 183 (`--delta`). The combined figure, chained rung
to rung, ranks the promotion (and names the pick of a tune that stops below the top). The top
rung's pick reads its own runs alone, at the most steps: a short rung's bias toward a candidate
would otherwise decide it. On that model
(benchmarks/tune_research/carried_rungs.py: 300 seeded tunes, budget 0.3 of the grid), the optimum picked:

    the earlier rungs' figures               not carried   below the top (this)   into the top too
    as the space is                          254           271                    277
    a neighbour faster by 10% at 4 steps,    188           169                    160
      5% at 8, 2.5% at 16 (truly 5% slower)

Every verdict (tied, significant) stays the rung's own paired one.
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
