"""dtune-probe gemm on a GPU: every dtype measured through torch::mm and through cuBLASLt directly,
each its own group with the library named, cuBLASLt's workspace and its algorithm per shape; the
loader reads both. Skips itself, visibly, without a GPU (tests/gpu/test_cublaslt_gemm.cc checks the
cuBLASLt product's values against torch::mm)."""

import shutil
import subprocess

import pytest

from conftest import bin_dir
from dtune_report.loader import load_probe_gemm

pytestmark = pytest.mark.gpu


def gpus_visible() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return r.returncode == 0 and "GPU" in r.stdout


def probe(*args):
    return subprocess.run(
        [str(bin_dir() / "dtune-probe"), *map(str, args)], capture_output=True, text=True, timeout=600
    )


def test_gpu_gemm_records_torch_and_cublaslt_per_dtype(tmp_path):
    if not gpus_visible():
        pytest.skip("no GPU visible (nvidia-smi -L): the cuBLASLt path runs on a GPU only")
    out = tmp_path / "g.h5"
    r = probe("--output", out, "gemm", "--device", "cuda", "--shapes", "256,512x384x320", "--min-time", "0.01")
    assert r.returncode == 0, r.stderr[-2000:]
    df = load_probe_gemm(out)
    assert set(df.dtype) == {"float32", "tf32", "float16", "bfloat16"}
    assert set(df.library) == {"torch::mm", "cublaslt"} and (df.tflops > 0).all()
    lt = df[df.library == "cublaslt"]
    assert (lt.workspace_bytes == 32 << 20).all() and lt.algorithm.str.startswith("cuBLASLt algo").all()
    assert (df[df.library == "torch::mm"].algorithm == "").all()
