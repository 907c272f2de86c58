"""Slurm with several nodes: a real slurmctld and one slurmd per simulated node of a cluster in a box
(local_slurm.LocalSlurm(nodes=2): each slurmd inside its node's network namespace, with the node's
hostname and node-local directory). Proves that a sweep point with launch {nodes: 2,
ranks_per_node: 2} runs through srun --mpi=pmix across the two nodes and merges, each rank's node,
local rank and host read back from its own provenance; that the node-local directory under Slurm is
shared by a node's ranks and not across nodes, and the node cache in it fetches each block once per
node; and that when a node dies under a running point, that point ends `failed` naming the node
failure, the bundle's next point that needs both nodes fails at once with the reason, and the
points on the surviving node are ok: nothing waits for the dead node, and nothing (daemon, rank,
namespace) outlives the fixture; that `dtune sweep slurm --launcher mpirun --mpirun-tune` runs the
2-node point with mpirun inside the allocation, on the job's nodes, with the tune file; and that a
Slurm whose test process was killed outright is ended by the next fixture. Needs root (namespaces), as CI runs."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import h5py
import pytest

from conftest import REPO
from node_cache_s3 import bench_command, dataset_on_bridge, fetched_mb

sys.path.insert(0, str(Path(__file__).parent))
from local_slurm import LocalSlurm  # noqa: E402

DTUNE = [str(REPO / "scripts" / "dtune")]
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces for the simulated nodes)")
# The simulated nodes share this machine's cores: ranks that spin while idle starve each other.
YIELD = {"OMPI_MCA_mpi_yield_when_idle": "1"}


def start(root: Path, tag: str) -> LocalSlurm:
    s = LocalSlurm(root, nodes=2, name=f"{tag}{os.getpid() % 10**7}")
    missing = s.missing()
    if missing:
        pytest.fail(f"{missing} not found: scripts/setup.sh installs slurm-wlm, munge and iproute2")
    s.start()
    return s


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    s = start(tmp_path_factory.mktemp("slurm"), "sn")
    try:
        yield s
    finally:
        s.stop()
    assert s.leftovers() == []


def dtune(args, env=None, timeout=300):
    return subprocess.run(DTUNE + [str(a) for a in args], capture_output=True, text=True, timeout=timeout, env=env)


def states(out: Path) -> dict:
    """Point id -> its `finished` record, from every task's state log."""
    done = {}
    for log in out.glob("state*.jsonl"):
        for line in log.read_text().splitlines():
            r = json.loads(line)
            if r["event"] == "finished":
                done[r["id"]] = r
    return done


def test_two_node_point_runs_and_merges(tmp_path, slurm):
    f = tmp_path / "s.yaml"
    f.write_text("""
binary: dtune-comm
args: [-b, 8, -e, 4K, -f, 8, -n, 3, -w, 1, -c, 1, --timeout, 120, -d, "float32,int32", -o, "sum,max"]
launch: {nodes: 2, ranks_per_node: 2}
""")
    plan = dtune(["sweep", "plan", f])
    assert plan.returncode == 0 and "np=4 nodes=2 per-node=2" in plan.stdout, plan.stdout + plan.stderr
    out = tmp_path / "sweep"
    r = dtune(["sweep", "slurm", f, "--out", out], env={**slurm.env, **YIELD})
    assert r.returncode == 0, r.stdout + r.stderr
    (script,) = (out / "slurm").glob("*.sbatch")
    text = script.read_text()
    assert "#SBATCH --nodes=2" in text and "#SBATCH --ntasks=4" in text and "#SBATCH --ntasks-per-node=2" in text
    slurm.wait(re.findall(r"submitted job array (\d+)", r.stdout), timeout=240)
    (rec,) = states(out).values()
    assert rec["status"] == "ok", rec.get("reason", "") + slurm.logs()
    assert "srun --mpi=pmix -n 4 -N 2 --ntasks-per-node=2" in (out / "state-0-0.jsonl").read_text()
    m = dtune(["sweep", "merge", f, "--out", out])
    assert m.returncode == 0, m.stderr
    with h5py.File(out / "merged.h5") as h:
        assert len(h["runs"]) == 4  # 2 dtypes x 2 ops
        (pid,) = h["points"]
        prov = h["points"][pid]["provenance"]
        # As launched, from the run's own provenance: one world of 4 ranks, 2 on each node.
        assert int(prov.attrs["world_size"]) == 4 and int(prov.attrs["nodes"]) == 2
        names = slurm.node_names
        assert list(prov["rank_host"].asstr()[()]) == [names[0]] * 2 + [names[1]] * 2
        assert list(prov["rank_node"][()]) == [0, 0, 1, 1]
        assert list(prov["rank_local_rank"][()]) == [0, 1, 0, 1]
        env = prov["env"].attrs
        assert int(env["SLURM_NNODES"]) == 2 and int(env["SLURM_NTASKS"]) == 4, dict(env)
        for g in h["runs"].values():
            assert json.loads(g.attrs["point"])["nodes"] == 2
            assert g["time_us"].shape[2] == 4, g.name  # every rank measured: (P, S, R, I)
            assert (g["wrong"][0] == 0).all() and ((g["wrong"][1] == 0) | (g["wrong"][1] == -1)).all(), g.name


def test_mpirun_launcher_takes_the_clusters_tune_file_across_the_nodes(tmp_path, slurm):
    # --launcher mpirun --mpirun-tune: inside the allocation mpirun starts the 2 x 2 ranks on the
    # job's nodes (Slurm's, no hostfile), with the cluster's MCA settings (its TCP subnet).
    f = tmp_path / "s.yaml"
    f.write_text(
        "binary: dtune-comm\nargs: [-b, 8, -e, 1K, -f, 8, -n, 3, -c, 1, --timeout, 120]\n"
        "launch: {nodes: 2, ranks_per_node: 2}\n"
    )
    out = tmp_path / "sweep"
    tune = slurm.state / "mpirun.tune"
    args = ["sweep", "slurm", f, "--out", out, "--launcher", "mpirun", "--mpirun-tune", tune]
    r = dtune(args, env={**slurm.env, **YIELD})
    assert r.returncode == 0, r.stdout + r.stderr
    slurm.wait(re.findall(r"submitted job array (\d+)", r.stdout), timeout=240)
    (rec,) = states(out).values()
    assert rec["status"] == "ok", rec.get("reason", "") + slurm.logs()
    (started,) = [json.loads(x) for x in (out / "state-0-0.jsonl").read_text().splitlines() if '"started"' in x]
    assert f"--tune {tune}" in started["command"] and "--hostfile" not in started["command"], started
    names = slurm.node_names
    with h5py.File(rec["output"]) as h:
        assert list(h["provenance"]["rank_host"].asstr()[()]) == [names[0]] * 2 + [names[1]] * 2


def srun(slurm: LocalSlurm, args: list, env=None, timeout=300) -> subprocess.CompletedProcess:
    """srun from this machine's root namespace: slurmd starts the tasks inside the nodes."""
    cmd = ["srun", "--mpi=pmix", "-N", "2", "-n", "4", "--ntasks-per-node=2", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**(env or slurm.env), **YIELD})


def test_node_local_directory_is_per_node_under_slurm(slurm):
    local = slurm.state / "node-local"
    r = srun(slurm, ["sh", "-c", f'echo "$SLURM_LOCALID" > {local}/rank$SLURM_PROCID; hostname'])
    assert r.returncode == 0, r.stderr + slurm.logs()
    assert sorted(r.stdout.split()) == sorted(slurm.node_names * 2)
    for i, ranks in enumerate((["rank0", "rank1"], ["rank2", "rank3"])):
        d = slurm.state / "local" / slurm.node_names[i]
        assert sorted(p.name for p in d.iterdir()) == ranks
        assert sorted((d / x).read_text().strip() for x in ranks) == ["0", "1"]  # local ranks 0 and 1
    assert list(local.iterdir()) == []  # outside the nodes: nothing


def test_node_cache_fetches_once_per_node_under_slurm(slurm):
    # An S3 server (moto) on the bridge, every rank reading every sample (--debug-same-slice)
    # through a node cache in the node-local directory, launched by srun: 2 ranks on one node fetch
    # each block once, 2 nodes x 2 ranks once per node.
    with dataset_on_bridge(slurm.state, slurm.env) as (env, total_mb):

        def fetched(nodes, cache):
            cmd = ["srun", "--mpi=pmix", "-N", nodes, "-n", 2 * nodes, "--ntasks-per-node=2"]
            return fetched_mb(cmd + bench_command(slurm.state / "node-local" / cache), {**env, **YIELD})

        assert fetched(1, "one-node") == pytest.approx(total_mb, abs=0.006)
        assert fetched(2, "two-nodes") == pytest.approx(2 * total_mb, abs=0.012)
        for name in slurm.node_names:  # each node's own copy, in its own directory
            assert (slurm.state / "local" / name / "two-nodes").is_dir()


DEAD_NODE_SWEEP = """
sweeps:
  - name: wide
    binary: dtune-comm
    args: [-b, 8, -e, 8, -w, 0, -c, 0, --timeout, 300]
    axes: {--iters: [1000000, 5]}
    launch: {nodes: 2, ranks_per_node: 2}
  - name: narrow
    binary: dtune-comm
    args: [-b, 8, -e, 4K, -f, 8, -n, 3, -c, 1]
    axes: {--collective: [allreduce, allgather]}
    launch: {ranks: 2}
"""


def test_a_dead_nodes_point_fails_and_the_others_are_ok(tmp_path):
    # Its own Slurm: the test kills a node. Every job is placed on node0 (--nodelist: the 2-node
    # job gets node1 too). Once the long 2-node point's ranks run on node1, every process there
    # dies (slurmd, slurmstepd, ranks: a crashed node). Slurm marks node1 DOWN (SlurmdTimeout),
    # srun reports the node failure and ends the step; the job, submitted --no-kill, goes on.
    s = start(tmp_path / "slurm", "sd")
    try:
        f = tmp_path / "s.yaml"
        f.write_text(DEAD_NODE_SWEEP)
        out = tmp_path / "sweep"
        args = ["sweep", "slurm", f, "--out", out, "--points-per-task", 2, f"--sbatch=--nodelist={s.node_names[0]}"]
        r = dtune(args, env={**s.env, **YIELD})
        assert r.returncode == 0, r.stdout + r.stderr
        jobs = re.findall(r"submitted job array (\d+)", r.stdout)
        assert len(jobs) == 2
        deadline = time.time() + 120
        while time.time() < deadline:
            on_node1 = [p for p in _pids_in(s.node_names[1]) if b"dtune-comm" in _cmdline(p)]
            if len(on_node1) == 2:
                break
            time.sleep(0.2)
        assert len(on_node1) == 2, "the 2-node point's ranks never started on node1:\n" + s.logs()
        time.sleep(1)
        assert s.kill_node(1)
        t0 = time.monotonic()
        s.wait(jobs, timeout=120)  # nothing waits for the dead node
        took = time.monotonic() - t0
        done = states(out)
        by_sweep = {}
        for p in json.loads((out / "manifest.json").read_text()):
            by_sweep.setdefault(p["sweep"], []).append(done.get(p["id"], {}))
        long_run, short_run = by_sweep["wide"]
        assert long_run["status"] == "failed", long_run
        assert f"Node failure on {s.node_names[1]}" in long_run["reason"], long_run
        # The bundle's next 2-node point: the job holds node0 alone now, so it fails at once.
        assert short_run["status"] == "failed" and short_run["exit_status"] is None, short_run
        assert "holds 1 node" in short_run["reason"] and "needs 2" in short_run["reason"], short_run
        assert [x["status"] for x in by_sweep["narrow"]] == ["ok", "ok"], by_sweep["narrow"]
        status = dtune(["sweep", "status", f, "--out", out]).stdout
        assert "ok 2" in status and "failed 2" in status and "pending 0" in status, status
        sinfo = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True, env=s.env)
        assert f"{s.node_names[1]} down" in sinfo.stdout, sinfo.stdout
        print(f"# the jobs ended {took:.1f} s after node1 died")
    finally:
        s.stop()
    assert s.leftovers(tmp_path) == []


def _pids_in(ns: str) -> list[int]:
    r = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
    return [int(x) for x in r.stdout.split()]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_a_slurm_whose_test_process_was_killed_is_ended_by_the_next(tmp_path):
    # A test run killed outright (ctest's timeout: SIGKILL) cannot stop its Slurm; the next
    # multi-node fixture ends it (its daemons, its nodes' processes, its cluster) before starting.
    name = f"sk{os.getpid() % 10**7}"
    root = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("local_slurm.py")), "--nodes", "2", "--name", name, root],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert "export SLURM_CONF=" in "".join(proc.stdout.readline() for _ in range(2))
    finally:
        proc.kill()  # SIGKILL: no teardown
        proc.wait()
    victim = LocalSlurm(root, nodes=2, name=name)
    assert victim.leftovers()  # its daemons and namespaces outlive it
    s = start(tmp_path / "next", "sr")
    try:
        assert not Path(f"/run/dtune-cluster/{name}").exists()
    finally:
        s.stop()
    assert victim.leftovers() == [] and s.leftovers() == []
