"""What `dtune tune` maximises (or minimises), read from one point's results file as samples, one
per measured step (dtune-train) or timed iteration (dtune-comm), so that two candidates compare as
`dtune compare` compares them (Mann-Whitney U, bootstrap interval of the ratio of medians):

- samples_per_s: the run's global batch over each measured step's time (its slowest rank's total;
  warm-up steps and steps in a --profile-steps window left out, as compare.py takes them);
- step_time_p50: each measured step's time in ms (lower is better; its median is the p50);
- mfu: the run's model FLOPs utilisation scaled per step (mfu x median step time / step time);
  unknown (NaN) where the run knows no peak, e.g. on CPU;
- busbw: dtune-comm's bus bandwidth (GB/s) at the largest size measured, out-of-place, per timed
  iteration (the slowest rank's time), averaged over the collectives the run measured.
"""

from __future__ import annotations

import math

import numpy as np

OBJECTIVES = {
    # name: (binary, unit, higher is better)
    "samples_per_s": ("dtune-train", "samples/s", True),
    "mfu": ("dtune-train", "MFU", True),
    "step_time_p50": ("dtune-train", "ms", False),
    "busbw": ("dtune-comm", "GB/s", True),
}
DEFAULT = {"dtune-train": "samples_per_s", "dtune-comm": "busbw"}


class ObjectiveError(ValueError):
    """The objective cannot be read from a run (e.g. mfu without a known peak)."""


def file_status(path) -> str:
    """The root status of a results file ("ok", "oom", ...), "missing" when there is none."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            s = f.attrs.get("status", "")
            return s.decode() if isinstance(s, bytes) else str(s)
    except OSError:
        return "missing"


def samples(path, objective: str) -> np.ndarray:
    """The objective's samples from one point's results file (empty when it has none)."""
    if objective == "busbw":
        return _busbw(path)
    from dtune_report.compare import train_step_samples
    from dtune_report.loader import load_train_summary

    steps = train_step_samples([path])
    if steps.empty:
        return np.array([])
    ms = steps.sort_values(["run", "step"]).total_ms.to_numpy(float)
    if objective == "step_time_p50":
        return ms
    summary = load_train_summary([path])
    summary = summary[summary.status == "ok"] if "status" in summary else summary
    if summary.empty:
        return np.array([])
    row = summary.iloc[0]
    if objective == "samples_per_s":
        return float(row["global_batch"]) / (ms / 1000.0)
    mfu = float(row.get("mfu", float("nan")))
    if not math.isfinite(mfu):
        raise ObjectiveError(
            f"{path}: the run recorded no MFU (no known peak: {row.get('peak_source', 'unknown')}); "
            f"tune for samples_per_s, or give dtune-train --peak-tflops"
        )
    return mfu * float(np.median(ms)) / ms


def _busbw(path) -> np.ndarray:
    from dtune_report.compare import comm_iteration_samples
    from dtune_report.loader import load_comm_summary

    it = comm_iteration_samples([path])
    summ = load_comm_summary([path])
    if it.empty or summ.empty:
        return np.array([])
    it = it[it.placement == "out-of-place"]
    summ = summ[summ.placement == "out-of-place"]
    per_run = []
    for run, g in it.groupby("run"):
        s = summ[summ.run == run]
        if s.empty:
            continue
        largest = s.size_bytes.max()
        ref = s[s.size_bytes == largest].iloc[0]
        t = g[g.size_bytes == largest].sort_values("iteration").time_us.to_numpy(float)
        per_run.append(float(ref.busbw_gbps) * float(ref.time_us_reported) / t)
    if not per_run:
        return np.array([])
    n = min(len(x) for x in per_run)
    return np.mean([x[:n] for x in per_run], axis=0)
