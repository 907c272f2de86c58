"""What carrying the earlier rungs' figures into promotion (sweeps/dtune_sweep/earlier.py) gains and
costs, on seeded tunes of a live-like model of the 48-point synthetic space.

    benchmarks/tune_research/carried_rungs.py [--seeds 300] [--startup 0.23] [--bias 0 0.05] [--delta 0.1]
                                     [--arms "not carried" "below the top" "into the top too"]

The model is tests/sweeps/test_carried.py's LaunchClockRuns: benchmarks/tune_research/synthetic_live.py
--space 48 without running anything (fake_train.py's --drift machine: step noise sd U(0.05, 0.20)
a run, slow periods of x1.3-1.8 lasting Exp(4 s) on the launch clock, 40 ms steps, a start-up of
--startup s; --x 3 --z 0 the optimum, --x 2 and 4 5% slower, every --y alike). The budget is 0.3 of
the grid's run time, as synthetic_live.py's. --bias B makes --x 4 faster by B x 8 / steps: 2B at
4 steps, B at 8, B / 2 at 16 (a short run's bias, a warm-up or a loader's queue; B = 0.05 makes the
neighbour look best at 4 steps).

Per bias, three arms on the same seeds (--arms picks): the figures not carried at all, carried
below the top (the tune as it is: the top rung's pick reads its own runs), carried into the top's
pick too (earlier.TOP); --delta sets earlier.DELTA_LOG, the sd allowed for a change of steps.
Prints the optimum's hits (any --y), where each arm lost it (the first rung it was missing from, or
the top), and the tunes each arm won alone and lost alone against the first arm. About 5 minutes.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "sweeps"), str(REPO / "report"), str(REPO / "tests" / "sweeps")]

from test_carried import grid_seconds, launch_clock_tune  # noqa: E402

from dtune_sweep import earlier  # noqa: E402

COMBINE = earlier.combine
ARMS = ("not carried", "below the top", "into the top too")


def arm(name: str) -> None:
    earlier.combine = (lambda prior, steps, ev, *a, **k: ev) if name == "not carried" else COMBINE
    earlier.TOP = name == "into the top too"


def one(seed: int, budget: float, startup: float, bias: float) -> tuple[bool, str]:
    with tempfile.TemporaryDirectory() as d:
        rec = launch_clock_tune(Path(d), seed, budget, startup, bias)
    w = rec["winner"]["values"]
    if w["--x"] == 3 and w["--z"] == 0:
        return True, ""
    for i, r in enumerate(rec["rungs"]):
        if not any(c["values"]["--x"] == 3 and c["values"]["--z"] == 0 for c in r["candidates"]):
            return False, f"missing from rung {i}"
    return False, "lost in the top rung"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=300)
    ap.add_argument("--startup", type=float, default=0.23)
    ap.add_argument("--bias", type=float, nargs="+", default=[0.0, 0.05])
    ap.add_argument("--delta", type=float, default=earlier.DELTA_LOG)
    ap.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    a = ap.parse_args()
    earlier.DELTA_LOG = a.delta
    with tempfile.TemporaryDirectory() as d:
        grid = grid_seconds(Path(d), a.startup)
    budget = 0.3 * grid
    print(
        f"# grid {grid:.1f} s of run time; budget {budget:.1f} s; seeds 1-{a.seeds}; start-up {a.startup} s; "
        f"delta {a.delta}"
    )
    print(f"{'bias':>5} {'arm':<18} {'hits':>8} {'alone':>6} {'first':>6}  where the optimum was lost")
    for bias in a.bias:
        first = None
        for name in a.arms:
            arm(name)
            res = [one(s, budget, a.startup, bias) for s in range(1, a.seeds + 1)]
            hits = [h for h, _ in res]
            lost = collections.Counter(w for h, w in res if not h)
            first = first or hits
            alone = sum(h and not f for h, f in zip(hits, first))
            first_alone = sum(f and not h for h, f in zip(hits, first))
            where = ", ".join(f"{w} {n}" for w, n in sorted(lost.items()))
            print(f"{bias:5.2f} {name:<18} {sum(hits):4}/{a.seeds:<3} {alone:6} {first_alone:6}  {where}", flush=True)
    arm("below the top")
    return 0


if __name__ == "__main__":
    sys.exit(main())
