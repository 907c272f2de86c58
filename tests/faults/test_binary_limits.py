"""The binaries' shared limits (issue 32, part A), with the real binaries: every thread-count flag
is bounded by one rule (core/cli.h thread_count: 4 x the online cores, at least 64, at most 1024)
and refused above it with one line, exit 2; a run at the bound still ends on SIGTERM; a size whose
host memory cannot fit is refused before allocating by the one check (core/host_memory.h
refuse_unless_host_fits), never left to the OOM killer; dtune-train's micro-step counts have a
sane range and GPT-only flags on a ResNet are refused."""

import math
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("DTUNE_BIN_DIR", REPO / "build" / "bin"))
MAX_THREADS = min(1024, max(64, 4 * os.sysconf("SC_NPROCESSORS_ONLN")))
GPT = ["--model", "gpt2-tiny", "--context", "32", "--batch", "2", "--no-output"]


def run(binary, *args, timeout=120):
    return subprocess.run([str(BIN / binary), *map(str, args)], capture_output=True, text=True, timeout=timeout)


def one_error_line(r, binary, *words):
    """Exit 2, one line on stderr naming every word: no backtrace, no 300-digit range."""
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{binary}: error: "), r.stderr
    assert len(lines[0]) < 400, lines[0]
    for w in words:
        assert w in lines[0], lines[0]


def mem_available_bytes():
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    pytest.fail("no MemAvailable in /proc/meminfo")


# (binary, arguments before the flag, the flag, arguments after its value)
THREAD_FLAGS = [
    ("dtune-train", [*GPT, "--steps", "1"], "--threads", []),
    ("dtune-train", [*GPT, "--steps", "1"], "--workers", []),
    ("dtune-probe", ["--no-output", "gemm"], "--threads", []),
    ("dtune-probe", ["--no-output", "memory"], "--threads", []),
    ("dtune-comm", ["-b", "8", "-e", "8", "--no-output"], "--load-threads", []),
    ("dtune-models", [], "--threads", ["list"]),
]


@pytest.mark.parametrize("binary,before,flag,after", THREAD_FLAGS, ids=[f"{t[0]}{t[2]}" for t in THREAD_FLAGS])
def test_thread_counts_have_one_upper_bound(binary, before, flag, after):
    for bad in (MAX_THREADS + 1, 100000):
        one_error_line(run(binary, *before, flag, bad, *after), binary, flag, f"0 to {MAX_THREADS}")


def test_dtune_data_workers_have_the_same_bound(tmp_path):
    r = run("dtune-data", "bench", tmp_path, "--workers", MAX_THREADS + 1)
    one_error_line(r, "dtune-data", "--workers", f"0 to {MAX_THREADS}")


def test_a_run_at_the_thread_bound_ends_on_sigterm():
    p = subprocess.Popen(
        [str(BIN / "dtune-train"), *GPT, "--steps", "100000", "--threads", str(MAX_THREADS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    first = ""
    try:
        # Not a readline: piped, the banner sits in stdout's buffer. Two seconds in, the run is past
        # its set-up or inside it; either way SIGTERM must end it.
        time.sleep(2)
        assert p.poll() is None, p.communicate()[0]
        p.send_signal(signal.SIGTERM)
        out = p.communicate(timeout=60)[0]  # ends promptly (before the limit it ran 9.5 minutes)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    # 130: stopped after the step in progress; -SIGTERM: ended before its handler was installed.
    assert p.returncode in (130, -signal.SIGTERM), first + out


def test_stream_arrays_that_cannot_fit_are_refused_before_allocating():
    size_mib = math.ceil(mem_available_bytes() / 2**20)  # 3 arrays of MemAvailable each
    r = run("dtune-probe", "--no-output", "memory", "--host-only", "--iters", "1", "--array-size", f"{size_mib}M")
    one_error_line(r, "dtune-probe", "--array-size", "host memory", "lower --array-size")


def test_gemm_operands_that_cannot_fit_are_refused_before_allocating():
    # 65536^2 fp32 for each of A, B, C: 48 GiB per rank, on as many ranks as exceed MemAvailable.
    ranks = max(1, math.ceil(1.5 * mem_available_bytes() / (3 * 65536**2 * 4)))
    mpirun = os.environ.get("DTUNE_MPIRUN", "mpirun")
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    cmd = [str(BIN / "dtune-probe"), "--no-output", "gemm", "--shapes", "65536", "--dtype", "fp32", "--min-iters", "1"]
    if ranks > 1:
        cmd = [mpirun, *root, "--oversubscribe", "-np", str(ranks), *cmd]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    one_error_line(r, "dtune-probe", "--shapes 65536x65536x65536 in float32", "host memory")


def test_micro_step_counts_have_a_sane_range():
    for flag in ("--micro-batches", "--accum-steps"):
        for bad in (0, 4097, 100000000):
            one_error_line(run("dtune-train", *GPT, "--steps", "1", flag, bad), "dtune-train", flag, "1 to 4096")


def test_gpt_shape_flags_on_a_resnet_are_refused():
    for flag in ("--layers", "--context", "--vocab"):
        r = run("dtune-train", "--model", "resnet18", "--image-size", "32", "--steps", "1", "--no-output", flag, "2")
        one_error_line(r, "dtune-train", f"{flag} 2 with --model resnet18", "GPT-2 models only")


# Every numeric flag checked by core/cli.h's kPositive / kNonNegative (CLI11's PositiveNumber let
# "nan" and "inf" through: --lr nan trained on NaN, --peak-tflops nan gave an MFU of nan).
NUMBER_FLAGS = [
    ("dtune-train", GPT, "--lr", "nan", "not a finite number"),
    ("dtune-train", GPT, "--bucket-mb", "inf", "not a finite number"),
    ("dtune-train", GPT, "--first-bucket-mb", "nan", "not a finite number"),
    ("dtune-train", GPT, "--peak-tflops", "nan", "not a finite number"),
    ("dtune-train", GPT, "--cache-mb", "inf", "not a finite number"),
    ("dtune-train", GPT, "--steps", "0", "greater than zero"),
    ("dtune-train", GPT, "--warmup-steps", "-1", "zero or more"),
    ("dtune-data", ["bench", "x"], "--batch", "0", "greater than zero"),
    ("dtune-data", ["bench", "x"], "--cache-mb", "nan", "not a finite number"),
    ("dtune-probe", ["--no-output", "gemm"], "--max-seconds", "nan", "not a finite number"),
]


@pytest.mark.parametrize(
    "binary,before,flag,value,why", NUMBER_FLAGS, ids=[f"{t[0]}{t[2]}={t[3]}" for t in NUMBER_FLAGS]
)
def test_numbers_that_are_not_finite_or_in_range_are_one_line(binary, before, flag, value, why):
    one_error_line(run(binary, *before, flag, value), binary, flag, f"'{value}'", why)
