"""dtune-train on a multi-GPU node: local rank r trains on GPU r, made current for LibTorch and the
CUDA runtime, and its phase clock times that GPU's stream. Before the fix every rank >= 1 timed
GPU 0's idle stream (phases of microseconds) or failed at its first CUDA event. Needs 2 GPUs;
skips itself, with the reason, otherwise."""

import subprocess

import h5py
import numpy as np
import pytest

from conftest import bin_dir, mpirun_prefix, visible_gpus

pytestmark = pytest.mark.gpu

RESNET = ["--model", "resnet18", "--width", "64", "--image-size", "64", "--num-classes", "10", "--batch", "32"]


@pytest.mark.parametrize("backend", ["mpi", "nccl"])
def test_rank_r_trains_on_gpu_r_and_times_it(tmp_path, backend):
    n = visible_gpus()
    if n < 2:
        pytest.skip(f"needs 2 GPUs on this node, {n} visible")
    out = tmp_path / "gpus.h5"
    r = subprocess.run(
        mpirun_prefix(2)
        + [
            str(bin_dir() / "dtune-train"),
            *RESNET,
            "--device",
            "cuda",
            "--backend",
            backend,
            "--steps",
            "10",
            "--warmup-steps",
            "3",
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    with h5py.File(out) as f:
        (g,) = f["runs"].values()
        assert list(g["device_index"][()]) == [0, 1]
        devices = list(g["rank_device"].asstr()[()])
        assert devices[0].startswith("cuda:0 ") and devices[1].startswith("cuda:1 "), devices
        assert list(f["provenance"]["rank_device"].asstr()[()]) == devices
        warm = g.attrs["warmup_steps"]
        forward, backward = g["forward_ms"][warm:], g["backward_ms"][warm:]  # [steps, ranks]
    # The same work on the same kind of GPU: each rank's median phase time is within a factor of
    # 3 of rank 0's. A rank timing an idle stream reads a few microseconds (a factor of ~1000).
    for phase, t in (("forward", forward), ("backward", backward)):
        med = np.median(t, axis=0)
        assert med[0] > 0.05, (phase, med)
        assert np.all(med > med[0] / 3) and np.all(med < med[0] * 3), (phase, med)
