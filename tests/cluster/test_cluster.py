"""The cluster in a box (scripts/cluster): simulated nodes in network namespaces joined by a bridge
over tc-shaped veth pairs, and dtune-comm launched across them with mpirun. Proves that up/down
leave nothing behind and a second up changes nothing; that every collective is exact across 2
nodes x 2 ranks, flat and hierarchical, with each rank's node and local rank right in the results
file; that dtune-comm's set-up cannot hang where the MPI library's locality data is wrong; that
the inter-node link runs at the shaped 1 Gbit/s while ranks within a node go far faster; that
dtune-train's hierarchical reduction equals the flat one; that each node has its own node-local
directory, and the node cache in it fetches each block once per node; that `dtune sweep run
--hostfile --mpirun-tune` runs a 2-node point across the nodes and a 1-node point on this machine,
and `dtune tune` with the same flags runs its 2-node candidates across the nodes.

Each test process uses cluster names of its own (pid-based), so two runs never collide; the
fixtures take the clusters down however the tests end. Needs root, as CI runs."""

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import h5py
import numpy as np
import pytest

from conftest import REPO, bin_dir
from node_cache_s3 import bench_command, dataset_on_bridge, fetched_mb

CLUSTER = REPO / "scripts" / "cluster"
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces, tc)")


def cluster(*args, check=True, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run([str(CLUSTER), *map(str, args)], capture_output=True, text=True, timeout=120, **kw)
    if check:
        assert r.returncode == 0, r.stdout + r.stderr
    return r


def owned(name: str) -> dict:
    """Everything on this machine whose name the cluster `name` uses."""
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    qdiscs = subprocess.run(["tc", "qdisc", "show"], capture_output=True, text=True).stdout
    return {
        "namespaces": [w.split()[0] for w in ns.splitlines() if w.startswith(f"{name}-node")],
        "links": [m for m in re.findall(r"^\d+: ([^:@]+)", links, re.M) if m.startswith(name)],
        "qdiscs": [q for q in qdiscs.splitlines() if re.search(rf"dev {name}(br|v\d)", q)],
        "state": Path(f"/run/dtune-cluster/{name}").exists(),
    }


@pytest.fixture(scope="module")
def shaped():
    """2 nodes, 2 slots each, 1 Gbit/s links: up for the module, down however it ends."""
    name = f"dt{os.getpid() % 10**7}"
    try:
        cluster("up", "--nodes", 2, "--link-gbit", 1, "--name", name)
        yield name
    finally:
        cluster("down", "--name", name, check=False)


def mpirun(name: str, np_: int, args: list, extra=(), timeout=600, exe="dtune-comm") -> subprocess.CompletedProcess:
    state = Path(f"/run/dtune-cluster/{name}")
    cmd = [os.environ.get("DTUNE_MPIRUN", "mpirun"), "--allow-run-as-root", "--tune", str(state / "mpirun.tune")]
    cmd += [*extra, "--hostfile", str(state / "hostfile"), "-np", str(np_)]
    cmd += [str(bin_dir() / exe), *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def test_up_down_leave_nothing_and_a_second_up_is_a_no_op():
    name = f"du{os.getpid() % 10**7}"
    try:
        first = cluster("up", "--nodes", 3, "--link-gbit", 2, "--name", name)
        have = owned(name)
        assert sorted(have["namespaces"]) == [f"{name}-node{i}" for i in range(3)]
        assert sorted(have["links"]) == sorted([f"{name}br"] + [f"{name}v{i}" for i in range(3)])
        shaped_links = [q for q in have["qdiscs"] if "tbf" in q]
        assert len(shaped_links) == 3 and all("rate 2Gbit" in q for q in shaped_links)
        assert "mpirun --tune" in first.stdout.splitlines()[-1]
        hostfile = Path(f"/run/dtune-cluster/{name}/hostfile").read_text().split("\n")
        assert hostfile[:3] == [f"{name}-node{i} slots=2" for i in range(3)]
        # Inside a node: its own hostname, its address, a shaped egress.
        r = cluster(
            "exec", "--name", name, 2, "sh", "-c", "hostname; ip -4 -o addr show dev eth0; tc qdisc show dev eth0"
        )
        assert r.stdout.splitlines()[0] == f"{name}-node2"
        assert "tbf" in r.stdout and "rate 2Gbit" in r.stdout
        # Up again: nothing is recreated (the qdiscs keep their handles), the same line is printed.
        second = cluster("up", "--nodes", 3, "--link-gbit", 2, "--name", name)
        assert "already up" in second.stdout
        assert owned(name) == have
        assert second.stdout.splitlines()[-1] == first.stdout.splitlines()[-1]
        # Another shape under the same name: bad input, refused in one line (exit 2), the cluster
        # untouched.
        other = cluster("up", "--nodes", 2, "--name", name, check=False)
        assert other.returncode == 2 and len(other.stderr.strip().splitlines()) == 1
        assert "down" in other.stderr and owned(name) == have
        assert cluster("status", "--name", name).returncode == 0
    finally:
        cluster("down", "--name", name, check=False)
    assert owned(name) == {"namespaces": [], "links": [], "qdiscs": [], "state": False}
    assert cluster("status", "--name", name, check=False).returncode == 1
    # Down again: nothing to do, still fine.
    cluster("down", "--name", name)


def test_refuses_clearly_without_privileges_and_on_bad_flags():
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    r = subprocess.run([*nobody, str(CLUSTER), "up", "--name", "dtnobody"], capture_output=True, text=True)
    assert r.returncode != 0
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and "needs root" in r.stderr
    assert owned("dtnobody")["namespaces"] == []
    for args in (["up", "--nodes", "0"], ["up", "--link-gbit", "fast"], ["up", "--name", "Bad-Name"], ["fly"]):
        r = cluster(*args, check=False)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)


@pytest.mark.parametrize("algorithm", ["flat", "hierarchical"])
def test_every_collective_exact_across_two_nodes_and_ranks_know_their_node(shaped, algorithm, tmp_path):
    out = tmp_path / "c.h5"
    args = ["-b", "8", "-e", "256K", "-f", "8", "-n", "2", "-w", "1", "-c", "1", "--collective", "all"]
    args += ["-d", "float32,int32,bfloat16", "-o", "sum,max,avg", "--algorithm", algorithm]
    r = mpirun(shaped, 4, [*args, "--timeout", "120", "--output", out])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "# Out of bounds values : 0 OK" in r.stdout
    assert f"nnodes 2 algorithm: {algorithm}" in r.stdout
    with h5py.File(out) as f:
        prov = f["provenance"]
        hosts = [h.decode() if isinstance(h, bytes) else h for h in prov["rank_host"][:]]
        assert hosts == [f"{shaped}-node0"] * 2 + [f"{shaped}-node1"] * 2
        assert list(prov["rank_node"][:]) == [0, 0, 1, 1]
        assert list(prov["rank_local_rank"][:]) == [0, 1, 0, 1]
        assert int(prov.attrs["nodes"]) == 2
        # Two nodes, one machine: every rank records this kernel's boot id (the model counts the
        # ranks sharing the machine's cores by it).
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        assert list(prov["rank_boot_id"].asstr()[:]) == [boot] * 4
        groups = list(f["runs"].values())
        assert len(groups) == 3 * 3 * 3 + 4 * 3  # reductions x dtypes x ops + the others x dtypes
        for g in groups:
            run = g["count"][:] > 0  # 8 B rounds down to nothing for allgather and alltoall
            wrong = g["wrong"][:, run]  # (placement, size, rank)
            assert (wrong[0] == 0).all(), g.name  # out-of-place checked everywhere, exact
            assert ((wrong[1] == 0) | (wrong[1] == -1)).all(), g.name
            coll = g.attrs["collective"]
            assert g.attrs["algorithm"] == (algorithm if coll == "allreduce" else "flat")


def test_node_local_directory_is_shared_within_a_node_and_not_across(shaped):
    # Every launch on a node sees the node's own directory at one path (a node-local disk).
    state = Path(f"/run/dtune-cluster/{shaped}")
    cmd = [os.environ.get("DTUNE_MPIRUN", "mpirun"), "--allow-run-as-root", "--tune", str(state / "mpirun.tune")]
    cmd += ["--hostfile", str(state / "hostfile"), "-np", "4", "sh", "-c"]
    cmd += [f"echo $OMPI_COMM_WORLD_RANK > {state}/node-local/rank$OMPI_COMM_WORLD_RANK"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    for i, ranks in enumerate((["rank0", "rank1"], ["rank2", "rank3"])):
        assert sorted(p.name for p in (state / "local" / f"{shaped}-node{i}").iterdir()) == ranks
    assert list((state / "node-local").iterdir()) == []  # outside the nodes: nothing


def test_ranks_of_two_nodes_are_not_pinned_to_the_same_cores(shaped):
    # Each node's daemon would bind its ranks from core 0 up (both nodes' rank 0 on core 0): the
    # tune file turns binding off, so every rank may run on every core of the machine.
    state = Path(f"/run/dtune-cluster/{shaped}")
    cmd = [os.environ.get("DTUNE_MPIRUN", "mpirun"), "--allow-run-as-root", "--tune", str(state / "mpirun.tune")]
    cmd += ["--hostfile", str(state / "hostfile"), "--map-by", "ppr:1:node", "-np", "2"]
    # Each rank writes its own file (the file system is shared): two ranks printing at once can
    # interleave in mpirun's forwarded stdout ("node1node0 [0, 1]").
    out = Path(tempfile.mkdtemp(prefix="affinity-"))
    code = (
        "import os, socket; "
        f"open('{out}/' + os.environ['OMPI_COMM_WORLD_RANK'], 'w')"
        ".write(f'{socket.gethostname()} {sorted(os.sched_getaffinity(0))}')"
    )
    r = subprocess.run([*cmd, "python3", "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    every = sorted(os.sched_getaffinity(0))
    seen = sorted(p.read_text() for p in out.iterdir())
    shutil.rmtree(out)
    assert seen == [f"{shaped}-node{i} {every}" for i in range(2)], seen


def test_setup_cannot_hang_where_mpi_locality_is_wrong(shaped):
    # Open MPI with PMIx's hash store takes the other node's ranks for local peers here, and
    # MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) then never returns on the first node. dtune no
    # longer calls it: the job ends by itself, and if the library cannot share memory within a
    # node it says why.
    r = mpirun(
        shaped,
        4,
        ["-b", "8", "-e", "8", "--timeout", "20", "--no-output"],
        extra=["-x", "PMIX_MCA_gds=hash"],
        timeout=120,
    )
    assert r.returncode == 0 or "PMIX_MCA_gds=hash" in r.stderr, r.stderr[-3000:]


def median_busbw_gbit(path: Path) -> float:
    """The busbw of the largest size, from the median iteration of the slowest rank."""
    with h5py.File(path) as f:
        (g,) = f["runs"].values()
        size = float(g["size_bytes"][-1])
        t_us = np.median(np.nanmax(g["time_us"][0, -1], axis=0))  # (R, I) -> slowest rank per iteration
        return size * g.attrs["busbw_factor"] / (t_us * 1e-6) * 8 / 1e9


def test_inter_node_runs_at_the_shaped_rate_and_intra_node_far_above(shaped, tmp_path):
    # A broadcast between two ranks: 64 MiB one way per iteration (busbw factor 1), over the link
    # when the ranks are on two nodes, over shared memory when they share one. One direction only:
    # Open MPI's TCP transport (ob1) serialises a sendrecv's two directions on these links (a
    # 64 MiB sendrecv takes twice a broadcast's time), which would halve the figure. Large
    # messages and 6 iterations: the median iteration is a steady transfer, not a handshake.
    args = ["--collective", "broadcast", "-b", "64M", "-e", "64M", "-n", "6", "-w", "1", "-c", "0"]
    args += ["--timeout", "200"]
    inter = mpirun(shaped, 2, [*args, "--output", tmp_path / "inter.h5"], extra=["--map-by", "node"])
    assert inter.returncode == 0, inter.stderr[-3000:]
    intra = mpirun(shaped, 2, [*args, "--output", tmp_path / "intra.h5"], extra=["--map-by", "slot"])
    assert intra.returncode == 0, intra.stderr[-3000:]
    with h5py.File(tmp_path / "inter.h5") as f:
        assert list(f["provenance"]["rank_node"][:]) == [0, 1]
    with h5py.File(tmp_path / "intra.h5") as f:
        assert list(f["provenance"]["rank_node"][:]) == [0, 0]
    inter_gbit = median_busbw_gbit(tmp_path / "inter.h5")
    intra_gbit = median_busbw_gbit(tmp_path / "intra.h5")
    # tbf counts Ethernet frames: TCP payload is 1448 of every 1514 bytes, ~0.956 Gbit/s of data.
    assert 0.75 <= inter_gbit <= 1.25, f"inter-node busbw {inter_gbit:.3f} Gbit/s at a 1 Gbit/s link"
    assert intra_gbit > 3 * inter_gbit, f"intra-node {intra_gbit:.2f} Gbit/s, inter-node {inter_gbit:.2f}"


def test_train_hierarchical_reduction_equals_flat_across_nodes(shaped, tmp_path):
    # The tiny GPT on 2 nodes x 2 ranks, one step from the same parameters: the hierarchical
    # reduction (within node, among leaders, broadcast) gives the flat MPI_Iallreduce's averaged
    # gradients to float rounding; --check-every 1 proves every rank holds the same parameters.
    torch = pytest.importorskip("torch")
    exe = bin_dir() / "dtune-train"
    if not exe.exists():
        pytest.fail(f"{exe} does not exist: build first (scripts/setup.sh)")
    dumps = {}
    for algo in ("flat", "hierarchical"):
        args = ["--model", "gpt2-tiny", "--context", "32", "--vocab", "256", "--batch", "2", "--steps", "2"]
        args += ["--warmup-steps", "0", "--threads", "1", "--bucket-mb", "0.05", "--first-bucket-mb", "0.05"]
        args += ["--check-every", "1"]
        args += ["--reduce-algo", algo, "--timeout", "120", "--debug-dump", tmp_path / f"{algo}.pt"]
        r = mpirun(shaped, 4, [*args, "--output", tmp_path / f"{algo}.h5"], exe="dtune-train")
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        with h5py.File(tmp_path / f"{algo}.h5") as f:
            (g,) = f["runs"].values()
            assert g.attrs["reduce_algo"] == algo and list(f["provenance"]["rank_node"][:]) == [0, 0, 1, 1]
        dumps[algo] = torch.load(tmp_path / f"{algo}.pt", weights_only=False)
    flat, hier = dumps["flat"], dumps["hierarchical"]
    assert set(flat) == set(hier) and any(k.startswith("grad.") for k in flat)
    for k in flat:
        scale = flat[k].abs().max().clamp_min(1e-12)
        assert ((hier[k].float() - flat[k].float()).abs().max() / scale).item() <= 1e-5, k


def test_node_cache_fetches_once_per_node(shaped, tmp_path):
    # An S3 server (moto) on the bridge, every rank reading every sample (--debug-same-slice)
    # through a node cache in the node-local directory: 2 ranks on one node fetch each block once,
    # 2 nodes x 2 ranks fetch it once per node.
    state = Path(f"/run/dtune-cluster/{shaped}")
    with dataset_on_bridge(state, os.environ) as (env, total_mb):

        def fetched(np_, mapping, cache):
            cmd = [os.environ.get("DTUNE_MPIRUN", "mpirun"), "--allow-run-as-root", "--tune", state / "mpirun.tune"]
            cmd += ["--map-by", mapping, "--hostfile", state / "hostfile", "-np", np_]
            return fetched_mb(cmd + bench_command(state / "node-local" / cache), env)

        assert fetched(2, "slot", "one-node") == pytest.approx(total_mb, abs=0.006)
        assert fetched(4, "slot", "two-nodes") == pytest.approx(2 * total_mb, abs=0.012)


def rank_hosts(path: Path) -> tuple:
    """(nodes, each rank's host) from a results file's provenance."""
    with h5py.File(path) as h:
        prov = h["provenance"]
        return int(prov.attrs["nodes"]), list(prov["rank_host"].asstr()[:])


def test_sweep_run_puts_a_two_node_point_on_the_cluster(shaped, tmp_path):
    # dtune sweep run with the cluster's hostfile and tune file: the 2 nodes x 2 ranks point runs
    # across the nodes (each rank's host from its provenance), the 1-rank point on this machine.
    state = Path(f"/run/dtune-cluster/{shaped}")
    sweep = tmp_path / "s.yaml"
    sweep.write_text(
        "sweeps:\n  - name: two\n    binary: dtune-comm\n    args: [-b, 8, -e, 1K, -f, 8, -n, 3, -c, 1]\n"
        "    launch: {nodes: [1, 2], ranks_per_node: 2}\n"
    )
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    cmd = [REPO / "scripts" / "dtune", "sweep", "run", sweep, "--out", tmp_path / "out"]
    cmd += ["--hostfile", state / "hostfile", "--mpirun-tune", state / "mpirun.tune"]
    r = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    hosts = dict(rank_hosts(f) for f in (tmp_path / "out" / "points").glob("*.h5"))  # nodes -> hosts
    assert hosts[2] == [f"{shaped}-node0"] * 2 + [f"{shaped}-node1"] * 2, hosts
    assert len(hosts[1]) == 2 and not hosts[1][0].startswith(shaped), hosts


def test_tune_puts_its_two_node_candidates_on_the_cluster(shaped, tmp_path):
    # dtune tune with the cluster's hostfile and tune file: every run of both candidates (the tiny
    # GPT, 2 nodes x 2 ranks, 4 steps) runs across the nodes, each rank's host read from its results file, and
    # the winner's printed command names the hostfile.
    state = Path(f"/run/dtune-cluster/{shaped}")
    sweep = tmp_path / "t.yaml"
    sweep.write_text(
        "name: two\nbinary: dtune-train\n"
        "args: [--model, gpt2-tiny, --context, 16, --vocab, 128, --batch, 2, --threads, 1, --warmup-steps, 1]\n"
        "steps: 4\naxes: {--bucket-mb: [1, 25]}\nlaunch: {nodes: 2, ranks_per_node: 2}\n"
    )
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    cmd = [REPO / "scripts" / "dtune", "tune", sweep, "--out", tmp_path / "out", "--no-report", "--timeout", 120]
    cmd += ["--hostfile", state / "hostfile", "--mpirun-tune", state / "mpirun.tune"]
    r = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=400, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # Paired rungs: every run of both candidates (the incumbent's repeats included) is a point.
    (rec,) = json.loads((tmp_path / "out" / "tune.json").read_text())["sweeps"]
    points = sorted((tmp_path / "out" / "points").glob("*.h5"))
    assert len(points) == rec["spent_runs"] >= 2, r.stdout
    ran = {c["candidate_id"] for rung in rec["rungs"] for c in rung["candidates"]}
    assert len(ran) == 2, rec["rungs"]
    for f in points:
        _, hosts = rank_hosts(f)
        assert hosts == [f"{shaped}-node0"] * 2 + [f"{shaped}-node1"] * 2, (f.name, hosts)
    assert f"--hostfile {state / 'hostfile'}" in r.stdout, r.stdout
