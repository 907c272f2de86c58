"""Bad input: one clear line naming the flag, exit status 2, and no results file left behind."""

import os
from pathlib import Path

import pytest

from conftest import run_comm
from side_by_side import outcome, side_by_side

CASES = [
    (["-b", "1X"], "-b/--minbytes"),
    (["-b", "-8"], "-b"),
    (["-e", "lots"], "-e/--maxbytes"),
    (["-b", "64M", "-e", "8"], "-b/--minbytes"),
    (["--collective", "allreduc"], "--collective"),
    (["-d", "float8"], "-d/--datatype"),
    (["-o", "xor"], "-o/--op"),
    (["-r", "5"], "-r/--root"),
    (["-n", "0"], "--iters"),
    (["--backend", "gloo"], "--backend"),
    (["--no-such-flag"], "--no-such-flag"),
    (["--mpi-buffers", "gpu"], "--mpi-buffers"),
    (["--backend", "nccl", "--mpi-buffers", "device"], "--mpi-buffers"),
    (["--no-output"], "--no-output"),  # together with --output
    (["--pattern", "fsdp"], "--model"),
    (["--pattern", "fsdp", "--model", "gpt3"], "--model gpt3"),
    (["--pattern", "fsdp", "--model", "gpt2-tiny", "--shard-unit", "0"], "--shard-unit"),
    (["--pattern", "fsdp", "--model", "gpt2-tiny", "--shard-unit", "-2"], "--shard-unit"),
    (["--model", "gpt2-tiny"], "--pattern fsdp"),
    (["--pattern", "fsdp", "--model", "gpt2-tiny", "-b", "8"], "-b/--minbytes"),
    (["--pattern", "fsdp", "--model", "gpt2-tiny", "-d", "float16"], "-d/--datatype"),
    (["--pattern", "fsdp", "--model", "gpt2-tiny", "--collective", "allreduce"], "--collective"),
]


@pytest.fixture(scope="module")
def bad_flag_runs(tmp_path_factory):
    """Every case launched before the first test reads it, four at a time (side_by_side.py), each
    with an --output in a folder of its own: {args: (that folder, the completed process)}."""

    keys = [tuple(c[0]) for c in CASES]
    folders = {k: tmp_path_factory.mktemp("bad") for k in keys}

    def launch(args):
        return folders[args], run_comm(2, [*args, "--output", folders[args] / "r.h5"], timeout=60)

    return side_by_side(launch, keys)


@pytest.mark.parametrize("args,flag", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_bad_flag_exits_2_naming_flag(bad_flag_runs, args, flag):
    folder, r = outcome(bad_flag_runs, tuple(args))
    assert r.returncode == 2, r.stdout + r.stderr
    errors = [line for line in r.stderr.splitlines() if "error" in line]
    assert len(errors) == 1, r.stderr  # reported once, by rank 0
    assert flag in errors[0]
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("where", ["unwritable", "directory"])
def test_unwritable_output_exits_2(tmp_path, where):
    if where == "unwritable":
        locked = tmp_path / "locked"
        locked.mkdir()
        target = locked / "sub" / "r.h5"
        if os.geteuid() == 0:
            target = Path("/proc/dtune-cannot-write-here/r.h5")  # root ignores permissions
        else:
            locked.chmod(0o500)
    else:
        target = tmp_path
    r = run_comm(2, ["-b", "8", "-e", "8", "--output", target], timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "--output" in r.stderr
    assert not any(p.suffix in (".h5", ".partial") for p in tmp_path.rglob("*"))


def test_mpi_device_buffers_need_cuda_aware_mpi(tmp_path):
    """Debian's Open MPI is not CUDA-aware: asking for device buffers is a usage error."""
    import subprocess

    info = subprocess.run(["ompi_info", "--parsable", "--all"], capture_output=True, text=True)
    if "mpi_built_with_cuda_support:value:true" in info.stdout:
        pytest.skip("this Open MPI is CUDA-aware: the refusal this checks cannot happen here")
    r = run_comm(2, ["-b", "8", "-e", "8", "--mpi-buffers", "device", "--output", tmp_path / "r.h5"], timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "--mpi-buffers device" in r.stderr and ("CUDA-aware" in r.stderr or "without CUDA" in r.stderr)
    assert list(tmp_path.iterdir()) == []


def test_nccl_backend_without_gpu_exits_with_message(tmp_path):
    import shutil

    if shutil.which("nvidia-smi"):
        pytest.skip("a GPU driver is present: this checks the message on machines without one")
    r = run_comm(2, ["-b", "8", "-e", "8", "--backend", "nccl", "--output", tmp_path / "r.h5"], timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "GPU" in r.stderr or "CUDA device" in r.stderr or "without NCCL" in r.stderr
    assert list(tmp_path.iterdir()) == []
