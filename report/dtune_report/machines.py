"""Machines: the hardware and software each result was measured on, one column per machine (its
provenance host names), with the peaks measured there; and, when the same configurations ran on
several machines (several results files), their throughput side by side. A machine is the sorted
set of provenance rank_host values, as configs.py groups configurations."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .loader import load_runs
from .units import fmt_bytes, fmt_change, fmt_pct, fmt_sig
from .verdicts import compare_to, verdict_text


def machine_of(hosts) -> str:
    return ",".join(sorted(set(hosts))) if hosts else ""


def device_name(text: str) -> str:
    """'cuda:0 NVIDIA H200 (0000:1b:00.0)' -> 'NVIDIA H200'; 'cpu' stays."""
    m = re.match(r"cuda:\d+\s+(.*?)\s*(\([^)]*\))?$", str(text))
    return m.group(1) if m else str(text)


def _run_machines(paths) -> dict:
    return {(r.file, r.run): machine_of(r.hosts) for r in load_runs(paths).itertuples()}


def _join(values) -> str:
    vals = sorted({str(v) for v in values if v not in (None, "")})
    return "; ".join(vals) if vals else "n/a"


def hardware(provenances: list, train: pd.DataFrame, comm: pd.DataFrame, paths) -> tuple:
    """(table with one column per machine, sentences); (None, []) when no provenance records a
    device and no run a peak."""
    devices = any(p["rank_device"] for p in provenances)
    peaks = not train.empty and "peak_tflops" in train and (train.peak_tflops.fillna(0) > 0).any()
    if not provenances or not (devices or peaks):
        return None, []
    where = _run_machines(paths)
    by: dict = {}
    for p in provenances:
        by.setdefault(machine_of(p["rank_host"]), []).append(p)
    cols, sentences = {}, []
    for m, ps in sorted(by.items()):
        col = {
            "ranks": _join(len(p["rank_host"]) for p in ps if p["rank_host"]),
            "topology": _join(p.get("topology") for p in ps),  # hwloc + NVML (core/topology.h)
            "devices": _join(device_name(d) for p in ps for d in p["rank_device"]),
            "MPI library": _join(str(p.get("mpi_library_version", "")).split(",")[0] for p in ps),
            "NCCL": _join(p.get("nccl_version") for p in ps),
            "CUDA runtime / driver": _join(
                f"{p.get('cuda_runtime_version') or '-'} / {p.get('cuda_driver_version') or '-'}" for p in ps
            ),
            "LibTorch": _join(p.get("libtorch_version") for p in ps),
        }
        t = train[[where.get((f, r)) == m for f, r in zip(train.file, train.run)]] if not train.empty else train
        ok = t[t.status == "ok"] if not t.empty else t
        if not ok.empty and "peak_tflops" in ok and (ok.peak_tflops.fillna(0) > 0).any():
            known = ok[ok.peak_tflops > 0]
            col["peak TFLOPS (source)"] = _join(
                f"{fmt_sig(r.peak_tflops)} ({r.peak_source})" for r in known.itertuples()
            )
            # A utilisation above 100% means the peak is wrong (below what the run achieved), never
            # that the run beat the hardware: such figures (files older than dtune-train's check,
            # which rejects that peak itself) are not shown; the check's rejections are named.
            impossible = known[known.mfu > 1]
            for r in impossible.itertuples():
                sentences.append(
                    f"{r.model} ({r.precision}, batch {r.batch}) would be at {r.mfu:.0%} of the "
                    f"{fmt_sig(r.peak_tflops)} TFLOPS peak ({r.peak_source}): that peak is below what the run "
                    "achieved, so it is wrong and no MFU is shown for the run."
                )
            if "mfu_valid" in ok:
                for why in ok[ok.mfu_valid.fillna(1) == 0].get("mfu_rejected_peaks", pd.Series(dtype=str)).unique():
                    sentences.append(f"A peak was rejected, as below what a run achieved: {why}.")
            known = known[~(known.mfu > 1)]
            best = known.loc[known.mfu.fillna(-1).idxmax()] if not known.empty else None
            if best is not None and np.isfinite(best.mfu):
                col["best MFU"] = f"{best.mfu:.1%} ({best.model}, {best.precision}, batch {best.batch})"
                sentences.append(
                    f"On {m or 'this machine'} the best run reaches {best.mfu:.1%} of the "
                    f"{fmt_sig(best.peak_tflops)} TFLOPS peak ({best.peak_source}): {best.model}, "
                    f"{best.precision}, batch {best.batch} per rank."
                )
        elif not ok.empty and col["devices"] == "cpu":
            sentences.append(
                f"On {m or 'this machine'} every rank trained on the CPU: no peak is known, so MFU needs --peak-tflops "
                "or a measured one (run dtune-probe gemm first)."
            )
        c = comm[[where.get((f, r)) == m for f, r in zip(comm.file, comm.run)]] if not comm.empty else comm
        for coll, g in c[c.placement == "out-of-place"].groupby("collective") if not c.empty else []:
            top = g.loc[g.busbw_gbps.idxmax()]
            col[f"peak busbw, {coll}"] = f"{fmt_sig(top.busbw_gbps)} GB/s at {fmt_bytes(top.size_bytes)}"
        cols[m or "(no host recorded)"] = col
    names = list(dict.fromkeys(k for col in cols.values() for k in col))
    table = pd.DataFrame([{"": k, **{m: col.get(k, "") for m, col in cols.items()}} for k in names])
    return table, sentences


def _span(ratios) -> str:
    lo, hi = fmt_pct(min(ratios)), fmt_pct(max(ratios))
    return lo if lo == hi else f"{lo} to {hi}"


def side_by_side(studies: list, alpha: float = 0.05) -> tuple:
    """(table: one row per configuration measured on two or more machines, one column per
    machine; sentences), or (None, []) when no configuration ran on two machines."""
    groups: dict = {}
    for s in studies:
        for c in s.configs:
            key = tuple(sorted((k, v) for k, v in c.fields.items() if k != "machine"))
            groups.setdefault(key, {})[c.fields.get("machine", "")] = (s, c)
    shared = {k: v for k, v in groups.items() if len(v) >= 2}
    if not shared:
        return None, []
    machines = sorted({m for v in shared.values() for m in v})
    rows, faster = [], {}
    for v in shared.values():
        s, c0 = next(iter(v.values()))
        row = {"workload": s.title.rsplit(", on ", 1)[0], "configuration": c0.label}
        for m in machines:
            c = v.get(m, (None, None))[1]
            row[m] = f"{fmt_sig(c.median)} [{fmt_sig(c.low)}, {fmt_sig(c.high)}]" if c else ""
        if len(machines) == 2 and all(m in v for m in machines):
            r = compare_to(v[machines[0]][1], v[machines[1]][1], alpha)
            change = fmt_change(r.ratio, r.ci_low, r.ci_high)
            row[f"{machines[1]} against {machines[0]}"] = f"{change} {verdict_text(r)}"
            if r.significant:
                faster.setdefault(machines[1] if r.ratio > 1 else machines[0], []).append(r.ratio)
        rows.append(row)
    sentences = []
    if len(machines) == 2:
        n = sum(all(m in v for m in machines) for v in shared.values())
        for m in machines:
            if m in faster:
                ratios = [x if m == machines[1] else 1 / x for x in faster[m]]
                sentences.append(
                    f"{len(ratios)} of the {n} configurations measured on both run significantly faster on {m}, "
                    f"by {_span(ratios)} in median samples/s."
                )
        if not faster:
            sentences.append(
                "No configuration measured on both runs at a measurably different speed on the two machines."
            )
    return pd.DataFrame(rows), sentences
