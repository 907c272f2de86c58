"""dtune compare: a known 10% shift is flagged with its size, identical samples print `~`, the
Mann-Whitney p-value agrees with the textbook value, and --fail-on-regression gates on exit codes.
The file-level cases use results written by the real dtune-comm during the test run."""
import shutil
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest

from conftest import run_comm
from dtune_report.compare import compare_samples, format_table, mann_whitney_p

DTUNE = [str(Path(__file__).resolve().parents[2] / "scripts" / "dtune")]


def test_known_shift_is_flagged_and_identical_is_not():
    rng = np.random.default_rng(1)
    a = rng.normal(100, 2, 60)
    b = rng.normal(110, 2, 60)  # 10% slower
    (row,) = compare_samples({"x": a}, {"x": b}, "us")
    assert row.significant and abs(row.ratio - 1.10) < 0.01 and row.ci_low > 1.05
    (same,) = compare_samples({"x": a}, {"x": a.copy()}, "us")
    assert not same.significant and same.ratio == 1.0
    assert "~" in format_table([same])


def test_mann_whitney_matches_textbook():
    # Fully separated samples of 5: U = 0, two-sided normal approximation with continuity
    # correction: z = (12.5 - 0.5) / sqrt(5*5*11/12) = 2.5067 -> p = 0.01219.
    assert abs(mann_whitney_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) - 0.01219) < 1e-4
    assert mann_whitney_p([1, 1, 1], [1, 1, 1]) == 1.0


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    d = tmp_path_factory.mktemp("cmp")
    # 200 iterations: enough that run-to-run noise of the tiny sizes cannot hide a 10% shift (at 40
    # the bootstrap interval of one 8-byte row once reached down to 0.995).
    r = run_comm(2, ["-b", "8", "-e", "4K", "-f", "8", "-n", "200", "-w", "20", "-c", "0", "--output", d / "a.h5"])
    assert r.returncode == 0, r.stderr
    shutil.copy(d / "a.h5", d / "slow.h5")
    with h5py.File(d / "slow.h5", "r+") as f:
        for g in f["runs"].values():
            g["time_us"][...] = g["time_us"][()] * 1.10
    return d


def dtune(*args):
    return subprocess.run(DTUNE + [str(a) for a in args], capture_output=True, text=True, timeout=120)


def test_cli_flags_the_slowdown_and_gates(results):
    r = dtune("compare", results / "a.h5", results / "slow.h5")
    assert r.returncode == 0, r.stderr
    body = [l for l in r.stdout.splitlines()[1:] if not l.startswith("geomean")]
    assert len(body) == 8 and all("+10.0%" in l for l in body), r.stdout
    assert "+10.0%" in r.stdout.splitlines()[-1]
    assert dtune("compare", results / "a.h5", results / "slow.h5", "--fail-on-regression", 5).returncode == 1
    assert dtune("compare", results / "a.h5", results / "slow.h5", "--fail-on-regression", 20).returncode == 0


def test_cli_same_file_is_all_unchanged(results):
    r = dtune("compare", results / "a.h5", results / "a.h5", "--fail-on-regression", 0)
    assert r.returncode == 0
    body = [l for l in r.stdout.splitlines()[1:] if not l.startswith("geomean")]
    assert all(" ~ " in l for l in body), r.stdout


def test_cli_bad_input_exits_2(tmp_path):
    r = dtune("compare", tmp_path / "missing.h5", tmp_path / "missing.h5")
    assert r.returncode == 2 and "error" in r.stderr
