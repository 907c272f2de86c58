"""Every tune_sweep record of layers.py's models at fixed seeds, one JSON line each: a refactor of
the tuner that claims to change no decision must leave this file byte-identical.

    PYTHONHASHSEED=0 benchmarks/tune_research/records.py OUT.jsonl [--space quickstart|48|mixed]

The cases: quickstart seeds 1-60, the 48-point space seeds 1-30 at a start-up of 0.23 s and at
0.6 s, mixed seeds 1-40 (380 tunes, about 15 s on one core); every mechanism of the budget runs in
some of them (the re-plan, the re-opened rung, the first rung's cut and late draw, the stops).
PYTHONHASHSEED=0: the grid's run time, the budget, sums a set in hash order (the last digit moves
otherwise)."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "sweeps"), str(REPO / "report"), str(REPO / "tests" / "sweeps"), str(Path(__file__).parent)]

from layers import LaunchClockRuns, grid_seconds, points  # noqa: E402

from dtune_sweep import interleaved  # noqa: E402
from dtune_sweep.tune import _plain  # noqa: E402

CASES = [
    ("quickstart", 0.23, range(1, 61)),
    ("48", 0.23, range(1, 31)),
    ("48", 0.6, range(1, 31)),
    ("mixed", 0.23, range(1, 41)),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--space", choices=["quickstart", "48", "mixed"])
    a = ap.parse_args()
    with a.out.open("w") as out:
        for space, startup, seeds in (c for c in CASES if a.space in (None, c[0])):
            budget = 0.3 * grid_seconds(space, startup)
            for seed in seeds:
                left = budget
                with tempfile.TemporaryDirectory() as d:
                    by_sweep, runs = points(Path(d), space), LaunchClockRuns(Path(d), seed, startup)
                    n_left = sum(map(len, by_sweep.values()))
                    for name, pts in by_sweep.items():
                        said: list = []
                        share = ("seconds", left * len(pts) / n_left)
                        rec = interleaved.tune_sweep(
                            name, pts, runs, "samples_per_s", share, seed, 0.05, 4, said.append
                        )
                        left, n_left = left - rec["spent"], n_left - len(pts)
                        line = {"space": space, "startup": startup, "seed": seed, "rec": _plain(rec), "said": said}
                        out.write(json.dumps(line, sort_keys=True, default=str).replace(d, "TMP") + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
