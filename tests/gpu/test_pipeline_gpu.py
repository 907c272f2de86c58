"""Pipeline parallelism on GPUs is exact, as on CPU ranks (tests/mpi/test_pipeline_mpi.py): the
parameters after 3 optimizer steps equal one process on the GPU accumulating the same 4
micro-batches, relative difference <= 1e-5.

two_gpus: --backend nccl, the NCCL stage channel (ncclSend/ncclRecv between the stages' GPUs, the
tied embedding's gradients swapped in one grouped send/receive), DP 1 x PP 2 under each schedule;
with 4 GPUs also DP 2 x PP 2 (the stage groups reduce with the NCCL reducer); a stopped stage ends
the job within --timeout, named (exit 3). They need one GPU per rank: NCCL before 2.30 refuses two
ranks of one communicator on one GPU ("Duplicate GPU detected"; 2.30 allows it only with
NCCL_MULTI_RANK_GPU_ENABLE=1), so they skip, with that reason, below 2 GPUs.

one_gpu: on a single GPU both stages share it, which only the MPI channel allows (device tensors
staged through host memory): PP 2 with --backend mpi is exact there too, and --backend nccl on one
GPU exits 2 with a line that says to use one GPU per rank or --backend mpi."""

import os
import subprocess

import h5py
import pytest
import torch

from conftest import bin_dir, mpirun_prefix, visible_gpus
from pipeline_checks import assert_equal_params, merged_stage_dumps, stop_rank_then_wait

pytestmark = pytest.mark.gpu

TINY = ["--model", "gpt2-tiny", "--context", "32", "--vocab", "256", "--lr", "0.01", "--batch", "2"]
TINY4 = [*TINY, "--layers", "4"]  # 2 stages x 2 virtual stages, one block per chunk
COMMON = ["--device", "cuda", "--steps", "3", "--warmup-steps", "0", "--threads", "1"]


def run(np_, args, env=None):
    exe = bin_dir() / "dtune-train"
    if not exe.exists():
        pytest.fail(f"{exe} does not exist: build first (scripts/setup.sh)")
    cmd = (mpirun_prefix(np_) if np_ > 1 else []) + [str(exe), *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)


def train(tmp_path, name, np_, args, stages=1):
    """The final parameters: one dump, or every stage's merged (tied copies must agree)."""
    dump, out = tmp_path / f"{name}.pt", tmp_path / f"{name}.h5"
    r = run(np_, [*COMMON, *args, "--debug-dump", dump, "--output", out])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    if stages == 1:
        return torch.load(dump, weights_only=False), out
    return merged_stage_dumps(dump, stages), out


def channel(h5):
    with h5py.File(h5) as f:
        (g,) = f["runs"].values()
        return g["pipeline"].attrs["channel"]


def need(n):
    have = visible_gpus()
    if have < n and n == 1:
        pytest.skip(f"needs a GPU: {have} visible")
    if have < n:
        pytest.skip(
            f"needs {n} GPUs, one per rank (NCCL before 2.30 refuses two ranks of one communicator "
            f"on one GPU): {have} visible"
        )


SCHEDULES = [
    ("gpipe", TINY, ["--schedule", "gpipe"]),
    ("1f1b", TINY, ["--schedule", "1f1b"]),
    ("interleaved", TINY4, ["--schedule", "interleaved", "--virtual-stages", "2"]),
]


@pytest.mark.parametrize("name,model,extra", SCHEDULES, ids=[s[0] for s in SCHEDULES])
def test_two_gpus_nccl_pipeline_equals_accumulation(tmp_path, name, model, extra):
    need(2)
    ref, _ = train(tmp_path, "ref", 1, [*model, "--accum-steps", 4])
    pipe, h5 = train(
        tmp_path,
        name,
        2,
        [*model, "--backend", "nccl", "--pipeline-stages", 2, "--micro-batches", 4, *extra],
        stages=2,
    )
    assert_equal_params(pipe, ref)
    assert channel(h5) == "nccl"


def test_two_gpus_nccl_two_groups_of_two_stages(tmp_path):
    need(4)
    ref, _ = train(tmp_path, "ref", 1, [*TINY, "--accum-steps", 4])
    args = [*TINY, "--backend", "nccl", "--pipeline-stages", 2, "--micro-batches", 2, "--schedule", "1f1b"]
    pipe, h5 = train(tmp_path, "dpxpp", 4, args, stages=2)
    # Data-parallel index d's micro-batch m is the reference's micro-step d x 2 + m.
    assert_equal_params(pipe, ref)
    assert channel(h5) == "nccl"


def test_two_gpus_nccl_stopped_stage_ends_the_job_within_timeout_named(tmp_path):
    """A stage that stops: its neighbour's NCCL wait (or the header's before it) passes its deadline,
    aborts the link's communicator and exits 3 naming the stage, as over MPI."""
    need(2)
    exe = bin_dir() / "dtune-train"
    cmd = mpirun_prefix(2) + [str(exe), *COMMON[:2], "--threads", "1", *TINY, "--steps", "100000"]
    cmd += ["--backend", "nccl", "--pipeline-stages", "2", "--micro-batches", "2", "--timeout", "10"]
    cmd += ["--output", str(tmp_path / "t.h5")]
    rc, err, took, _ = stop_rank_then_wait(cmd, settle_s=30)  # past CUDA's and NCCL's set-up
    assert rc == 3, err[-3000:]
    assert took < 10 + 30, f"ended {took:.0f} s after the stop"
    assert "stage 1 (rank 1)" in err, err[-3000:]


def test_one_gpu_mpi_channel_pipeline_equals_accumulation(tmp_path):
    need(1)
    ref, _ = train(tmp_path, "ref", 1, [*TINY, "--accum-steps", 4])
    args = [*TINY, "--backend", "mpi", "--pipeline-stages", 2, "--micro-batches", 4, "--schedule", "1f1b"]
    pipe, h5 = train(tmp_path, "mpi", 2, args, stages=2)
    assert_equal_params(pipe, ref)
    assert channel(h5) == "mpi"
    # The caching allocator's reserved peak holds its allocated peak and the cache beside it.
    with h5py.File(h5) as f:
        (g,) = f["runs"].values()
        allocated, reserved = g["peak_memory_bytes"][()], g["peak_reserved_bytes"][()]
    assert (allocated > 0).all() and (reserved >= allocated).all(), (allocated, reserved)


def test_one_gpu_nccl_pipeline_on_one_gpu_exits_2_naming_the_fix(tmp_path):
    need(1)
    env = {k: v for k, v in os.environ.items() if k != "NCCL_MULTI_RANK_GPU_ENABLE"}
    env["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    args = [*COMMON, *TINY, "--backend", "nccl", "--pipeline-stages", 2, "--micro-batches", 2, "--no-output"]
    r = run(2, args, env=env)
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    assert "share GPU 0" in r.stderr and "--backend mpi" in r.stderr, r.stderr[-2000:]
