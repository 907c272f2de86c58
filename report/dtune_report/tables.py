"""The report's tables and recommendations: the best configuration per model and launch shape,
the settings to paste into a job (flags and an environment block), and, for NCCL sweeps, the
winning algorithm and protocol per message-size range as an nccl_tuner.conf for NCCL's example
tuner plugin (columns: collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,
nRanks,numPipeOps,regBuff; -1 is a wildcard)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

TUNER_COLUMNS = ["collective_type", "min_bytes", "max_bytes", "algorithm", "protocol", "channels",
                 "nNodes", "nRanks", "numPipeOps", "regBuff"]
NCCL_COLLECTIVE = {"allreduce": "allreduce", "allgather": "allgather", "reduce_scatter": "reducescatter",
                   "broadcast": "broadcast", "reduce": "reduce"}


def point_env(train_or_comm_row) -> dict:
    p = train_or_comm_row.get("point") if hasattr(train_or_comm_row, "get") else None
    return json.loads(p).get("env", {}) if isinstance(p, str) and p else {}


def best_training(train: pd.DataFrame, peaks: pd.DataFrame | None = None) -> pd.DataFrame:
    if train.empty or "samples_per_s" not in train:
        return pd.DataFrame()
    ok = train[train.status == "ok"]
    if peaks is not None and not peaks.empty:
        ok = ok.merge(peaks[["file", "run", "peak_memory_mib"]], on=["file", "run"], how="left")
    idx = ok.groupby(["model", "world_size"]).samples_per_s.idxmax()
    cols = ["model", "world_size", "batch", "precision", "bucket_mb", "overlap", "samples_per_s", "mfu",
            "peak_source", "step_time_p50_ms", "peak_memory_mib"]
    best = ok.loc[idx]
    return best[[c for c in cols if c in best]].reset_index(drop=True)


def recommended_flags(row) -> str:
    flags = [f"--model {row.model}", f"--batch {int(row.batch)}", f"--precision {row.precision}"]
    for attr, flag in (("accum_steps", "--accum-steps"), ("bucket_mb", "--bucket-mb"),
                       ("first_bucket_mb", "--first-bucket-mb"), ("overlap", "--overlap"),
                       ("compression", "--compression"), ("optimizer", "--optimizer")):
        if attr in row and pd.notna(row[attr]):
            v = row[attr]
            flags.append(f"{flag} {v:g}" if isinstance(v, float) else f"{flag} {v}")
    if "data" in row and isinstance(row["data"], str) and row["data"] != "synthetic":
        flags.append(f"--data {row['data']}")
        for attr, flag in (("workers", "--workers"), ("prefetch", "--prefetch")):
            if attr in row and pd.notna(row[attr]):
                flags.append(f"{flag} {int(row[attr])}")
        if isinstance(row.get("cache_dir"), str) and row["cache_dir"]:
            flags.append(f"--cache-dir {row['cache_dir']}")
    return " ".join(flags)


def recommendations(train: pd.DataFrame) -> list[dict]:
    """Per model and launch shape: the fastest run's flags and environment."""
    out = []
    if train.empty:
        return out
    ok = train[train.status == "ok"]
    for _, i in ok.groupby(["model", "world_size"]).samples_per_s.idxmax().items():
        row = ok.loc[i]
        env = point_env(row)
        out.append({"model": row.model, "ranks": int(row.world_size), "samples_per_s": float(row.samples_per_s),
                    "flags": recommended_flags(row),
                    "env": "\n".join(f"export {k}={v}" for k, v in sorted(env.items()))})
    return out


def nccl_tuner_conf(comm: pd.DataFrame, settings: pd.DataFrame) -> str | None:
    """From comm runs that set NCCL_ALGO and NCCL_PROTO (a sweep): per collective, the winner at
    each measured size by bus bandwidth, merged into contiguous size ranges covering the measured
    range without gaps. None when no run carries both variables."""
    if comm.empty or settings.empty:
        return None
    d = comm[comm.placement == "out-of-place"].merge(settings, on=["file", "run"])
    d = d[d.algo.notna() & d.proto.notna()]
    if d.empty:
        return None
    lines = [",".join(TUNER_COLUMNS)]
    for coll, g in d.groupby("collective"):
        if coll not in NCCL_COLLECTIVE:
            continue
        nranks = int(g.world_size.max())
        winners = g.loc[g.groupby("size_bytes").busbw_gbps.idxmax()].sort_values("size_bytes")
        start, prev = 0, None
        sizes = list(winners.size_bytes)
        for k, (_, w) in enumerate(winners.iterrows()):
            key = (w.algo.lower(), w.proto.lower())
            last = k == len(sizes) - 1
            nxt = None if last else winners.iloc[k + 1]
            if last or (nxt.algo.lower(), nxt.proto.lower()) != key:
                lines.append(",".join(map(str, [NCCL_COLLECTIVE[coll], start, int(w.size_bytes), key[0], key[1],
                                                -1, -1, nranks, -1, -1])))
                start = int(w.size_bytes) + 1
            prev = key
    return "\n".join(lines) + "\n" if len(lines) > 1 else None


def markdown_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "(none)\n"
    fmt = lambda v: f"{v:.4g}" if isinstance(v, (float, np.floating)) else str(v)  # noqa: E731
    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"
