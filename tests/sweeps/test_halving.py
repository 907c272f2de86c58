"""The tuner's arithmetic without running anything: halving's schedules, noise-aware promotion on
seeded samples (exact ties, clear gaps, a budget cap), the budget parser, and the constraints:
block's grammar and checks."""

import re
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "sweeps"), str(REPO / "report")]
from dtune_report.compare import bootstrap_ratio_ci, mann_whitney_p  # noqa: E402
from dtune_sweep.constraints import holds, parse_constraint  # noqa: E402
from dtune_sweep.halving import Measured, clearly_below, cost, no_pick, promote, schedule, separation  # noqa: E402
from dtune_sweep.spec import SweepError, plan  # noqa: E402
from dtune_sweep.tune import TuneError, parse_budget  # noqa: E402


@pytest.mark.parametrize(
    "n,n0,s_max,expect",
    [
        (4, 4, 10, [(4, 5), (2, 10)]),  # the real small tune: 4 candidates, 2 rungs
        (3, 3, 10, [(3, 5), (2, 10)]),
        (2, 2, 10, [(2, 10)]),  # two candidates: compared at full length at once
        (12, 12, 16, [(12, 4), (5, 8), (2, 16)]),
        (12, 5, 16, [(5, 4), (3, 8), (2, 16)]),  # a smaller draw keeps every rung's steps
        (48, 48, 16, [(48, 4), (10, 8), (2, 16)]),
        (48, 48, 6, [(48, 6)]),  # too few steps to halve above --min-steps 4
        (4, 4, 8, [(4, 4), (2, 8)]),  # exactly twice --min-steps: the first rung measures --min-steps
        (4, 4, 64, [(4, 32), (2, 64)]),  # four candidates need two rungs however long the run
    ],
)
def test_schedule(n, n0, s_max, expect):
    assert schedule(n, n0, s_max, 4) == expect


def test_schedule_halves_down_to_one_step_and_its_cost_counts_every_run():
    plan = schedule(4, 4, 2, 1)
    assert plan == [(4, 1), (2, 2)]
    assert cost(plan, lambda steps: 10 * steps) == 4 * 10 + 2 * 20


def seeded(median, k, n=8, sigma=0.01):
    return median * np.exp(np.random.default_rng(k).normal(0, sigma, n))


def test_exact_ties_across_the_cut_all_go_up_and_clear_losers_are_dropped():
    same = seeded(100, 0)
    rung = [Measured(i, "ok", same.copy()) for i in range(4)] + [Measured(4 + i, "ok", seeded(90, i)) for i in range(4)]
    keep, why = promote(rung, 2, higher=True, alpha=0.05)
    assert sorted(keep) == [0, 1, 2, 3]
    assert all("clearly below" in why[k] for k in range(4, 8))
    # The budget pays for three: the best three by median (ties by order) go up.
    keep, why = promote(rung, 2, higher=True, alpha=0.05, cap=3)
    assert keep == [0, 1, 2] and "cut: the budget" in why[3]


def test_lower_is_better_and_failed_candidates_never_go_up():
    rung = [Measured(0, "ok", seeded(10, 1)), Measured(1, "ok", seeded(12, 2)), Measured(2, "failed")]
    rung.append(Measured(3, "oom"))
    keep, why = promote(rung, 1, higher=False, alpha=0.05)
    assert keep == [0] and "clearly below" in why[1]
    assert why[2] == "did not measure (failed)" and why[3] == "did not measure (oom)"


def test_a_close_noisy_candidate_is_not_dropped():
    # 1% apart with 5% noise and 4 samples each: the U test cannot separate them.
    rung = [Measured(0, "ok", seeded(101, 3, n=4, sigma=0.05)), Measured(1, "ok", seeded(100, 4, n=4, sigma=0.05))]
    keep, _ = promote(rung, 1, higher=True, alpha=0.05)
    assert sorted(keep) == [0, 1]


def test_three_fully_separated_samples_stay_tied():
    # n = 3 against 3, every sample below the threshold's: the interval of the ratio lies wholly
    # below 1, but the U test's p is 2 / C(6, 3) = 0.1, not < alpha: the U test decides, so the
    # candidate is not clearly below and goes up with the threshold.
    threshold, cand = np.array([100.0, 101.0, 102.0]), np.array([97.0, 98.0, 99.0])
    assert mann_whitney_p(threshold, cand) == pytest.approx(0.1) and bootstrap_ratio_ci(threshold, cand)[1] < 1
    keep, why = promote([Measured(0, "ok", threshold), Measured(1, "ok", cand)], 1, higher=True, alpha=0.05)
    assert keep == [0, 1] and why[1].startswith("tied with the threshold"), why


def test_candidates_rank_by_median_not_mean():
    # A: four fast samples and one stalled one (median 101, mean 83.2); B: steady at median 97 (mean
    # 97). A ranks first, so a budget that pays for one promotes A.
    a, b = Measured(0, "ok", np.array([100.0, 101, 102, 103, 10])), Measured(1, "ok", np.array([95.0, 96, 97, 98, 99]))
    keep, why = promote([b, a], 1, higher=True, alpha=0.05, cap=1)
    assert keep == [0] and "cut: the budget" in why[1], why


def test_budget_parser():
    assert parse_budget("60s") == ("seconds", 60) and parse_budget("10m") == ("seconds", 600)
    assert parse_budget("1h") == ("seconds", 3600) and parse_budget("40") == ("runs", 40)
    assert parse_budget(None) is None
    for bad in ("0", "2.5", "soon", "-3"):
        with pytest.raises(TuneError):
            parse_budget(bad)


def test_constraints_grammar():
    c = parse_constraint("--batch * --context <= 4096")
    assert holds(c, {"--batch": "8", "--context": "512"}) and not holds(c, {"--batch": "16", "--context": "512"})
    assert holds(parse_constraint("--precision != fp16"), {"--precision": "bf16"})
    for bad in ("--batch", "--batch <= <= 3", "batch size <= 4", 7):
        with pytest.raises(ValueError):
            parse_constraint(bad)


def test_constraints_prune_at_plan_time_and_name_unknown_terms(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(
        "binary: dtune-train\naxes: {--bucket-mb: [0.25, 1, 25], --batch: [2, 4]}\n"
        "constraints: ['--first-bucket-mb <= --bucket-mb', '--batch * ranks <= 2']\n"
    )
    pts = plan(str(f))
    assert sorted((p.values["--bucket-mb"], p.values["--batch"]) for p in pts) == [(1, 2), (25, 2)]
    f.write_text("binary: dtune-train\naxes: {--batch: [2, 4]}\nconstraints: ['--bogus < 3']\n")
    with pytest.raises(SweepError, match="names --bogus, which is neither an axis nor a fixed argument"):
        plan(str(f))
    f.write_text("binary: dtune-train\naxes: {--batch: [2, 4]}\nconstraints: ['--batch < 2']\n")
    with pytest.raises(SweepError, match="constraints: no points left"):
        plan(str(f))


def test_separation_is_the_ratio_of_medians_and_significance_is_strictly_p_below_alpha():
    two = Measured(0, "ok", np.array([1.9, 2.0, 2.1, 2.0, 2.05, 1.95]))
    three = Measured(1, "ok", np.array([2.9, 3.0, 3.1, 3.0, 3.05, 2.95]))
    s = separation(two, three, alpha=0.05)
    assert s["ratio"] == 1.5 and s["lo"] < 1.5 < s["hi"] and s["significant"]
    assert s["p"] == mann_whitney_p(two.samples, three.samples)
    assert not separation(two, three, alpha=s["p"])["significant"]  # p == alpha is not below it
    one = Measured(2, "ok", np.array([0.9, 1.0, 1.1, 1.0, 1.05, 0.95]))
    assert separation(one, three, alpha=0.05)["ratio"] == 3.0


def test_separation_from_a_zero_median_gives_no_ratio_and_is_never_significant():
    zero, some = Measured(0, "ok", np.zeros(6)), Measured(1, "ok", np.arange(1.0, 7.0))
    s = separation(zero, some, alpha=0.05)
    assert s["p"] == mann_whitney_p(zero.samples, some.samples) and s["p"] < 0.05
    assert set(s) == {"ratio", "lo", "hi", "p", "significant"} and s["significant"] is False
    assert all(np.isnan(s[k]) for k in ("ratio", "lo", "hi"))


@pytest.mark.parametrize("higher", [True, False])
def test_clearly_below_needs_the_whole_interval_on_the_worse_side(higher):
    """Timings quantised to 1 unit: a candidate 10% worse whose interval just touches 1 stays, as
    does one that is significantly better than the threshold."""
    threshold = Measured(0, "ok", np.full(12, 10.0))
    worse = 9.0 if higher else 11.0
    for tied, expect in ((1, True), (4, False)):  # interval [0.9, 0.9] vs [0.9, 1.0] (or 1.1's)
        cand = Measured(1, "ok", np.array([worse] * (12 - tied) + [10.0] * tied))
        below, s = clearly_below(cand, threshold, higher, alpha=0.05)
        assert s["significant"] and below is expect
    better = Measured(2, "ok", np.full(12, 11.0 if higher else 9.0))
    assert clearly_below(better, threshold, higher, alpha=0.05)[0] is False


def test_promotion_says_why_each_candidate_went_up():
    rung = [Measured(i, "ok", seeded(100 - i, i)) for i in range(3)] + [Measured(3, "ok", seeded(80, 3))]
    keep, why = promote(rung, 3, higher=True, alpha=0.05)
    assert keep == [0, 1, 2]
    assert [why[0], why[1], why[2]] == ["in the top", "in the top", "sets the threshold"]
    assert re.fullmatch(r"clearly below the threshold \(ratio 0\.\d{3} \[0\.\d{3}, 0\.\d{3}\], p=\S+\)", why[3])
    keep, why = promote(rung, 1, higher=True, alpha=0.05)
    assert keep == [0] and why[0] == "in the top"
    same = seeded(100, 0)
    tied = [Measured(i, "ok", same.copy()) for i in range(4)]
    keep, why = promote(tied, 2, higher=True, alpha=0.05, cap=3)
    assert why[3].startswith("tied with the threshold (ratio 1.000 ")
    assert why[3].endswith("); cut: the budget pays for no more")
    assert promote(tied, 2, higher=True, alpha=0.05, cap=0)[0] == []  # a budget that pays for none


def test_no_pick_only_when_every_candidate_of_a_higher_is_better_objective_measured_zero():
    zero, zeros = Measured(0, "ok", np.zeros(4)), Measured(1, "ok", np.zeros(4))
    positive = Measured(2, "ok", np.full(4, 3.0))
    msg = "every candidate measured 0 GB/s (busbw): the objective cannot tell them apart, so there is no pick"
    assert no_pick([zero], "busbw", "GB/s", higher=True, ranks=1) == (
        msg + "; busbw is 0 with 1 rank (no data crosses a link): tune a sweep of 2 or more ranks"
    )
    assert no_pick([zero, zeros], "busbw", "GB/s", higher=True, ranks=2) == msg
    per_s = no_pick([zero], "samples_per_s", "samples/s", higher=True, ranks=1)
    assert per_s == msg.replace("GB/s (busbw)", "samples/s (samples_per_s)")
    assert no_pick([], "busbw", "GB/s", higher=True, ranks=1) is None
    assert no_pick([positive, zero], "busbw", "GB/s", higher=True, ranks=1) is None
    assert no_pick([zero], "step_ms", "ms", higher=False, ranks=1) is None  # 0 ms is a pick
    assert no_pick([positive], "step_ms", "ms", higher=False, ranks=1) is None
