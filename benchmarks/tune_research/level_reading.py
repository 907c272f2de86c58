"""One rung of q4 (or q3b) on the drifting machine, read against the incumbent runs or from every run.

    benchmarks/tune_research/level_reading.py [--seeds 1000] [--blocks 2] [--steps 8] [--sweep q4|q3b]
                                     [--designs]

The rung: q4's four candidates (the optimum, 5%, 10% and 15.5% slower; q3b's three: the optimum,
5% and 20% slower) in a seeded order, the first the incumbent, `--blocks` blocks in
paired.block_order, each run of `--steps` steps on fake_train.py's --drift machine as
tests/sweeps/test_carried.py models it (step noise sd U(0.05, 0.20) a run, slow periods of
x1.3-1.8 lasting Exp(4 s) on the launch clock, a third of them slow, 40 ms steps).
Each run is read by paired.run_figure; each candidate's mean is level-weighted as a tune weighs it.
Prints how often the optimum has the best mean read against the incumbent runs alone
(levels.readings), from every run (levels.read), and with the level known exactly. --designs prints
that for every rung of 1-4 blocks of 4, 8 or 16 steps with its cost (runs x (start-up 0.23 s + the
steps and a warm-up step at 40 ms)) beside the sweep's share of a 30% budget in
benchmarks/tune_research/small_sweeps.py (its candidates over the file's 12 of the 15.1 s budget): the
best fixed design within the share, with the level known, is a yardstick for what a tune can reach
there (a race that drops the far candidates early can do somewhat better; the probe run and a
sweep's inherited share are left out).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "sweeps"), str(REPO / "tests" / "sweeps")]

from fake_train import slow_factor  # noqa: E402

from dtune_sweep import paired  # noqa: E402

SLEEP_S = 0.040
SWEEPS = {"q4": {0: 1.0, 1: 1.05, 2: 1.10, 3: 1.155}, "q3b": {0: 1.0, 1: 1.05, 2: 1.20}}  # time factors: 0 the optimum
TRUTH = SWEEPS["q4"]
STARTUP_S = 0.23
BUDGET_S = 15.06  # small_sweeps.py's: 0.3 of its grid, 50.2 s


def rung(seed: int, blocks: int, steps: int, truth: dict = TRUTH):
    """(incumbent, [(key or None, block, log figure, its variance, candidate, log slow-down)])."""
    keys = list(truth)
    np.random.default_rng([seed, 99]).shuffle(keys)
    inc = keys[0]
    seq = [(None, -1)]
    for b in range(blocks):
        seq += [(k, b) for k in paired.block_order(keys[1:], seed, 0, b)]
    clock, out = 0.0, []
    for i, (k, b) in enumerate(seq):
        c = inc if k is None else k
        rng = np.random.default_rng([seed, i, c])
        sigma = rng.uniform(0.05, 0.20)
        slow = slow_factor(seed, clock * 1000, 4000.0)
        t = SLEEP_S * truth[c] * slow * np.exp(rng.normal(0, sigma, steps + 1))
        clock += (steps + 1) * SLEEP_S
        lf, wv = paired.run_figure(np.log(steps / t[1:]))
        out.append((k, b, lf, wv, c, math.log(slow)))
    return inc, out


def means(inc, out, within):
    rows = [(k, b, lf) for k, b, lf, *_ in out]
    w = float(np.mean([x[3] for x in out]))
    ys, inc_y, gap = paired.read(rows, w if within else None)
    est = {inc: 0.0} | paired.level_means(ys, gap, inc_y, w)
    return {(inc if k is None else k): v for k, v in est.items()}


def exact(inc, out):
    by = {}
    for _k, _b, lf, _wv, c, slow in out:
        by.setdefault(c, []).append(lf + slow)
    m = {c: float(np.mean(v)) for c, v in by.items()}
    return {c: v - m[inc] for c, v in m.items()}


def hit_rates(seeds: int, blocks: int, steps: int, truth: dict) -> dict:
    hits = {"incumbent runs": 0, "every run": 0, "level known": 0}
    for seed in range(1, seeds + 1):
        inc, out = rung(seed, blocks, steps, truth)
        for name, est in (
            ("incumbent runs", means(inc, out, False)),
            ("every run", means(inc, out, True)),
            ("level known", exact(inc, out)),
        ):
            hits[name] += max(est, key=est.get) == 0
    return {k: v / seeds for k, v in hits.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=1000)
    ap.add_argument("--blocks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--sweep", choices=SWEEPS, default="q4")
    ap.add_argument("--designs", action="store_true")
    a = ap.parse_args()
    truth = SWEEPS[a.sweep]
    if not a.designs:
        hits = hit_rates(a.seeds, a.blocks, a.steps, truth)
        print(
            f"# {a.seeds} rungs of {a.blocks} block(s) x {a.steps} steps: the optimum picked "
            + ", ".join(f"{k} {v:.3f}" for k, v in hits.items())
        )
        return 0
    share = BUDGET_S * len(truth) / 12
    print(f"# {a.sweep}: share {share:.2f} s of a {BUDGET_S} s budget; {a.seeds} seeds a design")
    print(f"{'blocks':>6} {'steps':>5} {'cost s':>7}  {'incumbent runs':>14} {'every run':>9} {'level known':>11}")
    for steps in (4, 8, 16):
        for blocks in range(1, 5):
            runs = paired.rung_runs(len(truth), blocks)
            cost = runs * (STARTUP_S + (steps + 1) * SLEEP_S)
            h = hit_rates(a.seeds, blocks, steps, truth)
            mark = "" if cost <= share else "  (over the share)"
            print(
                f"{blocks:6} {steps:5} {cost:7.2f}  {h['incumbent runs']:14.3f} {h['every run']:9.3f} "
                f"{h['level known']:11.3f}{mark}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
