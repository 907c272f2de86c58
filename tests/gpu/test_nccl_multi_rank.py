"""NCCL on two ranks, where a reduction must combine different inputs (on one rank an in-place
allreduce that does nothing still passes): dtune-comm's NCCL backend runs every collective with
its exact check (each rank's input depends on its rank; a wrong element exits 1), and dtune-train's
NCCL reducer leaves the same gradients and parameters as the MPI reducer. NCCL refuses two ranks
of one communicator on the same GPU ("Duplicate GPU detected"), so these need two GPUs and skip,
with that reason, otherwise."""

import subprocess

import pytest
import torch

from conftest import bin_dir, mpirun_prefix, visible_gpus

pytestmark = pytest.mark.gpu

GPT = ["--model", "gpt2-tiny", "--context", "32", "--vocab", "256", "--lr", "0.01", "--batch", "4"]


@pytest.fixture(autouse=True)
def two_gpus():
    n = visible_gpus()
    if n < 2:
        pytest.skip(f"NCCL needs one GPU per rank and these tests run 2 ranks: {n} GPU(s) visible")


def test_every_collective_is_exact_on_two_ranks():
    r = subprocess.run(
        mpirun_prefix(2)
        + [
            str(bin_dir() / "dtune-comm"),
            "--backend",
            "nccl",
            "--collective",
            "all",
            "-d",
            "float32,bfloat16,int32",
            "-b",
            "8",
            "-e",
            "4M",
            "-f",
            "8",
            "-n",
            "2",
            "-w",
            "1",
            "-c",
            "1",
            "--no-output",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = [line.split() for line in r.stdout.splitlines() if line.strip() and not line.startswith("#")]
    assert rows, r.stdout[-2000:]


def train(tmp_path, backend):
    dump = tmp_path / f"{backend}.pt"
    r = subprocess.run(
        mpirun_prefix(2)
        + [
            str(bin_dir() / "dtune-train"),
            *GPT,
            "--device",
            "cuda",
            "--backend",
            backend,
            "--steps",
            "2",
            "--warmup-steps",
            "0",
            "--debug-dump",
            str(dump),
            "--no-output",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return torch.load(dump, weights_only=False)


def test_nccl_reducer_equals_mpi_reducer(tmp_path):
    nccl, mpi = train(tmp_path, "nccl"), train(tmp_path, "mpi")
    assert set(nccl) == set(mpi)
    # Two ranks: every element is one addition a + b in fp32 on either path, then the same 1/2; the
    # margin is for GPU kernels whose own reductions may order differently run to run. A reducer
    # that did nothing would leave each rank's own gradients, which differ by O(1) (other data).
    for k in nccl:
        scale = mpi[k].abs().max().clamp_min(1e-12)
        rel = ((nccl[k].float() - mpi[k].float()).abs().max() / scale).item()
        assert rel <= 1e-5, (k, rel)
