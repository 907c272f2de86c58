"""`dtune model predict|check|project`: the scaling model's subcommands (scaling_model.py), their
arguments and printed tables. Each returns the exit status: 0 done, 2 an input the model cannot use
(one line on stderr: no profile with gradient times, no link fit for a level it needs, an
allreduce measured at one size, an assumption outside its range (model_assumptions.py), ...).

    dtune model predict PROFILE.h5 COMM.h5... [--nodes 1,2] [--ranks-per-node 2,4] [--bucket-mb 1,25]
                        [--nodes-per-machine M]   M nodes' ranks share one machine's cores (default 1)
                        [--shard none|zero1|zero2|zero3] [--shard-unit-mb U] [--shard-prefetch N]
                        [--reshard-after-forward on|off] [--optimizer sgd|adamw]   sharded data parallelism
    dtune model check RESULTS... [--profile nearest|pooled]   predicted against measured, every multi-rank run
    dtune model project PROFILE.h5 [--cluster h100-ib400] [--nodes ...] [--bucket-mb ...] [--shard ...]
    dtune model plan --model NAME --global-batch B [--cluster h100-ib400] [--nodes N] [--tp LIST] [--pp LIST]
                     [--shard LIST] [--activation-checkpoint LIST] ...   every layout, ranked (layouts.py)

With --shard other than none (sharding.py), predict adds a column `state_mib` (this mode's
parameter + gradient + optimizer-state MiB per rank) and a table of that for every mode per rank
count and bucket size; both print what the sharded modes assume (model_assumptions.SHARD_ASSUMPTIONS).
"""

from __future__ import annotations

import sys
from pathlib import Path

from .clusters import CLUSTERS, DEFAULT_BUCKETS_MB, DEFAULT_NODES
from .model_assumptions import OPTIMIZERS, SHARD_ASSUMPTIONS, SHARD_MODES, check_assumptions

MIB = 1 << 20

# The model's modules (numpy, pandas, h5py) load inside each command, so that building the parser
# for `dtune --help` or `dtune sweep` stays quick.


def _fail(message: str) -> int:
    print(f"dtune model: error: {message}", file=sys.stderr)
    return 2


def _fit_line(level: str, f) -> str:
    bw = 1e-9 / f.beta_s_per_byte if f.beta_s_per_byte > 0 else float("inf")
    return f"#   {level}: α = {f.alpha_s * 1e6:.3g} µs per ring step, 1/β = {bw:.3g} GB/s ({f.source})"


def _shard(a, meta: dict):
    """(sharding.Shard, optimizer, weights dtype) from the --shard flags and the profile's
    attributes, or the one line saying which flag to change."""
    from .sharding import Shard

    mode = getattr(a, "shard", None) or "none"
    unit, prefetch, reshard = (
        getattr(a, k, None) for k in ("shard_unit_mb", "shard_prefetch", "reshard_after_forward")
    )
    if mode != "zero3":
        for flag, value in (
            ("--shard-unit-mb", unit),
            ("--shard-prefetch", prefetch),
            ("--reshard-after-forward", reshard),
        ):
            if value is not None:
                return f"{flag} applies to --shard zero3 only (--shard {mode}): drop it or give --shard zero3"
    optimizer = getattr(a, "optimizer", None) or str(meta.get("optimizer", "sgd"))
    if optimizer not in OPTIMIZERS:
        return (
            f"the profile's optimizer {optimizer!r} is not one the model knows: give --optimizer {'|'.join(OPTIMIZERS)}"
        )
    shard = Shard(mode, unit, 1 if prefetch is None else prefetch, reshard != "off")
    return shard, optimizer, str(meta.get("weights_dtype", "fp32"))


def _shard_lines(shard, optimizer: str, weights: str) -> list:
    """The sharded mode, its settings and assumptions: lines for predict's header and project's list."""
    from .sharding import describe_memory

    unit = f"{shard.unit_mb:g} MiB" if shard.unit_mb else "the bucket size"
    zero3 = (
        f"; units of {unit}, prefetch {shard.prefetch}, reshard after forward "
        f"{'on' if shard.reshard_after_forward else 'off'}"
        if shard.mode == "zero3"
        else ""
    )
    lines = [f"shard: {shard.mode}{zero3}; optimizer {optimizer}; {describe_memory(optimizer, weights)}"]
    return lines + [f"assumed: {t}" for t in SHARD_ASSUMPTIONS]


def _held(mode: str, p, ranks: int, optimizer: str, weights: str, bucket_mb: float, first_mb: float, shard):
    """sharding.state_memory of `mode` with the shard's zero3 settings and the model's pieces."""
    from .model_pieces import model_pieces
    from .sharding import state_memory

    pieces = model_pieces(p.meta.get("model"), len(p.param_bytes))
    z3 = (shard.unit_mb, shard.prefetch, shard.reshard_after_forward, pieces)
    return state_memory(mode, p.param_bytes, ranks, optimizer, weights, bucket_mb, first_mb, *z3)


def _pieces_line(p) -> str:
    """What zero3's gathered peak is replayed over: the model's pieces, or a unit per piece."""
    from .model_pieces import model_pieces

    model = p.meta.get("model")
    if model_pieces(model, len(p.param_bytes)) is not None:
        return f"zero3 gathered peak: replayed over {model}'s pieces (each gathers every unit owning a parameter of it)"
    return (
        f"zero3 gathered peak: {model}'s pieces unknown for its {len(p.param_bytes)} parameters: each unit taken as a "
        "piece of its own (low where a piece spans several units)"
    )


def _memory_table(p, shapes, buckets, shard, optimizer: str, weights: str, first_mb: float) -> list:
    """Per rank count and bucket size, every mode's parameter + gradient + optimizer state per rank."""
    lines = ["# state per rank (MiB: parameters + gradients + optimizer state + gathered in flight)"]
    lines.append(f"# {'ranks':>5} {'bucket_mb':>9} " + " ".join(f"{m:>10}" for m in SHARD_MODES))
    for ranks in sorted({s.ranks for s in shapes}):
        for b in buckets:
            mem = [_held(m, p, ranks, optimizer, weights, b, first_mb, shard) for m in SHARD_MODES]
            lines.append(f"# {ranks:5d} {b:9g} " + " ".join(f"{x.total / MIB:10.3f}" for x in mem))
    return lines


def cmd_predict(a) -> int:
    """Step time, exposed communication and efficiency per shape and bucket size."""
    import numpy as np

    from .model_inputs import load_link_fits, one_profile
    from .scaling_model import Shape, comm_slowdown_factor, compute_factor, predict, ranks_sharing_machine
    from .sharding import predict_sharded

    defaults(a)
    m = a.nodes_per_machine
    if m < 1:
        return _fail(f"--nodes-per-machine {m}: give a positive count (1: one node per machine)")
    if m > max(a.nodes):
        return _fail(
            f"--nodes-per-machine {m}: more than the most nodes asked for (--nodes {','.join(map(str, a.nodes))}); "
            f"it counts the nodes whose ranks share one machine's cores (all of them on the simulated cluster: "
            f"{max(a.nodes)})"
        )
    bad = check_assumptions(a)
    if bad:
        return _fail(bad)
    try:
        prof = one_profile(a.files, a.run)
        fits = load_link_fits(a.files)
        shapes = [Shape(n, r, a.algorithm) for n in a.nodes for r in a.ranks_per_node]
        link = {s: fits.for_shape(s) for s in shapes}
    except (OSError, ValueError, KeyError) as e:
        return _fail(str(e).splitlines()[0])
    p, threads = prof.profile, prof.threads
    sharding = _shard(a, p.meta)
    if isinstance(sharding, str):
        return _fail(sharding)
    shard, optimizer, weights = sharding
    cores = prof.cores if a.cores is None else a.cores
    busy = {s: fits.busy_for_shape(s, threads) for s in shapes}
    print(f"# dtune model: {Path(prof.file).name}:{prof.run} ({p.label}), {len(p.total_ms)} measured steps")
    step = float(np.median(p.total_ms))
    grads = f"{int(p.param_bytes.sum())} B in {len(p.param_bytes)} tensors"
    print(f"#   1-rank step {step:.3f} ms (median); gradients {grads}")
    if cores > 0:
        print(
            f"#   compute x cf = max(1, K·{threads}/{cores}) / max(1, {threads}/{cores}): the K ranks x {threads} "
            f"thread(s) on one machine share its {cores} cores fairly (--cores; the profile's provenance "
            f"topology); while a reduction is in flight during backward, x max(1, K·{threads + 1}/{cores}) / "
            f"max(1, K·{threads}/{cores}) more (each rank's polling communication thread)"
        )
        print(
            f"#   K = R·min({m}, nodes): the ranks of up to {m} node(s) share one machine's cores "
            f"(--nodes-per-machine {m}{': one node per machine' if m == 1 else ''})"
        )
    else:
        print("#   compute as profiled for every R (cores unknown, a GPU profile, or --cores 0: no contention)")
    for (level, load), f in sorted(fits.pooled.items()):
        if load in (0, threads):
            print(_fit_line(level, f))
    used = "" if any(busy.values()) else f" (no link measured beside {threads} busy thread(s): idle fits only)"
    print(
        f"#   a reduction that starts while backward computes is costed from the fits beside {threads} busy "
        f"thread(s) per rank (dtune-comm --load-threads {threads}), one after it from the idle ones{used}"
    )
    sharded = shard.mode != "none"
    first = p.first_bucket_mb if a.first_bucket_mb is None else a.first_bucket_mb
    if sharded:
        print("\n".join(f"#   {x}" for x in _shard_lines(shard, optimizer, weights)))
        if shard.mode == "zero3":
            print(f"#   {_pieces_line(p)}")
    print(
        f"# {'nodes':>5} {'R':>3} {'ranks':>5} {'K':>3} {'algorithm':>12} {'bucket_mb':>9} {'buckets':>7} {'cf':>5} "
        f"{'step_ms':>9} {'exposed_ms':>10} {'comm_ms':>9} {'efficiency':>10}"
        + (f" {'state_mib':>10}" if sharded else "")
    )
    for s in shapes:
        k = ranks_sharing_machine(s, m)
        cf = compute_factor(cores, threads, k)
        cs = comm_slowdown_factor(cores, threads, k)
        for b in a.bucket_mb:
            if sharded:
                r = predict_sharded(p, s, b, link[s], shard, a.first_bucket_mb, busy[s], cf, cs)
                held = _held(shard.mode, p, s.ranks, optimizer, weights, b, first, shard)
                mem = f" {held.total / MIB:10.3f}"
            else:
                r = predict(p, s, b, link[s], a.first_bucket_mb, busy_fits=busy[s], compute_scale=cf, comm_slowdown=cs)
                mem = ""
            print(
                f"  {s.nodes:5d} {s.ranks_per_node:3d} {s.ranks:5d} {k:3d} {s.algorithm:>12} {b:9g} {r.buckets:7d} "
                f"{cf:5.2f} {r.step_ms:9.3f} {r.exposed_ms:10.3f} {r.comm_ms:9.3f} {r.efficiency:10.3f}{mem}"
            )
    if sharded:
        print("\n".join(_memory_table(p, shapes, a.bucket_mb, shard, optimizer, weights, first)))
    return 0


def cmd_check(a) -> int:
    """Predicted against measured for every multi-rank run in the files."""
    from .model_check import check, format_check

    try:
        rows, notes = check(a.files, a.profile)
    except (OSError, ValueError, KeyError) as e:
        return _fail(str(e).splitlines()[0])
    print(format_check(rows, notes, a.profile))
    return 0


def cmd_project(a) -> int:
    """The model on a published cluster's links, with the assumptions printed."""
    from .model_inputs import one_profile
    from .projection import compute_scale, format_projection, project

    defaults(a)
    bad = check_assumptions(a)
    if bad:
        return _fail(bad)
    try:
        prof = one_profile(a.files, a.run)
        sharding = _shard(a, prof.profile.meta)
        if isinstance(sharding, str):
            return _fail(sharding)
        if a.cluster not in CLUSTERS:
            return _fail(f"--cluster {a.cluster}: one of {', '.join(sorted(CLUSTERS))}")
        cluster = CLUSTERS[a.cluster]
        scale = a.compute_scale
        if scale is None:
            scale = compute_scale(prof.profile, a.peak_tflops or cluster.peak_tflops, a.mfu, a.batch_scale)
    except (OSError, ValueError, KeyError) as e:
        return _fail(str(e).splitlines()[0])
    shard, optimizer, weights = sharding
    pr = project(
        prof.profile,
        cluster,
        a.nodes,
        a.bucket_mb,
        scale,
        a.alpha_intra_us,
        a.alpha_inter_us,
        a.nics,
        a.algorithm,
        None if shard.mode == "none" else shard,
    )
    if shard.mode != "none":
        pr.assumptions += _shard_lines(shard, optimizer, weights)
    if a.compute_scale is None:
        pr.assumptions.append(
            f"compute scale: the profile's training FLOPs per step x batch-scale {a.batch_scale:g} at MFU {a.mfu:g} "
            f"of {a.peak_tflops or cluster.peak_tflops:g} TFLOP/s"
        )
    print(format_projection(pr))
    return 0


def defaults(a) -> None:
    """Fill the list defaults that depend on the subcommand."""
    if a.cmd == "project":
        a.nodes = a.nodes or DEFAULT_NODES
        a.bucket_mb = a.bucket_mb or DEFAULT_BUCKETS_MB
    elif a.cmd == "predict":
        a.nodes = a.nodes or [1]
        a.bucket_mb = a.bucket_mb or [1, 5, 25]


def cmd_plan(a) -> int:
    """Every layout of a transformer on a published cluster, ranked (layouts.py)."""
    import os

    from .layouts import Machine, PlanError, Run, format_plans, layouts, load_shape, plan
    from .projection import link_fits

    c = CLUSTERS[a.cluster]
    for flag, v in (
        ("--nodes", a.nodes),
        ("--global-batch", a.global_batch),
        ("--micro-batch", a.micro_batch),
        ("--top", a.top),
    ):
        if v < 1:
            return _fail(f"{flag} {v}: give a positive number")
    if not 0 < a.mfu <= 1:
        return _fail(f"--mfu {a.mfu:g}: give a fraction in (0, 1]")
    if a.memory_gb is not None and not 0 < a.memory_gb < float("inf"):
        return _fail(f"--memory-gb {a.memory_gb:g}: give a positive size")
    for flag, v in (("--alpha-intra-us", a.alpha_intra_us), ("--alpha-inter-us", a.alpha_inter_us)):
        if not 0 <= v < float("inf"):
            return _fail(f"{flag} {v:g}: give a latency of 0 or more microseconds")
    bin_dir = Path(os.environ.get("DTUNE_BIN_DIR", Path(__file__).resolve().parents[2] / "build" / "bin"))
    try:
        shape = load_shape(a.model, bin_dir, a.context, a.layers, a.vocab)
    except PlanError as e:
        return _fail(str(e))
    machine = Machine(
        a.nodes,
        c.gpus_per_node,
        link_fits(c, a.alpha_intra_us, a.alpha_inter_us, c.nics_per_node),
        c.peak_tflops * 1e12 * a.mfu,
        (a.memory_gb or c.memory_gb) * 1e9,
        c.peak_tflops * 1e12,
    )
    run = Run(a.global_batch, a.micro_batch, a.precision, a.weights_dtype, a.optimizer)
    found, refused = layouts(shape, machine.ranks, run, a.tp, a.pp, a.shard, a.activation_checkpoint)
    if not found:
        why = "; ".join(f"{w}: {r}" for w, r in refused) or "no choices"
        return _fail(f"no layout of {machine.ranks} ranks from --tp {a.tp} --pp {a.pp}: {why}")
    plans = [plan(shape, lo, run, machine) for lo in found]
    if not any(p.fits for p in plans):
        least = min(plans, key=lambda p: p.memory_bytes)
        return _fail(
            f"no layout fits in {machine.memory_bytes / 1e9:g} GB a GPU: the smallest, {least.layout.label()}, needs "
            f"{least.memory_bytes / 1e9:.3g} GB; give more --nodes, a larger --tp or --pp, --activation-checkpoint "
            "full, a smaller --micro-batch or --context"
        )
    print(format_plans(shape, machine, run, plans, refused, a.top))
    return 0


def run(a) -> int:
    """The subcommand `a.cmd` (predict, check, project, plan) of `dtune model`."""
    return {"predict": cmd_predict, "check": cmd_check, "project": cmd_project, "plan": cmd_plan}[a.cmd](a)
