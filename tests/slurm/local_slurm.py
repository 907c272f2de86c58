"""A real single-node Slurm for the tests: munged, slurmctld and slurmd started from a generated
slurm.conf in a temporary directory (ProctrackType=proctrack/linuxproc, TaskPlugin=task/none,
SelectType=select/cons_tres, SlurmUser=root), and stopped afterwards.

munged is this fixture's own (its key, socket, pid, log and seed files in the directory; Slurm finds
it through AuthInfo=socket=...), never the machine's /run/munge one: sharing that daemon let one test
run's teardown stop it under another run's Slurm ("Munge encode failed: Failed to access
/run/munge/munge.socket.2"), and a daemon still shutting down passed for a running one."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalSlurm:
    def __init__(self, root: Path):
        self.root = root
        self.host = socket.gethostname()
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.munge = root / "munge"
        self.munged_pid = None

    def missing(self) -> str | None:
        for tool in ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "srun"):
            if shutil.which(tool) is None:
                return tool
        return None

    def start(self) -> None:
        for d in ("state", "spool"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        cpus = os.cpu_count() or 2
        self.conf.write_text(f"""ClusterName=dtune
SlurmctldHost={self.host}
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
StateSaveLocation={self.root}/state
SlurmdSpoolDir={self.root}/spool
SlurmctldPidFile={self.root}/slurmctld.pid
SlurmdPidFile={self.root}/slurmd.pid
SlurmctldLogFile={self.root}/slurmctld.log
SlurmdLogFile={self.root}/slurmd.log
NodeName={self.host} CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes={self.host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
""")
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
        subprocess.run(["slurmd", "-f", str(self.conf)], check=True, env=self.env)
        deadline = time.time() + 60
        while time.time() < deadline:
            r = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, env=self.env)
            if r.returncode == 0 and r.stdout.strip() in ("idle", "mix", "alloc"):
                return
            time.sleep(0.5)
        raise RuntimeError("local Slurm did not come up:\n" + self.logs())

    def logs(self) -> str:
        out = []
        for name in ("slurmctld.log", "slurmd.log", "munge/munged.log"):
            p = self.root / name
            if p.exists():
                out.append(f"--- {name}\n" + "\n".join(p.read_text().splitlines()[-30:]))
        return "\n".join(out)

    def wait(self, job_ids: list[str], timeout: float = 600) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            r = subprocess.run(["squeue", "-h", "-j", ",".join(job_ids)], capture_output=True, text=True, env=self.env)
            if r.returncode == 0 and not r.stdout.strip():
                return
            time.sleep(1)
        raise RuntimeError(f"jobs {job_ids} still queued after {timeout} s:\n" + self.logs())

    def stop(self) -> None:
        subprocess.run(["scontrol", "shutdown"], capture_output=True, env=self.env)
        for pid_file in ("slurmd.pid", "slurmctld.pid"):
            p = self.root / pid_file
            if p.exists():
                try:
                    os.kill(int(p.read_text().strip()), 15)
                except (ValueError, ProcessLookupError):
                    pass
        if self.munged_pid is not None:
            try:
                os.kill(self.munged_pid, 15)
            except ProcessLookupError:
                pass
