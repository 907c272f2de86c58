"""dtune-probe end to end on tiny sizes: every subcommand runs here; gemm, memory and topology
write HDF5 that h5py and the loader read (rates positive and consistent with each other, the
topology's counts those of this machine); the GPU-only probes on a machine without a GPU say so
and exit 0 with no file; bad input exits 2 naming the flag; every results file carries the
topology in its provenance; and dtune-train's MFU takes its peak from a probe file, naming it."""

import math
import os
import shutil
import subprocess

import h5py
import pytest

from conftest import bin_dir, mpirun_prefix
from dtune_report.loader import (
    load_probe_gemm,
    load_probe_memory,
    load_train_summary,
    read_provenance,
    read_topology,
)


def probe(*args, np_=1, cwd=None):
    exe = bin_dir() / "dtune-probe"
    if not exe.exists():
        pytest.fail(f"{exe} does not exist: build first (scripts/setup.sh)")
    cmd = (mpirun_prefix(np_) if np_ > 1 else []) + [str(exe), *[str(a) for a in args]]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=cwd)


def gpus_visible() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return r.returncode == 0 and "GPU" in r.stdout


GEMM = ["gemm", "--shapes", "32,64x48x40", "--dtype", "fp32,bf16", "--min-time", "0.01", "--min-iters", "3"]
GEMM += ["--device", "cpu"]
BIG_GEMM = ["gemm", "--shapes", "512", "--dtype", "fp32", "--min-time", "0.05", "--min-iters", "3", "--device", "cpu"]


def test_gemm_writes_rates_per_shape_and_rank(tmp_path):
    out = tmp_path / "g.h5"
    r = probe("--output", out, *GEMM, "--threads", "1", np_=2)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "# peak cpu float32" in r.stdout
    df = load_probe_gemm(out)
    assert set(df.dtype) == {"float32", "bfloat16"}
    assert len(df) == 2 * 2 * 2  # dtypes x ranks x shapes
    assert (df.tflops > 0).all() and (df.tflops_best >= df.tflops).all()
    assert set(zip(df.m, df.n, df.k)) == {(32, 32, 32), (64, 48, 40)}
    assert (df.threads == 1).all() and (df.world_size == 2).all()
    # On a CPU only torch::mm runs: no cuBLASLt workspace or algorithm.
    assert (df.library == "torch::mm").all() and (df.workspace_bytes == 0).all() and (df.algorithm == "").all()
    for _, g in df[df["rank"] == 0].groupby("dtype"):
        assert g.peak_tflops.iloc[0] == pytest.approx(g.tflops.max())
    with h5py.File(out) as f:
        assert f.attrs["tool"] == "dtune-probe" and f.attrs["status"] == "complete"


def test_memory_stream_rates_and_default_size(tmp_path):
    out = tmp_path / "m.h5"
    r = probe("--output", out, "memory", "--array-size", "8M", "-n", "3", "--threads", "2")
    assert r.returncode == 0, r.stderr[-2000:]
    df = load_probe_memory(out)
    assert list(df.kernel) == ["copy", "scale", "add", "triad"]
    assert (df.gbps > 0).all() and (df.gbps >= df.gbps_median).all()
    assert (df.array_bytes == 8 << 20).all() and (df.threads == 2).all()
    with h5py.File(out) as f:
        (g,) = f["runs"].values()
        assert g.attrs["triad_gbps"] == pytest.approx(df[df.kernel == "triad"].gbps.iloc[0])


def test_topology_matches_this_machine_and_is_in_every_provenance(tmp_path):
    out = tmp_path / "t.h5"
    r = probe("--output", out, "topology")
    assert r.returncode == 0, r.stderr[-2000:]
    t = read_topology(out)
    assert t["threads"] == os.cpu_count() or t["threads"] >= len(os.sched_getaffinity(0))
    assert t["cores"] >= 1 and t["packages"] >= 1 and t["numa_nodes"] >= 1
    assert t["summary"].startswith(f"{t['packages']} package")
    assert len(t["links"]) == len(t["link_label"]) and all(len(row) == len(t["link_label"]) for row in t["links"])
    assert all(t["links"][i][i] == "X" for i in range(len(t["links"])))
    assert t["summary"] in r.stdout
    # The same summary in the provenance of another tool's file.
    prov = read_provenance(out)
    assert prov["topology"] == t["summary"]


@pytest.mark.parametrize("which", ["copy", "p2p", "launch"])
def test_gpu_only_probes_without_a_gpu_say_so_and_exit_0(tmp_path, which):
    if gpus_visible():
        pytest.skip("a GPU is visible: this test is about machines without one")
    out = tmp_path / "x.h5"
    r = probe("--output", out, which)
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"dtune-probe {which}: no GPU" in r.stdout and "nothing measured" in r.stdout
    assert not out.exists() and not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "args, flag",
    [
        (["gemm", "--shapes", "12x"], "--shapes"),
        (["gemm", "--dtype", "fp64"], "--dtype"),
        (["gemm", "--dtype", "tf32", "--device", "cpu"], "--dtype tf32"),
        (["gemm", "--library", "cublaslt", "--device", "cpu"], "--library cublaslt"),
        (["gemm", "--library", "cutlass"], "--library"),
        (["memory", "--array-size", "lots"], "--array-size"),
        (["copy", "-b", "1M", "-e", "4K"], "-b/--minbytes"),
    ],
)
def test_bad_input_exits_2_naming_the_flag(tmp_path, args, flag):
    r = probe("--output", tmp_path / "b.h5", *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert flag in r.stderr


def test_train_mfu_uses_the_measured_peak_and_names_it(tmp_path):
    results = tmp_path / "results"
    # default output: results/dtune-probe-*.h5. A 512^3 product on one thread, as the run below: a
    # peak well above the tiny GPT's rate at context 4 (the 32^3 of GEMM, or a 2-thread figure
    # shared out to 1 thread on a loaded machine, can be below it, and dtune-train then rejects it).
    r = probe(*BIG_GEMM, "--threads", "1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    (pfile,) = results.glob("dtune-probe-*.h5")
    peak = load_probe_gemm(pfile).query("dtype == 'float32' and rank == 0").peak_tflops.iloc[0]
    train = bin_dir() / "dtune-train"
    tiny = ["--model", "gpt2-tiny", "--context", "4", "--vocab", "128", "--batch", "1", "--steps", "3"]
    for how in (["--peak-from", str(pfile)], []):  # named, then found as the newest in results/
        out = tmp_path / f"train{len(how)}.h5"
        t = subprocess.run(
            [str(train), *tiny, "--threads", "1", "--output", str(out), *how],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=tmp_path,
        )
        assert t.returncode == 0, t.stderr[-2000:]
        s = load_train_summary(out).iloc[0]
        assert s.peak_source.startswith("measured (dtune-probe gemm)"), s.peak_source
        assert str(pfile.name) in s.peak_source
        # The probe's thread count: its figure as it is (fewer threads get a linear share of it).
        assert s.peak_tflops == pytest.approx(peak)
        assert math.isfinite(s.mfu) and s.mfu > 0
    # A datasheet or --peak-tflops still comes first.
    out = tmp_path / "train_given.h5"
    t = subprocess.run(
        [str(train), *tiny, "--threads", "1", "--output", str(out), "--peak-tflops", "1.5"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert t.returncode == 0, t.stderr[-2000:]
    assert load_train_summary(out).iloc[0].peak_source == "--peak-tflops"


def test_a_peak_below_the_achieved_rate_is_rejected_and_the_next_source_used(tmp_path):
    """A utilisation above 100% means the peak is wrong: a planted --peak-tflops far below what the
    tiny GPT achieves is rejected with a word on the MFU line and in the file (mfu_valid 0, the
    rejected source named), and the next source in the order (the measured peak of a probe file in
    results/) gives the figure; with no next source the MFU is n/a, never above 100%."""
    train = bin_dir() / "dtune-train"
    tiny = ["--model", "gpt2-tiny", "--context", "4", "--vocab", "128", "--batch", "1", "--steps", "3"]
    planted = ["--threads", "1", "--peak-tflops", "1e-9"]  # 1 kFLOP/s: any run beats it

    def run(cwd, out):
        t = subprocess.run(
            [str(train), *tiny, *planted, "--output", str(out)], capture_output=True, text=True, timeout=600, cwd=cwd
        )
        assert t.returncode == 0, t.stderr[-2000:]
        (line,) = [x for x in t.stdout.splitlines() if x.startswith("# MFU")]
        return line, load_train_summary(out).iloc[0]

    alone = tmp_path / "alone"
    alone.mkdir()
    line, s = run(alone, tmp_path / "alone.h5")
    assert line.startswith("# MFU: n/a"), line
    assert "[peak rejected: --peak-tflops: 1e-09 TFLOP/s per device, below the" in line, line
    assert math.isnan(s.mfu) and s.mfu_valid == 0
    assert s.mfu_rejected_peaks.startswith("--peak-tflops: 1e-09 TFLOP/s"), s.mfu_rejected_peaks

    with_probe = tmp_path / "with_probe"
    with_probe.mkdir()
    # results/dtune-probe-*.h5, the next source: a 512^3 product, far above the tiny GPT's rate.
    r = probe(*BIG_GEMM, "--threads", "1", cwd=with_probe)
    assert r.returncode == 0, r.stderr[-2000:]
    line, s = run(with_probe, tmp_path / "with_probe.h5")
    assert "[peak rejected: --peak-tflops" in line, line
    assert s.mfu_valid == 0 and s.peak_source.startswith("measured (dtune-probe gemm)"), s.peak_source
    assert 0 < s.mfu <= 1, s.mfu


def test_gemm_max_seconds_stops_at_the_largest_shape_measured(tmp_path):
    """--max-seconds: a shape whose estimate (the last shape's time scaled by FLOPs) would end past the
    bound is not started. After 64^3 (at least --min-time 0.2 s), 128^3 is estimated at 8x that, past
    0.5 s whatever the machine's speed: the file holds 64^3 alone, says the run stopped and which
    shapes were left out, and the peak is 64^3's."""
    out = tmp_path / "g.h5"
    args = ["gemm", "--shapes", "64,128,256,2048", "--dtype", "fp32", "--min-time", "0.2", "--min-iters", "3"]
    r = probe(*args, "--device", "cpu", "--threads", "1", "--max-seconds", "0.5", "--output", out)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "128x128x128 not measured" in r.stdout and "--max-seconds 0.5" in r.stdout, r.stdout
    with h5py.File(out) as f:
        (g,) = [g for g in f["runs"].values() if g.attrs.get("probe") == "gemm"]
        assert list(g["m"][()]) == [64]
        assert g.attrs["stopped_by_max_seconds"] == 1 and g.attrs["max_seconds"] == 0.5
        left = [s.decode() if isinstance(s, bytes) else s for s in g["shapes_not_measured"][()]]
        assert left == ["128x128x128", "256x256x256", "2048x2048x2048"]
        assert g.attrs["peak_shape"] == "64x64x64"
    # Without the bound every shape is measured and nothing is said to be left out.
    out2 = tmp_path / "all.h5"
    r = probe("gemm", "--shapes", "32,64", "--dtype", "fp32", "--min-time", "0.01", "--device", "cpu", "--output", out2)
    assert r.returncode == 0, r.stderr[-2000:]
    with h5py.File(out2) as f:
        (g,) = [g for g in f["runs"].values() if g.attrs.get("probe") == "gemm"]
        assert list(g["m"][()]) == [32, 64] and g.attrs["stopped_by_max_seconds"] == 0
        assert len(g["shapes_not_measured"][()]) == 0
