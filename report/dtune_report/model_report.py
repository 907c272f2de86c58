"""The report's scaling-model section (`dtune model`, scaling_model.py), present only when the
results hold a 1-rank profile (a dtune-train run with gradient arrival times): predicted against
measured step time for every multi-rank run that has a matching profile and the link fits it needs
(model_check.py), and a projection of the largest profiled model to a published cluster
(projection.py, compute scaled to its FLOPs at 40% of the GPU's dense peak), both
drawn with matplotlib like the other figures and each said to be what it is."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .clusters import CLUSTERS
from .figures import _plain_log_axis, _save
from .model_check import check
from .model_inputs import ModelInputError, load_profiles
from .projection import BREAK_EFFICIENCY, compute_scale, project
from .units import fmt_pct, fmt_sig

PROJECT_CLUSTER = "h100-ib400"
PROJECT_MFU = 0.4

CAPTIONS = {
    "model_vs_measured": "Step time predicted by the scaling model against measured, one point per multi-rank "
    "run (the slowest rank's median step), the dashed lines ±15%. Read: points on the diagonal are predicted "
    "well; hollow markers are the prediction with compute scaled by the run's own forward time (a diagnosis, "
    "not a prediction).",
    "projection": "PROJECTION, not a measurement: scaling efficiency against node count on 8-GPU nodes from "
    "published link figures, one line per bucket size; the dotted line is the efficiency below which scaling "
    "is called broken. Read: the highest line at a node count is the best bucket size there.",
}


def model_vs_measured(rows, out):
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    labels = sorted({r.label for r in rows})
    for i, lab in enumerate(labels):
        mine = [r for r in rows if r.label == lab]
        meas = [r.measured_ms for r in mine]
        ax.plot(meas, [r.predicted.step_ms for r in mine], "o", color=f"C{i}", label=lab)
        ax.plot(meas, [r.fwd_scaled.step_ms for r in mine], "o", mfc="none", color=f"C{i}")
    hi = max(max(r.measured_ms, r.predicted.step_ms, r.fwd_scaled.step_ms) for r in rows) * 1.1
    x = np.array([0, hi])
    ax.plot(x, x, "k-", lw=0.8)
    ax.plot(x, 1.15 * x, "k--", lw=0.6)
    ax.plot(x, 0.85 * x, "k--", lw=0.6)
    ax.set(xlim=(0, hi), ylim=(0, hi), xlabel="measured step (ms)", ylabel="predicted step (ms)")
    ax.set_title("Scaling model against measurement")
    ax.legend(fontsize=7)
    return _save(fig, out)


def projection_figure(pr, out):
    fig, ax = plt.subplots(figsize=(6, 4))
    for j, b in enumerate(pr.buckets_mb):
        ax.plot(pr.nodes, pr.efficiency[:, j], "o-", ms=3, label=f"{fmt_sig(b)} MiB")
    ax.axhline(BREAK_EFFICIENCY, color="k", ls=":", lw=0.8)
    _plain_log_axis(ax, pr.nodes)
    ax.set(xlabel="nodes", ylabel="scaling efficiency", ylim=(0, 1.05))
    ax.set_title(f"PROJECTION: {pr.cluster.name}", fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, out)


def _check_table(rows) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "run": f"{r.label}, {r.shape.nodes} x {r.shape.ranks_per_node}, {fmt_sig(r.bucket_mb)} MiB"
                + (f", {r.shard_setting or r.shard}" if r.shard != "none" else ""),
                "measured (ms)": fmt_sig(r.measured_ms),
                "predicted (ms)": fmt_sig(r.predicted.step_ms),
                "error": fmt_pct(1 + r.error),
                "exposed measured / predicted (ms)": f"{fmt_sig(r.measured_exposed_ms)} / "
                f"{fmt_sig(r.predicted.exposed_ms)}",
                "fwd-scaled error": fmt_pct(1 + r.fwd_error),
            }
            for r in rows
        ]
    )


def _projection_table(pr) -> pd.DataFrame:
    rows = []
    for i, n in enumerate(pr.nodes):
        j = pr.best(i)
        rows.append(
            {
                "nodes": str(n),
                "GPUs": str(n * pr.cluster.gpus_per_node),
                "best bucket": f"{fmt_sig(pr.buckets_mb[j])} MiB",
                "step (ms)": fmt_sig(pr.step_ms[i, j]),
                "exposed (ms)": fmt_sig(pr.exposed_ms[i, j]),
                "efficiency": fmt_sig(pr.efficiency[i, j]),
            }
        )
    return pd.DataFrame(rows)


def model_section(paths, out) -> tuple:
    """(blocks, figures {key: path}) of the section; ([], {}) when the results hold no profile."""
    profiles = load_profiles(paths)
    if not profiles:
        return [], {}
    blocks = [("h", 2, "Scaling model", "scaling-model")]
    figures = {}
    try:
        rows, notes = check(paths)
    except ModelInputError as e:
        rows, notes = [], []
        blocks.append(("p", f"No run checked against the model: {e}"))
    if rows:
        err = float(np.median([abs(r.error) for r in rows]))
        blocks.append(
            (
                "p",
                [
                    f"Predicted against measured step time over {len(rows)} multi-rank runs: median absolute "
                    f"error {100 * err:.1f}% (target 15%). Each run is predicted from the 1-rank profile with the "
                    "same settings and the α–β fits of the allreduce runs in these results; on CPU, compute is "
                    "stretched by max(1, ranks × threads / cores) (ranks counted per machine), backward more "
                    "while a reduction is in flight (the polling communication thread), and a reduction "
                    "advances at the rate the link had beside busy threads (dtune-comm --load-threads) while "
                    "backward computes, where such a run is in the results, at the idle link's after (",
                    ("code", "dtune model check"),
                    ").",
                ],
            )
        )
        caption = "One row per multi-rank run: model, nodes x ranks per node, bucket size."
        blocks.append(("table", _check_table(rows), caption))
        figures["model_vs_measured"] = model_vs_measured(rows, out / "model_vs_measured.png")
        blocks.append(("figure", "model_vs_measured", figures["model_vs_measured"], CAPTIONS["model_vs_measured"]))
        if notes:
            blocks.append(("ul", notes))
    prof = max(profiles, key=lambda p: int(p.profile.param_bytes.sum()))  # the largest model profiled
    cluster = CLUSTERS[PROJECT_CLUSTER]
    try:
        scale = compute_scale(prof.profile, cluster.peak_tflops, PROJECT_MFU, 1.0)
    except (KeyError, ValueError, ZeroDivisionError):
        return blocks, figures
    pr = project(prof.profile, cluster, scale=scale)
    pr.assumptions.append(
        f"compute scale: the profile's training FLOPs per step at MFU {PROJECT_MFU:g} of "
        f"{cluster.peak_tflops:g} TFLOP/s"
    )
    b = pr.breaks_at()
    blocks.append(
        (
            "p",
            [
                ("b", "Projection (not a measurement)"),
                f" of {prof.profile.label} to {cluster.name}: "
                + (
                    f"scaling breaks (best efficiency below {BREAK_EFFICIENCY:g}) at {b} node{'s' if b > 1 else ''}."
                    if b is not None
                    else f"scaling holds up to {pr.nodes[-1]} nodes."
                ),
                " Other clusters and assumptions: ",
                ("code", "dtune model project"),
                ".",
            ],
        )
    )
    blocks.append(("ul", pr.assumptions))
    blocks.append(("table", _projection_table(pr), "Per node count: the bucket size with the highest efficiency."))
    figures["projection"] = projection_figure(pr, out / "projection.png")
    blocks.append(("figure", "projection", figures["projection"], CAPTIONS["projection"]))
    return blocks, figures
