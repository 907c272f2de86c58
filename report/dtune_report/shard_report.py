"""The report's "Sharding" section (dtune-train --shard, ZeRO stages 1 and 2): for every model and
rank count with a sharded run, each configuration's shard modes side by side: throughput, step
time, the optimizer state and peak memory a rank holds, the bytes the parameter all-gather brings
each step, and the state against DDP's (--shard none) of the same configuration otherwise; and one
figure of peak memory against step time, one marker per shard mode.

Input: the report's configurations (configs.py: repeats pooled, `shard` one of their fields) and
their results files (results/SCHEMA.md: the `shard`, `gathered_bytes_per_step` and
`step_time_p50_ms` attributes, the per-rank `optimizer_state_bytes` and `peak_memory_bytes`).
Output: page blocks (page.py); a pandas DataFrame per table.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["text.parse_math"] = False
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .advice import SECTION_TITLES  # noqa: E402
from .configs import _axes, axis_name, axis_value  # noqa: E402
from .loader import decode_attr, expand_paths, open_results  # noqa: E402
from .units import fmt_sig  # noqa: E402

MIB = float(1 << 20)
MODES = ("none", "zero1", "zero2", "zero3")  # dtune-train --shard, in table order
COLOURS = {"none": "#4C72B0", "zero1": "#DD8452", "zero2": "#55A868", "zero3": "#C44E52"}
# Fields that are the table's own columns or rows, not what tells two configurations apart.
_NOT_SETTINGS = {"shard", "model", "np", "world_size", "machine"}


def load_shard_runs(paths) -> dict:
    """{(file, run): {shard, step_time_p50_ms, gathered_bytes_per_step, optimizer_state_bytes,
    peak_memory_bytes}} for every dtune-train run: the state as the mean over ranks, the peak as
    the largest rank's; NaN for what a file does not record (files from before --shard: no state,
    shard none, nothing gathered)."""
    out = {}
    for path in expand_paths(paths):
        with open_results(path) as f:
            for name in sorted(f.get("runs", {})):
                g = f["runs"][name]
                a = {k: decode_attr(v) for k, v in g.attrs.items()}
                if a.get("benchmark") != "train":
                    continue

                def per_rank(key, how, g=g):
                    return float(how(g[key][()])) if key in g and g[key].size else float("nan")

                out[(str(path), name)] = {
                    "shard": str(a.get("shard", "none")),
                    "step_time_p50_ms": float(a.get("step_time_p50_ms", float("nan"))),
                    "gathered_bytes_per_step": float(a.get("gathered_bytes_per_step", 0)),
                    "optimizer_state_bytes": per_rank("optimizer_state_bytes", np.mean),
                    "peak_memory_bytes": per_rank("peak_memory_bytes", np.max),
                    # Parameters + gradients + optimizer state held between steps (NaN before
                    # the resident counts were recorded).
                    "held_bytes": per_rank("param_bytes_resident", np.mean)
                    + per_rank("grad_bytes_resident", np.mean)
                    + per_rank("optimizer_state_bytes", np.mean),
                    # ... and at their peaks during the steps (NaN before the peaks were recorded):
                    # zero3's gathered units, the gradients not yet reduced.
                    "working_bytes": per_rank("param_bytes_peak", np.max)
                    + per_rank("grad_bytes_peak", np.max)
                    + per_rank("optimizer_state_bytes", np.max),
                }
    return out


def _rest(c) -> tuple:
    """A configuration's fields less its shard mode: equal for the modes of one configuration."""
    return tuple(sorted((k, v) for k, v in c.fields.items() if k != "shard"))


def _varying(cs: list) -> list:
    """The settings that tell configurations apart, one per group of fields that vary together
    (configs._axes: batch with global batch), the shard mode and the table's own keys left out."""
    axes = [[k for k in ax if k not in _NOT_SETTINGS] for ax in _axes(cs)]
    return [ax[0] for ax in axes if ax]


def _label(c, varying: list) -> str:
    return ", ".join(f"{axis_name([k])} {axis_value(c, [k])}" for k in varying) or "-"  # the mesh as one


def shard_tables(studies, runs: dict) -> list:
    """[(model, ranks, DataFrame)] for every (model, ranks) with a sharded configuration, one row
    per configuration (repeats pooled) in MODES order within each configuration: samples/s (the
    median over measured steps, as the report's tables), step_time_p50_ms (the median over
    repeats), optimizer_state_mib (mean over ranks and repeats), peak_memory_mib (the largest
    rank's, the largest repeat), gathered_mib (per step), state_vs_ddp (the state over that of
    the same configuration with --shard none; NaN without one), held_mib and held_vs_ddp (the
    parameters, gradients and state a rank holds between steps, and over DDP's), working_mib and
    working_vs_ddp (the same at their peaks during the steps, the largest rank's and repeat's: zero3's
    gathered units and the gradients not yet reduced included). A `configuration` column names
    the settings that tell configurations apart when there are several."""
    groups: dict = {}
    for s in studies:
        for c in s.configs:
            key = (str(c.fields.get("model", "?")), str(c.fields.get("np", c.fields.get("world_size", "?"))))
            groups.setdefault(key, []).append(c)
    out = []
    for (model, ranks), cs in sorted(groups.items()):
        if all(c.fields.get("shard", "none") == "none" for c in cs):
            continue
        varying = _varying(cs)
        state = {id(c): _mean(runs, c, "optimizer_state_bytes") for c in cs}
        held = {id(c): _mean(runs, c, "held_bytes") for c in cs}
        working = {id(c): max(runs[k]["working_bytes"] for k in c.runs) for c in cs}
        ddp = {_rest(c): state[id(c)] for c in cs if c.fields.get("shard", "none") == "none"}
        ddp_held = {_rest(c): held[id(c)] for c in cs if c.fields.get("shard", "none") == "none"}
        ddp_working = {_rest(c): working[id(c)] for c in cs if c.fields.get("shard", "none") == "none"}
        rank = {m: i for i, m in enumerate(MODES)}
        cs = sorted(cs, key=lambda c: (_label(c, varying), rank.get(c.fields.get("shard"), len(MODES))))
        rows = []
        for c in cs:
            base = ddp.get(_rest(c), float("nan"))
            base_held = ddp_held.get(_rest(c), float("nan"))
            base_working = ddp_working.get(_rest(c), float("nan"))
            row = {"configuration": _label(c, varying)} if varying else {}
            row.update(
                {
                    "shard": str(c.fields.get("shard", "none")),
                    "runs": len(c.runs),
                    "samples_per_s": c.median,
                    "step_time_p50_ms": float(np.median([runs[k]["step_time_p50_ms"] for k in c.runs])),
                    "optimizer_state_mib": state[id(c)] / MIB,
                    "peak_memory_mib": max(runs[k]["peak_memory_bytes"] for k in c.runs) / MIB,
                    "gathered_mib": float(np.median([runs[k]["gathered_bytes_per_step"] for k in c.runs])) / MIB,
                    "state_vs_ddp": state[id(c)] / base if base > 0 else float("nan"),
                    "held_mib": held[id(c)] / MIB,
                    "held_vs_ddp": held[id(c)] / base_held if base_held > 0 else float("nan"),
                    "working_mib": working[id(c)] / MIB,
                    "working_vs_ddp": working[id(c)] / base_working if base_working > 0 else float("nan"),
                }
            )
            rows.append(row)
        out.append((model, ranks, pd.DataFrame(rows)))
    return out


def _mean(runs: dict, c, key: str) -> float:
    return float(np.mean([runs[k][key] for k in c.runs]))


def _shown(t: pd.DataFrame) -> pd.DataFrame:
    """The table as the page prints it: significant figures, ratios as 0.50x, '-' for none."""
    out = t.copy()

    def sig(v):
        return fmt_sig(v) if v == v else "-"

    for k in (
        "samples_per_s",
        "step_time_p50_ms",
        "optimizer_state_mib",
        "peak_memory_mib",
        "gathered_mib",
        "held_mib",
        "working_mib",
    ):
        out[k] = [sig(v) for v in t[k]]
    out["runs"] = [str(v) for v in t["runs"]]
    for k in ("state_vs_ddp", "held_vs_ddp", "working_vs_ddp"):
        out[k] = [f"{fmt_sig(v)}x" if v == v else "-" for v in t[k]]
    return out.rename(
        columns={
            "samples_per_s": "samples/s",
            "step_time_p50_ms": "step time p50 (ms)",
            "optimizer_state_mib": "optimizer state (MiB)",
            "peak_memory_mib": "peak memory (MiB)",
            "gathered_mib": "gathered per step (MiB)",
            "state_vs_ddp": "state vs DDP",
            "held_mib": "params+grads+state (MiB)",
            "held_vs_ddp": "held vs DDP",
            "working_mib": "at peak (MiB)",
            "working_vs_ddp": "peak vs DDP",
        }
    )


def memory_figure(tables: list, out) -> Path | None:
    """Peak memory (MiB) against step time p50 (ms), one panel per model and ranks (the first 4),
    one marker per configuration coloured by its shard mode, the modes of one configuration joined
    by a grey line; None without a row to draw."""
    drawn = ["step_time_p50_ms", "peak_memory_mib"]
    tables = [(m, r, t) for m, r, t in tables[:4] if t[drawn].notna().all(axis=1).any()]
    if not tables:
        return None
    fig, axes = plt.subplots(1, len(tables), figsize=(4.2 * len(tables) + 0.6, 3.6), squeeze=False)
    for ax, (model, ranks, t) in zip(axes[0], tables):
        key = t["configuration"] if "configuration" in t else pd.Series(["-"] * len(t), index=t.index)
        for _, g in t.groupby(key, sort=False):
            ax.plot(g.step_time_p50_ms, g.peak_memory_mib, color="0.75", lw=1, zorder=1)
        for mode in [m for m in MODES if m in set(t["shard"])] + sorted(set(t["shard"]) - set(MODES)):
            g = t[t["shard"] == mode]
            ax.scatter(g.step_time_p50_ms, g.peak_memory_mib, color=COLOURS.get(mode, "0.3"), label=mode, zorder=2)
        ax.set(xlabel="step time p50 (ms)", ylabel="peak memory (MiB)", title=f"{model} on {ranks} rank(s)")
        ax.title.set_fontsize(9)
        ax.legend(fontsize=7, title="--shard", title_fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return Path(out)


def shard_section(studies, paths, out_dir) -> list:
    """The report's "Sharding" section: a table per model and ranks, then the figure. Empty when
    no run is sharded."""
    runs = load_shard_runs(paths)
    tables = shard_tables(studies, runs)
    if not tables:
        return []
    blocks = [("h", 2, SECTION_TITLES["sharding"], "sharding")]
    for n, (model, ranks, t) in enumerate(tables):
        blocks += [
            ("h", 3, f"{model} on {ranks} rank(s)", f"sharding-{n + 1}"),
            (
                "table",
                _shown(t),
                "Each configuration's shard modes (dtune-train --shard; repeats pooled): median samples/s over "
                "measured steps, the step time's p50 (slowest rank per step), the optimizer state and fp32 "
                "master a rank keeps between steps (mean over ranks), the largest rank's peak memory, the bytes "
                "rank 0 receives per step in the parameter all-gather, and the state over DDP's (--shard none) "
                "of the same configuration otherwise; then parameters + gradients + state held between steps "
                "and at their peaks during the steps (zero3's gathered units, gradients not yet reduced), each "
                "against DDP's. Read: zero1 and zero2 keep 1/N of the state and zero2 1/N of the gradients; "
                "zero3 also 1/N of the parameters between steps, and at its peak the units in use; each pays "
                "the all-gathers per step.",
            ),
        ]
    png = memory_figure(tables, Path(out_dir) / "sharding_memory.png")
    if png is not None:
        blocks.append(
            (
                "figure",
                "sharding_memory",
                png,
                "Peak memory per rank against step time p50, one marker per configuration and shard mode, the modes "
                "of one configuration joined. Read: a mode to the lower left saves memory at no cost in time.",
            )
        )
    return blocks
