"""Sweeps through a real Slurm (slurmctld, slurmd and munged started here): job arrays with one
task per bundle of points, srun --mpi=pmix inside the allocation, a failing point recorded as
failed while the others complete, everything merged, each run's world size and hosts read back
from its own provenance (as launched, not as planned); and the sbatch scripts' safety."""

import json
import re
import subprocess
import sys
from pathlib import Path

import h5py
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).parent))
from local_slurm import LocalSlurm  # noqa: E402

DTUNE = [str(REPO / "scripts" / "dtune")]

SWEEP = """
sweeps:
  - name: good
    binary: dtune-comm
    args: [-b, 8, -e, 4K, -f, 8, -n, 5, -c, 1]
    axes: {--collective: [allreduce, allgather]}
    launch: {ranks: [1, 2]}
  - name: bad
    binary: dtune-comm
    args: [-b, 8, -e, 8]
    axes: {--collective: [no-such-collective]}
"""


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    s = LocalSlurm(tmp_path_factory.mktemp("slurm"))
    missing = s.missing()
    if missing:
        pytest.fail(f"{missing} not found: scripts/setup.sh installs slurm-wlm and munge")
    s.start()
    yield s
    s.stop()


def dtune(args, env=None, timeout=300):
    return subprocess.run(DTUNE + [str(a) for a in args], capture_output=True, text=True, timeout=timeout, env=env)


def test_array_sweep_completes_and_merges(tmp_path, slurm):
    f = tmp_path / "s.yaml"
    f.write_text(SWEEP)
    out = tmp_path / "sweep"
    r = dtune(["sweep", "slurm", f, "--out", out, "--points-per-task", 1, "--throttle", 2], env=slurm.env)
    assert r.returncode == 0, r.stdout + r.stderr
    jobs = re.findall(r"submitted job array (\d+)", r.stdout)
    assert len(jobs) == 2  # two resource shapes: 1 rank and 2 ranks
    slurm.wait(jobs)
    status = dtune(["sweep", "status", f, "--out", out]).stdout
    assert "ok 4" in status and "failed 1" in status and "pending 0" in status, status + slurm.logs()
    m = dtune(["sweep", "merge", f, "--out", out])
    assert m.returncode == 0, m.stderr
    with h5py.File(out / "merged.h5") as h:
        assert len(h["runs"]) == 4
        seen = []
        for g in h["runs"].values():
            planned = json.loads(g.attrs["point"])["ranks"]
            # What the launch gave, from the run's own provenance: srun started `planned` ranks in
            # one MPI world on the Slurm node, inside an array task of this submission (a launch
            # that left each process a world of its own would record world_size 1, once per rank).
            prov = h["points"][g.attrs["point_id"]]["provenance"]
            world = int(prov.attrs["world_size"])
            hosts = list(prov["rank_host"].asstr()[()])
            assert (world, hosts) == (planned, [slurm.host] * planned), g.name
            assert list(prov["rank_local_rank"][()]) == list(range(planned)), g.name
            assert g["time_us"].shape[2] == planned, g.name  # every rank measured: (P, S, R, I)
            env = prov["env"].attrs
            assert env["SLURM_ARRAY_JOB_ID"] in jobs and int(env["SLURM_NTASKS"]) == planned, dict(env)
            seen.append(world)
        assert sorted(seen) == [1, 1, 2, 2]
    # Each task wrote only its own state log.
    assert len(list(out.glob("state-*.jsonl"))) == 5


def test_sbatch_scripts_are_safe_and_pass_options_through(tmp_path):
    evil = "x; touch pwned $(id) `id`"
    f = tmp_path / "s.yaml"
    f.write_text(
        f"binary: dtune-train\naxes: {{--model: [{json.dumps(evil)}, gpt2-tiny, resnet18]}}\nlaunch: {{ranks: [1]}}\n"
    )
    out = tmp_path / "sweep"
    r = dtune(
        [
            "sweep",
            "slurm",
            f,
            "--out",
            out,
            "--dry-run",
            "--throttle",
            2,
            "--points-per-task",
            2,
            "--sbatch=--partition=gpu",
            "--sbatch=--time=00:10:00",
        ]
    )
    assert r.returncode == 0, r.stderr
    (script,) = (out / "slurm").glob("*.sbatch")
    text = script.read_text()
    assert "#SBATCH --array=0-1%2" in text  # 3 points, 2 per task
    assert "#SBATCH --partition=gpu" in text and "#SBATCH --time=00:10:00" in text
    assert evil not in text and "pwned" not in text  # point values never enter the script
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    bad = dtune(["sweep", "slurm", f, "--out", tmp_path / "o2", "--dry-run", "--sbatch=--x\n#SBATCH --y"])
    assert bad.returncode == 2 and "no newlines" in bad.stderr
