"""dtune-probe gemm on a GPU: every dtype measured through torch::mm and through cuBLASLt directly,
each its own group with the library named, cuBLASLt's workspace and its algorithm per shape (read with
h5py alone: the GPU machine has no pandas for the report's loader, whose reading of these groups the
CPU tests cover). Skips itself, visibly, without a GPU (tests/gpu/test_cublaslt_gemm.cc checks the
cuBLASLt product's values against torch::mm)."""

import subprocess

import h5py
import pytest

from conftest import bin_dir, visible_gpus

pytestmark = pytest.mark.gpu


def probe(*args):
    return subprocess.run(
        [str(bin_dir() / "dtune-probe"), *map(str, args)], capture_output=True, text=True, timeout=600
    )


def test_gpu_gemm_records_torch_and_cublaslt_per_dtype(tmp_path):
    if visible_gpus() == 0:
        pytest.skip("no GPU visible (nvidia-smi -L): the cuBLASLt path runs on a GPU only")
    out = tmp_path / "g.h5"
    r = probe("--output", out, "gemm", "--device", "cuda", "--shapes", "256,512x384x320", "--min-time", "0.01")
    assert r.returncode == 0, r.stderr[-2000:]

    def text(v):
        return v.decode() if isinstance(v, bytes) else str(v)

    seen = set()
    with h5py.File(out) as f:
        for g in f["runs"].values():
            a = g.attrs
            if text(a["benchmark"]) != "probe" or text(a["probe"]) != "gemm":
                continue
            lib, dtype = text(a["library"]), text(a["dtype"])
            seen.add((lib, dtype))
            assert (g["tflops"][()] > 0).all(), (lib, dtype)
            if lib == "cublaslt":
                assert int(a["workspace_bytes"]) == 32 << 20
                algos = [text(x) for x in g["algorithm"][()]]
                assert len(algos) == len(g["m"]) and all(x.startswith("cuBLASLt algo") for x in algos), algos
            else:
                assert "algorithm" not in g and int(a["workspace_bytes"]) == 0
    dtypes = {"float32", "tf32", "float16", "bfloat16"}
    assert seen == {(lib, d) for lib in ("torch::mm", "cublaslt") for d in dtypes}, seen
