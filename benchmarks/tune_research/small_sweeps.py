"""What a run's figure does for small sweeps: seeded tunes of a live-like model of
benchmarks/tune_research/synthetic_live.py --space quickstart, in-process.

    benchmarks/tune_research/small_sweeps.py [--seeds 300] [--first-seed 1] [--startup 0.23] [--budget-frac 0.3]
                                    [--arms median trimmed] [--space quickstart|48]
                                    [--alone q4|q3|q2|q3b --scale 1.5]

The model is tests/sweeps/test_carried.py's LaunchClockRuns (fake_train.py's --drift machine: step
noise sd U(0.05, 0.20) a run, slow periods of x1.3-1.8 lasting Exp(4 s) on the launch clock, 40 ms
steps, a start-up of --startup s), one machine per seed for the whole file as synthetic_live.py's
tune meets it: the four sweeps one after another on one launch clock, drift seed = tune seed, each
sweep's share of the budget as `dtune tune` gives it (the budget left times its candidates over
those left, a sweep's unspent share passing on). The budget is --budget-frac of the grid's run time
(the whole file once, drift seed 1). The sweeps: q4 (--x 2 3 by --z 0 1: the optimum, a 5%, a 10%
and a 15.5% rival), q3 (--x 1 3 5: two 20% rivals), q2 (--z 0 1: 10%), q3b (--x 3 4 5: 5% and 20%).

The arms, on the same seeds: a run's figure the median of its log steps (as until 2026-12-06) or
their 20% trimmed mean (paired.run_figure, now). Prints per arm the optimum's hits per sweep, their
total, the tunes it won and lost alone against the first arm, where the misses were lost (the
optimum missing from the top rung, or lost in it), and the cost as a fraction of the budget. About
1 minute an arm per 300 seeds. --space 48 runs the 48-point space instead (test_carried.py's tune,
any --y of the optimum a hit). --alone tunes one sweep by itself (its own launch clock) with
--scale times its share of the budget, to show what more budget buys it.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "sweeps"), str(REPO / "report"), str(REPO / "tests" / "sweeps")]

from test_carried import LaunchClockRuns  # noqa: E402

from dtune_sweep import interleaved, paired  # noqa: E402
from dtune_sweep.candidates import with_steps  # noqa: E402
from dtune_sweep.spec import plan  # noqa: E402

SWEEPS = {
    "q4": "{--x: [2, 3], --z: [0, 1]}",
    "q3": "{--x: [1, 3, 5]}",
    "q2": "{--z: [0, 1]}",
    "q3b": "{--x: [3, 4, 5]}",
}
ARMS = ("median", "trimmed")
RUN_FIGURE = paired.run_figure


def median_figure(log_steps) -> tuple[float, float]:
    """A run's figure as it was until 2026-12-06: the median of its log steps, with its variance."""
    x = np.asarray(log_steps, float)
    x = x[np.isfinite(x)]
    if not len(x):
        return float("nan"), 0.0
    var = (1.2533 * np.std(x, ddof=1)) ** 2 / len(x) if len(x) >= 2 else 0.0
    return float(np.median(x)), float(var)


def discordant(hits: list, first: list) -> tuple[int, int]:
    """(won alone, lost alone) of an arm's hits against the first arm's, seed by seed."""
    return sum(h and not f for h, f in zip(hits, first)), sum(f and not h for h, f in zip(hits, first))


def arm(name: str) -> None:
    paired.run_figure = median_figure if name == "median" else RUN_FIGURE


def points(directory: Path) -> dict:
    out = {}
    for name, axes in SWEEPS.items():
        f = directory / f"{name}.yaml"
        f.write_text(f"name: {name}\nbinary: dtune-train\nargs: [--steps, '64']\naxes: {axes}\n")
        out[name] = plan(str(f))
    return out


def truth(values: dict) -> float:
    x, z = float(values.get("--x", 3)), int(values.get("--z", 0))
    return (1 + 0.05 * (x - 3) ** 2) * (1 + 0.1 * (z == 1))


def grid_seconds(startup: float) -> float:
    """The whole file once at full length on one launch clock, drift seed 1 (synthetic_live.py's)."""
    with tempfile.TemporaryDirectory() as d:
        runs = LaunchClockRuns(Path(d), 1, startup)
        pts = [with_steps(p, 64) for ps in points(Path(d)).values() for p in ps]
        runs.run(pts)
        return runs.seconds([p.id for p in pts])


def where(rec: dict) -> str:
    """'hit', 'lost in the top' or 'not in the top' (the optimum was not run in the last rung)."""
    w = rec.get("winner")
    if w and truth(w["values"]) <= 1.03:
        return "hit"
    top = rec["rungs"][-1]["candidates"] if rec["rungs"] else []
    return "lost in the top" if any(truth(c["values"]) <= 1.03 for c in top) else "not in the top"


def one(seed: int, budget: float, startup: float) -> tuple[dict, float]:
    """({sweep: where}, the tune's cost over the budget) of one seeded tune of the whole file."""
    hits, left = {}, budget
    with tempfile.TemporaryDirectory() as d:
        by_sweep = points(Path(d))
        runs = LaunchClockRuns(Path(d), seed, startup)
        n_left = sum(map(len, by_sweep.values()))
        for name, pts in by_sweep.items():
            share = ("seconds", left * len(pts) / n_left)
            rec = interleaved.tune_sweep(name, pts, runs, "samples_per_s", share, seed, 0.05, 4, lambda s: None)
            hits[name] = where(rec)
            left -= rec["spent"]
            n_left -= len(pts)
    return hits, (budget - left) / budget


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=300)
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--startup", type=float, default=0.23)
    ap.add_argument("--budget-frac", type=float, default=0.3)
    ap.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    ap.add_argument("--space", choices=("quickstart", "48"), default="quickstart")
    ap.add_argument("--alone", choices=SWEEPS)
    ap.add_argument("--scale", type=float, default=1.0)
    a = ap.parse_args()
    if a.space == "48":
        return space48(a)
    if a.alone:
        return one_sweep(a)
    grid = grid_seconds(a.startup)
    budget = a.budget_frac * grid
    seeds = range(a.first_seed, a.first_seed + a.seeds)
    print(
        f"# grid {grid:.1f} s of run time; budget {budget:.1f} s; seeds {seeds[0]}-{seeds[-1]}; start-up {a.startup} s"
    )
    print(f"{'arm':<8} {'q4':>4} {'q3':>4} {'q2':>4} {'q3b':>4} {'total':>9} {'alone':>6} {'first':>6}  cost/budget")
    first = None
    for name in a.arms:
        arm(name)
        res = [one(s, budget, a.startup) for s in seeds]
        hits = [h[n] == "hit" for h, _ in res for n in SWEEPS]
        first = first or hits
        alone, first_alone = discordant(hits, first)
        per = " ".join(f"{sum(h[n] == 'hit' for h, _ in res):4}" for n in SWEEPS)
        cost = [c for _, c in res]
        print(
            f"{name:<8} {per} {sum(hits):4}/{len(hits):<4} {alone:6} {first_alone:6}  "
            f"{np.mean(cost):.3f} (max {max(cost):.3f})",
            flush=True,
        )
        for n in SWEEPS:
            lost = collections.Counter(h[n] for h, _ in res if h[n] != "hit")
            print(f"#   {n:<4} missed: " + ", ".join(f"{k} {v}" for k, v in sorted(lost.items())))
    arm("trimmed")
    return 0


def one_sweep(a) -> int:
    """One sweep tuned by itself with --scale times its share, per arm: where its seeds ended."""
    budget = a.budget_frac * grid_seconds(a.startup)
    seeds = range(a.first_seed, a.first_seed + a.seeds)
    for name in a.arms:
        arm(name)
        ends = collections.Counter()
        for seed in seeds:
            with tempfile.TemporaryDirectory() as d:
                pts = points(Path(d))[a.alone]
                runs = LaunchClockRuns(Path(d), seed, a.startup)
                share = ("seconds", a.scale * budget * len(pts) / sum(map(len, points(Path(d)).values())))
                rec = interleaved.tune_sweep(a.alone, pts, runs, "samples_per_s", share, seed, 0.05, 4, lambda s: None)
                ends[where(rec)] += 1
        got = ", ".join(f"{k} {v}" for k, v in sorted(ends.items()))
        print(f"{name:<8} {a.alone} alone at {a.scale:g} x its share: {got}", flush=True)
    arm("trimmed")
    return 0


def space48(a) -> int:
    from test_carried import grid_seconds as grid48
    from test_carried import launch_clock_tune

    with tempfile.TemporaryDirectory() as d:
        budget = a.budget_frac * grid48(Path(d), a.startup)
    seeds = range(a.first_seed, a.first_seed + a.seeds)
    print(f"# the 48-point space; budget {budget:.1f} s; seeds {seeds[0]}-{seeds[-1]}; start-up {a.startup} s")
    first = None
    for name in a.arms:
        arm(name)
        hits, cost = [], []
        for s in seeds:
            with tempfile.TemporaryDirectory() as d:
                rec = launch_clock_tune(Path(d), s, budget, a.startup)
            w = rec["winner"]["values"]
            hits.append(w["--x"] == 3 and w["--z"] == 0)
            cost.append(rec["spent_seconds"] / budget)
        first = first or hits
        alone, first_alone = discordant(hits, first)
        print(
            f"{name:<8} {sum(hits)}/{len(hits)} won alone {alone}, lost alone {first_alone}; cost/budget "
            f"{np.mean(cost):.3f} (max {max(cost):.3f})",
            flush=True,
        )
    arm("trimmed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
