"""dtune-probe and the fused bucket pack against the yardsticks, side by side in one run:

1. CPU GEMM fp32: dtune-probe gemm's best shape against numpy.matmul and Python torch.mm on the
   same shape and the same threads (target: >= 0.95x the faster).
2. CPU STREAM triad: dtune-probe memory against numpy (a = b + s*c on preallocated arrays, same
   threads) and a plain C triad built -O3 -march=native -fopenmp (benchmarks/probe/triad.c)
   (target: >= 0.9x the best).
3. The fused gradient-bucket pack against one copy_ per parameter over ResNet-50's 161 gradients
   (dtune-micro's BM_PackResNet50*; target: >= 1.5x).

Run from the repository root after building (scripts/setup.sh):
    .venv/bin/python benchmarks/probe/vs_baselines.py --threads 2
Prints one table; every rate is a median over repetitions unless it says best.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("DTUNE_BIN_DIR", REPO / "build" / "bin"))


def run(cmd, env=None) -> str:
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env={**os.environ, **(env or {})})
    if r.returncode != 0:
        sys.exit(f"{cmd[0]} failed ({r.returncode}): {r.stderr[-2000:]}")
    return r.stdout


# The Python yardsticks run in a child process so that thread counts are set before numpy and
# torch load their BLAS (OPENBLAS_NUM_THREADS / OMP_NUM_THREADS are read once, at import).
CHILD = r"""
import json, sys, time
import numpy as np
import torch
what, n, reps, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
def median_time(f):
    f(); f()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
    return sorted(ts)[len(ts) // 2], min(ts)
out = {}
if what == "gemm":
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), np.float32)
    t, _ = median_time(lambda: np.matmul(a, b, out=c))
    out["numpy_tflops"] = 2 * n**3 / t / 1e12
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    tc = torch.empty(n, n)
    t, _ = median_time(lambda: torch.mm(ta, tb, out=tc))
    out["torch_tflops"] = 2 * n**3 / t / 1e12
else:
    b = np.full(n, 2.0); c = np.full(n, 0.5); a = np.empty(n)
    def triad():
        np.multiply(c, 3.0, out=a)
        np.add(a, b, out=a)
    _, best = median_time(triad)
    out["numpy_triad_gbps"] = 3 * 8 * n / best / 1e9
print(json.dumps(out))
"""


def yardstick(what: str, n: int, reps: int, threads: int) -> dict:
    env = {k: str(threads) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    return json.loads(run([sys.executable, "-c", CHILD, what, n, reps, threads], env=env))


def gemm(threads: int, tmp: Path) -> list:
    out = tmp / "gemm.h5"
    run([BIN / "dtune-probe", "--output", out, "gemm", "--device", "cpu", "--dtype", "fp32",
         "--threads", threads, "--min-time", "1", "--min-iters", "10"])  # fmt: skip
    with h5py.File(out) as f:
        (g,) = f["runs"].values()
        n = int(g.attrs["peak_shape"].split("x")[0])
        ours = float(g.attrs["peak_tflops"])
    y = yardstick("gemm", n, 20, threads)
    best = max(y["numpy_tflops"], y["torch_tflops"])
    return [(f"gemm fp32 {n}^3, {threads} threads", "TFLOP/s", ours, y["numpy_tflops"], y["torch_tflops"], ours / best)]


def triad(threads: int, array_bytes: int, tmp: Path) -> list:
    out = tmp / "memory.h5"
    run([BIN / "dtune-probe", "--output", out, "memory", "--host-only", "--threads", threads,
         "--array-size", array_bytes, "-n", "20"])  # fmt: skip
    with h5py.File(out) as f:
        (g,) = f["runs"].values()
        ours = float(g.attrs["triad_gbps"])
    n = array_bytes // 8
    exe = tmp / "triad"
    run(["cc", "-O3", "-march=native", "-fopenmp", REPO / "benchmarks" / "probe" / "triad.c", "-o", exe])
    c = json.loads(run([exe, n, 20], env={"OMP_NUM_THREADS": str(threads)}))["triad_gbps"]
    y = yardstick("triad", n, 20, threads)["numpy_triad_gbps"]
    best = max(c, y)
    return [(f"triad best, {array_bytes >> 20} MiB arrays, {threads} thr", "GB/s", ours, y, c, ours / best)]


def pack(threads: int, tmp: Path) -> list:
    out = tmp / "micro.json"
    run([BIN / "dtune-micro", "--benchmark_filter=BM_PackResNet50", "--benchmark_repetitions=7",
         "--benchmark_format=json", f"--benchmark_out={out}"], env={"OMP_NUM_THREADS": str(threads)})  # fmt: skip
    doc = json.loads(out.read_text())
    med = {
        b["run_name"].split("/")[0]: b["real_time"] for b in doc["benchmarks"] if b.get("aggregate_name") == "median"
    }
    fused = med["BM_PackResNet50Fused"]
    rows = []
    for name, label in (("BM_PackResNet50MulCopyPerParam", "mul + copy_"), ("BM_PackResNet50CopyPerParam", "copy_")):
        rows.append((f"pack ResNet-50 (161) vs {label}/param", "ms", fused, med[name], float("nan"), med[name] / fused))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="threads for every contender")
    ap.add_argument("--array-bytes", type=int, default=256 << 20, help="STREAM bytes per array (default 256 MiB)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        t0 = time.time()
        rows = gemm(a.threads, tmp) + triad(a.threads, a.array_bytes, tmp) + pack(a.threads, tmp)
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {a.threads} threads, {time.time() - t0:.0f} s")
    print(f"# {'what':<42} {'unit':>7} {'dtune':>9} {'numpy/B':>9} {'C/torch':>9} {'ratio':>7}")
    for what, unit, ours, y1, y2, ratio in rows:
        print(f"  {what:<42} {unit:>7} {ours:9.3f} {y1:9.3f} {y2:9.3f} {ratio:7.2f}")
    print("# gemm: ratio = dtune / max(numpy, torch.mm); triad: dtune / max(numpy, C -O3 -march=native)")
    print("# pack: the fused pack's median ms; ratio = per-parameter time / fused time (> 1: fused faster)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
