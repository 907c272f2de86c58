"""`dtune model check`: the scaling model against measurement. Every multi-rank dtune-train run in
the files (status ok, per-step sync: no local SGD) is predicted from the 1-rank profile in the files
that matches it on every setting but the launch shape and the gradient synchronisation
(model_inputs.SYNC_KEYS), with the link fits of the comm runs in the files, at the run's own shape
(nodes from its recorded hosts), bucket sizes, overlap, compression and shard mode (a --shard
zero1|zero2 run against sharding.predict_sharded: its buckets reduce-scattered for zero2, the
parameter all-gather after the step for both; a zero3 run with its own units, prefetch and
resharding, model_inputs.run_shard; the table's `shard` column). A run whose mesh has pipeline
stages (or tensor parallelism) is named under the table and left out: the model is of data
parallelism.

Where the files hold several matching profiles (model_check.sh measures one between every few
multi-rank runs, since the machine drifts), a run is predicted from the one measured nearest in
time to it (provenance start and end times; `--profile nearest`, the default) or from all of them
pooled (`--profile pooled`: the median over all their steps); the table names the profile used and
how far from the run it was measured, and the summary gives the median error both ways.

On CPU ranks, the prediction stretches the profile's compute by scaling_model.compute_factor (the
machine's cores from the profile's provenance, the run's threads per rank, the run's ranks that
share one machine: counted per boot id, so 2 simulated nodes × 2 ranks on one machine are 4
ranks on its cores; per host in files without boot ids), slows backward further while a reduction
is in flight by scaling_model.comm_slowdown_factor (column cs) and advances a reduction at the
rate of the link measured beside as many busy threads per rank (dtune-comm --load-threads) while
backward computes, where the files hold such runs, at the idle link's after; the table says which
(cf, links).

Measured step time: the median over measured steps of the slowest rank's total (as the report and
`dtune compare` count a step). Error: predicted / measured − 1; the summary is the median of its
absolute value over runs. A second prediction, `fwd-scaled`, multiplies the profile's compute by
the run's median forward time over the profile's (forward has no communication in it): it tells
the error of the communication model from that of compute that slowed down beside other ranks
(ranks sharing cores, memory bandwidth); it uses a measurement of the run, so it is a diagnosis,
not a prediction.

Scaling at equal global batch: runs with the same settings and world size on different launch
shapes (2 nodes × 2 ranks against 1 node × 4 ranks) are set side by side, measured and predicted
efficiency (the profile's step over the run's) and the step-time ratio between the shapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .loader import load_runs, open_results
from .mesh import mesh_of, mesh_text
from .model_assumptions import SHARD_ASSUMPTIONS
from .model_inputs import (
    ModelInputError,
    load_link_fits,
    load_profiles,
    measured_steps,
    nearest_profile,
    pooled_profile,
    ranks_per_machine,
    run_midpoint,
    run_shard,
    shard_label,
    sync_free_identity,
    train_shape,
)
from .scaling_model import Prediction, comm_slowdown_factor, compute_factor
from .sharding import predict_sharded
from .units import fmt_sig

PROFILE_CHOICES = ("nearest", "pooled")


@dataclass
class CheckRow:
    file: str
    run: str
    label: str
    shape: object
    bucket_mb: float
    measured_ms: float
    measured_exposed_ms: float
    measured_efficiency: float
    predicted: Prediction
    fwd_scaled: Prediction
    profile_run: str
    cores: int  # the profiled node's cores (0: unknown)
    threads: int  # intra-op threads per rank
    busy_fits: bool  # reductions during backward costed from links measured beside busy threads
    links: tuple = ()  # the fits used, as printed: "intra: α = .. µs, 1/β = .. GB/s (source)"
    sharing: int = 0  # the most ranks on one machine (compute_factor's R)
    sharing_by: str = "node"  # what was counted: "machine" (boot ids) or "node" (host names)
    profile_note: str = ""  # which profile, and its distance in time from the run
    other: Prediction | None = None  # the prediction from the other profile choice
    world_size: int = 0
    comm_slowdown: float = 1.0  # backward's compute slowdown while a reduction is in flight
    identity: tuple = ()  # the run's settings less the launch shape (for the scaling comparison)
    shard: str = "none"  # dtune-train --shard: the mode predicted (sharding.MODES)
    shard_setting: str = ""  # the shard column: the mode with zero3's unit, prefetch, resharding

    @property
    def error(self) -> float:
        return self.predicted.step_ms / self.measured_ms - 1

    @property
    def fwd_error(self) -> float:
        return self.fwd_scaled.step_ms / self.measured_ms - 1

    @property
    def other_error(self) -> float:
        return self.other.step_ms / self.measured_ms - 1 if self.other is not None else float("nan")


def _measured(file: str, run: str) -> tuple:
    """(median slowest-rank step ms, median mean-over-ranks exposed ms, median forward ms)."""
    with open_results(Path(file)) as f:
        g = f["runs"][run]
        steps = measured_steps(g)
        total = g["total_ms"][()][steps].max(axis=1)
        exposed = g["comm_exposed_ms"][()][steps].mean(axis=1)
        forward = g["forward_ms"][()][steps].mean(axis=1)
    return float(np.median(total)), float(np.median(exposed)), float(np.median(forward))


def _profile_forward_ms(runs: list) -> float:
    """The median forward ms over every measured step of the profile runs."""
    parts = []
    for p in runs:
        with open_results(Path(p.file)) as f:
            g = f["runs"][p.run]
            parts.append(g["forward_ms"][()][measured_steps(g), 0])
    return float(np.median(np.concatenate(parts)))


def _link_line(level: str, f) -> str:
    bw = 1e-9 / f.beta_s_per_byte if f.beta_s_per_byte > 0 else float("inf")
    return f"{level}: α = {f.alpha_s * 1e6:.3g} µs per ring step, 1/β = {bw:.3g} GB/s ({f.source})"


def _choose(match: list, when, choice: str) -> tuple:
    """(Profile, the profile runs behind it, note for the table) for one profile choice."""
    if choice == "pooled" and len(match) > 1:
        return pooled_profile(match), match, f"pooled {len(match)}"
    p = nearest_profile(match, when)
    dt = f" {(p.when - when).total_seconds():+.0f}s" if p.when is not None and when is not None else ""
    return p.profile, [p], f"{Path(p.file).stem}{dt}"


def check(paths, profile: str = "nearest") -> tuple:
    """(rows, notes): one CheckRow per multi-rank run that has a matching profile; notes name the
    runs left out and why. `profile`: which of several matching profiles predicts a run, the one
    measured nearest in time ("nearest") or all of them pooled ("pooled"). ModelInputError when no
    run can be checked."""
    if profile not in PROFILE_CHOICES:
        raise ModelInputError(f"--profile {profile}: one of {', '.join(PROFILE_CHOICES)}")
    profiles = load_profiles(paths)
    fits = load_link_fits(paths)
    runs = load_runs(paths)
    rows, notes = [], list(fits.notes)
    for r in runs[runs.benchmark == "train"].itertuples(index=False):
        a = r.attrs
        if a.get("status") != "ok" or int(a.get("world_size", 1)) < 2:
            continue
        name = f"{Path(r.file).name}:{r.run}"
        if int(a.get("local_sgd_every", 0)) != 0:
            notes.append(f"{name}: local SGD, not modelled")
            continue
        mesh = mesh_of(a, r.world_size)  # its mesh_* attributes, or an older file's pipeline_stages
        if mesh.pp != 1 or mesh.tp != 1:
            notes.append(f"{name}: mesh {mesh_text(mesh)}, not modelled (data parallelism only)")
            continue
        try:
            shard = run_shard(r.file, r.run, a)  # the run's own mode, zero3 units, prefetch, resharding
        except ModelInputError as e:
            notes.append(f"{name}: {e}")
            continue
        row = r._asdict()
        ident = sync_free_identity(row)
        match = [p for p in profiles if p.identity == ident]
        if not match:
            notes.append(f"{name}: no 1-rank profile with the same settings")
            continue
        try:
            shape = train_shape(row)
            link = fits.for_shape(shape)
        except ModelInputError as e:
            notes.append(f"{name}: {e}")
            continue
        overlap = str(a.get("overlap", "on")) == "on"
        step_ms, exposed_ms, forward_ms = _measured(r.file, r.run)
        kw = dict(first_bucket_mb=float(a.get("first_bucket_mb", 1.0)), overlap=overlap)
        ref = match[0]  # cores and threads: the same in every match (the identity holds threads)
        threads = int(a.get("threads", ref.threads) or 1)
        world = int(a.get("world_size", shape.ranks))
        sharing, sharing_by = ranks_per_machine(list(r.hosts or []), list(r.boot_ids or []), world)
        factor = compute_factor(ref.cores, threads, sharing, ref.threads)
        kw["comm_slowdown"] = comm_slowdown_factor(ref.cores, threads, sharing)
        busy = fits.busy_for_shape(shape, threads)
        bucket = float(a.get("bucket_mb", 25.0))
        when = run_midpoint(row)
        preds = {}
        for choice in PROFILE_CHOICES:
            prof, used, note = _choose(match, when, choice)
            pred = predict_sharded(prof, shape, bucket, link, shard, busy_fits=busy, compute_scale=factor, **kw)
            preds[choice] = (pred, prof, used, note)
        pred, prof, used, note = preds[profile]
        other = preds["pooled" if profile == "nearest" else "nearest"][0]
        prof_forward = _profile_forward_ms(used)
        scaled = prof.scaled(forward_ms / prof_forward) if prof_forward > 0 else prof
        fwd = predict_sharded(scaled, shape, bucket, link, shard, busy_fits=busy, **kw)
        rows.append(
            CheckRow(
                r.file,
                r.run,
                f"{a.get('model')} b{a.get('batch')}",
                shape,
                bucket,
                step_ms,
                exposed_ms,
                pred.base_step_ms / step_ms,
                pred,
                fwd,
                used[0].run,
                ref.cores,
                threads,
                busy is not None,
                tuple(_link_line(lv, f) for d in (link, busy or {}) for lv, f in d.items()),
                sharing,
                sharing_by,
                note,
                other,
                world,
                kw["comm_slowdown"],
                tuple(sorted(ident.items())),
                shard.mode,
                shard_label(shard, a),
            )
        )
    if not rows:
        raise ModelInputError(
            "no multi-rank dtune-train run with a matching 1-rank profile to check"
            + (f": {'; '.join(notes[:3])}" if notes else "")
        )
    return rows, notes


def format_check(rows: list, notes: list, profile: str = "nearest") -> str:
    """The check as a `#`-commented table: one line per run, then the median absolute errors, then
    the scaling comparison at equal global batch."""
    sw = max([5, *(len(c.shard_setting or c.shard) for c in rows)])  # zero3:UNIT,pN,on|off
    head = (
        f"# {'file:run':<30} {'model':<14} {'nodes x R':>9} {'R/C':>7} {'T':>2} {'bucket':>6} {'shard':>{sw}} "
        f"{'cf':>5} {'cs':>4} "
        f"{'links':>5} "
        f"{'profile':<22} {'meas_ms':>8} {'pred_ms':>8} {'err':>7} {'fwd_err':>7} {'exp_meas':>8} {'exp_pred':>8} "
        f"{'eff_meas':>8} {'eff_pred':>8}"
    )
    lines = [
        "# Assumed: compute x cf = max(1, R·T/C) / max(1, T/C): R ranks x T threads share C cores fairly",
        "#   (C from the profile's provenance topology; R/C: the most ranks on one machine, 'm' counted by",
        "#   kernel boot id, simulated nodes together, 'n' per host where the files have no boot ids).",
        "#   While a reduction is in flight during backward, each rank's polling communication thread is one more",
        "#   thread on the cores: backward computes max(1, R·(T+1)/C) / max(1, R·T/C) times slower (cs).",
        "#   links 'busy': a reduction advances at the rate of the link measured beside T busy threads per",
        "#   rank (dtune-comm --load-threads T) while backward computes, at the idle-core link's after it;",
        "#   'idle': idle-core fits only (none measured beside T threads).",
        "#   profile: "
        + (
            "the 1-rank profile measured nearest in time (its file; its midpoint minus the run's)."
            if profile == "nearest"
            else "every matching 1-rank profile pooled (the median over all their steps)."
        ),
    ]
    if any(c.shard != "none" for c in rows):
        lines += [f"#   sharded runs: {x}" for x in SHARD_ASSUMPTIONS[:2]]
    if any(c.shard == "zero3" for c in rows):
        lines += [
            f"#   sharded runs: {SHARD_ASSUMPTIONS[2]}",
            "#   shard zero3:UNIT,pN,on|off: each run modelled with its own --shard-unit (block: the units it",
            "#   recorded, bucket_bytes), --shard-prefetch N and --reshard-after-forward",
        ]
    lines.append(head)

    for c in rows:
        rc = f"{c.sharing}{c.sharing_by[0]}/{c.cores or '?'}"
        lines.append(
            f"  {(Path(c.file).name + ':' + c.run.split('-')[0])[-30:]:<30} {c.label[:14]:<14} "
            f"{f'{c.shape.nodes} x {c.shape.ranks_per_node}':>9} {rc:>7} {c.threads:>2} "
            f"{fmt_sig(c.bucket_mb):>6} {c.shard_setting or c.shard:>{sw}} "
            f"{c.predicted.compute_factor:5.2f} {c.comm_slowdown:4.2g} "
            f"{'busy' if c.busy_fits else 'idle':>5} "
            f"{c.profile_note[-22:]:<22} {c.measured_ms:8.2f} {c.predicted.step_ms:8.2f} {100 * c.error:+6.1f}% "
            f"{100 * c.fwd_error:+6.1f}% {c.measured_exposed_ms:8.2f} "
            f"{c.predicted.exposed_ms:8.2f} {c.measured_efficiency:8.3f} {c.predicted.efficiency:8.3f}"
        )
    err = np.median([abs(c.error) for c in rows])
    fwd = np.median([abs(c.fwd_error) for c in rows])
    other = "pooled" if profile == "nearest" else "nearest"
    alt = np.median([abs(c.other_error) for c in rows])
    lines.append(
        f"# median |error| of the predicted step time over {len(rows)} runs: {100 * err:.1f}% "
        f"(profile {profile}; with the profiles {other}: {100 * alt:.1f}%; fwd-scaled compute: {100 * fwd:.1f}%)"
    )
    for nodes in sorted({c.shape.nodes for c in rows}):
        sub = [abs(c.error) for c in rows if c.shape.nodes == nodes]
        lines.append(f"#   {nodes} node{'s' if nodes > 1 else ''}: {100 * np.median(sub):.1f}% over {len(sub)} runs")
    lines += [f"# link used: {x}" for x in sorted({x for c in rows for x in c.links})]
    lines += [f"# not checked: {n}" for n in notes]
    scaling = format_scaling(rows)
    if scaling:
        lines += ["", scaling]
    return "\n".join(lines)


def scaling_pairs(rows: list) -> list:
    """[(rows of one configuration and world size, each on another launch shape)]: runs with the
    same settings, bucket size, reduction algorithm, shard mode (zero3's units, prefetch and resharding
    included) and world size (so the same global batch) on
    different node counts, e.g. 2 nodes x 2 ranks and 1 node x 4 ranks; sorted by node count."""
    groups = {}
    for c in rows:
        key = (c.identity, c.bucket_mb, c.world_size, c.shape.algorithm, c.shard, c.shard_setting)
        groups.setdefault(key, []).append(c)
    out = []
    for g in groups.values():
        if len({c.shape.nodes for c in g}) > 1:
            out.append(sorted(g, key=lambda c: (c.shape.nodes, c.run)))
    return sorted(out, key=lambda g: (g[0].label, g[0].world_size, g[0].bucket_mb))


def format_scaling(rows: list) -> str:
    """The scaling comparison at equal global batch ('' when no pair of shapes is in the rows):
    per configuration, each shape's measured and predicted efficiency, and the step-time ratio of
    each shape to the one with the fewest nodes, measured and predicted."""
    pairs = scaling_pairs(rows)
    if not pairs:
        return ""
    lines = [
        "# Scaling at equal global batch (same settings and world size, other launch shapes): efficiency =",
        "#   the 1-rank profile's step / the run's step (weak scaling per rank); ratio = the run's step / the",
        "#   step of the same configuration on the fewest nodes, measured and predicted.",
        f"# {'model':<14} {'ranks':>5} {'bucket':>6} {'nodes x R':>9} {'meas_ms':>8} {'pred_ms':>8} "
        f"{'eff_meas':>8} {'eff_pred':>8} {'ratio_meas':>10} {'ratio_pred':>10}",
    ]
    for g in pairs:
        base = g[0]
        for c in g:
            lines.append(
                f"  {c.label[:14]:<14} {c.world_size:5d} {fmt_sig(c.bucket_mb):>6} "
                f"{f'{c.shape.nodes} x {c.shape.ranks_per_node}':>9} {c.measured_ms:8.2f} {c.predicted.step_ms:8.2f} "
                f"{c.measured_efficiency:8.3f} {c.predicted.efficiency:8.3f} "
                f"{c.measured_ms / base.measured_ms:10.3f} {c.predicted.step_ms / base.predicted.step_ms:10.3f}"
            )
    return "\n".join(lines)
