"""--format csv and json carry the same figures as the HDF5 file of the same run, and every option
reads its DTUNE_COMM_<NAME> environment variable, with the flag taking precedence."""

import csv
import io
import json

from conftest import data_rows, run_comm
from dtune_report.loader import load_comm_summary


def test_csv_matches_hdf5(tmp_path):
    out = tmp_path / "r.h5"
    r = run_comm(
        2,
        [
            "-b",
            "8",
            "-e",
            "4K",
            "-f",
            "8",
            "-n",
            "3",
            "--collective",
            "allreduce,sendrecv",
            "--format",
            "csv",
            "--output",
            out,
        ],
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert len(rows) == 2 * 4 * 2  # collectives x sizes (8, 64, 512, 4K) x placements
    assert f"# Results: {out}" in r.stderr
    summary = load_comm_summary(out)
    for row in rows:
        m = summary[
            (summary.collective == row["collective"])
            & (summary.placement == row["placement"])
            & (summary.size_bytes == int(row["size_bytes"]))
        ]
        assert len(m) == 1, row
        assert abs(float(row["busbw_gbps"]) - m.busbw_gbps.iloc[0]) <= 1e-4 + 1e-3 * m.busbw_gbps.iloc[0]
        assert abs(float(row["time_us"]) - m.time_us_reported.iloc[0]) <= 1e-3
        assert int(row["wrong"]) == 0


def test_json_is_one_document():
    r = run_comm(2, ["-b", "8", "-e", "64", "-f", "2", "-n", "2", "--format", "json", "--no-output"], timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema_version"] == 1
    assert [x["size_bytes"] for x in doc["results"] if x["placement"] == "out-of-place"] == [8, 16, 32, 64]
    assert all(x["wrong"] == 0 and x["busbw_gbps"] > 0 for x in doc["results"])


def test_environment_fallback_and_flag_precedence(monkeypatch):
    monkeypatch.setenv("DTUNE_COMM_MAXBYTES", "64")
    monkeypatch.setenv("DTUNE_COMM_COLLECTIVE", "allgather")
    r = run_comm(2, ["-b", "8", "-f", "2", "-n", "2", "--no-output"], timeout=120)
    assert r.returncode == 0, r.stderr
    assert [int(x[0]) for x in data_rows(r.stdout)] == [8, 16, 32, 64]
    assert "# Collective: allgather" in r.stdout
    r = run_comm(2, ["-b", "8", "-e", "16", "-f", "2", "-n", "2", "--no-output"], timeout=120)
    assert [int(x[0]) for x in data_rows(r.stdout)] == [8, 16]
