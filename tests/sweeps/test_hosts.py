"""Where the points run (runner.MpirunHosts): `dtune sweep run` and `dtune tune` give a point over
several nodes mpirun's --hostfile (mapped --map-by ppr:R:node) and every point the --mpirun-tune
file, a 1-node point no hostfile; the printed winner's command is placed as its runs were. A file
that is not there exits 2 with one line before anything launches. Under Slurm the allocation gives
the nodes: --hostfile is refused (sweep slurm, tune --slurm), and the tune file reaches mpirun in
the array task (--launcher mpirun), refused with srun, which does not read it. On a synthetic
dtune-train (fake_train.py) and an mpirun that records its arguments (fake_mpirun.sh); the real
launch across simulated nodes is tests/cluster/test_cluster.py's."""

import os
import shlex
import subprocess
from pathlib import Path

import pytest
from fake_train_bin import install_fake_train

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

SPACE = """
name: fake
binary: dtune-train
args: [--warmup-steps, 1, --sleep-ms, 1, --z, 0]
steps: 8
axes: {--x: [2, 3]}
launch: {nodes: [1, 2], ranks_per_node: 2}
"""


@pytest.fixture
def env(tmp_path):
    """dtune-train is the synthetic one; mpirun starts it directly and records its arguments."""
    bindir = install_fake_train(tmp_path)
    log = tmp_path / "mpirun.log"
    return {
        **os.environ,
        "DTUNE_BIN_DIR": str(bindir),
        "DTUNE_MPIRUN": str(HERE / "fake_mpirun.sh"),
        "FAKE_MPIRUN_LOG": str(log),
    }


@pytest.fixture
def files(tmp_path):
    """A sweep file, a hostfile and a tune file."""
    (tmp_path / "s.yaml").write_text(SPACE)
    (tmp_path / "hosts").write_text("n0 slots=2\nn1 slots=2\n")
    (tmp_path / "mca.tune").write_text("--mca btl self,tcp\n")
    return tmp_path / "s.yaml", tmp_path / "hosts", tmp_path / "mca.tune"


def dtune(*args, env=None, cwd=None):
    cmd = [str(REPO / "scripts" / "dtune"), *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=cwd)


def launches(env) -> list[list[str]]:
    log = Path(env["FAKE_MPIRUN_LOG"])
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


def option(args: list[str], name: str) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args[:-1]) if a == name]


def check_placement(runs: list[list[str]], hosts: Path, tune: Path) -> None:
    """Every launch has the tune file; the 4-rank (2-node) ones alone have the hostfile."""
    assert {option(r, "-np")[0] for r in runs} == {"2", "4"}, runs
    for r in runs:
        assert option(r, "--tune") == [str(tune)], r
        assert option(r, "--map-by") == ["ppr:2:node"], r
        assert option(r, "--hostfile") == ([str(hosts)] if option(r, "-np") == ["4"] else []), r


def test_sweep_run_and_tune_place_two_node_points_on_the_hostfile(tmp_path, env, files):
    sweep, hosts, tune = files
    r = dtune("sweep", "run", sweep, "--out", tmp_path / "run", "--hostfile", hosts, "--mpirun-tune", tune, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    runs = launches(env)
    assert len(runs) == 4  # 2 values of --x x 2 shapes
    check_placement(runs, hosts, tune)
    Path(env["FAKE_MPIRUN_LOG"]).unlink()
    out = tmp_path / "tune"
    r = dtune("tune", sweep, "--out", out, "--no-report", "--hostfile", hosts, "--mpirun-tune", tune, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    runs = launches(env)
    assert len(runs) >= 4  # the first rung: every candidate
    check_placement(runs, hosts, tune)
    # The winner's command, as printed, is placed as its runs were.
    (command,) = [ln.split("command: ", 1)[1] for ln in r.stdout.splitlines() if "  command: " in ln]
    words = shlex.split(command)
    assert option(words, "--tune") == [str(tune)] and option(words, "--map-by") == ["ppr:2:node"], command
    assert option(words, "--hostfile") == ([str(hosts)] if option(words, "-np") == ["4"] else []), command


@pytest.mark.parametrize("flag", ["--hostfile", "--mpirun-tune"])
@pytest.mark.parametrize("command", [["sweep", "run"], ["tune"]])
def test_a_file_that_is_not_there_exits_2_before_anything_runs(tmp_path, env, files, flag, command):
    sweep = files[0]
    missing = tmp_path / "no-such-file"
    r = dtune(*command, sweep, "--out", tmp_path / "out", flag, missing, env=env)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr == f"dtune: error: {flag} {missing}: no such file\n", r.stderr
    assert launches(env) == []


@pytest.mark.parametrize(
    "command",
    [["sweep", "slurm", "--dry-run"], ["tune", "--slurm"]],
)
def test_under_slurm_a_hostfile_and_srun_with_a_tune_file_are_refused(tmp_path, env, files, command):
    sweep, hosts, tune = files
    out = tmp_path / "out"
    for flags, expect in (
        (["--hostfile", hosts], "--hostfile: under Slurm the job's allocation gives the nodes"),
        (["--hostfile", hosts, "--launcher", "mpirun"], "--hostfile: under Slurm the job's allocation"),
        (["--mpirun-tune", tune], "the tasks launch with srun, which does not read mpirun's tune file"),
        (["--mpirun-tune", tmp_path / "nope", "--launcher", "mpirun"], "no such file"),
    ):
        r = dtune(*command, sweep, "--out", out, *flags, env=env)
        assert r.returncode == 2, r.stdout + r.stderr
        assert r.stderr.count("\n") == 1 and expect in r.stderr, r.stderr
    assert not (out / "slurm").exists() and launches(env) == []


def test_a_slurm_task_gives_mpirun_the_tune_file_and_no_hostfile(tmp_path, env, files):
    sweep, _, tune = files
    out = tmp_path / "out"
    args = ["--dry-run", "--launcher", "mpirun", "--points-per-task", 2]
    r = dtune("sweep", "slurm", sweep, "--out", out, *args, "--mpirun-tune", tune.name, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    scripts = sorted((out / "slurm").glob("shape-*.sbatch"))
    assert len(scripts) == 2  # 1 node x 2 ranks, 2 nodes x 2 ranks
    for script in scripts:
        text = script.read_text()
        # The tune file by its absolute path: the task may start in another directory.
        assert text.splitlines()[-1].endswith(f" mpirun {shlex.quote(str(tune))}"), text
        # The array task, run as Slurm would (its #SBATCH lines are comments to bash).
        task = subprocess.run(
            ["bash", str(script)], env={**env, "SLURM_ARRAY_TASK_ID": "0"}, capture_output=True, text=True, timeout=120
        )
        assert task.returncode == 0, task.stdout + task.stderr
    runs = launches(env)
    assert len(runs) == 4, runs
    for r in runs:
        assert option(r, "--tune") == [str(tune)] and option(r, "--hostfile") == [], r
