"""Shared pytest fixtures: where the built binaries are and how to launch them with mpirun."""

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def bin_dir() -> Path:
    return Path(os.environ.get("DTUNE_BIN_DIR", REPO / "build" / "bin"))


def mpirun_prefix(np: int) -> list:
    cmd = [os.environ.get("DTUNE_MPIRUN", "mpirun"), "-np", str(np), "--oversubscribe"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    return cmd


def run_comm(np: int, args: list, timeout: float = 300, cwd=None) -> subprocess.CompletedProcess:
    exe = bin_dir() / "dtune-comm"
    if not exe.exists():
        pytest.fail(f"{exe} does not exist: build first (scripts/setup.sh)")
    cmd = (mpirun_prefix(np) if np > 0 else []) + [str(exe)] + [str(a) for a in args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd)


def data_rows(stdout: str) -> list:
    """Table rows as nccl-tests parsers see them: lines not starting with '#'."""
    return [line.split() for line in stdout.splitlines() if line.strip() and not line.startswith("#")]


@pytest.fixture
def comm():
    return run_comm


def rank_pid(session: int, rank: int, binary: str):
    """The pid of MPI world rank `rank` among the `binary` processes of session `session` (an mpirun
    started with start_new_session=True leads it; Open MPI gives the ranks process groups of their
    own, but they stay in its session). None when there is no such process."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if binary.encode() not in (d / "cmdline").read_bytes():
                continue
            env = (d / "environ").read_bytes().split(b"\0")
            if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env and os.getsid(int(d.name)) == session:
                return int(d.name)
        except OSError:
            continue
    return None
