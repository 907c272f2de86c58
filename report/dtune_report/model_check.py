"""`dtune model check`: the scaling model against measurement. Every multi-rank dtune-train run in
the files (status ok, per-step sync: no local SGD) is predicted from the 1-rank profile in the files
that matches it on every setting but the launch shape and the gradient synchronisation
(model_inputs.SYNC_KEYS), with the link fits of the comm runs in the files, at the run's own shape
(nodes from its recorded hosts), bucket sizes, overlap and compression.

On CPU ranks, the prediction stretches the profile's compute by scaling_model.compute_factor (the
node's cores from the profile's provenance, the run's threads per rank) and costs a reduction that
starts during backward from the link fits beside as many busy threads per rank (dtune-comm
--load-threads) where the files hold them; the table says which (cf, links).

Measured step time: the median over measured steps of the slowest rank's total (as the report and
`dtune compare` count a step). Error: predicted / measured − 1; the summary is the median of its
absolute value over runs. A second prediction, `fwd-scaled`, multiplies the profile's compute by
the run's median forward time over the profile's (forward has no communication in it): it tells
the error of the communication model from that of compute that slowed down beside other ranks
(ranks sharing cores, memory bandwidth); it uses a measurement of the run, so it is a diagnosis,
not a prediction.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .loader import load_runs, open_results
from .model_inputs import (
    ModelInputError,
    load_link_fits,
    load_profiles,
    measured_steps,
    sync_free_identity,
    train_shape,
)
from .scaling_model import Prediction, compute_factor, predict
from .units import fmt_sig


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

    @property
    def error(self) -> float:
        return self.predicted.step_ms / self.measured_ms - 1

    @property
    def fwd_error(self) -> float:
        return self.fwd_scaled.step_ms / self.measured_ms - 1


def _measured(file: str, run: str) -> tuple:
    """(median slowest-rank step ms, median mean-over-ranks exposed ms, median forward ms)."""
    with open_results(Path(file)) as f:
        g = f["runs"][run]
        steps = measured_steps(g)
        total = g["total_ms"][()][steps].max(axis=1)
        exposed = g["comm_exposed_ms"][()][steps].mean(axis=1)
        forward = g["forward_ms"][()][steps].mean(axis=1)
    return float(np.median(total)), float(np.median(exposed)), float(np.median(forward))


def _link_line(level: str, f) -> str:
    bw = 1e-9 / f.beta_s_per_byte if f.beta_s_per_byte > 0 else float("inf")
    return f"{level}: α = {f.alpha_s * 1e6:.3g} µs per ring step, 1/β = {bw:.3g} GB/s ({f.source})"


def check(paths) -> tuple:
    """(rows, notes): one CheckRow per multi-rank run that has a matching profile; notes name the
    runs left out and why. ModelInputError when no run can be checked."""
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
        ident = sync_free_identity(r._asdict())
        match = [p for p in profiles if p.identity == ident]
        if not match:
            notes.append(f"{name}: no 1-rank profile with the same settings")
            continue
        prof = match[0]
        try:
            shape = train_shape(r._asdict())
            link = fits.for_shape(shape)
        except ModelInputError as e:
            notes.append(f"{name}: {e}")
            continue
        overlap = str(a.get("overlap", "on")) == "on"
        step_ms, exposed_ms, forward_ms = _measured(r.file, r.run)
        kw = dict(first_bucket_mb=float(a.get("first_bucket_mb", 1.0)), overlap=overlap)
        threads = int(a.get("threads", prof.threads) or 1)
        factor = compute_factor(prof.cores, threads, shape.ranks_per_node, prof.threads)
        busy = fits.busy_for_shape(shape, threads)
        pred = predict(
            prof.profile,
            shape,
            float(a.get("bucket_mb", 25.0)),
            link,
            busy_fits=busy,
            compute_scale=factor,
            **kw,
        )
        with open_results(Path(prof.file)) as f:
            g = f["runs"][prof.run]
            prof_forward = float(np.median(g["forward_ms"][()][measured_steps(g), 0]))
        scaled = prof.profile.scaled(forward_ms / prof_forward) if prof_forward > 0 else prof.profile
        fwd = predict(scaled, shape, float(a.get("bucket_mb", 25.0)), link, busy_fits=busy, **kw)
        rows.append(
            CheckRow(
                r.file,
                r.run,
                f"{a.get('model')} b{a.get('batch')}",
                shape,
                float(a.get("bucket_mb", 25.0)),
                step_ms,
                exposed_ms,
                pred.base_step_ms / step_ms,
                pred,
                fwd,
                prof.run,
                prof.cores,
                threads,
                busy is not None,
                tuple(_link_line(lv, f) for d in (link, busy or {}) for lv, f in d.items()),
            )
        )
    if not rows:
        raise ModelInputError(
            "no multi-rank dtune-train run with a matching 1-rank profile to check"
            + (f": {'; '.join(notes[:3])}" if notes else "")
        )
    return rows, notes


def format_check(rows: list, notes: list) -> str:
    """The check as a `#`-commented table: one line per run, then the median absolute errors."""
    head = (
        f"# {'file:run':<36} {'model':<16} {'nodes x R':>9} {'T/C':>5} {'bucket':>7} {'cf':>5} {'links':>5} "
        f"{'meas_ms':>9} {'pred_ms':>9} {'err':>7} {'fwd_ms':>9} {'fwd_err':>8} {'exp_meas':>9} {'exp_pred':>9} "
        f"{'eff_meas':>8} {'eff_pred':>8}"
    )
    lines = [
        "# Assumed: compute x cf = max(1, R·T/C) / max(1, T/C): R ranks x T threads share C cores fairly",
        "#   (C from the profile's provenance topology). links 'busy': a reduction that starts while backward",
        "#   computes costs the link measured beside T busy threads per rank (dtune-comm --load-threads T), one",
        "#   after it the idle-core link; 'idle': idle-core fits only (none measured beside T threads).",
        head,
    ]

    def tc(c):
        return f"{c.threads}/{c.cores or '?'}"

    for c in rows:
        lines.append(
            f"  {(Path(c.file).name + ':' + c.run.split('-')[0])[-36:]:<36} {c.label:<16} "
            f"{f'{c.shape.nodes} x {c.shape.ranks_per_node}':>9} {tc(c):>5} "
            f"{fmt_sig(c.bucket_mb):>7} {c.predicted.compute_factor:5.2f} {'busy' if c.busy_fits else 'idle':>5} "
            f"{c.measured_ms:9.2f} {c.predicted.step_ms:9.2f} {100 * c.error:+6.1f}% "
            f"{c.fwd_scaled.step_ms:9.2f} {100 * c.fwd_error:+7.1f}% {c.measured_exposed_ms:9.2f} "
            f"{c.predicted.exposed_ms:9.2f} {c.measured_efficiency:8.3f} {c.predicted.efficiency:8.3f}"
        )
    err = np.median([abs(c.error) for c in rows])
    fwd = np.median([abs(c.fwd_error) for c in rows])
    lines.append(
        f"# median |error| of the predicted step time over {len(rows)} runs: {100 * err:.1f}% "
        f"(fwd-scaled compute: {100 * fwd:.1f}%)"
    )
    lines += [f"# link used: {x}" for x in sorted({x for c in rows for x in c.links})]
    lines += [f"# not checked: {n}" for n in notes]
    return "\n".join(lines)
