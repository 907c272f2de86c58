"""Two and four ranks on one GPU (issue 59, item 1), and one rank over NCCL (item 4): every
data-parallel path that needs more than one rank runs its device code there, over the MPI backend
with device buffers (Open MPI stages them through host memory where it is not CUDA-aware; NCCL
refuses two ranks of one communicator on one GPU, so MPI is how a single GPU runs multi-rank device
code). A one-rank run never calls the reducer, never packs a bucket on the device, never releases
and re-gathers a ZeRO-3 unit under the caching allocator, and local SGD turns itself off on one
rank; one rank over NCCL does run dtune's side of the reducer (NCCL itself only copies there).

Each layout's per-step losses (the mean over its ranks) equal a reference within what the dtype
allows:
- "one": one process on the CPU at the same global batch (the layouts that train exactly as one
  process does: DDP, zero1, zero2 and zero3 with prefetch on the GPT, the Llama family with tensor
  and sequence parallelism and under zero3, the GPT at tp 2 x dp 2 under zero1 on four ranks);
- "same": the same layout on CPU ranks (local SGD averages models, not gradients; fp16 with the
  loss scaler rounds in fp16 on both sides; the ResNet's BatchNorm normalises each rank's batch).
On the GPU every rank must run on GPU 0 and the caching allocator's reserved peak hold its
allocated peak.

DTUNE_ONE_GPU_DEVICE=cpu runs the layouts on CPU ranks instead: the GPU check's rehearsal does, so
the layouts' flags and this comparison run on every CI machine (the CPU twins of the code they
share are tests/mpi's: test_shard_mpi.py, test_gpt_tp_mpi.py, test_llama_mpi.py,
test_train_mpi.py's local SGD, each caught a planted error there)."""

import os
from functools import lru_cache

import h5py
import numpy as np
import pytest

from conftest import run_train, visible_gpus

pytestmark = pytest.mark.gpu

DEVICE = os.environ.get("DTUNE_ONE_GPU_DEVICE", "cuda")
GPT = ["--model", "gpt2-tiny", "--context", "32", "--vocab", "256", "--lr", "0.01"]
LLAMA = ["--model", "llama3-tiny", "--context", "32", "--vocab", "256", "--lr", "0.01"]
RESNET = ["--model", "resnet18", "--width", "8", "--image-size", "32", "--num-classes", "10", "--lr", "0.01"]
BUCKETS = ["--bucket-mb", "0.05", "--first-bucket-mb", "0.01"]  # many buckets: many packs and scatters
BATCH, STEPS = 2, 3

Z3P = ["--shard", "zero3", "--shard-prefetch", "1"]
# (id, ranks, data-parallel degree, backend, model, layout flags, reference, steps)
LAYOUTS = [
    # One rank over NCCL (item 4): NCCL only copies on one rank, yet dtune's side runs: zero3's
    # reduce-scatter buffers held to the stream's end, its units released and gathered again under
    # the caching allocator; fp16 with the loss scaler through the NCCL reducer.
    ("nccl_1rank_zero3_prefetch", 1, 1, "nccl", GPT, Z3P, "one", STEPS),
    ("nccl_1rank_fp16", 1, 1, "nccl", GPT, ["--precision", "fp16"], "same", STEPS),
    ("ddp", 2, 2, "mpi", GPT, BUCKETS, "one", STEPS),
    ("zero1", 2, 2, "mpi", GPT, ["--shard", "zero1"], "one", STEPS),
    ("zero2", 2, 2, "mpi", GPT, ["--shard", "zero2", *BUCKETS], "one", STEPS),
    ("zero3_prefetch", 2, 2, "mpi", GPT, [*Z3P, *BUCKETS], "one", STEPS),
    ("llama_tp2_sequence_parallel", 2, 1, "mpi", LLAMA, ["--tp", "2", "--sequence-parallel"], "one", STEPS),
    ("llama_zero3", 2, 2, "mpi", LLAMA, ["--shard", "zero3"], "one", STEPS),
    ("tp2_dp2_zero1", 4, 2, "mpi", GPT, ["--tp", "2", "--shard", "zero1"], "one", STEPS),
    ("local_sgd", 2, 2, "mpi", GPT, ["--local-sgd", "2"], "same", 4),
    ("fp16_scaler", 2, 2, "mpi", GPT, ["--precision", "fp16"], "same", STEPS),
    ("resnet_ddp", 2, 2, "mpi", RESNET, [], "same", STEPS),
]
# Relative difference of the losses allowed. Against CPU ranks in fp32: the GPU's kernels round
# otherwise (TF32 off under --precision fp32): 1e-4 over 3 steps; CPU against CPU the summation
# order alone (zero2/zero3 add the micro-steps' parts in another order: 6e-8; tensor parallelism:
# under 1e-6). fp16 rounds in fp16 on both sides, each in its own order: 1e-2.
TOL = {("cuda", "fp32"): 1e-4, ("cpu", "fp32"): 1e-5, ("cuda", "fp16"): 1e-2, ("cpu", "fp16"): 1e-5}


def losses(tmp_path, name, np_, args):
    """(per-step losses averaged over the ranks, the run's group as a dict of what is read)."""
    out = tmp_path / f"{name}.h5"
    r = run_train(np_, [*args, "--warmup-steps", "0", "--output", out], timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    with h5py.File(out) as f:
        (g,) = f["runs"].values()
        rec = {k: g[k][()] for k in ("loss", "device_index", "peak_memory_bytes", "peak_reserved_bytes") if k in g}
    return rec["loss"].mean(axis=1), rec


@lru_cache(maxsize=None)
def _reference(tmp, key):
    np_, args = key
    return losses(tmp, f"ref{abs(hash(key))}", np_, list(args))[0]


@pytest.mark.parametrize("name,ranks,dp,backend,model,layout,ref,steps", LAYOUTS, ids=[x[0] for x in LAYOUTS])
def test_layout_on_one_gpu_equals_its_reference(tmp_path_factory, name, ranks, dp, backend, model, layout, ref, steps):
    if DEVICE == "cuda" and visible_gpus() < 1:
        pytest.skip("needs a GPU (DTUNE_ONE_GPU_DEVICE=cpu runs the layouts on CPU ranks)")
    tmp = tmp_path_factory.mktemp(name)
    run = [*model, "--steps", steps]
    # NCCL needs a GPU: on CPU ranks (the rehearsal, the references) its layouts run over MPI.
    on = [*layout, "--backend", backend if DEVICE == "cuda" else "mpi", "--batch", BATCH, "--device", DEVICE]
    got, rec = losses(tmp, name, ranks, [*run, *on])
    if ref == "one":  # one process at the global batch, no layout
        key = (1, tuple(map(str, [*run, "--batch", BATCH * dp, "--device", "cpu"])))
    else:  # the same layout on CPU ranks
        key = (ranks, tuple(map(str, [*run, *layout, "--backend", "mpi", "--batch", BATCH, "--device", "cpu"])))
    want = _reference(tmp_path_factory.getbasetemp(), key)
    precision = "fp16" if "fp16" in layout else "fp32"
    assert got.shape == (steps,) and np.all(np.isfinite(got)), got
    np.testing.assert_allclose(got, want, rtol=TOL[(DEVICE, precision)], atol=0)
    if DEVICE == "cuda":
        assert list(rec["device_index"]) == [0] * ranks, rec["device_index"]
        allocated, reserved = rec["peak_memory_bytes"], rec["peak_reserved_bytes"]
        assert (allocated > 0).all() and (reserved >= allocated).all(), (allocated, reserved)
