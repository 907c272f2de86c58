"""`dtune tune --method optuna`: Optuna's ask/tell interface with its TPE sampler (seeded by --seed)
and its Hyperband pruner over the same resource as halving: a trial runs its candidate for s0
steps, reports the median objective, and the pruner decides whether it goes on to 2 s0, 4 s0, ...
up to the sweep's own steps; each length is a run (a sweep point) of its own, so a run already
made (by this study, an earlier one or `dtune tune --method halving` in the same directory) is
reused, never repeated. `--optuna-pruner none` is Optuna's default (TPE without pruning): every
trial runs at the sweep's own steps.

Every axis that varies among the candidates is one categorical parameter; a suggestion that is no
candidate (an excluded or constrained combination) is told as failed without running anything.
The study lives next to the sweep's state, in <out>/optuna-<sweep>.journal (Optuna's
JournalFileStorage), and is resumed by the same command (study name: sweep, seed and pruner).
A trial whose next, longer run the budget cannot pay for stops there (as pruned); the trials stop
when not even a shortest run fits, when every candidate has been measured at full length, or after
20 x candidates suggestions. Under a budget that reaches no full-length run, the best at the
greatest length measured is the pick (said so in the output).

Under a time budget, as halving: a run is priced by cost.CostModel (the start-up shared by the
sweep's runs plus the candidate's own step time, learnt from every run made; a candidate not run
yet at the median one's), first from one probe run of the reference at --min-steps (it opens the
first length's chain when that is --min-steps); the lengths are sized from it (_timed_levels: the
shortest the rung steps nearest those that take as long as the start-up, the longest the sweep's
halved until Hyperband's brackets fit the share), and no trial starts that the share cannot pay
for. Until 2026-12-05 a run was priced as the mean run so far scaled by its steps (0 before the
first run, and no start-up) over lengths fixed by --min-steps: on the quickstart with 40 times its
steps a first trial cost 24 s of a 5 s share, and the last sweep inherited a share below 0. A
share that pays for no trial (a run between two of the reference) at the shortest length gives no
pick and says so (`no_trial`), as does a share the sweeps before it spent (nothing is run); a
winner that was the only candidate measured says that (`alone`).

Optuna is fed the paired figures halving reads (paired.py): at each length the runs form a chain
I c I c' I ... of the reference configuration (the first candidate) and the trials' runs, and a
run's value is its figure over the mean of the reference runs before and after it (the machine's
drift between runs cancels). The reference's repeats give the noise floor; the pick's margin over
the runner-up is a comparison of two such figures (one run each: never significant alone).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np

from . import paired
from .candidates import axis_values, label, measured_record, recommendation, steps_of, teach, with_steps
from .cost import CostModel
from .halving import Measured, no_pick, rank, schedule
from .interleaved import halvings, least_steps
from .objective import OBJECTIVES


def _study(directory, name, seed, pruner_name, s0, s_max, higher):
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = JournalStorage(JournalFileBackend(str(directory / f"optuna-{name}.journal")))
    pruner = (
        optuna.pruners.HyperbandPruner(min_resource=s0, max_resource=s_max, reduction_factor=2)
        if pruner_name == "hyperband"
        else optuna.pruners.NopPruner()
    )
    return optuna.create_study(
        study_name=f"{name}-seed{seed}-{pruner_name}",
        storage=storage,
        sampler=optuna.samplers.TPESampler(seed=seed),
        pruner=pruner,
        direction="maximize" if higher else "minimize",
        load_if_exists=True,
    )


def _levels(n, s_max, least, pruner) -> list[int]:
    """The lengths a trial runs: Hyperband's, the halving schedule's steps from `least` up to s_max;
    without pruning, s_max alone."""
    return [s for _, s in schedule(n, n, s_max, least)] if pruner == "hyperband" else [s_max]


def _timed_levels(n, s_max, min_steps, pruner, share_s, runs, ref_point, learn, model, say, name):
    """(the lengths a trial runs, the cost model's record) under a time budget, as halving sizes its
    rungs (interleaved.schedule_for and _draw): one probe run of the reference at --min-steps prices
    a run (start-up + steps); the shortest length is the rung steps nearest those that take as long
    as the start-up, and the longest the sweep's steps, halved down to that, until Hyperband's
    brackets (the halving schedule over those lengths, each length's trials between runs of the
    reference) fit the share. Until 2026-12-05 the lengths were --min-steps doubled up to the
    sweep's steps whatever the budget: where a run is mostly start-up a first trial cost more than
    a sweep's share, and optuna ran over it."""
    s0 = min(min_steps, s_max)
    probe = ref_point(s0, 0)
    say(f"# tune: {name}: probing the cost of a run with 1 run of {s0} steps")
    if runs.run([probe]) == 130:
        raise KeyboardInterrupt
    learn(probe, 0)
    a, b = model.startup(), model.step_s(0)
    rec = {"startup_s": a, "step_s": b}
    if b <= 0:
        return _levels(n, s_max, min_steps, pruner), rec
    least = least_steps(s_max, min_steps, a, b)
    left = share_s - model.run_s(0, s0)
    for top in halvings(s_max, least):
        plan = schedule(n, n, top, least) if pruner == "hyperband" else [(n, top)]
        if sum((2 * c + 1) * model.run_s(None, s) for c, s in plan) <= left + 1e-9:
            break
    rec.update(least_steps=least, top_steps=top)
    return [s for _, s in plan], rec


def tune_sweep_optuna(name, cands, runs, objective, share, seed, alpha, min_steps, say, pruner="hyperband") -> dict:
    import optuna

    binary = cands[0].binary
    unit, higher = OBJECTIVES[objective][1], OBJECTIVES[objective][2]
    n, s_max = len(cands), steps_of(cands[0])
    timed = share is not None and share[0] == "seconds"
    model = CostModel()  # under a time budget: what a run of each candidate costs
    used: list = []

    def learn(p, key):
        """Teaches the cost model a finished run (its time, and its steps' when it measured)."""
        if timed:
            teach(model, runs, [p], [key], lambda q, k: runs.measure(q, k, objective).ok)

    def per_run(steps, key=None):
        """A run's cost in the budget's unit: 1 run, or its seconds by the cost model."""
        return model.run_s(key, steps) if timed else 1.0

    def ref_point(steps, j):
        return replace(with_steps(cands[0], steps), repeat=1000 + j)

    cost_model = None
    if timed and share[1] > 1e-9:
        levels, cost_model = _timed_levels(
            n, s_max, min_steps, pruner, share[1], runs, ref_point, learn, model, say, name
        )
        used.append(ref_point(min(min_steps, s_max), 0).id)
    else:
        levels = _levels(n, s_max, min_steps, pruner)
    longest = levels[-1]
    axes = {}
    for c in cands:
        for k, v in axis_values(c).items():
            axes.setdefault(k, []).append(json.dumps(v))
    axes = {k: sorted(set(v)) for k, v in axes.items() if len(set(v)) > 1}
    by_params = {tuple(json.dumps(axis_values(c)[k]) for k in axes): c for c in cands}
    study = _study(runs.directory, name, seed, pruner, levels[0], longest, higher)
    rec = {"sweep": name, "binary": binary, "objective": objective, "unit": unit, "higher": higher}
    rec.update(method=f"optuna (TPE, {pruner} pruner)", seed=seed, alpha=alpha, candidates=n, steps=s_max)
    rec["schedule"] = [{"candidates": None, "steps": s} for s in levels]
    rec["budget"] = {"kind": share[0], "share": share[1]} if share else None
    if cost_model:
        rec["cost_model"] = cost_model
    say(f"# tune: {name} ({binary}, {objective}): optuna over {n} candidates, steps {', '.join(map(str, levels))}")
    used += [pid for t in study.trials for pid in t.user_attrs.get("points", [])]
    used += [c[3] for t in study.trials for c in t.user_attrs.get("chain", []) if c[1] == "ref"]
    results: dict = {}  # (candidate index, steps) -> Measured
    index = {id(c): i for i, c in enumerate(cands)}
    for t in study.trials:  # a resumed study: the runs its trials made, read back (none is rerun)
        i = t.user_attrs.get("candidate")
        if isinstance(i, int) and 0 <= i < n:
            for steps, pid in zip(levels, t.user_attrs.get("points", [])):
                p = with_steps(cands[i], steps)
                if p.id == pid and (i, steps) not in results:
                    runs.planned[p.id] = p
                    results[(i, steps)] = runs.measure(p, i, objective)

    def spent():
        return len(set(used)) if share is None or share[0] == "runs" else runs.seconds(set(used))

    chain: dict = {}  # steps -> [(candidate index or None for the reference, point)] in run order
    read: dict = {}  # point id -> Measured (a finished run's file is read once)

    for t in study.trials:  # a resumed study: its chains, read back in the order they ran
        for steps, kind, i, pid in t.user_attrs.get("chain", []):
            p = ref_point(steps, i) if kind == "ref" else with_steps(cands[i], steps)
            if p.id == pid:
                runs.planned[p.id] = p
                chain.setdefault(steps, []).append((None if kind == "ref" else i, p))

    for entries in chain.values():  # a resumed study's runs price the rest
        for k, p in entries:
            learn(p, 0 if k is None else k)

    def run_one(p, key, kind, steps, log):
        if runs.run([p]) == 130:
            raise KeyboardInterrupt
        used.append(p.id)
        learn(p, 0 if kind == "ref" else key)  # the reference is the first candidate's configuration
        chain.setdefault(steps, []).append((None if kind == "ref" else key, p))
        log.append([steps, kind, key, p.id])

    def measured(k, p):
        """A run's outcome (k: its candidate, None for the reference), its file read once."""
        if p.id not in read:
            read[p.id] = runs.measure(p, 0 if k is None else k, objective)
        return read[p.id]

    def bad_reference(steps):
        """Why no trial is read at this length (a run of the reference there did not measure: it,
        failing or hanging until --timeout, and the candidates are launched there no more), or None."""
        for k, q in chain.get(steps, []):
            m = measured(k, q) if k is None else None
            if m is not None and not m.ok:
                said = f"{m.status}: {m.why}" if m.why else m.status
                return f"the reference's run {q.id} at {steps} steps did not measure ({said})"
        return None

    def measure(i, steps, log):
        p = with_steps(cands[i], steps)
        if (i, steps) not in results and bad_reference(steps):
            results[(i, steps)] = Measured(i, "skipped", why=bad_reference(steps))
        if (i, steps) not in results:
            opening = not (chain.get(steps) and chain[steps][-1][0] is None)  # a reference run first
            refs = sum(1 for k, _ in chain.get(steps, []) if k is None)
            if p.id not in used and share is not None:
                if share[1] - spent() <= 1e-9:
                    return None  # nothing left
                if opening and ref_point(steps, refs).id in used:  # the probe opens the chain
                    run_one(ref_point(steps, refs), refs, "ref", steps, log)
                    refs, opening = refs + 1, False
                cost = per_run(steps, i) + per_run(steps, 0) * (2 if opening else 1)
                if spent() + cost > share[1] + 1e-9:
                    return None  # the budget pays for no more
            if opening:
                run_one(ref_point(steps, refs), refs, "ref", steps, log)
                refs += 1
            if bad_reference(steps):  # the opening run (or the probe) of the reference did not measure
                results[(i, steps)] = Measured(i, "skipped", why=bad_reference(steps))
                return results[(i, steps)]
            run_one(p, i, "cand", steps, log)
            run_one(ref_point(steps, refs), refs, "ref", steps, log)
            results[(i, steps)] = runs.measure(p, i, objective)
        return results[(i, steps)]

    def figures(steps):
        """({candidate: {0: paired log figure}}, the reference's own y values) at one length."""

        runs_at = chain.get(steps, [])
        seq, figures.within = paired.figure_rows((k, b, measured(k, p)) for b, (k, p) in enumerate(runs_at))
        ys, inc = paired.normalise(seq, figures.within)  # the level read from every run, as halving's
        return {k: {0: float(np.mean(list(v.values())))} for k, v in ys.items()}, inc

    def paired_value(i, steps):
        ys, _ = figures(steps)
        return float(np.exp(ys[i][0])) if i in ys else None

    full = {i for (i, s), m in results.items() if s == longest and m.ok}
    stop = False
    for _ in range(20 * n):
        if stop or len(full) == n:
            break
        trial = study.ask()
        key = tuple(trial.suggest_categorical(k, v) for k, v in axes.items())
        c = by_params.get(key)
        if c is None:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            continue
        i = index[id(c)]
        trial.set_user_attr("candidate", i)
        state, value, pts, log = optuna.trial.TrialState.COMPLETE, None, [], []
        for steps in levels:
            m = measure(i, steps, log)
            if m is None:  # the budget cannot pay for this run: stop here (and for good at the shortest)
                stop = steps == levels[0]
                state = optuna.trial.TrialState.FAIL if stop or value is None else optuna.trial.TrialState.PRUNED
                break
            pts.append(with_steps(c, steps).id)
            if not m.ok:
                state = optuna.trial.TrialState.FAIL
                break
            value = paired_value(i, steps)
            if value is None:
                state = optuna.trial.TrialState.FAIL
                break
            trial.report(value, steps)
            if steps != longest and trial.should_prune():
                state = optuna.trial.TrialState.PRUNED
                break
        if state == optuna.trial.TrialState.COMPLETE and value is not None and math.isfinite(value):
            full.add(i)
        trial.set_user_attr("points", pts)
        trial.set_user_attr("chain", log)
        study.tell(trial, value if state == optuna.trial.TrialState.COMPLETE else None, state=state)
    rec["trials"] = len(study.trials)
    if share is not None and not results and stop:  # stopped by the budget before any run measured
        u = "s" if timed else "runs"
        if share[1] <= 1e-9:
            rec["no_trial"] = (
                f"nothing was left of the budget for this sweep (its share: {share[1]:.1f} {u}): the sweeps "
                f"before it spent it; give a larger --budget"
            )
        else:
            need = per_run(levels[0], None) + 2 * per_run(levels[0], 0)
            rec["no_trial"] = (
                f"the sweep's share ({share[1]:.1f} {u}) pays for no trial at {levels[0]} steps"
                + f" (a run between two of the reference: about {need:.1f} {u})"
                + "; give a larger --budget, or use --method halving, which shortens its runs to fit"
            )
        say(f"# tune: {name}: {rec['no_trial']}")
    rec["rungs"] = []
    for k, steps in enumerate(levels):
        here = [(i, m) for (i, s), m in sorted(results.items()) if s == steps]
        if not here:
            continue
        nxt = levels[k + 1] if k + 1 < len(levels) else None
        cs = []
        for i, m in here:
            r = measured_record(m, with_steps(cands[i], steps), higher)
            if nxt is not None:
                r["promoted"] = (i, nxt) in results
                r["why"] = "the pruner let it go on" if r["promoted"] else "pruned (or the budget ran out)"
            cs.append(r)
        rec["rungs"].append({"steps": steps, "planned": None, "candidates": cs})
    # The winner among the runs at the greatest length any candidate reached (the sweep's own steps
    # unless the budget stopped every trial before it).
    measured_levels = [s for s in levels if any(m.ok for (_, s2), m in results.items() if s2 == s)]
    top_steps = measured_levels[-1] if measured_levels else s_max
    top = [m for (i, s), m in results.items() if s == top_steps]
    if cost_model:
        cost_model["learnt"] = model.summary(lambda k: cands[k].id)
    rec["spent"] = spent()
    rec["spent_runs"] = len(set(used))
    rec["spent_seconds"] = runs.seconds(set(used))
    rec["points"] = sorted(set(used))
    rec["spent_steps"] = int(sum(runs.planned[i].values.get("steps", 0) for i in set(used) if i in runs.planned))
    ys, inc_y = figures(top_steps)
    sig = paired.sigma_y(inc_y, figures.within)
    sign = 1 if higher else -1
    ranked = [m for m in rank(top, higher) if m.key in ys]
    ranked.sort(key=lambda m: (-sign * ys[m.key][0], m.key))
    rec["no_pick"] = no_pick(rank(top, higher), objective, unit, higher, cands[0].ranks)
    if not ranked or rec["no_pick"]:
        rec["winner"] = None
        return rec
    w = ranked[0]
    wp = with_steps(cands[w.key], top_steps)
    rec["winner"] = measured_record(w, wp, higher) | {
        "label": label(axis_values(wp)),
        "paired": float(np.exp(ys[w.key][0])),
    }
    if top_steps != s_max:
        rec["winner"]["note"] = (
            f"measured at {top_steps} steps: the budget stopped every trial before the sweep's {s_max} steps"
        )
    if len(ranked) == 1 and n > 1:
        rec["winner"]["alone"] = (
            f"the only candidate of {n} measured at {top_steps} steps: the budget paid for no other trial there, "
            f"so nothing was compared"
        )
    if len(ranked) > 1:
        r: Measured = ranked[1]
        rp = with_steps(cands[r.key], top_steps)
        rec["runner_up"] = measured_record(r, rp, higher) | {"label": label(axis_values(rp))}
        rec["margin"] = paired.verdict(ys[w.key], ys[r.key], sig, 2, alpha, higher)
    rec["noise_floor"] = {
        "sigma_log": sig,
        "floor_one_block": float(np.exp(paired.Z95 * sig) - 1),
        "incumbent_repeats": len(inc_y),
    }
    top_ids = [with_steps(cands[m.key], top_steps).id for m in top]
    rec["recommendation"] = recommendation(with_steps(cands[w.key], s_max), runs.directory, top_ids, runs.hosts)
    return rec
