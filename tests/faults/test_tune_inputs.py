"""Hostile inputs to `dtune tune` and `dtune sweep` (issue 32, part A), with real processes: a
refused second tune on a running tune's --out changes none of its files; --timeout 0/-1/nan is
refused before anything runs, and a run an earlier --timeout killed is retried by a tune that
allows it more time; a 1-rank dtune-comm tune (busbw 0 for every candidate) ends with a clear "no
pick" and tune.json; an --out or -o that is a file or cannot be written is one line, exit 2; a
failed point's reason is mpirun's message, not its line of dashes; an axis that repeats a fixed
argument, and points over several nodes without --hostfile, are refused before anything runs."""

import json
import os
import shlex
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DTUNE = [str(REPO / "scripts" / "dtune")]
sys.path.insert(0, str(REPO / "sweeps"))

from dtune_sweep.runner import first_error  # noqa: E402

ONE_RANK = """
binary: dtune-comm
args: [-b, 1K, -e, 4K, -f, 2, -n, 8, -w, 1]
axes: {--algorithm: [flat, hierarchical]}
launch: {ranks: [1]}
"""
TWO_RANKS = ONE_RANK.replace("ranks: [1]", "ranks: [2]")
SLOW = """
binary: dtune-comm
args: [-b, 8, -e, 4M, -f, 2, -n, 400, -w, 2]
axes: {--collective: [allreduce, allgather]}
launch: {ranks: [2]}
"""


def write(tmp_path, text, name="s.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def dtune(*args, timeout=300):
    return subprocess.run(DTUNE + [str(a) for a in args], capture_output=True, text=True, timeout=timeout)


def one_error_line(r, *words):
    """Exit 2, one line on stderr naming every word, no traceback."""
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dtune: error: "), r.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def plan_ids(f):
    r = dtune("sweep", "plan", f)
    assert r.returncode == 0, r.stderr
    return [ln.split()[0] for ln in r.stdout.splitlines() if ln.startswith("  ") and not ln.startswith("  ...")]


def records(out):
    return [json.loads(line) for line in (out / "state.jsonl").read_text().splitlines()]


# Bug 1: the manifest of a running tune is the second tune's to leave alone.
def test_refused_tune_writes_nothing_in_a_running_tunes_directory(tmp_path):
    f = write(tmp_path, SLOW)
    out = tmp_path / "tune"
    first = subprocess.Popen(
        DTUNE + ["tune", f, "--out", str(out), "--no-report"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not ((out / "state.jsonl").exists() and any(r["event"] == "launched" for r in records(out))):
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()[0]
            time.sleep(0.02)
        before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.suffix != ".jsonl"}
        second = dtune("tune", f, "--out", out, "--no-report")
        one_error_line(second, f"pid {first.pid}")
        after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.suffix != ".jsonl"}
        assert after == before  # manifest.json and tune.json untouched
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=120)


# Bug 5: a timeout that cannot be met is refused; a too-short one does not decide later tunes.
def test_timeout_zero_negative_nan_refused_before_anything_runs(tmp_path):
    f = write(tmp_path, ONE_RANK)
    for bad in ("0", "-1", "nan", "inf"):
        for cmd in (["tune", f], ["sweep", "run", f]):
            out = tmp_path / f"out{bad}"
            one_error_line(dtune(*cmd, "--out", out, "--timeout", bad), "--timeout")
            assert not out.exists()


def test_a_run_killed_at_a_shorter_timeout_is_retried(tmp_path):
    f = write(tmp_path, TWO_RANKS)
    out = tmp_path / "tune"
    (out / "points").mkdir(parents=True)
    a, b = plan_ids(f)
    # As a `--timeout 0` tune of main left them: killed by the runner (no exit status) at once;
    # and a binary's own timeout (exit 3: a hang), which stays recorded.
    t = time.time()
    poisoned = [
        {"event": "finished", "id": a, "time": t, "status": "timeout", "exit_status": None, "seconds": 0.0},
        {"event": "finished", "id": b, "time": t, "status": "timeout", "exit_status": 3, "seconds": 2.0},
    ]
    (out / "state.jsonl").write_text("".join(json.dumps(r) + "\n" for r in poisoned))
    r = dtune("tune", f, "--out", out, "--no-report")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{a} timed out before after 0 s: retried, no --timeout" in r.stdout, r.stdout
    assert f"{b} timeout before: recorded, not retried" in r.stdout, r.stdout
    latest = {x["id"]: x for x in records(out) if x["event"] == "finished"}
    assert latest[a]["status"] == "ok" and latest[b]["status"] == "timeout"
    assert json.loads((out / "tune.json").read_text())["sweeps"][0]["winner"]["id"] == a


# Bug 8: busbw is 0 for every candidate of a 1-rank sweep: no pick, said, and tune.json written.
# Then `sweep status` on that directory describes the tune (its runs at their rungs' steps), not the
# file's points at full length as "pending".
def test_one_rank_comm_tune_says_there_is_no_pick(tmp_path):
    f = write(tmp_path, ONE_RANK.replace("axes: {", "axes: {--mpi-progress: [call, thread], "))
    out = tmp_path / "tune"
    r = dtune("tune", f, "--out", out, "--no-report")
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 1, r.stdout + r.stderr
    assert "busbw is 0 with 1 rank" in r.stdout and "no pick" in r.stdout, r.stdout
    rec = strict_json(out / "tune.json")["sweeps"][0]
    assert rec["winner"] is None and "cannot tell them apart" in rec["no_pick"]
    assert {c["status"] for rung in rec["rungs"] for c in rung["candidates"]} == {"ok"}
    assert sum(c["runs"] for rung in rec["rungs"] for c in rung["candidates"]) == rec["spent_runs"]
    assert len(rec["rungs"]) == 1  # 4 x 4 steps; every figure 0: nothing to promote by
    status = dtune("sweep", "status", f, "--out", out)
    assert status.returncode == 0, status.stderr
    assert "a dtune tune directory" in status.stdout and "pending" not in status.stdout, status.stdout
    assert f"ok {rec['spent_runs']}," in status.stdout and "no pick" in status.stdout, status.stdout


def strict_json(path):
    """The file read as RFC 8259 JSON: NaN and Infinity, which Python writes by default and jq or
    JavaScript refuse, raise."""

    def refuse(name):
        raise AssertionError(f"{path.name} holds a bare {name}")

    return json.loads(path.read_text(), parse_constant=refuse)


def test_tune_json_is_strict_json_with_null_for_figures_that_are_not_finite(tmp_path):
    import numpy as np

    from dtune_sweep import tune

    records = [{"winner": None, "interval": [float("nan"), np.float64("inf")], "n": np.int64(3), "p": np.float32(0.5)}]
    args = types.SimpleNamespace(file="s.yaml", method="halving", seed=1, budget=None)
    tune._write(tmp_path, records, args, None)
    (rec,) = strict_json(tmp_path / "tune.json")["sweeps"]
    assert rec == {"winner": None, "interval": [None, None], "n": 3, "p": 0.5}


# Bug 9: an --out or -o that cannot be a directory.
def test_out_that_is_a_file_or_unwritable(tmp_path):
    f = write(tmp_path, ONE_RANK)
    a_file = tmp_path / "a-file"
    a_file.write_text("keep me")
    unwritable = "/sys/dtune-test-out"  # refused even to root (EPERM)
    for cmd in (["tune", f], ["sweep", "run", f]):
        one_error_line(dtune(*cmd, "--out", a_file), "--out", "is a file")
        one_error_line(dtune(*cmd, "--out", unwritable), "--out", "cannot write")
    one_error_line(dtune("report", tmp_path, "-o", a_file), "-o", "is a file")
    one_error_line(dtune("report", tmp_path, "-o", unwritable), "-o", "cannot create")
    assert a_file.read_text() == "keep me"


# Bug 11: mpirun's boxed message is the reason, not its dashes.
def test_failed_point_reason_is_mpiruns_message(tmp_path):
    mpirun = os.environ.get("DTUNE_MPIRUN", "mpirun")
    exe = Path(os.environ.get("DTUNE_BIN_DIR", REPO / "build" / "bin")) / "dtune-comm"
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    cases = {
        "more processes than the ppr": ["-np", "4", "--map-by", "ppr:1:node"],
        "No nodes are available for this job": ["-np", "2", "--hostfile", os.devnull],
    }
    for want, opts in cases.items():
        log = tmp_path / "point.log"
        with open(log, "w") as lf:
            rc = subprocess.run([mpirun, *root, *opts, str(exe), "--no-output"], stdout=lf, stderr=lf, timeout=60)
        assert rc.returncode != 0
        why = first_error(log)
        assert want in why and "---" not in why, (why, log.read_text())
    # The same box after the run's own output, with detail after its first paragraph.
    log.write_text(
        "# dtune-comm 0.1\n" + "-" * 74 + "\nNo nodes are available for this job, either due to a\nfailure.\n\n"
        "  detail: 1\n" + "-" * 74 + "\n[host:1] 1 more process has sent help message\n"
    )
    assert first_error(log) == "No nodes are available for this job, either due to a failure."


# Bug 12: what every point would fail on is refused by the plan.
def test_axis_repeating_a_fixed_argument_is_refused(tmp_path):
    f = write(tmp_path, "binary: dtune-train\nargs: [--model, gpt2-tiny, --batch, 2]\naxes: {--batch: [2, 4]}\n")
    for cmd in (["sweep", "plan", f], ["tune", f, "--out", tmp_path / "t"]):
        one_error_line(dtune(*cmd), "axes.--batch", "fixed argument", "--batch 2")
    assert not (tmp_path / "t").exists()


def test_points_over_several_nodes_need_a_hostfile_outside_slurm(tmp_path):
    f = write(tmp_path, "binary: dtune-comm\nlaunch: {nodes: [2], ranks_per_node: [1]}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    for cmd in (["sweep", "run", f], ["tune", f]):
        out = tmp_path / cmd[-2]
        r = subprocess.run(DTUNE + cmd + ["--out", str(out)], capture_output=True, text=True, env=env, timeout=120)
        one_error_line(r, "launch.nodes 2", "--hostfile")
        assert not out.exists()
    r = subprocess.run(DTUNE + ["sweep", "plan", f], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and "# warning:" in r.stdout and "--hostfile" in r.stdout, r.stdout + r.stderr


# Nits.
def test_plan_prints_env_values_as_a_shell_reads_them(tmp_path):
    values = ["a b", "x'y", "$HOME"]
    f = write(tmp_path, f"binary: dtune-comm\nenv: {{NCCL_X: {json.dumps(values)}}}\n")
    r = dtune("sweep", "plan", f)
    assert r.returncode == 0, r.stderr
    got = [w.split("=", 1)[1] for ln in r.stdout.splitlines() for w in shlex.split(ln) if w.startswith("NCCL_X=")]
    assert got == values, r.stdout


def test_objective_that_fits_one_sweep_of_a_mixed_file_is_said(tmp_path):
    f = write(
        tmp_path,
        "sweeps:\n- name: train\n  binary: dtune-train\n  args: [--model, gpt2-tiny, --device, cpu]\n"
        "  axes: {--batch: [1, 2]}\n- name: comm\n" + "\n".join("  " + ln for ln in ONE_RANK.strip().splitlines()),
    )
    # mfu on the CPU without a peak is refused before any run; the comm sweep's objective is said.
    r = dtune("tune", f, "--out", tmp_path / "t", "--objective", "mfu")
    assert "sweep 'comm' runs dtune-comm: tuned for busbw" in r.stdout, r.stdout
    one_error_line(r, "--objective mfu", "sweep 'train'", "--peak-tflops")
    assert not (tmp_path / "t" / "state.jsonl").exists()
