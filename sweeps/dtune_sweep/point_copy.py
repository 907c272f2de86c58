"""Copying measured runs into one merged HDF5 file (results/SCHEMA.md): every run group under /runs
with its point's id and definition as attributes, each point's provenance under
/points/<id>/provenance. `dtune sweep merge` uses it for a sweep's points; scripts/gpu-check.sh runs
it as `python3 -m dtune_sweep.point_copy OUT.h5 FILE.h5...` on a GPU machine that has h5py and
nothing else of ours (so it imports only h5py and the standard library)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import h5py


def start(out: h5py.File, tool: str) -> tuple:
    """The merged file's root attributes and its (runs, points) groups."""
    out.attrs["schema"] = "dtune-results"
    out.attrs["schema_version"] = 1
    out.attrs["tool"] = tool
    out.attrs["status"] = "complete"
    return out.create_group("runs"), out.create_group("points")


def add(f: h5py.File, pid: str, point: dict, runs: h5py.Group, points: h5py.Group, n: int) -> int:
    """Copies file `f`'s runs and provenance as point `pid`; returns the next run number."""
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
    return n


def point_of(f: h5py.File, pid: str, sweep: str) -> dict:
    """A point (as sweeps/dtune_sweep/spec.py writes one) for a file that no sweep planned: its
    command line, world size and nodes read from its provenance."""
    prov = f["provenance"].attrs if "provenance" in f else {}
    ranks = int(prov.get("world_size", 1))
    hosts = f["provenance/rank_host"].asstr()[()] if "provenance/rank_host" in f else ["?"]
    nodes = max(1, len(set(hosts)))
    return {
        "id": pid,
        "sweep": sweep,
        "binary": str(f.attrs.get("tool", "")),
        "args": shlex.split(str(prov.get("command_line", "")))[1:],
        "env": {},
        "ranks": ranks,
        "nodes": nodes,
        "ranks_per_node": ranks // nodes,
        "repeat": 0,
        "values": {},
    }


def main(argv: list) -> int:
    """OUT.h5 FILE.h5...: each file a point named by its stem."""
    if len(argv) < 2:
        print("usage: python3 -m dtune_sweep.point_copy OUT.h5 FILE.h5...", file=sys.stderr)
        return 2
    output, files = Path(argv[0]), [Path(p) for p in argv[1:]]
    n = 0
    with h5py.File(output, "w") as out:
        runs, points = start(out, "dtune gpu-check")
        for path in files:
            with h5py.File(path, "r") as f:
                n = add(f, path.stem, point_of(f, path.stem, "gpu-check"), runs, points, n)
    print(f"# {n} runs from {len(files)} files merged into {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
