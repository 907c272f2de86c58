"""dtune-comm under faults: a rank stopped (SIGSTOP) inside a collective is named as the rank that
stopped, the job ends with exit 3 soon after --timeout, and every size measured so far (of the
configuration in progress too) is in a readable file with status timeout; a rank that never starts
MPI leaves the others inside MPI_Init_thread, where --timeout still ends the job naming the step;
impossible sizes and meaningless numbers are refused with one line before anything is allocated."""

import os
import signal
import subprocess
import time

import h5py
import pytest

from conftest import bin_dir, mpirun_prefix, rank_pid


def comm_cmd(np, *args):
    return mpirun_prefix(np) + [str(bin_dir() / "dtune-comm"), *map(str, args)]


def test_a_stopped_rank_is_named_and_measured_sizes_are_kept(tmp_path):
    out = tmp_path / "t.h5"
    p = subprocess.Popen(
        comm_cmd(3, "-b", "8", "-e", "64K", "-f", "2", "-n", "3000", "-w", "1", "--timeout", "4", "--output", out),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    # Wait until a few sizes are done (rows printed), then stop rank 1 in the middle of the next.
    rows = 0
    for line in p.stdout:
        if line.strip() and not line.startswith("#"):
            rows += 1
            if rows == 3:
                break
    victim = rank_pid(p.pid, 1, "dtune-comm")
    assert victim, "rank 1 not found"
    os.kill(victim, signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        rest, err = p.communicate(timeout=120)
    finally:
        try:
            os.kill(victim, signal.SIGCONT)
        except ProcessLookupError:
            pass
    took = time.monotonic() - t0
    assert p.returncode == 3, err
    assert took < 4 + 30, f"ended {took:.0f} s after the stop"
    assert f"stopped (SIGSTOP or a debugger): rank 1 (pid {victim})" in err, err
    assert "Results (up to the timeout)" in rest, rest
    with h5py.File(out) as f:
        assert f.attrs["status"] == "timeout"
        (run,) = f["runs"].values()
        assert run.attrs["status"] == "timeout"
        assert len(run["size_bytes"]) >= 3  # every completed size, the stopped one not among them


def test_timeout_fires_inside_mpi_init(tmp_path):
    # MPMD: rank 1 is a program that never calls MPI_Init, so rank 0's MPI_Init_thread waits in the
    # launcher's start-up exchange (the PMIx fence) for ever. The watchdog exists before MPI does,
    # so --timeout ends it; a hang here would be stopped by the subprocess timeout and fail.
    cmd = comm_cmd(1, "--timeout", "3", "--output", tmp_path / "x.h5") + [":", "-np", "1", "sleep", "300"]
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - t0
    assert r.returncode == 3, r.stderr
    assert took < 3 + 60, f"ended {took:.0f} s after start"
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("dtune-comm: error:")]
    assert "starting MPI (MPI_Init_thread" in line and "within 3 s" in line, line
    assert "rank 0 on " in line and "before MPI_Init finished" in line, line
    assert not list(tmp_path.glob("x*.h5"))


@pytest.mark.parametrize(
    "args, words",
    [
        (["-b", "200G", "-e", "200G"], ["needs", "host memory", "available", "lower -e/--maxbytes"]),
        (["--timeout", "nan"], ["--timeout", "not a finite number"]),
        (["--timeout", "1e300"], ["--timeout", "at most"]),
        (["-n", "-3"], ["--iters", "greater than zero"]),
        (["-n", "99999999999"], ["--iters", "too large"]),
        (["-a", "7"], ["--average", "0 to 3"]),
        (["--collective", "nope"], ["--collective", "unknown collective"]),
    ],
)
def test_impossible_values_are_one_line(tmp_path, args, words):
    r = subprocess.run(comm_cmd(2, *args, "--output", tmp_path / "x.h5"), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    errors = [line for line in r.stderr.splitlines() if "error" in line]
    assert len(errors) == 1, r.stderr
    for w in words:
        assert w in errors[0], errors[0]
    assert len(errors[0]) < 300 and "bad_alloc" not in r.stderr and "-C/" not in r.stderr
    assert not list(tmp_path.glob("x*.h5"))
