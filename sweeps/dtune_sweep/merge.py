"""One HDF5 file from a sweep's per-point files: every run group copied under /runs with the
point's id and definition as attributes, and each point's provenance kept under
/points/<id>/provenance (results/SCHEMA.md). Only points whose latest outcome in the state logs is
ok or oom are taken: a file left by a failed, timed-out or interrupted launch is not a result."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import h5py

from .runner import COMPLETE, State
from .spec import SweepError


def _manifest(directory: Path) -> dict:
    path = directory / "manifest.json"
    if not path.exists():
        raise SweepError(
            f"{path} does not exist: run `dtune sweep run` (or `slurm`) on this sweep first, "
            f"or give its directory with --out"
        )
    try:
        points = json.loads(path.read_text())
        return {p["id"]: p for p in points}
    except (json.JSONDecodeError, TypeError, KeyError) as e:
        raise SweepError(f"{path} is not a sweep manifest ({e}); rerun `dtune sweep run` to rewrite it") from None


def merge(directory: Path, output: Path) -> int:
    manifest = _manifest(directory)
    outcomes = State(directory).outcomes()
    n = 0
    tmp = output.with_name(output.name + ".partial")
    with h5py.File(tmp, "w") as out:
        out.attrs["schema"] = "dtune-results"
        out.attrs["schema_version"] = 1
        out.attrs["tool"] = "dtune sweep merge"
        out.attrs["status"] = "complete"
        runs = out.create_group("runs")
        points = out.create_group("points")
        for pid, point in manifest.items():
            src = directory / "points" / f"{pid}.h5"
            if outcomes.get(pid) not in COMPLETE or not src.exists():
                continue
            try:
                f = h5py.File(src, "r")
            except OSError as e:
                print(f"# merge: skipped {pid}: {src} cannot be read ({e})", file=sys.stderr)
                continue
            with f:
                g = points.create_group(pid)
                g.attrs["point"] = json.dumps(point)
                g.attrs["status"] = f.attrs.get("status", "")
                if "provenance" in f:
                    f.copy("provenance", g)
                for name in f.get("runs", {}):
                    dst = f"{n:04d}-{pid}-{name.split('-', 1)[-1]}"
                    f.copy(f"runs/{name}", runs, name=dst)
                    runs[dst].attrs["point_id"] = pid
                    runs[dst].attrs["point"] = json.dumps(point)
                    n += 1
    tmp.rename(output)
    return n
