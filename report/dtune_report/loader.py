"""Load dtune's HDF5 results (results/SCHEMA.md) into pandas; every report reads through here.

h5py reads the files (pandas.read_hdf cannot: they are not PyTables files) and HDF5 strings come
back as str. Arrays are flattened with numpy, never looped over per iteration. Reports never
recompute algbw or busbw: the summary carries the values the binary wrote.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable, Union

import h5py
import numpy as np
import pandas as pd

from .redact import recordable_env, recordable_point

SCHEMA = "dtune-results"
SCHEMA_VERSION = 1  # the newest schema_version this loader understands

PathArg = Union[str, os.PathLike, Iterable[Union[str, os.PathLike]]]

_RUN_COLUMNS = [
    "file",
    "run",
    "status",
    "file_status",
    "collective",
    "backend",
    "dtype",
    "op",
    "root",
    "placement",
    "size_bytes",
    "requested_bytes",
    "count",
]
COMM_COLUMNS = _RUN_COLUMNS + ["rank", "host", "iteration", "time_us", "wrong"]
SUMMARY_COLUMNS = _RUN_COLUMNS + [
    "time_us_reported",
    "algbw_gbps",
    "busbw_gbps",
    "slowest_rank",
    "wrong",
    "busbw_factor",
]


def decode_attr(value):
    """An h5py attribute value as plain Python: bytes -> str, numpy scalars -> int/float,
    arrays -> lists, an empty (null dataspace) attribute -> None."""
    if isinstance(value, h5py.Empty):
        return None
    if isinstance(value, (bytes, np.bytes_)):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray):
        return [decode_attr(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _attrs(obj) -> dict:
    return {k: decode_attr(v) for k, v in obj.attrs.items()}


def _point(attrs: dict) -> dict | None:
    """A merged run's sweep point (its `point` attribute, JSON), secrets redacted (redact.py: a
    file merged before the manifest redacted them may still hold them); None when absent."""
    return recordable_point(json.loads(attrs["point"])) if attrs.get("point") else None


def _read(ds: h5py.Dataset) -> np.ndarray:
    """A whole dataset as a numpy array; string datasets as an array of str."""
    if h5py.check_string_dtype(ds.dtype) is not None:
        return np.asarray(ds.asstr()[()], dtype=object)
    return ds[()]


def expand_paths(paths: PathArg) -> list[Path]:
    """A path, a list of paths, or a directory (its *.h5 and *.h5.partial files, sorted)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if q.is_file() and q.name.endswith((".h5", ".h5.partial")))
            if not found:
                raise FileNotFoundError(f"{p}: no *.h5 or *.h5.partial files in this directory")
            out += found
        elif p.exists():
            out.append(p)
        else:
            raise FileNotFoundError(f"{p}: no such file or directory")
    return out


def open_results(path: Path) -> h5py.File:
    """Open read-only and check the schema; ValueError naming the file when it is not ours."""
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise OSError(f"{path}: cannot open as HDF5: {e}") from e
    try:
        schema = decode_attr(f.attrs.get("schema"))
        if schema != SCHEMA:
            raise ValueError(
                f"{path}: not a dtune results file (root attribute schema = {schema!r}, expected {SCHEMA!r})"
            )
        version = decode_attr(f.attrs.get("schema_version"))
        if not isinstance(version, int) or version < 1:
            raise ValueError(f"{path}: root attribute schema_version = {version!r}, expected a positive integer")
        if version > SCHEMA_VERSION:
            raise ValueError(
                f"{path}: schema_version {version} is newer than this loader knows "
                f"({SCHEMA_VERSION}); update report/dtune_report/loader.py "
                f"(see results/SCHEMA.md, Changes)"
            )
    except BaseException:
        f.close()
        raise
    return f


def read_provenance(path: Union[str, os.PathLike]) -> dict:
    """Where and how a file was made, as one flat dict.

    Keys: `file`; the root attributes (schema, schema_version, tool, dtune_version, status,
    exit_status); the /provenance attributes (command_line, start_time, world_size, git_revision,
    ...); each per-rank /provenance dataset as a list indexed by rank (rank_host, rank_local_rank,
    rank_device); and `env`, a dict of the /provenance/env attributes. Strings are str.
    """
    path = Path(path)
    with open_results(path) as f:
        out = {"file": str(path), **_attrs(f)}
        prov = f.get("provenance")
        if prov is not None:
            out.update(_attrs(prov))
            for name, obj in prov.items():
                if isinstance(obj, h5py.Dataset):
                    out[name] = _read(obj).tolist()
        env = prov.get("env") if prov is not None else None
        out["env"] = recordable_env(_attrs(env)) if env is not None else {}
    return out


def _comm_runs(f: h5py.File, path: Path):
    """Yield (run name, run-level columns, datasets) for each benchmark = "comm" group, in the
    order measured; checks that the array shapes agree with each other."""
    runs = f.get("runs")
    if runs is None:
        return
    for name in sorted(runs):
        g = runs[name]
        a = _attrs(g)
        if a.get("benchmark") != "comm":
            continue
        d = {k: _read(g[k]) for k in COMM_DATASETS}
        ps = (len(d["placement"]), len(d["size_bytes"]))
        t = d["time_us"]
        if (
            t.ndim != 4
            or t.shape[:2] != ps
            or d["wrong"].shape != t.shape[:3]
            or any(d[k].shape != ps for k in ("time_us_reported", "algbw_gbps", "busbw_gbps", "slowest_rank"))
        ):
            raise ValueError(
                f"{path}: /runs/{name}: inconsistent shapes: placement x size = "
                f"{ps}, time_us {t.shape}, wrong {d['wrong'].shape}, "
                f"time_us_reported {d['time_us_reported'].shape}"
            )
        cols = {
            "run": name,
            "status": a.get("status"),
            "collective": a.get("collective"),
            "backend": a.get("backend"),
            "dtype": a.get("dtype"),
            "op": a.get("op"),
            "root": a.get("root"),
            "busbw_factor": a.get("busbw_factor"),
        }
        yield cols, d


def _frame(parts: list[dict], columns: list[str]) -> pd.DataFrame:
    if not parts:
        return pd.DataFrame(columns=columns)
    return pd.concat([pd.DataFrame(p) for p in parts], ignore_index=True)[columns]


def load_comm(paths: PathArg) -> pd.DataFrame:
    """Every timed iteration of every dtune-comm run, one row per
    (file, run, placement, size, rank, iteration).

    `paths`: a file, a list of files, or a directory (all *.h5 and *.h5.partial in it).
    Columns: COMM_COLUMNS. `status` is the run group's status, `file_status` the root one
    ("running" for a .partial file left by a dead run); `host` is provenance rank_host[rank];
    `wrong` is the rank's wrong-element count for that size (-1: not checked). Iterations that
    were not run (NaN in time_us) are dropped.
    """
    parts = []
    for path in expand_paths(paths):
        with open_results(path) as f:
            file_status = decode_attr(f.attrs.get("status"))
            hosts_ds = f.get("provenance/rank_host")
            hosts = _read(hosts_ds) if hosts_ds is not None else None
            for cols, d in _comm_runs(f, path):
                t = d["time_us"]
                if hosts is None:
                    hosts = np.full(t.shape[2], None, dtype=object)
                if len(hosts) != t.shape[2]:
                    raise ValueError(
                        f"{path}: /runs/{cols['run']}: time_us has {t.shape[2]} "
                        f"ranks but provenance/rank_host has {len(hosts)}"
                    )
                keep = np.flatnonzero(~np.isnan(t.reshape(-1)))
                p, s, r, i = np.unravel_index(keep, t.shape)
                cols.pop("busbw_factor")
                parts.append(
                    {
                        "file": str(path),
                        "file_status": file_status,
                        **cols,
                        "placement": d["placement"][p],
                        "size_bytes": d["size_bytes"][s],
                        "requested_bytes": d["requested_bytes"][s],
                        "count": d["count"][s],
                        "rank": r.astype(np.int64),
                        "host": hosts[r],
                        "iteration": i.astype(np.int64),
                        "time_us": t.reshape(-1)[keep],
                        "wrong": d["wrong"][p, s, r],
                    }
                )
    return _frame(parts, COMM_COLUMNS)


def load_comm_summary(paths: PathArg) -> pd.DataFrame:
    """The table the binary printed, one row per (file, run, placement, size).

    Columns: SUMMARY_COLUMNS: the file's own time_us_reported, algbw_gbps, busbw_gbps and
    slowest_rank, the run's busbw_factor, and `wrong` summed over ranks (-1 when any rank did
    not check that size). Sizes that were not run (time_us_reported NaN) are dropped.
    """
    parts = []
    for path in expand_paths(paths):
        with open_results(path) as f:
            file_status = decode_attr(f.attrs.get("status"))
            for cols, d in _comm_runs(f, path):
                rep = d["time_us_reported"]
                keep = np.flatnonzero(~np.isnan(rep.reshape(-1)))
                p, s = np.unravel_index(keep, rep.shape)
                w = d["wrong"]
                wrong = np.where((w < 0).any(axis=2), -1, w.sum(axis=2)) if w.shape[2] else np.full(rep.shape, -1)
                parts.append(
                    {
                        "file": str(path),
                        "file_status": file_status,
                        **cols,
                        "placement": d["placement"][p],
                        "size_bytes": d["size_bytes"][s],
                        "requested_bytes": d["requested_bytes"][s],
                        "count": d["count"][s],
                        **{
                            k: d[k].reshape(-1)[keep]
                            for k in ("time_us_reported", "algbw_gbps", "busbw_gbps", "slowest_rank")
                        },
                        "wrong": wrong.reshape(-1)[keep],
                    }
                )
    return _frame(parts, SUMMARY_COLUMNS)


COMM_RUN_COLUMNS = ["file", "run", "status", "collective", "backend", "dtype", "op", "world_size", "nodes", "env"]


def load_comm_runs(paths: PathArg) -> pd.DataFrame:
    """One row per dtune-comm run: the launch shape and environment it was measured in.

    Columns: COMM_RUN_COLUMNS. `world_size` is the rank axis of time_us; `nodes` the number of
    distinct provenance rank_host values (the sweep point's `nodes` when there are no hosts;
    None when neither is known); `env` a dict of the /provenance/env variables, with the sweep
    point's env filling the names the provenance lacks. In a merged sweep file the provenance is
    /points/<point_id>/provenance.
    """
    rows = []
    for path in expand_paths(paths):
        with open_results(path) as f:
            runs = f.get("runs")
            for name in sorted(runs) if runs is not None else []:
                g = runs[name]
                a = _attrs(g)
                if a.get("benchmark") != "comm":
                    continue
                point = _point(a) or {}
                prov = f.get("provenance")
                if prov is None:
                    prov = f.get(f"points/{a.get('point_id')}/provenance")
                env = dict(point.get("env", {}))
                hosts = None
                if prov is not None:
                    env.update(recordable_env(_attrs(prov["env"])) if "env" in prov else {})
                    hosts = _read(prov["rank_host"]).tolist() if "rank_host" in prov else None
                ranks = g["time_us"].shape[2] if "time_us" in g else point.get("ranks")
                nodes = len(set(hosts)) if hosts and len(hosts) == ranks else point.get("nodes")
                rows.append(
                    {
                        "file": str(path),
                        "run": name,
                        "status": a.get("status"),
                        "collective": a.get("collective"),
                        "backend": a.get("backend"),
                        "dtype": a.get("dtype"),
                        "op": a.get("op"),
                        "world_size": ranks,
                        "nodes": nodes,
                        "env": env,
                    }
                )
    return pd.DataFrame(rows, columns=COMM_RUN_COLUMNS)


TRAIN_PHASES = ["data_ms", "h2d_ms", "forward_ms", "backward_ms", "comm_exposed_ms", "optimizer_ms", "scaler_ms"]
TRAIN_STEP_COLUMNS = (
    ["file", "run", "status", "model", "precision", "step", "warmup", "rank", "host"]
    + TRAIN_PHASES
    + ["total_ms", "loss", "loss_scale", "skipped", "profiled"]
)

# A comm run group's datasets (results/SCHEMA.md), all read by load_comm_summary.
COMM_DATASETS = (
    "placement",
    "size_bytes",
    "requested_bytes",
    "count",
    "time_us",
    "wrong",
    "time_us_reported",
    "algbw_gbps",
    "busbw_gbps",
    "slowest_rank",
)


def _train_groups(f: h5py.File):
    runs = f.get("runs")
    if runs is None:
        return
    for name in sorted(runs):
        g = runs[name]
        if decode_attr(g.attrs.get("benchmark")) == "train":
            yield name, g


def load_train(paths: PathArg) -> pd.DataFrame:
    """Every step of every rank of every dtune-train run, one row per (file, run, step, rank).

    Columns: TRAIN_STEP_COLUMNS: the per-phase milliseconds the binary recorded (comm_exposed_ms
    is communication not hidden behind backward), the step total, the rank's loss, the step's
    loss scale and whether it was skipped (fp16 overflow); `warmup` marks steps excluded from
    throughput, `profiled` those inside a --profile-steps window (False in files without the
    `profiled` dataset). Runs with status "oom" have no steps and are left out (see load_train_summary).
    """
    parts = []
    for path in expand_paths(paths):
        with open_results(path) as f:
            hosts_ds = f.get("provenance/rank_host")
            hosts = _read(hosts_ds) if hosts_ds is not None else None
            for name, g in _train_groups(f):
                a = _attrs(g)
                if "total_ms" not in g:
                    continue
                total = g["total_ms"][()]
                S, R = total.shape
                s, r = np.unravel_index(np.arange(S * R), (S, R))
                parts.append(
                    {
                        "file": str(path),
                        "run": name,
                        "status": a.get("status"),
                        "model": a.get("model"),
                        "precision": a.get("precision"),
                        "step": s.astype(np.int64),
                        "warmup": s < int(a.get("warmup_steps", 0)),
                        "rank": r.astype(np.int64),
                        "host": hosts[r] if hosts is not None and len(hosts) == R else None,
                        **{k: g[k][()].reshape(-1) for k in TRAIN_PHASES + ["total_ms", "loss"]},
                        "loss_scale": g["loss_scale"][()][s],
                        "skipped": g["skipped"][()][s].astype(bool),
                        "profiled": (g["profiled"][()][s] if "profiled" in g else np.zeros(S, int)[s]).astype(bool),
                    }
                )
    return _frame(parts, TRAIN_STEP_COLUMNS)


def load_train_summary(paths: PathArg) -> pd.DataFrame:
    """One row per dtune-train run: every attribute the binary wrote (configuration, status,
    samples_per_s, tokens_per_s, step_time_p50_ms, mfu with peak_tflops and peak_source, ...),
    plus `file` and `run`. Out-of-memory runs appear with status "oom" and their batch."""
    rows = []
    for path in expand_paths(paths):
        with open_results(path) as f:
            for name, g in _train_groups(f):
                rows.append({"file": str(path), "run": name, **_attrs(g)})
    return pd.DataFrame(rows)


RUN_COLUMNS = [
    "file",
    "run",
    "benchmark",
    "attrs",
    "point",
    "command_line",
    "world_size",
    "env",
    "hosts",
    "boot_ids",
    "start_time",
    "end_time",
]


def _provenance_of(group) -> dict:
    """The RUN_COLUMNS a provenance group gives (command_line, world_size, env dict, hosts and
    boot_ids lists indexed by rank, start_time, end_time); None, {} or [] for what is absent."""
    if group is None:
        return {"command_line": None, "world_size": None, "env": {}, "hosts": [], "boot_ids": []}
    a = _attrs(group)
    env = group.get("env")
    return {
        "command_line": a.get("command_line"),
        "world_size": a.get("world_size"),
        "env": recordable_env(_attrs(env)) if env is not None else {},
        "hosts": _read(group["rank_host"]).tolist() if "rank_host" in group else [],
        "boot_ids": _read(group["rank_boot_id"]).tolist() if "rank_boot_id" in group else [],
        "start_time": a.get("start_time"),
        "end_time": a.get("end_time"),
    }


def load_runs(paths: PathArg) -> pd.DataFrame:
    """One row per run group (any benchmark), with what defines it; `dtune compare` matches on this.

    Columns: RUN_COLUMNS. `attrs` is the group's attributes as a dict; `point` the sweep point's
    definition (dict: sweep, binary, args, env, ranks, nodes, ranks_per_node, repeat, values) for
    a run copied by `dtune sweep merge`, else None; `command_line`, `world_size` and `env` (dict),
    `hosts` and `boot_ids` (provenance rank_host and rank_boot_id, lists indexed by rank; [] where
    absent) and `start_time`, `end_time` (ISO 8601 strings; None where absent) come from the
    provenance of the process that measured the run: /points/<point_id>/provenance in a merged
    file, /provenance otherwise.
    """

    rows = []
    for path in expand_paths(paths):
        with open_results(path) as f:
            root = _provenance_of(f.get("provenance"))
            for name in sorted(f.get("runs", {})):
                a = _attrs(f["runs"][name])
                pid = a.get("point_id")
                prov = _provenance_of(f.get(f"points/{pid}/provenance")) if pid else root
                rows.append(
                    {
                        "file": str(path),
                        "run": name,
                        "benchmark": a.get("benchmark"),
                        "attrs": a,
                        "point": _point(a),
                        **prov,
                    }
                )
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


TRAIN_MEMORY_COLUMNS = ["file", "run", "status", "batch", "peak_memory_bytes", "memory_source", "rank_device"]


def load_train_memory(paths: PathArg) -> pd.DataFrame:
    """One row per dtune-train run: its largest `peak_memory_bytes` over ranks (the per-rank
    dataset; for an "oom" run without it, the attribute of that name; NaN when neither exists),
    `memory_source`, and `rank_device` (the run's per-rank dataset as a list; [] when absent).

    Columns: TRAIN_MEMORY_COLUMNS."""
    rows = []
    for path in expand_paths(paths):
        with open_results(path) as f:
            for name, g in _train_groups(f):
                a = _attrs(g)
                if "peak_memory_bytes" in g:
                    peak = float(np.max(g["peak_memory_bytes"][()])) if g["peak_memory_bytes"].size else np.nan
                else:
                    v = a.get("peak_memory_bytes")
                    peak = float(np.max(v)) if v is not None and np.size(v) else np.nan
                rows.append(
                    {
                        "file": str(path),
                        "run": name,
                        "status": a.get("status"),
                        "batch": a.get("batch"),
                        "peak_memory_bytes": peak,
                        "memory_source": a.get("memory_source", ""),
                        "rank_device": _read(g["rank_device"]).tolist() if "rank_device" in g else [],
                    }
                )
    return pd.DataFrame(rows, columns=TRAIN_MEMORY_COLUMNS)


def load_provenances(paths: PathArg) -> list[dict]:
    """Every provenance group of `paths`: the file's /provenance, and in a merged sweep file each
    /points/<point_id>/provenance; each as {file, point_id (None for the root), the group's
    attributes, rank_host, rank_device (lists indexed by rank; [] when absent), env (dict)}."""
    out = []
    for path in expand_paths(paths):
        with open_results(path) as f:
            groups = [(None, f.get("provenance"))]
            groups += [(pid, f.get(f"points/{pid}/provenance")) for pid in sorted(f.get("points", {}))]
            for pid, g in groups:
                if g is None:
                    continue
                out.append(
                    {
                        "file": str(path),
                        "point_id": pid,
                        **_attrs(g),
                        "rank_host": _read(g["rank_host"]).tolist() if "rank_host" in g else [],
                        "rank_device": _read(g["rank_device"]).tolist() if "rank_device" in g else [],
                        "env": recordable_env(_attrs(g["env"])) if "env" in g else {},
                    }
                )
    return out


def _probe_groups(f: h5py.File, probe: str):
    runs = f.get("runs")
    if runs is None:
        return
    for name in sorted(runs):
        g = runs[name]
        if decode_attr(g.attrs.get("benchmark")) == "probe" and decode_attr(g.attrs.get("probe")) == probe:
            yield name, g


def _probe_frame(paths: PathArg, probe: str, rows_of) -> pd.DataFrame:
    rows = []
    for path in expand_paths(paths):
        with open_results(path) as f:
            for name, g in _probe_groups(f, probe):
                a = _attrs(g)
                rows += [{"file": str(path), "run": name, **a, **row} for row in rows_of(g, a)]
    return pd.DataFrame(rows)


def load_probe_gemm(paths: PathArg) -> pd.DataFrame:
    """dtune-probe gemm: one row per (file, run, rank, shape).

    Columns: the group's attributes (device, device_name, dtype, library: `torch::mm` or
    `cublaslt`, workspace_bytes, threads, min_iters, min_time_s, world_size, peak_tflops: rank 0's
    best shape, peak_shape, status), and `rank`, `m`, `n`, `k`, `tflops` (median over the timed
    products), `tflops_best`, `algorithm` (cuBLASLt's choice for the shape; "" for torch::mm).
    """

    def rows(g, a):
        m, n, k = g["m"][()], g["n"][()], g["k"][()]
        med, best = g["tflops"][()], g["tflops_best"][()]
        algo = _read(g["algorithm"]) if "algorithm" in g else [""] * len(m)
        return [
            {"rank": r, "m": int(m[s]), "n": int(n[s]), "k": int(k[s]), "tflops": med[r, s], "tflops_best": best[r, s]}
            | {"algorithm": algo[s]}
            for r in range(med.shape[0])
            for s in range(len(m))
        ]

    return _probe_frame(paths, "gemm", rows)


def load_probe_memory(paths: PathArg) -> pd.DataFrame:
    """dtune-probe memory: one row per (file, run, rank, STREAM kernel).

    Columns: the group's attributes (device, device_name, threads, array_bytes, iters, world_size,
    <kernel>_gbps of rank 0), and `rank`, `kernel` (copy scale add triad), `gbps` (STREAM's figure:
    the best iteration after the first), `gbps_median`.
    """

    def rows(g, a):
        kernels, best, med = _read(g["kernel"]), g["gbps"][()], g["gbps_median"][()]
        return [
            {"rank": r, "kernel": kernels[i], "gbps": best[r, i], "gbps_median": med[r, i]}
            for r in range(best.shape[0])
            for i in range(len(kernels))
        ]

    return _probe_frame(paths, "memory", rows)


def load_probe_copy(paths: PathArg) -> pd.DataFrame:
    """dtune-probe copy: one row per (file, run, rank, size): `direction` (h2d, d2h), `memory`
    (pinned, pageable), `size_bytes`, `time_us` and `gbps` (medians)."""

    def rows(g, a):
        sizes, gbps, us = g["size_bytes"][()], g["gbps"][()], g["time_us"][()]
        return [
            {"rank": r, "size_bytes": int(sizes[s]), "time_us": us[r, s], "gbps": gbps[r, s]}
            for r in range(gbps.shape[0])
            for s in range(len(sizes))
        ]

    return _probe_frame(paths, "copy", rows)


def load_probe_p2p(paths: PathArg) -> pd.DataFrame:
    """dtune-probe p2p: one row per (file, run, source GPU, destination GPU): `peer_access`,
    `size_bytes`, `src`, `dst` (indices), `src_gpu`, `dst_gpu` (the GPUs as provenance rank_device
    names them, "cuda:0 NVIDIA H200 (0000:1b:00.0)"), `gbps`, `latency_us` (NaN where not measured)."""

    def rows(g, a):
        gbps, lat, names = g["gbps"][()], g["latency_us"][()], _read(g["gpu"])
        n = gbps.shape[0]
        return [
            {"src": i, "dst": j, "src_gpu": names[i], "dst_gpu": names[j], "gbps": gbps[i, j], "latency_us": lat[i, j]}
            for i in range(n)
            for j in range(n)
        ]

    return _probe_frame(paths, "p2p", rows)


def load_probe_launch(paths: PathArg) -> pd.DataFrame:
    """dtune-probe launch: one row per run with launch_us, launch_sync_us, event_us (medians)."""
    return _probe_frame(paths, "launch", lambda g, a: [{}])


def _topology_dict(g) -> dict:
    out = _attrs(g)
    for name, ds in g.items():
        out[name] = _read(ds).tolist()
    labels = out.get("link_label", [])
    flat = out.pop("link", [])
    out["links"] = [flat[i * len(labels) : (i + 1) * len(labels)] for i in range(len(labels))]
    return out


def read_topology(path: Union[str, os.PathLike]) -> dict:
    """The machine's topology as a file records it: /provenance/topology (every file), or the
    group of a dtune-probe topology run. Keys: summary, packages, numa_nodes, cores, threads,
    nvml_status, error; cache_level/cache_size_bytes/cache_count; pci_bus_id, pci_kind, pci_name,
    pci_vendor_id, pci_device_id, pci_numa_node (lists); gpu_name; link_label, link_bus_id and
    `links`, the nvidia-smi-style matrix as a list of rows. {} when the file has none."""
    with open_results(Path(path)) as f:
        g = f.get("provenance/topology")
        if g is None:
            for _, run in _probe_groups(f, "topology"):
                g = run.get("topology")
        return _topology_dict(g) if g is not None else {}
