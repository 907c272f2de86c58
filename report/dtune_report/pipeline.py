"""Pipeline parallelism in the report: each pipeline run's timeline (stages x time, one row per rank,
forward and backward of every micro-batch coloured, the gaps the bubble), and the table "PP against
DP on the same ranks": every dtune-train run grouped by model, ranks and global batch, each with its
pipeline shape, throughput, measured bubble beside theory, and speed against the group's pure
data-parallel run.

Input: results files of dtune-train (results/SCHEMA.md, the run group's `pipeline` subgroup and the
`pipeline_stages` ... `partition` attributes). Output: a PNG per run, a pandas DataFrame for the table.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["text.parse_math"] = False
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from .loader import decode_attr, expand_paths, open_results  # noqa: E402
from .mesh import mesh_of, mesh_text  # noqa: E402

COLOURS = {0: "#4C72B0", 1: "#DD8452", 2: "#55A868"}  # forward, backward (B), W (zero-bubble)


def load_pipelines(paths) -> list[dict]:
    """One dict per pipeline run: file, run, model, schedule, stages, micro_batches, virtual_stages,
    theory_bubble, cuts, per-rank arrays (stage, dp_index, bubble, ...) and `timeline` (N, 6):
    rank, backward, micro-batch, chunk, start_ms, end_ms of the run's last step."""
    out = []
    for path in expand_paths(paths):
        with open_results(path) as f:
            for name in sorted(f.get("runs", {})):
                g = f["runs"][name]
                if decode_attr(g.attrs.get("benchmark")) != "train" or "pipeline" not in g:
                    continue
                p = g["pipeline"]
                row = {k: decode_attr(v) for k, v in g.attrs.items()}
                row.update({k: decode_attr(v) for k, v in p.attrs.items()})
                row.update({k: p[k][()] for k in p})
                row.update(file=str(path), run=name)
                out.append(row)
    return out


def timeline_figure(run: dict, out):
    """Stages x time of the run's last step: a row per rank (labelled with its stage), forward blue
    and backward orange (a zero-bubble schedule's B orange and W green), micro-batch numbers on the
    bars; white is the bubble."""
    tl = np.asarray(run["timeline"])
    if tl.size == 0:
        return None
    ranks = sorted(set(tl[:, 0].astype(int)))
    fig, ax = plt.subplots(figsize=(10, 0.55 * len(ranks) + 1.6))
    for row, r in enumerate(ranks):
        for _, bwd, micro, chunk, start, end in tl[tl[:, 0] == r]:
            ax.barh(row, end - start, left=start, color=COLOURS[int(bwd)], edgecolor="white", height=0.8)
            label = f"{int(micro)}" + (f".{int(chunk)}" if int(run.get("virtual_stages", 1)) > 1 else "")
            ax.text((start + end) / 2, row, label, ha="center", va="center", fontsize=6, color="white")
    stage, dp = np.asarray(run["stage"]), np.asarray(run["dp_index"])
    labels = [f"rank {r}: stage {stage[r]}, dp {dp[r]}" for r in ranks]
    if "planned_share" in run:  # each stage's share of the plan's cost beside its share of compute
        plan, compute = np.asarray(run["planned_share"]), np.asarray(run["forward_ms"]) + np.asarray(run["backward_ms"])
        for i, r in enumerate(ranks):
            pipeline = compute[dp == dp[r]].sum()
            measured = compute[r] / pipeline if pipeline > 0 else 0.0
            labels[i] += f"\nplan {100 * plan[r]:.0f}%, measured {100 * measured:.0f}%"
    ax.set_yticks(range(len(ranks)), labels, fontsize=7)
    ax.invert_yaxis()
    bubble = np.asarray(run["bubble"])
    ax.set(
        xlabel="ms from the step's common start",
        title=f"{run['model']}: {mesh_text(mesh_of(run))}, {run['schedule']}, "
        f"{int(run['micro_batches'])} micro-batches; measured bubble {100 * bubble.mean():.1f}% "
        f"(theory {100 * float(run['theory_bubble']):.1f}%)",
    )
    handles = [Patch(color=COLOURS[0], label="forward"), Patch(color=COLOURS[1], label="backward")]
    if (tl[:, 1] == 2).any():
        handles[1] = Patch(color=COLOURS[1], label="backward, input (B)")
        handles.append(Patch(color=COLOURS[2], label="backward, weights (W)"))
    ax.legend(handles=handles, fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def pp_against_dp(train: pd.DataFrame, pipelines: list[dict]) -> pd.DataFrame:
    """Runs grouped by (model, world_size, global_batch); only groups with a pipeline run. Columns:
    model, ranks, global_batch, layout (the mesh, mesh.py, then a pipeline's schedule and a
    sharded run's mode: "dp4", "dp2×pp2 (tp,pp,dp) 1f1b", "dp2×pp2 (tp,dp,pp) 1f1b zero1"),
    samples_per_s, step_time_p50_ms, bubble (measured mean over ranks; NaN for DP), theory_bubble,
    vs_dp (samples/s over the group's best pure-DP run)."""
    if train.empty or "pipeline_stages" not in train:
        return pd.DataFrame()
    bubbles = {(p["file"], p["run"]): (float(np.mean(p["bubble"])), float(p["theory_bubble"])) for p in pipelines}
    ok = train[train.status == "ok"].copy()
    meshes = [mesh_of(dict(x)) for _, x in ok.iterrows()]
    ok["dp_only"] = [m.pp == 1 and m.tp == 1 for m in meshes]
    ok["layout"] = [mesh_text(m) for m in meshes]
    rows = []
    for (model, ranks, gb), g in ok.groupby(["model", "world_size", "global_batch"]):
        if g.dp_only.all():
            continue
        dp_best = g[g.dp_only].samples_per_s.max()
        for _, x in g.iterrows():
            layout = x.layout if x.dp_only else f"{x.layout} {x.schedule}"
            if not x.dp_only and x.schedule == "interleaved":
                layout += f" V={int(x.virtual_stages)}"
            if not x.dp_only and str(x.get("stage_pieces", "blocks")) not in ("blocks", "nan"):
                layout += f" cut at {x.stage_pieces}"
            if str(x.get("shard", "none")) not in ("none", "nan"):
                layout += f" {x.shard}"
            b, th = bubbles.get((x.file, x.run), (np.nan, np.nan))
            rows.append(
                {
                    "model": model,
                    "ranks": int(ranks),
                    "global_batch": int(gb),
                    "layout": layout,
                    "samples_per_s": round(float(x.samples_per_s), 2),
                    "step_time_p50_ms": round(float(x.step_time_p50_ms), 1),
                    "bubble": b,
                    "theory_bubble": th,
                    "vs_dp": float(x.samples_per_s) / dp_best if dp_best == dp_best else np.nan,
                }
            )
    return pd.DataFrame(rows)


def _shown(table: pd.DataFrame) -> pd.DataFrame:
    """The table as the page prints it: fractions as percentages, ratios as 1.23x, '-' for none."""
    out = table.copy()
    for k in ("bubble", "theory_bubble"):
        out[k] = [f"{100 * v:.1f}%" if v == v else "-" for v in table[k]]
    out["vs_dp"] = [f"{v:.2f}x" if v == v else "-" for v in table["vs_dp"]]
    return out


def pipeline_blocks(paths, train: pd.DataFrame, out_dir) -> list:
    """The report's "Pipeline parallelism" section: the table, then one timeline per pipeline run
    (the first 4). Empty without pipeline runs."""
    pipes = load_pipelines(paths)
    if not pipes:
        return []
    blocks = [("h", 2, "Pipeline parallelism", "pipeline")]
    table = pp_against_dp(train, pipes)
    if not table.empty:
        blocks.append(
            (
                "table",
                _shown(table),
                "PP against DP on the same ranks and global batch: samples/s (total samples over measured time), "
                "the measured bubble (1 − compute / pipeline flush, mean over ranks) beside the schedule's theory, "
                "and throughput over the best pure data-parallel run. Read: a pipeline wins when the data-parallel "
                "gradient exchange it saves costs more than its bubble and point-to-point waits.",
            )
        )
    for i, p in enumerate(pipes[:4]):
        png = timeline_figure(p, out_dir / f"pipeline_timeline_{i}.png")
        if png is not None:
            blocks.append(
                (
                    "figure",
                    f"pipeline_timeline_{i}",
                    png,
                    f"{p['run']}: the last step of each rank, stages × time; blue forward, orange backward "
                    "(micro-batch numbers on the bars), white the bubble. Cut points: " + str(p["cuts"]),
                )
            )
    return blocks
