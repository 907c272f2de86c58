"""The tuner's arithmetic without running anything: halving's schedules, the budget parser, the
constraints: block's grammar and checks, and paired measurement under seeded noise (the
interleaving order, the paired figure against a drift, the noise floor, the verdict, P(best))."""

import math
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "sweeps"), str(REPO / "report")]
from dtune_sweep.constraints import holds, parse_constraint  # noqa: E402
from dtune_sweep.halving import Measured, no_pick, schedule  # noqa: E402
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


def test_schedule_halves_down_to_one_step():
    assert schedule(4, 4, 2, 1) == [(4, 1), (2, 2)]


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


# Paired, interleaved measurement (paired.py): the order of a rung's runs, the paired statistic
# under a seeded drift, and the noise floor measured from the incumbent's seeded repeats.
from dtune_sweep import levels, paired  # noqa: E402


def test_interleaving_runs_every_candidate_once_per_block_between_incumbent_runs_in_a_seeded_order():
    others = list(range(1, 10))
    blocks = [paired.block_order(others, seed=7, rung=0, block=b) for b in range(4)]
    for order in blocks:
        assert sorted(k for k in order if k is not None) == others
        assert order[-1] is None  # the block ends with an incumbent run
        gaps = [len(g) for g in "".join("I" if k is None else "c" for k in order).split("I")[:-1]]
        assert max(gaps) <= paired.REF_EVERY and sum(gaps) == len(others)
    assert len({tuple(o) for o in blocks}) == 4  # shuffled per block
    assert blocks[0] == paired.block_order(others, seed=7, rung=0, block=0)  # reproducible
    assert blocks[0] != paired.block_order(others, seed=8, rung=0, block=0)
    assert paired.rung_runs(10, 4) == 1 + 4 * len(blocks[0]) and paired.runs_per_block(2) == 2
    # a block of the incumbent alone (a sweep of one candidate) is its one run
    assert [paired.runs_per_block(n) for n in (1, 5, 6, 9)] == [1, 5, 7, 10]


def normalise(seq: list, within: float | None = None) -> tuple[dict, list]:
    """paired.read's first two: ({key: {block: y}}, [y of each incumbent run against its neighbours])."""
    return paired.read(seq, within)[:2]


def drifted_rung(true_log: dict, blocks: int, seed: int, sigma: float = 0.0):
    """A rung run on a machine that drifts: slow periods (x1.3 to x1.8) cover stretches of runs,
    incumbent runs included; each run adds lognormal noise of `sigma` (seeded)."""
    rng = np.random.default_rng(seed)
    seq = [(None, -1, true_log[0] + rng.normal(0, sigma))]
    others = [k for k in true_log if k != 0]
    slow, left = 0.0, 0
    for b in range(blocks):
        for k in paired.block_order(others, seed, 0, b):
            if left == 0:
                left, slow = int(rng.integers(3, 9)), (np.log(rng.uniform(1.3, 1.8)) if rng.random() < 1 / 3 else 0.0)
            left -= 1
            seq.append((k, b, true_log[0 if k is None else k] + slow + rng.normal(0, sigma)))
    return seq


def test_the_paired_figure_cancels_a_drift_that_pooling_runs_mistakes_for_a_difference():
    # Without run noise, a slow period that covers a candidate and its neighbouring incumbent runs
    # cancels exactly; pooled runs (each candidate's mean log figure) carry the drift.
    true_log = {0: 0.0, 1: np.log(1.10), 2: np.log(0.95), 3: 0.0, 4: np.log(1.02)}
    seq = drifted_rung(true_log, blocks=6, seed=3)
    ys, inc = normalise(seq)
    exact = [np.isclose(y, true_log[k]) for k in ys for y in ys[k].values()]
    assert np.mean(exact) >= 0.5  # runs at a slow period's edge are the rest (seeded: 0.54)
    med = {k: np.median(list(v.values())) for k, v in ys.items()}
    assert max(med, key=med.get) == 1 and all(np.isclose(med[k], true_log[k]) for k in med)
    pooled = {k: np.mean([v for kk, _, v in seq if kk == k]) for k in ys}
    assert max(abs(pooled[k] - true_log[k]) for k in ys) > 0.05  # the drift, read as a difference


def test_the_noise_floor_is_the_incumbents_measured_spread_and_never_below_a_runs_steps():
    # Seeded run noise of sd 0.08 (no drift): the incumbent's repeats, each read against its two
    # neighbours, spread by 0.08 sqrt(1.5).
    seq = drifted_rung({k: 0.0 for k in range(9)}, blocks=40, seed=11)
    quiet = [(k, b, np.random.default_rng([5, i]).normal(0, 0.08)) for i, (k, b, _) in enumerate(seq)]
    inc = normalise(quiet)[1]
    assert len(inc) == 81
    sig = paired.sigma_y(inc, within_var=0.0)
    assert 0.08 * np.sqrt(1.5) * 0.85 < sig < 0.08 * np.sqrt(1.5) * 1.15, sig
    assert paired.sigma_y([], within_var=0.01**2) == pytest.approx(0.01 * np.sqrt(1.5))
    assert paired.sigma_y([0.0, 0.0], within_var=0.02**2) == pytest.approx(0.02 * np.sqrt(1.5))


def test_a_runs_figure_is_its_trimmed_mean_with_a_calibrated_variance_and_a_stray_step_left_out():
    # 20% trimmed at each end: 1 of 8 steps, 3 of 16; none of 4 (the mean).
    x = np.log([10.0, 11, 9, 10, 12, 10, 30, 8])  # one stray step, 3x slower
    f, var = paired.run_figure(x)
    assert f == pytest.approx(np.mean(np.sort(x)[1:7]))
    assert abs(f - np.log(10.0)) < 0.05 < abs(np.mean(x) - np.log(10.0))  # the mean moves by 0.13
    w = np.clip(x, np.sort(x)[1], np.sort(x)[6])
    assert var == pytest.approx(np.var(w, ddof=1) / ((1 - 2 / 8) ** 2 * 8))
    assert paired.run_figure(np.log([2.0, 3, 4, 5]))[0] == pytest.approx(np.mean(np.log([2.0, 3, 4, 5])))
    assert paired.run_figure([np.log(2.0)]) == (pytest.approx(np.log(2.0)), 0.0)
    two = np.log([2.0, 3.0])  # from two steps on, the steps' spread: var(ddof 1) / n
    assert paired.run_figure(two) == (pytest.approx(two.mean()), pytest.approx(np.var(two, ddof=1) / 2))
    f, var = paired.run_figure([np.nan, np.inf])
    assert math.isnan(f) and var == 0.0
    # Seeded normal log steps (fake_train.py's noise): the variance it states is the spread of its
    # figures over repeats, and that spread is below the median's (the figure the tune read until
    # 2026-12-06): a comparison of two runs resolves a smaller difference.
    rng = np.random.default_rng(7)
    for n in (8, 16, 64):
        runs = rng.normal(0, 0.1, (4000, n))
        figs = np.array([paired.run_figure(r) for r in runs])
        spread = figs[:, 0].var()
        assert 0.85 < figs[:, 1].mean() / spread < 1.15, (n, figs[:, 1].mean(), spread)
        assert spread < np.median(runs, axis=1).var() * 0.85, n


def test_a_rungs_rows_are_its_runs_figures_in_order_with_the_mean_variance_of_those_that_measured():
    # Both methods read a rung through these rows: a run that failed, or measured a figure of 0 (busbw
    # with 1 rank), is a nan row that readings skips and that adds nothing to `within`.
    a, b = np.array([10.0, 12, 11, 9]), np.array([0.5, 0.25])  # any figure above 0 is read
    runs = [
        (None, -1, Measured(0, "ok", a)),
        (1, 0, Measured(1, "failed")),
        (2, 0, Measured(2, "ok", np.array([5.0, 0.0]))),
        (None, 0, Measured(0, "ok", b)),
    ]
    rows, within = paired.figure_rows(iter(runs))
    fa, fb = paired.run_figure(np.log(a)), paired.run_figure(np.log(b))
    assert [(k, blk) for k, blk, _ in rows] == [(None, -1), (1, 0), (2, 0), (None, 0)]
    assert rows[0][2] == pytest.approx(fa[0]) and rows[3][2] == pytest.approx(fb[0])
    assert math.isnan(rows[1][2]) and math.isnan(rows[2][2])
    assert within == pytest.approx((fa[1] + fb[1]) / 2)
    assert paired.figure_rows([(None, -1, Measured(0, "oom"))])[1] == 0.0


def test_the_paired_verdict_calls_no_difference_below_the_floor_and_none_before_six_blocks():
    # The pick 10% better in every block, with no noise: significant from 6 blocks on, not at 5
    # (the signed-rank test cannot reach p < 0.05 below 6 pairs), and the blocks needed are said.
    pick = {b: np.log(1.10) for b in range(6)}
    other = {b: 0.0 for b in range(6)}
    v = paired.verdict(pick, other, sig=0.01, sides=2, alpha=0.05, higher=True)
    assert v["significant"] and v["ratio"] == pytest.approx(1.10) and v["lo"] > 1 and v["blocks"] == 6
    five = paired.verdict({b: pick[b] for b in range(5)}, other, sig=0.01, sides=2, alpha=0.05, higher=True)
    assert not five["significant"] and five["lo"] > 1 and five["blocks_to_separate"] == 6
    # A 2% difference under a measured floor of 0.08 per figure: a tie, and how many blocks would
    # resolve it: n (1.96 se / 0.02)^2, se = 0.08 sqrt(2 / n).
    small = paired.verdict({b: 0.02 for b in range(6)}, other, sig=0.08, sides=2, alpha=0.05, higher=True)
    assert small["lo"] < 1 < small["hi"] and not small["significant"]
    assert small["blocks_to_separate"] == int(np.ceil(2 * (1.96 * 0.08 / 0.02) ** 2))
    # Lower is better: the pick's smaller figure is the better one.
    assert paired.verdict(other, pick, sig=0.01, sides=2, alpha=0.05, higher=False)["significant"]
    assert not paired.verdict(pick, other, sig=0.01, sides=2, alpha=0.05, higher=False)["significant"]
    # The blocks' own spread, when above the floor, sets the interval: var(d, ddof 1) / n, from 2
    # blocks on; one block has only the floor, sides sig^2.
    for d in ([0.1, -0.05, 0.2, 0.0, 0.15, 0.05], [0.1, 0.3]):
        v = paired.verdict(dict(enumerate(d)), {b: 0.0 for b in range(6)}, sig=0.001, sides=2, alpha=0.05, higher=True)
        se = np.sqrt(np.var(d, ddof=1) / len(d))
        assert (v["lo"], v["hi"]) == (
            pytest.approx(np.exp(np.mean(d) - paired.Z95 * se)),
            pytest.approx(np.exp(np.mean(d) + paired.Z95 * se)),
        )
        assert v["floor"] == pytest.approx(np.exp(paired.Z95 * se) - 1)
    one = paired.verdict({0: 0.1}, {0: 0.0}, sig=0.05, sides=2, alpha=0.05, higher=True)
    assert one["lo"] == pytest.approx(np.exp(0.1 - paired.Z95 * 0.05 * np.sqrt(2))) and one["blocks"] == 1
    # Identical figures in every block: ratio 1, p 1, a tie; no block in common: nothing to say.
    same = paired.verdict(other, other, sig=0.01, sides=2, alpha=0.05, higher=True)
    assert same["ratio"] == 1.0 and same["p"] == 1.0 and not same["significant"] and same["blocks_to_separate"] is None
    alone = paired.verdict({0: 0.1}, {0: 0.1}, sig=0.01, sides=2, alpha=0.05, higher=True)
    assert alone["p"] == 1.0 and alone["blocks"] == 1  # one block, no difference: no signed-rank test
    none = paired.verdict({0: 0.1}, {1: 0.0}, sig=0.01, sides=2, alpha=0.05, higher=True)
    assert none == {"ratio": None, "lo": None, "hi": None, "p": None, "blocks": 0, "significant": False}


def test_seeded_noise_never_makes_a_wrong_pick_significant():
    # 200 seeded rungs on a drifting machine, five candidates 0-10% apart and run noise of 10%: the
    # pick (best mean paired figure, plain or level-weighted) is significantly better than the true
    # best in none of them.
    true_log = {0: 0.0, 1: np.log(1.10), 2: np.log(1.05), 3: np.log(1.08), 4: np.log(1.0)}
    wrong_significant = 0
    for seed in range(200):
        seq = drifted_rung(true_log, blocks=6, seed=seed, sigma=0.10)
        ys, inc, gap = paired.read(seq)
        ys[0] = {b: 0.0 for b in range(6)}
        sig = paired.sigma_y(inc, 0.0)
        means = {k: np.mean(list(v.values())) for k, v in ys.items()}
        sd = paired.robust_sd(ys, inc)
        weighted = {k: paired.level_weighted_mean(v, gap.get(k, {}), sd) for k, v in ys.items()}
        for est in (means, weighted):  # the pick by the plain mean, and as the tune picks
            w = max(est, key=est.get)
            if w != 1:
                v = paired.verdict(ys[w], ys[1], sig, 1 if 0 in (w, 1) else 2, alpha=0.05, higher=True)
                wrong_significant += v["significant"] and true_log[w] < true_log[1] - 0.03
    assert wrong_significant == 0


def test_a_runs_level_is_known_to_within_half_the_gap_between_its_incumbent_neighbours():
    # I c1 I c2 c3 I: c1 between incumbent runs at 0.0 and 0.4 (a slow period's edge between them)
    # is read against 0.2, give or take 0.2; c2 and c3 between two that agree, exactly.
    seq = [(None, 0, 0.0), (1, 0, 0.3), (None, 0, 0.4), (2, 0, 0.5), (3, 0, 0.45), (None, 0, 0.4)]
    got = paired.readings(seq)
    assert [(k, round(y, 9), round(g, 9)) for k, _, y, g in got] == [
        (None, -0.4, 0.0),
        (1, 0.1, 0.2),
        (None, 0.2, 0.2),
        (2, 0.1, 0.0),
        (3, 0.05, 0.0),
        (None, 0.0, 0.0),
    ]
    assert normalise(seq) == (
        {1: {0: pytest.approx(0.1)}, 2: {0: pytest.approx(0.1)}, 3: {0: pytest.approx(0.05)}},
        pytest.approx([-0.4, 0.2, 0.0]),
    )
    assert paired.read(seq)[2] == {1: {0: pytest.approx(0.2)}, 2: {0: 0.0}, 3: {0: 0.0}}
    # A run that did not measure (nan) is left out; the runs after it are still read.
    failed = seq[:3] + [(2, 0, float("nan"))] + seq[4:]
    assert [k for k, *_ in paired.readings(failed)] == [None, 1, None, 3, None]
    # A block read across an edge counts for less: weights 1 / (sd^2 + gap^2).
    m = paired.level_weighted_mean({0: 0.3, 1: 0.0}, {0: 0.2, 1: 0.0}, sd=0.1)
    assert m == pytest.approx(0.3 * (1 / 0.05) / (1 / 0.05 + 1 / 0.01))
    assert paired.level_weighted_mean({0: 0.3, 1: 0.0}, {}, sd=0.1) == pytest.approx(0.15)
    assert paired.level_weighted_mean({0: 0.3, 1: 0.0}, {0: 0.0, 1: 0.2}, sd=0.0) == pytest.approx(0.3)
    # The weights are inverse variances: 1 / their sum is the variance of the weighted mean, the
    # rung's sd of a candidate (0.05 and 0.01 here: 1 / (20 + 100)).
    w = paired.level_weights({0: 0.3, 1: 0.0}, {0: 0.2}, 0.01)
    assert w == pytest.approx([1 / 0.05, 1 / 0.01]) and 1 / w.sum() == pytest.approx(1 / 120)


def test_a_rungs_level_weighted_means_use_the_robust_noise_at_least_what_the_steps_resolve():
    # c1's block 0 was read across an edge (gap 0.2), block 1 between two that agree.
    ys, gap = {1: {0: 0.3, 1: 0.0}, 2: {0: 0.05}}, {1: {0: 0.2, 1: 0.0}}  # c2's gaps: none, each 0
    # The robust noise decides: deviations 0.01, 0.01, 0 and c1's two of 0.15 x sqrt(2); median 0.01.
    got = paired.level_means(ys, gap, [0.01, -0.01, 0.0], 1e-6)
    sd = 1.4826 * 0.01
    assert got == {1: pytest.approx(0.3 / (sd**2 + 0.04) / (1 / (sd**2 + 0.04) + 1 / sd**2)), 2: pytest.approx(0.05)}
    # A robust noise below what the steps resolve (the incumbent's ys all 0: median deviation 0),
    # or none at all (fewer than 3 deviations), gives way to sqrt(1.5 x within).
    floor = np.sqrt(1.5 * 0.01)
    expect = 0.3 / (floor**2 + 0.04) / (1 / (floor**2 + 0.04) + 1 / floor**2)
    assert paired.level_means(ys, gap, [0.0, 0.0, 0.0], 0.01)[1] == pytest.approx(expect)
    assert paired.level_means(ys, gap, [], 0.01)[1] == pytest.approx(expect)
    assert paired.level_means({1: {0: 0.3}}, {1: {0: 0.2}}, [0.1], 0.0) == {1: pytest.approx(0.3)}


def test_partition_splits_the_residuals_where_the_level_moves_and_only_there():
    # A slow period's edge (0.3 on the log scale) against noise of sd 0.01: two stretches, exactly.
    rng = np.random.default_rng(1)
    r = np.concatenate([rng.normal(0, 0.01, 5), rng.normal(0.3, 0.01, 4), rng.normal(0, 0.01, 3)])
    assert levels.partition(r, 0.01**2, 2 * np.log(len(r))) == [(0, 5), (5, 9), (9, 12)]
    # A shift of one noise sd is not worth a stretch; a constant is one stretch.
    assert levels.partition(np.r_[np.zeros(6), np.full(6, 0.01)], 0.01**2, 2 * np.log(12)) == [(0, 12)]
    assert levels.partition(np.zeros(4), 0.0, 1.0) == [(0, 4)]
    assert levels.partition([0.5, 0, 0, 0, 0], 0.01**2, 2 * np.log(5)) == [(0, 1), (1, 5)]  # a first run alone
    # The exact optimum: one more stretch is taken when it saves more than its penalty.
    step = np.r_[np.zeros(3), np.full(3, 0.1)]
    saved = 6 * 0.05**2 / 0.01**2  # the sum of squares about one mean, over var
    assert levels.partition(step, 0.01**2, saved - 1e-6) == [(0, 3), (3, 6)]
    assert levels.partition(step, 0.01**2, saved + 1e-6) == [(0, 6)]
    # The noise of a residual: at least 1.5 x what the steps resolve; more where the successive
    # differences say so (an edge among them is one outlier).
    assert levels.noise_var([0.0, 0.0, 0.0, 0.0], 0.001) == pytest.approx(0.0015)
    noisy = [0.0, 0.1, 0.0, 0.1, 0.6, 0.7]
    assert levels.noise_var(noisy, 0.0) == pytest.approx((1.4826 * 0.1) ** 2 / 2)
    # From 3 differences on; fewer say nothing.
    assert levels.noise_var([0.0, 0.1, 0.0, 0.1], 0.0) == pytest.approx((1.4826 * 0.1) ** 2 / 2)
    assert levels.noise_var([0.0, 0.3, 0.0], 0.001) == pytest.approx(0.0015)


def test_the_level_read_from_every_run_places_a_slow_periods_edge_where_it_fell():
    # Without noise, read against the incumbent runs alone, a run between two that a slow period's
    # edge separates is off by half of it (seeds 3 and 7: 0.54 and 0.5 of the readings exact); read
    # from every run, each is exact.
    true_log = {0: 0.0, 1: np.log(1.10), 2: np.log(0.95), 3: 0.0, 4: np.log(1.02)}
    for seed in (3, 7):
        seq = drifted_rung(true_log, blocks=6, seed=seed)
        for within, least in ((None, 0.0), (0.0, 1.0)):
            ys, inc = normalise(seq, within)
            exact = [np.isclose(y, true_log[k]) for k in ys for y in ys[k].values()]
            assert len(exact) == 24 and (np.mean(exact) == 1.0) == (least == 1.0), (seed, within)
            assert np.allclose(inc, 0.0) == (least == 1.0)
    # I c1 I c2 c3 I as in the test above: from every run, c1's level is the incumbent's after it.
    seq = [(None, 0, 0.0), (1, 0, 0.3), (None, 0, 0.4), (2, 0, 0.5), (3, 0, 0.45), (None, 0, 0.4)]
    ys, _ = normalise(seq, 1e-4)
    assert ys[2][0] == pytest.approx(0.1, abs=1e-9) and ys[3][0] == pytest.approx(0.05, abs=1e-9)
    # No incumbent run measured: nothing to read against, as without `within`.
    assert paired.readings([(None, 0, float("nan")), (1, 0, 0.3)], 0.01) == []
    nan = float("nan")
    blind = [(None, -1, nan)] + [(k, b, v) for b in (0, 1) for k, v in ((1, 0.3), (2, 0.2), (None, nan))]
    assert paired.readings(blind, 0.01) == []
    # No candidate measured: the incumbent's runs are read against each other, as without `within`.
    alone_inc = [(None, -1, 0.0), (1, 0, float("nan")), (None, 0, 0.1), (None, 1, 0.0)]
    assert paired.readings(alone_inc, 0.01) == paired.readings(alone_inc)
    # A run alone in its stretch (c2's second, 0.5 above its others on a steady machine) is left
    # out; its candidate's other blocks stand. Read against the incumbent runs, it counts in full.
    seq = [(None, -1, 0.0)]
    for b, c2 in enumerate((0.2, 0.7, 0.2)):
        seq += [(1, b, 0.1), (2, b, c2), (None, b, 0.0)]
    ys, inc = normalise(seq, 1e-4)
    assert ys[2] == {0: pytest.approx(0.2), 2: pytest.approx(0.2)} and len(ys[1]) == 3
    assert normalise(seq)[0][2][1] == pytest.approx(0.7)
    # A run's level is the mean of the other runs of its stretch: its sd, the gap, is that of a mean
    # of m - 1 residuals, sqrt(var / (m - 1)); var here 1.5 x within (the residuals agree). The
    # stretches: the 5 runs before the one alone, the 4 after it.
    gaps = [g for *_, g in paired.readings(seq, 1e-4)]
    assert gaps == pytest.approx([np.sqrt(1.5e-4 / 4)] * 5 + [np.sqrt(1.5e-4 / 3)] * 4)
    # ...unless it is its candidate's only reading: c2 measured in block 1 alone, read against the
    # runs beside it.
    only = [x if x[0] != 2 or x[1] == 1 else (2, x[1], float("nan")) for x in seq]
    ys, _ = normalise(only, 1e-4)
    assert ys[2] == {1: pytest.approx(0.7)} and len(ys[1]) == 3
    # Such a run between two levels (a slow period of 0.3 starts with the incumbent run after it)
    # is read against the mean of its neighbours' residuals, give or take half their difference
    # (the machine 0.1 above its level before, 0.4 after).
    edge = [(k, b, v + 0.1 + (0.3 if i >= 6 else 0.0)) for i, (k, b, v) in enumerate(only)]
    c2 = [(y, g) for k, _, y, g in paired.readings(edge, 1e-4) if k == 2]
    assert c2 == [(pytest.approx(0.55), pytest.approx(0.15))]
    # The incumbent's y values are centred on 0 (the candidates' read against it).
    noisy = drifted_rung({0: 0.0, 1: np.log(1.10), 2: np.log(0.95), 3: 0.0}, blocks=3, seed=5, sigma=0.03)
    _, inc = normalise(noisy, 0.03**2 / 1.5)
    assert len(inc) == 4 and abs(np.mean(inc)) < 1e-12
    # A rung whose median candidate ran once (one block): its candidates' runs only echo the level
    # they are read against, so it is read against the incumbent runs alone; twice (two blocks),
    # from every run.
    assert paired.readings(seq[:4], 1e-4) == paired.readings(seq[:4])
    two = drifted_rung(true_log, blocks=2, seed=3)
    ys, inc = normalise(two, 0.0)
    assert np.mean([np.isclose(y, true_log[k]) for k in ys for y in ys[k].values()]) == 0.75
    ys, inc = normalise(two)
    assert not any(np.isclose(y, true_log[k]) for k in ys for y in ys[k].values())


def one_ahead_rung(seed: int, blocks: int) -> tuple[dict, list]:
    """(true log figures, the rung as drifted_rung runs it) of the optimum and three candidates 5%
    slower in a seeded order (the incumbent, key 0, any of them), run noise 3%."""
    perm = np.random.default_rng([seed, 99]).permutation(4)
    true_log = {k: [0.0, -np.log(1.05), -np.log(1.05), -np.log(1.05)][perm[k]] for k in range(4)}
    return true_log, drifted_rung(true_log, blocks, seed, sigma=0.03)


@pytest.mark.parametrize("blocks", [3, 5])
def test_on_a_drifting_machine_the_level_read_from_every_run_finds_the_best_more_often(blocks):
    # The rung of the test below (the optimum and three 5% slower, run noise 3%), each candidate's
    # mean level-weighted as the tune weighs it, read against the incumbent runs alone or from every
    # run (levels.py). Seeded: 305 and 330 of 400 against 367 and 391.
    hits = {"incumbent": 0, "every run": 0}
    for seed in range(400):
        true_log, seq = one_ahead_rung(seed, blocks)
        for how, within in (("incumbent", None), ("every run", 0.03**2 / 1.5)):
            ys, inc, gap = paired.read(seq, within)
            sd = max(paired.robust_sd(ys, inc) or 0.0, 0.03)
            est = {0: 0.0} | {k: paired.level_weighted_mean(v, gap[k], sd) for k, v in ys.items()}
            hits[how] += true_log[max(est, key=est.get)] == 0.0
    assert hits["every run"] >= hits["incumbent"] + 40, hits


def test_the_robust_noise_reads_a_slow_period_as_an_outlier_not_as_noise():
    rng = np.random.default_rng(4)
    inc = list(rng.normal(0, 0.03, 11)) + [0.45]
    cand = {1: dict(enumerate(rng.normal(0.1, 0.03, 6))), 2: {0: 0.7}}  # one y alone: no deviation
    sd = paired.robust_sd(cand, inc)
    assert 0.02 < sd < 0.045 and paired.sigma_y(inc, 0.0) > 0.12
    assert paired.robust_sd({1: {0: 0.1}}, [0.0, 0.1]) is None  # fewer than 3 deviations
    # n repeats about their own mean deviate less than about the truth: scaled by sqrt(n / (n - 1))
    assert paired.robust_sd({1: {0: 0.1, 1: -0.1}}, [0.1]) == pytest.approx(1.4826 * 0.1 * np.sqrt(2))


@pytest.mark.parametrize("blocks", [5, 8])
def test_on_a_drifting_machine_the_level_weighted_mean_finds_the_best_more_often_than_the_plain_one(blocks):
    # A top rung: the optimum and three candidates 5% slower, the incumbent any of them, run noise
    # 3% (16 steps of 5-20%), slow periods of x1.3-1.8 over 3-8 runs. A y read across a slow
    # period's edge is off by half of it, 6-15 times the difference sought: the plain mean of 8
    # blocks finds the optimum no more often than of 5. Seeded: plain 288 and 285 of 400,
    # level-weighted 330 and 358.
    hits = {"plain": 0, "weighted": 0}
    for seed in range(400):
        true_log, seq = one_ahead_rung(seed, blocks)
        ys, inc, gap = paired.read(seq)
        sd = paired.robust_sd(ys, inc)
        for how in hits:
            est = {0: 0.0} | {
                k: np.mean(list(v.values())) if how == "plain" else paired.level_weighted_mean(v, gap[k], sd)
                for k, v in ys.items()
            }
            hits[how] += true_log[max(est, key=est.get)] == 0.0
    assert hits["weighted"] >= hits["plain"] + 30, hits


def test_p_best_ranks_by_the_measured_noise_and_counts_exact_ties_as_best():
    pb = paired.p_best({0: 0.0, 1: 0.10, 2: 0.09}, {0: 0.01, 1: 0.01, 2: 0.01}, higher=True, seed=1)
    assert pb[0] < 0.001 and pb[1] > pb[2] > 0.1 and sum(pb.values()) == pytest.approx(1.0)
    assert paired.p_best({0: 0.1, 1: 0.1, 2: 0.0}, {0: 0.0, 1: 0.0, 2: 0.0}, higher=True) == {0: 1.0, 1: 1.0, 2: 0.0}
    lower = paired.p_best({0: 0.0, 1: 0.10}, {0: 0.01, 1: 0.01}, higher=False, seed=1)
    assert lower[0] > 0.999
    # Lower is better: the mirror of higher is better, draw for draw.
    means, sds = {0: 0.0, 1: -0.02, 2: 0.03}, {0: 0.02, 1: 0.01, 2: 0.05}
    mirror = paired.p_best({k: -v for k, v in means.items()}, sds, higher=True, seed=3)
    assert paired.p_best(means, sds, higher=False, seed=3) == mirror and 0.2 < mirror[1] < 0.8


# The axes model (axes.py): a factorial sweep's candidates borrow each other's runs.
from dtune_sweep import axes  # noqa: E402

FACTORIAL = [{"--x": x, "--z": z, "--y": y} for x in range(6) for z in (0, 1) for y in "abcd"]


def additive_log(v: dict) -> float:
    """The synthetic space's figure (higher is better): --x 3 --z 0 the optimum, every --y alike."""
    return -np.log((1 + 0.05 * (v["--x"] - 3) ** 2) * (1 + 0.1 * (v["--z"] == 1)))


def factorial_rung(seed: int, blocks: int, sigma: float, truth=additive_log, tau: float = 0.0):
    """One seeded rung of the 48 candidates (in a seeded order, the first the incumbent) on the
    drifting machine, each true figure moved by a seeded interaction of sd `tau`. Returns
    (values, true log figures, paired means, the axes fit) in the rung's key order."""
    vals = [FACTORIAL[i] for i in np.random.default_rng(seed).permutation(len(FACTORIAL))]
    inter = np.random.default_rng([seed, 1]).normal(0, tau, len(vals))
    true_log = {k: truth(v) + inter[k] for k, v in enumerate(vals)}
    ys, inc = normalise(drifted_rung(true_log, blocks, seed, sigma))
    var1 = axes.replicate_var([list(v.values()) for v in ys.values()]) or paired.sigma_y(inc, 0.0) ** 2
    keys = [0] + sorted(ys)
    means = np.array([0.0] + [np.mean(list(ys[k].values())) for k in keys[1:]])
    v = np.array([var1 / len(inc)] + [var1 / len(ys[k]) for k in keys[1:]])
    in_order = [vals[k] for k in keys]
    return in_order, np.array([true_log[k] for k in keys]), means, axes.fit(in_order, means, v)


def test_the_axes_model_needs_degrees_of_freedom_beyond_its_columns():
    y = np.zeros(48)
    assert axes.fit([{"--x": i} for i in range(12)], y[:12], np.ones(12)) is None  # one axis: saturated
    assert axes.fit([{"--x": x, "--z": z} for x in (0, 1) for z in (0, 1)], y[:4], np.ones(4)) is None
    f = axes.fit(FACTORIAL, y, np.ones(48))
    assert f["dof"] == 48 - (1 + 5 + 1 + 3) and f["names"][:3] == ["(intercept)", "--x=1", "--x=2"]
    assert f["names"][-4:] == ["--z=1", "--y='b'", "--y='c'", "--y='d'"]
    five_by_three = [{"--x": x, "--z": z} for x in range(5) for z in range(3)]  # 15 against 7 columns
    assert axes.fit(five_by_three, y[:15], np.ones(15))["dof"] == axes.MIN_DOF
    # A value that follows an axis (a derived one, as a topology from the nodes) adds no column.
    derived = [v | {"nodes": v["--x"] // 3, "half": v["--x"] >= 3} for v in FACTORIAL]
    assert axes.fit(derived, y, np.ones(48))["dof"] == f["dof"] and len(axes.design(derived)[1]) == 10
    assert axes.replicate_var([[0.0, 0.2]] * 7) is None and axes.replicate_var([[0.0, 0.2]] * 8) == pytest.approx(0.02)


def test_the_axes_model_shrinks_noise_toward_the_axes_and_keeps_a_candidate_far_above_them():
    truth = np.array([additive_log(v) for v in FACTORIAL])
    noise = np.random.default_rng(4).normal(0, 0.1, 48)
    f = axes.fit(FACTORIAL, truth + noise, np.full(48, 0.01))
    assert f["tau"] < 0.06  # what the axes leave is the noise (a tau of 0 estimated within its spread)
    err_model, err_own = np.abs(f["mean"] - truth).mean(), np.abs(noise).mean()
    assert err_model < err_own / 2, (err_model, err_own)
    # One candidate 50% above what its axes predict, four times the noise: an interaction of its
    # own, it keeps most of its figure (the prior of such interactions, sd SPECIAL_SD, still pulls).
    odd = truth + noise
    odd[17] += np.log(1.5)
    g = axes.fit(FACTORIAL, odd, np.full(48, 0.01))
    assert g["special"][17] > 0.9 and abs(g["mean"][17] - odd[17]) < 0.25 * np.log(1.5)
    assert np.argmax(g["mean"]) == 17 and np.median(g["special"]) < 0.05
    pb = axes.p_best(g, higher=True, seed=1)
    assert pb[17] > 0.9 and pb.sum() == pytest.approx(1.0)


def test_the_axes_models_intervals_cover_the_truth_and_its_draws_are_its_posterior():
    # 100 seeded sets of the 48 candidates, paired figures with noise of sd 0.1 (v known), the
    # truth additive or moved by interactions of sd 0.08: the model's 95% intervals hold the true
    # figure about 95% of the time, and draws (which p_best counts) have the fit's mean and sd.
    for tau in (0.0, 0.08):
        inside = total = 0
        for seed in range(100):
            rng = np.random.default_rng([seed, 7])
            truth = np.array([additive_log(v) for v in FACTORIAL]) + rng.normal(0, tau, 48)
            f = axes.fit(FACTORIAL, truth + rng.normal(0, 0.1, 48), np.full(48, 0.01))
            inside += int(np.sum(np.abs(f["mean"] - truth) <= 1.96 * f["sd"]))
            total += 48
        # (tau^2 is plugged in, its own uncertainty left out: 0.91 where it matters, seeded)
        assert (0.92 if tau == 0 else 0.88) <= inside / total <= 0.98, (tau, inside / total)
    rng = np.random.default_rng(3)
    odd = np.array([additive_log(v) for v in FACTORIAL]) + rng.normal(0, 0.05, 48) + rng.normal(0, 0.1, 48)
    odd[5] += np.log(2.5)
    f = axes.fit(FACTORIAL, odd, np.full(48, 0.01))
    assert f["tau"] > 0.03 and f["special"][5] > 0.9 and 0 < f["shrink"].min() < f["shrink"].max() < 1
    d = axes.draws(f, seed=2, n=40000)
    assert np.allclose(d.mean(axis=0), f["mean"], atol=0.004)
    assert np.allclose(d.std(axis=0) / f["sd"], 1, atol=0.03) and abs(np.mean(d.std(axis=0) / f["sd"]) - 1) < 0.01
    # The odd candidate keeps its residual but for the prior of such interactions: 1 - B, with
    # B = v / (v + tau^2 + SPECIAL_SD^2).
    pred = f["x"][5] @ f["beta"]
    kept = (f["mean"][5] - pred) / (odd[5] - pred)
    assert kept == pytest.approx(1 - 0.01 / (0.01 + f["tau"] ** 2 + axes.SPECIAL_SD**2), abs=0.02)
    # Seeded, and lower-is-better reads the figures the other way round.
    assert np.array_equal(axes.p_best(f, True, seed=4), axes.p_best(f, True, seed=4))
    assert not np.array_equal(axes.p_best(f, True, seed=4), axes.p_best(f, True, seed=5))
    neg = axes.fit(FACTORIAL, -odd, np.full(48, 0.01))
    assert np.argmax(axes.p_best(neg, higher=False, seed=1)) == 5 == np.argmax(axes.p_best(f, True, seed=1))


@pytest.mark.parametrize("blocks", [1, 2])
def test_on_a_factorial_space_the_axes_model_finds_the_optimum_far_more_often_than_the_runs_alone(blocks):
    # 200 seeded rungs of the 48 candidates on the drifting machine (run noise 10%, slow periods):
    # the best paired figure is the optimum's (any --y) in about a third of them, the axes model's
    # in about 0.6 (seeded: 54 / 113 of 200 at one block, 73 / 118 at two).
    own = model = 0
    for seed in range(200):
        vals, _, means, f = factorial_rung(seed, blocks, 0.10)
        best = [v["--x"] == 3 and v["--z"] == 0 for v in vals]
        own += best[int(np.argmax(means))]
        model += best[int(np.argmax(f["mean"]))]
    assert model >= own + 40, (own, model)


def test_where_interactions_are_everywhere_the_axes_model_measures_them_and_keeps_the_runs_own_figures():
    # Every candidate moved by its own interaction of sd 8% (beside run noise 10%): two blocks
    # measure the noise from the candidates' repeats, the model estimates the interactions' spread
    # and picks a configuration within 3% of the true best at least about as often as the runs
    # alone (no fewer than 10 below them of 200; seeded: 55 / 72, tau 0.074).
    own = model = 0
    taus = []
    for seed in range(200):
        _, true, means, f = factorial_rung(seed, 2, 0.10, tau=0.08)
        taus.append(f["tau"])
        own += true[int(np.argmax(means))] >= true.max() - np.log(1.03)
        model += true[int(np.argmax(f["mean"]))] >= true.max() - np.log(1.03)
    assert 0.06 < np.median(taus) < 0.10 and model >= own - 10, (np.median(taus), own, model)


# The cost model (cost.py) and what it decides under a time budget, on a priced machine: every
# run's time and step times follow a + b_c steps exactly, so the decisions are the arithmetic's.
from dtune_sweep import interleaved, runner  # noqa: E402
from dtune_sweep.cost import CostModel  # noqa: E402

STARTUP_S, FP32_STEP_S = 0.3, 0.04


def test_the_cost_model_prices_each_candidate_by_its_own_runs_and_the_rest_at_the_median():
    m = CostModel()
    assert not m.known() and m.run_s(None, 10) == 0.0
    m.observe("a", 0, seconds=0.3 + 4 * 0.48, steps=4, step_s=0.48)  # a bf16 probe
    assert m.startup() == pytest.approx(0.3) and m.step_s(5) == pytest.approx(0.48)  # all priced as it
    m.observe("b", 1, seconds=0.3 + 4 * 0.04, steps=4, step_s=0.04)
    m.observe("c", 2, seconds=0.3 + 4 * 0.042, steps=4, step_s=0.042)
    m.observe("d", 1, seconds=0.3 + 32 * 0.04, steps=32, step_s=0.04)
    assert m.step_s(0) == pytest.approx(0.48) and m.step_s(1) == pytest.approx(0.04)
    assert m.step_s(None) == pytest.approx(0.042)  # the median candidate's, each candidate once
    assert m.run_s(1, 64) == pytest.approx(0.3 + 64 * 0.04)
    m.observe("e", 3, seconds=5.0, steps=4, step_s=None)  # failed: nothing about steps
    assert m.startup() == pytest.approx(0.3) and 3 not in m.measured_keys()
    bare = CostModel()
    bare.observe("f", 0, seconds=1.5, steps=4, step_s=None)
    assert bare.known() and bare.run_s(None, 100) == pytest.approx(1.5)  # all start-up until a run measures


def step_s(values: dict) -> float:
    """fake_train.py's step: --x 3 the optimum, 2 and 4 5% slower, 1 20%; bf16 12 times fp32."""
    x = float(values["--x"])
    return FP32_STEP_S * (1 + 0.05 * (x - 3) ** 2) * (12 if values["--precision"] == "bf16" else 1)


class PricedRuns:
    """tune.Runs' interface over a machine without drift: a run of s steps takes STARTUP_S + s
    step_s(candidate), its samples/s are batch / step with seeded noise per step (sd `noise`)."""

    def __init__(self, directory: Path, noise: float, startup: float = STARTUP_S):
        self.directory, self.planned, self.hosts, self.done = directory, {}, runner.MpirunHosts(), []
        self.noise, self.startup = noise, startup

    def run(self, points) -> int:
        for p in points:
            self.planned[p.id] = p
            if p.id not in self.done:
                self.done.append(p.id)
        return 0

    def seconds_by_id(self, ids) -> dict:
        return {i: self.startup + self.planned[i].values["steps"] * self.step_seconds(self.planned[i]) for i in ids}

    def seconds(self, ids) -> float:
        return sum(self.seconds_by_id(ids).values())

    def step_seconds(self, p) -> float:
        return step_s(p.values)

    def measure(self, p, key, objective):
        rng = np.random.default_rng(zlib.crc32(p.id.encode()))
        return Measured(key, "ok", 8 / step_s(p.values) * np.exp(rng.normal(0, self.noise, p.values["steps"])))


def priced_tune(tmp_path, seed: int, budget_s: float, noise: float = 0.01, startup: float = STARTUP_S):
    f = tmp_path / "mixed.yaml"
    f.write_text(
        "name: m6\nbinary: dtune-train\nargs: [--steps, '64']\naxes: {--x: [1, 2, 3], --precision: [fp32, bf16]}\n"
    )
    runs = PricedRuns(tmp_path, noise, startup)
    rec = interleaved.tune_sweep(
        "m6", plan(str(f)), runs, "samples_per_s", ("seconds", budget_s), seed, 0.05, 4, lambda s: None
    )
    return rec, runs


def measured(rung: dict) -> set:
    return {f"{c['values']['--precision']} x{c['values']['--x']}" for c in rung["candidates"]}


def picked_from(tmp_path, ys: dict, sigma: float) -> dict:
    """interleaved.pick's record for a top rung of three candidates (key 0 the incumbent), 3 blocks
    run, read as {key: {block: y}} with noise `sigma` (the rung's evaluation set by hand)."""
    f = tmp_path / "three.yaml"
    f.write_text(
        "name: three\nbinary: dtune-train\nargs: [--steps, '4']\naxes: {--x: [1, 2, 3], --precision: [fp32]}\n"
    )
    sw = interleaved.Sweep("three", plan(str(f)), PricedRuns(tmp_path, 0.01), "samples_per_s", None, 0, 0.05, print)
    rung = interleaved.Rung(sw, 0, 4, [0, 1, 2], 0)
    rung.run_blocks(3)
    means = {k: float(np.mean(list(v.values()))) for k, v in ys.items()}
    sds = {k: sigma / math.sqrt(3) for k in ys}
    ev = {"ys": ys, "inc_y": [0.0, 0.0, 0.0], "sigma": sigma, "means": means, "sds": sds}
    ev["p_best"] = paired.p_best(means, sds, True)
    rec = {"rungs": [rung.record(ev)]}
    interleaved.pick(sw, rung, ev, rec)
    rec["id_of"] = {
        k: next(c["id"] for c in rec["rungs"][0]["candidates"] if c["candidate_id"] == sw.cands[k].id) for k in ys
    }
    return rec


def margin_by_hand(d: list, sides: int, sigma: float) -> tuple:
    """(ratio, lo, hi, floor) of the pick over another from their paired differences d (pick less
    other, one per block), written out: se the larger of the blocks' spread sqrt(var(d) / n) and
    the floor's sigma sqrt(sides / n), the interval exp(mean +- 1.96 se), the floor exp(1.96 se) - 1."""
    n, mean = len(d), sum(d) / len(d)
    spread = sum((x - mean) ** 2 for x in d) / (n - 1) / n
    se = math.sqrt(max(spread, sides * sigma**2 / n))
    return math.exp(mean), math.exp(mean - 1.96 * se), math.exp(mean + 1.96 * se), math.exp(1.96 * se) - 1


def test_the_margins_interval_and_floor_count_one_side_of_noise_against_the_incumbent_and_two_otherwise(tmp_path):
    # The blocks agree to within 0.01 while one figure's noise is 0.03, so the floor (sigma sqrt(sides
    # / 3 blocks)) sets each interval, and the sides decide it. The incumbent (y 0 in every block)
    # wins by 5% over candidate 1: one side of noise, se 0.03 / sqrt(3) = 0.0173, floor
    # exp(1.96 x 0.0173) - 1 = 3.45% (with two sides it would be 4.92%, the interval 1.002-1.103).
    zero = {b: 0.0 for b in range(3)}
    rec = picked_from(tmp_path, {0: zero, 1: {0: -0.05, 1: -0.04, 2: -0.06}, 2: {0: -0.1, 1: -0.12, 2: -0.08}}, 0.03)
    m = rec["margin"]
    assert rec["winner"]["id"] == rec["id_of"][0] and m["id"] == rec["id_of"][1] and m["blocks"] == 3
    ratio, lo, hi, floor = margin_by_hand([0.05, 0.04, 0.06], 1, 0.03)
    assert (ratio, lo, hi, floor) == pytest.approx((1.05127, 1.01618, 1.08757, 0.03453), abs=2e-5)
    assert (m["ratio"], m["lo"], m["hi"], m["floor"]) == pytest.approx((ratio, lo, hi, floor), rel=1e-4)
    assert rec["tied"] == []
    # Candidate 1 wins by 3% in every block over candidate 2, neither the incumbent: two sides, se
    # 0.03 sqrt(2 / 3) = 0.0245, floor 4.92%, so the 3% is a tie (interval 0.982-1.081). Against the
    # incumbent (4% over it, one side) the interval 1.006-1.077 excludes 1: no tie; read with two
    # sides it would be 0.992-1.092, a tie.
    rec = picked_from(tmp_path, {0: zero, 1: {0: 0.04, 1: 0.03, 2: 0.05}, 2: {0: 0.01, 1: 0.0, 2: 0.02}}, 0.03)
    m = rec["margin"]
    assert rec["winner"]["id"] == rec["id_of"][1] and m["id"] == rec["id_of"][2]
    ratio, lo, hi, floor = margin_by_hand([0.03, 0.03, 0.03], 2, 0.03)
    assert (ratio, lo, hi, floor) == pytest.approx((1.03045, 0.98215, 1.08113, 0.04918), abs=2e-5)
    assert (m["ratio"], m["lo"], m["hi"], m["floor"]) == pytest.approx((ratio, lo, hi, floor), rel=1e-4)
    assert [v["id"] for v in rec["tied"]] == [rec["id_of"][2]]


def test_the_least_steps_are_the_rungs_nearest_the_start_up_on_the_log_scale():
    # The rungs' steps double (64, 32, 16, 8, 4, ...; 100, 50, 25, 12, 6, 3, 1), so the start-up's
    # steps pick the nearest of them by ratio: a probe that measured a start-up of 4.4 steps and
    # one of 3.9 (the same machine, 10% apart) start the same rungs.
    f = interleaved.nearest_rung_steps
    assert [f(64, e) for e in (0.5, 2.9, 3.9, 4.4, 5.6, 5.7, 11, 12)] == [1, 4, 4, 4, 4, 8, 8, 16]
    assert [f(100, e) for e in (3.9, 4.4, 8, 9, 20)] == [3, 6, 6, 12, 25]


def test_a_start_up_just_above_a_rungs_steps_keeps_that_rung(tmp_path):
    # A start-up of 0.21 s against fp32 steps of 0.040-0.048 s: 4.4 to 5.3 steps' worth. The
    # first rung runs 4 steps, the nearest rung's, not 8 (the least steps were ceil(5.3) = 6 and
    # the first rung 8 before, so a probe run a few percent slower halved the rungs).
    rec, _ = priced_tune(tmp_path, seed=1, budget_s=15.0, startup=0.21)
    assert rec["cost_model"]["startup_steps"] >= 5 and rec["cost_model"]["least_steps"] == 4
    assert rec["schedule"][0]["steps"] == 4 and len(rec["schedule"]) >= 2
    assert rec["spent_seconds"] <= 15.0
    assert rec["winner"]["values"]["--x"] == 3 and rec["winner"]["values"]["--precision"] == "fp32"


def test_a_dear_probe_does_not_keep_cheap_candidates_out_of_the_draw(tmp_path):
    # Seed 8 puts bf16 --x 3 first: the probe prices every candidate as bf16 (12 times fp32), so
    # the first draw takes 4 of the 6. The first rung's runs reprice them, and the two left out
    # join it late, within the budget.
    rec, _ = priced_tune(tmp_path, seed=8, budget_s=15.0)
    assert rec["cost_model"]["step_s"] == pytest.approx(12 * FP32_STEP_S)
    assert rec["schedule"][0]["candidates"] == 4 and rec["late_draw"]["candidates"] == 2
    assert len(measured(rec["rungs"][0])) == 6
    assert rec["winner"]["values"]["--x"] == 3 and rec["winner"]["values"]["--precision"] == "fp32"
    assert rec["spent_seconds"] <= 15.0
    learnt = rec["cost_model"]["learnt"]["step_s_by_candidate"]
    assert sorted(round(v / FP32_STEP_S, 2) for v in learnt.values()) == [1.0, 1.05, 1.2, 12.0, 12.6, 14.4]


def test_a_cheap_probe_leaves_out_what_the_first_rung_cannot_pay_and_replans_the_rest(tmp_path):
    # Seed 1's probe is fp32, so the draw prices the bf16 candidates at a twelfth of their cost.
    # The first rung's block runs a segment at a time: after the first, repriced, the budget pays
    # for fewer of the rest, and the rungs after it are re-planned to what is left. The tune keeps
    # to its budget (it ran 17.1 s of 15 before).
    rec, _ = priced_tune(tmp_path, seed=1, budget_s=15.0)
    assert rec["cost_model"]["step_s"] < 2 * FP32_STEP_S
    assert rec["left_out"]["candidates"] == 1 and len(measured(rec["rungs"][0])) == 5
    assert rec["replanned"] == [
        "after rung 0: the rest of the schedule at the prices the runs taught: 2 x 16 steps x 1 block(s)"
    ]
    assert [(r["steps"], r["blocks"]) for r in rec["rungs"]] == [(8, 1), (16, 1)]
    assert rec["spent_seconds"] <= 15.0
    assert rec["winner"]["values"]["--x"] == 3 and rec["winner"]["values"]["--precision"] == "fp32"


def test_the_first_rungs_later_blocks_run_only_while_the_budget_pays(tmp_path):
    # Seed 7, 10 s: the fp32 probe plans all six at 8 steps in two blocks; the first block's first
    # segment brings in the bf16 runs and overruns the budget (the probe's prices). Its second
    # block, planned at those prices, no longer runs (it ran, and spent 30.4 s of 10, before).
    rec, _ = priced_tune(tmp_path, seed=7, budget_s=10.0)
    assert rec["schedule"][0] == {"candidates": 6, "steps": 8, "blocks": 2}
    assert rec["first_rung_blocks"]["planned"] == 2 and rec["first_rung_blocks"]["ran"] == 1
    assert [(r["steps"], r["blocks"]) for r in rec["rungs"]] == [(8, 1)]
    assert rec["spent_seconds"] < 16.0


def test_a_replanned_rest_keeps_the_top_rungs_blocks_before_its_steps(tmp_path):
    # Seed 1 again with more budget than the cheap-probe test's 15 s: the first rung screens all six
    # and the rest no longer pays as planned (3 x 16 steps, then 2 x 32 steps x 3 blocks). A slow period of the
    # machine falls on a whole run, so only blocks separate the candidates from it: the re-plan
    # keeps MIN_TOP_BLOCKS at fewer steps rather than one block at more (3 x 16 x 1 and 2 x 32 x 1
    # before).
    rec, _ = priced_tune(tmp_path, seed=1, budget_s=22.0)
    assert rec["replanned"] == [
        "after rung 0: the rest of the schedule at the prices the runs taught: 3 x 8 steps x 3 block(s)"
    ]
    assert rec["rungs"][-1]["steps"] == 8 and rec["rungs"][-1]["blocks"] >= interleaved.MIN_TOP_BLOCKS
    assert rec["spent_seconds"] <= 22.0
    assert rec["winner"]["values"]["--x"] == 3 and rec["winner"]["values"]["--precision"] == "fp32"


def test_a_top_rung_that_would_cut_contenders_to_double_steps_races_them_at_the_same_steps(tmp_path):
    # Seed 3, 36 s, 15% noise a step: three contenders leave the 16-step rung, and at the prices the
    # runs taught the planned top rung (32 steps, 3 blocks) pays for two of them. A slow period
    # falls on a whole run, whatever its steps, so the three race on at 16 steps, where the budget
    # pays for all of them (2 x 32 steps before: one contender cut by one block's ranking). (At 10%
    # noise, with a run read by its trimmed mean since 2026-12-06, two leave the 16-step rung.)
    rec, _ = priced_tune(tmp_path, seed=3, budget_s=36.0, noise=0.15)
    assert rec["replanned"] == [
        "after rung 1: the top rung at 16 steps, where the budget pays for 3 contenders (for 2 at 32 steps)"
    ]
    assert [(len(r["candidates"]), r["steps"]) for r in rec["rungs"]] == [(6, 8), (3, 16), (3, 16)]
    assert rec["rungs"][-1]["blocks"] >= interleaved.MIN_TOP_BLOCKS and rec["spent_seconds"] <= 36.0
    assert rec["winner"]["values"]["--x"] == 3 and rec["winner"]["values"]["--precision"] == "fp32"


def test_a_race_the_budget_cannot_pay_for_whole_races_the_most_probable(tmp_path):
    # Seed 5 (a bf16 probe, 30% noise a step): the top rung at 8 steps races on while no one
    # dominates. When a block of every contender no longer fits, the most probable of them race
    # on: the tune stops only when not even one of them can run against the incumbent (it left
    # 1.8 s, two such blocks, unspent before).
    rec, _ = priced_tune(tmp_path, seed=5, budget_s=22.0, noise=0.3)
    last = rec["rungs"][-1]
    assert last["steps"] == 8 and last["raced_out"]
    assert 22.0 - rec["spent_seconds"] < 2 * (STARTUP_S + 8 * FP32_STEP_S)
    assert rec["spent_seconds"] <= 22.0


def test_a_race_does_not_stop_on_one_blocks_dominance(tmp_path):
    # Seed 8, 8 s: one rung at 4 steps, one block of it first. After one block a candidate looks
    # dominant (its noise read from two incumbent runs, blind to a slow period on one run); the
    # race goes on until the leader has MIN_TOP_BLOCKS blocks or the budget pays for no block of
    # even one contender (it stopped after the one block with 3.1 s left before).
    rec, _ = priced_tune(tmp_path, seed=8, budget_s=8.0)
    (rung,) = rec["rungs"]
    one_block = 2 * (STARTUP_S + 4 * FP32_STEP_S)  # an incumbent and a contender, fp32 at 4 steps
    assert rung["blocks"] >= interleaved.MIN_TOP_BLOCKS or 8.0 - rec["spent_seconds"] < one_block
    assert rung["blocks"] >= 2 and rec["spent_seconds"] <= 8.0


def test_a_hopeless_dear_incumbent_hands_the_race_to_a_new_rung(tmp_path):
    # One rung at 4 steps for all six, opened by the bf16 probe; under noise (30% a step) no one
    # dominates after a block, and racing on would run the bf16 incumbent in every block. The race
    # goes on as a new rung opened by the most probable, at the most steps the budget pays for.
    rec, _ = priced_tune(tmp_path, seed=8, budget_s=30.0, noise=0.3)
    first, last = rec["rungs"]
    assert first["steps"] == 4 and len(measured(first)) == 6 and "cannot be the best" in rec["reopened"][0]
    assert last["steps"] == 32 and all(c.startswith("fp32") for c in measured(last))
    assert next(c for c in last["candidates"] if c["incumbent"])["values"]["--precision"] == "fp32"
    assert rec["spent_seconds"] <= 30.0
    assert rec["winner"]["values"]["--x"] == 3 and rec["winner"]["values"]["--precision"] == "fp32"


class FactorialRuns(PricedRuns):
    """The 48-point synthetic space (--x, --z, --y; additive_log) on a machine whose every run is
    off by its own seeded factor (sd `run_noise`), as a slow period or a neighbour's load makes it."""

    def __init__(self, directory: Path, run_noise: float):
        super().__init__(directory, noise=0.01)
        self.run_noise = run_noise

    def step_seconds(self, p) -> float:
        return FP32_STEP_S * np.exp(-additive_log(p.values))

    def measure(self, p, key, objective):
        rng = np.random.default_rng(zlib.crc32(p.id.encode()))
        off = np.exp(rng.normal(0, self.run_noise))
        return Measured(key, "ok", 8 / self.step_seconds(p) / off * np.exp(rng.normal(0, 0.01, p.values["steps"])))


class DriftingFactorialRuns(FactorialRuns):
    """FactorialRuns on a machine that drifts as drifted_rung's: in launch order, stretches of 3-8
    runs, a third of them slow by x1.3-1.8 (seeded by `drift`), and each run off by its own
    seeded factor (sd `run_noise`)."""

    def __init__(self, directory: Path, run_noise: float, drift: int):
        super().__init__(directory, run_noise)
        rng, self.slow = np.random.default_rng([drift, 3]), []
        while len(self.slow) < 4000:
            n, f = int(rng.integers(3, 9)), rng.uniform(1.3, 1.8) if rng.random() < 1 / 3 else 1.0
            self.slow += [f] * n

    def measure(self, p, key, objective):
        m = super().measure(p, key, objective)
        return Measured(key, "ok", m.samples / self.slow[self.done.index(p.id)])


def factorial_tune(
    tmp_path, seed: int, budget_s: float | None, run_noise: float = 0.12, drift: int | None = None
) -> dict:
    f = tmp_path / "s48.yaml"
    f.write_text(
        "name: s48\nbinary: dtune-train\nargs: [--steps, '16']\n"
        "axes: {--x: [0, 1, 2, 3, 4, 5], --z: [0, 1], --y: [a, b, c, d]}\n"
    )
    runs = FactorialRuns(tmp_path, run_noise) if drift is None else DriftingFactorialRuns(tmp_path, run_noise, drift)
    share = ("seconds", budget_s) if budget_s else None
    return interleaved.tune_sweep("s48", plan(str(f)), runs, "samples_per_s", share, seed, 0.05, 4, lambda s: None)


def test_a_tune_of_a_factorial_sweep_picks_by_the_axes_model_and_records_both_readings(tmp_path):
    # No budget: rungs of 48 x 4 steps, 20 x 8 and 4 x 16. The first two have degrees of freedom
    # beyond the model's 10 columns; the top rung of 4 is read by its paired figures alone.
    rec = factorial_tune(tmp_path, seed=2, budget_s=None)
    first = rec["rungs"][0]
    assert len(first["candidates"]) == 48 and first["axes_model"]["dof"] == 38
    assert first["axes_model"]["noise_from"] == "incumbent's repeats"  # one block: no candidate repeats
    for c in first["candidates"]:  # the paired figure as measured, the model's beside it
        assert c["ratio_lo"] <= c["ratio"] <= c["ratio_hi"] and c["model_lo"] <= c["model_ratio"] <= c["model_hi"]
        assert 0 <= c["p_best_paired"] <= 1
    # Promotion ranks by the model's probability; one kept for its own runs alone comes after.
    kept = [c for c in first["candidates"] if c["promoted"]]
    dropped = [c for c in first["candidates"] if not c["promoted"]]
    by_model = [c for c in kept if c["p_best"] >= 0.05 / 48]
    assert by_model and min(c["p_best"] for c in by_model) >= max(c["p_best"] for c in dropped)
    assert all(c["p_best_paired"] >= 0.05 / 48 for c in kept if c not in by_model)
    assert [len(r["candidates"]) for r in rec["rungs"]] == [48, 20, 4] and "axes_model" in rec["rungs"][1]
    assert "axes_model" not in rec["rungs"][2] and "model_ratio" not in rec["rungs"][2]["candidates"][0]
    assert "estimates" not in rec  # the pick is the top rung's paired figures'


def test_with_one_rung_of_many_candidates_the_pick_is_the_axes_models(tmp_path):
    # A budget that pays for one rung of most of the 48 at 8 steps (start-up dear against the
    # steps): the pick is the model's best, and the record names the candidate the runs alone
    # would have picked.
    rec = factorial_tune(tmp_path, seed=3, budget_s=40.0)
    assert len(rec["rungs"]) == 1 and rec["estimates"]["by"] == "axes model"
    last = rec["rungs"][0]["candidates"]
    best = max(last, key=lambda c: c["model_ratio"])
    own = max(last, key=lambda c: c["ratio"])
    assert rec["winner"]["candidate_id"] == best["candidate_id"]
    assert rec["estimates"]["paired_best"] == (None if own is best else own_label(own))
    from dtune_report.tuning import sweep_blocks

    blocks = sweep_blocks({"budget": {"text": "40s"}}, rec)
    (table,) = [b[1] for b in blocks if b[0] == "table"]
    assert table["paired ratio to the incumbent"].str.contains("; axes model x").all()
    assert any("Picked by the axes model" in str(b[1]) for b in blocks if b[0] == "p")


def own_label(c: dict) -> str:
    return " ".join(f"{k} {c['values'][k]}" for k in ("--x", "--z", "--y"))


def test_the_axes_model_makes_a_one_rung_tune_of_a_factorial_sweep_find_the_optimum_far_more_often(
    tmp_path, monkeypatch
):
    # 30 seeded tunes of the 48-point space, 12% noise a run, a budget that pays for one rung of
    # 42-45 candidates at 8 steps: the pick is the optimum (any --y) far more often with the axes
    # model than with the paired figures alone (the model off: MIN_DOF beyond any rung). Seeded:
    # 14 / 30 against 2 / 30 (33 / 60 against 9 / 60 over 60 seeds).
    def hits() -> int:
        n = 0
        for seed in range(30):
            w = factorial_tune(tmp_path, seed, budget_s=40.0)["winner"]["values"]
            n += w["--x"] == 3 and w["--z"] == 0
        return n

    with_model = hits()
    monkeypatch.setattr(axes, "MIN_DOF", 10**6)
    alone = hits()
    assert with_model >= 2 * alone and with_model >= alone + 6, (with_model, alone)


def test_on_a_drifting_machine_reading_the_level_gaps_makes_a_tune_find_the_optimum_more_often(tmp_path, monkeypatch):
    # 60 seeded tunes of the 48-point space on a drifting machine (slow periods over 3-8 runs, 4%
    # noise a run) with a budget whose top rung races 11 blocks or so. A y read across a slow
    # period's edge is off by half of it; weighing each block by how well its level is known
    # (paired.read's gaps, in the paired means and the axes model's variances) and reading the level from
    # every run where candidates repeat (levels.py) find the optimum (any --y) more often than
    # reading every run against its incumbent neighbours with every gap read as 0. Seeded: 56 / 60
    # against 49 / 60, discordant 9 to 2. (The gaps alone, before levels.py: 57 / 60 against 51 /
    # 60, 7 to 1; with levels.py the gaps alone add 56 against 53.)
    def hits() -> list:
        out = []
        for seed in range(60):
            w = factorial_tune(tmp_path, seed, budget_s=120.0, run_noise=0.04, drift=seed)["winner"]["values"]
            out.append(w["--x"] == 3 and w["--z"] == 0)
        return out

    with_gaps = hits()
    read = paired.read
    monkeypatch.setattr(paired, "read", lambda seq, within=None: read(seq, within)[:2] + ({},))  # every gap 0
    monkeypatch.setattr(levels, "read", lambda seq, within: None)
    without = hits()
    only_with = sum(a and not b for a, b in zip(with_gaps, without))
    only_without = sum(b and not a for a, b in zip(with_gaps, without))
    assert sum(with_gaps) >= sum(without) + 5 and only_with >= 4 * max(only_without, 1), (only_with, only_without)
