"""`dtune model plan`'s memory of the fullest rank (report/dtune_report/layouts.py) against
dtune-train's measured peak on the CPU, where the counting allocator makes it exact: llama3-tiny
(4 layers, context 128, vocabulary 1,024, micro-batch 4, fp32, AdamW) in DDP, ZeRO-1 and ZeRO-3,
tensor parallelism with and without sequence parallelism, pipeline stages and full
checkpointing, on 1 to 4 ranks. Each row: the measured peak and the plan's total with its error,
then measured/planned weights, gradients, optimizer state and activations (the forward's held
bytes, or a pipeline's largest stage's) in MB.

Run: .venv/bin/python benchmarks/train/plan_memory.py. About a minute on a 2-core machine. Exit 0
(a benchmark); 2 when a launch fails."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "report")]
from dtune_report.clusters import CLUSTERS  # noqa: E402
from dtune_report.layouts import Layout, Machine, Run, load_shape, plan  # noqa: E402
from dtune_report.projection import link_fits  # noqa: E402

BIN = Path(os.environ.get("DTUNE_BIN_DIR", REPO / "build" / "bin"))
MODEL = ["--model", "llama3-tiny", "--layers", "4", "--context", "128", "--vocab", "1024"]
MICRO, OPTIMIZER = 4, "adamw"
CASES = [  # dp, tp, pp, shard, micro-batches, checkpointing, sequence parallelism
    (1, 1, 1, "none", 1, "none", False),
    (1, 1, 1, "none", 1, "full", False),
    (2, 1, 1, "none", 2, "none", False),
    (2, 1, 1, "zero1", 2, "none", False),
    (2, 1, 1, "zero3", 2, "none", False),
    (1, 2, 1, "none", 2, "none", False),
    (1, 2, 1, "none", 2, "none", True),
    (1, 1, 2, "none", 4, "none", False),
    (2, 2, 1, "zero1", 2, "full", False),
]


def main() -> int:
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    shape = load_shape("llama3-tiny", BIN, 128, 4, 1024)
    links = link_fits(CLUSTERS["h100-ib400"], 2.0, 6.0, 8)  # only the memory is read
    print("# dtune model plan's memory against dtune-train's peak (CPU, counting allocator): " + " ".join(MODEL[1:]))
    print(f"# {'layout':<34} {'peak MB':>8} {'plan MB':>8} {'error':>6}  measured/planned MB")
    with tempfile.TemporaryDirectory() as tmp:
        for dp, tp, pp, shard, m, ck, sp in CASES:
            lo, n = Layout(dp, tp, pp, shard, m, ck, sp), dp * tp * pp
            out = Path(tmp) / f"{len(os.listdir(tmp))}.h5"
            split = ["--pp", pp, "--micro-batches", m] if pp > 1 else ["--accum-steps", m]
            flags = ["--tp", tp, *(["--sequence-parallel"] if sp else []), *split]
            flags += ["--shard", shard, "--activation-checkpoint", ck, "--optimizer", OPTIMIZER]
            cmd = (["mpirun", "-np", n, "--oversubscribe"] if n > 1 else []) + [BIN / "dtune-train", *MODEL]
            cmd += ["--batch", MICRO, "--threads", 1, "--steps", 2, "--warmup-steps", 0, *flags, "--output", out]
            r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env)
            if r.returncode:
                print(f"plan_memory: {lo.label()}: dtune-train exited {r.returncode}:\n{r.stderr[-2000:]}")
                return 2
            with h5py.File(out) as f:
                (g,) = f["runs"].values()
                got = {
                    "weights": g["param_bytes_resident"][()].max(),
                    "grads": g["grad_bytes_peak"][()].max(),
                    "optimizer": g["optimizer_state_bytes"][()].max(),
                    "activations": g["pipeline"]["peak_activation_bytes"][()].max()
                    if "pipeline" in g
                    else g.attrs["activation_bytes"],
                }
                peak = int(g["peak_memory_bytes"][()].max())
            p = plan(shape, lo, Run(MICRO * m * dp, MICRO, "fp32", "fp32", OPTIMIZER), Machine(1, n, links, 1, 1, 1))
            parts = " ".join(f"{k[0]} {got[k] / 1e6:.2f}/{p.memory[k] / 1e6:.2f}" for k in got)
            print(
                f"  {lo.label():<34} {peak / 1e6:8.2f} {p.memory_bytes / 1e6:8.2f} "
                f"{p.memory_bytes / peak - 1:+6.0%}  {parts}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
