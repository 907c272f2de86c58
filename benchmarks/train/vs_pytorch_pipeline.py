"""dtune-train's pipeline parallelism against torch.distributed.pipelining, in one run: the same
torch, gloo on CPU, the same model (the tiny GPT: 2 blocks of width 128, context 128, vocabulary
1,024; or gpt2-d6 cut down with --context and --vocab, and --layers for 4 stages), the same stages
(embedding with the first block, final LayerNorm and head with the last, blocks split evenly),
micro-batches, schedule and SGD; one rank per stage, one intra-op thread each, placed alike:
torchrun binds its workers to no core, so mpirun gets --bind-to none (--bind core restores Open
MPI's default, one core per rank, which on a shared machine keeps a rank behind another job's work
on its core while the other core has room; dtune ran ~1.5x slower so at load 8 on 2 cores).
PyTorch's side builds each rank's stage module by hand (PipelineStage) and runs ScheduleGPipe,
Schedule1F1B or, for zb-h1, ScheduleInterleavedZeroBubble with one stage per rank (the paper's ZB-H1
order; autograd splits B and W over the stage's graph, where dtune's --schedule zb-h1 splits them at
its linear layers); dtune's zb-v is set against the same ScheduleInterleavedZeroBubble, since
torch 2.11's ScheduleZBVZeroBubble fails over gloo (the V's bottom stage sends to its own rank:
"Pair is not connected"); its head keeps its own copy of the embedding (untied: the same FLOPs, no
tied-gradient exchange), which favours PyTorch slightly. Throughput on both sides: global samples
over the sum, over measured steps, of the slowest rank's step time. Each repeat is a fresh pair of
launches, alternating which goes first; the table gives the medians over repeats and the median of
the pairs' ratios (the verdict's figure). Also: PP against DP on the same ranks (dtune only), with
dtune's measured breakdown per stage. --stage-pieces ends and --partition measured let
dtune's cut fall elsewhere than PyTorch's (dtune-train's: the cut that balances the stages' real
costs).

Run: .venv/bin/python benchmarks/train/vs_pytorch_pipeline.py [--ranks 2] [--micro-batches 4]
[--batch 4] [--schedules gpipe,1f1b,zb-h1] [--repeats 3] [--steps 20] [--bind none|core]
[--layers N] (the model's depth on both sides; a multiple of --ranks) [--stage-pieces blocks]
[--partition flops]; the binary comes from DTUNE_BIN_DIR (default build/bin). Exit 0 whether or
not the 1.15x target is met (a benchmark, not a test); 2 if a launch fails. --worker is the PyTorch
side, under torchrun."""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LR = 1e-3
TIMEOUT_S = 600
TARGET = 1.15
# --model: (dtune-train model args, reference GPT dims (layers, width, heads, context, vocab))
MODELS = {
    "gpt2-tiny": (["--model", "gpt2-tiny", "--context", "128"], (2, 128, 4, 128, 1024)),
    "gpt2-d6": (["--model", "gpt2-d6", "--context", "64", "--vocab", "1024"], (6, 384, 6, 64, 1024)),
}


def worker(a):
    """One rank of torch.distributed.pipelining: its stage of the reference GPT."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.distributed.pipelining import (
        PipelineStage,
        Schedule1F1B,
        ScheduleGPipe,
        ScheduleInterleavedZeroBubble,
    )

    sys.path.insert(0, str(REPO / "tests" / "models"))
    from gpt_reference import GPT

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    layers, width, heads, context, vocab = MODELS[a.model][1]
    layers = a.layers or layers
    torch.manual_seed(a.seed)
    full = GPT(layers, width, heads, context, vocab)
    per = layers // world
    first, last = rank == 0, rank == world - 1

    class Stage(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(full.transformer.h[rank * per : (rank + 1) * per])
            if first:
                self.wte, self.wpe = full.transformer.wte, full.transformer.wpe
            if last:
                self.ln_f = full.transformer.ln_f
                self.head = nn.Linear(width, vocab, bias=False)
                self.head.weight = nn.Parameter(full.lm_head.weight.detach().clone())

        def forward(self, x):
            if first:
                x = self.wte(x) + self.wpe(torch.arange(x.size(1)))
            for b in self.blocks:
                x = b(x)
            return self.head(self.ln_f(x)) if last else x

    stage_mod = Stage()
    stage = PipelineStage(stage_mod, rank, world, torch.device("cpu"))
    if a.schedule in ("zb-h1", "zb-v"):  # zb-v: against PyTorch's best that runs here (docstring)
        schedule = ScheduleInterleavedZeroBubble([stage], a.micro_batches, loss_fn=GPT.loss)
    else:
        sched_cls = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[a.schedule]
        schedule = sched_cls(stage, a.micro_batches, loss_fn=GPT.loss)
    opt = torch.optim.SGD(stage_mod.parameters(), lr=LR, momentum=0.9)
    gen = torch.Generator().manual_seed(a.seed)
    seq = torch.randint(0, vocab, (a.batch * a.micro_batches, context + 1), generator=gen)  # (B M, T + 1)
    x, y = seq[:, :-1].contiguous(), seq[:, 1:].contiguous()
    step_s = []
    for _ in range(a.warmup + a.steps):
        dist.barrier()
        t0 = time.perf_counter()
        if first:
            schedule.step(x)
        elif last:
            schedule.step(target=y)
        else:
            schedule.step()
        opt.step()
        opt.zero_grad()
        step_s.append(time.perf_counter() - t0)
    slowest = torch.tensor(step_s[a.warmup :], dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    if rank == 0:
        Path(a.result).write_text(
            json.dumps({"samples_per_s": a.steps * a.batch * a.micro_batches / slowest.sum().item()})
        )
    sys.stdout.flush()
    os._exit(0)


def launch(cmd, env=None):
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    if proc.returncode != 0:
        lines = [ln for ln in out.splitlines() if not ln.startswith("frame #")]
        sys.stderr.write(f"failed ({proc.returncode}): {' '.join(cmd)}\n" + "\n".join(lines[-40:]) + "\n")
        sys.exit(2)
    return out


def mpirun(ranks, bind="none"):
    cmd = os.environ.get("DTUNE_MPIRUN", "mpirun").split() + ["-np", str(ranks), "--oversubscribe"]
    cmd += ["--bind-to", bind]
    return cmd + (["--allow-run-as-root"] if os.geteuid() == 0 else [])


def dtune(a, tmp, schedule, stages):
    """samples/s and the pipeline table dtune printed."""
    import h5py

    out = Path(tmp) / f"dtune-{schedule}-{stages}.h5"
    exe = Path(os.environ.get("DTUNE_BIN_DIR", REPO / "build" / "bin")) / "dtune-train"
    args = [*MODELS[a.model][0], "--batch", str(a.batch), "--threads", "1", "--steps", str(a.steps)]
    args += ["--warmup-steps", str(a.warmup), "--lr", str(LR), "--output", str(out), "--overwrite"]
    if a.layers:
        args += ["--layers", str(a.layers)]
    if stages > 1:
        args += ["--pipeline-stages", str(stages), "--schedule", schedule, "--stage-pieces", a.stage_pieces]
        args += ["--partition", a.partition]
    # The same global batch either way: one pipeline takes M micro-batches, each of the data-parallel
    # ranks M / ranks.
    args += ["--micro-batches", str(a.micro_batches if stages > 1 else max(1, a.micro_batches // a.ranks))]
    text = launch([*mpirun(a.ranks, a.bind), str(exe), *args])
    with h5py.File(out) as f:
        (g,) = f["runs"].values()
        rate = float(g.attrs["samples_per_s"])
    table = [ln for ln in text.splitlines() if ln.startswith(("# pipeline", "#   cut", "# rank", "  "))]
    return rate, table


def pytorch(a, tmp, schedule):
    result = Path(tmp) / f"torch-{schedule}.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(a.ranks), __file__, "--worker"]
    cmd += ["--model", a.model, "--schedule", schedule, "--batch", str(a.batch), "--micro-batches"]
    cmd += [str(a.micro_batches), "--steps", str(a.steps), "--warmup", str(a.warmup), "--result", str(result)]
    if a.layers:
        cmd += ["--layers", str(a.layers)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    launch(cmd, env)
    return json.loads(result.read_text())["samples_per_s"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="gpt2-tiny", choices=sorted(MODELS))
    p.add_argument("--ranks", type=int, default=2, help="one pipeline of this many stages")
    p.add_argument("--micro-batches", type=int, default=4)
    p.add_argument("--batch", type=int, default=4, help="samples per micro-batch")
    p.add_argument("--schedules", default="gpipe,1f1b,zb-h1")
    p.add_argument("--layers", type=int, help="the model's depth on both sides (a multiple of --ranks)")
    p.add_argument(
        "--stage-pieces", default="blocks", choices=["blocks", "ends"], help="dtune's cut (PyTorch's: blocks)"
    )
    p.add_argument("--partition", default="flops", choices=["flops", "measured"], help="dtune's cost of a piece")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--bind", default="none", choices=["none", "core"], help="dtune's ranks: mpirun --bind-to")
    p.add_argument("--worker", action="store_true")
    p.add_argument("--schedule", default="1f1b")
    p.add_argument("--result")
    a = p.parse_args()
    if a.worker:
        return worker(a)
    depth = a.layers or MODELS[a.model][1][0]
    if depth % a.ranks:
        p.error(f"{depth} blocks do not split evenly over {a.ranks} stages: give --layers a multiple of {a.ranks}")
    with tempfile.TemporaryDirectory() as tmp:
        print(
            f"# {a.model}, {a.ranks} stages, {a.micro_batches} micro-batches of {a.batch}, {a.steps} steps; "
            f"dtune --stage-pieces {a.stage_pieces} --partition {a.partition}"
        )
        print(f"# load average before: {os.getloadavg()[0]:.2f}; dtune's ranks: mpirun --bind-to {a.bind}")
        print(
            f"# {'schedule':<10} {'dtune':>10} {'pytorch':>10} {'ratio':>7}  (samples/s, medians of {a.repeats}; "
            "ratio: the median of the pairs' ratios, lowest-highest)"
        )
        for schedule in a.schedules.split(","):
            ours, theirs, table = [], [], []
            for r in range(a.repeats):
                if r % 2 == 0:
                    rate, table = dtune(a, tmp, schedule, a.ranks)
                    ours.append(rate)
                    theirs.append(pytorch(a, tmp, schedule))
                else:
                    theirs.append(pytorch(a, tmp, schedule))
                    rate, table = dtune(a, tmp, schedule, a.ranks)
                    ours.append(rate)
            o, t = statistics.median(ours), statistics.median(theirs)
            ratios = [x / y for x, y in zip(ours, theirs)]
            ratio = statistics.median(ratios)
            verdict = "meets" if ratio >= TARGET else "below"
            print(
                f"  {schedule:<10} {o:10.2f} {t:10.2f} {ratio:7.2f}  ({min(ratios):.2f}-{max(ratios):.2f}; "
                f"{verdict} the {TARGET}x target)"
            )
        print("# dtune's last pipeline breakdown:")
        print("\n".join(table))
        dp, dp_table = dtune(a, tmp, "1f1b", 1)
        print(f"# PP against DP on the same {a.ranks} ranks (dtune, same global batch):")
        print(f"  pipeline ({a.schedules.split(',')[-1]}) {statistics.median(ours):.2f} samples/s")
        print(
            f"  data parallel, {a.ranks} ranks x {max(1, a.micro_batches // a.ranks)} micro-batches: {dp:.2f} samples/s"
        )
        print(f"# load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
