"""dtune-probe gemm on a GPU: every dtype measured through torch::mm and through cuBLASLt directly,
each its own group with the library named, the shapes asked for, cuBLASLt's workspace and the
algorithm its heuristic chose per shape, and figures a GPU can produce: below the datasheet's dense
peak of the device (train/mfu.cc's table; a host clock around queued kernels reads far above it),
at 4096^3 above a quarter of it, the group's peak equal to its best shape, the best iteration at
least the median, and torch::mm and cuBLASLt within a factor of two of each other at 4096^3 (both
call cuBLAS; a gap wider than that is a timing difference, not a library one). Read with h5py
alone: the GPU machine has no pandas for the report's loader, whose reading of these groups the CPU
tests cover. Skips itself, visibly, without a GPU (tests/gpu/test_cublaslt_gemm.cc checks the
cuBLASLt product's values against torch::mm)."""

import re
import subprocess

import h5py
import numpy as np
import pytest

from conftest import bin_dir, visible_gpus

pytestmark = pytest.mark.gpu

SHAPES = [(256, 256, 256), (512, 384, 320), (4096, 4096, 4096)]
DTYPES = {"float32", "tf32", "float16", "bfloat16"}
LIBRARIES = ("torch::mm", "cublaslt")
# Dense TFLOP/s per family (train/mfu.cc, the highest form factor of each: an upper bound for all):
# fp32, tf32, fp16 = bf16.
DATASHEET = {"A100": (19.5, 156, 312), "H100": (67, 495, 989), "H200": (67, 495, 989)}
# Above every GPU's dense fp16 peak as of 2026 (B300: about 2,500): the bound for other devices.
ANY_GPU_TFLOPS = 5000.0


def peak_of(device_name: str, dtype: str) -> float | None:
    """The datasheet's dense peak of the family named as a word in DEVICE_NAME, or None."""
    for family, (fp32, tf32, half) in DATASHEET.items():
        if re.search(rf"(^|[ -]){family}([ -]|$)", device_name):
            return {"float32": fp32, "tf32": tf32}.get(dtype, half)
    return None


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def test_gpu_gemm_records_torch_and_cublaslt_per_dtype_within_the_datasheet(tmp_path):
    if visible_gpus() == 0:
        pytest.skip("no GPU visible (nvidia-smi -L): the cuBLASLt path runs on a GPU only")
    out = tmp_path / "g.h5"
    shapes = ",".join("x".join(map(str, s)) for s in SHAPES)
    r = subprocess.run(
        [str(bin_dir() / "dtune-probe"), "--output", str(out), "gemm", "--device", "cuda"]
        + ["--shapes", shapes, "--min-time", "0.02", "--min-iters", "3"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]

    at_4096 = {}
    with h5py.File(out) as f:
        for g in f["runs"].values():
            a = g.attrs
            if text(a["benchmark"]) != "probe" or text(a["probe"]) != "gemm":
                continue
            lib, dtype, name = text(a["library"]), text(a["dtype"]), text(a["device_name"])
            key = (lib, dtype)
            assert key not in at_4096, f"two groups for {key}"
            assert text(a["device"]) == "cuda" and name.startswith("cuda:"), name
            assert list(zip(g["m"][()], g["n"][()], g["k"][()])) == SHAPES, key
            median, best = g["tflops"][()], g["tflops_best"][()]
            assert median.shape == best.shape == (1, len(SHAPES)), (key, median.shape)
            assert np.isfinite(median).all() and (best >= median).all(), (key, median, best)
            ceiling = peak_of(name, dtype) or ANY_GPU_TFLOPS
            assert (median > 0).all() and (best <= 1.05 * ceiling).all(), (key, name, best, ceiling)
            if peak_of(name, dtype):
                assert median[0, -1] >= ceiling / 4, (key, name, median[0, -1], ceiling)
            top = int(np.argmax(median[0]))
            assert float(a["peak_tflops"]) == pytest.approx(median[0, top]), key
            assert text(a["peak_shape"]) == "x".join(map(str, SHAPES[top])), key
            if lib == "cublaslt":
                assert int(a["workspace_bytes"]) == 32 << 20
                algos = [text(x) for x in g["algorithm"][()]]
                assert len(algos) == len(SHAPES), algos
                # The heuristic's choice, read back (an id of -1: the attribute was not read).
                algo = re.compile(r"cuBLASLt algo \d+, tile id \d+, splitK [1-9]\d*, workspace .+")
                assert all(algo.fullmatch(x) for x in algos), algos
            else:
                assert "algorithm" not in g and int(a["workspace_bytes"]) == 0
            at_4096[key] = float(median[0, -1])
    assert set(at_4096) == {(lib, d) for lib in LIBRARIES for d in DTYPES}, sorted(at_4096)
    for d in DTYPES:
        ratio = at_4096[("cublaslt", d)] / at_4096[("torch::mm", d)]
        assert 0.5 <= ratio <= 2.0, (d, at_4096[("cublaslt", d)], at_4096[("torch::mm", d)])
