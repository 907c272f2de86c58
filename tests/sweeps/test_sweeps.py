"""Sweeps: planning (product, zips, exclusions, stable ids), bad sweep files rejected with exit 2
before anything launches, a local sweep killed with kill -9 mid-way then resumed: every point
ran to completion exactly once and the merged HDF5 file holds all of them; and a sweep or a tune
on a disk that fills up (a small tmpfs): one line, exit 1, and the point the full disk failed run
again by the rerun."""

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import h5py
import pytest

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(REPO / "sweeps"))
from fake_train_bin import install_fake_train  # noqa: E402

from dtune_sweep.spec import plan  # noqa: E402

DTUNE = [str(REPO / "scripts" / "dtune")]


def write(tmp_path, text, name="s.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def dtune(*args, timeout=600, **kw):
    return subprocess.run(DTUNE + [str(a) for a in args], capture_output=True, text=True, timeout=timeout, **kw)


def test_product_zip_exclude_repeats(tmp_path):
    f = write(
        tmp_path,
        """
binary: dtune-train
args: [--model, gpt2-tiny]
axes: {--batch: [1, 2, 4], --precision: [fp32, bf16]}
zip: [{--bucket-mb: [1, 25], --first-bucket-mb: [0.5, 1]}]
env: {OMP_NUM_THREADS: [1, 2]}
exclude: [{--batch: 4, --precision: bf16}]
repeats: 2
""",
    )
    points = plan(f)
    assert len(points) == (3 * 2 - 1) * 2 * 2 * 2
    assert len({p.id for p in points}) == len(points)
    bucket_pairs = {(p.values["--bucket-mb"], p.values["--first-bucket-mb"]) for p in points}
    assert bucket_pairs == {(1, 0.5), (25, 1)}


def test_every_zip_block_is_a_dimension_of_its_own(tmp_path):
    # Two zips of 2 and 3 value sets: their product, 6 points, each zip's lists varied together.
    f = write(
        tmp_path,
        """
binary: dtune-train
zip:
  - {--bucket-mb: [1, 25], --first-bucket-mb: [0.5, 1]}
  - {--batch: [2, 4, 8], --global-batch: [4, 8, 16]}
""",
    )
    flags = ("--bucket-mb", "--first-bucket-mb", "--batch", "--global-batch")
    got = sorted(tuple(p.values.get(k, "-") for k in flags) for p in plan(f))
    assert got == sorted((b, fb, n, 2 * n) for b, fb in ((1, 0.5), (25, 1)) for n in (2, 4, 8)), got


def test_ids_stable_across_runs_and_key_order(tmp_path):
    a = write(
        tmp_path,
        "binary: dtune-comm\nargs: [-b, 8]\naxes: {--collective: [allreduce, allgather], -e: [8]}\n".replace(
            "-e: [8]", "--op: [sum]"
        ),
        "a.yaml",
    )
    b = write(
        tmp_path,
        "axes: {--op: [sum], --collective: [allreduce, allgather]}\nargs: [-b, 8]\nbinary: dtune-comm\n",
        "b.yaml",
    )
    ida = sorted(p.id for p in plan(a))
    assert ida == sorted(p.id for p in plan(a))
    # Reordered keys give the same points: the arguments are compared as sets of (flag, value).
    assert {frozenset(zip(p.args[2::2], p.args[3::2])) for p in plan(a)} == {
        frozenset(zip(p.args[2::2], p.args[3::2])) for p in plan(b)
    }


def test_random_order_is_a_reproducible_permutation_that_follows_the_seed(tmp_path):
    spec = "binary: dtune-comm\naxes: {--collective: [allreduce, allgather, broadcast, reduce], --minbytes: [8, 64]}\n"
    written = [p.id for p in plan(write(tmp_path, spec, "w.yaml"))]
    orders = {}
    for seed in (7, 8):
        f = write(tmp_path, spec + f"order: random\nseed: {seed}\n", f"r{seed}.yaml")
        orders[seed] = [p.id for p in plan(f)]
        assert orders[seed] == [p.id for p in plan(f)]  # reproducible for a seed
        # Every point exactly once, in an order that is not the written one (8 points: 40320 orders).
        assert sorted(orders[seed]) == sorted(written) and len(set(written)) == 8
        assert orders[seed] != written, seed
    assert orders[7] != orders[8]  # the seed decides the order


@pytest.mark.parametrize(
    "text,expect",
    [
        ("binary: dtune-comm\naxes: {--collective: [allreduce\n", "line"),
        ("binary: dtune-comm\naxes: {--no-such-flag: [1]}\n", "unknown axis '--no-such-flag'"),
        ("binary: dtune-nope\n", "binary 'dtune-nope'"),
        ("binary: dtune-comm\naxes: {--collective: [[1, 2]]}\n", "wrong type"),
        (
            "binary: dtune-comm\naxes: {--collective: [allreduce]}\nexclude: [{--collective: allreduce}]\n",
            "no points left",
        ),
        ("binary: dtune-comm\nenv: {PATH: [x]}\n", "environment axis 'PATH'"),
        ("binary: dtune-comm\nlaunch: {ranks: [0]}\n", "launch.ranks"),
        ("binary: dtune-comm\nlaunch: {ranks: 2, nodes: 4}\n", "every node needs at least one rank"),
        ("binary: dtune-comm\nlaunch: {ranks: 2, nodes: 2, ranks_per_node: 2}\n", "is not nodes 2 x ranks_per_node 2"),
        ("binary: dtune-comm\ncolour: blue\n", "unknown key"),
    ],
)
def test_bad_sweep_files_exit_2_before_launch(tmp_path, text, expect):
    f = write(tmp_path, text)
    r = dtune("sweep", "run", f, "--out", tmp_path / "out")
    assert r.returncode == 2, r.stdout + r.stderr
    assert expect in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


def test_yaml_syntax_error_names_line_and_column(tmp_path):
    f = write(tmp_path, "binary: dtune-comm\naxes:\n  --collective: [allreduce, allgather\n")
    r = dtune("sweep", "plan", f)
    assert r.returncode == 2 and "YAML syntax error at line" in r.stderr and "column" in r.stderr


def test_kill_minus_9_then_resume_runs_every_point_once(tmp_path):
    f = write(
        tmp_path,
        """
binary: dtune-comm
args: [-b, 8, -e, 64K, -f, 4, -n, 200, -w, 5, -c, 1]
axes: {--collective: [allreduce, allgather, reduce_scatter]}
launch: {ranks: [1, 2]}
""",
    )
    out = tmp_path / "sweep"
    p = subprocess.Popen(
        DTUNE + ["sweep", "run", f, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    # Wait until two points finished, then kill the runner and everything it started.
    seen = 0
    for line in p.stdout:
        if line.startswith("["):
            seen += 1
            if seen == 2:
                break
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    status = dtune("sweep", "status", f, "--out", out)
    assert "ok 2" in status.stdout or "ok 3" in status.stdout, status.stdout
    r = dtune("sweep", "run", f, "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "already complete" in r.stdout
    records = [json.loads(line) for line in (out / "state.jsonl").read_text().splitlines()]
    ok = [rec["id"] for rec in records if rec.get("status") == "ok"]
    assert len(ok) == 6 and len(set(ok)) == 6  # every point completed exactly once
    assert "ok 6" in dtune("sweep", "status", f, "--out", out).stdout
    m = dtune("sweep", "merge", f, "--out", out)
    assert m.returncode == 0, m.stderr
    with h5py.File(out / "merged.h5") as h:
        assert len(h["points"]) == 6
        assert len(h["runs"]) == 6
        for g in h["runs"].values():
            assert json.loads(g.attrs["point"])["id"] == g.attrs["point_id"]
            assert "provenance" in h["points"][g.attrs["point_id"]]


def test_a_resume_reruns_failed_points_but_never_an_out_of_memory_one(tmp_path):
    # The synthetic trainer (fake_train.py): --x 7 runs out of memory (exit 4), --x 6 fails (exit 1),
    # --x 3 runs. An out-of-memory point is a result (the batch does not fit), so the rerun that
    # resumes the sweep launches the failed point again and neither of the others.
    env = {
        **os.environ,
        "DTUNE_BIN_DIR": str(install_fake_train(tmp_path)),
        "DTUNE_MPIRUN": str(HERE / "fake_mpirun.sh"),
    }
    f = write(tmp_path, "binary: dtune-train\nargs: [--warmup-steps, 1, --sleep-ms, 1]\naxes: {--x: [7, 6, 3]}\n")
    out = tmp_path / "sweep"
    assert dtune("sweep", "run", f, "--out", out, env=env).returncode == 1  # --x 6 failed
    r = dtune("sweep", "run", f, "--out", out, env=env)
    assert r.returncode == 1 and "# resume: 2 of 3 points already complete" in r.stdout, r.stdout + r.stderr
    argvs = [json.loads(line) for line in (out / "launches.log").read_text().splitlines()]
    launched = Counter(a[a.index("--x") + 1] for a in argvs)
    assert launched == {"7": 1, "6": 2, "3": 1}, launched
    assert "ok 1, oom 1, failed 1" in dtune("sweep", "status", f, "--out", out, env=env).stdout


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB file system of its own (a tmpfs: root mounts one, as the tests and CI run) to fill."""
    d = tmp_path / "disk"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(d)], capture_output=True, text=True)
    if r.returncode != 0:  # not root, or no mount in this container: test_runner.py's injected ENOSPC still runs
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip() or r.returncode}")
    yield d
    subprocess.run(["umount", "-l", str(d)], check=False)


# dtune-train for a full disk: with FAKE_FILL_KB it writes that much output first, which the disk
# cannot hold (exit 1; the .partial kept, so the log is empty, or removed, so the log says why), else
# it is fake_train.py. Every launch is counted in FAKE_LAUNCHES (off the small disk).
FILLING_TRAIN = """
import os, sys
args = sys.argv[1:]
if "--help" not in args:
    with open(os.environ["FAKE_LAUNCHES"], "a") as f:
        f.write(args[args.index("--x") + 1] + "\\n")
if "--help" in args or "FAKE_FILL_KB" not in os.environ:
    os.execv(sys.executable, [sys.executable, os.environ["FAKE_TRAIN"], *args])
partial = args[args.index("--output") + 1] + ".partial"
try:
    with open(partial, "wb") as f:
        f.write(bytes(int(os.environ["FAKE_FILL_KB"]) << 10))
except OSError as e:
    if os.environ["FAKE_ON_FULL"] == "remove":
        os.unlink(partial)
    print(f"dtune-train: error: cannot write {partial}: {e.strerror}", file=sys.stderr)
    sys.exit(1)
"""


def filling_train(tmp_path: Path, leftover: str) -> dict:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "filling_train.py").write_text(FILLING_TRAIN)
    exe = bindir / "dtune-train"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} {bindir / "filling_train.py"} "$@"\n')
    exe.chmod(0o755)
    return {
        **os.environ,
        "DTUNE_BIN_DIR": str(bindir),
        "DTUNE_MPIRUN": str(HERE / "fake_mpirun.sh"),
        "FAKE_TRAIN": str(HERE / "fake_train.py"),
        "FAKE_LAUNCHES": str(tmp_path / "launches.txt"),
        "FAKE_FILL_KB": "4096",
        "FAKE_ON_FULL": leftover,
    }


@pytest.mark.parametrize("command", ["sweep", "tune"])
@pytest.mark.parametrize("leftover", ["kept", "removed"])
def test_a_full_disk_is_one_line_and_its_point_runs_again_on_resume(tmp_path, small_disk, command, leftover):
    # The first point's output fills the disk. The run stops there: one line naming the disk and
    # what met it, exit 1, every state line whole, and the point not recorded as a failure of its
    # own, so that the rerun (room made) runs it again; `tune` shares the runner's bookkeeping, and
    # a failed run is one it never retries.
    env = filling_train(tmp_path, leftover)
    f = write(tmp_path, "binary: dtune-train\nargs: [--warmup-steps, 1, --sleep-ms, 1]\naxes: {--x: [2, 3, 4]}\n")
    out = small_disk / "out"
    cmd = ["sweep", "run", f] if command == "sweep" else ["tune", f, "--no-report"]
    r = dtune(*cmd, "--out", out, env=env)
    assert r.returncode == 1, r.stdout + r.stderr
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dtune: error: no space left on device: "), r.stderr
    assert f" in {out / 'points'} (" in err[0] or f"cannot write {out}" in err[0], err
    assert err[0].endswith("free there): free some space, then rerun the same command to resume"), err
    records = [json.loads(line) for line in (out / "state.jsonl").read_text().splitlines()]
    assert not [rec for rec in records if rec.get("status") == "failed"], records
    first = (tmp_path / "launches.txt").read_text().split()
    assert len(first) == 1, first  # nothing launched after the full disk
    for partial in (out / "points").glob("*.partial"):  # room made: what filled the disk removed
        partial.unlink()
    del env["FAKE_FILL_KB"]
    r = dtune(*cmd, "--out", out, env=env)
    assert r.returncode == 0 and "not retried" not in r.stdout, r.stdout + r.stderr
    launches = Counter((tmp_path / "launches.txt").read_text().split())
    assert launches[first[0]] >= 2, launches  # the point the full disk failed, run again
    records = [json.loads(line) for line in (out / "state.jsonl").read_text().splitlines()]
    assert not [rec for rec in records if rec.get("status") == "failed"], records
    if command == "sweep":  # the merged file on a full disk: one line, and no partial file left
        with open(small_disk / "filler", "wb") as filler, pytest.raises(OSError):
            while True:
                filler.write(bytes(64 << 10))
                filler.flush()
        r = dtune("sweep", "merge", f, "--out", out, env=env)
        assert r.returncode == 1 and r.stderr.startswith(
            f"dtune: error: no space left on device: cannot write {out}/merged.h5 ("
        ), r.stderr
        assert len(r.stderr.splitlines()) == 1 and not list(out.glob("merged.h5*")), r.stderr


def test_shell_metacharacters_reach_the_program_verbatim(tmp_path):
    evil = "tiny; touch pwned $(id) `id` 'x' \"y\" | z"
    f = write(tmp_path, f"binary: dtune-train\naxes: {{--model: [{json.dumps(evil)}]}}\n")
    r = dtune("sweep", "run", f, "--out", tmp_path / "out", cwd=tmp_path)
    assert r.returncode == 1  # the point failed: no such model
    log = next((tmp_path / "out" / "points").glob("*.log")).read_text()
    assert evil in log  # the binary saw the value exactly as written
    assert not (tmp_path / "pwned").exists()
    # status names the failed point and the error its log held, not only a count.
    status = dtune("sweep", "status", f, "--out", tmp_path / "out", cwd=tmp_path).stdout.splitlines()
    assert "failed 1" in status[0], status
    assert len(status) == 2 and "  failed  " in status[1] and "error" in status[1], status
    assert (tmp_path / "out" / "points" / f"{status[1].split()[0]}.log").exists(), status


def test_sigterm_marks_the_running_point_interrupted(tmp_path):
    f = write(
        tmp_path,
        """
binary: dtune-comm
args: [-b, 8, -e, 16M, -f, 2, -w, 5, -c, 1]
steps: 200
axes: {--collective: [allreduce, allgather, alltoall]}
""",
    )
    out = tmp_path / "sweep"
    p = subprocess.Popen(
        DTUNE + ["sweep", "run", f, "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    for line in p.stdout:
        if line.startswith("[1/3]"):
            break
    # The second point is running once the runner recorded its launch (its process group exists);
    # a signal from then on ends that group and marks the point interrupted.
    state = out / "state.jsonl"
    deadline = time.monotonic() + 120
    while sum(json.loads(x)["event"] == "launched" for x in state.read_text().split("\n")[:-1]) < 2:
        assert time.monotonic() < deadline and p.poll() is None, "the second point never launched"
        time.sleep(0.02)
    p.send_signal(signal.SIGTERM)
    rest = p.communicate(timeout=120)[0]
    assert p.returncode == 130, rest
    status = dtune("sweep", "status", f, "--out", out).stdout
    assert "interrupted 1" in status, status
    assert sum(" interrupted " in line for line in status.splitlines()[1:]) == 1, status
    # The rerun completes what was interrupted or never started, and nothing twice.
    r = dtune("sweep", "run", f, "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok 3" in dtune("sweep", "status", f, "--out", out).stdout
    records = [json.loads(line) for line in (out / "state.jsonl").read_text().splitlines()]
    ok = [rec["id"] for rec in records if rec.get("status") == "ok"]
    assert len(ok) == len(set(ok)) == 3
