"""The most any tuner can find at a budget on synthetic_live.py's spaces: an oracle's hit rate.

    benchmarks/tune_research/oracle_bound.py [--space quickstart|48] [--budget-frac 0.3 0.5 1] [--draws 20000]

The oracle knows the answer's hardest part in advance: which candidate is the optimum's closest
rival. It spends a sweep's whole share of the budget (what `dtune tune` gives the sweep: the budget
times its candidates over the file's) on those two alone, one run each (the fewest start-ups), as
many steps as the share pays for, and no drift reaches it (no slow period, a perfect pairing). It
picks by the mean of the runs' log step times (the best estimate under fake_train.py's lognormal
noise), by their median (the figure `dtune tune` read until 2026-12-06) or by their 20% trimmed
mean (the one it reads now). Its hit rate (the pick is the optimum) bounds what any real tuner can
reach at that budget: a real one must also find the rival among the other candidates, pay for more
start-ups, and read through the drift.

The grid's cost and the start-up are measured: the whole grid once, as synthetic_live.py runs it
(fake_train.py, drift seed 1), start-up = a run's seconds less its recorded step times. The noise is
fake_train.py's: each run's step sigma ~ U(0.05, 0.20), lognormal steps.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1] / "report"), str(HERE.parents[1] / "sweeps")]

from synthetic_live import SPACES, STEPS, grid, true_ratio  # noqa: E402

SLEEP_MS, WARMUP = 40, 1  # synthetic_live.ARGS


def sweeps_of(space: str) -> dict:
    """{sweep: [candidate values]}: the planner's points (repeat 0) of a synthetic space's YAML, as
    synthetic_live writes it."""
    import tempfile

    from dtune_sweep.spec import plan

    out: dict = {}
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "space.yaml"
        f.write_text(SPACES[space].format(args="[]", steps=STEPS))
        for p in plan(str(f)):
            if p.repeat == 0:
                out.setdefault(p.sweep, []).append(p.values)
    return out


def startup_s(runs: Path) -> float:
    """The median over the grid's runs of a run's seconds less the step times it recorded."""
    from dtune_report.compare import train_step_samples

    recs = [json.loads(x) for x in (runs / "state.jsonl").read_text().splitlines() if x.strip()]
    fixed = []
    for r in recs:
        if r["event"] != "finished" or r.get("status") != "ok":
            continue
        s = train_step_samples([runs / "points" / f"{r['id']}.h5"])
        # measured steps are recorded; the warm-up step slept about as long as a measured one
        slept = float(s.total_ms.sum()) * (1 + WARMUP / len(s)) / 1000
        fixed.append(float(r["seconds"]) - slept)
    return float(np.median(fixed))


def hit_rate(steps: int, rival: float, draws: int, seed: int) -> tuple[float, float, float]:
    """(mean-of-logs, median-of-logs, trimmed-mean) probability that one run of the optimum and one
    of a rival `rival` times slower, `steps` steps each, order them right (trimmed: paired.run_figure,
    the figure `dtune tune` reads since 2026-12-06)."""
    from dtune_sweep.paired import run_figure

    rng = np.random.default_rng(seed)
    s = rng.uniform(0.05, 0.20, (draws, 2))
    x = rng.standard_normal((draws, 2, steps)) * s[:, :, None]
    x[:, 1, :] += np.log(rival)
    mean_ok = float(np.mean(x[:, 0].mean(axis=1) < x[:, 1].mean(axis=1)))
    med_ok = float(np.mean(np.median(x[:, 0], axis=1) < np.median(x[:, 1], axis=1)))
    trim = np.array([[run_figure(r)[0] for r in pair] for pair in x])
    trim_ok = float(np.mean(trim[:, 0] < trim[:, 1]))
    return mean_ok, med_ok, trim_ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--space", choices=list(SPACES), default="quickstart")
    ap.add_argument("--budget-frac", type=float, nargs="+", default=[0.3, 0.5, 1.0])
    ap.add_argument("--draws", type=int, default=20000)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    out = Path(a.out or f"results/bench-tune/oracle-{a.space}")
    grid_s, _ = grid(a.space, out)
    s0 = startup_s(out / "grid" / "runs")
    sweeps = sweeps_of(a.space)
    n_all = sum(map(len, sweeps.values()))
    print(f"# grid: {grid_s:.1f} s of run time over {n_all} candidates; start-up {s0:.2f} s a run (measured)")
    print(
        f"{'budget':>6} {'sweep':<6} {'share s':>7} {'rival':>6} {'steps':>5} {'mean':>6} {'median':>6} {'trimmed':>7}"
    )
    for frac in a.budget_frac:
        for name, cands in sweeps.items():
            ratios = sorted(true_ratio(c) for c in cands)
            share = frac * grid_s * len(cands) / n_all
            if len(ratios) < 2 or ratios[1] <= 1.03:
                print(f"{frac:6.0%} {name:<6} {share:7.2f} {'-':>6}: a rival within 3% is a hit too")
                continue
            rival = ratios[1]
            # two runs, each a start-up plus (steps + warm-up) steps at the pair's mean step time
            step_s = SLEEP_MS / 1000 * (1 + rival) / 2
            steps = int((share / 2 - s0) / step_s) - WARMUP
            if steps < 2:
                print(f"{frac:6.0%} {name:<6} {share:7.2f} {rival:6.3f} {steps:>5}: the share pays for no run")
                continue
            mean_ok, med_ok, trim_ok = hit_rate(steps, rival, a.draws, seed=int(frac * 1000) + len(name))
            print(
                f"{frac:6.0%} {name:<6} {share:7.2f} {rival:6.3f} {steps:>5} "
                f"{mean_ok:6.3f} {med_ok:6.3f} {trim_ok:7.3f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
