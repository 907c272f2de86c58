"""One configuration, one row: dtune-train runs grouped by everything that defines them
(identity.py, the same rule `dtune compare` matches on), repeats pooled, and each group's
throughput as a median with its 95% bootstrap interval (compare.py's statistics).

Configurations are then grouped into studies: the configurations of one workload (model and its
shape flags, dataset, launch shape, device, machine) that differ only in settings a user could
change (batch, precision, buckets, workers, environment, ...); those differences are the study's
axes. A sample is one measured step: global_batch / (the step's slowest-rank total), in samples/s,
warm-up and profiled steps left out (compare.train_step_samples).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .compare import bootstrap_median_ci, samples_needed, train_step_samples
from .identity import MESH_FIELDS, run_identity
from .loader import load_runs
from .mesh import fields_mesh, mesh_text
from .units import setting_name, setting_text

# Identity fields that define the workload rather than a setting to tune; with every command-line
# flag left in the identity (the model's shape: --width, --image-size, --num-classes, --context,
# --vocab, ...; the --debug-* hooks) except TUNABLE_FLAGS, the settings dtune-train does not record
# as attributes. A flag it records (--decode, --reduce-algo, --pipeline-stages, ...) is matched on
# its attribute (identity.IGNORED_FLAGS), which is a setting unless named here.
WORKLOAD_FIELDS = {
    "benchmark",
    "model",
    "parameters",
    "optimizer",
    "lr",
    "device",
    "world_size",
    "data",
    "np",
    "nodes",
    "ranks_per_node",
    "machine",
}
TUNABLE_FLAGS = {"--cache-mb", "--cache-block-mb", "--timing", "--check-every", "--strict", "--memory-limit-mb"}

# dtune-train's defaults (train/config.h), PyTorch DDP's buckets, no environment settings: the
# baseline is the configuration with fewest differences from these (batch as given).
DEFAULTS = {
    "precision": "fp32",
    "tf32": "0",
    "weights_dtype": "fp32",
    "bucket_mb": "25",
    "first_bucket_mb": "1",
    "overlap": "on",
    "compression": "none",
    "local_sgd_every": "0",
    "shard": "none",
    "reshard_after_forward": "1",
    "shard_unit": "block",
    "shard_prefetch": "1",
    "accum_steps": "1",
    "channels_last": "0",
    "workers": "2",
    "prefetch": "4",
    "decode": "roi",
    "fast_decode": "0",
    "reduce_algo": "flat",
    "mesh_pp": "1",
    "mesh_tp": "1",
    "mesh_order": "tp,pp,dp",
    "micro_batches": "1",
    "schedule": "1f1b",
    "virtual_stages": "1",
    "partition": "flops",
    "stage_pieces": "blocks",
}

# A run is too short to trust with fewer measured steps than this, or an interval wider than
# SHORT_WIDTH of its median.
SHORT_STEPS = 10
SHORT_WIDTH = 0.10


@dataclass
class Config:
    """One configuration: its identity, the runs (repeats) measured with it, and its samples."""

    fields: dict  # {identity field: value as str}
    runs: list  # [(file, run)], the repeats
    attrs: dict  # the first run's attributes (model, batch, global_batch, ...)
    point: dict | None  # the sweep point (merged files), else None
    command_line: str | None
    env: dict  # the first run's recorded environment (provenance)
    samples: np.ndarray  # samples/s, one per measured step, pooled over repeats
    median: float = float("nan")
    low: float = float("nan")
    high: float = float("nan")
    anchor: str = ""
    label: str = ""  # its axis values, set by studies()

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def short(self) -> bool:
        """Too few steps, or too wide an interval, to trust."""
        return self.n < SHORT_STEPS or (self.high - self.low) > SHORT_WIDTH * self.median


@dataclass
class Study:
    """The configurations of one workload; `axes` are the groups of fields that vary among them
    (fields that vary together, such as a zip or batch and global_batch, form one axis)."""

    workload: dict
    configs: list
    axes: list = field(default_factory=list)  # [[field, ...]]
    title: str = ""
    anchor: str = ""


def _workload(fields: dict) -> dict:
    return {k: v for k, v in fields.items() if k in WORKLOAD_FIELDS or (k.startswith("--") and k not in TUNABLE_FLAGS)}


def _value(v: str):
    try:
        return (0, float(v), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(v))


def _axes(configs: list) -> list:
    """Fields that vary among the configurations, those that vary together merged into one axis."""
    names = sorted({k for c in configs for k in c.fields})
    varying = [k for k in names if len({c.fields.get(k) for c in configs}) > 1 and k not in WORKLOAD_FIELDS]
    mesh = [k for k in MESH_FIELDS if k in varying]  # one key, shown as the mesh (axis_value)

    def column(k):
        return [tuple(c.fields.get(x) for x in (mesh if k in mesh else [k])) for c in configs]

    axes = []
    for k in (k for k in varying if k not in mesh or k == min(mesh)):
        col = column(k)
        for ax in axes:
            ref = column(ax[0])
            if len(set(zip(col, ref))) == len(set(col)) == len(set(ref)):
                ax += mesh if k in mesh else [k]
                break
        else:
            axes.append(list(mesh) if k in mesh else [k])
    # The field a user sets first: flags and attributes the user names (batch before global_batch,
    # the pipeline's stages before its micro-batches).
    order = ["batch", *MESH_FIELDS, "shard", "precision", "bucket_mb", "workers"]
    for ax in axes:
        ax.sort(key=lambda k: (order.index(k) if k in order else len(order), k))
    return axes


def _machines(runs: pd.DataFrame) -> dict:
    return {(r.file, r.run): ",".join(sorted(set(r.hosts))) if r.hosts else "" for r in runs.itertuples()}


def train_configs(paths, alpha: float = 0.05) -> list:
    """Every dtune-train configuration with measured steps in `paths`, repeats pooled."""
    runs = load_runs(paths)
    runs = runs[runs.benchmark == "train"]
    if runs.empty:
        return []
    by_point = bool(runs.point.notna().all())
    machine = _machines(runs)
    samples = train_step_samples(paths)
    per_run = {k: g.total_ms.to_numpy(float) for k, g in samples.groupby(["file", "run"])}
    groups: dict = {}
    for r in runs.itertuples(index=False):
        if r.attrs.get("status") != "ok" or (r.file, r.run) not in per_run:
            continue
        fields = run_identity(r._asdict(), by_point)
        fields["machine"] = machine[(r.file, r.run)]
        key = tuple(sorted(fields.items()))
        thr = float(r.attrs["global_batch"]) * 1e3 / per_run[(r.file, r.run)]
        if key in groups:
            c = groups[key]
            c.runs.append((r.file, r.run))
            c.samples = np.concatenate([c.samples, thr])
        else:
            groups[key] = Config(fields, [(r.file, r.run)], r.attrs, r.point, r.command_line, r.env or {}, thr)
    out = []
    for c in groups.values():
        c.median = float(np.median(c.samples))
        c.low, c.high = bootstrap_median_ci(c.samples) if c.n > 1 else (c.median, c.median)
        out.append(c)
    return out


def studies(configs: list) -> list:
    """The configurations grouped by workload, each study's axes found, sorted by model."""
    groups: dict = {}
    for c in configs:
        groups.setdefault(tuple(sorted(_workload(c.fields).items())), []).append(c)
    machines = {dict(k).get("machine") for k in groups}
    out = []
    for n, (key, cs) in enumerate(sorted(groups.items(), key=lambda kv: [_value(v) for _, v in kv[0]])):
        w = dict(key)
        cs.sort(key=lambda c: [_value(c.fields.get(k)) for k in sorted(c.fields)])
        s = Study(w, cs, _axes(cs))
        s.anchor = f"study-{n + 1}"
        s.title = study_title(s, show_machine=len(machines) > 1)
        for m, c in enumerate(cs):
            c.anchor = f"{s.anchor}-config-{m + 1}"
            c.label = ", ".join(f"{axis_name(ax)} {axis_value(c, ax)}" for ax in s.axes) or "the one configuration"
        out.append(s)
    return out


def axis_name(axis: list) -> str:
    """An axis by its first field's name: fields that vary with it (global_batch with batch, the
    first bucket with the bucket) follow from it. The mesh's fields are the axis "mesh"."""
    return "mesh" if axis[0] in MESH_FIELDS else setting_name(axis[0])


def axis_value(c: Config, axis: list) -> str:
    if axis[0] in MESH_FIELDS:  # "dp2×pp2 (tp,pp,dp)"
        return mesh_text(fields_mesh(c.fields))
    return setting_text(axis[0], c.fields.get(axis[0]))


def study_title(s: Study, show_machine: bool) -> str:
    w = s.workload
    shape = [f"{k} {v}" for k, v in sorted(w.items()) if k.startswith("--") and k not in ("--data",)]
    data = w.get("data", "synthetic")
    parts = [w.get("model", "?"), *shape]
    title = " ".join(parts) + f" on {w.get('np', w.get('world_size', '?'))} rank(s)"
    if data and data != "synthetic":
        title += f", data {data}"
    if w.get("device", "cpu") != "cpu":
        title += f", {w['device']}"
    if show_machine and w.get("machine"):
        title += f", on {w['machine']}"
    return title


def steps_to_separate(a: Config, b: Config) -> int | None:
    """Measured steps per configuration after which intervals of the present width (shrinking as
    1/sqrt(n)) would no longer overlap at the present gap; None when there is no gap to resolve."""
    gap = abs(a.median - b.median)
    if gap <= 0:
        return None
    half = max((a.high - a.low) / 2, (b.high - b.low) / 2)
    n = min(a.n, b.n)
    need = int(np.ceil(n * (2 * half / gap) ** 2)) if half > 0 else n
    return max(need, samples_needed(0.05), n + 1)
