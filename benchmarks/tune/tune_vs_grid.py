"""How well `dtune tune` finds a space's best point, and at what cost, against the whole grid.

    benchmarks/tune/tune_vs_grid.py SPACE.yaml [--out DIR] [--seeds 5] [--repeats 3] [--budget-frac 0.3]

1. Measures, through the sweep runner (resumable: rerun after an interruption), every candidate of
   every sweep of SPACE at each rung length halving would use, and the full length `--repeats`
   times: the full-length repeats are the ground truth (pooled samples per candidate), the rest lets
   every method replay its choices from real runs.
2. Runs each method with each seed over that directory (`dtune tune --out DIR`): halving with no
   budget, halving with `--budget-frac` of the grid's run time, Optuna (TPE + Hyperband) and
   Optuna's default (TPE without pruning) at halving's budget. A replayed run launches nothing: its
   cost is the run time its state record holds, the time a real tune would have spent on it.
3. Prints, per method and sweep: how often the pick is within 3% of the grid's best (by the ground
   truth's medians) and the cost as a fraction of the grid's run time (one run of each candidate at
   full length, what `dtune sweep run` spends).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "sweeps"), str(REPO / "report")]

from dtune_sweep import runner  # noqa: E402
from dtune_sweep.halving import schedule  # noqa: E402
from dtune_sweep.objective import DEFAULT, OBJECTIVES, samples  # noqa: E402
from dtune_sweep.spec import plan  # noqa: E402
from dtune_sweep.tune import steps_of, with_steps  # noqa: E402


def collect(space: Path, out: Path, repeats: int, min_steps: int):
    pts = [p for p in plan(str(space), runner.known_flags) if p.repeat == 0]
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


def ground_truth(sweeps, truth_pts, out: Path):
    done = runner.State(out).outcomes()
    rec = {}
    for name, cands in sweeps.items():
        obj = DEFAULT[cands[0].binary]
        higher = OBJECTIVES[obj][2]
        med, grid_s = {}, 0.0
        state = runner.State(out).records()
        secs = {r["id"]: float(r.get("seconds") or 0) for r in state if r["event"] == "finished"}
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
    if method == "halving":
        args += ["--method", "halving"]
    elif method == "optuna":
        args += ["--method", "optuna"]
    else:
        args += ["--method", "optuna", "--optuna-pruner", "none"]
    if budget is not None:
        args += ["--budget", budget]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout[-2000:], r.stderr[-2000:], file=sys.stderr)
        return None
    launched = sum("ok" in x and x.startswith("[") for x in r.stdout.splitlines())
    return json.loads((out / "tune.json").read_text())["sweeps"], launched


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("space")
    ap.add_argument("--out")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--budget-frac", type=float, default=0.3)
    ap.add_argument("--min-steps", type=int, default=4)
    ap.add_argument("--within", type=float, default=0.03)
    a = ap.parse_args()
    space = Path(a.space)
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
    methods = [("halving", None), ("halving", budget_s), ("optuna", budget_s), ("tpe", budget_s)]
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
