"""Results survive faults, and faults end the whole job: two runs with one --output both keep their
results (the second under NAME.1.h5); a usage error on one rank only ends every rank within seconds
with exit 2 and that rank's message (no rank left waiting until --timeout); secrets in the recorded
environment keep their names but not their values, and URLs lose their user-info."""

import os
import signal
import subprocess
import time
from pathlib import Path

import h5py

from conftest import bin_dir, mpirun_prefix


def comm_cmd(np, *args):
    return mpirun_prefix(np) + [str(bin_dir() / "dtune-comm"), *map(str, args)]


def session_processes(session):
    """Every process of session `session` (mpirun and the ranks it started: Open MPI puts the
    ranks in process groups of their own, so a signal to mpirun's group does not reach them)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if os.getsid(int(d.name)) == session:
                    out.append(int(d.name))
            except OSError:
                continue
    return out


def signal_session(session, sig):
    for pid in session_processes(session):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def start_and_stop_when_writing(args, partial):
    """Starts a 2-rank run and stops it (SIGSTOP to mpirun and every rank) as soon as its .partial
    exists: a writer that is certainly alive and mid-run while the test goes on."""
    a = subprocess.Popen(
        comm_cmd(2, *args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    deadline = time.monotonic() + 120
    while not partial.exists():
        assert time.monotonic() < deadline and a.poll() is None, a.communicate()[0]
        time.sleep(0.005)
    signal_session(a.pid, signal.SIGSTOP)
    # Stopped before it could finish: its .partial is still there, held by a live writer.
    assert partial.exists(), "the first run finished before it could be stopped: make it longer"
    return a


def resume(a):
    signal_session(a.pid, signal.SIGCONT)
    out = a.communicate(timeout=300)[0]
    assert a.returncode == 0, out
    return out


def test_two_writers_of_one_output_keep_both_results(tmp_path):
    out = tmp_path / "same.h5"
    args = ["-b", "8", "-e", "1M", "-f", "2", "-n", "100", "-w", "2", "--output", out]
    a = start_and_stop_when_writing(args, tmp_path / "same.h5.partial")
    try:
        b = subprocess.run(comm_cmd(1, *args), capture_output=True, text=True, timeout=300)
    finally:
        a_out = resume(a)
    assert b.returncode == 0, b.stdout + b.stderr
    assert "writing" in b.stdout and "same.1.h5" in b.stdout, b.stdout
    assert "Results:" in a_out and "same.h5" in a_out
    for name, ranks in (("same.h5", 2), ("same.1.h5", 1)):
        with h5py.File(tmp_path / name) as f:
            assert f.attrs["status"] == "complete"
            assert len(f["runs"]) == 1
            assert f["provenance"].attrs["world_size"] == ranks  # each file holds its own run
    assert not list(tmp_path.glob("*.partial"))


def test_overwrite_replaces_and_refuses_a_live_writer(tmp_path):
    out = tmp_path / "r.h5"
    r = subprocess.run(comm_cmd(1, "-b", "8", "-e", "8", "--output", out), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    first = out.stat().st_mtime_ns
    r = subprocess.run(
        comm_cmd(1, "-b", "8", "-e", "8", "--output", out, "--overwrite"), capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert out.stat().st_mtime_ns != first and not (tmp_path / "r.1.h5").exists()
    a = start_and_stop_when_writing(
        ["-b", "8", "-e", "1M", "-f", "2", "-n", "100", "--output", out, "--overwrite"], tmp_path / "r.h5.partial"
    )
    try:
        r = subprocess.run(
            comm_cmd(1, "-b", "8", "-e", "8", "--output", out, "--overwrite"),
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        resume(a)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "another run is writing" in r.stderr
    with h5py.File(out) as f:  # the live writer's file is intact and is the 2-rank run
        assert f.attrs["status"] == "complete"
        assert f["provenance"].attrs["world_size"] == 2


def test_usage_error_on_one_rank_ends_every_rank(tmp_path):
    # MPMD: rank 0 gets a bad value through the environment, rank 1 a good one. Before, rank 0
    # exited 2 alone and rank 1 waited in its first collective until --timeout (300 s).
    exe = str(bin_dir() / "dtune-comm")
    cmd = mpirun_prefix(1) + [
        "env",
        "DTUNE_COMM_ITERS=many",
        exe,
        "--output",
        tmp_path / "x.h5",
        ":",
        "-np",
        "1",
        exe,
        "--output",
        tmp_path / "x.h5",
    ]
    t0 = time.monotonic()
    r = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=240)
    took = time.monotonic() - t0
    assert r.returncode == 2, r.stdout + r.stderr
    assert took < 60, f"the job took {took:.0f} s to end"
    assert "many" in r.stderr and "rank 0" in r.stderr, r.stderr
    assert r.stderr.count("dtune-comm: error:") == 1, r.stderr


def test_usage_error_on_every_rank_is_printed_once(tmp_path):
    r = subprocess.run(
        comm_cmd(2, "-n", "many", "--output", tmp_path / "x.h5"), capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("dtune-comm: error:") == 1, r.stderr
    assert "MPI_ABORT" not in r.stderr


def test_secrets_are_not_recorded(tmp_path):
    env = {
        **os.environ,
        "SLURM_JWT": "eyJhbGciOiJIUzI1NiJ9.jwt-secret-value",
        "DTUNE_S3_PASSWORD": "hunter2-secret",
        "OMPI_MCA_my_api_key": "key-secret-value",
        "DTUNE_COMM_SOMETHING_URL": "s3://alice:userinfo-secret@minio:9000/bucket",
        "NCCL_ALGO": "Ring",
    }
    out = tmp_path / "p.h5"
    js = tmp_path / "p.json"  # nccl-tests' JSON lists the whole environment
    r = subprocess.run(
        comm_cmd(1, "-b", "8", "-e", "8", "--output", out, "-J", js), capture_output=True, text=True, env=env
    )
    assert r.returncode == 0, r.stderr
    assert "SLURM_JWT=<redacted>" in js.read_text()
    with h5py.File(out) as f:
        rec = {k: str(v) for k, v in f["provenance/env"].attrs.items()}
    assert rec["SLURM_JWT"] == rec["DTUNE_S3_PASSWORD"] == rec["OMPI_MCA_my_api_key"] == "<redacted>"
    assert rec["DTUNE_COMM_SOMETHING_URL"] == "s3://minio:9000/bucket"
    assert rec["NCCL_ALGO"] == "Ring"  # tuning knobs are kept verbatim
    raw = out.read_bytes() + js.read_bytes()
    for secret in (b"jwt-secret-value", b"hunter2-secret", b"key-secret-value", b"userinfo-secret"):
        assert secret not in raw
