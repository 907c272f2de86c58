"""`dtune model plan`'s step times (report/dtune_report/layouts.py) against measured runs: every
tp x pp layout of 8 ranks on 2 simulated nodes of 4 (scripts/cluster, shaped links), the same
global batch, CPU, 1 intra-op thread a rank (issue 57's truth: median step-time error <= 15%, and
the measured best layout ranked first or within the stated error of first).

The plan's machine is this one, measured: each link level's α–β fit from dtune-comm allreduce runs
on the cluster (2 and 4 ranks within a node, 2 across the nodes; --mpi-progress thread, as the
trainer waits), and the compute rate from a 1-rank run of the same model and micro-batch (its
training FLOPs over its median micro-batch), stretched by max(1, R·T/C) for the R ranks that share
the machine's C cores (scaling_model.compute_factor: the simulated nodes share this machine). The
layouts run in turns, alternating their order each repeat; a layout's measured step is the median
over repeats of the run's median step (the slowest rank's per step).

Run (root: it makes the cluster, and takes it down after): .venv/bin/python
benchmarks/train/plan_check.py [--repeats 3] [--link-gbit 1] [--tp 1,2,4] [--pp 1,2]. About 5
minutes on an idle 2-core machine. Exit 0 whether or not the target is met (a benchmark); 2 when
a launch fails."""

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "report")]
from dtune_report.layouts import Layout, Machine, Run, load_shape, plan  # noqa: E402
from dtune_report.model_inputs import load_link_fits  # noqa: E402
from dtune_report.scaling_model import compute_factor  # noqa: E402

BIN = Path(os.environ.get("DTUNE_BIN_DIR", REPO / "build" / "bin"))
NAME = "plancheck"
TARGET = 0.15


def sh(cmd, **kw):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if r.returncode:
        print(f"plan_check: {' '.join(map(str, cmd[:12]))} ... exited {r.returncode}:\n{r.stderr[-2000:]}")
        sys.exit(2)
    return r


def figures(path: Path) -> dict:
    """A run's median step (the slowest rank's) and the parts it measured: compute (forward +
    backward, rank 0, the tensor-parallel collectives inside), those collectives, the exposed
    gradient reduction."""
    with h5py.File(path) as f:
        (g,) = f["runs"].values()
        w = int(g.attrs["warmup_steps"])

        def med(k):
            return float(np.median(g[k][w:, 0]))

        return {
            "step": float(g.attrs["step_time_p50_ms"]),
            "fwd+bwd": med("forward_ms") + med("backward_ms"),
            "tp": float(g.attrs.get("tp_comm_ms_per_step", 0.0)),
            "dp": med("comm_exposed_ms"),
        }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="gpt2-tiny")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--micro-batch", type=int, default=2)
    ap.add_argument("--global-batch", type=int, default=16)
    ap.add_argument("--tp", default="1,2,4")
    ap.add_argument("--pp", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--link-gbit", type=float, default=1.0)
    a = ap.parse_args()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    sh([REPO / "scripts" / "cluster", "up", "--name", NAME, "--nodes", 2, "--slots", 4, "--link-gbit", a.link_gbit])
    run_dir = Path("/run/dtune-cluster") / NAME
    mpi = ["mpirun", "--tune", run_dir / "mpirun.tune", "--hostfile", run_dir / "hostfile"]
    model = ["--model", a.model, "--layers", a.layers, "--context", a.context, "--vocab", a.vocab]
    common = [*model, "--batch", a.micro_batch, "--threads", 1, "--steps", a.steps, "--warmup-steps", 2]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            comm = []
            for name, np_, hosts in [
                ("intra2", 2, f"{NAME}-node0:2"),
                ("intra4", 4, f"{NAME}-node0:4"),
                ("inter2", 2, f"{NAME}-node0:1,{NAME}-node1:1"),
            ]:
                out = d / f"{name}.h5"
                sh(
                    [
                        *mpi,
                        "-np",
                        np_,
                        "--host",
                        hosts,
                        BIN / "dtune-comm",
                        "-b",
                        "1K",
                        "-e",
                        "4M",
                        "-f",
                        4,
                        "--mpi-progress",
                        "thread",
                        "--output",
                        out,
                    ],
                    env=env,
                )
                comm.append(out)
            fits = load_link_fits(comm)
            links = {"intra": fits.pooled[("intra", 0)], "inter": fits.pooled[("inter", 0)]}
            layouts = []
            for tp in map(int, a.tp.split(",")):
                for pp in map(int, a.pp.split(",")):
                    if 8 % (tp * pp) == 0:
                        dp = 8 // (tp * pp)
                        layouts.append(Layout(dp, tp, pp, "none", a.global_batch // (dp * a.micro_batch)))
            measured = {lo: [] for lo in layouts}
            profiles = []
            for rep in range(a.repeats):
                prof = d / f"one{rep}.h5"
                accum = a.global_batch // a.micro_batch
                sh(
                    [
                        *mpi,
                        "-np",
                        1,
                        "--host",
                        f"{NAME}-node0:1",
                        BIN / "dtune-train",
                        *common,
                        "--accum-steps",
                        accum,
                        "--output",
                        prof,
                    ],
                    env=env,
                )
                profiles.append(figures(prof)["step"] / accum)
                for lo in layouts if rep % 2 == 0 else layouts[::-1]:
                    out = d / f"{lo.dp}-{lo.tp}-{lo.pp}-{rep}.h5"
                    split = (
                        ["--pp", lo.pp, "--micro-batches", lo.micro_batches]
                        if lo.pp > 1
                        else ["--accum-steps", lo.micro_batches]
                    )
                    sh([*mpi, "-np", 8, BIN / "dtune-train", *common, "--tp", lo.tp, *split, "--output", out], env=env)
                    measured[lo].append(figures(out))
    finally:
        subprocess.run([REPO / "scripts" / "cluster", "down", "--name", NAME], capture_output=True)
    shape = load_shape(a.model, BIN, a.context, a.layers, a.vocab)
    micro_ms = float(np.median(profiles))
    rate = shape.flops_per_sample * a.micro_batch / (micro_ms / 1e3)
    stretch = compute_factor(os.cpu_count() or 1, 1, 8)
    machine = Machine(2, 4, links, rate / stretch, float("inf"), rate)
    run = Run(a.global_batch, a.micro_batch, "fp32", "fp32", "sgd")
    print(
        f"# dtune model plan against 8 ranks on 2 simulated nodes x 4 ({a.link_gbit:g} Gbit/s): {a.model} "
        f"{a.layers} layers, context {a.context}, vocabulary {a.vocab}, global batch {a.global_batch}, "
        f"micro-batch {a.micro_batch}, fp32, 1 thread a rank; medians of {a.repeats} turns"
    )
    print(
        f"# 1-rank micro-batch {micro_ms:.4g} ms (turns: {', '.join(f'{x:.4g}' for x in profiles)}); compute "
        f"stretched x{stretch:g} for 8 ranks on {os.cpu_count()} cores"
    )
    for level, f in links.items():
        print(f"#   {level}: α {f.alpha_s * 1e6:.4g} µs, 1/β {1e-9 / f.beta_s_per_byte:.4g} GB/s ({f.source})")
    print(f"# {'layout':<26} {'predicted':>10} {'measured':>10} {'error':>7}  turns (ms); then the parts")
    rows = []
    for lo in layouts:
        p = plan(shape, lo, run, machine)
        m = float(np.median([x["step"] for x in measured[lo]]))
        seen = {k: float(np.median([x[k] for x in measured[lo]])) for k in ("fwd+bwd", "tp", "dp")}
        rows.append((lo, p.step_ms, m))
        parts = " ".join(f"{k} {v:.3g}" for k, v in p.parts_ms.items() if v)
        turns = ",".join(f"{x['step']:.4g}" for x in measured[lo])
        ran = " ".join(f"{k} {v:.3g}" for k, v in seen.items())
        print(f"  {lo.label():<26} {p.step_ms:10.4g} {m:10.4g} {p.step_ms / m - 1:+7.1%}  {turns}")
        print(f"    predicted: {parts}; measured (rank 0, medians): {ran}")
    errs = [abs(p / m - 1) for _, p, m in rows]
    best_measured = min(rows, key=lambda r: r[2])
    best_predicted = min(rows, key=lambda r: r[1])
    err = float(np.median(errs))
    print(f"# median |error| {err:.1%} (target <= {TARGET:.0%}): {'ok' if err <= TARGET else 'MISSED'}")
    print(
        f"# measured best {best_measured[0].label()}; predicted best {best_predicted[0].label()} "
        f"(measured {best_predicted[2] / best_measured[2] - 1:+.1%} from the best)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
