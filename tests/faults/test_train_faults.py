"""dtune-train under faults: a rank stopped (SIGSTOP) mid-training is named, the job ends with exit 3
soon after --timeout, and every completed step is in a readable file with status timeout; a signal
(SIGINT/SIGTERM) or an error after training began keeps the completed steps with status interrupted
or failed; sizes that cannot fit in host memory are refused with one line before anything is
allocated, and an allocation that fails anyway is an oom record, never a crash or a backtrace."""

import os
import selectors
import signal
import subprocess
import time

import h5py
import pytest

from conftest import bin_dir, mpirun_prefix, rank_pid

TINY = ["--model", "gpt2-tiny", "--batch", "2", "--threads", "1"]
STEPS = 100000  # runs until the test stops it


def train_cmd(np, *args):
    exe = str(bin_dir() / "dtune-train")
    return (mpirun_prefix(np) if np > 0 else []) + [exe, *map(str, args)]


def start_long_run(out, *extra):
    """A 2-rank run that goes on until stopped; returns it once rank 0 reports its first steps
    written (so steps were completed), with the number it reported."""
    p = subprocess.Popen(
        train_cmd(2, *TINY, "--steps", STEPS, "--warmup-steps", "1", "--output", out, *extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    with selectors.DefaultSelector() as sel:
        sel.register(p.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not sel.select(timeout=1):
                continue
            line = p.stdout.readline()
            if not line:
                break
            if "steps done, written" in line:
                return p, int(line.split()[1])
    os.killpg(p.pid, signal.SIGKILL)
    rest, err = p.communicate()
    pytest.fail(f"no steps were reported as written within 60 s (exit {p.returncode}):\n{rest[-2000:]}\n{err[-3000:]}")


def steps_in(path):
    """(file status, run status, rows of total_ms, steps_written) of the file's one train run."""
    with h5py.File(path) as f:
        (run,) = f["runs"].values()
        assert run["total_ms"].shape[1] == 2  # [S, R]
        rows = run["total_ms"].shape[0]
        for name in ("loss", "data_ms", "comm_exposed_ms"):
            assert run[name].shape == (rows, 2)
        for name in ("loss_scale", "skipped", "profiled"):
            assert run[name].shape == (rows,)
        return f.attrs["status"], run.attrs["status"], rows, int(run.attrs["steps_written"])


def test_a_stopped_rank_is_named_and_completed_steps_are_kept(tmp_path):
    from dtune_report.loader import load_train

    out = tmp_path / "t.h5"
    p, reported = start_long_run(out, "--timeout", "4")
    victim = rank_pid(p.pid, 1, "dtune-train")
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
    assert "Exception raised from" not in err and "frame #" not in err
    file_status, run_status, rows, written = steps_in(out)
    assert (file_status, run_status) == ("timeout", "timeout")
    assert rows == written >= reported >= 1
    df = load_train(out)
    assert df.step.nunique() == rows and set(df["rank"]) == {0, 1}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_keeps_the_completed_steps(tmp_path, sig):
    from dtune_report.loader import load_train, load_train_summary

    out = tmp_path / "t.h5"
    p, reported = start_long_run(out)
    # To the ranks themselves: they agree to stop at the next step boundary and write. (A signal to
    # mpirun is forwarded too, but mpirun then kills the ranks after odls_base_sigkill_timeout,
    # 1 s by default, whether or not they finished writing: a race a test must not depend on.)
    for rank in (0, 1):
        os.kill(rank_pid(p.pid, rank, "dtune-train"), sig)
    rest, err = p.communicate(timeout=60)
    assert p.returncode != 0, err
    file_status, run_status, rows, written = steps_in(out)
    assert (file_status, run_status) == ("interrupted", "interrupted"), err
    assert rows == written >= reported >= 1
    assert load_train(out).step.nunique() == rows
    summary = load_train_summary(out)
    assert summary.throughput_steps[0] == rows - 1  # warm-up 1; the summary covers what ran
    assert summary.samples_per_s[0] > 0


def test_an_error_after_training_keeps_the_steps(tmp_path):
    """Rank 0 alone fails after the last step (its --debug-dump cannot be written): the file keeps
    every step, with status failed; the job ends with the error, not a hang."""
    out = tmp_path / "t.h5"
    r = subprocess.run(
        train_cmd(
            2,
            *TINY,
            "--steps",
            "3",
            "--warmup-steps",
            "1",
            "--output",
            out,
            "--debug-dump",
            tmp_path / "missing" / "dir" / "d.pt",
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1, r.stderr
    assert "cannot write tensor file" in r.stderr
    file_status, run_status, rows, written = steps_in(out)
    assert (file_status, run_status) == ("failed", "failed")
    assert rows == written == 4


@pytest.mark.parametrize(
    "args, flag",
    [
        (["--model", "gpt2-tiny", "--batch", "100000000"], "--batch 100000000"),
        (["--model", "gpt2-tiny", "--context", "100000000"], "--context 100000000"),
        (["--model", "resnet18", "--image-size", "32", "--width", "8", "--batch", "100000000"], "--batch 100000000"),
    ],
)
def test_sizes_that_cannot_fit_are_one_line(tmp_path, args, flag):
    t0 = time.monotonic()
    r = subprocess.run(train_cmd(2, *args, "--output", tmp_path / "x.h5"), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    errors = [line for line in r.stderr.splitlines() if "error" in line]
    assert len(errors) == 1, r.stderr
    for w in (flag, "need", "of host memory per rank", "available", "lower " + flag.split()[0]):
        assert w in errors[0], errors[0]
    assert time.monotonic() - t0 < 30
    assert not list(tmp_path.glob("x*.h5*"))


def test_an_allocation_that_fails_is_an_oom_record(tmp_path):
    """A batch that passes the host-memory check but cannot be allocated (the address space is
    capped, as a cgroup or ulimit would) ends as an oom record, exit 4, one line, no backtrace."""
    import resource

    out = tmp_path / "o.h5"
    cap = 6 << 30

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    # gpt2-tiny logits: 128 x 1024 fp32 = 512 KiB per sample; 16384 samples: 8 GiB, past the cap.
    r = subprocess.run(
        train_cmd(
            0,
            "--model",
            "gpt2-tiny",
            "--batch",
            "16384",
            "--steps",
            "1",
            "--warmup-steps",
            "0",
            "--threads",
            "1",
            "--output",
            out,
        ),
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit,
    )
    if r.returncode == 2 and "available" in r.stderr:
        pytest.skip("this machine has too little memory for the allocation to pass the host check")
    assert r.returncode == 4, r.stderr
    assert "Exception raised from" not in r.stderr + r.stdout and "frame #" not in r.stderr + r.stdout
    assert "bad_alloc" not in r.stderr
    with h5py.File(out) as f:
        (run,) = f["runs"].values()
        assert run.attrs["status"] == "oom"
        assert run.attrs["batch"] == 16384
