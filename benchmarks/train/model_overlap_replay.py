"""Diagnosis for `dtune model check`: is a miss in the overlap replay or in the cost of each
reduction? Replays a multi-rank dtune-train run's own profiled steps (--profile-steps) with the
scaling model's replay_step (report/dtune_report/scaling_model.py), fed with that run's gradient
arrival times (grad_ready_ms, rank 0) and each bucket reduction's measured duration (rank 0's
Chrome trace, the `dtune gradient reductions` row), against the measured exposed communication of
the same step. Agreement means the overlap logic is right and any miss lies in the link model.

Usage: .venv/bin/python benchmarks/train/model_overlap_replay.py RUN.h5 TRACE_DIR/rank0.pt.trace.json
e.g.   mpirun -np 2 build/bin/dtune-train --model gpt2-tiny --context 64 --batch 4 --threads 1 --steps 15 \
         --warmup-steps 3 --bucket-mb 0.25 --first-bucket-mb 0.25 --profile-steps 5:10 \
         --profile-dir results/replay/trace --output results/replay/run.h5
"""

import json
import sys
from pathlib import Path

import h5py
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "report"))
from dtune_report.scaling_model import caps_bytes, plan_buckets, replay_step  # noqa: E402


def spans(events, cat, lo, hi, name=None):
    return [e for e in events if e.get("cat") == cat and lo <= e["ts"] < hi and (name is None or e["name"] == name)]


def main(h5_path: str, trace_path: str) -> int:
    with h5py.File(h5_path, "r") as f:
        (g,) = f["runs"].values()
        ready_all, sizes = g["grad_ready_ms"][()], g["param_bytes"][()]
        caps = caps_bytes(float(g.attrs["bucket_mb"]), float(g.attrs["first_bucket_mb"]))
    buckets = plan_buckets(sizes, *caps)
    events = json.loads(Path(trace_path).read_text())["traceEvents"]
    steps = [e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
    print(f"# {'step':>4} {'backward_ms':>11} {'exposed_ms':>10} {'replayed_ms':>11} {'reductions_ms':>13}")
    measured, replayed = [], []
    for st in sorted(steps, key=lambda e: e["ts"]):
        n, lo, hi = int(st["name"].split("#")[1]), st["ts"], st["ts"] + st["dur"]
        back = spans(events, "dtune_phase", lo, hi, "backward")
        expo = spans(events, "dtune_phase", lo, hi, "comm_exposed")
        red = sorted(spans(events, "dtune_comm", lo, hi), key=lambda e: e["args"]["bucket"])
        if len(back) != 1 or len(expo) != 1 or len(red) != len(buckets):
            continue
        backward_ms = back[0]["dur"] / 1e3
        costs = [e["dur"] / 1e3 for e in red]
        arrived = np.nan_to_num(ready_all[n], nan=backward_ms)
        exposed, _ = replay_step([arrived[b].max() for b in buckets], backward_ms, costs)
        measured.append(expo[0]["dur"] / 1e3)
        replayed.append(exposed)
        print(f"  {n:4d} {backward_ms:11.1f} {measured[-1]:10.1f} {exposed:11.1f} {sum(costs):13.1f}")
    if not measured:
        print("# no profiled step with one backward, one exposed span and every bucket's reduction", file=sys.stderr)
        return 2
    err = np.median(np.abs(np.array(replayed) / np.array(measured) - 1))
    print(
        f"# exposed: measured median {np.median(measured):.2f} ms, replayed {np.median(replayed):.2f} ms; "
        f"median |error| per step {100 * err:.1f}%"
    )
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
