"""The report's figures (matplotlib, Agg). Each function returns a PNG path, or None when the data
lacks the figure's axes (the report then leaves it out). Values come from the files as written:
busbw, MFU and throughput are never recomputed here."""

from __future__ import annotations

import json
import math

import h5py
import matplotlib

matplotlib.use("Agg")
# Labels carry recorded values (models, settings, environment values): a `$` in one is text, not
# the start of mathtext (which would fail on `$(...)` pairs or draw them as formulas).
matplotlib.rcParams["text.parse_math"] = False
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .loader import expand_paths  # noqa: E402
from .redact import recordable_point  # noqa: E402
from .units import fmt_bytes, fmt_mib, fmt_sig  # noqa: E402

PHASES = ["data_ms", "h2d_ms", "forward_ms", "backward_ms", "comm_exposed_ms", "optimizer_ms", "scaler_ms"]


# Precisions in the order a user tries them: the default first, then the lower ones.
_PRECISION_ORDER = ["fp32", "tf32", "bf16", "fp16"]


def sort_value(v):
    """Axis values in a reader's order: numbers by value, precisions fp32 first, other text."""
    if v in _PRECISION_ORDER:
        return (0, _PRECISION_ORDER.index(v), "")
    try:
        return (0, float(v), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(v))


class PowerOfFourLocator(matplotlib.ticker.Locator):
    """Ticks at powers of 4 (every 4^stride, aligned to 4^0), at most `max_ticks` of them: a sweep
    from 8 B to 1 GiB has 14 powers of 4, whose labels ("16 B 64 B 256 B1 KiB...") would overlap,
    so it gets 64 B, 4 KiB, 256 KiB, 16 MiB, 1 GiB instead; a view holding fewer than two powers of
    4 gets powers of 2."""

    def __init__(self, max_ticks: int = 6):
        self.max_ticks = max_ticks

    def __call__(self):
        lo, hi = self.axis.get_view_interval()
        return self.tick_values(lo, hi)

    def tick_values(self, vmin, vmax):
        lo, hi = sorted((vmin, vmax))
        if not hi > 0:
            return []
        lo = max(lo, hi * 1e-30)
        # Powers of 4; in a view too narrow for two of them, powers of 2.
        for base in (4, 2):
            e0 = math.ceil(math.log(lo, base) - 1e-9)
            e1 = math.floor(math.log(hi, base) + 1e-9)
            if e1 > e0 or base == 2:
                break
        stride = max(1, math.ceil((e1 - e0 + 1) / self.max_ticks))
        first = math.ceil(e0 / stride) * stride
        return [float(base) ** e for e in range(first, e1 + 1, stride)]


def _bytes_axis(ax, axis="x"):
    """Ticks of a log2 size axis as B/KiB/MiB/GiB at powers of 4, never 4x10^0, thinned so that the
    labels never overlap (PowerOfFourLocator: at most 6 per axis)."""
    fmt = matplotlib.ticker.FuncFormatter(lambda v, _: fmt_bytes(v) if v > 0 else "")
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(PowerOfFourLocator())
    target.set_major_formatter(fmt)
    target.set_minor_locator(matplotlib.ticker.LogLocator(base=4, subs=(1.0,)))
    target.set_minor_formatter(matplotlib.ticker.NullFormatter())


def _plain_log_axis(ax, values):
    """A log2 x axis with a tick at each measured value, printed as a plain number."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(set(values)), [fmt_sig(v) for v in sorted(set(values))])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())


def axis_throughput(configs, axis, baseline, name, out):
    """Median samples/s with its 95% interval for configurations along one axis (categorical x,
    values as the user types them); the baseline drawn as a square."""
    if len(configs) < 2:
        return None
    from .configs import axis_value

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    x = np.arange(len(configs))
    med = np.array([c.median for c in configs])
    err = np.array([[c.median - c.low for c in configs], [c.high - c.median for c in configs]])
    ax.errorbar(x, med, yerr=err, fmt="o-", capsize=4, color="C0")
    for i, c in enumerate(configs):
        if c is baseline:
            ax.plot(i, c.median, "s", ms=10, mfc="none", color="C3", label="baseline")
    ax.set_xticks(x, [axis_value(c, axis) for c in configs])
    ax.set(xlabel=name, ylabel="samples/s (median, 95% interval)", title=f"Throughput against {name}")
    ax.set_ylim(bottom=0)
    if any(c is baseline for c in configs):
        ax.legend(fontsize=8)
    return _save(fig, out)


def _save(fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def comm_setting(point_json: str | None, backend: str) -> str:
    """What distinguishes a dtune-comm run inside a sweep: its backend, its topology preset (unless
    `default`) and the NCCL/MPI knobs set, the preset's own variables among them, e.g.
    "mpi topology=mpi-tcp OMPI_MCA_btl=self,tcp OMPI_MCA_pml=ob1"."""
    if not point_json:
        return backend
    point = recordable_point(json.loads(point_json))
    env = point.get("env", {})
    knobs = [f"{k}={v}" for k, v in sorted(env.items()) if k.startswith(("NCCL_", "UCX_", "OMPI_MCA_"))]
    preset = (point.get("values") or {}).get("topology", "default")
    return " ".join([backend] + ([f"topology={preset}"] if preset != "default" else []) + knobs)


def comm_fits(paths) -> pd.DataFrame:
    """Per comm run: file, run, setting, busbw_factor and the α–β fit the binary stored."""
    rows = []
    for path in expand_paths(paths):
        with h5py.File(path, "r") as f:
            for name, g in f.get("runs", {}).items():
                a = g.attrs
                if a.get("benchmark") != "comm":
                    continue
                point = recordable_point(json.loads(a["point"])) if a.get("point") else {}
                env = point.get("env", {})
                world = (
                    point.get("ranks") or int(f["provenance"].attrs.get("world_size", 1))
                    if "provenance" in f
                    else point.get("ranks", 1)
                )
                rows.append(
                    {
                        "file": str(path),
                        "run": name,
                        "collective": a["collective"],
                        "setting": comm_setting(a.get("point"), a["backend"]),
                        "algo": env.get("NCCL_ALGO"),
                        "proto": env.get("NCCL_PROTO"),
                        "world_size": world,
                        "busbw_factor": float(a["busbw_factor"]),
                        "alpha_us": float(a["fit_alpha_us"]),
                        "fit_busbw_gbps": float(a["fit_busbw_gbps"]),
                        "r2": float(a.get("fit_r2", float("nan"))),
                    }
                )
    return pd.DataFrame(rows)


def busbw_vs_size(comm: pd.DataFrame, fits: pd.DataFrame, out, ceiling: pd.DataFrame | None = None):
    """busbw against size per collective, the α–β fit dashed and, where `ceiling` (ceilings.ceilings)
    has a figure for a run, that ceiling as a dotted horizontal line named by what it is."""
    if comm.empty or comm.size_bytes.nunique() < 2:
        return None
    d = comm[comm.placement == "out-of-place"].merge(
        fits[["file", "run", "setting", "alpha_us", "fit_busbw_gbps"]], on=["file", "run"]
    )
    colls = sorted(d.collective.unique())
    fig, axes = plt.subplots(1, len(colls), figsize=(5 * len(colls), 4), squeeze=False)
    for ax, c in zip(axes[0], colls):
        for (setting, _run), g in d[d.collective == c].groupby(["setting", "run"]):
            g = g.sort_values("size_bytes")
            (line,) = ax.loglog(g.size_bytes, g.busbw_gbps.clip(lower=1e-6), "o-", ms=3, label=setting)
            a, B, k = g.alpha_us.iloc[0], g.fit_busbw_gbps.iloc[0], g.busbw_factor.iloc[0]
            if np.isfinite(a) and np.isfinite(B) and B > 0:
                s = np.geomspace(g.size_bytes.min(), g.size_bytes.max(), 100)
                t_us = a + s * k / (B * 1e3)  # B in GB/s = 1e3 bytes per µs
                ax.loglog(s, s * k / t_us / 1e3, "--", color=line.get_color(), lw=1)
        _ceiling_lines(ax, d[d.collective == c], ceiling)
        ax.set(title=f"{c} (dashed: α–β fit)", xlabel="size per rank", ylabel="bus bandwidth (GB/s)")
        _bytes_axis(ax)
        # Plain numbers: with mathtext off (text.parse_math above) the default log labels print as
        # "$\mathdefault{10^{0}}$".
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: fmt_sig(v)))
        ax.legend(fontsize=7)
    return _save(fig, out)


def _ceiling_lines(ax, runs: pd.DataFrame, ceiling: pd.DataFrame | None) -> None:
    """One dotted line per distinct ceiling of the runs drawn in `ax`."""
    if ceiling is None or ceiling.empty:
        return
    mine = ceiling.merge(runs[["file", "run"]].drop_duplicates(), on=["file", "run"])
    mine = mine[np.isfinite(mine.ceiling_gbps.astype(float))]
    for (label, gbps), _ in mine.groupby(["label", "ceiling_gbps"], sort=True):
        what = label.split(",")[0]  # "host memory copy", "GPU-to-GPU copy": the note says the rest
        ax.axhline(gbps, ls=":", color="k", lw=1.2, label=f"ceiling {fmt_sig(gbps)} GB/s ({what})")


def throughput_vs_batch(train: pd.DataFrame, out):
    if train.empty or "batch" not in train or train.batch.nunique() < 2:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    ok = train[train.status == "ok"]
    for (model, prec), g in ok.groupby(["model", "precision"]):
        g = g.groupby("batch").samples_per_s.max().sort_index()
        ax.plot(g.index, g.values, "o-", label=f"{model} {prec}")
    oom = train[train.status == "oom"]
    if not oom.empty:
        ax.plot(oom.batch, np.zeros(len(oom)), "rx", ms=10, label="out of memory")
    _plain_log_axis(ax, train.batch.astype(float))
    ax.set(xlabel="batch per rank", ylabel="samples/s", title="Throughput against batch size")
    ax.legend(fontsize=7)
    return _save(fig, out)


def step_breakdown(steps: pd.DataFrame, train: pd.DataFrame, out):
    if steps.empty:
        return None
    m = steps[~steps.warmup].groupby(["file", "run"])[PHASES].mean()
    labels = [label_of(train, f, r) for f, r in m.index]
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(m) + 3), 4.5))
    bottom = np.zeros(len(m))
    for ph in PHASES:
        ax.bar(range(len(m)), m[ph].values, bottom=bottom, label=ph.replace("_ms", ""))
        bottom += m[ph].values
    ax.set_xticks(range(len(m)), labels, rotation=60, ha="right", fontsize=7)
    ax.set(ylabel="ms per step (mean over ranks and measured steps)", title="Where a step's time goes")
    ax.legend(fontsize=7)
    return _save(fig, out)


def label_of(train: pd.DataFrame, f, r) -> str:
    row = train[(train.file == f) & (train.run == r)]
    if row.empty:
        return r
    x = row.iloc[0]
    return f"{x.model} {x.precision} batch {int(x.batch)} np {int(x.world_size)} buckets {fmt_mib(x.bucket_mb)}"


def scaling(train: pd.DataFrame, out):
    ok = train[train.status == "ok"] if not train.empty else train
    if ok.empty or ok.world_size.nunique() < 2 or (ok.world_size == 1).sum() == 0:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    for (model, prec, batch), g in ok.groupby(["model", "precision", "batch"]):
        base = g[g.world_size == 1].samples_per_s.max()
        if not np.isfinite(base) or g.world_size.nunique() < 2:
            continue
        s = g.groupby("world_size").samples_per_s.max()
        ax.plot(s.index, s.values / (s.index * base), "o-", label=f"{model} {prec} batch {int(batch)}")
    _plain_log_axis(ax, ok.world_size.astype(float))
    ax.set(xlabel="ranks", ylabel="scaling efficiency", ylim=(0, 1.2), title="Scaling efficiency")
    ax.legend(fontsize=7)
    return _save(fig, out)


def heatmap(train: pd.DataFrame, out, axes=("batch", "bucket_mb")):
    ok = train[train.status == "ok"] if not train.empty else train
    x, y = axes
    if ok.empty:
        return None
    # The first model whose runs vary along both axes.
    varied = [m for m, g in ok.groupby("model") if g[x].nunique() >= 2 and g[y].nunique() >= 2]
    if not varied:
        return None
    model = varied[0]
    t = ok[ok.model == model].pivot_table(index=y, columns=x, values="samples_per_s", aggfunc="max")
    fig, ax = plt.subplots(figsize=(6, 4))
    im = ax.imshow(t.values, aspect="auto", origin="lower")
    ticks = {x: fmt_sig, y: fmt_sig, "bucket_mb": fmt_mib}
    ax.set_xticks(range(t.shape[1]), [ticks.get(x, fmt_sig)(v) for v in t.columns])
    ax.set_yticks(range(t.shape[0]), [ticks.get(y, fmt_sig)(v) for v in t.index])
    for i in range(t.shape[0]):
        for j in range(t.shape[1]):
            if np.isfinite(t.values[i, j]):
                ax.text(j, i, f"{t.values[i, j]:.0f}", ha="center", va="center", color="w", fontsize=8)
    fig.colorbar(im, label="samples/s")
    names = {"batch": "batch per rank", "bucket_mb": "gradient bucket size"}
    ax.set(
        xlabel=names.get(x, x),
        ylabel=names.get(y, y),
        title=f"{model}: samples/s over {names.get(x, x)} x {names.get(y, y)}",
    )
    return _save(fig, out)


def data_workers(train: pd.DataFrame, steps: pd.DataFrame, out):
    """Runs that read a real dataset (`data` not synthetic) over several loader worker counts:
    throughput and the data stall (time steps waited for their batch over step time, measured
    steps, all ranks) against workers, one line per model, precision, batch and cache setting."""
    if train.empty or "workers" not in train or "data" not in train or steps.empty:
        return None
    real = train[(train.status == "ok") & (train.data.fillna("synthetic") != "synthetic")]
    if real.empty or real.workers.nunique() < 2:
        return None
    m = steps[~steps.warmup].groupby(["file", "run"])[["data_ms", "total_ms"]].mean().reset_index()
    real = real.merge(m, on=["file", "run"])
    real["stall"] = 100 * real.data_ms / real.total_ms
    real["cache"] = np.where(
        real.get("cache_dir", pd.Series("", index=real.index)).fillna("") != "", "cache", "no cache"
    )
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for (model, prec, batch, cache), g in real.groupby(["model", "precision", "batch", "cache"]):
        g = g.groupby("workers")[["samples_per_s", "stall"]].mean().sort_index()
        label = f"{model} {prec} batch {int(batch)} {cache}"
        a1.plot(g.index, g.samples_per_s, "o-", label=label)
        a2.plot(g.index, g.stall, "o-", label=label)
    for a in (a1, a2):
        a.set_xticks(sorted(real.workers.unique()))
    a1.set(xlabel="loader workers per rank", ylabel="samples/s", title="Throughput against loader workers")
    a2.set(
        xlabel="loader workers per rank",
        ylabel="data stall (% of step time)",
        ylim=(0, 100),
        title="Data stall against loader workers",
    )
    a1.legend(fontsize=7)
    return _save(fig, out)


def slowest_rank_steps(steps: pd.DataFrame, train: pd.DataFrame, out):
    """Distribution of each measured step's slowest-rank time, per run (stragglers.py decides
    whether any rank is slow beyond noise)."""
    if steps.empty or steps["rank"].nunique() < 2:
        return None
    s = steps[~steps.warmup]
    worst = s.groupby(["file", "run", "step"]).total_ms.max().reset_index()
    keys = sorted({(f, r) for f, r in zip(worst.file, worst.run)}, key=lambda k: k[1])
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(keys) + 3), 4.5))
    ax.boxplot([worst[(worst.file == f) & (worst.run == r)].total_ms.values for f, r in keys])
    ax.set_xticks(
        range(1, len(keys) + 1), [label_of(train, f, r) for f, r in keys], rotation=60, ha="right", fontsize=7
    )
    ax.set(ylabel="step time of the slowest rank (ms)", title="Step-time distribution per run")
    return _save(fig, out)


def precision_side_by_side(configs, curves: dict, out):
    """Left: median samples/s with its 95% interval per precision; right: the loss per measured
    step (ranks averaged) per precision. `curves`: {precision: Series indexed by step}."""
    if len(configs) < 2:
        return None
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    x = np.arange(len(configs))
    med = np.array([c.median for c in configs])
    err = np.array([[c.median - c.low for c in configs], [c.high - c.median for c in configs]])
    a1.bar(x, med, yerr=err, capsize=4, color=[f"C{i}" for i in range(len(configs))])
    a1.set_xticks(x, [c.fields["precision"] for c in configs])
    a1.set(xlabel="precision", ylabel="samples/s (median, 95% interval)", title="Speed")
    for i, c in enumerate(configs):
        s = curves.get(c.fields["precision"])
        if s is not None and len(s):
            a2.plot(s.index, s.values, "o-", ms=3, color=f"C{i}", label=c.fields["precision"])
    a2.set(xlabel="step", ylabel="loss (ranks averaged)", title="Loss")
    a2.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    a2.legend(fontsize=8)
    return _save(fig, out)
