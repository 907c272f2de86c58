"""What the axes model (sweeps/dtune_sweep/axes.py) gains and costs in one rung, on seeded rungs.

    benchmarks/tune_research/axes_model_rungs.py [--seeds 200]

One rung of the 48-point synthetic space (--x 0-5, --z 0-1, --y a-d; --x 3 --z 0 the optimum,
every --y alike) on the drifting machine of tests/sweeps/test_halving.py (drifted_rung: slow periods
of x1.3-1.8 over stretches of runs, lognormal run noise), in three truths:

- additive: the space as it is (the model's assumption holds);
- interactions 8%: every candidate moved by its own seeded interaction of sd 8%;
- one odd best: --x 2 --z 1 --y a 20% faster than its axes predict, the true best by 8%.

Per truth, run noise and blocks: how often the best paired figure (the runs alone) and the model's
best are within 3% of the true best, and the model's median tau (what the axes leave unexplained).
The noise of one figure is the candidates' own repeats where there are two blocks or more, else
the incumbent's, as the tune weighs it. Nothing runs; about a minute.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "sweeps"), str(REPO / "tests" / "sweeps")]

from test_halving import additive_log, factorial_rung  # noqa: E402


def odd_best(v: dict) -> float:
    return additive_log(v) + (math.log(1.25) if (v["--x"], v["--z"], v["--y"]) == (2, 1, "a") else 0.0)


def rate(truth, sigma: float, blocks: int, seeds: int, tau: float = 0.0) -> tuple[float, float, float]:
    own = model = 0
    taus = []
    for seed in range(seeds):
        _, true, means, f = factorial_rung(seed, blocks, sigma, truth, tau)
        near = true >= true.max() - math.log(1.03)
        own += near[int(np.argmax(means))]
        model += near[int(np.argmax(f["mean"]))]
        taus.append(f["tau"])
    return own / seeds, model / seeds, float(np.median(taus))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=200)
    a = ap.parse_args()
    print(f"{'truth':<17} {'noise':>5} {'blocks':>6} {'runs alone':>10} {'model':>6} {'tau':>6}")
    truths = [("additive", additive_log, 0.0), ("interactions 8%", additive_log, 0.08), ("one odd best", odd_best, 0.0)]
    for name, truth, tau in truths:
        for sigma in (0.05, 0.10):
            for blocks in (1, 2, 3):
                own, model, t = rate(truth, sigma, blocks, a.seeds, tau)
                print(f"{name:<17} {sigma:>5.2f} {blocks:>6} {own:>10.3f} {model:>6.3f} {t:>6.3f}", flush=True)


if __name__ == "__main__":
    main()
