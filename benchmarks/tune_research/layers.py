"""Each layer of `dtune tune --method halving` switched off in turn, on the live-like models of the
synthetic spaces (nothing runs): what the layer buys beyond the seeds' own noise.

    benchmarks/tune_research/layers.py --space quickstart|48|mixed [--seeds 300] [--first-seed 1]
                                       [--startup 0.23] [--budget-frac 0.3] [--arms ARM ...] [--json F]

The models are tests/sweeps/test_carried.py's LaunchClockRuns (fake_train.py's --drift machine:
step noise sd U(0.05, 0.20) a run, slow periods of x1.3-1.8 lasting Exp(4 s) on the launch clock,
40 ms steps, a start-up of --startup s), as small_sweeps.py runs them: quickstart (four sweeps of
2-4 candidates on one launch clock, each sweep's share as `dtune tune` gives it), 48 (one sweep of
48; any --y of --x 3 --z 0 is the optimum) and mixed (synthetic_live.py's: --precision bf16 12 times
dearer a step beside fp32). The budget is --budget-frac of the grid's run time. A hit: the pick
within 3% of the optimum.

Each arm switches one layer off for the whole run (a module attribute replaced, put back after),
on the same seeds as `all`: the tune as it is. Prints per arm the hits with their 95% Wilson
interval, the tunes it won alone and lost alone against `all` (a pair of seeds' outcomes) and the
exact sign test's two-sided p over those, the wrong winners called significant, and the cost as a
fraction of the budget. Its first run (README.md, "Layers", at 4e5ccb7) had an arm `optuna`, the
`--method optuna` of then (TPE with Hyperband) on the same models; Optuna was removed after it.
"""

from __future__ import annotations

import argparse
import json
import math
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

SPACES = {
    "quickstart": {
        "q4": "{--x: [2, 3], --z: [0, 1]}",
        "q3": "{--x: [1, 3, 5]}",
        "q2": "{--z: [0, 1]}",
        "q3b": "{--x: [3, 4, 5]}",
    },
    "48": {"s48": "{--x: [0, 1, 2, 3, 4, 5], --z: [0, 1], --y: [a, b, c, d]}"},
    "mixed": {"m4": "{--x: [2, 3], --precision: [fp32, bf16]}", "m6": "{--x: [1, 2, 3], --precision: [fp32, bf16]}"},
}


def truth(values: dict) -> float:
    """A configuration's step time over the optimum's (fake_train.py's formula)."""
    x, z = float(values.get("--x", 3)), int(values.get("--z", 0))
    return (1 + 0.05 * (x - 3) ** 2) * (1 + 0.1 * (z == 1)) * (12 if values.get("--precision") == "bf16" else 1)


def median_figure(log_steps) -> tuple[float, float]:
    """A run's figure as until 2026-12-06: the median of its log steps, with its variance."""
    x = np.asarray(log_steps, float)
    x = x[np.isfinite(x)]
    if not len(x):
        return float("nan"), 0.0
    return float(np.median(x)), float((1.2533 * np.std(x, ddof=1)) ** 2 / len(x)) if len(x) >= 2 else 0.0


def _no_gaps(read):
    def wrapped(seq, within=None):
        ys, inc, gap = read(seq, within)
        return ys, inc, {k: {b: 0.0 for b in v} for k, v in gap.items()}

    return wrapped


def unpaired(seq, within=None) -> list:
    """levels.readings without pairing: each run read against the mean of the rung's incumbent runs,
    not those beside it (the incumbent runs are still made)."""
    inc = [v for k, _, v in seq if k is None and math.isfinite(v)]
    level = float(np.mean(inc)) if inc else math.nan
    return [(k, b, v - level, 0.0) for k, b, v in seq if math.isfinite(v) and inc]


def _cap_plain(sw, plan_, blocks, k, keep, rec):
    """interleaved._cap without its re-plans: as many of `keep` as the planned rest pays for."""
    if sw.share is None:
        return None, plan_[k + 1][0]

    def cost(n: int) -> float:
        total = 0.0
        for j, ((c, s), b) in enumerate(zip(plan_[k + 1 :], blocks[k + 1 :])):
            keys = keep[: n if j == 0 else min(n, c)]
            total += interleaved.rung_cost(sw, keys[0], keys[1:], s, b, True) if keys else 0.0
        return total

    n = len(keep)
    while n > 0 and cost(n) > sw.left() + 1e-9:
        n -= 1
    return n, plan_[k + 1][0]


def _variant(fn, old: str, new: str):
    """fn with one piece of its source replaced, compiled in its module's namespace (an arm that
    switches off part of a function)."""
    import inspect
    import textwrap

    src = textwrap.dedent(inspect.getsource(fn))
    assert old in src, old
    ns: dict = {}
    exec(src.replace(old, new), vars(inspect.getmodule(fn)), ns)
    return ns[fn.__name__]


def _arms() -> dict:
    """{arm: [(object, attribute, value while the arm runs)]}."""
    from dtune_sweep import axes, cost, earlier, levels

    step_s = cost.CostModel.step_s
    return {
        "all": [],
        "no partitioning": [(levels, "read", lambda seq, within: None)],
        "no gap weights": [(paired, "read", _no_gaps(paired.read))],
        "unpaired": [(paired, "readings", unpaired)],  # paired.read's own import of levels.readings
        "median figure": [(paired, "run_figure", median_figure)],
        "no race": [(interleaved, "MAX_TOP_BLOCKS", 0)],
        "no reopen": [(interleaved, "_reopen", lambda *a, **k: None)],
        "no repriced first rung": [
            (interleaved, "first_rung", lambda sw, rung, plan_, blocks, n0, rec: rung.run_blocks(blocks[0]))
        ],
        "no re-plan": [(interleaved, "_cap", _cap_plain)],
        "no first-rung cut": [
            (interleaved, "first_rung", _variant(interleaved.first_rung, "else least_rest", "else -math.inf"))
        ],
        "no first-rung block check": [
            (
                interleaved,
                "first_rung",
                _variant(interleaved.first_rung, "if rung_cost(sw, rung.inc", "if False and rung_cost(sw, rung.inc"),
            )
        ],
        "no same-steps top": [(interleaved, "_cap", _variant(interleaved._cap, "if n_same > max(n, 1):", "if False:"))],
        "no axes model": [(axes, "fit", lambda *a, **k: None)],
        "no earlier rungs": [(earlier, "combine", lambda prior, steps, ev, *a, **k: ev)],
        "one price": [(cost.CostModel, "step_s", lambda self, key=None: step_s(self, None))],
    }


class Switched:
    """The arm's replacements in place while the block runs."""

    def __init__(self, name: str):
        self.patches = _arms()[name]

    def __enter__(self):
        self.saved = [(o, a, getattr(o, a)) for o, a, _ in self.patches]
        for o, a, v in self.patches:
            setattr(o, a, v)

    def __exit__(self, *exc):
        for o, a, v in self.saved:
            setattr(o, a, v)


def points(directory: Path, space: str) -> dict:
    out = {}
    for name, axes in SPACES[space].items():
        f = directory / f"{name}.yaml"
        f.write_text(f"name: {name}\nbinary: dtune-train\nargs: [--steps, '64']\naxes: {axes}\n")
        out[name] = plan(str(f))
    return out


def grid_seconds(space: str, startup: float) -> float:
    """The whole file once at full length on one launch clock, drift seed 1 (synthetic_live.py's)."""
    with tempfile.TemporaryDirectory() as d:
        runs = LaunchClockRuns(Path(d), 1, startup)
        pts = [with_steps(p, 64) for ps in points(Path(d), space).values() for p in ps]
        runs.run(pts)
        return runs.seconds([p.id for p in pts])


def one(space: str, seed: int, budget: float, startup: float) -> tuple[dict, float]:
    """({sweep: (hit, a wrong winner called significant)}, the tune's cost over the budget)."""
    out, left = {}, budget
    with tempfile.TemporaryDirectory() as d:
        by_sweep = points(Path(d), space)
        runs = LaunchClockRuns(Path(d), seed, startup)
        n_left = sum(map(len, by_sweep.values()))
        for name, pts in by_sweep.items():
            share = ("seconds", left * len(pts) / n_left)
            rec = interleaved.tune_sweep(name, pts, runs, "samples_per_s", share, seed, 0.05, 4, lambda s: None)
            w = rec.get("winner")
            hit = bool(w) and truth(w["values"]) <= 1.03
            out[name] = (hit, not hit and bool((rec.get("margin") or {}).get("significant")))
            left -= rec["spent"]
            n_left -= len(pts)
    return out, (budget - left) / budget


def wilson(k: int, n: int) -> tuple[float, float]:
    z = 1.959963984540054
    p = k / n
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return c - h, c + h


def sign_p(a: int, b: int) -> float:
    """Two-sided exact sign test over a + b discordant pairs."""
    from scipy.stats import binomtest

    return float(binomtest(a, a + b, 0.5).pvalue) if a + b else 1.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--space", choices=SPACES, default="quickstart")
    ap.add_argument("--seeds", type=int, default=300)
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--startup", type=float, default=0.23)
    ap.add_argument("--budget-frac", type=float, default=0.3)
    ap.add_argument("--arms", nargs="+", choices=list(_arms()), default=list(_arms()))
    ap.add_argument("--json", type=Path, help="write every arm's per-seed outcomes here")
    a = ap.parse_args()
    budget = a.budget_frac * grid_seconds(a.space, a.startup)
    seeds = range(a.first_seed, a.first_seed + a.seeds)
    names = list(SPACES[a.space])
    print(
        f"# {a.space}: budget {budget:.1f} s ({a.budget_frac} of the grid); seeds {seeds[0]}-{seeds[-1]}; "
        f"start-up {a.startup} s"
    )
    per = " ".join(f"{n:>5}" for n in names)
    head = f"{'hits':>10} {'95% interval':>13} {'won':>4} {'lost':>4} {'sign p':>7} {'wrong':>5}  cost/budget"
    print(f"{'arm':<24} {per} {head}")
    base, doc = None, {}
    arms = ["all"] + [x for x in a.arms if x != "all"]
    for name in arms:
        with Switched(name):
            res = [one(a.space, s, budget, a.startup) for s in seeds]
        hits = [h[n][0] for h, _ in res for n in names]
        base = base or hits
        won = sum(h and not f for h, f in zip(hits, base))
        lost = sum(f and not h for h, f in zip(hits, base))
        lo, hi = wilson(sum(hits), len(hits))
        wrong = sum(h[n][1] for h, _ in res for n in names)
        cost = [c for _, c in res]
        each = " ".join(f"{sum(h[n][0] for h, _ in res):5}" for n in names)
        print(
            f"{name:<24} {each} {sum(hits):4}/{len(hits):<5} [{lo:.3f}, {hi:.3f}] {won:4} {lost:4} "
            f"{sign_p(won, lost):7.3f} {wrong:5}  {np.mean(cost):.2f} (max {max(cost):.2f})",
            flush=True,
        )
        doc[name] = {"hits": hits, "wrong": wrong, "cost": cost}
    if a.json:
        a.json.write_text(json.dumps({"space": a.space, "seeds": [seeds[0], seeds[-1]], "arms": doc}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
