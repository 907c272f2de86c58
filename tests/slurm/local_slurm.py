"""A real Slurm for the tests: munged, slurmctld and slurmd started from a generated slurm.conf in a
temporary directory (ProctrackType=proctrack/linuxproc, TaskPlugin=task/none,
SelectType=select/cons_tres, SlurmUser=root), and stopped afterwards.

Single node (the default): one slurmd on this machine, named after its hostname.

Several nodes (`nodes=N`): a cluster in a box (scripts/cluster up --nodes N --name NAME) and one
slurmd per simulated node, each started inside its node (scripts/cluster exec: the node's network
namespace, its hostname, its node-local directory) as `slurmd -N NAME-nodeI`, with NodeAddr the
node's address and its own spool directory, log and pid file (%n in slurm.conf). slurmctld stays in
this machine's root namespace; the nodes reach it on the bridge's address (SlurmctldHost=host(IP)).
Batch scripts, srun and the ranks therefore run inside the nodes. SlurmdTimeout is short (a node
whose slurmd stops answering is DOWN within seconds, not minutes). stop() ends every process left
in a node's namespace (slurmstepd, ranks) before taking the cluster down, so nothing outlives it.

munged is this fixture's own (its key, socket, pid, log and seed files in the directory; Slurm finds
it through AuthInfo=socket=...), never the machine's /run/munge one: sharing that daemon let one test
run's teardown stop it under another run's Slurm ("Munge encode failed: Failed to access
/run/munge/munge.socket.2"), and a daemon still shutting down passed for a running one. Its socket
is a path on the shared file system, so the nodes' slurmds reach it from their namespaces."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

CLUSTER = Path(__file__).resolve().parents[2] / "scripts" / "cluster"


FIXTURE_RECORD = "slurm-fixture.json"  # in the cluster's state directory, gone with `cluster down`


def reap_stale() -> list[str]:
    """Ends the multi-node Slurms whose test process died without stopping them (their daemons,
    every process in their nodes, their clusters); returns their cluster names."""
    reaped = []
    for rec in sorted(Path("/run/dtune-cluster").glob(f"*/{FIXTURE_RECORD}")):
        try:
            info = json.loads(rec.read_text())
            pid = int(info["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if _alive(pid):
            continue
        s = LocalSlurm(Path(info["root"]), nodes=int(info["nodes"]), name=rec.parent.name)
        s.short = Path(info["short"])
        s.cluster_up = True
        s.munged_pid = _read_pid(s.munge / "munged.pid")
        s.stop()
        reaped.append(s.name)
    return reaped


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def netns_pids(ns: str) -> list[int]:
    r = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
    return [int(x) for x in r.stdout.split()]


class LocalSlurm:
    def __init__(self, root: Path, nodes: int = 0, name: str | None = None):
        """nodes=0: one slurmd on this machine; nodes=N: N simulated nodes (scripts/cluster) named
        NAME-node0 .. NAME-node(N-1), NAME defaulting to one of this process's own."""
        self.root = root
        self.host = socket.gethostname()
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.munge = root / "munge"
        self.munged_pid = None
        self.nodes = nodes
        self.name = name or f"sl{os.getpid() % 10**7}"
        self.node_names = [f"{self.name}-node{i}" for i in range(nodes)] if nodes else [self.host]
        self.cluster_up = False
        # slurmd's and PMIx's Unix sockets live in the spool and tmp directories, and a socket's
        # path has at most 108 bytes: with several nodes, a short directory (made by start()).
        self.short = root

    def missing(self) -> str | None:
        tools = ["munged", "slurmctld", "slurmd", "sbatch", "squeue", "srun"]
        if self.nodes:
            tools += ["ip", "tc", "unshare"]
        for tool in tools:
            if shutil.which(tool) is None:
                return tool
        if self.nodes and os.geteuid() != 0:
            return "root (simulated nodes need network namespaces)"
        return None

    def cluster(self, *args, check: bool = True) -> subprocess.CompletedProcess:
        r = subprocess.run(
            [str(CLUSTER), *map(str, args)], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
        )
        if check and r.returncode != 0:
            raise RuntimeError(f"scripts/cluster {' '.join(map(str, args))}: {r.stdout}{r.stderr}")
        return r

    @property
    def state(self) -> Path:
        """The cluster's state directory (hostfile, node-local directories)."""
        return Path(f"/run/dtune-cluster/{self.name}")

    def node_addr(self, i: int) -> str:
        return f"{(self.state / 'subnet').read_text().strip()}.{i + 10}"  # as scripts/cluster assigns

    def _conf(self) -> str:
        cpus = os.cpu_count() or 2
        r = self.root
        if self.nodes:
            bridge_ip = (self.state / "subnet").read_text().strip() + ".1"
            ctl = f"{self.host}({bridge_ip})"
            node_lines = "\n".join(
                f"NodeName={n} NodeAddr={self.node_addr(i)} CPUs={cpus} State=UNKNOWN"
                for i, n in enumerate(self.node_names)
            )
            per_node = f"""SlurmdSpoolDir={self.short}/spool/%n
SlurmdPidFile={r}/slurmd-%n.pid
SlurmdLogFile={r}/slurmd-%n.log
TmpFS={self.short}/tmp/%n
SlurmdTimeout=10
MessageTimeout=5
"""
        else:
            ctl = self.host
            node_lines = f"NodeName={self.host} CPUs={cpus} State=UNKNOWN"
            per_node = f"""SlurmdSpoolDir={r}/spool
SlurmdPidFile={r}/slurmd.pid
SlurmdLogFile={r}/slurmd.log
TmpFS={r}/tmp
"""
        return f"""ClusterName=dtune
SlurmctldHost={ctl}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.munge}/munge.socket
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
StateSaveLocation={r}/state
SlurmctldPidFile={r}/slurmctld.pid
SlurmctldLogFile={r}/slurmctld.log
{per_node}{node_lines}
PartitionName=debug Nodes={",".join(self.node_names)} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""

    def start(self) -> None:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        for d in ("state", "spool", "tmp"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        if self.nodes:
            reap_stale()
            self.short = Path(tempfile.mkdtemp(prefix="dtsl", dir="/tmp"))
            self.cluster("up", "--nodes", self.nodes, "--name", self.name)
            self.cluster_up = True
            # Who owns this cluster and where its Slurm lives: a later fixture ends it all if this
            # process dies without stopping it (a test run killed by ctest's timeout).
            (self.state / FIXTURE_RECORD).write_text(
                json.dumps({"pid": os.getpid(), "root": str(self.root), "short": str(self.short), "nodes": self.nodes})
            )
            for n in self.node_names:
                (self.short / "spool" / n).mkdir(parents=True)
                (self.short / "tmp" / n).mkdir(parents=True)
        self.conf.write_text(self._conf())
        if self.nodes:
            # `ip netns exec` mounts the node's own /sys, without /sys/fs/cgroup: slurmd's cgroup
            # autodetection would fail ("No filesystem mounted on /sys/fs/cgroup"). Nothing here
            # uses cgroups (proctrack/linuxproc, task/none), so name the plugin instead.
            (self.root / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\n")
        self.munge.mkdir(mode=0o700)
        key = self.munge / "munge.key"
        subprocess.run(["mungekey", "--create", f"--keyfile={key}"], check=True)
        subprocess.run(
            [
                "munged",
                "--force",
                f"--socket={self.munge}/munge.socket",
                f"--key-file={key}",
                f"--pid-file={self.munge}/munged.pid",
                f"--log-file={self.munge}/munged.log",
                f"--seed-file={self.munge}/munged.seed",
            ],
            check=True,
        )  # forks; returns once the daemon is listening
        self.munged_pid = int((self.munge / "munged.pid").read_text())
        subprocess.run(["slurmctld", "-f", str(self.conf)], check=True, env=self.env)
        if self.nodes:
            for n in self.node_names:  # each forks into the background inside its node
                self.cluster("exec", "--name", self.name, n, "slurmd", "-f", self.conf, "-N", n)
        else:
            subprocess.run(["slurmd", "-f", str(self.conf)], check=True, env=self.env)
        deadline = time.time() + 60
        while time.time() < deadline:
            r = subprocess.run(["sinfo", "-h", "-N", "-o", "%t"], capture_output=True, text=True, env=self.env)
            states = r.stdout.split()
            if r.returncode == 0 and len(states) == len(self.node_names):
                if all(s in ("idle", "mix", "alloc") for s in states):
                    return
            time.sleep(0.5)
        raise RuntimeError("local Slurm did not come up:\n" + self.logs())

    def logs(self) -> str:
        out = []
        names = ["slurmctld.log", "munge/munged.log"]
        names += [f"slurmd-{n}.log" for n in self.node_names] if self.nodes else ["slurmd.log"]
        for name in names:
            p = self.root / name
            if p.exists():
                out.append(f"--- {name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-30:]))
        return "\n".join(out)

    def wait(self, job_ids: list[str], timeout: float = 600) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            r = subprocess.run(["squeue", "-h", "-j", ",".join(job_ids)], capture_output=True, text=True, env=self.env)
            if r.returncode == 0 and not r.stdout.strip():
                return
            time.sleep(1)
        raise RuntimeError(f"jobs {job_ids} still queued after {timeout} s:\n" + self.logs())

    def kill_node(self, i: int) -> list[int]:
        """A node dies: every process in its network namespace (slurmd, slurmstepd, ranks) gets
        SIGKILL. Returns the pids killed."""
        return self._kill_namespace(self.node_names[i])

    def _kill_namespace(self, ns: str, wait_s: float = 10) -> list[int]:
        killed = []
        deadline = time.time() + wait_s
        while time.time() < deadline:
            pids = [p for p in netns_pids(ns) if p != os.getpid()]
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)
        return killed

    def stop(self) -> None:
        """Stops everything this fixture started, whatever state it is in, and waits until it has
        exited (SIGKILL after 20 s); never raises."""
        pid_files = ["slurmctld.pid"] + ([f"slurmd-{n}.pid" for n in self.node_names] if self.nodes else ["slurmd.pid"])
        daemons = [pid for pid in (_read_pid(self.root / f) for f in pid_files) if pid]
        if self.munged_pid is not None:
            daemons.append(self.munged_pid)
        # And those whose pid file is gone (a directory removed under them): by their command line.
        daemons += [p for p in _pids_naming(str(self.conf), str(self.munge / "munge.socket")) if p not in daemons]
        steps = []
        if self.conf.exists():
            shutdown = ["scontrol", "shutdown"]
            steps.append(lambda: subprocess.run(shutdown, capture_output=True, env=self.env, timeout=30))
        steps += [lambda pid=pid: os.kill(pid, signal.SIGTERM) for pid in daemons]
        if self.nodes and self.cluster_up:
            # What scontrol shutdown leaves in a node (a slurmstepd, a rank) dies with it.
            steps.append(lambda: time.sleep(0.5))
            steps += [lambda n=n: self._kill_namespace(n) for n in self.node_names]
            steps.append(lambda: self.cluster("down", "--name", self.name, check=False))
            steps.append(lambda: setattr(self, "cluster_up", False))
        steps.append(lambda: _wait_gone(daemons, 20))
        steps.append(lambda: setattr(self, "munged_pid", None))
        if self.short != self.root:
            steps.append(lambda: shutil.rmtree(self.short, ignore_errors=True))
        for step in steps:
            try:
                step()
            except (OSError, subprocess.SubprocessError, ValueError, RuntimeError):
                pass

    def leftovers(self, *paths: Path) -> list[str]:
        """What outlives stop(): this cluster's namespaces, and processes whose command line,
        working directory or open files lie under this fixture's directory or `paths`."""
        out = [f"namespace {n}" for n in self.node_names if self.nodes and netns_pids_exists(n)]
        roots = [str(p) for p in (self.root, self.short, *paths)]
        for d in Path("/proc").iterdir():
            if not d.name.isdigit() or int(d.name) == os.getpid():
                continue
            try:
                if (d / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                    continue  # a zombie holds nothing; its parent reaps it
                seen = [(d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")]
                seen.append(os.readlink(d / "cwd"))
                seen += [os.readlink(f) for f in (d / "fd").iterdir()]
            except (OSError, IndexError):
                continue
            if any(r in x for r in roots for x in seen):
                out.append(f"process {d.name}: {seen[0]}")
        return out


def netns_pids_exists(ns: str) -> bool:
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return any(line.split()[0] == ns for line in r.stdout.splitlines() if line.strip())


def _pids_naming(*words: str) -> list[int]:
    """Live processes whose command line holds one of `words`."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                cmd = (d / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if any(w in cmd for w in words) and _alive(int(d.name)):
                out.append(int(d.name))
    return out


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _wait_gone(pids: list[int], wait_s: float) -> None:
    """Waits for `pids` to exit; SIGKILL for those still there after `wait_s`."""
    deadline = time.time() + wait_s
    while any(_alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.1)
    for p in pids:
        if _alive(p):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
    deadline = time.time() + 5
    while any(_alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.05)


def main(argv: list[str]) -> int:
    """By hand: start this Slurm, print how to reach it, stop everything on Ctrl-C or SIGTERM."""
    import argparse

    ap = argparse.ArgumentParser(
        prog="tests/slurm/local_slurm.py",
        description="A real Slurm on this machine for trying dtune's Slurm backend: one slurmd here, "
        "or (--nodes N, root) one slurmd inside each simulated node of scripts/cluster. Runs until "
        "Ctrl-C, then stops every daemon and takes the cluster down.",
    )
    ap.add_argument("dir", type=Path, help="a new directory for slurm.conf, state, logs and munge")
    ap.add_argument("--nodes", type=int, default=0, help="simulated nodes (0, the default: one slurmd here)")
    ap.add_argument("--name", default=None, help="the cluster's name (scripts/cluster --name; default slPID)")
    a = ap.parse_args(argv)
    if a.nodes < 0 or a.nodes > 64:
        ap.error(f"--nodes {a.nodes}: 0 to 64")
    a.dir.mkdir(parents=True, exist_ok=False)
    s = LocalSlurm(a.dir.resolve(), nodes=a.nodes, name=a.name)
    missing = s.missing()
    if missing:
        ap.exit(1, f"local_slurm: error: {missing} not found (scripts/setup.sh installs slurm-wlm and munge)\n")
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
    try:
        s.start()
        print(f"# Slurm up: nodes {', '.join(s.node_names)}; logs in {s.root}", flush=True)
        print(f"export SLURM_CONF={s.conf}", flush=True)
        if a.nodes:
            print("export OMPI_MCA_mpi_yield_when_idle=1   # the simulated nodes share this machine's cores")
        print("# Ctrl-C stops it", flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        s.stop()
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
