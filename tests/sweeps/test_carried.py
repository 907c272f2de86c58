"""Halving's promotion with the earlier rungs' figures carried (sweeps/dtune_sweep/earlier.py): the
combination by precision, what tune.json and the report keep of it, and, on a live-like model of
the 48-point synthetic space (fake_train.py --drift run in-process), the optimum found more often."""

import math
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "sweeps"), str(REPO / "report"), str(Path(__file__).resolve().parent)]
from fake_train import slow_factor  # noqa: E402
from test_halving import PricedRuns, own_label  # noqa: E402

from dtune_sweep import earlier, interleaved, paired  # noqa: E402
from dtune_sweep.candidates import with_steps  # noqa: E402
from dtune_sweep.halving import Measured  # noqa: E402
from dtune_sweep.spec import plan  # noqa: E402

SLEEP_S = 0.040  # synthetic_live.py's --sleep-ms 40
SPACE48 = (
    "name: s48\nbinary: dtune-train\nargs: [--steps, '64']\n"
    "axes: {--x: [0, 1, 2, 3, 4, 5], --z: [0, 1], --y: [a, b, c, d]}\n"
)


class LaunchClockRuns(PricedRuns):
    """benchmarks/tune_research/synthetic_live.py's spaces without running anything: fake_train.py's
    --drift machine (each run's step noise sd drawn from U(0.05, 0.20), slow periods of x1.3-1.8
    that last Exp(4 s) on the launch clock, a third of them slow), 40 ms steps and a start-up of
    `startup` s (--x 3 and --z 0 where a sweep has no such axis; --precision bf16 12 times
    slower a step, synthetic_live.py's mixed space). `bias`: --x 4 runs faster by bias x 8 / steps
    (a short run's bias, gone at length)."""

    def __init__(self, directory: Path, drift: int, startup: float = 0.23, bias: float = 0.0):
        super().__init__(directory, noise=0.0, startup=startup)
        self.drift, self.bias, self.clock_s, self.step_times = drift, bias, 0.0, {}

    def run(self, points) -> int:
        for p in points:
            self.planned[p.id] = p
            if p.id in self.step_times:
                continue
            self.done.append(p.id)
            steps, x, z = p.values["steps"], float(p.values.get("--x", 3)), int(p.values.get("--z", 0))
            rng = np.random.default_rng([self.drift, len(self.done), int(x * 1000), z])
            sigma = rng.uniform(0.05, 0.20)
            slow = slow_factor(self.drift, self.clock_s * 1000, 4000.0)
            base = (1 + 0.05 * (x - 3) ** 2) * (1 + 0.1 * (z == 1))
            base *= 12 if p.values.get("--precision") == "bf16" else 1
            t = SLEEP_S * base * slow * np.exp(rng.normal(0, sigma, steps + 1))  # a warm-up step first
            if x == 4:
                t /= 1 + self.bias * 8 / steps
            self.clock_s += (steps + 1) * SLEEP_S
            self.step_times[p.id] = t
        return 0

    def seconds_by_id(self, ids) -> dict:
        return {i: self.startup + float(self.step_times[i].sum()) for i in ids}

    def step_seconds(self, p) -> float:
        return float(np.median(self.step_times[p.id][1:]))

    def measure(self, p, key, objective):
        return Measured(key, "ok", 8 / self.step_times[p.id][1:])


def grid_seconds(directory: Path, startup: float = 0.23) -> float:
    """The whole grid's run time, one run per point at full length, drift seed 1 (synthetic_live.py's)."""
    f = directory / "s48.yaml"
    f.write_text(SPACE48)
    runs = LaunchClockRuns(directory, 1, startup)
    pts = [with_steps(p, 64) for p in plan(str(f))]
    runs.run(pts)
    return runs.seconds([p.id for p in pts])


def launch_clock_tune(directory: Path, seed: int, budget_s: float, startup: float = 0.23, bias: float = 0.0) -> dict:
    f = directory / "s48.yaml"
    f.write_text(SPACE48)
    runs = LaunchClockRuns(directory, seed, startup, bias)
    share = ("seconds", budget_s)
    return interleaved.tune_sweep("s48", plan(str(f)), runs, "samples_per_s", share, seed, 0.05, 4, lambda s: None)


def test_a_rungs_figures_combine_with_the_carried_ones_by_precision_against_its_incumbent():
    # Carried from a rung of 8 steps: 0 at +0.1, 1 at +0.3, 2 at +0.02 (against that rung's incumbent).
    prior = {0: (0.1, 0.0004), 1: (0.3, 0.0009), 2: (0.02, 0.01)}
    ev = {
        "means": {0: 0.0, 1: 0.05, 2: 0.2, 3: 0.1},  # this rung's incumbent is 0; 3 was not carried
        "sds": {0: 0.05, 1: 0.2, 2: 0.2, 3: 0.2},
        "p_best": {0: 0.1, 1: 0.2, 2: 0.4, 3: 0.3},
    }
    out = earlier.combine(prior, 8, ev, 0, True, seed=1)
    d2 = earlier.DELTA_LOG**2
    for k, pm, pv in ((1, 0.3 - 0.1, 0.0009 + d2), (2, 0.02 - 0.1, 0.01 + d2)):
        prec = 1 / pv + 1 / 0.04
        assert math.isclose(out["means"][k], (pm / pv + ev["means"][k] / 0.04) / prec)
        assert math.isclose(out["sds"][k], math.sqrt(1 / prec))
    assert out["means"][0] == 0.0 and out["sds"][0] == 0.05  # the incumbent is the reference
    assert out["means"][3] == 0.1 and out["sds"][3] == 0.2  # not carried: its own figure
    assert out["paired"] == {"means": ev["means"], "sds": ev["sds"], "p_best": ev["p_best"]}
    assert out["earlier"] == {"from_steps": 8, "delta_log": earlier.DELTA_LOG, "candidates": 2}
    assert out["p_best"] == paired.p_best(out["means"], out["sds"], True, seed=1)
    # 1 measured below 2 here (0.05 against 0.2, one run each) but 0.3 above it before: it leads.
    assert out["means"][1] > out["means"][2] and out["p_best"][1] > out["p_best"][2]
    assert ev["means"][1] == 0.05  # ev itself unchanged
    # Nothing to read against (the incumbent not carried), or nothing carried: ev as it was.
    assert earlier.combine({1: (0.3, 0.0009)}, 8, ev, 0, True, seed=1) is ev
    assert earlier.combine({}, 0, ev, 0, True, seed=1) is ev
    carried = earlier.carried(out)  # the variance, sd^2, of each deciding figure
    assert carried[1] == (out["means"][1], out["sds"][1] ** 2) and set(carried) == set(ev["means"])
    assert carried[2] == (out["means"][2], pytest.approx(1 / (1 / (0.01 + d2) + 1 / 0.04)))
    # A figure of sd 0 (copies that measured the very same samples) is exact: nothing to combine.
    exact = earlier.combine(prior, 8, {**ev, "sds": {**ev["sds"], 1: 0.0}}, 0, True, seed=1)
    assert exact["means"][1] == 0.05 and exact["sds"][1] == 0.0 and exact["earlier"]["candidates"] == 1


def test_a_tune_records_the_combination_below_the_top_and_picks_the_top_by_its_own_runs(tmp_path):
    budget = 0.3 * grid_seconds(tmp_path)
    rec = launch_clock_tune(tmp_path, seed=3, budget_s=budget)
    rungs = rec["rungs"]
    assert len(rungs) == 3 and "earlier_rungs" not in rungs[0]
    below = rungs[1]
    others = len(below["candidates"]) - 1  # every one but the incumbent was carried from rung 0
    assert others >= 4
    carried = {"from_steps": rungs[0]["steps"], "delta_log": earlier.DELTA_LOG, "candidates": others}
    assert below["earlier_rungs"] == carried
    for c in below["candidates"]:  # the incumbent's too: 1, with its runs' interval
        assert c["combined_lo"] <= c["combined_ratio"] <= c["combined_hi"] and 0 <= c["p_best_paired"] <= 1
    kept = [c for c in below["candidates"] if c["promoted"]]
    assert min(c["p_best"] for c in kept) >= max(c["p_best"] for c in below["candidates"] if c not in kept) - 1e-12
    top = rungs[-1]
    assert "earlier_rungs" not in top and all("combined_ratio" not in c for c in top["candidates"])
    assert rec["winner"]["ratio"] == max(c["ratio"] for c in top["candidates"])  # its own runs decide
    assert "estimates" not in rec
    from dtune_report.tuning import sweep_blocks

    blocks = sweep_blocks({"budget": {"text": "64s"}}, rec)
    (table,) = [b[1] for b in blocks if b[0] == "table"]
    assert table["paired ratio to the incumbent"].str.contains("; with the earlier rungs x").sum() == others + 1


def test_on_a_live_like_machine_promotion_with_the_earlier_rungs_finds_the_optimum_more_often(monkeypatch):
    # 100 seeded tunes of the 48-point space on fake_train.py's drifting machine in-process, with a
    # budget of 0.3 of the grid (rungs of 48 x 4 or 8 steps, often 10-20 x 8 or 16 in one block,
    # then a top of 2-4 in 3-7 blocks). A rung of one block reads each candidate with one run's
    # noise; the rung before read it through the axes model. Seeded: the optimum (any --y) 90 / 100
    # with the earlier rungs carried into promotion against 83 / 100 without, discordant 8 to 1
    # (benchmarks/tune_research/carried_rungs.py: 271 / 300 against 254 / 300).
    def hits() -> list:
        out = []
        with tempfile.TemporaryDirectory() as d:
            budget = 0.3 * grid_seconds(Path(d))
        for seed in range(1, 101):
            with tempfile.TemporaryDirectory() as d:
                w = launch_clock_tune(Path(d), seed, budget)["winner"]["values"]
            out.append(w["--x"] == 3 and w["--z"] == 0)
        return out

    carried = hits()
    monkeypatch.setattr(earlier, "combine", lambda prior, steps, ev, *a, **k: ev)
    alone = hits()
    only_carried = sum(a and not b for a, b in zip(carried, alone))
    only_alone = sum(b and not a for a, b in zip(carried, alone))
    assert sum(carried) >= sum(alone) + 5 and only_carried >= 4 * max(only_alone, 1), (only_carried, only_alone)


def test_a_tune_that_stops_below_the_top_picks_by_the_combined_figures_and_says_so(tmp_path, monkeypatch):
    # The rung after the first promotes one candidate (as when the budget pays for no two): the
    # tune stops there, and its pick is that rung's best combined figure, named as such.
    real = interleaved.promote

    def promote_one(rung, ev, cap_of, alpha):
        keep, why = real(rung, ev, cap_of, alpha)
        return (keep[:1] if rung.k == 1 else keep), why

    monkeypatch.setattr(interleaved, "promote", promote_one)
    rec = launch_clock_tune(tmp_path, seed=3, budget_s=0.3 * grid_seconds(tmp_path))
    assert len(rec["rungs"]) == 2 and rec["stopped"].startswith("after rung 1")
    last = rec["rungs"][1]["candidates"]
    assert rec["winner"]["candidate_id"] == max(last, key=lambda c: c["combined_ratio"])["candidate_id"]
    est = rec["estimates"]
    assert est["by"] == "earlier rungs" and "combined with the earlier rungs' (from 8 steps" in est["why"]
    own = max(last, key=lambda c: c["ratio"])
    assert est["paired_best"] == (None if own["candidate_id"] == rec["winner"]["candidate_id"] else own_label(own))
    from dtune_report.tuning import sweep_blocks

    blocks = sweep_blocks({"budget": {"text": "64s"}}, rec)
    assert any("Picked by the earlier rungs: " in str(b[1]) for b in blocks if b[0] == "p")
