"""Sweep runner faults with real processes: a second runner on one sweep directory is refused
(naming the holder's pid) and measures nothing; after kill -9 of the runner its point's process
group runs on, and an immediate resume ends it before relaunching, so every point is measured once
into a readable file; merge takes only points whose latest outcome is ok or oom."""

import json
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import h5py

REPO = Path(__file__).resolve().parents[2]
DTUNE = [str(REPO / "scripts" / "dtune")]

SLOW = """
binary: dtune-comm
args: [-b, 8, -e, 4M, -f, 2, -n, 400, -w, 2]
axes: {--collective: [allreduce, allgather]}
launch: {ranks: [2]}
"""
QUICK = SLOW.replace("-e, 4M, -f, 2, -n, 400", "-e, 64, -f, 8, -n, 5")


def write(tmp_path, text):
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return str(p)


def dtune(*args, timeout=600, env=None):
    return subprocess.run(DTUNE + [str(a) for a in args], capture_output=True, text=True, timeout=timeout, env=env)


def records(out):
    """The state log's complete lines (a runner may be writing the next)."""
    return [json.loads(line) for line in (out / "state.jsonl").read_text().split("\n")[:-1]]


def wait_for_launch(out, proc):
    """Returns once the runner has recorded a point's launch (complete lines only: the runner may be
    writing the next); fails if the runner exits first."""
    state = out / "state.jsonl"
    while not (state.exists() and any('"event": "launched"' in x for x in state.read_text().split("\n")[:-1])):
        assert proc.poll() is None, proc.communicate()[0]
        time.sleep(0.02)


def group_alive(pgid):
    """Whether process group `pgid` has a live (not zombie) process."""
    for d in Path("/proc").iterdir():
        try:
            stat = (d / "stat").read_text() if d.name.isdigit() else ""
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split() if stat else []
        if fields and int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def test_second_runner_is_refused(tmp_path):
    f = write(tmp_path, SLOW)
    out = tmp_path / "sweep"
    first = subprocess.Popen(
        DTUNE + ["sweep", "run", f, "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    wait_for_launch(out, first)
    second = dtune("sweep", "run", f, "--out", out)
    assert second.returncode == 2, second.stdout + second.stderr
    assert f"pid {first.pid}" in second.stderr, second.stderr
    rest = first.communicate(timeout=600)[0]
    assert first.returncode == 0, rest
    launched = [r["id"] for r in records(out) if r["event"] == "launched"]
    assert len(launched) == len(set(launched)) == 2  # the refused runner launched nothing


def holding_launcher(tmp_path):
    """An mpirun (DTUNE_MPIRUN) whose first launch holds until it is killed, standing in for a point
    that is still running whatever the machine's load; it takes the file it returns, and every later
    launch runs the real mpirun."""
    hold = tmp_path / "hold"
    hold.touch()
    exe = tmp_path / "mpirun"
    real = os.environ.get("DTUNE_MPIRUN", "mpirun")
    exe.write_text(
        f"#!/bin/sh\nif rm {shlex.quote(str(hold))} 2>/dev/null; then\n  while :; do sleep 1; done\nfi\n"
        f'exec {shlex.quote(real)} "$@"\n'
    )
    exe.chmod(0o755)
    return exe, hold


def test_kill_9_then_immediate_resume_ends_the_orphan_first(tmp_path):
    # Every wait is on an event: the launch recorded, the hold taken (the orphan is running its
    # command), the runner reaped; the orphan cannot finish by itself, so the resume must end it.
    f = write(tmp_path, QUICK)
    out = tmp_path / "sweep"
    launcher, hold = holding_launcher(tmp_path)
    env = {**os.environ, "DTUNE_MPIRUN": str(launcher)}
    runner = subprocess.Popen(
        DTUNE + ["sweep", "run", f, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=env,
    )
    wait_for_launch(out, runner)
    orphan = next(r for r in records(out) if r["event"] == "launched")
    while hold.exists():
        assert group_alive(orphan["pgid"]), "the first launch ended before it took the hold"
        time.sleep(0.02)
    os.killpg(runner.pid, signal.SIGKILL)  # the runner only: its point runs in a session of its own
    runner.wait()
    try:
        assert group_alive(orphan["pgid"]), "the point should outlive its runner (own session)"
        r = dtune("sweep", "run", f, "--out", out, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"ending {orphan['id']}" in r.stdout, r.stdout
        assert not group_alive(orphan["pgid"])
    finally:  # a hold the resume failed to end is not left running
        if group_alive(orphan["pgid"]):
            os.killpg(orphan["pgid"], signal.SIGKILL)
    recs = records(out)
    ok = [x["id"] for x in recs if x.get("status") == "ok"]
    assert sorted(ok) == sorted(set(ok)) and len(ok) == 2
    for x in recs:
        if x.get("status") == "ok":
            with h5py.File(x["output"]) as h:
                assert h.attrs["status"] == "complete"
    assert not list((out / "points").glob("*.partial"))


def test_merge_takes_only_points_whose_latest_outcome_is_complete(tmp_path):
    f = write(
        tmp_path,
        """
binary: dtune-comm
args: [-b, 8, -e, 64, -n, 5, -w, 1]
axes: {--collective: [allreduce, allgather]}
""",
    )
    out = tmp_path / "sweep"
    assert dtune("sweep", "run", f, "--out", out).returncode == 0
    recs = records(out)
    bad = recs[-1]["id"]
    # The latest outcome of one point is now a failure (a later launch that failed): its file from
    # the earlier launch is not a result of this sweep any more.
    with open(out / "state.jsonl", "a") as s:
        s.write(json.dumps({"event": "finished", "id": bad, "time": time.time(), "status": "failed"}) + "\n")
        s.write('{"torn line\n')
        s.write(json.dumps({"event": "finished", "time": "x"}) + "\n")
    m = dtune("sweep", "merge", f, "--out", out)
    assert m.returncode == 0, m.stderr
    with h5py.File(out / "merged.h5") as h:
        assert bad not in h["points"] and len(h["points"]) == 1


def test_merge_without_a_manifest_says_what_to_do(tmp_path):
    f = write(tmp_path, "binary: dtune-comm\n")
    m = dtune("sweep", "merge", f, "--out", tmp_path / "nothing")
    assert m.returncode == 2
    assert "manifest.json" in m.stderr and "Traceback" not in m.stderr


def test_a_stopped_runner_still_holds_its_sweep(tmp_path):
    # SIGSTOP of the runner (and its point) then an immediate resume: the stopped runner is alive
    # and holds the sweep, so the resume is refused instead of racing it; once continued, the first
    # runner finishes every point exactly once.
    f = write(tmp_path, SLOW)
    out = tmp_path / "sweep"
    runner = subprocess.Popen(
        DTUNE + ["sweep", "run", f, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    wait_for_launch(out, runner)
    point = next(r for r in records(out) if r["event"] == "launched")
    os.kill(runner.pid, signal.SIGSTOP)
    os.killpg(point["pgid"], signal.SIGSTOP)
    try:
        r = dtune("sweep", "run", f, "--out", out)
    finally:
        os.killpg(point["pgid"], signal.SIGCONT)
        os.kill(runner.pid, signal.SIGCONT)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"pid {runner.pid}" in r.stderr and "Traceback" not in r.stderr
    rest = runner.communicate(timeout=600)[0]
    assert runner.returncode == 0, rest
    ok = [x["id"] for x in records(out) if x.get("status") == "ok"]
    assert sorted(ok) == sorted(set(ok)) and len(ok) == 2
