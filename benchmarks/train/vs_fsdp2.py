"""dtune-train --shard zero3 against PyTorch FSDP2 (fully_shard) on 2 ranks, 1 thread each: the same
models, batch, steps, warm-up, threads and optimizer (SGD momentum 0.9, lr 1e-3) as vs_pytorch.py,
whose functions this reuses. Issue 35's targets: dtune/FSDP2 samples/s >= 1.1 (medians of
alternating pairs), and dtune's ZeRO-3 per-rank parameter+gradient+optimizer bytes <= 0.55x its DDP's.

Throughput: dtune with mpirun and `--shard zero3` (reshard after forward on, its default); FSDP2 on
gloo (CPU) with torchrun, fully_shard(reshard_after_forward=True) on each unit as dtune cuts them,
then on the root, which keeps what is left: GPT: each transformer block, root = embeddings, final
norm, tied head (dtune makes the embedding and norm+head two units, and holds the embedding from
its forward until the head has used it); ResNet-18: each stage (layer1..layer4), root = stem and head
(dtune: two units). True on the root too (FSDP2's default would keep the root gathered from forward to
backward; dtune regathers every unit). Both sides
time steps alike (vs_pytorch.py's docstring): global samples over the sum of the slowest rank's
measured step times; p50_ratio compares median step times; other_cores is the most CPU that other
processes used during a launch, and above 0.2 (2 cores) a row reads `noisy`, not ok or MISSED.

Memory: one short dtune-train run per model with --shard none (DDP) and one with zero3 per --units
value, on 2 ranks; per rank, what it holds between steps (param_bytes_resident + grad_bytes_resident +
optimizer_state_bytes, results/SCHEMA.md; zero3's fp32 master shard is in optimizer_state_bytes, its
gathered parameters are freed) and at the peaks during the steps (param_bytes_peak + grad_bytes_peak +
optimizer_state_bytes: the gathered units, the gradients not yet reduced), the most over ranks; ratio =
zero3 / none. The peak depends on the unit: a model whose largest unit (or piece) is a large share of
it cannot hold 0.55x at its peak.

Run: DTUNE_BIN_DIR=build/bin .venv/bin/python benchmarks/train/vs_fsdp2.py [--repeats N] [--steps N]
[--warmup N] [--models resnet18,gpt2-tiny] [--tables throughput,memory] [--units block,4] [--prefetch N]
[--launches]. About 1
minute per repeat (both models, both sides), 5 minutes with --repeats 5, on an idle 2-core machine.
Output: `#` header lines and rows (grep -v '^#'; --launches adds one `#` line per launch). Exit 0
whether or not a target is met; 2 if a launch fails."""

import argparse
import os
import sys
import tempfile
from pathlib import Path

import vs_pytorch as vp

RANKS = 2
TARGET_SPEEDUP = 1.10  # dtune zero3 samples/s over FSDP2's
TARGET_MEMORY = 0.55  # dtune zero3 per-rank param+grad+optimizer bytes over --shard none's
NOISY_CORES = 0.2  # other_cores above which a row's ratio is not judged (see vs_pytorch.py)
MEMORY_STEPS = 2  # memory is the same after any step; 2 so that the optimizer state exists
MEMORY_DATASETS = {  # per rank, between steps and at their peaks during the steps (results/SCHEMA.md)
    "held": ("param_bytes_resident", "grad_bytes_resident", "optimizer_state_bytes"),
    "peak": ("param_bytes_peak", "grad_bytes_peak", "optimizer_state_bytes"),
}


def fsdp_units(model, name):
    """The submodules that get their own fully_shard before the root, in dtune's cut (see top)."""
    if name == "gpt2-tiny":
        return list(model.transformer.h)
    return [model.layer1, model.layer2, model.layer3, model.layer4]


def worker(a):
    """One FSDP2 rank under torchrun: the model and batch of vs_pytorch.py, sharded, then its loop."""
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    torch.set_num_threads(a.threads)
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    dist.init_process_group("gloo")
    model, x, y, loss_fn = vp.model_and_batch(a, rank)
    for unit in fsdp_units(model, a.model):
        fully_shard(unit, reshard_after_forward=True)
    fully_shard(model, reshard_after_forward=True)
    vp.train_and_record(a, model, x, y, loss_fn, world, rank)
    sys.stdout.flush()
    os._exit(0)  # no teardown, as vs_pytorch.worker (gloo's process group can deadlock in its destructor)


def verdict(ratio, target, other, more_is_better=True):
    if other > NOISY_CORES:
        return "noisy"
    return "ok" if (ratio >= target if more_is_better else ratio <= target) else "MISSED"


def logged(a, side, run):
    """run, with --launches: prints its (samples/s, median step ms, other cores) as a # line."""

    def call():
        sps, p50_ms, other = run()
        if a.launches:
            print(f"#   launch {side:<6} sps {sps:8.2f}  p50_ms {p50_ms:8.2f}  other_cores {other:5.2f}", flush=True)
        return sps, p50_ms, other

    return call


def throughput_row(a, name, tmp, env):
    """Prints one row: dtune zero3 against FSDP2; -> other cores."""
    d_sps, p_sps, ratio, ratios, p50_ratio, other = vp.alternate_pairs(
        a.repeats,
        logged(a, "dtune", lambda: vp.dtune_run(a, name, RANKS, tmp, env, extra=["--shard", "zero3"])),
        logged(a, "fsdp2", lambda: vp.pytorch_run(a, name, RANKS, tmp, env, script=Path(__file__))),
    )
    steps = "{}+{}".format(*vp.steps_of(a, name)[::-1])  # warm-up + measured
    span = f"{min(ratios):.3f}-{max(ratios):.3f}"
    print(
        f"  {name:<10} {RANKS:>5} {vp.MODELS[name][1]:>5} {steps:>10} {d_sps:>10.2f} {p_sps:>10.2f} {ratio:>6.3f} "
        f"{span:>12} {p50_ratio:>9.3f} {other:>11.2f} {TARGET_SPEEDUP:>6.2f}  {verdict(ratio, TARGET_SPEEDUP, other)}",
        flush=True,
    )
    return other


def resident_bytes(name, flags, tmp, env):
    """-> {"held": (param, grad, optimizer) bytes, "peak": the same}, each of the rank with the most in
    all, from a short dtune-train run with `flags`."""
    import h5py

    out = tmp / f"memory-{name}-{'-'.join(flags)}.h5"
    out.unlink(missing_ok=True)
    vp.launch(vp.dtune_cmd(name, RANKS, MEMORY_STEPS, 0, out, flags), env)
    got = {}
    with h5py.File(out) as f:
        (run,) = f["runs"].values()
        for when, datasets in MEMORY_DATASETS.items():
            per_rank = list(zip(*(run[d][()].tolist() for d in datasets)))  # (R, 3)
            got[when] = max(per_rank, key=sum)
    return got


def memory_rows(name, units, prefetch, tmp, env):
    ddp = resident_bytes(name, ["--shard", "none"], tmp, env)
    for unit in units:
        z3 = ["--shard", "zero3", "--shard-unit", unit, "--shard-prefetch", str(prefetch)]
        zero3 = resident_bytes(name, z3, tmp, env)
        for when in MEMORY_DATASETS:
            ratio = sum(zero3[when]) / sum(ddp[when])
            cells = " ".join(f"{v:>11}" for v in (*ddp[when], sum(ddp[when]), *zero3[when], sum(zero3[when])))
            print(
                f"  {name:<10} {RANKS:>5} {unit:>6} {prefetch:>8} {when:>5} {cells} {ratio:>6.3f} "
                f"{TARGET_MEMORY:>6.2f}  {verdict(ratio, TARGET_MEMORY, 0.0, more_is_better=False)}",
                flush=True,
            )


def print_throughput(a, models, tmp, env):
    import torch
    from torch.distributed.fsdp import fully_shard

    print(
        f"# dtune-train --shard zero3 vs PyTorch FSDP2 ({fully_shard.__module__}.fully_shard, torch "
        f"{torch.__version__}), {RANKS} ranks x 1 thread, mpirun vs torchrun (gloo); SGD momentum 0.9, lr {vp.LR}; "
        f"medians of {a.repeats} alternating pairs; sps = samples/s"
    )
    print(
        f"# {'model':<10} {'ranks':>5} {'batch':>5} {'warm+steps':>10} {'dtune_sps':>10} {'fsdp2_sps':>10} "
        f"{'ratio':>6} {'ratio_range':>12} {'p50_ratio':>9} {'other_cores':>11} {'target':>6}  result",
        flush=True,
    )
    return max(throughput_row(a, name, tmp, env) for name in models)


def print_memory(a, models, tmp, env):
    print(
        f"# per-rank bytes of {MEMORY_STEPS} steps, the rank with the most: held between steps "
        "(param_bytes_resident, grad_bytes_resident, optimizer_state_bytes) and at their peaks during the "
        "steps (param_bytes_peak, grad_bytes_peak, optimizer_state_bytes); dtune-train --shard none (DDP) vs "
        "--shard zero3 with --shard-unit and --shard-prefetch as given"
    )
    heads = [f"{s}_{k}" for s in ("ddp", "zero3") for k in ("param", "grad", "optim", "total")]
    print(
        f"# {'model':<10} {'ranks':>5} {'unit':>6} {'prefetch':>8} {'when':>5} {' '.join(f'{h:>11}' for h in heads)} "
        f"{'ratio':>6} {'target':>6}  result",
        flush=True,
    )
    for name in models:
        memory_rows(name, a.units.split(","), a.prefetch, tmp, env)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, help="measured steps (default: ResNet 10, GPT 60)")
    ap.add_argument("--warmup", type=int, help="warm-up steps, not measured (default: ResNet 3, GPT 10)")
    ap.add_argument("--repeats", type=int, default=2, help="alternating pairs per model (default 2)")
    ap.add_argument("--models", default="resnet18,gpt2-tiny", help="comma-separated (default both)")
    ap.add_argument("--tables", default="throughput,memory", help="comma-separated (default both)")
    ap.add_argument("--launches", action="store_true", help="also print each launch's result as a # line")
    ap.add_argument("--units", default="block", help="memory: dtune's --shard-unit values, comma-separated")
    ap.add_argument("--prefetch", type=int, default=0, help="memory: dtune's --shard-prefetch (default 0)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", choices=sorted(vp.MODELS), help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=1234, help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    models, tables = a.models.split(","), a.tables.split(",")
    if (a.steps is not None and a.steps < 1) or (a.warmup is not None and a.warmup < 0) or a.repeats < 1:
        ap.error("--steps and --repeats want >= 1, --warmup >= 0")
    if bad := [m for m in models if m not in vp.MODELS] + [t for t in tables if t not in ("throughput", "memory")]:
        ap.error(
            f"unknown --models/--tables value(s) {', '.join(bad)}: models {', '.join(vp.MODELS)}; "
            "tables throughput, memory"
        )

    env = dict(os.environ, OMP_NUM_THREADS=str(vp.THREADS[RANKS]))  # torchrun would set 1 on its own
    other = 0.0
    with tempfile.TemporaryDirectory(prefix="dtune-vs-fsdp2.") as d:
        if "throughput" in tables:
            other = print_throughput(a, models, Path(d), env)
        if "memory" in tables:
            print_memory(a, models, Path(d), env)
    if other > NOISY_CORES:
        print(
            f"# warning: other processes kept up to {other:.2f} cores busy during the throughput runs; "
            "rows marked noisy are not judged: rerun on an idle machine"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
