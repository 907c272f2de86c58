"""dtune-comm results as advice: each collective's settings against a baseline (the run with no
NCCL/UCX/MPI settings; else the one with fewest, the first measured on a tie), the α–β fit read as
latency and bandwidth (doc/metrics.md section 2), and, for NCCL runs that set NCCL_ALGO and
NCCL_PROTO, the winning algorithm and protocol per size range (the ranges nccl_tuner.conf holds).

Samples are per-iteration slowest-rank times (compare.comm_iteration_samples) at the collective's
largest out-of-place size; rows are compare.py's (ratio of median times: above 1 is slower)."""

from __future__ import annotations

import shlex

import numpy as np
import pandas as pd

from .compare import compare_samples
from .tables import _winner_ranges
from .units import fmt_bytes, fmt_change, fmt_sig

# A fit is read as latency and bandwidth only when it explains the times this well (weighted r²).
FIT_R2 = 0.9


def knobs(setting: str) -> dict:
    """The NAME=value settings named in a figures.comm_setting string."""
    return dict(t.split("=", 1) for t in setting.split()[1:] if "=" in t and not t.startswith("topology="))


def _order(fits: pd.DataFrame) -> pd.DataFrame:
    f = fits.copy()
    f["n_knobs"] = [len(knobs(s)) for s in f.setting]
    return f.sort_values(["n_knobs", "file", "run"], kind="stable")


def baseline_setting(fits: pd.DataFrame) -> tuple:
    """(setting, how chosen) among the runs of one collective and rank count."""
    f = _order(fits)
    first = f.iloc[0]
    if first.n_knobs == 0:
        return first.setting, "no settings: the defaults"
    return first.setting, f"no run without settings; fewest settings ({first.n_knobs}), first measured"


def _sig(row) -> str:
    p = "p < 0.001" if row.p_value < 0.001 else f"p = {fmt_sig(row.p_value, 2)}"
    return f"significant ({p})" if row.significant else f"not significant ({p})"


def comparisons(samples: pd.DataFrame, fits: pd.DataFrame, alpha: float = 0.05) -> list:
    """Per (collective, ranks) with two or more settings: {collective, ranks, size, baseline, how,
    rows: [(setting, Row)]} at the largest out-of-place size all of them measured."""
    if samples.empty or fits.empty:
        return []
    d = samples[samples.placement == "out-of-place"].merge(
        fits[["file", "run", "collective", "setting", "world_size"]], on=["file", "run"]
    )
    out = []
    for (coll, ranks), g in d.groupby(["collective", "world_size"]):
        settings = g.setting.unique()
        if len(settings) < 2:
            continue
        common = set.intersection(*[set(g[g.setting == s].size_bytes) for s in settings])
        if not common:
            continue
        size = max(common)
        g = g[g.size_bytes == size]
        f = fits[(fits.collective == coll) & (fits.world_size == ranks)]
        base, how = baseline_setting(f)
        rows = []
        for s in [s for s in _order(f).setting.unique() if s != base]:
            (row,) = compare_samples({0: g[g.setting == base].time_us}, {0: g[g.setting == s].time_us}, "us", alpha)
            rows.append((s, row))
        out.append(
            {"collective": coll, "ranks": int(ranks), "size": int(size), "baseline": base, "how": how, "rows": rows}
        )
    return out


def change_text(base: str, setting: str) -> str:
    """The environment to set (and unset) to go from the baseline's settings to `setting`."""
    b, s = knobs(base), knobs(setting)
    parts = [shlex.quote(f"{k}={v}") for k, v in sorted(s.items()) if b.get(k) != v]
    parts += [f"unset {shlex.quote(k)}" for k in sorted(b) if k not in s]
    return " ".join(parts)


def summary_line(c: dict) -> list:
    """One summary line: the fastest setting against the baseline when it is significantly faster,
    else that nothing beat the baseline."""
    where = f"{c['collective']} at {fmt_bytes(c['size'])} on {c['ranks']} ranks"
    faster = [(s, r) for s, r in c["rows"] if r.significant and r.ratio < 1]
    link = ("a", "evidence", "#collectives")
    if faster:
        s, r = min(faster, key=lambda sr: sr[1].ratio)
        change = change_text(c["baseline"], s)
        return [
            ("b", f"{fmt_change(r.ratio, r.ci_low, r.ci_high)} time"),
            f", {_sig(r)}: ",
            ("b", where),
            ": set ",
            ("code", change) if change else f"{s}",
            f" (against the baseline {c['baseline']}). ",
            link,
        ]
    slower = [s for s, r in c["rows"] if r.significant and r.ratio > 1]
    tail = "; every other setting is slower. " if len(slower) == len(c["rows"]) else ". "
    return [
        ("b", where),
        f": no setting measured beats the baseline ({c['baseline']}){tail}",
        link,
    ]


def comparison_table(cs: list) -> pd.DataFrame:
    rows = []
    for c in cs:
        rows.append(
            {
                "collective": c["collective"],
                "ranks": str(c["ranks"]),
                "size per rank": fmt_bytes(c["size"]),
                "setting": c["baseline"],
                "time against baseline": "baseline (" + c["how"] + ")",
            }
        )
        for s, r in c["rows"]:
            rows.append(
                {
                    "collective": c["collective"],
                    "ranks": str(c["ranks"]),
                    "size per rank": fmt_bytes(c["size"]),
                    "setting": s,
                    "time against baseline": f"{fmt_change(r.ratio, r.ci_low, r.ci_high)} "
                    + ("significant" if r.significant else "~"),
                }
            )
    return pd.DataFrame(rows)


def fit_table(comm: pd.DataFrame, fits: pd.DataFrame, ceiling: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per collective and setting: the fit's α, B and r², the measured peak busbw and its size, and
    the size per rank at which the fit reaches half of B (x = α·B bus bytes). With `ceiling`
    (ceilings.ceilings) holding a figure for any run: the run's ceiling and its peak busbw as a
    fraction of it (peak_fraction), "n/a" where the run has none."""
    d = comm[comm.placement == "out-of-place"]
    by_run = {}
    if ceiling is not None and np.isfinite(ceiling.ceiling_gbps.astype(float)).any():
        by_run = {(c.file, c.run): float(c.ceiling_gbps) for c in ceiling.itertuples()}
    rows = []
    for r in fits.sort_values(["collective", "setting"]).itertuples():
        g = d[(d.file == r.file) & (d.run == r.run)]
        if g.empty:
            continue
        top = g.loc[g.busbw_gbps.idxmax()]
        rows.append(
            {
                "collective": r.collective,
                "setting": r.setting,
                "latency α (µs)": fmt_sig(r.alpha_us),
                "bandwidth B (GB/s)": fmt_sig(r.fit_busbw_gbps),
                "fit r²": fmt_sig(getattr(r, "r2", float("nan")), 3),
                "half of B at": fmt_bytes(half_size(r)) if np.isfinite(half_size(r)) else "n/a",
                "measured peak busbw (GB/s)": f"{fmt_sig(top.busbw_gbps)} at {fmt_bytes(top.size_bytes)}",
            }
        )
        if by_run:
            c = by_run.get((r.file, r.run), float("nan"))
            rows[-1]["ceiling (GB/s)"] = fmt_sig(c)
            rows[-1]["peak busbw / ceiling"] = fmt_sig(peak_fraction(top.busbw_gbps, c))
    return pd.DataFrame(rows)


def peak_fraction(busbw_gbps: float, ceiling_gbps: float) -> float:
    """Measured busbw over the probe's ceiling (NaN without one)."""
    return busbw_gbps / ceiling_gbps if np.isfinite(ceiling_gbps) and ceiling_gbps > 0 else float("nan")


def half_size(fit) -> float:
    """Size per rank at which busbw = B/2 under t = α + x/B: x = α·B bus bytes, S = x / factor."""
    a, b, k = fit.alpha_us, fit.fit_busbw_gbps, fit.busbw_factor
    if not (np.isfinite(a) and np.isfinite(b) and a > 0 and b > 0 and k > 0):
        return float("nan")
    return a * b * 1e3 / k  # GB/s = 1e3 bytes per µs


def fit_sentences(fits: pd.DataFrame) -> list:
    """Per collective, for the setting with the highest B among fits with r² >= FIT_R2: the
    bandwidth it approaches and the size below which latency takes more than half the time."""
    out = []
    good = fits[np.isfinite(fits.fit_busbw_gbps) & (fits.r2 >= FIT_R2)] if "r2" in fits else fits.iloc[0:0]
    for coll, g in good.groupby("collective"):
        r = g.loc[g.fit_busbw_gbps.idxmax()]
        half = half_size(r)
        if not np.isfinite(half):
            continue
        out.append(
            f"{coll} approaches {fmt_sig(r.fit_busbw_gbps)} GB/s bus bandwidth ({r.setting}; fit r² "
            f"{fmt_sig(r.r2)}); below {fmt_bytes(half)} per rank the latency (α = {fmt_sig(r.alpha_us)} µs) "
            "takes more than half of each call's time, so fewer, larger messages pay off there."
        )
    return out


def nccl_winners(comm: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Per collective and rank count of NCCL runs setting NCCL_ALGO and NCCL_PROTO: the winning
    pair per size range (tables._winner_ranges, as nccl_tuner.conf writes them)."""
    if comm.empty or runs.empty:
        return pd.DataFrame()
    d = comm[(comm.placement == "out-of-place") & (comm.backend == "nccl") & (comm.wrong <= 0)]
    d = d.merge(runs[["file", "run", "world_size", "env"]], on=["file", "run"])
    d = d[[("NCCL_ALGO" in e and "NCCL_PROTO" in e) for e in d.env]]
    if d.empty:
        return pd.DataFrame()
    d = d.assign(setting=[f"{e['NCCL_ALGO']}/{e['NCCL_PROTO']}" for e in d.env])
    rows = []
    for (coll, ranks), g in d.groupby(["collective", "world_size"]):
        sizes = sorted(g.size_bytes.unique())
        for lo, hi, s in _winner_ranges(g):
            measured = [x for x in sizes if lo <= x <= hi]
            rows.append(
                {
                    "collective": coll,
                    "ranks": str(ranks),
                    "measured sizes": f"{fmt_bytes(measured[0])} to {fmt_bytes(measured[-1])}",
                    "NCCL_ALGO/NCCL_PROTO": s,
                }
            )
    return pd.DataFrame(rows)


def winner_sentences(w: pd.DataFrame) -> list:
    out = []
    for (coll, ranks), g in w.groupby(["collective", "ranks"], sort=True):
        if len(g) == 1:
            out.append(
                f"{coll} on {ranks} ranks: {g.iloc[0]['NCCL_ALGO/NCCL_PROTO']} is fastest at every size measured."
            )
        else:
            parts = [f"{r['NCCL_ALGO/NCCL_PROTO']} from {r['measured sizes']}" for _, r in g.iterrows()]
            out.append(f"{coll} on {ranks} ranks: {'; '.join(parts)} (nccl_tuner.conf below encodes these).")
    return out
