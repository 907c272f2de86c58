"""The ceiling each dtune-comm run's bus bandwidth is read against, measured by dtune-probe on the
run's machine and found among the report's inputs. On GPUs: the p2p copy bandwidth between the
run's GPUs, the slowest pair of them (a ring is as fast as its slowest link), peer access on when
measured. On CPUs in one machine (MPI over shared memory): no link exists; the honest ceiling is the
host's memory bandwidth, STREAM copy from dtune-probe memory, and it is labelled as that. A run
across machines has none (no probe measures the network), nor does a run whose machine no probe
measured. A probe counts for a run when its rank 0 ran on the run's host (provenance rank_host);
the newest such probe (provenance start_time) wins. The formula: doc/metrics.md section 1.

    ceilings(paths) -> DataFrame, one row per comm run: file, run, ceiling_gbps (NaN: none),
    label (what the figure is: "host memory copy, dtune-probe memory (...)"), source (the probe
    file), why_none (why a run has none; "" when it has one).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from .loader import _attrs, _read, expand_paths, load_probe_memory, load_probe_p2p, open_results
from .units import fmt_sig

COLUMNS = ["file", "run", "ceiling_gbps", "label", "source", "why_none"]
NO_PROBE = (
    "No dtune-probe memory or p2p results among the inputs, so no ceiling is drawn: run `dtune-probe memory` (CPU: the "
    "host's memory bandwidth, the limit of MPI over shared memory) or `dtune-probe p2p` (GPUs) on the machine "
    "and pass its file to dtune report with the dtune-comm results."
)


def _comm_runs(paths) -> list[dict]:
    """Per comm run: file, run, hosts and devices (provenance rank_host, rank_device lists)."""
    out = []
    for path in expand_paths(paths):
        with open_results(path) as f:
            for name in sorted(f.get("runs", {})):
                a = _attrs(f["runs"][name])
                if a.get("benchmark") != "comm":
                    continue
                pid = a.get("point_id")
                prov = f.get(f"points/{pid}/provenance") if pid else f.get("provenance")
                lists = {
                    k: _read(prov[k]).tolist() if prov is not None and k in prov else []
                    for k in ("rank_host", "rank_device")
                }
                hosts, devices = lists["rank_host"], lists["rank_device"]
                out.append({"file": str(path), "run": name, "hosts": hosts, "devices": devices})
    return out


def _probe_origin(paths) -> dict:
    """file -> (rank 0's host, start_time) of every input that holds probe runs."""
    out = {}
    for path in expand_paths(paths):
        with open_results(path) as f:
            prov = f.get("provenance")
            if prov is None:
                continue
            hosts = _read(prov["rank_host"]).tolist() if "rank_host" in prov else []
            out[str(path)] = (hosts[0] if hosts else "", str(_attrs(prov).get("start_time", "")))
    return out


def _bus_id(device: str) -> str:
    """'cuda:0 NVIDIA H200 (0000:1b:00.0)' -> '0000:1b:00.0' (the whole text when there is none)."""
    m = re.search(r"\(([^()]*)\)\s*$", str(device))
    return m.group(1) if m else str(device)


def gpu_ceiling(p2p: pd.DataFrame, devices: list) -> tuple:
    """(GB/s, label, why_none) from one p2p matrix (load_probe_p2p rows of one run) for ranks on
    `devices`: the slowest measured copy between two distinct GPUs of theirs."""
    used = sorted({_bus_id(d) for d in devices})
    if len(used) < 2:
        return np.nan, "", "every rank on one GPU: no link between GPUs to read against"
    known = {_bus_id(g) for g in p2p.src_gpu}
    missing = [u for u in used if u not in known]
    if missing:
        return np.nan, "", f"GPU {missing[0]} is not in the dtune-probe p2p matrix"
    pairs = p2p[p2p.src_gpu.map(_bus_id).isin(used) & p2p.dst_gpu.map(_bus_id).isin(used) & (p2p.src != p2p.dst)]
    pairs = pairs[np.isfinite(pairs.gbps)]
    if pairs.empty:
        return np.nan, "", "no copy between the ranks' GPUs measured by dtune-probe p2p"
    on = "on" if int(pairs.peer_access.iloc[0]) else "off"
    label = f"GPU-to-GPU copy, dtune-probe p2p (peer access {on}; slowest of {len(pairs)} directed pairs)"
    return float(pairs.gbps.min()), label, ""


def _newest(frame: pd.DataFrame, host: str, origin: dict) -> pd.DataFrame:
    """The rows of `frame` from the newest file whose probe ran on `host` (empty when none)."""
    files = [f for f in frame.file.unique() if origin.get(f, ("", ""))[0] == host] if not frame.empty else []
    if not files:
        return frame.iloc[0:0]
    newest = max(files, key=lambda f: origin[f][1])
    return frame[frame.file == newest]


def _one(run: dict, memory: pd.DataFrame, p2p: pd.DataFrame, origin: dict) -> dict:
    row = {"file": run["file"], "run": run["run"], "ceiling_gbps": np.nan, "label": "", "source": ""}
    hosts, devices = sorted(set(run["hosts"])), run["devices"]
    if len(hosts) != 1:
        why = (
            f"runs across {len(hosts)} machines: no probe measures the network between them"
            if hosts
            else "no host recorded"
        )
        return {**row, "why_none": why}
    host = hosts[0]
    if devices and all(d == "cpu" for d in devices):
        m = _newest(memory[(memory.device == "cpu") & (memory["rank"] == 0) & (memory.kernel == "copy")], host, origin)
        if m.empty:
            return {**row, "why_none": f"no dtune-probe memory results from {host} among the inputs"}
        r = m.iloc[0]
        label = f"host memory copy, dtune-probe memory (STREAM copy, {int(r.threads)} threads)"
        return {**row, "ceiling_gbps": float(r.gbps), "label": label, "source": r.file, "why_none": ""}
    if devices and all(str(d).startswith("cuda") for d in devices):
        found = _newest(p2p, host, origin)
        if found.empty:
            return {**row, "why_none": f"no dtune-probe p2p results from {host} among the inputs"}
        # Peer access on is the path NCCL takes when it can; off (through the host) otherwise.
        runs = found.sort_values("peer_access", ascending=False, kind="stable")
        best = runs[runs.run == runs.run.iloc[0]]
        gbps, label, why = gpu_ceiling(best, devices)
        source = best.file.iloc[0] if not why else ""
        return {**row, "ceiling_gbps": gbps, "label": label, "source": source, "why_none": why}
    return {**row, "why_none": "the ranks' devices are not recorded, or mix CPUs and GPUs"}


def ceilings(paths) -> pd.DataFrame:
    """One row per dtune-comm run among `paths` (COLUMNS); empty when there is none."""
    runs = _comm_runs(paths)
    memory, p2p = load_probe_memory(paths), load_probe_p2p(paths)
    if memory.empty:
        memory = pd.DataFrame(columns=["file", "device", "rank", "kernel", "gbps", "threads"])
    if p2p.empty:
        p2p = pd.DataFrame(columns=["file", "run", "peer_access", "src", "dst", "src_gpu", "dst_gpu", "gbps"])
    origin = _probe_origin(paths) if len(memory) or len(p2p) else {}
    return pd.DataFrame([_one(r, memory, p2p, origin) for r in runs], columns=COLUMNS)


def has_probes(paths) -> bool:
    """Whether any input holds a dtune-probe memory or p2p run (the probes a ceiling comes from)."""
    return not (load_probe_memory(paths).empty and load_probe_p2p(paths).empty)


def note_lines(table: pd.DataFrame, probes: bool) -> list:
    """Sentences under the fit table: the ceilings used (one per distinct figure), and each distinct
    reason a run has none; NO_PROBE alone when no input holds a probe."""
    if table.empty:
        return []
    if not probes:
        return [NO_PROBE]
    out = []
    have = table[np.isfinite(table.ceiling_gbps.astype(float))]
    for (label, gbps, source), g in have.groupby(["label", "ceiling_gbps", "source"], sort=True):
        what = (
            " Host memory bandwidth is what MPI's shared-memory transport copies through; it is not a link, and "
            "messages small enough to stay in the caches can exceed it (STREAM's arrays are sized past them)."
            if label.startswith("host memory")
            else ""
        )
        out.append(
            f"Ceiling for {len(g)} run(s): {fmt_sig(gbps)} GB/s, {label}, from {Path(source).name}; the fit table "
            f"gives each run's measured peak busbw as a fraction of it, and the figure draws it dotted.{what}"
        )
    for why, g in table[table.why_none != ""].groupby("why_none", sort=True):
        out.append(f"No ceiling for {len(g)} run(s): {why}.")
    return out
