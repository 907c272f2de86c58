"""`dtune model predict|check|project`: the scaling model's subcommands (scaling_model.py), their
arguments and printed tables. Each returns the exit status: 0 done, 2 an input the model cannot use
(one line on stderr: no profile with gradient times, no link fit for a level it needs, an
allreduce measured at one size, an assumption outside its range (model_assumptions.py), ...).

    dtune model predict PROFILE.h5 COMM.h5... [--nodes 1,2] [--ranks-per-node 2,4] [--bucket-mb 1,25]
                        [--nodes-per-machine M]   M nodes' ranks share one machine's cores (default 1)
    dtune model check RESULTS... [--profile nearest|pooled]   predicted against measured, every multi-rank run
    dtune model project PROFILE.h5 [--cluster h100-ib400] [--nodes ...] [--bucket-mb ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

from .clusters import CLUSTERS, DEFAULT_BUCKETS_MB, DEFAULT_NODES
from .model_assumptions import check_assumptions

# The model's modules (numpy, pandas, h5py) load inside each command, so that building the parser
# for `dtune --help` or `dtune sweep` stays quick.


def _fail(message: str) -> int:
    print(f"dtune model: error: {message}", file=sys.stderr)
    return 2


def _fit_line(level: str, f) -> str:
    bw = 1e-9 / f.beta_s_per_byte if f.beta_s_per_byte > 0 else float("inf")
    return f"#   {level}: α = {f.alpha_s * 1e6:.3g} µs per ring step, 1/β = {bw:.3g} GB/s ({f.source})"


def cmd_predict(a) -> int:
    """Step time, exposed communication and efficiency per shape and bucket size."""
    import numpy as np

    from .model_inputs import load_link_fits, one_profile
    from .scaling_model import Shape, comm_slowdown_factor, compute_factor, predict, ranks_sharing_machine

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
    print(
        f"# {'nodes':>5} {'R':>3} {'ranks':>5} {'K':>3} {'algorithm':>12} {'bucket_mb':>9} {'buckets':>7} {'cf':>5} "
        f"{'step_ms':>9} {'exposed_ms':>10} {'comm_ms':>9} {'efficiency':>10}"
    )
    for s in shapes:
        k = ranks_sharing_machine(s, m)
        cf = compute_factor(cores, threads, k)
        cs = comm_slowdown_factor(cores, threads, k)
        for b in a.bucket_mb:
            r = predict(p, s, b, link[s], a.first_bucket_mb, busy_fits=busy[s], compute_scale=cf, comm_slowdown=cs)
            print(
                f"  {s.nodes:5d} {s.ranks_per_node:3d} {s.ranks:5d} {k:3d} {s.algorithm:>12} {b:9g} {r.buckets:7d} "
                f"{cf:5.2f} {r.step_ms:9.3f} {r.exposed_ms:10.3f} {r.comm_ms:9.3f} {r.efficiency:10.3f}"
            )
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
        if a.cluster not in CLUSTERS:
            return _fail(f"--cluster {a.cluster}: one of {', '.join(sorted(CLUSTERS))}")
        cluster = CLUSTERS[a.cluster]
        scale = a.compute_scale
        if scale is None:
            scale = compute_scale(prof.profile, a.peak_tflops or cluster.peak_tflops, a.mfu, a.batch_scale)
    except (OSError, ValueError, KeyError) as e:
        return _fail(str(e).splitlines()[0])
    pr = project(
        prof.profile, cluster, a.nodes, a.bucket_mb, scale, a.alpha_intra_us, a.alpha_inter_us, a.nics, a.algorithm
    )
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


def run(a) -> int:
    """The subcommand `a.cmd` (predict, check, project) of `dtune model`."""
    return {"predict": cmd_predict, "check": cmd_check, "project": cmd_project}[a.cmd](a)
