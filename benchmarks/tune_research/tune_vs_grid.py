"""How well `dtune tune` finds a space's best point, and at what cost, against the whole grid.

    benchmarks/tune_research/tune_vs_grid.py SPACE.yaml --live [--rounds 5] [--seeds 5] [--budget-frac 0.3]
        [--methods halving] [--steps-scale K] [--out DIR]
    benchmarks/tune_research/tune_vs_grid.py SPACE.yaml [--out DIR] [--seeds 5] [--repeats 3] [--budget-frac 0.3]

--live (the issue-37 protocol, nothing replayed):
1. The ground truth: the whole grid `--rounds` times, interleaved (every round runs every point of
   every sweep once at full length, in an order shuffled per round), so slow and fast periods of the
   machine fall on every candidate. A run's figure is the 20% trimmed mean of its per-step
   objective's logs (paired.run_figure, as the tuner reads it; the median until 2026-12-06);
   within a sweep each round's log figures are read against that round's mean, and a candidate's
   figure is the geometric mean over the rounds with a 95% t-interval over them (the grid's own
   intervals, printed). The grid's best is the best mean.
2. Every method and seed tunes live in a fresh directory (`dtune tune --budget`, that fraction of one
   round's run time: what one `dtune sweep run` of the file spends).
3. Prints, per method and sweep: how often the pick lies within the grid best's 95% interval (its
   figure no worse than the interval's worse end) and within 3% of it, and the cost in run time and
   steps against one round of the grid; first, as the yardstick, the same for each round alone (one
   plain grid, cost 1: the candidate with the round's best figure).
--steps-scale K runs a copy of SPACE (written into the --out directory) with every sweep's steps
times K: on a machine where a run's start-up dominates (the quickstart's 10 steps: ~0.9 s of ~1.2 s
on the 2-core machine), a 30% budget pays for fewer runs than a sweep has candidates, and no tuner
can pick among candidates it cannot run; K = 40 makes step time dominate, the case the 30% target
is set for.

Without --live (replay, the issue-14 protocol):
1. Measures, through the sweep runner (resumable: rerun after an interruption), every candidate of
   every sweep of SPACE at each rung length halving would use, and the full length `--repeats`
   times: the full-length repeats are the ground truth (pooled samples per candidate), the rest lets
   every method replay its choices from real runs.
2. Runs each method with each seed over that directory (`dtune tune --out DIR`): halving with no
   budget and halving with `--budget-frac` of the grid's run time (Optuna, with and without
   Hyperband, until its removal in 2026-12: README.md's "Layers"). A replayed run launches nothing: its
   cost is the run time its state record holds, the time a real tune would have spent on it.
3. Prints, per method and sweep: how often the pick is within 3% of the grid's best (by the ground
   truth's medians) and the cost as a fraction of the grid's run time (one run of each candidate at
   full length, what `dtune sweep run` spends).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "sweeps"), str(REPO / "report")]

from dtune_sweep import runner  # noqa: E402
from dtune_sweep.candidates import DEFAULT_STEPS, STEPS_FLAGS, steps_of, with_steps  # noqa: E402
from dtune_sweep.halving import schedule  # noqa: E402
from dtune_sweep.objective import DEFAULT, OBJECTIVES, samples  # noqa: E402
from dtune_sweep.paired import run_figure  # noqa: E402
from dtune_sweep.spec import plan  # noqa: E402


def check_data(pts) -> None:
    """Exits 2, naming the command that makes it, when a point reads a local --data directory that
    is not there (every run of it would fail, and the ground truth would lack its sweep)."""
    missing = sorted(
        {
            str(p.args[i + 1])
            for p in pts
            for i, a in enumerate(p.args[:-1])
            if str(a) == "--data" and "://" not in str(p.args[i + 1]) and not Path(str(p.args[i + 1])).exists()
        }
    )
    if missing:
        print(
            f"tune_vs_grid: --data {', '.join(missing)}: not there; make it first (bash scripts/main.sh does, or "
            "the dtune-data command in the space file's header)",
            file=sys.stderr,
        )
        sys.exit(2)


def scaled_space(space: Path, k: int, out: Path) -> Path:
    """A copy of SPACE (written into OUT) with every sweep's steps (dtune-train --steps, dtune-comm
    --iters or -n, the binary's default where a sweep sets none) times k: the same points with step
    time k times the share of a run, so that a tune's budget is spent where it decides rather than on
    start-ups. The sweep that sets its steps on an axis is refused (exit 2): its points differ in steps."""
    import yaml

    doc = yaml.safe_load(space.read_text())
    for sw in doc.get("sweeps", []):
        flags = STEPS_FLAGS.get(sw.get("binary"))
        if flags is None:
            continue
        if any(f in (sw.get("axes") or {}) for f in flags) or any(f in z for z in sw.get("zip") or [] for f in flags):
            print(f"tune_vs_grid: --steps-scale: sweep '{sw.get('name')}' varies {flags[0]}", file=sys.stderr)
            sys.exit(2)
        args = [str(a) for a in sw.get("args") or []]
        at = [i for i in range(len(args) - 1) if args[i] in flags]
        for i in at:
            args[i + 1] = str(int(args[i + 1]) * k)
        if not at:
            args += [flags[0], str(DEFAULT_STEPS[sw["binary"]] * k)]
        sw["args"] = args
    out.mkdir(parents=True, exist_ok=True)
    dst = out / f"{space.stem}-steps-x{k}.yaml"
    dst.write_text(
        f"# {space} with every sweep's steps times {k} (tune_vs_grid.py --steps-scale {k})\n"
        + yaml.safe_dump(doc, sort_keys=False)
    )
    return dst


def collect(space: Path, out: Path, repeats: int, min_steps: int):
    pts = [p for p in plan(str(space), runner.known_flags) if p.repeat == 0]
    check_data(pts)
    sweeps: dict = {}
    for p in pts:
        sweeps.setdefault(p.sweep, []).append(p)
    todo, truth_pts = [], {}
    for name, cands in sweeps.items():
        s_max = steps_of(cands[0])
        levels = [s for _, s in schedule(len(cands), len(cands), s_max, min_steps)]
        for c in cands:
            todo += [with_steps(c, s) for s in levels if s != s_max]
            full = with_steps(c, s_max)
            reps = [full] + [replace(full, repeat=r) for r in range(1, repeats)]
            truth_pts[(name, full.id)] = reps
            todo += reps
    order = {p.id: p for p in todo}
    print(f"# collecting {len(order)} runs into {out}", flush=True)
    rc = runner.run_points(list(order.values()), out)
    if rc == 130:
        sys.exit(130)
    return sweeps, truth_pts


def _key(p) -> str:
    values = p if isinstance(p, dict) else p.values
    return json.dumps({str(k): v for k, v in values.items() if k != "steps"}, sort_keys=True)


def read_state(out: Path) -> tuple[dict, dict]:
    """({point id: its latest status}, {point id: seconds of its finished runs}) from one read of
    the state log (runner.State.outcomes' rule: a start without an outcome reads as interrupted)."""
    done, secs = {}, {}
    for r in runner.State(out).records():
        done[r["id"]] = "interrupted" if r["event"] in ("started", "launched") else str(r.get("status"))
        if r["event"] == "finished":
            secs[r["id"]] = float(r.get("seconds") or 0)
    return done, secs


def ground_truth(sweeps, truth_pts, out: Path):
    done, secs = read_state(out)
    rec = {}
    for name, cands in sweeps.items():
        obj = DEFAULT[cands[0].binary]
        higher = OBJECTIVES[obj][2]
        med, grid_s = {}, 0.0
        for c in cands:
            full = with_steps(c, steps_of(c))
            reps = truth_pts[(name, full.id)]
            grid_s += secs.get(full.id, 0.0)
            xs = [samples(out / "points" / f"{p.id}.h5", obj) for p in reps if done.get(p.id) == "ok"]
            xs = [x for x in xs if len(x)]
            if xs:
                med[full.id] = float(np.median(np.concatenate(xs)))
        best = max(med.values()) if higher else min(med.values())
        by_values = {_key(c): with_steps(c, steps_of(c)).id for c in cands}
        rec[name] = {"median": med, "best": best, "higher": higher, "grid_s": grid_s, "objective": obj}
        rec[name]["by_values"] = by_values
    return rec


def run_method(space, out, method, seed, budget, min_steps):
    args = [str(REPO / "scripts" / "dtune"), "tune", str(space), "--out", str(out), "--seed", str(seed)]
    args += ["--no-report", "--min-steps", str(min_steps)]
    args += ["--method", method]  # halving: optuna (and tpe, optuna unpruned) were removed in 2026-12
    if budget is not None:
        args += ["--budget", budget]
    r = subprocess.run(args, capture_output=True, text=True)
    # 1: a sweep without a pick (its runs failed, or its share paid for no trial): a miss, judged
    # with the others
    if r.returncode not in (0, 1) or not (out / "tune.json").exists():
        print(r.stdout[-2000:], r.stderr[-2000:], file=sys.stderr)
        return None
    launched = sum("ok" in x and x.startswith("[") for x in r.stdout.splitlines())
    return json.loads((out / "tune.json").read_text())["sweeps"], launched


def live_truth(space: Path, out: Path, rounds: int):
    """The grid `rounds` times, interleaved; returns ({sweep: truth}, one round's seconds, its steps)."""
    from scipy.stats import t as student_t

    pts = [with_steps(p, steps_of(p)) for p in plan(str(space), runner.known_flags) if p.repeat == 0]
    check_data(pts)
    order = []
    for r in range(rounds):
        this = [replace(p, repeat=r) for p in pts]
        random.Random(f"round-{r}").shuffle(this)
        order += this
    print(f"# ground truth: {len(pts)} points x {rounds} rounds, interleaved, into {out}", flush=True)
    if runner.run_points(order, out) == 130:
        sys.exit(130)
    done, secs = read_state(out)
    by_sweep: dict = {}
    for p in pts:
        by_sweep.setdefault(p.sweep, []).append(p)
    truth, round_s = {}, []
    for r in range(rounds):
        round_s.append(sum(secs.get(replace(p, repeat=r).id, 0.0) for p in pts))
    for name, cands in by_sweep.items():
        obj = DEFAULT[cands[0].binary]
        higher = OBJECTIVES[obj][2]
        logf = np.full((rounds, len(cands)), np.nan)
        for r in range(rounds):
            for j, c in enumerate(cands):
                q = replace(c, repeat=r)
                if done.get(q.id) == "ok":
                    x = samples(out / "points" / f"{q.id}.h5", obj)
                    if len(x):
                        logf[r, j] = run_figure(np.log(x))[0] if np.all(x > 0) else np.nan  # as the tuner
        full = logf[np.all(np.isfinite(logf), axis=1)]  # rounds where every candidate ran
        rec = {"objective": obj, "higher": higher, "rounds": len(full), "cands": {}}
        if len(full) < 2:
            rec["best"] = None
            truth[name] = rec
            continue
        level = full.mean(axis=1, keepdims=True)
        y = full - level
        tq = float(student_t.ppf(0.975, len(full) - 1))
        for j, c in enumerate(cands):
            m, se = float(y[:, j].mean()), float(y[:, j].std(ddof=1) / math.sqrt(len(full)))
            rec["cands"][_key(c)] = {"y": m, "se": se, "lo": m - tq * se, "hi": m + tq * se}
        sign = 1.0 if higher else -1.0
        best = max(rec["cands"], key=lambda k: sign * rec["cands"][k]["y"])
        rec["best"], rec["level"] = best, float(level.mean())
        # each round is one plain grid (`dtune sweep run`, cost 1): the candidate it names
        rec["round_picks"] = [_key(cands[int(np.argmax(sign * row))]) for row in full]
        truth[name] = rec
    steps = sum(steps_of(p) for p in pts)
    return truth, float(round_s[0]), steps, round_s


def judge(rec: dict, values: dict | None, within: float) -> tuple[bool, bool, float]:
    """(in the best's 95% interval, within `within` of the best, ratio pick / best) of a pick."""
    if not values or rec.get("best") is None or _key(values) not in rec["cands"]:
        return False, False, float("nan")
    b, c = rec["cands"][rec["best"]], rec["cands"][_key(values)]
    ratio = math.exp(c["y"] - b["y"])
    if rec["higher"]:
        return c["y"] >= b["lo"], ratio >= 1 - within, ratio
    return c["y"] <= b["hi"], ratio <= 1 + within, ratio


def live(a, space: Path, out: Path) -> int:
    truth, grid_s, grid_steps, round_s = live_truth(space, out / "grid", a.rounds)
    print(
        f"# grid: one round {grid_s:.0f} s of run time, {grid_steps} steps "
        f"(rounds: {', '.join(f'{x:.0f}' for x in round_s)} s)"
    )
    for name, rec in truth.items():
        print(f"#   {name} ({rec['objective']}, {rec['rounds']} complete rounds):")
        if rec.get("best") is None:
            print("#     fewer than 2 complete rounds: no ground truth")
            continue
        vals = {k: json.loads(k) for k in rec["cands"]}
        varied = [n for n in next(iter(vals.values())) if len({json.dumps(v.get(n)) for v in vals.values()}) > 1]
        f = math.exp(rec["level"])
        for k, c in sorted(rec["cands"].items(), key=lambda kv: -kv[1]["y"] * (1 if rec["higher"] else -1)):
            label = " ".join(f"{n}={vals[k][n]}" for n in varied) or k
            mark = "  <- best" if k == rec["best"] else ""
            print(
                f"#     {label:<44} {f * math.exp(c['y']):10.4g} [{f * math.exp(c['lo']):.4g}, "
                f"{f * math.exp(c['hi']):.4g}]{mark}"
            )
    budget = f"{a.budget_frac * grid_s:.0f}s"
    methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    rows = []
    for name, rec in truth.items():  # the yardstick: one plain grid per round, judged as a tune is
        for r, k in enumerate(rec.get("round_picks", [])):
            inside, near, ratio = judge(rec, json.loads(k), a.within)
            rows.append(("grid", name, r, inside, near, ratio, False, 1.0, 1.0))
    for method in methods:
        for seed in range(1, a.seeds + 1):
            d = out / f"{method}-budget{a.budget_frac:g}-seed{seed}"  # each budget's tunes kept apart
            shutil.rmtree(d, ignore_errors=True)
            got = run_method(space, d, method, seed, budget, a.min_steps)
            if got is None:
                print(f"# {method} seed {seed}: the tune failed", flush=True)
                continue
            recs, _ = got
            spent_s = sum(r["spent_seconds"] for r in recs)
            spent_steps = sum(r.get("spent_steps", 0) for r in recs)
            for r in recs:
                w = r.get("winner") or {}
                inside, near, ratio = judge(truth[r["sweep"]], w.get("values"), a.within)
                sig = bool((r.get("margin") or {}).get("significant"))
                rows.append(
                    (method, r["sweep"], seed, inside, near, ratio, sig, spent_s / grid_s, spent_steps / grid_steps)
                )
            picks = ", ".join(f"{r['sweep']}: {(r.get('winner') or {}).get('label')}" for r in recs)
            print(f"# {method} seed {seed}: {spent_s:.0f} s, {spent_steps} steps; {picks}", flush=True)
    print(f"\n# budget {budget} ({a.budget_frac:.0%} of one round's run time)")
    print(f"{'method':<8} {'sweep':<16} {'in CI':>6} {'<=3%':>6} {'wrong sig':>9}  picks (ratio to best)")
    for method in ["grid", *methods]:
        mine = [x for x in rows if x[0] == method]
        for name in truth:
            xs = [x for x in mine if x[1] == name]
            if not xs:
                continue
            wrong = sum(x[6] and not x[3] for x in xs)
            picks = " ".join(f"{x[5]:.3f}" for x in xs)
            inside, near = f"{sum(x[3] for x in xs)}/{len(xs)}", f"{sum(x[4] for x in xs)}/{len(xs)}"
            print(f"{method:<8} {name:<16} {inside:>6} {near:>6} {wrong:>9}  {picks}")
        per_seed = {x[2]: (x[7], x[8]) for x in mine}
        if per_seed:
            cs = np.mean([v[0] for v in per_seed.values()])
            cst = np.mean([v[1] for v in per_seed.values()])
            hits = sum(x[3] for x in mine)
            cost = f"cost {cs:.2f} of one round's run time, {cst:.2f} of its steps"
            print(f"{method:<8} {'(all)':<16} {f'{hits}/{len(mine)}':>6} {cost}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("space")
    ap.add_argument("--out")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--budget-frac", type=float, default=0.3)
    ap.add_argument("--min-steps", type=int, default=4)
    ap.add_argument("--within", type=float, default=0.03)
    ap.add_argument("--live", action="store_true", help="interleaved ground truth and live tunes (issue 37)")
    ap.add_argument("--rounds", type=int, default=5, help="--live: rounds of the whole grid")
    ap.add_argument("--methods", default="halving", help="--live: methods, comma-separated")
    ap.add_argument(
        "--steps-scale",
        type=int,
        default=1,
        help="--live: every sweep's steps times this (where start-up dominates a run: step time made to dominate)",
    )
    a = ap.parse_args()
    space = Path(a.space)
    if a.steps_scale < 1:
        ap.error("--steps-scale must be at least 1")
    if a.live:
        out = Path(a.out or f"results/bench-tune/{space.stem}-live")
        if a.steps_scale > 1:
            space = scaled_space(space, a.steps_scale, out)
        return live(a, space, out)
    if a.steps_scale > 1:
        ap.error("--steps-scale is for --live")
    out = Path(a.out or f"results/bench-tune/{space.stem}")
    sweeps, truth_pts = collect(space, out, a.repeats, a.min_steps)
    truth = ground_truth(sweeps, truth_pts, out)
    grid_total = sum(t["grid_s"] for t in truth.values())
    print(f"# grid: {sum(len(c) for c in sweeps.values())} candidates, {grid_total:.0f} s of run time at full length")
    for name, t in truth.items():
        lo, hi = t["best"] * (1 - a.within), t["best"] * (1 + a.within)
        n3 = sum((m >= lo) if t["higher"] else (m <= hi) for m in t["median"].values())
        print(
            f"#   {name}: {len(t['median'])} measured, best {t['best']:.4g} ({t['objective']}), "
            f"{n3} within {a.within:.0%}"
        )
    budget_s = f"{a.budget_frac * grid_total:.0f}s"
    methods = [("halving", None), ("halving", budget_s)]
    rows = []
    for method, budget in methods:
        for seed in range(a.seeds):
            got = run_method(space, out, method, seed, budget, a.min_steps)
            if got is None:
                rows.append((method, budget, seed, None))
                continue
            recs, launched = got
            rows.append((method, budget, seed, recs))
            picks = [f"{r['sweep']}: {(r.get('winner') or {}).get('label')} ({r['spent_seconds']:.0f} s)" for r in recs]
            print(f"# {method} budget {budget or 'none'} seed {seed}: " + ", ".join(picks), flush=True)
            if launched:
                print(f"# note: {method} seed {seed} launched {launched} runs the collection lacked", flush=True)
    print(f"\n{'method':<10} {'budget':>7} {'sweep':<18} {'within 3%':>9} {'cost/grid':>10}  picks (ratio to best)")
    for method, budget in methods:
        these = [r for r in rows if r[0] == method and r[1] == budget]
        per_sweep: dict = {}
        total_cost = []
        for _, _, _seed, recs in these:
            if recs is None:
                continue
            total_cost.append(sum(r["spent_seconds"] for r in recs) / grid_total)
            for r in recs:
                t = truth[r["sweep"]]
                w = r.get("winner")
                full_id = t["by_values"].get(_key(w["values"])) if w else None
                ratio = t["median"].get(full_id, float("nan")) / t["best"] if w else float("nan")
                ok = (ratio >= 1 - a.within) if t["higher"] else (ratio <= 1 + a.within)
                per_sweep.setdefault(r["sweep"], []).append((ok, ratio, r["spent_seconds"] / t["grid_s"]))
        for name, xs in per_sweep.items():
            hits = sum(x[0] for x in xs)
            cost = np.mean([x[2] for x in xs])
            picks = " ".join(f"{x[1]:.3f}" for x in xs)
            print(f"{method:<10} {budget or 'none':>7} {name:<18} {hits}/{len(xs):>7} {cost:10.2f}  {picks}")
        if total_cost:
            print(f"{method:<10} {budget or 'none':>7} {'(all sweeps)':<18} {'':>9} {np.mean(total_cost):10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
