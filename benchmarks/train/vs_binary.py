"""Two dtune-train binaries side by side (a refactor against the main it started from): alternating
launches on 2 ranks, 1 thread each, of the configurations a change to the trainer's structure must
not slow (DDP, ZeRO-3 and a 2-stage pipeline of gpt2-tiny; DDP and ZeRO-3 of a small ResNet-18).
Per launch: the median over measured steps of the slowest rank's step time (total_ms); per
configuration: the median over repeats of each side, their ratio (B / A) and each side's range. A
ratio inside the ranges' overlap is noise.

Run: .venv/bin/python benchmarks/train/vs_binary.py A/dtune-train B/dtune-train [--repeats N]
(build A from the older commit in a second build directory, or copy its binary before rebuilding).
About 3 minutes at 7 repeats on an idle 2-core machine."""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

import h5py
import numpy as np

GPT = ["--model", "gpt2-tiny", "--context", "64", "--vocab", "512", "--batch", "8"]
RES = ["--model", "resnet18", "--width", "16", "--image-size", "64", "--num-classes", "10", "--batch", "8"]
CONFIGS = {
    "gpt ddp": GPT,
    "gpt zero3": [*GPT, "--shard", "zero3"],
    "gpt pp2": [*GPT, "--pipeline-stages", "2", "--micro-batches", "4"],
    "resnet ddp": RES,
    "resnet zero3": [*RES, "--shard", "zero3"],
}


def once(exe, args, out):
    cmd = ["mpirun", "-np", "2", "--oversubscribe", exe, "--threads", "1", *args]
    cmd += ["--steps", "12", "--warmup-steps", "3", "--output", out]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"{exe} failed: {r.stderr[-2000:]}")
    with h5py.File(out) as f:
        (g,) = f["runs"].values()
        t = g["total_ms"][()]
        return float(np.median(t[int(g.attrs["warmup_steps"]) :].max(axis=1)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    print(f"# median step ms over {a.repeats} alternating launches each; A {a.a}, B {a.b}")
    with tempfile.TemporaryDirectory() as tmp:
        for n, (name, args) in enumerate(CONFIGS.items()):
            xa, xb = [], []
            for i in range(a.repeats):
                xa.append(once(a.a, args, f"{tmp}/{n}-a{i}.h5"))
                xb.append(once(a.b, args, f"{tmp}/{n}-b{i}.h5"))
            ma, mb = statistics.median(xa), statistics.median(xb)
            print(
                f"{name:<14} A {ma:8.2f}  B {mb:8.2f}  ratio {mb / ma:5.3f}  "
                f"(A {min(xa):.2f}-{max(xa):.2f}, B {min(xb):.2f}-{max(xb):.2f})",
                flush=True,
            )


if __name__ == "__main__":
    main()
