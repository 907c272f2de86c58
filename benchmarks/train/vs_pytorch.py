"""dtune-train against PyTorch training in Python, in one run: the same models (ResNet-18 at 64x64,
10 classes, batch 32; the tiny GPT at context 128, batch 8), the same torch, the same threads, SGD
with momentum 0.9 and one fixed synthetic batch per rank on both sides. 1 rank (2 threads) runs
against a plain loop (forward, cross-entropy, backward, step, zero_grad); 2 ranks (1 thread each)
against DistributedDataParallel on gloo, launched with torchrun. Targets: dtune/PyTorch >= 1.05 at
1 rank, >= 1.1 at 2 ranks.

Both sides compute throughput alike: global samples over the sum, over measured steps, of the
slowest rank's step time (dtune-train's own statistic; its HDF5 attribute samples_per_s). Each
repeat is a fresh pair of launches, alternating which goes first; the table gives the medians over
repeats, the range of the per-pair ratios, and p50_ratio, the same ratio from median step times,
which a few stalled steps do not move. other_cores is the most CPU that processes outside the
benchmark used during a case (/proc/stat less our children's CPU time): above ~0.2 on a 2-core
machine, OpenMP threads get descheduled and single steps stall many-fold, so the ratios say little.
Each side is launched its usual way: dtune with mpirun (DTUNE_MPIRUN, Open MPI's default binding),
DDP with torchrun and its defaults (buckets of 25 MiB, broadcast_buffers on: ResNet's BatchNorm
buffers go out from rank 0 every forward, which dtune does not do).

Run: .venv/bin/python benchmarks/train/vs_pytorch.py [--steps N] [--warmup N] [--repeats N]
[--models resnet18,gpt2-tiny] [--ranks 1,2]; the binary comes from DTUNE_BIN_DIR (default
build/bin). About 2 minutes on an idle 2-core machine. Exit 0 whether or not a target is met (a
benchmark, not a test); 2 if a launch fails. --worker is the PyTorch side, under torchrun or alone."""
import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# name: (dtune-train arguments, batch per rank, default measured steps, default warm-up steps).
# The tiny GPT's step is ~10x shorter than ResNet's, so it gets more steps for a comparable
# measured time, and more warm-up: its first few steps in Python are several times slower.
MODELS = {
    "resnet18": (["--model", "resnet18", "--image-size", "64", "--num-classes", "10"], 32, 10, 3),
    "gpt2-tiny": (["--model", "gpt2-tiny", "--context", "128"], 8, 60, 10),
}
THREADS = {1: 2, 2: 1}  # ranks: intra-op threads per rank (2 cores either way)
TARGET = {1: 1.05, 2: 1.10}
LR = 1e-3
TIMEOUT_S = 300  # per launch; a hung launch is killed with all its processes


def model_and_batch(a, rank):
    """-> (model, x, y, loss_fn): a.model with the same initial weights on every rank, and rank's
    fixed synthetic batch. vs_fsdp2.py builds its side from this too."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(a.seed)  # equal initial weights on every rank (DDP broadcasts rank 0's anyway)
    gen = torch.Generator().manual_seed(a.seed * 1000003 + rank)  # a different fixed batch per rank
    if a.model == "resnet18":
        import torchvision
        model = torchvision.models.resnet18(num_classes=10)
        x = torch.randn(a.batch, 3, 64, 64, generator=gen)  # (B, 3, H, W)
        y = torch.randint(0, 10, (a.batch,), generator=gen)  # (B,)
        loss_fn = F.cross_entropy
    else:
        sys.path.insert(0, str(REPO / "tests" / "models"))
        from gpt_reference import GPT
        model = GPT(2, 128, 4, 128, 1024)
        seq = torch.randint(0, 1024, (a.batch, 129), generator=gen)  # (B, T + 1)
        x, y = seq[:, :-1].contiguous(), seq[:, 1:].contiguous()  # (B, T) each
        loss_fn = GPT.loss
    return model, x, y, loss_fn


def worker(a):
    """The PyTorch side: one process of a plain loop, or one rank of DDP under torchrun."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(a.threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    model, x, y, loss_fn = model_and_batch(a, rank)
    if world > 1:
        dist.init_process_group("gloo")
        model = torch.nn.parallel.DistributedDataParallel(model)
    train_and_record(a, model, x, y, loss_fn, world, rank)
    # No teardown: with torch 2.11 and gloo, freeing DDP (its Reducer holds the last reference to
    # the process group) can deadlock: ~ProcessGroupGloo, under the GIL, waits for a gloo thread
    # that waits for the GIL to free a finished work's tensors. Seen once in ~10 runs.
    sys.stdout.flush()
    os._exit(0)


def train_and_record(a, model, x, y, loss_fn, world, rank):
    """The timed loop, the same for every PyTorch side (plain, DDP, FSDP2): a.warmup + a.steps steps
    of forward, loss, backward, SGD step, zero_grad; rank 0 writes a.result (JSON: samples_per_s,
    step_time_p50_ms) from the slowest rank's time of each measured step."""
    import torch
    import torch.distributed as dist

    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    step_s = []
    for _ in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        step_s.append(time.perf_counter() - t0)
    slowest = torch.tensor(step_s[a.warmup:], dtype=torch.float64)
    if world > 1:
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # a step lasts as long as its slowest rank
    if rank == 0:
        Path(a.result).write_text(json.dumps({
            "samples_per_s": a.steps * a.batch * world / slowest.sum().item(),
            "step_time_p50_ms": 1e3 * statistics.median(slowest.tolist())}))


def busy_core_s():
    """CPU seconds the whole machine has spent busy (user..steal, not idle/iowait), or None."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(v) for v in f.readline().split()[1:9]]
    except OSError:
        return None
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def launch(cmd, env):
    """Runs cmd; returns the cores that other processes kept busy meanwhile (0 if unknown)."""
    busy0, kids0, t0 = busy_core_s(), resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    # A session of its own, so that a timeout kills torchrun's or mpirun's workers too.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        output += f"\n(killed after {TIMEOUT_S} s)"
    busy1, kids1, wall = busy_core_s(), resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic() - t0
    if proc.returncode != 0:
        # Torch's C++ backtraces ("frame #N: ...") would push the error message out of view.
        lines = [line for line in output.splitlines() if not line.startswith("frame #")]
        sys.stderr.write(f"{Path(sys.argv[0]).stem}: failed ({proc.returncode}): {' '.join(cmd)}\n"
                         + "\n".join(lines[-40:]) + "\n")
        sys.exit(2)
    if busy0 is None:
        return 0.0
    ours = (kids1.ru_utime + kids1.ru_stime) - (kids0.ru_utime + kids0.ru_stime)
    return max(0.0, (busy1 - busy0 - ours) / wall)


def mpirun_prefix(ranks):
    cmd = os.environ.get("DTUNE_MPIRUN", "mpirun").split() + ["-np", str(ranks), "--oversubscribe"]
    return cmd + (["--allow-run-as-root"] if os.geteuid() == 0 else [])


def steps_of(a, name):
    """(measured, warm-up) steps: the command line's, else the model's defaults."""
    _, _, steps, warmup = MODELS[name]
    return (a.steps or steps), (warmup if a.warmup is None else a.warmup)


def dtune_cmd(name, ranks, steps, warmup, out, extra=()):
    """The dtune-train launch of one case (mpirun above 1 rank); extra: more dtune-train arguments."""
    args, batch, _, _ = MODELS[name]
    exe = Path(os.environ.get("DTUNE_BIN_DIR", REPO / "build" / "bin")) / "dtune-train"
    cmd = [str(exe), *args, "--batch", str(batch), "--threads", str(THREADS[ranks]), "--optimizer", "sgd",
           "--lr", str(LR), "--steps", str(steps), "--warmup-steps", str(warmup), "--output", str(out), *extra]
    return (mpirun_prefix(ranks) if ranks > 1 else []) + cmd


def dtune_run(a, name, ranks, tmp, env, extra=()):
    """-> (samples/s, median step ms, other cores)"""
    import h5py

    out = tmp / f"dtune-{name}-{ranks}.h5"
    out.unlink(missing_ok=True)
    other = launch(dtune_cmd(name, ranks, *steps_of(a, name), out, extra), env)
    with h5py.File(out) as f:
        (run,) = f["runs"].values()
        return float(run.attrs["samples_per_s"]), float(run.attrs["step_time_p50_ms"]), other


def pytorch_run(a, name, ranks, tmp, env, script=Path(__file__)):
    """-> (samples/s, median step ms, other cores); script: whose --worker is the PyTorch side"""
    steps, warmup = steps_of(a, name)
    result = tmp / f"pytorch-{name}-{ranks}.json"
    result.unlink(missing_ok=True)
    cmd = [sys.executable, str(script.resolve()), "--worker", "--model", name,
           "--batch", str(MODELS[name][1]), "--threads", str(THREADS[ranks]), "--steps", str(steps),
           "--warmup", str(warmup), "--result", str(result)]
    if ranks > 1:
        cmd[1:1] = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks)]
    other = launch(cmd, env)
    r = json.loads(result.read_text())
    return r["samples_per_s"], r["step_time_p50_ms"], other


def alternate_pairs(repeats, ours, theirs):
    """Runs ours() and theirs() (each -> (samples/s, median step ms, other cores)) repeats times,
    alternating which goes first. -> (our median samples/s, theirs, the ratio of the medians, the
    per-pair ratios, p50_ratio (their median step time over ours), the most other cores seen)."""
    dt, pt = [], []
    for r in range(repeats):
        sides = [(ours, dt), (theirs, pt)]
        for fn, into in sides if r % 2 == 0 else sides[::-1]:
            into.append(fn())
    d_sps, p_sps = statistics.median(d[0] for d in dt), statistics.median(p[0] for p in pt)
    p50_ratio = statistics.median(p[1] for p in pt) / statistics.median(d[1] for d in dt)
    ratios = [d[0] / p[0] for d, p in zip(dt, pt)]
    return d_sps, p_sps, d_sps / p_sps, ratios, p50_ratio, max(x[2] for x in dt + pt)


def compare(a, name, ranks, tmp):
    """Prints one table row."""
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS[ranks]))  # torchrun would set 1 on its own
    d_sps, p_sps, ratio, ratios, p50_ratio, other = alternate_pairs(
        a.repeats, lambda: dtune_run(a, name, ranks, tmp, env), lambda: pytorch_run(a, name, ranks, tmp, env))
    steps = "{}+{}".format(*steps_of(a, name)[::-1])  # warm-up + measured
    span = f"{min(ratios):.3f}-{max(ratios):.3f}"
    print(f"  {name:<10} {ranks:>5} {MODELS[name][1]:>5} {steps:>10} {d_sps:>10.2f} {p_sps:>11.2f} {ratio:>6.3f} "
          f"{span:>12} {p50_ratio:>9.3f} {other:>11.2f} {TARGET[ranks]:>6.2f}  "
          f"{'ok' if ratio >= TARGET[ranks] else 'MISSED'}", flush=True)
    return other


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, help="measured steps (default: ResNet 10, GPT 60)")
    ap.add_argument("--warmup", type=int, help="warm-up steps, not measured (default: ResNet 3, GPT 10)")
    ap.add_argument("--repeats", type=int, default=2, help="alternating pairs per case (default 2)")
    ap.add_argument("--models", default="resnet18,gpt2-tiny", help="comma-separated (default both)")
    ap.add_argument("--ranks", default="1,2", help="comma-separated, from 1 and 2 (default both)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", choices=sorted(MODELS), help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=1234, help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    models, ranks_list = a.models.split(","), a.ranks.split(",")
    if (a.steps is not None and a.steps < 1) or (a.warmup is not None and a.warmup < 0) or a.repeats < 1:
        ap.error("--steps and --repeats want >= 1, --warmup >= 0")
    if bad := [m for m in models if m not in MODELS] + [r for r in ranks_list if r not in ("1", "2")]:
        ap.error(f"unknown --models/--ranks value(s) {', '.join(bad)}: models {', '.join(MODELS)}; ranks 1, 2")

    import torch
    print(f"# dtune-train vs PyTorch: torch {torch.__version__}, SGD momentum 0.9, lr {LR}, one fixed synthetic "
          f"batch per rank; medians of {a.repeats} alternating pairs")
    print("# 1 rank: plain loop, 2 threads; 2 ranks: mpirun vs torchrun + DDP (gloo), 1 thread per rank; "
          "sps = samples/s")
    print(f"# {'model':<10} {'ranks':>5} {'batch':>5} {'warm+steps':>10} {'dtune_sps':>10} {'pytorch_sps':>11} "
          f"{'ratio':>6} {'ratio_range':>12} {'p50_ratio':>9} {'other_cores':>11} {'target':>6}  result", flush=True)
    with tempfile.TemporaryDirectory(prefix="dtune-vs-pytorch.") as d:
        other = max(compare(a, name, int(ranks), Path(d)) for name in models for ranks in ranks_list)
    if other > 0.2:
        print(f"# warning: other processes kept up to {other:.2f} cores busy during the runs; "
              "rerun on an idle machine (or with more --repeats) before trusting the ratios")
    return 0


if __name__ == "__main__":
    sys.exit(main())
