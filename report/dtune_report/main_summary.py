"""The main job's summary (scripts/main.sh), read back from its merged sweep file: per collective
and Open MPI transport the busbw at the largest size, and per training configuration its
samples/s, median step time and MFU. Two printed lines never read the same but for their figures:
where the usual label (model, batch, precision, buckets, data, mesh) is shared, each line
also names every setting (identity.SETTING_ATTRS) that differs within its group, so the DDP and
ZeRO-3 runs of one global batch read `shard none` and `shard zero3`."""

from __future__ import annotations

import json
import sys

import h5py
import pandas as pd

from .identity import SETTING_ATTRS
from .loader import load_comm_summary, load_train_summary
from .mesh import mesh_of, mesh_text


def _value(v) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _label(r) -> str:
    data = "" if r.get("data", "synthetic") == "synthetic" else f", JPEG shards via {int(r.workers)} workers"
    mesh = mesh_of(dict(r))
    if mesh.pp != 1 or mesh.tp != 1:  # "dp2×pp2 (tp,pp,dp)", the pipeline's micro-batches
        data += f", mesh {mesh_text(mesh)}, {int(r.micro_batches)} micro-batches"
    elif r.get("accum_steps", 1) > 1:
        data += f", {int(r.accum_steps)} micro-batches"
    return f"{r.model:>10s} batch {int(r.batch):3d}/rank {r.precision:>4s} buckets {r.bucket_mb:5g} MiB{data}"


def train_labels(train: pd.DataFrame) -> list[str]:
    """Each row's label, with the settings that tell it apart from rows of the same label."""
    labels = [_label(r) for _, r in train.iterrows()]
    settings = [c for c in sorted(SETTING_ATTRS["train"]) if c in train.columns]
    out = list(labels)
    for label in set(labels):
        rows = [i for i, x in enumerate(labels) if x == label]
        if len(rows) < 2:
            continue
        group = train.iloc[rows]
        differ = [c for c in settings if group[c].map(_value).nunique(dropna=False) > 1]
        for i in rows:  # a setting the run did not record (shard_unit of a DDP run) is not named
            r = train.iloc[i]
            out[i] += "".join(f", {c} {_value(r[c])}" for c in differ if not pd.isna(r[c]))
    return out


def train_lines(train: pd.DataFrame) -> list[str]:
    lines = []
    for label, (_, r) in zip(train_labels(train), train.iterrows()):
        # An MFU above 100% is never printed: dtune-train rejects a peak below what the run
        # achieved (mfu_valid 0) and falls back to the next source, or to none (n/a).
        mfu = f"{r.mfu:6.1%}" if r.mfu == r.mfu and r.mfu <= 1 else "   n/a"
        if r.get("mfu_valid", 1) == 0:
            mfu += f" [a peak below the achieved rate was rejected: {str(r.mfu_rejected_peaks).split(':')[0]}]"
        lines.append(f"  {label}: {r.samples_per_s:8.1f} samples/s, step p50 {r.step_time_p50_ms:6.1f} ms, MFU {mfu}")
    return lines


def main(path: str) -> None:
    with h5py.File(path) as f:  # which MPI transport each merged run used (its sweep point's env)
        btl = {
            name: json.loads(g.attrs["point"])["env"].get("OMPI_MCA_btl", "default") for name, g in f["runs"].items()
        }
    comm = load_comm_summary(path)
    big = comm[comm.placement == "out-of-place"].sort_values("size_bytes").groupby(["run", "collective"]).tail(1)
    print(f"\nResults: {path}")
    for _, r in big.iterrows():
        size = f"{int(r.size_bytes) >> 20} MiB"
        print(f"  {r.collective:>10s} {size}, btl {btl[r.run]:<11s}: busbw {r.busbw_gbps:6.2f} GB/s")
    for line in train_lines(load_train_summary(path)):
        print(line)


if __name__ == "__main__":
    main(sys.argv[1])
