"""`dtune tune --method halving`: successive halving over steps whose rungs are measured paired and
interleaved (paired.py): blocks of the surviving candidates in a shuffled order, the incumbent run
between them, every figure read against the incumbent runs beside it or, where the candidates
repeat, against the level of its stretch of runs (levels.py).

Rung by rung: the schedule's steps double up to the sweep's own (halving.schedule), from at least
--min-steps and, under a time budget, the rung steps nearest (by ratio) those whose time equals a
run's measured start-up (fewer, longer rungs when start-up dominates: one rung at full length, a
race of blocks, when it is above half a full-length run's steps). A lower rung runs the sweep's
`repeats:` blocks (default 1); the top rung at least max(repeats, 3) and, under a budget, more while
the budget pays and no candidate dominates (P(best) 1 - alpha/2 over at least 3 blocks; at most
MAX_TOP_BLOCKS), each of those only for the candidates that can still be the best (a race: P(best)
at least alpha / candidates; when the budget no longer pays for a block of all of them, the most
probable it pays for); a budget too small for that gives it fewer, down to one. After a rung the
candidates are promoted by their probability of being the best (paired.p_best, from the measured
noise), most probable first: every one whose probability is at least alpha / (candidates), at least
two, at most what the budget pays for and twice the next rung's planned size (a lower rung whose
leader dominated stopped the tune there until 2026-12-08: it needs 6 blocks, a sweep's `repeats: 6`,
and never ran in the benchmarks). The pick is the best paired
estimate of the last rung; every candidate whose paired interval against it contains 1 (within the
floor, paired.verdict) is named as tied with it, with the blocks that would separate them at the
difference measured.

Below the top rung the deciding figures (the paired ones, or the axes model's) are combined with
those carried from the rung before (earlier.py: by precision, with sd 0.1 allowed for the change of
steps), so that a rung of one block does not promote by one run's noise; the top rung's pick reads
its own runs.

In a rung of more candidates than its axes have values (by axes.MIN_DOF or more) the axes model
(axes.py) reads the paired figures: each candidate's estimate is shrunk toward what its axis values
predict, by as much as the axes explain the differences, so that a candidate measured in one block
borrows the runs of every candidate that shares a value with it; its probability of being the best
ranks the promotion and, in a last rung, names the pick (a candidate that the paired figures alone
say can be the best is kept too, after those, while the budget pays). The paired figures stay in
the record beside it, and every verdict (tied, significant) is still paired.

Under a time budget every run is priced for its own candidate (cost.CostModel: the shared start-up
plus the candidate's measured step time; one not run yet at the median candidate's), learnt from
every run made. The first rung's first block runs a segment at a time (REF_EVERY candidates, then an
incumbent run), and after each the rest of it is cut to what the budget still pays for, leaving the
least rest a pick needs (screening every drawn candidate comes first: the later rungs re-plan to
what is left), and the candidates the draw left out follow in it, each where the budget pays for
it and the rest the draw planned; its later blocks run one at a time while the budget pays for them.
After a rung, promotion counts what the next rungs cost at those prices: a top rung that would
double the steps at the cost of contenders runs at the rung's steps when that pays for more of them,
and a rest that no longer pays for two candidates is re-planned (_cap). A top rung whose incumbent
cannot be the best and costs more than twice the most probable candidate hands its race to a new
rung opened by that candidate (_reopen).
"""

from __future__ import annotations

import math
import random
from dataclasses import replace
from functools import partial

import numpy as np

from . import axes, earlier, paired
from .candidates import axis_values, label, measured_record, recommendation, steps_of, teach, with_steps
from .cost import CostModel
from .halving import Measured, no_pick, rank, schedule
from .objective import OBJECTIVES

MAX_TOP_BLOCKS = 12
REOPEN_BASE = 1000  # repeats of a re-opened rung's runs start here (beyond any rung's own)
MIN_TOP_BLOCKS = 3


def first_paid(options, cost, room: float):
    """The first of `options` (most preferred first) whose cost(option) `room` pays for; None: none."""
    return next((o for o in options if cost(o) <= room + 1e-9), None)


def plan_cost(plan, blocks: list[int], per_run) -> float:
    """A schedule's cost with every candidate priced alike (per_run(steps))."""
    return sum(paired.rung_runs(n, b) * per_run(s) for (n, s), b in zip(plan, blocks))


def rung_cost(sw: "Sweep", inc: int, others: list[int], steps: int, blocks: int, opening: bool) -> float:
    """`blocks` blocks of `others` against the incumbent `inc` (and its opening run), each run
    priced for its own candidate (cost.CostModel)."""
    n_inc = (1 if opening else 0) + blocks * max(1, math.ceil(len(others) / paired.REF_EVERY))
    return n_inc * sw.per_run(steps, inc) + blocks * sum(sw.per_run(steps, c) for c in others)


def rung_blocks(plan, repeats: int, top_blocks: int | None = None) -> list[int]:
    top = max(repeats, MIN_TOP_BLOCKS) if top_blocks is None else top_blocks
    return [repeats] * (len(plan) - 1) + [top]


class Sweep:
    """One sweep's tune: its candidates, the runs made, the measured noise, the records."""

    def __init__(self, name, cands, runs, objective, share, seed, alpha, say):
        self.name, self.runs, self.objective, self.share = name, runs, objective, share
        self.seed, self.alpha, self.say = seed, alpha, say
        self.unit, self.higher = OBJECTIVES[objective][1], OBJECTIVES[objective][2]
        self.timed = share is not None and share[0] == "seconds"  # a time budget: runs priced by the cost model
        order = list(range(len(cands)))
        random.Random(seed).shuffle(order)
        self.cands = [cands[i] for i in order]
        self.s_max = steps_of(self.cands[0])
        self.used: list[str] = []
        self.measured: dict = {}  # point id -> Measured
        self.inc_y_before: list = []  # the incumbent's y values of earlier rungs (pooled noise)
        self.model = CostModel()  # under a time budget: what a run of each candidate costs
        self.key_of: dict = {}  # point id -> the candidate it ran
        self.carried: tuple = ({}, 0)  # the last rung's deciding figures (earlier.carried), its steps

    def point(self, key: int, steps: int, repeat: int):
        return replace(with_steps(self.cands[key], steps), repeat=repeat)

    def per_run(self, steps: int, key: int | None = None) -> float:
        """What a run of candidate `key` (None: one not run yet) for `steps` steps costs in the
        budget's unit: 1 run, or its seconds by the cost model (1 until the probe has run)."""
        if not self.timed or not self.model.known():
            return 1.0
        return self.model.run_s(key, steps)

    def run(self, pts, keys: list[int]) -> None:
        """Runs the points (pts[i] a run of candidate keys[i]); under a time budget each one that
        measured teaches the cost model its start-up and its candidate's step time."""
        if self.runs.run(pts) == 130:
            raise KeyboardInterrupt
        self.used += [p.id for p in pts]
        self.key_of.update((p.id, key) for p, key in zip(pts, keys))
        if self.timed:
            teach(self.model, self.runs, pts, keys, lambda p, key: self.measure(p, key).ok)

    def measure(self, p, key: int) -> Measured:
        if p.id not in self.measured:
            self.measured[p.id] = self.runs.measure(p, key, self.objective)
        return self.measured[p.id]

    def spent(self) -> float:
        if not self.timed:
            return len(set(self.used))
        return self.runs.seconds(set(self.used))

    def left(self) -> float:
        return math.inf if self.share is None else self.share[1] - self.spent()


class Rung:
    """One rung's runs in the order they ran and what they say."""

    def __init__(self, sw: Sweep, k: int, steps: int, alive: list[int], inc: int, base: int = 0):
        self.sw, self.k, self.steps, self.inc = sw, k, steps, inc
        self.base = base  # added to every run's repeat: a rung re-opened at the same steps runs afresh
        self.others = [i for i in alive if i != inc]
        self.seq: list = []  # (key or None, block, point)
        self.n_inc = 0
        self.status: dict = {}  # key -> status of a candidate that did not measure
        self.blocks = 0
        self.raced: list[int] = []  # candidates left out of the later blocks (race)

    def _entry(self, key: int | None, b: int) -> tuple:
        if key is None:
            self.n_inc += 1
            return (None, b, self.sw.point(self.inc, self.steps, self.base + self.n_inc - 1))
        return (key, b, self.sw.point(key, self.steps, self.base + b))

    def _run(self, seq: list) -> None:
        """Runs these entries in one call to the runner (one job array per call under --slurm); a
        candidate that did not measure (failed, timed out, out of memory, figures that are not a
        measurement) is dropped from the calls after it."""
        self.sw.run([p for _, _, p in seq], [self.inc if key is None else key for key, _, _ in seq])
        self.seq += seq
        for key, _, p in seq:
            if key is not None and key in self.others and not self.sw.measure(p, key).ok:
                self.status[key] = self.sw.measure(p, key).status
                self.others.remove(key)

    def run_blocks(self, n: int) -> None:
        """Runs n more blocks (after the rung's opening incumbent run, the first time), one call to
        the runner each, so that a candidate that did not measure in a block is not launched in the
        rung's later ones (a failing or hanging candidate costs one run, or one --timeout, per rung,
        not one per block); none once a run of the incumbent did not measure (run_rungs opens the
        rung again without it)."""
        first = [self._entry(None, -1)] if not self.seq else []
        if first and n == 0:
            self._run(first)
        for _ in range(n):
            if not self.incumbent_ok():
                return
            block = paired.block_order(self.others, self.sw.seed, self.k, self.blocks)
            self._run(first + [self._entry(key, self.blocks) for key in block])
            first = []
            self.blocks += 1

    def run_block_priced(self, paid, late: list[int]) -> list[int]:
        """Runs one block (after the opening run, the first time) a segment at a time: REF_EVERY
        candidates of the block's order, then `late` (candidates the draw left out), then an
        incumbent run. After each segment paid(rest) says how many of the rest, in order, the
        budget still pays for at the prices the runs so far taught (cost.CostModel); the others are
        left out of the rung. Returns those left out."""
        order = [k for k in paired.block_order(self.others, self.sw.seed, self.k, self.blocks) if k is not None]
        size = min(paired.REF_EVERY, max(len(order), 1))  # the first segment: drawn candidates alone
        order, b, left_out = order + late, self.blocks, []
        self.others += late
        self.blocks += 1
        first = [self._entry(None, -1)] if not self.seq else []
        while order and self.incumbent_ok():
            seg, order, size = order[:size], order[size:], paired.REF_EVERY
            self._run(first + [self._entry(key, b) for key in seg] + [self._entry(None, b)])
            first = []
            if order:
                m = paid(order)
                order, left_out = order[:m], left_out + order[m:]
        self.others = [k for k in self.others if k not in left_out]
        return left_out

    def race(self, keys: list[int]) -> None:
        """The blocks from now run only `keys` (and the incumbent); the others keep the blocks they
        ran (their figures stand, with the fewer blocks' wider intervals)."""
        self.raced = sorted(set(self.raced) | (set(self.others) - set(keys)))
        self.others = [k for k in self.others if k in keys]

    def incumbent_ok(self) -> bool:
        """Whether every run of the incumbent so far measured (none yet: True; a figure of 0, as
        busbw with 1 rank, measured too: no candidate can be read against it, and the pick says why)."""
        return all(self.sw.measure(p, self.inc).ok for key, _, p in self.seq if key is None)

    def failures(self) -> list[tuple]:
        """[(key, its first run that did not measure)] for the incumbent and every candidate with one."""
        out: dict = {}
        for key, _, p in self.seq:
            k = self.inc if key is None else key
            if k not in out and not self.sw.measure(p, k).ok:
                out[k] = p
        return list(out.items())

    def figures(self):
        """paired.figure_rows of the rung's runs: (seq, within) for paired.read."""
        measured = ((key, b, self.sw.measure(p, self.inc if key is None else key)) for key, b, p in self.seq)
        return paired.figure_rows(measured)

    def evaluate(self) -> dict:
        """{"ys", "inc_y", "sigma", "means", "sds", "p_best"} for the candidates that measured."""
        rows, within = self.figures()
        ys, inc_y, gap = paired.read(rows, within)
        pool = inc_y if len(inc_y) >= 3 else inc_y + self.sw.inc_y_before
        sig = paired.sigma_y(pool, within)
        ys = {k: v for k, v in ys.items() if k not in self.status}
        rep = axes.replicate_var([list(v.values()) for v in ys.values()])
        # Each candidate's mean weighs its blocks by how well their level is known (their gaps).
        means = paired.level_means(ys, gap, pool, within)
        sds = {k: sig / math.sqrt(len(v)) for k, v in ys.items()}
        ys[self.inc] = {b: 0.0 for _, b, _ in self.seq if b >= 0}
        means[self.inc], sds[self.inc] = 0.0, sig / math.sqrt(max(self.n_inc, 1))
        seed = self.sw.seed * 1000 + self.k
        pb = paired.p_best(means, sds, self.sw.higher, seed=seed)
        ev = {"ys": ys, "inc_y": inc_y, "sigma": sig, "means": means, "sds": sds, "p_best": pb}
        keys = list(means)
        # The noise of one figure: the candidates' own repeats where they have them, else the incumbent's.
        var1 = rep if rep is not None else sig**2
        # A candidate's figure is as good as its blocks' levels are known (their gaps): 1 / sum of
        # 1 / (var1 + gap^2) over its blocks; the incumbent's var1 over its runs.
        var = {k: 1.0 / paired.level_weights(ys[k], gap.get(k, {}), var1).sum() for k in keys if k != self.inc}
        var[self.inc] = var1 / max(self.n_inc, 1)
        f = axes.fit([self.sw.cands[k].values for k in keys], [means[k] for k in keys], [var[k] for k in keys])
        if f is None:
            return ev
        # The axes model applies: its estimates decide; the paired ones stay beside them.
        ev["paired"] = {"means": means, "sds": sds, "p_best": pb}
        ev["means"] = dict(zip(keys, map(float, f["mean"])))
        ev["sds"] = dict(zip(keys, map(float, f["sd"])))
        ev["p_best"] = dict(zip(keys, map(float, axes.p_best(f, self.sw.higher, seed=seed))))
        ev["model"] = {"means": ev["means"], "sds": ev["sds"], "p_best": ev["p_best"]}
        ev["axes"] = {
            "tau_log": f["tau"],
            "noise_log": math.sqrt(var1),
            "noise_from": "candidates' repeats" if rep is not None else "incumbent's repeats",
            "dof": f["dof"],
            "columns": len(f["beta"]),
            "special": [self.sw.cands[k].id for k, p in zip(keys, f["special"]) if p >= 0.5],
        }
        return ev

    def ranked(self, ev: dict) -> list[int]:
        """Candidates by probability of being the best, then estimate (the axes model's where it
        applies, else the paired one), then order."""
        sign = 1 if self.sw.higher else -1
        return sorted(ev["means"], key=lambda k: (-round(ev["p_best"][k], 12), -sign * ev["means"][k], k))

    def record(self, ev: dict) -> dict:
        cands = []
        keys = [self.inc] + sorted(set(k for k, _, _ in self.seq if k is not None))
        for key in keys:
            runs = [p for k, _, p in self.seq if (k if k is not None else self.inc) == key]
            ms = [self.sw.measure(p, key) for p in runs]
            ok = [m for m in ms if m.ok]
            pooled = Measured(key, "ok", np.concatenate([m.samples for m in ok])) if ok else ms[0]
            r = measured_record(pooled, runs[0], self.sw.higher)
            bad = next((m for m in ms if not m.ok), None)
            if ok and bad is not None:  # dropped from the rung by a run that did not measure
                r.update(status=bad.status, **({"reason": bad.why} if bad.why else {}))
            r.update(candidate_id=self.sw.cands[key].id, runs=len(runs), incumbent=key == self.inc)
            r["run_medians"] = [m.median for m in ok]
            if key in ev["means"]:
                own = ev.get("paired", ev)
                m, s = own["means"][key], own["sds"][key]
                r.update(
                    ratio=math.exp(m), ratio_lo=math.exp(m - paired.Z95 * s), ratio_hi=math.exp(m + paired.Z95 * s)
                )
                r["p_best"] = ev["p_best"][key]
                if "paired" in ev:
                    r["p_best_paired"] = own["p_best"][key]
                # the axes model's estimate and the one combined with the earlier rungs' (which
                # decided where there is one) beside the paired one
                for name, fig in (("model", ev.get("model")), ("combined", ev if "earlier" in ev else None)):
                    if fig is not None:
                        m, s = fig["means"][key], fig["sds"][key]
                        r[f"{name}_ratio"] = math.exp(m)
                        r[f"{name}_lo"], r[f"{name}_hi"] = math.exp(m - paired.Z95 * s), math.exp(m + paired.Z95 * s)
            cands.append(r)
        floor = math.exp(paired.Z95 * ev["sigma"]) - 1
        return (
            {
                "steps": self.steps,
                "blocks": self.blocks,
                "incumbent": self.sw.cands[self.inc].id,
                "noise": {"sigma_log": ev["sigma"], "floor_one_block": floor, "incumbent_repeats": len(ev["inc_y"])},
                "order": [p.id for _, _, p in self.seq],
                "candidates": cands,
                "raced_out": [self.sw.cands[k].id for k in self.raced],
            }
            | ({"axes_model": ev["axes"]} if "axes" in ev else {})
            | ({"earlier_rungs": ev["earlier"]} if "earlier" in ev else {})
        )


def promote(rung: Rung, ev: dict, cap_of, alpha: float) -> tuple[list[int], dict]:
    """(kept keys, most probable first; {key: why}) after a rung (see the module's docstring);
    cap_of(keep): (how many of them the budget pays for, None without a budget; the next rung's
    planned candidates)."""
    order = rung.ranked(ev)
    pb = ev["p_best"]
    why = {k: f"did not measure ({s})" for k, s in rung.status.items()}
    p_min = alpha / max(len(order), 1)
    # Under the axes model a candidate that its own runs say can be the best stays too (an
    # interaction the model smooths away), after those the model ranks, while the budget pays.
    own = ev.get("paired", ev)["p_best"]
    keep = [k for k in order if max(pb[k], own[k]) >= p_min]
    keep = keep if len(keep) >= 2 else order[: min(2, len(order))]
    cap, k_next = cap_of(keep)
    limit = 2 * k_next if cap is None else min(cap, 2 * k_next)
    for key in order:
        why[key] = f"P(best) {pb[key]:.3f}" + (f" (paired {own[key]:.3f})" if own is not pb else "")
        why[key] += " (the incumbent)" if key == rung.inc else ""
        if key not in keep:
            why[key] += f": below {p_min:.3g}, dropped"
        elif keep.index(key) >= limit:
            why[key] += (
                "; cut: the budget pays for no more"
                if cap is not None and cap < 2 * k_next
                else "; cut: twice the rung"
            )
    return keep[: max(limit, 0)], why


def _cap(sw: Sweep, plan, blocks, k: int, keep: list[int], rec: dict) -> tuple[int | None, int]:
    """(how many of `keep`, most probable first, the budget pays for in rung k + 1, the later
    rungs at their plan's counts of the most probable of them, each run priced for its candidate;
    the candidates rung k + 1 plans). When rung k + 1 is the top and doubles the steps, and that
    pays for fewer of `keep` than it takes (twice its plan) where the top at rung k's steps pays for
    more, the top runs at rung k's steps (the 48-point synthetic space: 9/10 against 7/10, run at
    the same time, 2026-12-05: a top of two, cut by one block's ranking, was a coin flip between
    the optimum and a 5% neighbour). Otherwise, when the budget pays for fewer than two, the rest
    of the schedule is
    re-planned, in place, to the first that pays for two, most top-rung blocks first (its own or
    MIN_TOP_BLOCKS, down to one: a slow period of the machine falls on a whole run, so blocks
    separate candidates that steps cannot), then the most steps at the top (its own, halved down
    to rung k's; the rungs planned at or above them left out, the first of those lending the top
    rung its candidates)."""
    if sw.share is None:
        return None, plan[k + 1][0]

    def fit(tail, tail_blocks) -> int:
        def cost(n: int) -> float:
            total = 0.0
            for j, ((c, s), b) in enumerate(zip(tail, tail_blocks)):
                keys = keep[: n if j == 0 else min(n, c)]
                total += rung_cost(sw, keys[0], keys[1:], s, b, True) if keys else 0.0
            return total

        return first_paid(range(len(keep), 0, -1), cost, sw.left()) or 0

    n = fit(plan[k + 1 :], blocks[k + 1 :])
    if sw.timed and k + 2 == len(plan) and plan[k + 1][1] > plan[k][1]:
        # The top rung would double the steps at the cost of contenders (fewer of them than it
        # takes, twice its plan): a slow period falls on a whole run, whatever its steps, so the
        # contenders race on at this rung's steps instead when that pays for more of them.
        tail, s_top = [(plan[k + 1][0], plan[k][1])], plan[k + 1][1]
        n_same = fit(tail, blocks[k + 1 :]) if n < min(len(keep), 2 * plan[k + 1][0]) else 0
        if n_same > max(n, 1):
            plan[k + 1 :] = tail
            why = f"the top rung at {plan[k][1]} steps, where the budget pays for {n_same} contenders"
            _replanned(sw, rec, f"after rung {k}: {why} (for {n} at {s_top} steps)")
            return n_same, plan[k + 1][0]
    if n >= 2 or not sw.timed:
        return n, plan[k + 1][0]
    for b in range(max(blocks[-1], MIN_TOP_BLOCKS), 0, -1):
        for s in halvings(plan[-1][1], plan[k][1]):
            i = next(j for j in range(k + 1, len(plan)) if plan[j][1] >= s)
            tail, tail_blocks = plan[k + 1 : i] + [(plan[i][0], s)], blocks[k + 1 : i] + [b]
            n = fit(tail, tail_blocks)
            if n >= 2:
                plan[k + 1 :], blocks[k + 1 :] = tail, tail_blocks
                rest = ", ".join(f"{c} x {s} steps x {b} block(s)" for (c, s), b in zip(tail, tail_blocks))
                _replanned(sw, rec, f"after rung {k}: the rest of the schedule at the prices the runs taught: {rest}")
                return n, plan[k + 1][0]
    return n, plan[k + 1][0]


def _replanned(sw: Sweep, rec: dict, why: str) -> None:
    rec.setdefault("replanned", []).append(why)
    sw.say(f"# tune: {sw.name}: {why}")


def run_rungs(sw: Sweep, plan, blocks, n0: int, rec: dict) -> tuple:
    """Runs the schedule; (last rung, its evaluation) or (None, None) when nothing measured."""
    alive = list(range(n0))
    last = (None, None)
    for k, (nk, sk) in enumerate(plan):
        top = k == len(plan) - 1
        rung, failed = None, []
        while alive:  # an incumbent whose run did not measure is dropped; the next one opens
            rung = Rung(sw, k, sk, alive, alive[0], REOPEN_BASE * sum(s == sk for _, s in plan[:k]))
            # An incumbent never measured before (the first rung's) runs alone first, so that one
            # that fails costs one run, not one per block.
            rung.run_blocks(0 if k == 0 else blocks[k])
            if k == 0 and rung.incumbent_ok():
                first_rung(sw, rung, plan, blocks, rec)
            if rung.incumbent_ok():
                break
            # A run of the incumbent did not measure: it and every candidate that did not are
            # recorded as such; the rung opens again with the next (the runs made are reused).
            failed += [f for f in rung.failures() if f[0] not in {k_ for k_, _ in failed}]
            alive = [i for i in alive[1:] if i not in rung.status]
            rung = None
        if rung is None:  # no incumbent measured: the runs that did not are recorded, with why
            if failed:
                cands = [_did_not_measure(sw, key, p) for key, p in failed]
                rec["rungs"].append({"steps": sk, "blocks": 0, "planned": nk, "candidates": cands})
            return last
        judge = partial(_judge, sw, rung, top and not earlier.TOP)
        ev, reopen = race(sw, rung, judge, judge()) if top else (judge(), None)
        sw.inc_y_before = ev["inc_y"] + sw.inc_y_before
        sw.carried = (earlier.carried(ev), sk)
        r = rung.record(ev)
        r["planned"] = nk
        if reopen:
            plan.append((len(reopen[0]), reopen[1]))
            blocks.append(1)
            top = False
        r["candidates"] += [_did_not_measure(sw, key, p) for key, p in failed]
        rec["rungs"].append(r)
        last = (rung, ev)
        sw.say(f"# tune: rung {k} ({sk} steps, {rung.blocks} block(s)): {len(ev['means'])} candidates measured")
        if top:
            break
        if reopen:
            keys, s_new = reopen
            why = {c: f"P(best) {ev['p_best'][c]:.3f}: races on" for c in keys}
            r["reopened"] = (
                f"the incumbent (P(best) {ev['p_best'][rung.inc]:.3g}) cannot be the best and a run of it costs "
                f"{sw.per_run(sk, rung.inc):.3g} s against {sw.per_run(sk, keys[0]):.3g} s of the most probable: "
                f"the race goes on as a new rung of {len(keys)} at {s_new} steps, opened by the most probable"
            )
            rec.setdefault("reopened", []).append(r["reopened"])
            _mark(r, keys, why, sw)
            sw.say(f"# tune: rung {k}: {r['reopened']}")
            alive = keys
            continue
        keep, why = promote(rung, ev, partial(_cap, sw, plan, blocks, k, rec=rec), sw.alpha)
        _mark(r, keep, why, sw)
        sw.say(f"# tune: rung {k}: {len(keep)} promoted")
        if len(keep) < 2:
            rec["stopped"] = f"after rung {k}: {'the budget' if sw.share else 'too few'} left"
            break
        alive = keep
    return last


def race(sw: Sweep, rung: Rung, judge, ev: dict) -> tuple[dict, tuple | None]:
    """The top rung's blocks beyond its planned ones, under a budget, while none dominates (P(best)
    1 - alpha/2 over at least MIN_TOP_BLOCKS of its blocks: one block's noise is two incumbent
    runs', blind to a slow period that fell on a candidate's run alone), at most MAX_TOP_BLOCKS: a
    race. The blocks the budget adds go to the candidates that can still be the best (P(best) at
    least alpha / candidates, as promotion keeps them), so each costs fewer runs and the contenders
    get more of them; the incumbent stays, every figure is read against it. A block of all of them
    that the budget no longer pays for races the most probable of them that it does. (the rung's
    evaluation, _reopen's (candidates, steps) when the race goes on as a new rung, else None)."""
    while rung.others and rung.blocks < MAX_TOP_BLOCKS and sw.share is not None and rung.incumbent_ok():
        lead = max(ev["p_best"], key=ev["p_best"].get)
        if ev["p_best"][lead] >= 1 - sw.alpha / 2 and len(ev["ys"][lead]) >= MIN_TOP_BLOCKS:
            break
        p_min = sw.alpha / max(len(ev["means"]), 1)
        racing = sorted((c for c in rung.others if ev["p_best"].get(c, 0.0) >= p_min), key=lambda c: -ev["p_best"][c])
        reopen = _reopen(sw, rung, ev, racing, p_min)
        if reopen:
            return ev, reopen
        cost = partial(lambda keys, m: rung_cost(sw, rung.inc, keys[:m], rung.steps, 1, False), racing)
        m = first_paid(range(len(racing), 0, -1), cost, sw.left())
        if not m:
            break
        rung.race(racing[:m])
        rung.run_blocks(1)
        ev = judge()
    return ev, None


def _did_not_measure(sw: Sweep, key: int, p) -> dict:
    """The record of a candidate dropped from a rung by its run p, which did not measure."""
    m = sw.measure(p, key)
    c = measured_record(m, p, sw.higher) | {"candidate_id": sw.cands[key].id, "runs": 1, "incumbent": False}
    return c | {"promoted": False, "why": f"did not measure ({m.status})"}


def _judge(sw: Sweep, rung: Rung, own_runs_only: bool) -> dict:
    """The rung's evaluation; below the top (own_runs_only False) its deciding figures combined with
    those carried from the rung before (earlier.py): promotion reads every rung's runs, the top
    rung's pick its own, at the most steps."""
    ev = rung.evaluate()
    if own_runs_only:
        return ev
    return earlier.combine(*sw.carried, ev, rung.inc, sw.higher, seed=sw.seed * 1000 + rung.k + 500)


def _reopen(sw: Sweep, rung: Rung, ev: dict, racing: list[int], p_min: float) -> tuple | None:
    """(the racing candidates, most probable first; the new rung's steps) when the race should go
    on as a new rung opened by the most probable of them: the incumbent cannot be the best (P(best)
    below p_min) and a run of it costs more than twice the most probable's (a bf16 run on a CPU, a
    batch many times larger). The new rung runs the most steps (the sweep's, halved down to this
    rung's) at which the budget pays for its opening run and the most blocks (MIN_TOP_BLOCKS down
    to one), as the first draw chose. None: the race goes on in this rung."""
    if len(racing) < 2 or ev["p_best"].get(rung.inc, 0.0) >= p_min or not sw.timed:
        return None
    if sw.per_run(rung.steps, rung.inc) <= 2 * sw.per_run(rung.steps, racing[0]):
        return None
    steps = sorted(set(halvings(sw.s_max, rung.steps) + [rung.steps]), reverse=True)
    options = ((nb, s) for nb in range(MIN_TOP_BLOCKS, 0, -1) for s in steps)
    got = first_paid(options, lambda o: rung_cost(sw, racing[0], racing[1:], o[1], o[0], True), sw.left())
    return (racing, got[1]) if got else None


def first_rung(sw: Sweep, rung: Rung, plan, blocks: list[int], rec: dict) -> None:
    """The first rung's blocks after its opening run. Under a time budget its first block runs a
    segment at a time, each repricing the candidates (the probe priced them all as itself): the
    candidates the budget no longer pays for, with the least rest a pick needs (a block of two at
    this rung's steps, at the incumbent's price), are left out; its later blocks run one at a
    time, each only while the budget still pays for it and the rest (a slow period can make every
    run dearer than the probe said). The candidates the first draw left out follow in its first
    block's order, each where the budget pays for it and the rest the draw planned (late_draw in
    tune.json)."""
    if not sw.timed:
        rung.run_blocks(blocks[0])
        return

    late = list(range(plan[0][0], len(sw.cands)))

    def paid(order: list[int]) -> int:
        # Every drawn candidate screened comes first: the later blocks and rungs re-plan to what is
        # left (_cap), so the rest of this block is cut only to leave the least rest a pick needs,
        # a block of two at this rung's steps, priced at the incumbent (at the median candidate
        # until 2026-12-08: where a few dear candidates, bf16 on a CPU, ran first, that reserved
        # their price and cut the cheap rest, the optimum with it: "Layers", 15 tunes won, 2 lost).
        # A candidate the draw left out joins only where the budget pays for the rest the draw
        # planned too.
        least_rest = paired.rung_runs(2, 1) * sw.per_run(rung.steps, rung.inc) if len(plan) > 1 else 0.0
        rest = plan_cost(plan[1:], blocks[1:], sw.per_run)

        def cost(m: int) -> float:
            reserve = rest if set(order[:m]) & set(late) else least_rest
            return rung_cost(sw, rung.inc, order[:m], rung.steps, 1, False) + reserve

        return first_paid(range(len(order), -1, -1), cost, sw.left()) or 0

    left_out = rung.run_block_priced(paid, late)
    joined = [k for k in late if k not in left_out]
    for b in range(1, blocks[0]):  # a block at a time, each only while the budget pays for it
        rest = plan_cost(plan[1:], blocks[1:], sw.per_run)
        if rung_cost(sw, rung.inc, rung.others, rung.steps, 1, False) + rest > sw.left() + 1e-9:
            rec["first_rung_blocks"] = {
                "planned": blocks[0],
                "ran": b,
                "why": f"its runs cost more than the draw priced: the budget paid for {b} of its {blocks[0]} blocks",
            }
            sw.say(f"# tune: {sw.name}: rung 0: {rec['first_rung_blocks']['why']}")
            break
        rung.run_blocks(1)
    repriced = (
        f"the first rung's runs repriced the candidates (start-up {sw.model.startup():.3g} s, steps "
        f"{sw.model.step_s(None):.3g} s at the median candidate)"
    )
    drawn_out = [k for k in left_out if k not in late]
    if drawn_out:
        why = f"{repriced}: the budget did not pay for {len(drawn_out)} of those drawn"
        rec["left_out"] = {"candidates": len(drawn_out), "why": why}
        sw.say(f"# tune: {sw.name}: {why}: left out of rung 0")
    if joined:
        why = f"{repriced}: the budget pays for {len(joined)} of the {len(late)} the draw left out"
        rec["late_draw"] = {"candidates": len(joined), "why": why}
        sw.say(f"# tune: {sw.name}: {why}: drawn into rung 0")


def _mark(r: dict, keep: list, why: dict, sw: Sweep) -> None:
    ids = {sw.cands[k].id: k for k in range(len(sw.cands))}
    for c in r["candidates"]:
        key = ids.get(c.get("candidate_id", ""), None)
        c["promoted"] = key in keep
        c["why"] = why.get(key, c.get("why", ""))


def pick(sw: Sweep, rung: Rung, ev: dict, rec: dict) -> None:
    """The winner of the last rung, every candidate tied with it, and the margin over the runner-up."""
    sign = 1 if sw.higher else -1
    order = sorted(ev["means"], key=lambda k: (-sign * ev["means"][k], -ev["p_best"][k], k))
    if not rung.incumbent_ok():  # a run of it in the top rung's race did not measure: never the pick
        order = [k for k in order if k != rung.inc]
    recs = {c["candidate_id"]: c for c in rec["rungs"][-1]["candidates"]}
    top_measured = [sw.measure(p, k if k is not None else rung.inc) for k, _, p in rung.seq]
    rec["no_pick"] = no_pick(rank(top_measured, sw.higher), sw.objective, sw.unit, sw.higher, sw.cands[0].ranks)
    if not order or rec["no_pick"]:
        rec["winner"] = None
        return
    w = order[0]
    wp = sw.cands[w]
    rec["winner"] = dict(recs[wp.id]) | {"label": label(axis_values(wp)), "p_best": ev["p_best"][w]}
    if "paired" in ev:  # the axes model or the earlier rungs decided (a tune that stopped below the top)
        own = ev["paired"]["means"]
        best_own = max(own, key=lambda k: (sign * own[k], k == w))
        why = []
        if "axes" in ev:
            why.append(
                f"{len(order)} candidates in a rung of {rung.blocks} block(s): each estimate borrows the runs of "
                f"the candidates that share its axis values (what the axes do not explain: sd "
                f"{ev['axes']['tau_log']:.3f} on the log scale)"
            )
        if "earlier" in ev:
            why.append(
                f"each estimate combined with the earlier rungs' (from {ev['earlier']['from_steps']} steps, "
                f"allowed to be off by sd {ev['earlier']['delta_log']:.2f} on the log scale)"
            )
        rec["estimates"] = ev.get("axes", {}) | {
            "by": " and ".join(b for b, on in (("axes model", "axes" in ev), ("earlier rungs", "earlier" in ev)) if on),
            "why": "; ".join(why),
            "paired_best": None if best_own == w else label(axis_values(sw.cands[best_own])),
        }
    sides = lambda a, b: 1 if rung.inc in (a, b) else 2  # noqa: E731
    tied, per_block = [], paired.rung_runs(len(order), 1) - 1
    cost = rung_cost(sw, rung.inc, [k for k in order if k != rung.inc], rung.steps, 1, False)
    for other in order[1:]:
        v = paired.verdict(ev["ys"][w], ev["ys"][other], ev["sigma"], sides(w, other), sw.alpha, sw.higher)
        v["label"] = label(axis_values(sw.cands[other]))
        v["id"] = recs[sw.cands[other].id]["id"]
        if v.get("blocks_to_separate"):
            more = max(v["blocks_to_separate"] - v["blocks"], 0)
            v["more_runs"] = more * per_block
            v["more_seconds"] = more * cost if sw.timed else None
        if other == order[1]:
            rec["runner_up"] = dict(recs[sw.cands[other].id]) | {"label": v["label"]}
            rec["margin"] = v
        if v["lo"] is not None and v["lo"] <= 1 <= v["hi"]:  # within the floor: a tie
            tied.append(v)
    rec["tied"] = tied
    rec["noise_floor"] = rec["rungs"][-1]["noise"]
    if rung.steps != sw.s_max:
        rec["winner"]["note"] = (
            f"measured at {rung.steps} steps, not the sweep's {sw.s_max}: the budget shortened the runs or the "
            f"tune stopped before the top rung"
        )
    top_ids = [p.id for _, _, p in rung.seq]
    rec["recommendation"] = recommendation(with_steps(wp, sw.s_max), sw.runs.directory, top_ids, sw.runs.hosts)


def schedule_for(sw: Sweep, n: int, min_steps: int, rec: dict) -> int:
    """The least steps of a rung: --min-steps, raised, under a time budget, to the rung's steps
    nearest (by ratio, nearest_rung_steps) those whose time equals the measured start-up of a run,
    or to the sweep's steps when that is more than half of them (the currency in which start-up
    costs; probed with one run of --min-steps, the cheapest, which gives both: its time and its
    recorded step times. It is the first candidate's run of a first rung at --min-steps, and spent
    apart otherwise: a second probe run, as there was until 2026-12, cost a small sweep a fifth of
    its share)."""
    if not sw.timed:
        return min_steps
    s0 = min(min_steps, sw.s_max)
    probe = sw.point(0, s0, 0)
    sw.say(f"# tune: {sw.name}: probing the cost of a run with 1 run of {s0} steps")
    sw.run([probe], [0])
    a, b = sw.model.startup(), sw.model.step_s(0)
    rec["cost_model"] = {"startup_s": a, "step_s": b}
    if b <= 0:
        return min_steps
    least = least_steps(sw.s_max, min_steps, a, b)
    rec["cost_model"].update(startup_steps=math.ceil(a / b), least_steps=least)
    return least


def least_steps(s_max: int, min_steps: int, startup_s: float, step_s: float) -> int:
    """The shortest rung's steps under a time budget (schedule_for): the
    rung steps nearest those that take as long as the start-up (startup_s / step_s, step_s > 0), at
    least min_steps; the sweep's steps when that is more than half of them."""
    even = startup_s / step_s
    return max(min_steps, nearest_rung_steps(s_max, even) if even <= s_max / 2 else s_max)


def halvings(steps: int, least: int) -> list[int]:
    """steps, halved (rounded down) while the half is at least `least`: the tops a schedule tries."""
    out = [steps]
    while out[-1] // 2 >= least:
        out.append(out[-1] // 2)
    return out


def nearest_rung_steps(s_max: int, even: float) -> int:
    """Of the steps a rung can have (s_max halved j times, rounded down), the nearest to `even` on
    the log scale on which the rungs double: a start-up measured near a rung's steps picks that
    rung whichever side of it the load put the probe. Rounding up (until 2026-12-05) picked the next
    rung up for a ratio just above a rung's: on the 48-point synthetic space a probe 10% slower
    (0.31 s against 0.28 s, 4.4 steps against 4.0) dropped the 4-step rung and a rung with it."""
    if even <= 0:
        return 1
    return min((s_max >> j for j in range(s_max.bit_length())), key=lambda s: abs(math.log(s / even)))


def tune_sweep(name, cands, runs, objective, share, seed, alpha, min_steps, say, repeats: int = 1) -> dict:
    """Successive halving with paired, interleaved rungs over one sweep's candidates; the record
    tune.json keeps for it."""
    sw = Sweep(name, cands, runs, objective, share, seed, alpha, say)
    n = len(sw.cands)
    rec = {"sweep": name, "binary": sw.cands[0].binary, "objective": objective, "unit": sw.unit, "higher": sw.higher}
    rec.update(method="halving", seed=seed, alpha=alpha, candidates=n, steps=sw.s_max, repeats=repeats, rungs=[])
    least = schedule_for(sw, n, min_steps, rec)
    full = schedule(n, n, sw.s_max, least)
    plan, top_blocks = full, None
    if share is not None:
        plan, top_blocks = _draw(sw, n, least, repeats)
        if plan is None:
            plan, top_blocks = [(min(2, n), max(min(least, sw.s_max), 1))], 1
            need = plan_cost(plan, rung_blocks(plan, repeats, 1), sw.per_run)
            u = "s" if sw.timed else "runs"
            rec["short"] = (
                f"the sweep's share ({max(sw.left(), 0):.1f} {u} left of {share[1]:.1f}) pays for less than "
                f"the smallest schedule (two candidates in one block: about {need:.1f} {u}"
                + (" at the probed cost)" if u == "s" else ")")
            )
            rec["over_share"] = max(need - sw.left(), 0.0)
            say(f"# tune: {name}: {rec['short']}: running it anyway, over the share")
    n0 = plan[0][0]
    blocks = rung_blocks(plan, repeats, top_blocks)
    rec["schedule"] = [{"candidates": c, "steps": s, "blocks": b} for (c, s), b in zip(plan, blocks)]
    rec["budget"] = {"kind": share[0], "share": share[1]} if share else None
    say(
        f"# tune: {name} ({sw.cands[0].binary}, {objective}): {n} candidates, {n0} drawn; rungs "
        + ", ".join(f"{c} x {s} steps x {b} block(s)" for (c, s), b in zip(plan, blocks))
        + (f" (a full grid would be {len(full)} rung(s))" if len(full) != len(plan) else "")
    )
    rung, ev = run_rungs(sw, plan, blocks, n0, rec)
    _spent(sw, rec)
    if rung is None:
        rec["winner"], rec["no_pick"] = None, None
        return rec
    pick(sw, rung, ev, rec)
    return rec


def _draw(sw: Sweep, n: int, least: int, repeats: int) -> tuple:
    """(schedule, top rung's blocks) that the budget pays for, the first of: every candidate at the
    sweep's steps; under a time budget, every candidate with every rung's steps halved (down to the
    least steps), so that the optimum is not left out of the draw; fewer blocks at the top rung
    (down to one); every candidate in one rung of one block (a race at the most steps it pays
    for); fewer candidates. (None, None): not even two candidates in one block."""
    tops = halvings(sw.s_max, least) if sw.timed else [sw.s_max]
    options = (
        option
        for m in range(n, min(2, n) - 1, -1)
        for option in [
            (schedule(n, m, top, least), tb) for tb in range(max(repeats, MIN_TOP_BLOCKS), 0, -1) for top in tops
        ]
        + [([(m, top)], 1) for top in tops]
    )
    cost = lambda o: plan_cost(o[0], rung_blocks(o[0], repeats, o[1]), sw.per_run)  # noqa: E731
    return first_paid(options, cost, sw.left()) or (None, None)


def _spent(sw: Sweep, rec: dict) -> None:
    """What the tune cost: runs, run time, and measured steps (warm-up left out), with the cost
    model's split of the run time into start-up and steps."""
    ids = sorted(set(sw.used))
    rec["spent"] = sw.spent()
    rec["spent_runs"] = len(ids)
    rec["spent_seconds"] = sw.runs.seconds(ids)
    by_id = {p.id: p for p in sw.runs.planned.values()}
    rec["spent_steps"] = int(sum(by_id[i].values.get("steps", 0) for i in ids if i in by_id))
    rec["points"] = ids
    cm = rec.get("cost_model")
    if cm:
        cm["learnt"] = sw.model.summary(lambda k: sw.cands[k].id)
        steps_of_run = {i: by_id[i].values.get("steps", 0) for i in ids if i in by_id}
        split_steps = sum(sw.model.step_s(sw.key_of.get(i)) * n for i, n in steps_of_run.items())
        rec["spent_split"] = {"startup_s": sw.model.startup() * len(ids), "steps_s": split_steps}
