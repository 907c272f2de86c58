"""dtune-micro (Google Benchmark) end to end: its JSON output, with repetitions, is what `dtune
compare` reads: one row per benchmark, a sample per repetition (the aggregate rows left out)."""

import subprocess
from pathlib import Path

import pytest
from test_compare import dtune, table

from conftest import bin_dir

REPO = Path(__file__).resolve().parents[2]


def test_compare_runs_on_dtune_micro_output(tmp_path):
    exe = bin_dir() / "dtune-micro"
    if not exe.exists():
        pytest.fail(f"{exe} does not exist: build first (scripts/setup.sh)")
    files = []
    for side in "ab":
        out = tmp_path / f"{side}.json"
        r = subprocess.run(
            [str(exe), "--benchmark_filter=BM_Summarize/20|BM_FitAlphaBeta", "--benchmark_repetitions=3",
             "--benchmark_min_time=0.01", "--benchmark_format=json", f"--benchmark_out={out}"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr[-2000:]
        files.append(out)
    r = dtune("compare", *files)
    assert r.returncode == 0, r.stderr
    assert {line.split()[0] for line in table(r.stdout)} == {"BM_Summarize/20", "BM_FitAlphaBeta"}
    assert all("3+3" in line for line in table(r.stdout))
