"""One HDF5 file from a sweep's per-point files: every run group copied under /runs with the
point's id and definition as attributes, and each point's provenance kept under
/points/<id>/provenance (results/SCHEMA.md)."""
from __future__ import annotations

import json
from pathlib import Path

import h5py


def merge(directory: Path, output: Path) -> int:
    manifest = {p["id"]: p for p in json.loads((directory / "manifest.json").read_text())}
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
            if not src.exists():
                continue
            with h5py.File(src, "r") as f:
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
