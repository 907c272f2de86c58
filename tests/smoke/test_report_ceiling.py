"""The busbw report's ceiling, from files the real binaries wrote: dtune-comm on 2 ranks (MPI over
shared memory) and dtune-probe memory on the same host. The fit table's fraction column is each
run's measured peak busbw over the probe's STREAM copy figure, both read back with h5py; the ceiling
is named host memory, never a link, and drawn as a line at that figure; without a probe among the
inputs the report says so once and has no ceiling column. On GPUs the ceiling is the slowest copy
between the ranks' GPUs in the p2p matrix (a matrix in load_probe_p2p's layout: no GPU here)."""

import math
import shutil
import subprocess

import h5py
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from conftest import bin_dir, run_comm
from dtune_report import ceilings as ce
from dtune_report import figures as fg
from dtune_report.collectives import fit_table
from dtune_report.loader import load_comm_summary
from dtune_report.report import build_report
from dtune_report.units import fmt_sig


def probe(*args):
    exe = bin_dir() / "dtune-probe"
    if not exe.exists():
        pytest.fail(f"{exe} does not exist: build first (scripts/setup.sh)")
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("ceiling")
    comm = d / "comm.h5"
    args = ["-b", "8", "-e", "1M", "-f", "8", "-n", "3", "--collective", "allreduce,allgather"]
    r = run_comm(2, [*args, "--output", comm])
    assert r.returncode == 0, r.stderr[-2000:]
    mem = d / "mem.h5"
    r = probe("--output", mem, "memory", "--array-size", "8M", "-n", "3", "--threads", "1")
    assert r.returncode == 0, r.stderr[-2000:]
    return comm, mem


def peak_busbw(path) -> dict:
    """run name -> highest out-of-place busbw, read with h5py."""
    out = {}
    with h5py.File(path) as f:
        for name, g in f["runs"].items():
            placement = [p.decode() if isinstance(p, bytes) else p for p in g["placement"][()]]
            row = g["busbw_gbps"][()][placement.index("out-of-place")]
            out[name] = float(np.nanmax(row))
    return out


def test_fraction_is_peak_busbw_over_host_memory_copy(files, tmp_path):
    comm, mem = files
    with h5py.File(mem) as f:
        (g,) = f["runs"].values()
        copy_gbps = float(g.attrs["copy_gbps"])
    ceiling = ce.ceilings([comm, mem])
    assert len(ceiling) == 2 and (ceiling.ceiling_gbps == copy_gbps).all()
    assert all(label.startswith("host memory copy, dtune-probe memory") for label in ceiling.label)
    assert not any("link" in label for label in ceiling.label) and (ceiling.why_none == "").all()
    peaks = peak_busbw(comm)
    summary = load_comm_summary([comm, mem])
    from dtune_report.figures import comm_fits

    table = fit_table(summary, comm_fits([comm, mem]), ceiling)
    assert len(table) == 2
    for row in table.itertuples(index=False):
        (name,) = [n for n in peaks if row.collective in n]
        assert row[table.columns.get_loc("ceiling (GB/s)")] == fmt_sig(copy_gbps)
        assert row[table.columns.get_loc("peak busbw / ceiling")] == fmt_sig(peaks[name] / copy_gbps)
    rep = build_report([comm, mem], tmp_path / "r")
    md = (tmp_path / "r" / "report.md").read_text()
    assert "peak busbw / ceiling" in md and ce.NO_PROBE not in md
    assert f"{fmt_sig(copy_gbps)} GB/s, host memory copy, dtune-probe memory" in md
    for peak in peaks.values():
        assert fmt_sig(peak / copy_gbps) in md
    assert "busbw_vs_size" in rep["figures"]


def test_the_figure_draws_the_ceiling_at_the_probe_figure(files):
    comm, mem = files
    ceiling = ce.ceilings([comm, mem])
    runs = load_comm_summary([comm])
    fig, ax = plt.subplots()
    fg._ceiling_lines(ax, runs, ceiling)
    (line,) = ax.get_lines()
    assert list(line.get_ydata()) == [ceiling.ceiling_gbps.iloc[0]] * 2
    assert line.get_label() == f"ceiling {fmt_sig(ceiling.ceiling_gbps.iloc[0])} GB/s (host memory copy)"
    plt.close(fig)


def test_without_a_probe_the_report_says_so_once_and_draws_nothing(files, tmp_path):
    comm, _ = files
    ceiling = ce.ceilings([comm])
    assert ceiling.ceiling_gbps.isna().all() and not ce.has_probes([comm])
    build_report([comm], tmp_path / "r")
    md = (tmp_path / "r" / "report.md").read_text()
    assert md.count(ce.NO_PROBE.split(":")[0]) == 1
    assert "ceiling (GB/s)" not in md and "peak busbw / ceiling" not in md
    fig, ax = plt.subplots()
    fg._ceiling_lines(ax, load_comm_summary([comm]), ceiling)
    assert ax.get_lines() == []
    plt.close(fig)


def _p2p(gbps, peer=1):
    names = [f"cuda:{i} NVIDIA H200 (0000:{i + 1:02x}:00.0)" for i in range(len(gbps))]
    return pd.DataFrame(
        [
            {"file": "p.h5", "run": "0000-p2p", "peer_access": peer, "src": i, "dst": j}
            | {"src_gpu": names[i], "dst_gpu": names[j], "gbps": gbps[i][j]}
            for i in range(len(gbps))
            for j in range(len(gbps))
        ]
    )


def test_gpu_ceiling_is_the_slowest_pair_among_the_ranks_gpus():
    nan = math.nan
    m = [[nan, 300.0, 50.0], [310.0, nan, 40.0], [55.0, 45.0, nan]]
    p2p = _p2p(m)
    devices = ["cuda:0 NVIDIA H200 (0000:01:00.0)", "cuda:1 NVIDIA H200 (0000:02:00.0)"]
    gbps, label, why = ce.gpu_ceiling(p2p, devices)
    assert gbps == 300.0 and why == "" and "peer access on" in label and "2 directed pairs" in label
    gbps, _, _ = ce.gpu_ceiling(p2p, devices + ["cuda:2 NVIDIA H200 (0000:03:00.0)"])
    assert gbps == 40.0
    gbps, _, why = ce.gpu_ceiling(p2p, devices[:1] * 2)
    assert math.isnan(gbps) and "one GPU" in why
    gbps, _, why = ce.gpu_ceiling(p2p, ["cuda:0 X (0000:09:00.0)", devices[0]])
    assert math.isnan(gbps) and "0000:09:00.0" in why


def test_a_probe_from_another_host_gives_no_ceiling(files, tmp_path):
    """The probe file's provenance names another host: no ceiling, and the note says from where."""
    comm, mem = files
    other = tmp_path / "other.h5"
    shutil.copy(mem, other)
    with h5py.File(other, "r+") as f:
        del f["provenance/rank_host"]
        f["provenance"].create_dataset("rank_host", data=["elsewhere"], dtype=h5py.string_dtype())
    ceiling = ce.ceilings([comm, other])
    assert ceiling.ceiling_gbps.isna().all()
    with h5py.File(comm) as f:
        host = f["provenance/rank_host"].asstr()[0]
    (line,) = ce.note_lines(ceiling, ce.has_probes([comm, other]))
    assert line == f"No ceiling for 2 run(s): no dtune-probe memory results from {host} among the inputs."
