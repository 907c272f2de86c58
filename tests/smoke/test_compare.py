"""dtune compare: one row per configuration (never two pooled, two launches of one matched), one
sample per event (the slowest rank's iteration or step; warm-up and profiled steps left out), and
significance from the U test alone, so a 10% shift is flagged and identity never is.

The comm files are written by the real dtune-comm and `dtune sweep run` + `merge` (their layout,
command lines and launcher environment are real); their times are then replaced by fixed values,
so no timing noise reaches the statistics. The train files are built with h5py in dtune-train's
layout (benchmarks/train/train_results.cc), so this test needs no LibTorch build."""

import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest
from scipy import stats
from test_tuner_conf import _provenance, _root, _run_group
from test_tuner_conf import write_results as write_comm_results
from train_fixture import config_attrs, train_file

from conftest import bin_dir, mpirun_prefix
from dtune_report.compare import (
    Row,
    _labeller,
    bootstrap_median_ci,
    bootstrap_ratio_ci,
    comm_iteration_samples,
    compare_results,
    compare_samples,
    format_table,
    geomean_ratio,
    mann_whitney_p,
    regressions,
    samples_needed,
    train_step_samples,
)
from dtune_report.identity import IGNORED_ATTRS, SETTING_ATTRS, parse_flags, run_identity, settings_env

REPO = Path(__file__).resolve().parents[2]
DTUNE = [str(REPO / "scripts" / "dtune")]
COMM_ARGS = ["-b", "8", "-e", "64", "-f", "8", "-n", "9", "-w", "2", "-c", "0", "--collective", "allreduce,allgather"]
ROWS_PER_RUN = 2 * 2 * 2  # collectives x placements x sizes


def dtune(*args, cwd=None):
    return subprocess.run(DTUNE + [str(a) for a in args], capture_output=True, text=True, timeout=300, cwd=cwd)


def table(stdout: str) -> list:
    """The table's data rows (header, geomean and `#` notes left out)."""
    lines = [line for line in stdout.splitlines() if line and not line.startswith("#")]
    return [line for line in lines[1:] if not line.startswith("geomean")]


# Statistics on fixed inputs.


def test_mann_whitney_is_benchstats_exact_test():
    # Fully separated samples of 5 and of 4: the exact two-sided p is 2 / C(10, 5) and 2 / C(8, 4),
    # benchstat's uTestMinP[5] and [4] (the normal approximation gives 0.0122 and 0.0304).
    assert mann_whitney_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(2 / 252, rel=1e-12)
    assert mann_whitney_p([1, 2, 3, 4], [5, 6, 7, 8]) == pytest.approx(2 / 70, rel=1e-12)
    assert mann_whitney_p([1, 1, 1], [1, 1, 1]) == 1.0
    # With ties, the normal approximation with tie and continuity corrections:
    # U = 1, mu = 4.5, tie term = (3^3 - 3) / (6 * 5) = 0.8, sigma = sqrt(9 / 12 * (7 - 0.8)),
    # z = (3.5 - 0.5) / sigma = 1.391, p = 0.1642 (scipy.stats.mannwhitneyu, method="asymptotic").
    z = (3.5 - 0.5) / math.sqrt(9 / 12 * 6.2)
    assert mann_whitney_p([1, 2, 2], [2, 3, 4]) == pytest.approx(math.erfc(z / math.sqrt(2)), rel=1e-12)
    assert mann_whitney_p([1, 2, 2], [2, 3, 4]) == pytest.approx(0.16416, abs=1e-5)
    assert samples_needed(0.05) == 4 and samples_needed(0.01) == 5


def test_significance_is_the_u_test_alone():
    # Equal medians (ratio exactly 1) and a bootstrap interval far around 1, yet every value of B
    # is at or above its rank in A: p = 0.012 < 0.05, so the row is significant.
    a = np.arange(1, 22, dtype=float)
    b = a.copy()
    b[:10] = 10.5 + np.arange(10) / 100
    b[11:] += 20
    (row,) = compare_samples({"x": a}, {"x": b}, "us")
    assert row.p_value < 0.05 and row.ci_low < 1 < row.ci_high and row.significant
    assert "+0.0%" in format_table([row])
    # Three against three can never reach p < 0.05: `~`, with benchstat's warning.
    (few,) = compare_samples({"x": [1, 2, 3]}, {"x": [10, 11, 12]}, "us")
    assert not few.significant and few.ci_low > 1
    out = format_table([few])
    assert " ~ " in out and "# need >= 4 samples to detect a difference at alpha level 0.05" in out


def test_a_row_states_medians_and_their_ratio_not_means():
    # One slow outlier on each side moves the means (19.2 and 37.2), not the medians (12 and 22).
    (row,) = compare_samples({"x": [10, 11, 12, 13, 50]}, {"x": [20, 21, 22, 23, 100]}, "us")
    assert (row.median_a, row.median_b) == (12.0, 22.0) and row.ratio == pytest.approx(22 / 12, rel=1e-12)
    assert "+83.3%" in format_table([row])


def test_the_geomean_row_is_the_geometric_mean_of_the_ratios():
    # One configuration twice as slow, one twice as fast: geometric mean 1 (+0.0%), where an
    # arithmetic mean of the ratios would say +25%.
    a = [10.0, 11, 12, 13, 14]
    rows = compare_samples({0: a, 1: a}, {0: [2 * x for x in a], 1: [x / 2 for x in a]}, "us")
    assert [r.ratio for r in rows] == [2.0, 0.5]
    (geomean,) = [line for line in format_table(rows).splitlines() if line.startswith("geomean")]
    assert geomean.split()[-1] == "+0.0%", geomean


def _scipy_p(a, b):
    """scipy's two-sided U test by the rules metrics.md states: exact without ties up to 50 per
    side, else the normal approximation with tie and continuity corrections."""
    ties = len(np.unique(np.concatenate([a, b]))) < len(a) + len(b)
    method = "exact" if not ties and len(a) <= 50 and len(b) <= 50 else "asymptotic"
    return stats.mannwhitneyu(a, b, alternative="two-sided", method=method, use_continuity=True).pvalue


def _u_test_cases():
    rng = np.random.default_rng(11)
    for n1, n2 in [(1, 1), (1, 3), (3, 1), (1, 9), (2, 2), (4, 7), (9, 3), (50, 5), (5, 50), (51, 5), (5, 51)]:
        for shift in (0.0, 0.7, 3.0):
            yield rng.normal(size=n1), rng.normal(size=n2) + shift  # no ties
            yield rng.integers(0, 4, n1).astype(float), rng.integers(0, 4, n2) + shift  # ties
    yield [1.0, 4.0], [2.0, 3.0]  # U1 = U2: p = 1
    yield [1.0, 2.0, 2.0], [2.0, 2.0, 3.0]  # ties, |U1 - n1 n2 / 2| = 0.5 (within the continuity correction)
    yield [1.0, 2.0, 3.0], [2.0, 3.0, 3.0, 4.0]  # ties, |U1 - n1 n2 / 2| = 1.0


def test_mann_whitney_agrees_with_scipy_on_both_sides_of_every_rule():
    """With and without ties, one value on a side, and 50 against 51 values (the exact test's
    limit): the p-value is scipy.stats.mannwhitneyu's under the same rules."""
    for a, b in _u_test_cases():
        a, b = np.asarray(a, float), np.asarray(b, float)
        want = 1.0 if len(np.unique(np.concatenate([a, b]))) == 1 else _scipy_p(a, b)  # all equal: p = 1
        assert mann_whitney_p(a, b) == pytest.approx(want, rel=1e-9, abs=1e-15), (list(a), list(b), want)
        assert mann_whitney_p(list(a), list(b)) == mann_whitney_p(a, b)  # a list reads as its array


def test_mann_whitney_p_is_a_probability_and_nan_without_samples():
    # 19 against 47, no ties, U1 = 446 = (19 * 47 - 1) / 2: the exact two-sided p is 2 P(U <= 446),
    # which is exactly 1 (n1 n2 is odd), summed in floating point to a hair above it.
    b = np.arange(47.0)
    a = np.array([22.5 + i / 100 for i in range(18)] + [31.5])  # 18 values above 23 of b, one above 32
    assert mann_whitney_p(a, b) == 1.0 and _scipy_p(a, b) == pytest.approx(1.0)
    for x, y in (([], [1.0, 2.0]), ([1.0, 2.0], []), ([], [])):
        assert math.isnan(mann_whitney_p(x, y))


def _exact_bootstrap_median(x):
    """The bootstrap distribution of the median of x (odd length, distinct values), exactly: the
    median of n draws with replacement is at most the j-th smallest value when at least (n + 1) / 2
    draws are, each with probability j / n. Returns (values, probabilities)."""
    x = np.sort(np.asarray(x, float))
    n, k = len(x), (len(x) + 1) // 2
    cdf = stats.binom.sf(k - 1, n, np.arange(1, n + 1) / n)
    return x, np.diff(np.concatenate([[0.0], cdf]))


def _quantile(values, probs, q):
    """The smallest value whose probability of not being exceeded is at least q."""
    order = np.argsort(values)
    cdf = np.cumsum(np.asarray(probs)[order])
    return float(np.asarray(values)[order][np.searchsorted(cdf, q)])


def _check_percentile_interval(values, probs, interval, margin=0.003):
    """interval is (2.5th, 97.5th) percentile of draws from (values, probs), within `margin` of
    probability (Monte Carlo error); and the data can tell 2.5 from 3.5 and 97.5 from 98.5 (some
    value lies between those quantiles)."""
    q = lambda p: _quantile(values, probs, p)  # noqa: E731
    assert q(0.025 + margin) < q(0.035 - margin) and q(0.975 + margin) < q(0.985 - margin)
    lo, hi = interval
    assert q(0.025 - margin) <= lo <= q(0.025 + margin) and q(0.975 - margin) <= hi <= q(0.975 + margin)


def test_bootstrap_intervals_are_the_2_5th_and_97_5th_percentiles_of_the_exact_bootstrap():
    """metrics.md: the interval is the 2.5th and 97.5th percentile of the resampled medians (or
    ratios of medians). Checked against the exact bootstrap distribution, with enough resamples
    that the Monte Carlo error (0.05% of probability) is far below the 0.3% allowed."""
    rng = np.random.default_rng(3)
    a, b = rng.uniform(10, 20, 105), rng.uniform(12, 22, 105)  # 105: tail steps near 2%, 3%, 97%, 98%
    va, pa = _exact_bootstrap_median(a)
    vb, pb = _exact_bootstrap_median(b)
    _check_percentile_interval(vb, pb, bootstrap_median_ci(b, resamples=100_000))
    ratios, probs = (vb[None, :] / va[:, None]).ravel(), (pb[None, :] * pa[:, None]).ravel()
    _check_percentile_interval(ratios, probs, bootstrap_ratio_ci(a, b, resamples=100_000))


def test_bootstrap_intervals_are_reproducible_from_the_documented_recipe():
    """metrics.md: 2,000 resamples with a fixed seed (0), so a run of `dtune compare` or `dtune
    report` prints the same interval each time, and anyone can recompute it from the samples."""
    a = np.round(np.random.default_rng(5).uniform(10, 20, 20), 3)
    b = a * 1.1 + np.round(np.random.default_rng(6).uniform(0, 1, 20), 3)
    assert bootstrap_ratio_ci(a, b) == bootstrap_ratio_ci(a, b) == bootstrap_ratio_ci(a, b, resamples=2000, seed=0)
    assert bootstrap_median_ci(a) == bootstrap_median_ci(a) == bootstrap_median_ci(a, resamples=2000, seed=0)


def test_compare_samples_rows_are_the_keys_of_both_sides_significant_below_alpha_only():
    a, b = [1.0, 2, 3, 4], [5.0, 6, 7, 8]
    rows = compare_samples({"both": a, "only a": a}, {"both": b, "only b": b}, "us")
    assert [r.config for r in rows] == ["both"]
    p = rows[0].p_value  # 2 / C(8, 4): the smallest p of 4 against 4
    assert p == mann_whitney_p(a, b) and rows[0].significant
    (at,) = compare_samples({"x": a}, {"x": b}, "us", alpha=p)  # p < alpha, not p <= alpha
    assert not at.significant


def test_flags_parse_as_cli11_reads_them():
    assert parse_flags(["-n200", "--collective=allreduce", "-b", "8", "--no-output", "--root", "-1"], "dtune-comm") == {
        "--iters": "200",
        "--collective": "allreduce",
        "--minbytes": "8",
        "--no-output": "",
        "--root": "-1",
    }
    env = {
        "OMPI_MCA_btl": "self,tcp",
        "OMPI_MCA_ess_base_jobid": "1",
        "PMIX_NAMESPACE": "x",
        "PMIX_MCA_gds": "hash",
        "SLURM_JOB_ID": "7",
        "NCCL_ALGO": "Ring",
        "DTUNE_BIN_DIR": "/b",
    }
    assert settings_env(env) == {"OMPI_MCA_btl": "self,tcp", "PMIX_MCA_gds": "hash", "NCCL_ALGO": "Ring"}


# dtune-comm files: real layout and launcher environment, fixed times.


def fixed_times(path: Path, scale=lambda point: 1.0):
    """Replace every comm run's time_us [P, S, R, I] with fixed values: iteration i of size s takes
    (10 + s) * (1 + i / 1000) us on its slowest rank (a fixed permutation of i, other ranks 1% less),
    times scale(point id or None)."""
    with h5py.File(path, "r+") as f:
        for g in f["runs"].values():
            if g.attrs["benchmark"] != "comm":
                continue
            t = g["time_us"]
            shape = t.shape  # (P, S, R, I)
            it = 1 + np.random.default_rng(7).permutation(shape[3]) / 1000
            v = (10.0 + np.arange(shape[1]))[None, :, None, None] * it[None, None, None, :] * np.ones(shape)
            v[:, :, 1:, :] *= 0.99
            pid = g.attrs.get("point_id")
            t[...] = v * scale(pid.decode() if isinstance(pid, bytes) else pid)


def launch_comm(out: Path, btl: str):
    cmd = (
        mpirun_prefix(2) + ["-x", f"OMPI_MCA_btl={btl}", str(bin_dir() / "dtune-comm")] + COMM_ARGS + ["--output", out]
    )
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    fixed_times(out)


@pytest.fixture(scope="module")
def comm_files(tmp_path_factory):
    """shm1, shm2: two launches of one configuration; tcp: the same flags over TCP (times 1.5);
    tcp_slow: tcp 10% slower."""
    if not (bin_dir() / "dtune-comm").exists():
        pytest.fail(f"{bin_dir() / 'dtune-comm'} does not exist: build first (scripts/setup.sh)")
    d = tmp_path_factory.mktemp("cmp")
    for name, btl in (("shm1", "self,vader"), ("shm2", "self,vader"), ("tcp", "self,tcp")):
        launch_comm(d / f"{name}.h5", btl)
    with h5py.File(d / "tcp.h5", "r+") as f:
        for g in f["runs"].values():
            g["time_us"][...] = g["time_us"][()] * 1.5
    shutil.copy(d / "tcp.h5", d / "tcp_slow.h5")
    with h5py.File(d / "tcp_slow.h5", "r+") as f:
        for g in f["runs"].values():
            g["time_us"][...] = g["time_us"][()] * 1.10
    for side, names in (("a", ["shm1", "tcp"]), ("b", ["shm2", "tcp_slow"])):
        (d / side).mkdir()
        for n in names:
            shutil.copy(d / f"{n}.h5", d / side / f"{n}.h5")
    return d


def test_two_launches_match_and_an_env_setting_splits(comm_files):
    # A: shm1 + tcp; B: shm2 (another launch: new job id, PMIx namespace, ...) + tcp 10% slower.
    r = dtune("compare", comm_files / "a", comm_files / "b")
    assert r.returncode == 0, r.stderr
    rows = table(r.stdout)
    assert "only in" not in r.stdout, r.stdout
    shm = [line for line in rows if "OMPI_MCA_btl=self,vader" in line]
    tcp = [line for line in rows if "OMPI_MCA_btl=self,tcp" in line]
    assert len(shm) == len(tcp) == ROWS_PER_RUN and len(rows) == 2 * ROWS_PER_RUN, r.stdout
    assert all(" ~ " in line for line in shm) and all("+10.0%" in line for line in tcp), r.stdout
    # One sample per iteration: n = 9 + 9, not ranks x iterations.
    assert all(" 9+9 " in line for line in rows), r.stdout
    assert dtune("compare", comm_files / "a", comm_files / "b", "--fail-on-regression", 5).returncode == 1
    assert dtune("compare", comm_files / "a", comm_files / "b", "--fail-on-regression", 20).returncode == 0


def test_an_unmatched_setting_is_listed_not_pooled(comm_files):
    r = dtune("compare", comm_files / "shm1.h5", comm_files / "tcp.h5")
    assert r.returncode == 2 and "no configuration appears in both" in r.stderr, r.stderr
    r = dtune("compare", comm_files / "a", comm_files / "shm2.h5")
    assert r.returncode == 0, r.stderr
    assert len(table(r.stdout)) == ROWS_PER_RUN and f"# only in A ({ROWS_PER_RUN}, not compared):" in r.stdout
    assert "only in B" not in r.stdout


def test_same_files_are_all_unchanged(comm_files):
    r = dtune("compare", comm_files / "a", comm_files / "a", "--fail-on-regression", 0)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = table(r.stdout)
    assert len(rows) == 2 * ROWS_PER_RUN and all(" ~ " in line and " 1.000 " in line for line in rows), r.stdout


def test_cli_bad_input_exits_2(tmp_path):
    r = dtune("compare", tmp_path / "missing.h5", tmp_path / "missing.h5")
    assert r.returncode == 2 and "error" in r.stderr
    r = dtune("compare", tmp_path, tmp_path, "--alpha", "5")
    assert r.returncode == 2 and "--alpha" in r.stderr


# A merged sweep: two points with the same flags and different topology presets, each repeated.

SWEEP = """sweeps:
  - name: cmp
    binary: dtune-comm
    args: [{args}]
    topology: [mpi-shm, mpi-tcp]
    repeats: 2
    launch: {{ranks: 2}}
"""


@pytest.fixture(scope="module")
def merged(tmp_path_factory):
    d = tmp_path_factory.mktemp("sweep")
    (d / "cmp.yaml").write_text(SWEEP.format(args=", ".join(f'"{a}"' for a in COMM_ARGS)))
    env = {**os.environ, "DTUNE_BIN_DIR": str(bin_dir())}
    for cmd in (
        ["sweep", "run", d / "cmp.yaml", "--out", d / "s"],
        ["sweep", "merge", d / "cmp.yaml", "--out", d / "s"],
    ):
        r = subprocess.run(DTUNE + [str(c) for c in cmd], capture_output=True, text=True, timeout=600, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
    with h5py.File(d / "s" / "merged.h5", "r") as f:
        tcp = {pid for pid, g in f["points"].items() if "self,tcp" in g.attrs["point"]}
    assert len(tcp) == 2  # two repeats
    fixed_times(d / "s" / "merged.h5")
    shutil.copy(d / "s" / "merged.h5", d / "slow.h5")
    fixed_times(d / "slow.h5", lambda pid: 1.10 if pid in tcp else 1.0)
    return d


def test_merged_sweep_one_row_per_point_and_only_the_slow_point_flagged(merged):
    r = dtune("compare", merged / "s" / "merged.h5", merged / "s" / "merged.h5")
    assert r.returncode == 0, r.stderr
    rows = table(r.stdout)
    # Two points (mpi-shm, mpi-tcp) of ROWS_PER_RUN rows; the repeats of a point pool (9 + 9 each).
    assert len(rows) == 2 * ROWS_PER_RUN and all(" ~ " in line and " 18+18 " in line for line in rows), r.stdout
    r = dtune("compare", merged / "s" / "merged.h5", merged / "slow.h5")
    rows = table(r.stdout)
    flagged = [line for line in rows if "+10.0%" in line]
    assert len(flagged) == ROWS_PER_RUN and all("OMPI_MCA_btl=self,tcp" in line for line in flagged), r.stdout
    assert all(" ~ " in line for line in rows if line not in flagged), r.stdout


# dtune-train files built in its layout (results/SCHEMA.md, benchmarks/train/train_results.cc).

STEPS = 1000 + np.arange(12, dtype=float)  # step 0: warm-up; 11 measured steps, all distinct
CMD = "/x/dtune-train --model resnet18 --width 16 --image-size 32 --batch 8 --steps 11 --warmup-steps 1"


def test_train_runs_differing_in_workers_compression_or_width_are_separate_rows(tmp_path):
    slow = (STEPS + 2) * 1.10
    train_file(
        tmp_path / "a.h5",
        [(STEPS, None, {}), (STEPS + 1, None, {"workers": 2}), (STEPS + 2, None, {"compression": "bf16"})],
        CMD,
    )
    train_file(
        tmp_path / "b.h5",
        [(STEPS, None, {}), (STEPS + 1, None, {"workers": 2}), (slow, None, {"compression": "bf16"})],
        CMD.replace("--steps 11", "--steps 11 --seed 3"),
    )
    train_file(tmp_path / "w.h5", [(STEPS, None, {})], CMD.replace("--width 16", "--width 32"))
    r = dtune("compare", tmp_path / "a.h5", tmp_path / "b.h5")
    rows = table(r.stdout)
    assert r.returncode == 0 and len(rows) == 3, r.stdout + r.stderr
    (flagged,) = [line for line in rows if "+10.0%" in line]
    assert "compression=bf16" in flagged and " 11+11 " in flagged, r.stdout
    assert sum("workers=2" in line for line in rows) == 1, r.stdout
    # --width is recorded only on the command line: 16 and 32 stay apart.
    r = dtune("compare", tmp_path / "a.h5", tmp_path / "w.h5")
    assert r.returncode == 2, r.stdout
    (tmp_path / "d").mkdir()
    for n in ("a.h5", "w.h5"):
        shutil.copy(tmp_path / n, tmp_path / "d" / n)
    r = dtune("compare", tmp_path / "d", tmp_path / "d")
    rows = table(r.stdout)
    assert len(rows) == 4 and sum("--width=32" in line for line in rows) == 1 and all(" ~ " in line for line in rows), (
        r.stdout
    )


def test_runs_differing_in_shard_are_never_pooled_and_ddp_matches_older_files(tmp_path):
    """--shard zero1 and zero2 each keep their own row (the run's `shard` attribute decides, however
    the flag was given: on the command line or as DTUNE_TRAIN_SHARD); DDP pools whether a file
    records shard none and gathers (or reduce-scatters) 0 bytes, with or without --shard none on its
    command line, or was written before the attribute existed (no `shard`: a DDP run)."""
    d = tmp_path / "d"
    d.mkdir()
    train_file(d / "old.h5", [(STEPS, None, {})], CMD)
    ddp = {"shard": "none", "gathered_bytes_per_step": 0, "reduce_scattered_bytes_per_step": 0}
    train_file(d / "ddp.h5", [(STEPS, None, ddp)], CMD + " --shard none")
    zero1 = {"shard": "zero1", "gathered_bytes_per_step": 23379024}
    train_file(d / "zero1.h5", [(STEPS, None, zero1)], CMD + " --shard zero1")
    zero2 = {"shard": "zero2", "gathered_bytes_per_step": 23379024, "reduce_scattered_bytes_per_step": 23379024}
    train_file(d / "zero2.h5", [(STEPS, None, zero2)], CMD, env={"DTUNE_TRAIN_SHARD": "zero2"})
    c = compare_results([d], [d])
    rows = {r.config.split()[-1]: (r.n_a, r.n_b) for r in c.rows}
    assert rows == {"shard=none": (22, 22), "shard=zero1": (11, 11), "shard=zero2": (11, 11)}, [
        r.config for r in c.rows
    ]
    assert not c.only_a and not c.only_b


# dtune-train's model shape flags (the `mo.` options of benchmarks/train/options.cc): recorded only
# on the command line, never as run attributes, so each one alone must keep two runs apart.
SHAPE_FLAGS = re.findall(r'add_option\("(--[a-z-]+)", mo\.', (REPO / "benchmarks/train/options.cc").read_text())


def test_the_shape_flags_are_read_from_the_binary():
    assert {"--width", "--image-size", "--num-classes", "--context", "--vocab", "--layers"} <= set(SHAPE_FLAGS)


@pytest.mark.parametrize("flag", SHAPE_FLAGS)
def test_runs_differing_in_one_shape_flag_are_never_pooled(tmp_path, flag):
    # Two files of one configuration but for `flag` (2 against 4), both in A and in B: two rows of
    # 11 + 11 steps, one per value, never one row of 22 + 22.
    d = tmp_path / "d"
    d.mkdir()
    for value in (2, 4):
        train_file(d / f"v{value}.h5", [(STEPS, None, {})], f"{CMD} {flag} {value}")
    c = compare_results([d], [d])
    assert sorted(r.config.split()[-1] for r in c.rows) == [f"{flag}=2", f"{flag}=4"], [r.config for r in c.rows]
    assert all((r.n_a, r.n_b) == (11, 11) for r in c.rows)


def test_train_step_samples_has_its_columns_with_or_without_train_runs(tmp_path):
    """One row per measured step, columns file, run, step, total_ms, also when the results hold no
    dtune-train run (a sweep's objective and `dtune report` read total_ms of whatever comes back)."""
    cols = ["file", "run", "step", "total_ms"]
    none = train_step_samples(write_comm_results(tmp_path / "comm"))
    assert none.empty and list(none.columns) == cols
    train_file(tmp_path / "t.h5", [(STEPS, None, {})], CMD)
    steps = train_step_samples(tmp_path / "t.h5")
    assert list(steps.columns) == cols and len(steps) == len(STEPS) - 1  # the warm-up step left out


def test_profiled_steps_are_left_out(tmp_path):
    # B: the same steps with a --profile-steps 4:3 window inserted, its steps ten times slower;
    # they do not count, so B's median is A's.
    slowed = np.concatenate([STEPS[:4], STEPS[4:7] * 10, STEPS[4:]])
    window = np.zeros(len(slowed), int)
    window[4:7] = 1
    train_file(tmp_path / "a.h5", [(STEPS, None, {})], CMD)
    train_file(
        tmp_path / "b.h5", [(slowed, window, {})], CMD.replace("--steps 11", "--steps 14") + " --profile-steps 4:3"
    )
    r = dtune("compare", tmp_path / "a.h5", tmp_path / "b.h5", "--fail-on-regression", 0)
    rows = table(r.stdout)
    assert r.returncode == 0 and len(rows) == 1, r.stdout + r.stderr
    med = float(np.median(STEPS[1:]))
    assert rows[0].count(f"{med:.3f}ms") == 2 and " ~ " in rows[0] and " 11+11 " in rows[0], r.stdout


# One sample per step or iteration, from ranks that differ unevenly: the slowest rank is a different
# one from step to step, so a sample of rank 0 alone, of the mean, the median or the fastest of the
# ranks, or every rank pooled as samples, each differs from the documented one (doc/reports.md).

# A run of 3 ranks, 8 steps: (S, R) totals in ms. Step 0 is the warm-up, step 3 inside a
# --profile-steps window; the slowest rank of the others is 1, 2, 0, 1, 2, 1.
UNEVEN_MS = np.array(
    [[100, 90, 80], [10, 13, 11], [12, 10, 17], [50, 60, 70], [20, 14, 15], [9, 16, 10], [11, 12, 30], [14, 18, 15]],
    float,
)
UNEVEN_PROFILED = [0, 0, 0, 1, 0, 0, 0, 0]
UNEVEN_SLOWEST = [13.0, 17.0, 20.0, 16.0, 30.0, 18.0]  # by hand: steps 1, 2, 4, 5, 6, 7, max over ranks


def uneven_train(path: Path, *totals) -> None:
    """A dtune-train file of one configuration on 3 ranks, one run group per (S, R) totals."""
    runs = [(np.ones(len(t)), UNEVEN_PROFILED, {"rank_factors": t}) for t in totals]
    train_file(path, runs, CMD + " --profile-steps 3:1", hosts=("h0", "h1", "h2"))


def test_a_train_sample_is_each_measured_steps_slowest_rank(tmp_path):
    uneven_train(tmp_path / "a.h5", UNEVEN_MS)
    steps = train_step_samples(tmp_path / "a.h5")
    assert steps.step.tolist() == [1, 2, 4, 5, 6, 7] and steps.total_ms.tolist() == UNEVEN_SLOWEST
    # B: rank 2 twice as slow in one run, a second run (a repeat) as A; the repeats pool.
    # By hand: the first run's samples max(10, 13, 22) = 22, 34, 30, 20, 60, 30; pooled with A's,
    # 13 16 17 18 20 20 | 22 30 30 30 34 60: median 21. A's median (17 + 18) / 2 = 17.5.
    slow2 = UNEVEN_MS * [1, 1, 2]
    uneven_train(tmp_path / "b.h5", slow2, UNEVEN_MS)
    assert sorted(train_step_samples(tmp_path / "b.h5").total_ms) == sorted(
        [22.0, 34.0, 30.0, 20.0, 60.0, 30.0] + UNEVEN_SLOWEST
    )
    (row,) = compare_results(tmp_path / "a.h5", tmp_path / "b.h5").rows
    assert (row.n_a, row.n_b, row.median_a, row.median_b) == (6, 12, 17.5, 21.0)
    assert row.ratio == pytest.approx(21.0 / 17.5)


def uneven_comm(path: Path, scale=(1.0, 1.0, 1.0, 1.0)) -> None:
    """A dtune-comm file (4 ranks, one 64-byte allreduce, 5 timed iterations) whose ranks' times
    are uneven: in-place as below, rank r times scale[r]; out-of-place three times that. Rank 3 did
    not run iteration 2 (NaN)."""
    with h5py.File(path, "w") as f:
        _root(f, "dtune-comm")
        _provenance(f, 4, {"NCCL_ALGO": "Ring"})
        _run_group(f.create_group("runs"), "0000-allreduce", "allreduce", "float32", [64], 4, [5.0])
        t = np.array([[5, 7, 6, 4], [9, 3, 3, 3], [4, 4, 8, np.nan], [6, 6, 6, 12], [2, 11, 5, 5]], float).T
        t = t * np.asarray(scale)[:, None]  # (R, I)
        g = f["runs/0000-allreduce"]
        del g["time_us"]
        g["time_us"] = np.stack([3 * t, t])[:, None]  # (P, S, R, I): out-of-place, in-place


def test_a_comm_sample_is_each_iterations_slowest_rank_and_an_iteration_a_rank_missed_is_left_out(tmp_path):
    uneven_comm(tmp_path / "a.h5")
    it = comm_iteration_samples(tmp_path / "a.h5")
    inplace = it[it.placement == "in-place"]
    # By hand: iterations 0, 1, 3, 4 (rank 3 missed 2), max over ranks.
    assert inplace.iteration.tolist() == [0, 1, 3, 4] and inplace.time_us.tolist() == [7.0, 9.0, 12.0, 11.0]
    assert it[it.placement == "out-of-place"].time_us.tolist() == [21.0, 27.0, 36.0, 33.0]
    # B: two launches, rank 3 1.5 and 3 times as slow: in-place samples max(5, 7, 6, 6) = 7, 9,
    # 18, 11 and 12, 9 (rank 0), 36, 15, pooled: 7 9 9 11 | 12 15 18 36, median 11.5; A's median
    # (9 + 11) / 2 = 10. Out-of-place: three times each.
    uneven_comm(tmp_path / "b1.h5", (1.0, 1.0, 1.0, 1.5))
    uneven_comm(tmp_path / "b2.h5", (1.0, 1.0, 1.0, 3.0))
    c = compare_results(tmp_path / "a.h5", [tmp_path / "b1.h5", tmp_path / "b2.h5"])
    rows = {r.config.split()[3]: r for r in c.rows}
    r = rows["in-place"]
    assert (r.n_a, r.n_b, r.median_a, r.median_b, r.unit) == (4, 8, 10.0, 11.5, "us")
    r = rows["out-of-place"]
    assert (r.n_a, r.n_b, r.median_a, r.median_b) == (4, 8, 30.0, 34.5)


def test_real_train_runs_of_different_lengths_match(tmp_path):
    # Two real dtune-train runs of one configuration, one longer: how far a run got (steps_written,
    # loader batches) and other result attributes must not split the row.
    exe = str(bin_dir() / "dtune-train")
    base = ["--model", "gpt2-tiny", "--context", "16", "--vocab", "128", "--batch", "2", "--threads", "1"]
    for name, steps in (("a.h5", "3"), ("b.h5", "5")):
        r = subprocess.run(
            [exe, *base, "--steps", steps, "--warmup-steps", "1", "--output", str(tmp_path / name)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stderr
    r = dtune("compare", tmp_path / "a.h5", tmp_path / "b.h5")
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith("gpt2-tiny")]
    assert len(rows) == 1, r.stdout
    assert "steps_written" not in rows[0] and "only in" not in r.stdout, r.stdout


# What is a setting: only settings define a configuration, never a result (issue 60).

# The writers of comm and train run groups' attributes (their configuration, results and status).
WRITERS = {
    "comm": ["benchmarks/comm/comm_results.cc"],
    "train": ["train/step_log.cc", "benchmarks/train/train_results.cc"],
}


def written_attrs(benchmark: str) -> set:
    """Every attribute name the binary's writers give a run group, with dtune sweep merge's
    (sweeps/dtune_sweep/point_copy.py) and, for train, the data summary's (train/config.h)."""
    names = {"point", "point_id"}
    config_h = (REPO / "train/config.h").read_text()
    for path in WRITERS[benchmark]:
        text = (REPO / path).read_text()
        names |= set(re.findall(r'write_attr\(\s*[^,"]+,\s*"(\w+)"\s*,', text))
        # A name per mesh axis, written in a loop over them: "mesh_" + to_string(a), a over
        # kMeshAxisNames (train/config.h).
        for prefix in re.findall(r'write_attr\(\s*[^,"]+,\s*"(\w+)"\s*\+\s*to_string\(', text):
            axes = re.search(r"kMeshAxisNames\[\] = \{(.*?)\};", config_h, re.S)
            names |= {prefix + axis for axis in re.findall(r'"(\w+)"', axes.group(1))}
    if benchmark == "train":
        block = re.search(r"kDataSummaryFields = \{(.*?)\};", config_h, re.S)
        names |= set(re.findall(r'"(\w+)"', block.group(1)))
    return names


@pytest.mark.parametrize("benchmark", ["comm", "train"])
def test_every_attribute_the_writers_write_is_a_setting_or_a_result(benchmark):
    # An attribute added to a writer must be classified (identity.py) before this passes: a
    # setting in SETTING_ATTRS, or a result in IGNORED_ATTRS; never both, and no stale setting.
    written = written_attrs(benchmark)
    settings = SETTING_ATTRS[benchmark]
    assert len(written) > 15 and {"benchmark", "status"} <= written
    assert not settings & IGNORED_ATTRS
    assert written - settings - IGNORED_ATTRS == set()
    assert settings <= written


def test_results_never_split_a_configuration(tmp_path):
    """Two runs identical in settings whose results differ in every attribute that is not a
    setting (MFU's peak rejected in one: mfu_valid 0 and the rejected peaks, MFU NaN; every other
    result; one a later version adds) are one configuration: one row, their steps paired."""
    train_file(tmp_path / "a.h5", [(STEPS, None, {"mfu_valid": 1, "mfu_rejected_peaks": "", "mfu": 0.4})], CMD)
    results = {k: 7 for k in IGNORED_ATTRS - {"status", "point", "point_id", "warmup_steps"}}
    rejected = {
        "mfu_valid": 0,
        "mfu_rejected_peaks": "datasheet (H100 SXM bf16): 989 TFLOP/s below the achieved 1210 TFLOP/s",
        "mfu": float("nan"),
        "a_result_added_later": 3.5,
    }
    train_file(tmp_path / "b.h5", [(STEPS, None, {**results, **rejected})], CMD)
    c = compare_results(tmp_path / "a.h5", tmp_path / "b.h5")
    assert [(r.n_a, r.n_b) for r in c.rows] == [(11, 11)] and not c.only_a and not c.only_b, (c.only_a, c.only_b)


# Which differences keep two runs apart, one at a time, against lists written out here by hand from
# the writers (benchmarks/comm/comm_results.cc, train/step_log.cc, benchmarks/*/options.cc) and the
# rule of doc/reports.md (settings, flags, environment settings and the launch shape count; results,
# sample counts, output paths, seeds and the launcher's bookkeeping do not), never from
# identity.py's own lists, so that a name moved to the wrong list is seen.
COMM_SETTINGS = ["collective", "backend", "algorithm", "mpi_progress", "dtype", "op", "root", "blocking"]
COMM_SETTINGS += ["load_threads", "gap_us"]
TRAIN_SETTINGS = ["model", "batch", "batch_auto", "accum_steps", "global_batch", "precision", "tf32"]
TRAIN_SETTINGS += ["weights_dtype", "optimizer", "lr", "device", "backend", "reduce_algo", "overlap", "bucket_mb"]
TRAIN_SETTINGS += ["first_bucket_mb", "compression", "local_sgd_every", "shard", "reshard_after_forward"]
TRAIN_SETTINGS += ["shard_unit", "shard_prefetch", "channels_last", "threads", "world_size", "data", "workers"]
TRAIN_SETTINGS += ["prefetch", "decode", "fast_decode", "cache_dir", "pipeline_stages", "micro_batches"]
TRAIN_SETTINGS += ["schedule", "virtual_stages", "pipeline_layout", "partition", "stage_pieces"]
COMM_RESULTS = ["status", "message", "iters", "warmup_iters", "check_iters", "time_mode", "busbw_factor"]
COMM_RESULTS += ["fit_alpha_us", "fit_busbw_gbps", "fit_r2", "point_id", "point"]
TRAIN_RESULTS = ["status", "message", "steps", "warmup_steps", "throughput_steps", "steps_written"]
TRAIN_RESULTS += ["samples_per_s", "tokens_per_s", "step_time_p50_ms", "step_time_p90_ms", "skipped_steps"]
TRAIN_RESULTS += ["training_flops_per_sample", "alt_training_flops_per_sample", "tokens_per_sample"]
TRAIN_RESULTS += ["flops_formula", "alt_flops_formula", "mfu", "alt_mfu", "mfu_valid", "mfu_rejected_peaks"]
TRAIN_RESULTS += ["peak_tflops", "peak_source", "memory_source", "peak_memory_bytes", "parameters"]
TRAIN_RESULTS += ["gathered_bytes_per_step", "reduce_scattered_bytes_per_step", "local_sgd_final_average"]
TRAIN_RESULTS += ["data_description", "data_samples", "data_bad_samples", "data_bytes", "data_requests"]
TRAIN_RESULTS += ["data_retries", "data_fetch_ms", "data_decode_ms", "data_wait_ms", "data_jpeg_ms"]
TRAIN_RESULTS += ["data_coef_bytes", "data_batches", "data_undecodable", "data_truncated", "cache_hits"]
TRAIN_RESULTS += ["cache_misses", "cache_hit_bytes", "cache_miss_bytes", "cache_evictions", "point_id", "point"]


def setting_attrs(benchmark: str) -> dict:
    """Every setting attribute of a run of `benchmark`, as its writer records it."""
    if benchmark == "comm":
        return {"benchmark": "comm", "collective": "allreduce", "backend": "mpi", "algorithm": "flat"} | {
            "mpi_progress": "call", "dtype": "float32", "op": "sum", "root": -1, "blocking": 0, "load_threads": 0,
            "gap_us": 0.0,
        }  # fmt: skip
    attrs = config_attrs(8, 2, shard="zero3", reshard_after_forward=1, shard_unit="block", shard_prefetch=1)
    attrs.update(decode="roi", fast_decode=0, reduce_algo="flat", pipeline_stages=1, micro_batches=1)
    attrs.update(schedule="1f1b", virtual_stages=1, pipeline_layout="within-node", partition="flops")
    attrs.update(stage_pieces="blocks")
    return attrs


def apart(a: dict, b: dict, by_point: bool = False) -> bool:
    """Whether runs a and b (keywords of _run) are two configurations."""
    return run_identity(_run(**a), by_point) != run_identity(_run(**b), by_point)


@pytest.mark.parametrize(
    "benchmark,name", [("comm", n) for n in COMM_SETTINGS] + [("train", n) for n in TRAIN_SETTINGS]
)
def test_each_setting_alone_splits_a_configuration(benchmark, name):
    attrs = setting_attrs(benchmark)
    assert set(attrs) == {"benchmark", *(COMM_SETTINGS if benchmark == "comm" else TRAIN_SETTINGS)}
    other = {**attrs, name: "/scratch/c" if name == "cache_dir" else "changed"}
    assert apart({"benchmark": benchmark, "attrs": attrs}, {"benchmark": benchmark, "attrs": other})
    # the same value written as another type (an older writer's int64 against a string) still matches
    same = {**attrs, name: str(attrs[name])}
    assert not apart({"benchmark": benchmark, "attrs": attrs}, {"benchmark": benchmark, "attrs": same})


@pytest.mark.parametrize("benchmark,name", [("comm", n) for n in COMM_RESULTS] + [("train", n) for n in TRAIN_RESULTS])
def test_each_result_alone_never_splits_a_configuration(benchmark, name):
    attrs = setting_attrs(benchmark)
    a, b = {**attrs, name: 1}, {**attrs, name: "2.5 or any other"}
    assert not apart({"benchmark": benchmark, "attrs": a}, {"benchmark": benchmark, "attrs": b})
    assert not apart({"benchmark": benchmark, "attrs": attrs}, {"benchmark": benchmark, "attrs": b})


def test_a_cache_counts_by_whether_one_was_used_not_where():
    attrs = setting_attrs("train")
    here, there = {**attrs, "cache_dir": "/scratch/c"}, {**attrs, "cache_dir": "/dev/shm/c"}
    assert not apart({"attrs": here}, {"attrs": there}) and apart({"attrs": here}, {"attrs": attrs})


# Environment variables (provenance /provenance/env), each alone: a setting of a library splits,
# what the launcher or Slurm set for its own bookkeeping (present in one launch only) never does.
ENV_SETTINGS = ["NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_CTAS", "NCCL_SOCKET_IFNAME", "UCX_TLS", "OMPI_MCA_btl"]
ENV_SETTINGS += [
    "OMPI_MCA_pml",
    "OMPI_MCA_mpi_oversubscribe",
    "OMP_NUM_THREADS",
    "PMIX_MCA_gds",
    "CUDA_VISIBLE_DEVICES",
]
ENV_BOOKKEEPING = ["OMPI_MCA_orte_ess_jobid", "OMPI_MCA_orte_hnp_uri", "OMPI_MCA_ess_base_jobid"]
ENV_BOOKKEEPING += ["OMPI_MCA_ess_base_vpid", "OMPI_MCA_initial_wdir", "OMPI_COMM_WORLD_RANK"]
ENV_BOOKKEEPING += ["OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_FILE_LOCATION", "OMPI_COMMAND", "OMPI_ARGV"]
ENV_BOOKKEEPING += ["OMPI_FIRST_RANKS", "OMPI_NUM_APP_CTX", "OMPI_APP_CTX_NUM_PROCS", "OMPI_UNIVERSE_SIZE"]
ENV_BOOKKEEPING += ["OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "PMIX_NAMESPACE", "PMIX_RANK"]
ENV_BOOKKEEPING += ["PMIX_SERVER_URI4", "SLURM_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_NODELIST", "DTUNE_BIN_DIR"]
ENV_BOOKKEEPING += ["DTUNE_MPIRUN", "OMPI_MCA_ess", "OMPI_MCA_pmix", "OMPI_MCA_shmem_RUNTIME_QUERY_hint"]
ENV_BOOKKEEPING += [
    "OMPI_MCA_rmaps_base_oversubscribe",
    "PMIX_MCA_psec",
    "PMIX_MCA_mca_base_component_show_load_errors",
]


@pytest.mark.parametrize("benchmark", ["comm", "train"])
def test_each_environment_setting_alone_splits_and_the_launchers_bookkeeping_never(benchmark):
    base = {"benchmark": benchmark, "attrs": setting_attrs(benchmark), "env": {"NCCL_DEBUG": "WARN"}}
    for name in ENV_SETTINGS:
        one, two = ({**base, "env": {**base["env"], name: v}} for v in ("a", "b"))
        assert apart(one, two) and apart(base, one), name
    for name in ENV_BOOKKEEPING:
        assert not apart(base, {**base, "env": {**base["env"], name: "1"}}), name


# Flags, each alone on one command line: a flag recorded only there splits; sample counts, outputs,
# seeds, deadlines and a flag recorded as an attribute (matched on the attribute: given or left at
# its default, the run did the same) never do, nor does the same flag through its environment
# fallback (DTUNE_COMM_X / DTUNE_TRAIN_X).
FLAGS_THAT_COUNT = {
    "comm": ["--mpi-buffers device", "--pattern fsdp", "--model gpt2-tiny", "--shard-unit 4MB"]
    + ["--reshard-after-forward 0", "--placement spread"],
    "train": ["--timing off", "--check-every 2", "--strict", "--memory-limit-mb 512", "--cache-mb 64"]
    + ["--cache-block-mb 4", "--width 32", "--debug-checksums c.txt"],
}
FLAGS_THAT_DO_NOT = {
    "comm": ["-b 8", "-e 64", "-i 8", "-f 2", "-n 9", "-w 2", "-c 0", "--minbytes=8", "--iters=9"]
    + ["--warmup_iters 2", "-a 0", "--format json", "--output o.h5", "--no-output", "--overwrite", "--timeout 60"]
    + ["-J out.json", "--output_file out.json", "-I 1", "--per_iter_timing 1", "-t 1", "-g 1"]
    + ["--collective allreduce", "-d float32", "--datatype float32", "-o sum", "-r 0", "-z 0", "--backend mpi"]
    + ["--algorithm flat", "--mpi-progress call", "--load-threads 0", "--gap-us 0"],
    "train": ["--steps 5", "--warmup-steps 2", "--seed 3", "--output o.h5", "--no-output", "--overwrite"]
    + ["--tensorboard tb", "--mllog m.log", "--profile-steps 3:1", "--profile-dir p", "--profile-top 5"]
    + ["--debug-dump d.pt", "--peak-tflops 100", "--peak-from datasheet", "--timeout 60"]
    + ["--model resnet18", "--batch 8", "--global-batch 16", "--accum-steps 1", "--precision fp32"]
    + ["--weights-dtype fp32", "--optimizer sgd", "--lr 0.1", "--threads 1", "--channels-last", "--device cpu"]
    + ["--backend mpi", "--bucket-mb 25", "--first-bucket-mb 1", "--overlap on", "--compression none"]
    + ["--local-sgd 0", "--reduce-algo flat", "--shard zero3", "--reshard-after-forward 1", "--shard-unit block"]
    + ["--shard-prefetch 1", "--data synthetic", "--workers 0", "--prefetch 2", "--decode roi", "--fast-decode 0"]
    + ["--cache-dir /scratch/c", "--pipeline-stages 1", "--micro-batches 1", "--schedule 1f1b"]
    + ["--virtual-stages 1", "--pipeline-layout within-node", "--partition flops", "--batch-sweep 8"],
}


@pytest.mark.parametrize("benchmark", ["comm", "train"])
def test_each_flag_alone_splits_or_never_as_its_kind(benchmark):
    binary = f"/x/dtune-{benchmark}"
    base = {"benchmark": benchmark, "attrs": setting_attrs(benchmark), "command_line": binary}
    prefix = f"DTUNE_{benchmark.upper()}_"
    for flag in FLAGS_THAT_COUNT[benchmark]:
        given = {**base, "command_line": f"{binary} {flag}"}
        name, _, value = flag.partition(" ")
        by_env = {**base, "env": {prefix + name[2:].upper().replace("-", "_"): value}}
        assert apart(base, given) and not apart(given, by_env), flag
    for flag in FLAGS_THAT_DO_NOT[benchmark]:
        assert not apart(base, {**base, "command_line": f"{binary} {flag}"}), flag
        name, _, value = flag.partition(" ")
        if name.startswith("--") and "=" not in name:
            env = {prefix + name[2:].upper().replace("-", "_"): value or "1"}
            assert not apart(base, {**base, "env": env}), (flag, env)


# The launch shape: the number of ranks of a plain run; a sweep point's ranks, nodes, ranks per
# node, arguments and exported variables each alone, never its sweep's name, repeat or id.
POINT = {"id": "p1", "sweep": "s", "repeat": 0, "args": ["--timing", "off"], "env": {"NCCL_PROTO": "LL"}}
POINT |= {"ranks": 4, "nodes": 2, "ranks_per_node": 2, "values": {"--timing": "off"}}


@pytest.mark.parametrize(
    "change,splits",
    [
        ({"ranks": 8}, True),
        ({"nodes": 1}, True),
        ({"ranks_per_node": 4}, True),
        ({"args": ["--timing", "on"]}, True),
        ({"args": ["--timing", "off", "--check-every", "2"]}, True),
        ({"env": {"NCCL_PROTO": "Simple"}}, True),
        ({"env": {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"}}, True),
        ({"sweep": "renamed", "id": "p9"}, False),
        ({"repeat": 3}, False),
        ({"args": ["--timing", "off", "--steps", "50", "--seed", "2"]}, False),
    ],
)
def test_each_part_of_a_sweep_point_alone_splits_or_never(change, splits):
    attrs = setting_attrs("train")
    a = {"attrs": attrs, "point": POINT, "env": {"NCCL_DEBUG": "WARN"}, "world_size": 4}
    assert apart(a, {**a, "point": POINT | change}, by_point=True) == splits


def test_the_number_of_ranks_splits_a_plain_run_and_a_point_is_read_by_its_definition():
    attrs = setting_attrs("comm")
    assert apart({"benchmark": "comm", "attrs": attrs}, {"benchmark": "comm", "attrs": attrs, "world_size": 4})
    # By point, the point's ranks count, not the file's world size nor its recorded command line.
    a = {"attrs": attrs, "benchmark": "comm", "point": POINT, "world_size": 4, "command_line": "/x/dtune-comm"}
    b = {**a, "world_size": 2, "command_line": "/x/dtune-comm --mpi-buffers device"}
    assert not apart(a, b, by_point=True) and apart(a, b, by_point=False)
    # The variables the file recorded count beside the point's exported ones (one set on the node).
    assert apart({**a, "env": {"NCCL_IB_HCA": "mlx5_0"}}, {**a, "env": {"NCCL_IB_HCA": "mlx5_1"}}, by_point=True)


# A gate with nothing valid to compare fails (issue 60): runs that did not end ok, non-finite steps.


@pytest.mark.parametrize("status", ["failed", "diverged", "timeout", "interrupted"])
def test_the_gate_fails_when_the_after_run_did_not_end_ok(tmp_path, status):
    # B: the same steps as A (no slowdown), but the run ended `status`. Its steps are compared and
    # the run named under the table; a gate never passes it.
    train_file(tmp_path / "a.h5", [(STEPS, None, {})], CMD)
    train_file(tmp_path / "b.h5", [(STEPS, None, {"status": status, "message": f"it {status} at step 7"})], CMD)
    named = f"#   B: {tmp_path / 'b.h5'} 0000-train-resnet18: status {status}: it {status} at step 7"
    r = dtune("compare", tmp_path / "a.h5", tmp_path / "b.h5", "--fail-on-regression", 5)
    assert r.returncode == 1 and len(table(r.stdout)) == 1 and named in r.stdout, r.stdout + r.stderr
    assert f"# did not end ok, not a measurement to pass: B: {tmp_path / 'b.h5'}" in r.stderr, r.stderr
    r = dtune("compare", tmp_path / "a.h5", tmp_path / "b.h5")
    assert r.returncode == 0 and " ~ " in table(r.stdout)[0] and named in r.stdout, r.stdout + r.stderr
    # A run that stopped before its first step (no steps): nothing to compare; the gate fails
    # naming it, and without the gate the refusal names it too.
    with h5py.File(tmp_path / "b.h5", "r+") as f:
        g = f["runs/0000-train-resnet18"]
        for name in list(g):
            del g[name]
    r = dtune("compare", tmp_path / "a.h5", tmp_path / "b.h5", "--fail-on-regression", 5)
    assert r.returncode == 1 and f"status {status}" in r.stderr, r.stdout + r.stderr
    r = dtune("compare", tmp_path / "a.h5", tmp_path / "b.h5")
    assert r.returncode == 2 and f"status {status}" in r.stderr, r.stdout + r.stderr


def test_non_finite_step_times_get_no_p_value_and_fail_the_gate(tmp_path):
    nan = np.full(len(STEPS), np.nan)
    train_file(tmp_path / "a.h5", [(STEPS, None, {})], CMD)
    train_file(tmp_path / "b.h5", [(nan, None, {})], CMD)
    assert math.isnan(mann_whitney_p(STEPS, nan)) and math.isnan(mann_whitney_p([1.0, np.inf], [2.0, 3.0]))
    r = dtune("compare", tmp_path / "a.h5", tmp_path / "b.h5", "--fail-on-regression", 5)
    assert r.returncode == 1 and "no finite sample in B" in r.stderr, r.stdout + r.stderr
    assert "0.000" not in r.stdout and "p =" not in r.stdout + r.stderr, r.stdout
    r = dtune("compare", tmp_path / "a.h5", tmp_path / "b.h5")
    assert r.returncode == 2 and "no finite sample in B" in r.stderr, r.stdout + r.stderr
    # Some steps not finite: the others are compared, and the table says how many were left out.
    some = STEPS.copy()
    some[[3, 5, 8]] = [np.nan, np.inf, np.nan]
    train_file(tmp_path / "b.h5", [(some, None, {})], CMD)
    r = dtune("compare", tmp_path / "a.h5", tmp_path / "b.h5", "--fail-on-regression", 5)
    (row,) = table(r.stdout)
    assert r.returncode == 0 and " 11+8 " in row, r.stdout + r.stderr
    assert "# left out, not finite (1):\n#   resnet18 fp32 batch 8: 3 of 11 samples in B not finite" in r.stdout


def test_the_gate_on_out_of_memory_runs(tmp_path):
    # The same batch out of memory on both sides is no failure; out of memory in B alone is.
    train_file(tmp_path / "a.h5", [(STEPS, None, {})], CMD, oom=[(64, 1 << 30)])
    train_file(tmp_path / "b.h5", [(STEPS, None, {})], CMD, oom=[(64, 1 << 30)])
    r = dtune("compare", tmp_path / "a.h5", tmp_path / "b.h5", "--fail-on-regression", 5)
    assert r.returncode == 0 and "status oom" in r.stdout and not r.stderr, r.stdout + r.stderr
    train_file(tmp_path / "b.h5", [(STEPS, None, {})], CMD, oom=[(32, 1 << 30)])
    r = dtune("compare", tmp_path / "a.h5", tmp_path / "b.h5", "--fail-on-regression", 5)
    assert r.returncode == 1 and "status oom" in r.stderr, r.stdout + r.stderr


# Google Benchmark JSON (dtune-micro --benchmark_format=json --benchmark_repetitions=N).


def gbench_json(path: Path, times: dict, unit="ns"):
    """A Google Benchmark JSON file: per benchmark one "iteration" row per repetition plus the
    aggregate rows Google Benchmark adds (which must not count as samples)."""
    rows = []
    for name, ts in times.items():
        for i, t in enumerate(ts):
            rows.append(
                {"name": name, "run_name": name, "run_type": "iteration", "repetitions": len(ts),
                 "repetition_index": i, "iterations": 1000, "real_time": t, "cpu_time": t, "time_unit": unit}
            )  # fmt: skip
        for agg in ("mean", "median", "stddev"):
            rows.append(
                {"name": f"{name}_{agg}", "run_name": name, "run_type": "aggregate", "aggregate_name": agg,
                 "real_time": 1e9, "cpu_time": 1e9, "time_unit": unit}
            )  # fmt: skip
    path.write_text(json.dumps({"context": {"date": "2026-12-01", "num_cpus": 2}, "benchmarks": rows}))
    return path


def test_compare_reads_two_google_benchmark_files(tmp_path):
    base = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 99.8]
    a = gbench_json(tmp_path / "a.json", {"BM_Same": base, "BM_Slower": base, "BM_OnlyA": base})
    b = gbench_json(tmp_path / "b.json", {"BM_Same": [t + 0.05 for t in base], "BM_Slower": [t * 1.1 for t in base]})
    r = dtune("compare", a, b)
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line for line in table(r.stdout)}
    assert set(rows) == {"BM_Same", "BM_Slower"}
    assert " ~ " in rows["BM_Same"]  # 7 + 7 samples, interleaved: not significant
    assert "+10.0%" in rows["BM_Slower"] and "7+7" in rows["BM_Slower"]  # aggregates not counted
    assert "100.000ns" in rows["BM_Slower"].replace(" ", "")
    assert "only in A (1" in r.stdout and "BM_OnlyA" in r.stdout
    # A regression gate as for results files.
    r = dtune("compare", a, b, "--fail-on-regression", "5")
    assert r.returncode == 1 and "BM_Slower" in r.stderr


# The same comparisons in the test process: what `dtune compare` prints, row by row.


def test_compare_results_pairs_comm_iterations_by_configuration(comm_files):
    c = compare_results(str(comm_files / "a"), str(comm_files / "b"))
    assert len(c.rows) == 2 * ROWS_PER_RUN and c.only_a == [] and c.only_b == []
    shm = [r for r in c.rows if "OMPI_MCA_btl=self,vader" in r.config]
    tcp = [r for r in c.rows if "OMPI_MCA_btl=self,tcp" in r.config]
    assert len(shm) == len(tcp) == ROWS_PER_RUN
    assert all(r.ratio == 1.0 and not r.significant for r in shm)
    assert all(r.ratio == pytest.approx(1.1) and r.significant and r.unit == "us" for r in tcp)
    assert all((r.n_a, r.n_b) == (9, 9) for r in c.rows)  # one sample per iteration, not per rank
    # Sizes in numeric order (8 before 64), each collective's rows together.
    labels = [r.config for r in shm]
    assert [lab.split()[:5] for lab in labels] == [
        [coll, "float32", op, place, size]
        for coll, op in (("allgather", "none"), ("allreduce", "sum"))
        for place in ("in-place", "out-of-place")
        for size in ("8", "64")
    ], labels
    assert regressions(c.rows, 5) == tcp and regressions(c.rows, 15) == []


def test_compare_results_labels_what_differs_and_lists_the_configurations_of_one_side(tmp_path):
    train_file(
        tmp_path / "a.h5",
        [(STEPS, None, {}), (STEPS + 1, None, {"workers": 2}), (STEPS + 2, None, {"compression": "bf16"})]
        + [(STEPS + 3, None, {"batch": 16})],
        CMD,
    )
    train_file(
        tmp_path / "b.h5",
        [(STEPS + 3, None, {"batch": 16}), (STEPS, None, {}), ((STEPS + 1) * 1.1, None, {"workers": 2})]
        + [(STEPS + 3, None, {"batch": 32}), (STEPS + 3, None, {"batch": 128})],
        CMD.replace("--steps 11", "--steps 11 --seed 3"),
    )
    c = compare_results(str(tmp_path / "a.h5"), str(tmp_path / "b.h5"))
    assert [r.config for r in c.rows] == [
        "resnet18 fp32 batch 8 compression=none workers=0",
        "resnet18 fp32 batch 8 compression=none workers=2",
        "resnet18 fp32 batch 16 compression=none workers=0",  # batch sizes in numeric order
    ]
    assert c.only_a == ["resnet18 fp32 batch 8 compression=bf16 workers=0"]
    assert c.only_b == [  # in numeric order
        "resnet18 fp32 batch 32 compression=none workers=0",
        "resnet18 fp32 batch 128 compression=none workers=0",
    ]
    assert c.alpha == 0.05
    same, slower, big = c.rows
    assert (same.ratio, same.significant, same.n_a, same.n_b, same.unit) == (1.0, False, 11, 11, "ms")
    assert slower.ratio == pytest.approx(1.1) and slower.significant
    assert regressions(c.rows, 5) == [slower] and regressions(c.rows, 10.5) == []


def test_format_table_layout():
    """The layout people and scripts read: the header, one line per row (`~` where not
    significant), the geometric mean of the ratios, then `#` lines (configurations of one side,
    rows whose sample counts can never reach p < alpha)."""
    rows = [
        Row("allreduce 8 B", "us", 10.0, 11.0, 1.1, 1.05, 1.15, 0.001, True, 8, 8),
        Row("x", "ms", 1234.5, 1234.5, 1.0, 0.9, 1.1, 0.7, False, 3, 2),
        Row("y", "ms", 2.0, 2.0, 1.0, 0.9, 1.1, 0.7, False, 3, 4),  # B has enough samples
        Row("z", "ms", 2.0, 2.0, 1.0, 0.9, 1.1, 0.7, False, 4, 3),
        Row("w", "ms", 2.0, 2.0, 1.0, 0.9, 1.1, 0.7, False, 8, 8),
        Row("v", "ms", 2.0, 2.2, 1.1, 1.05, 1.15, 0.01, True, 8, 3),
    ]
    assert format_table(rows, ["only a"], ["b1", "b2"]).splitlines() == [
        "config             A median      B median     delta       p          n      95% CI of B/A",
        "allreduce 8 B      10.000us      11.000us    +10.0%   0.001        8+8  [ 1.050,  1.150]",
        "x                1234.500ms    1234.500ms         ~   0.700        3+2  [ 0.900,  1.100]",
        "y                   2.000ms       2.000ms         ~   0.700        3+4  [ 0.900,  1.100]",
        "z                   2.000ms       2.000ms         ~   0.700        4+3  [ 0.900,  1.100]",
        "w                   2.000ms       2.000ms         ~   0.700        8+8  [ 0.900,  1.100]",
        "v                   2.000ms       2.200ms    +10.0%   0.010        8+3  [ 1.050,  1.150]",
        "geomean                                       +3.2%",
        "# only in A (1, not compared):",
        "#   only a",
        "# only in B (2, not compared):",
        "#   b1",
        "#   b2",
        "# need >= 4 samples to detect a difference at alpha level 0.05:",
        "#   x (n=3+2)",
    ]
    assert math.isnan(geomean_ratio([]))


def test_samples_needed_is_strict():
    # 4 + 4 fully separated give p = 2 / C(8, 4) = 2 / 70: not below an alpha of exactly that.
    assert samples_needed(2 / 70) == 5 and samples_needed(2 / 70 + 1e-12) == 4


# What makes two runs the same configuration (identity.py), on hand-made runs.


def test_flags_parse_values_bare_flags_and_negative_numbers():
    tokens = ["prog-arg", "--lr=1e-3", "--x=a=b", "--bare", "--neg", "-5", "-n", "-1", "-oSUM", "stray"]
    assert parse_flags(tokens, "dtune-comm") == {
        "--lr": "1e-3",
        "--x": "a=b",  # split at the first '='
        "--bare": "",
        "--neg": "-5",  # a negative number is a value, not a flag
        "--iters": "-1",
        "--op": "SUM",
    }
    # Short flags are dtune-comm's: dtune-train keeps the letter as written.
    assert parse_flags(["-n", "3", "--steps"], "dtune-train") == {"-n": "3", "--steps": ""}
    assert parse_flags(["-5", "--a", "--b", "x"], "dtune-comm") == {"--a": "", "--b": "x"}


def _run(benchmark="train", command_line="", env=None, attrs=None, world_size=2, point=None):
    return dict(
        benchmark=benchmark, command_line=command_line, env=env, attrs=attrs or {}, world_size=world_size, point=point
    )


def test_identity_of_a_run_from_its_command_line_environment_and_attributes():
    run = _run(
        command_line="/x/dtune-train --model m --timing off --check-every 2 --seed 3",
        env={
            "DTUNE_TRAIN_TIMING": "on",
            "DTUNE_TRAIN_MEMORY_LIMIT_MB": "512",
            "NCCL_ALGO": "Ring",
            "SLURM_JOB_ID": "7",
        },
        attrs={"model": "m", "batch": 8, "samples_per_s": 99.0, "cache_dir": "/scratch/c"},
    )
    assert run_identity(run, by_point=False) == {
        "model": "m",
        "batch": "8",
        "cache_dir": "yes",  # whether a cache was used, not where
        "shard": "none",  # a file from before --shard: DDP
        "reshard_after_forward": "1",  # written for zero3 runs only: the others take its default
        "shard_unit": "block",  # likewise
        "shard_prefetch": "1",
        "activation_checkpoint": "none",  # a file from before it kept every activation
        "sequence_parallel": "0",
        "stage_pieces": "blocks",
        "mesh_pp": "1",  # a file from before pipelines and the mesh: one stage,
        "mesh_tp": "1",  # no tensor parallelism,
        "mesh_order": "tp,pp,dp",  # the default order
        "np": "2",
        "--timing": "off",  # the command line wins over its environment fallback
        "--check-every": "2",
        "--memory-limit-mb": "512",  # DTUNE_TRAIN_MEMORY_LIMIT_MB, '_' read as '-'
        "NCCL_ALGO": "Ring",
    }
    assert run_identity(_run(attrs={"cache_dir": ""}, world_size=4), by_point=False) == {
        "cache_dir": "no",
        "shard": "none",
        "reshard_after_forward": "1",
        "shard_unit": "block",
        "shard_prefetch": "1",
        "activation_checkpoint": "none",  # a file from before it kept every activation
        "sequence_parallel": "0",
        "stage_pieces": "blocks",
        "mesh_pp": "1",
        "mesh_tp": "1",
        "mesh_order": "tp,pp,dp",
        "np": "4",
    }
    # dtune-comm: its prefix only, and --warmup-iters read as its underscore flag (ignored).
    comm = _run(
        benchmark="comm",
        command_line="/x/dtune-comm -b 8 --pattern fsdp --algorithm hierarchical",
        env={"DTUNE_COMM_WARMUP_ITERS": "5", "DTUNE_COMM_MPI_BUFFERS": "device", "DTUNE_TRAIN_STEPS": "4"},
    )
    # --algorithm is matched on its attribute.
    assert run_identity(comm, by_point=False) == {"np": "2", "--pattern": "fsdp", "--mpi-buffers": "device"}


def test_identity_of_a_sweep_point_is_its_definition():
    point = {"args": ["--timing", "off"], "env": {"NCCL_PROTO": "LL"}, "ranks": 4, "nodes": 2, "ranks_per_node": 2}
    run = _run(command_line="/x/dtune-train --timing on --other 1", env={"NCCL_ALGO": "Ring"}, point=point)
    assert run_identity(run, by_point=True) == {
        "shard": "none",
        "reshard_after_forward": "1",
        "shard_unit": "block",
        "shard_prefetch": "1",
        "activation_checkpoint": "none",  # a file from before it kept every activation
        "sequence_parallel": "0",
        "stage_pieces": "blocks",
        "mesh_pp": "1",
        "mesh_tp": "1",
        "mesh_order": "tp,pp,dp",
        "np": "4",
        "nodes": "2",
        "ranks_per_node": "2",
        "--timing": "off",
        "NCCL_ALGO": "Ring",
        "NCCL_PROTO": "LL",
    }
    assert run_identity(_run(point={}), by_point=True) == {
        "shard": "none",
        "reshard_after_forward": "1",
        "shard_unit": "block",
        "shard_prefetch": "1",
        "activation_checkpoint": "none",  # a file from before it kept every activation
        "sequence_parallel": "0",
        "stage_pieces": "blocks",
        "mesh_pp": "1",
        "mesh_tp": "1",
        "mesh_order": "tp,pp,dp",
        "np": "None",
        "nodes": "None",
        "ranks_per_node": "None",
    }


# The device mesh (issue 56): a train run's layout counts by its degrees and by its order only where
# the order places ranks differently, however it was spelt (--pipeline-layout, --mesh-order, --pp)
# and whether the file has the mesh_* attributes or only pipeline_stages and pipeline_layout.


def _mesh_attrs(dp, pp, tp, order):
    return {"world_size": dp * pp * tp, "mesh_dp": dp, "mesh_pp": pp, "mesh_tp": tp, "mesh_order": order}


@pytest.mark.parametrize(
    "dp,pp,tp,order_a,order_b,splits",
    [
        # dp and pp above 1: what counts is whether pp is inside dp (a pipeline on consecutive ranks).
        (2, 2, 1, "tp,pp,dp", "tp,dp,pp", True),
        (2, 2, 1, "tp,pp,dp", "pp,tp,dp", False),
        (2, 2, 1, "tp,pp,dp", "pp,dp,tp", False),
        (2, 2, 1, "tp,dp,pp", "dp,tp,pp", False),
        (2, 2, 1, "tp,dp,pp", "dp,pp,tp", False),
        (2, 2, 1, "pp,dp,tp", "dp,pp,tp", True),
        # one axis above 1 (or none): every order places ranks alike.
        (4, 1, 1, "tp,pp,dp", "dp,pp,tp", False),
        (4, 1, 1, "tp,pp,dp", "tp,dp,pp", False),
        (1, 2, 1, "tp,pp,dp", "tp,dp,pp", False),
        (1, 1, 1, "tp,pp,dp", "dp,tp,pp", False),
        # tensor parallelism (degree 1 only in dtune-train today): against dp, and against pp.
        (2, 1, 2, "tp,pp,dp", "dp,pp,tp", True),
        (2, 1, 2, "tp,pp,dp", "pp,tp,dp", False),
        (1, 2, 2, "tp,pp,dp", "pp,tp,dp", True),
        (1, 2, 2, "tp,pp,dp", "tp,dp,pp", False),
    ],
)
def test_the_mesh_order_splits_a_configuration_only_where_it_places_ranks_differently(
    dp, pp, tp, order_a, order_b, splits
):
    a = {"attrs": _mesh_attrs(dp, pp, tp, order_a), "world_size": dp * pp * tp}
    b = {**a, "attrs": _mesh_attrs(dp, pp, tp, order_b)}
    assert apart(a, b) == splits


def test_the_mesh_degrees_split_a_configuration():
    base = {"attrs": _mesh_attrs(4, 1, 1, "tp,pp,dp"), "world_size": 4}
    assert apart(base, {**base, "attrs": _mesh_attrs(2, 2, 1, "tp,pp,dp")})
    assert apart(base, {**base, "attrs": _mesh_attrs(2, 1, 2, "tp,pp,dp")})


@pytest.mark.parametrize(
    "old,new,splits",
    [
        # A file from before the mesh_* attributes against one with them: pipeline_layout is the order.
        ({"pipeline_stages": 2, "pipeline_layout": "within-node"}, _mesh_attrs(2, 2, 1, "tp,pp,dp"), False),
        ({"pipeline_stages": 2, "pipeline_layout": "across-nodes"}, _mesh_attrs(2, 2, 1, "tp,dp,pp"), False),
        ({"pipeline_stages": 2, "pipeline_layout": "within-node"}, _mesh_attrs(2, 2, 1, "tp,dp,pp"), True),
        ({"pipeline_stages": 2, "pipeline_layout": "across-nodes"}, _mesh_attrs(2, 2, 1, "pp,tp,dp"), True),
        ({}, _mesh_attrs(4, 1, 1, "tp,pp,dp"), False),  # before pipelines: one stage
        ({"pipeline_stages": 2}, _mesh_attrs(4, 1, 1, "tp,pp,dp"), True),
        # One stage: across-nodes places ranks as within-node does (it split them before the mesh).
        ({"pipeline_stages": 1, "pipeline_layout": "across-nodes"}, _mesh_attrs(4, 1, 1, "tp,pp,dp"), False),
        # Where the writer names the layout by its order (pipeline_layout "pp,dp,tp"), the order counts.
        ({"pipeline_stages": 2, "pipeline_layout": "pp,dp,tp"}, _mesh_attrs(2, 2, 1, "tp,pp,dp"), False),
    ],
)
def test_a_file_without_the_mesh_attributes_matches_one_with_them(old, new, splits):
    # The newer file also writes pipeline_stages, and pipeline_layout by the order's older name.
    layout = {"tp,pp,dp": "within-node", "tp,dp,pp": "across-nodes"}.get(new["mesh_order"], new["mesh_order"])
    a = {"attrs": {"world_size": 4, **old}, "world_size": 4}
    b = {"attrs": {**new, "pipeline_stages": new["mesh_pp"], "pipeline_layout": layout}, "world_size": 4}
    assert apart(a, b) == splits


def test_without_world_size_in_the_attributes_the_run_s_ranks_say_whether_the_order_counts():
    # Two stages over 2 ranks are one pipeline (dp1: the layout places no rank differently); over 4
    # ranks, two groups (dp2: it does). A sweep point's ranks stand for the file's world size.
    within, across = ({"pipeline_stages": 2, "pipeline_layout": x} for x in ("within-node", "across-nodes"))
    assert not apart({"attrs": within, "world_size": 2}, {"attrs": across, "world_size": 2})
    assert apart({"attrs": within, "world_size": 4}, {"attrs": across, "world_size": 4})
    point = {"args": [], "ranks": 4, "nodes": 1, "ranks_per_node": 4}
    a, b = ({"attrs": x, "world_size": 2, "point": point} for x in (within, across))
    assert apart(a, b, by_point=True)


def test_the_mesh_flags_are_matched_on_the_attributes():
    # --pp is --pipeline-stages; --pipeline-layout within-node is --mesh-order tp,pp,dp: spelt either
    # way, given or left at the default, on the command line or through DTUNE_TRAIN_*, one configuration.
    attrs = _mesh_attrs(2, 2, 1, "tp,pp,dp")
    base = {"attrs": attrs, "world_size": 4, "command_line": "/x/dtune-train --pipeline-stages 2"}
    for cmd in ("--pp 2", "--pp 2 --mesh-order tp,pp,dp", "--pipeline-stages 2 --pipeline-layout within-node"):
        assert not apart(base, {**base, "command_line": f"/x/dtune-train {cmd}"}), cmd
    assert not apart(base, {**base, "env": {"DTUNE_TRAIN_MESH_ORDER": "pp,tp,dp", "DTUNE_TRAIN_TP": "1"}})
    across = {**base, "attrs": _mesh_attrs(2, 2, 1, "tp,dp,pp"), "command_line": "/x/dtune-train --pp 2"}
    assert apart(base, {**across, "command_line": "/x/dtune-train --pp 2 --mesh-order tp,dp,pp"})
    assert not apart(across, {**across, "command_line": "/x/dtune-train --pp 2 --pipeline-layout across-nodes"})


@pytest.mark.parametrize(
    "attrs,shown",
    [
        ({"world_size": 1}, "dp1"),  # a file from before pipelines, one rank
        ({"world_size": 8, "pipeline_stages": 2, "pipeline_layout": "across-nodes"}, "dp4×pp2 (tp,dp,pp)"),
        ({"world_size": 8, "pipeline_stages": 8, "pipeline_layout": "across-nodes"}, "pp8"),
        ({"world_size": 6, "pipeline_stages": 4}, "dp?×pp4 (tp,pp,dp)"),  # stages that do not divide
        ({"world_size": 8, "pipeline_stages": float("nan"), "mesh_order": float("nan")}, "dp8"),  # a table's gaps
        (_mesh_attrs(2, 2, 2, "dp,pp,tp"), "dp2×pp2×tp2 (dp,pp,tp)"),
        (_mesh_attrs(4, 2, 1, "pp,dp,tp"), "dp4×pp2 (tp,pp,dp)"),  # named by the first order alike
        (_mesh_attrs(2, 1, 1, "pp,tp,dp"), "dp2"),
    ],
)
def test_a_mesh_is_shown_by_its_degrees_above_one_and_an_order_that_places_ranks(attrs, shown):
    from dtune_report.mesh import mesh_of, mesh_text

    assert mesh_text(mesh_of(attrs)) == shown


def _mesh_runs(path, orders, old_style=False):
    """A 4-rank train file: one DDP run and one dp2 x pp2 run per order, each written with the mesh_*
    attributes or (old_style) with pipeline_stages and pipeline_layout only."""
    layout = {"tp,pp,dp": "within-node", "tp,dp,pp": "across-nodes"}
    runs = [(STEPS, None, {"rank_factors": (1.0,) * 4})]
    for order in orders:
        mesh = {"pipeline_stages": 2, "pipeline_layout": layout[order]}
        if not old_style:
            mesh |= {"mesh_dp": 2, "mesh_pp": 2, "mesh_tp": 1, "mesh_order": order}
        runs.append(([s * 2 for s in STEPS], None, {"rank_factors": (1.0,) * 4, **mesh}))
    train_file(path, runs, "/x/dtune-train --model resnet18", hosts=("h0",) * 4)


def test_compare_shows_a_run_s_mesh_and_pairs_files_with_and_without_the_mesh_attributes(tmp_path):
    _mesh_runs(tmp_path / "a.h5", ["tp,pp,dp"], old_style=True)
    _mesh_runs(tmp_path / "b.h5", ["tp,pp,dp", "tp,dp,pp"])
    c = compare_results(tmp_path / "a.h5", tmp_path / "b.h5")
    assert [(r.config, r.n_a, r.n_b) for r in c.rows] == [
        ("resnet18 fp32 batch 8 mesh=dp2×pp2 (tp,pp,dp)", 11, 11),
        ("resnet18 fp32 batch 8 mesh=dp4", 11, 11),
    ]
    assert list(c.only_b) == ["resnet18 fp32 batch 8 mesh=dp2×pp2 (tp,dp,pp)"] and not c.only_a


def test_a_study_s_mesh_axis_names_each_layout(tmp_path):
    from dtune_report.configs import studies, train_configs

    _mesh_runs(tmp_path / "a.h5", ["tp,pp,dp", "tp,dp,pp"])
    (s,) = studies(train_configs([tmp_path / "a.h5"]))
    assert sorted(c.label for c in s.configs) == [
        "mesh dp2×pp2 (tp,dp,pp)",
        "mesh dp2×pp2 (tp,pp,dp)",
        "mesh dp4",
    ]
    # The global batch that follows from the mesh (batch 8 x dp) is no axis of its own; one that
    # does not (an order at 16 and 64) is.
    mesh = {"pipeline_stages": 2, "mesh_dp": 2, "mesh_pp": 2, "mesh_tp": 1}
    runs = [(STEPS, None, {"rank_factors": (1.0,) * 4, "global_batch": 32})]
    runs += [(STEPS, None, {"rank_factors": (1.0,) * 4, **mesh, "mesh_order": "tp,pp,dp"})]
    train_file(tmp_path / "b.h5", runs, "/x/dtune-train --model resnet18", hosts=("h0",) * 4)
    (s,) = studies(train_configs([tmp_path / "b.h5"]))
    assert sorted(c.label for c in s.configs) == ["mesh dp2×pp2 (tp,pp,dp)", "mesh dp4"]
    for gb in (16, 64):
        runs += [(STEPS, None, {"rank_factors": (1.0,) * 4, **mesh, "mesh_order": "tp,dp,pp", "global_batch": gb})]
    train_file(tmp_path / "b.h5", runs, "/x/dtune-train --model resnet18", hosts=("h0",) * 4)
    (s,) = studies(train_configs([tmp_path / "b.h5"]))
    assert sorted(c.label for c in s.configs) == [
        "global batch 16, mesh dp2×pp2 (tp,dp,pp)",
        "global batch 16, mesh dp2×pp2 (tp,pp,dp)",
        "global batch 32, mesh dp4",
        "global batch 64, mesh dp2×pp2 (tp,dp,pp)",
    ]


def test_the_report_s_study_table_has_one_mesh_column(tmp_path):
    from dtune_report.report import build_report

    _mesh_runs(tmp_path / "a.h5", ["tp,pp,dp", "tp,dp,pp"])
    build_report([tmp_path / "a.h5"], tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    table, along = [ln for ln in md.splitlines() if ln.startswith("| mesh |")]  # configurations; the axis
    assert "mesh pp" not in md and "mesh order" not in md and table.split(" | ")[1] == "samples/s", table
    assert "| dp2×pp2 (tp,dp,pp) |" in md and "| dp4 |" in md


def test_the_report_s_pipeline_table_names_each_run_s_mesh_schedule_and_sharding():
    # report.pipeline.pp_against_dp: one row per run of a (model, ranks, global batch) with a
    # pipeline; the layout is the mesh (an older file's from pipeline_stages and pipeline_layout),
    # a pipeline's schedule, a sharded run's mode; vs_dp against the best run with no pipeline.
    import pandas as pd

    from dtune_report.pipeline import pp_against_dp

    run = {"status": "ok", "model": "gpt2-tiny", "world_size": 4, "global_batch": 16, "schedule": "1f1b"}
    run |= {"virtual_stages": 1, "step_time_p50_ms": 10.0}
    train = pd.DataFrame(
        [
            run | {"run": "ddp", "pipeline_stages": 1, "pipeline_layout": "within-node", "samples_per_s": 100.0},
            run | {"run": "old", "pipeline_stages": 2, "pipeline_layout": "within-node", "samples_per_s": 50.0},
            run
            | {"run": "across", "pipeline_stages": 2, "pipeline_layout": "across-nodes", "samples_per_s": 80.0}
            | {"mesh_dp": 2, "mesh_pp": 2, "mesh_tp": 1, "mesh_order": "tp,dp,pp", "shard": "zero1"},
            run
            | {"run": "ddp-zero2", "pipeline_stages": 1, "samples_per_s": 125.0, "shard": "zero2"}
            | {"pipeline_layout": "across-nodes", "mesh_dp": 4, "mesh_pp": 1, "mesh_tp": 1, "mesh_order": "tp,dp,pp"},
        ]
    )
    t = pp_against_dp(train.assign(file="f"), [])
    assert list(t.layout) == ["dp4", "dp2×pp2 (tp,pp,dp) 1f1b", "dp2×pp2 (tp,dp,pp) 1f1b zero1", "dp4 zero2"]
    assert list(t.vs_dp) == [0.8, 0.4, 0.64, 1.0]


def test_the_sharding_table_tells_configurations_apart_by_their_mesh(tmp_path):
    # Pipeline stages with zero1 beside DDP's: the Sharding section's `configuration` column names
    # each configuration's mesh as one setting, in dp4 and dp2×pp2 alike.
    from dtune_report.configs import studies, train_configs
    from dtune_report.shard_report import load_shard_runs, shard_tables

    runs = []
    for shard in ("none", "zero1"):
        runs.append((STEPS, None, {"rank_factors": (1.0,) * 4, "shard": shard}))
        mesh = {"pipeline_stages": 2, "mesh_dp": 2, "mesh_pp": 2, "mesh_tp": 1, "mesh_order": "tp,pp,dp"}
        runs.append((STEPS, None, {"rank_factors": (1.0,) * 4, "shard": shard, **mesh}))
    train_file(tmp_path / "a.h5", runs, "/x/dtune-train --model resnet18", hosts=("h0",) * 4)
    ((model, ranks, t),) = shard_tables(studies(train_configs([tmp_path / "a.h5"])), load_shard_runs([tmp_path]))
    assert list(zip(t.configuration, t["shard"])) == [
        ("mesh dp2×pp2 (tp,pp,dp)", "none"),
        ("mesh dp2×pp2 (tp,pp,dp)", "zero1"),
        ("mesh dp4", "none"),
        ("mesh dp4", "zero1"),
    ]


def test_a_short_flag_with_its_value_attached_reads_as_cli11_reads_it():
    # -n5 is -n 5 (CLI11), however short the value; a long flag never splits this way.
    assert parse_flags(["-n5", "-oX", "--ab"], "dtune-comm") == {"--iters": "5", "--op": "X", "--ab": ""}


def test_the_first_argument_of_a_command_line_counts():
    # Only the program name is dropped: a setting given first splits rows like any other.
    run = _run(command_line="/x/dtune-train --timing off --steps 4")
    assert run_identity(run, by_point=False) == {
        "shard": "none",
        "reshard_after_forward": "1",
        "shard_unit": "block",
        "shard_prefetch": "1",
        "activation_checkpoint": "none",  # a file from before it kept every activation
        "sequence_parallel": "0",
        "stage_pieces": "blocks",
        "mesh_pp": "1",
        "mesh_tp": "1",
        "mesh_order": "tp,pp,dp",
        "np": "2",
        "--timing": "off",
    }
    comm = _run(benchmark="comm", command_line="/x/dtune-comm --mpi-buffers=device -b 8")
    assert run_identity(comm, by_point=False) == {"np": "2", "--mpi-buffers": "device"}


def test_a_benchmark_without_a_flag_table_counts_every_flag_as_written():
    """dtune-data or dtune-probe runs (no flag table here): no short-flag names, no ignored flags, no
    environment fallbacks; the attributes, the rank count, every flag and the settings count."""
    run = _run(
        benchmark="data",
        command_line="/x/dtune-data bench --workers 4 -n 3 --output o.h5",
        env={"NCCL_ALGO": "Ring", "SLURM_JOB_ID": "7"},
        attrs={"data": "s3://b/train", "status": "ok"},
    )
    assert run_identity(run, by_point=False) == {
        "data": "s3://b/train",
        "np": "2",
        "--workers": "4",
        "-n": "3",
        "--output": "o.h5",
        "NCCL_ALGO": "Ring",
    }


def test_settings_env_keeps_what_the_launcher_does_not_set_for_itself():
    env = {
        "OMPI_MCA_pmix": "pmix3x",  # launcher wiring
        "OMPI_MCA_mpi_oversubscribe": "1",  # ranks share cores: counts
        "PMIX_MCA_psec": "none",
        "PMIX_MCA_gds": "hash",
        "OMPI_COMM_WORLD_RANK": "0",
        "DTUNE_COMM_ALGORITHM": "ring",  # folded into the flags
        "DTUNE_BIN_DIR": "/b",
        "UCX_TLS": 7,
    }
    assert settings_env(env) == {"OMPI_MCA_mpi_oversubscribe": "1", "PMIX_MCA_gds": "hash", "UCX_TLS": "7"}


def test_labels_show_base_fields_then_what_varies_within_each_benchmark():
    """A row's label: the benchmark's base fields (a missing one as '-'), then name=value for the
    fields whose value differs among that benchmark's configurations ('-' where one lacks it); a
    field every dtune-comm row shares stays out even beside dtune-train rows that lack it."""
    comm = ("collective", "allreduce"), ("dtype", "float32"), ("op", "sum"), ("placement", "in-place")
    keys = [
        ("comm", (*comm, ("size", "64"), ("np", "2"), ("--algorithm", "ring"))),
        ("comm", (*comm, ("size", "8"), ("np", "2"), ("--algorithm", "ring"))),
        ("train", (("model", "m"), ("precision", "fp32"), ("batch", "16"), ("np", "2"), ("--schedule", "1f1b"))),
        ("train", (("model", "m"), ("batch", "8"), ("np", "2"), ("workers", "4"), ("--schedule", "1f1b"))),
        ("train", (("model", "m"), ("precision", "fp32"), ("np", "2"), ("--schedule", "1f1b"))),
        ("train", (("model", "m"), ("precision", "fp32"), ("batch", "4"), ("np", "2"), ("--schedule", "1f1b"))),
    ]
    label, sort_key = _labeller(keys)
    assert [label(k) for k in sorted(keys, key=sort_key)] == [
        "allreduce float32 sum in-place 8 B",
        "allreduce float32 sum in-place 64 B",
        "m - batch 8 workers=4",
        "m fp32 batch 4 workers=-",  # numbers in numeric order, then what is not a number
        "m fp32 batch 16 workers=-",
        "m fp32 batch - workers=-",
    ]


def test_regressions_are_significant_slowdowns_beyond_the_threshold():
    slower = Row("x", "ms", 2.0, 3.0, 1.5, 1.4, 1.6, 0.001, True, 8, 8)
    noisy = Row("y", "ms", 2.0, 3.0, 1.5, 0.9, 2.0, 0.2, False, 8, 8)
    faster = Row("z", "ms", 3.0, 2.0, 2 / 3, 0.6, 0.7, 0.001, True, 8, 8)
    rows = [slower, noisy, faster]
    assert regressions(rows, 49.9) == [slower] and regressions(rows, 50) == []  # 50% is not beyond 50%
    assert regressions([noisy, faster], 0) == []  # not significant, or faster


def test_compare_results_of_comm_files_by_sweep_point_placement_and_size(tmp_path):
    """dtune-comm results in the test process (test_tuner_conf's synthetic files: 2 timed
    iterations per size): one sample per iteration; the points of a merged sweep file stay apart
    when both sides are sweeps (their settings live in the point, not in the recorded
    environment), and plain files are matched by what their runs record."""
    d = write_comm_results(tmp_path / "r")
    c = compare_results(str(d / "merged.h5"), str(d / "merged.h5"))
    assert len(c.rows) == 320 and all((r.n_a, r.n_b, r.ratio) == (2, 2, 1.0) for r in c.rows)
    assert c.rows[0].config == (
        "allgather float32 none in-place 1024 B "
        "NCCL_ALGO=CollnetDirect NCCL_MAX_CTAS=- NCCL_MIN_CTAS=- NCCL_PROTO=Simple"
    )
    c = compare_results(str(d / "w4-0.h5"), str(d / "w4-0.h5"))
    assert len(c.rows) == 32 and [r.config for r in c.rows[:3]] == [
        "allgather float32 none in-place 1024 B",
        "allgather float32 none in-place 4096 B",
        "allgather float32 none in-place 16384 B",
    ]
    c = compare_results(str(d / "w4-0.h5"), str(d / "merged.h5"))  # 4 ranks against 2: nothing matches
    assert c.rows == [] and (len(c.only_a), len(c.only_b)) == (32, 40)
