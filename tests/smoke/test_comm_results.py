"""Smoke test of dtune-comm end to end: run the real binary on 2 MPI ranks with tiny sizes, then
check that its HDF5 file follows results/SCHEMA.md, that the report loader reads it, and that the
printed table and the file agree. Also the loader's refusal of files that are not ours.

Run: .venv/bin/python -m pytest tests/smoke/test_comm_results.py
Env: DTUNE_BIN_DIR (default <repo>/build/bin), DTUNE_MPIRUN (default "mpirun").
"""

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "report"))
from dtune_report import load_comm, load_comm_summary, read_provenance  # noqa: E402

NRANKS = 2
ITERS = 5
COLLECTIVES = ["allreduce", "allgather"]
PLACEMENTS = ["out-of-place", "in-place"]
# -b 8 -e 64K -f 4: nccl-tests' loop `for (size = min; size <= max; size *= f)`.
SIZES = [8 * 4**k for k in range(8) if 8 * 4**k <= 64 * 1024]  # 8, 32, ..., 32K: 7 sizes
# nccl-tests' busbw factors for n ranks (doc/PERFORMANCE.md).
BUSBW_FACTOR = {"allreduce": 2 * (NRANKS - 1) / NRANKS, "allgather": (NRANKS - 1) / NRANKS}


class Run:
    """One finished dtune-comm invocation: its output file, stdout, stderr and exit status."""

    def __init__(self, h5, proc):
        self.h5, self.stdout, self.stderr, self.returncode = h5, proc.stdout, proc.stderr, proc.returncode


def run_comm(tmp, *args, expect_ok=True):
    """Run dtune-comm on NRANKS ranks in `tmp` with `args` plus --output tmp/comm.h5."""
    binary = Path(os.environ.get("DTUNE_BIN_DIR", REPO / "build" / "bin")) / "dtune-comm"
    if not binary.is_file():
        pytest.fail(
            f"{binary} does not exist: build first (scripts/setup.sh, or "
            f"cmake --build build), or point DTUNE_BIN_DIR at the build's bin/",
            pytrace=False,
        )
    h5 = tmp / "comm.h5"
    cmd = shlex.split(os.environ.get("DTUNE_MPIRUN", "mpirun")) + [
        "-np",
        str(NRANKS),
        "--oversubscribe",
        "--allow-run-as-root",
        str(binary),
        *args,
        "--output",
        str(h5),
    ]
    try:
        proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired as e:
        pytest.fail(
            f"{shlex.join(cmd)} did not finish in 300 s\nstdout:\n{e.stdout}\nstderr:\n{e.stderr}", pytrace=False
        )
    if expect_ok and proc.returncode != 0:
        pytest.fail(
            f"{shlex.join(cmd)} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}", pytrace=False
        )
    return Run(h5, proc)


@pytest.fixture(scope="session")
def comm_run(tmp_path_factory):
    return run_comm(
        tmp_path_factory.mktemp("comm"),
        "-b",
        "8",
        "-e",
        "64K",
        "-f",
        "4",
        "-n",
        str(ITERS),
        "-w",
        "1",
        "-c",
        "1",
        "--collective",
        ",".join(COLLECTIVES),
    )


def table_rows(stdout):
    """The data rows of the nccl-tests style table: non-empty lines not starting with '#'."""
    return [line.split() for line in stdout.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_file_named_and_renamed(comm_run):
    assert comm_run.h5.is_file()
    assert not Path(str(comm_run.h5) + ".partial").exists()
    named = re.findall(r"^#\s*Results:\s*(\S+)\s*$", comm_run.stdout, re.MULTILINE)
    assert len(named) == 1, comm_run.stdout
    assert Path(named[0]).resolve() == comm_run.h5.resolve()


def test_root_attributes(comm_run):
    with h5py.File(comm_run.h5, "r") as f:
        a = f.attrs
        assert a["schema"] == "dtune-results"
        assert a["schema_version"] == 1
        assert a["schema_version"].dtype == np.int64
        assert a["status"] == "complete"
        assert a["tool"] == "dtune-comm"
        assert a["exit_status"] == 0


def test_provenance(comm_run):
    prov = read_provenance(comm_run.h5)
    assert prov["rank_host"] == [socket.gethostname()] * NRANKS
    assert prov["world_size"] == NRANKS
    assert prov["rank_local_rank"] == list(range(NRANKS))
    assert len(prov["rank_device"]) == NRANKS
    assert "dtune-comm" in prov["command_line"]
    assert isinstance(prov["env"], dict)


def test_every_iteration_once(comm_run):
    df = load_comm(comm_run.h5)
    assert len(df) == len(COLLECTIVES) * len(PLACEMENTS) * len(SIZES) * NRANKS * ITERS
    key = ["run", "placement", "size_bytes", "rank", "iteration"]
    assert not df.duplicated(key).any()
    assert sorted(df["collective"].unique()) == sorted(COLLECTIVES)
    assert sorted(df["placement"].unique()) == sorted(PLACEMENTS)
    for _, g in df.groupby("run"):
        assert sorted(g["size_bytes"].unique()) == SIZES
        assert (g["requested_bytes"] == g["size_bytes"]).all()
    assert sorted(df["iteration"].unique()) == list(range(ITERS))
    assert (df["host"] == socket.gethostname()).all()
    assert (df["time_us"] > 0).all()
    assert (df["wrong"] == 0).all()
    assert (df["status"] == "ok").all() and (df["file_status"] == "complete").all()
    assert (df["backend"] == "mpi").all() and (df["dtype"] == "float32").all()


def test_summary_bandwidths(comm_run):
    s = load_comm_summary(comm_run.h5)
    assert len(s) == len(COLLECTIVES) * len(PLACEMENTS) * len(SIZES)
    np.testing.assert_allclose(s["busbw_gbps"], s["algbw_gbps"] * s["busbw_factor"], rtol=1e-12)
    np.testing.assert_allclose(s["busbw_factor"], s["collective"].map(BUSBW_FACTOR), rtol=1e-12)
    # algbw = size column / time (nccl-tests; GB/s = 1e9 B/s, time in us).
    np.testing.assert_allclose(s["algbw_gbps"], s["size_bytes"] / s["time_us_reported"] / 1e3, rtol=1e-9)
    assert (s["wrong"] == 0).all()


def test_reported_time_is_mean_of_iterations(comm_run):
    """time_mode "avg" (nccl-tests -a 1, the default): mean over ranks of each rank's mean over
    iterations; slowest_rank has the highest per-rank mean."""
    df, s = load_comm(comm_run.h5), load_comm_summary(comm_run.h5)
    with h5py.File(comm_run.h5, "r") as f:
        assert {g.attrs["time_mode"] for g in f["runs"].values()} == {"avg"}
    per_rank = df.groupby(["run", "placement", "size_bytes", "rank"])["time_us"].mean()
    key = ["run", "placement", "size_bytes"]
    s = s.set_index(key).sort_index()
    expected = per_rank.groupby(level=key).mean().reindex(s.index)
    np.testing.assert_allclose(s["time_us_reported"], expected, rtol=1e-9)
    # Compare means, not indices: two ranks often tie (times are whole nanoseconds).
    by_rank = per_rank.unstack("rank").reindex(s.index)
    slowest_mean = by_rank.to_numpy()[np.arange(len(s)), s["slowest_rank"].to_numpy()]
    np.testing.assert_allclose(slowest_mean, by_rank.max(axis=1), rtol=1e-9)


def test_table_matches_file(comm_run):
    rows = table_rows(comm_run.stdout)
    assert len(rows) == len(SIZES) * len(COLLECTIVES), comm_run.stdout
    s = load_comm_summary(comm_run.h5)
    oop = s[s["placement"] == "out-of-place"].sort_values(["run", "size_bytes"])
    # Rows come in measurement order: runs by their NNNN- prefix, sizes ascending.
    assert [int(r[0]) for r in rows] == oop["size_bytes"].tolist()
    assert [int(r[1]) for r in rows] == oop["count"].tolist()
    np.testing.assert_allclose([float(r[5]) for r in rows], oop["time_us_reported"], rtol=1e-3, atol=0.051)


def test_wrong_result_recorded(tmp_path):
    """A planted wrong element (test-only flag) reaches the file, the loader and the exit status."""
    run = run_comm(
        tmp_path, "-b", "1K", "-e", "1K", "-n", "2", "-w", "0", "-c", "1", "--debug-plant-wrong", "1", expect_ok=False
    )
    assert run.returncode != 0
    assert read_provenance(run.h5)["exit_status"] == run.returncode
    s = load_comm_summary(run.h5)
    assert len(s) == len(PLACEMENTS)
    assert (s["status"] == "wrong").all() and (s["wrong"] > 0).all()
    assert (load_comm(run.h5)["wrong"] >= 0).all()


def write_file(path, **root):
    with h5py.File(path, "w") as f:
        f.attrs.update(root)


def test_loader_rejects_wrong_schema(tmp_path):
    bad = tmp_path / "other.h5"
    write_file(bad, schema="something-else", schema_version=np.int64(1))
    with pytest.raises(ValueError, match=re.escape(str(bad))):
        load_comm(bad)
    with pytest.raises(ValueError, match="not a dtune results file"):
        read_provenance(bad)


def test_loader_rejects_missing_schema(tmp_path):
    bad = tmp_path / "plain.h5"
    write_file(bad)
    with pytest.raises(ValueError, match=re.escape(str(bad))):
        load_comm_summary(bad)


def test_loader_rejects_newer_version(tmp_path):
    new = tmp_path / "future.h5"
    write_file(new, schema="dtune-results", schema_version=np.int64(2))
    with pytest.raises(ValueError, match=r"future\.h5.*newer"):
        load_comm(new)


def test_loader_reads_directory_with_partial(comm_run, tmp_path):
    """A directory yields every *.h5 and *.h5.partial in it; other files are ignored."""
    shutil.copy(comm_run.h5, tmp_path / "a.h5")
    shutil.copy(comm_run.h5, tmp_path / "b.h5.partial")
    (tmp_path / "notes.txt").write_text("not a result")
    one, both = load_comm(comm_run.h5), load_comm(tmp_path)
    assert len(both) == 2 * len(one)
    assert sorted(Path(p).name for p in both["file"].unique()) == ["a.h5", "b.h5.partial"]
