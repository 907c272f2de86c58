"""One HDF5 file from a sweep's per-point files: every run group copied under /runs with the
point's id and definition as attributes, and each point's provenance kept under
/points/<id>/provenance (results/SCHEMA.md). Only points whose latest outcome in the state logs is
ok or oom are taken: a file left by a failed, timed-out or interrupted launch is not a result. On a
full disk the partial merged file is removed and disk.NoSpace raised (exit 1, one line)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import h5py

from dtune_report.redact import recordable_point

from . import disk, point_copy
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
    tmp = output.with_name(output.name + ".partial")
    try:
        n = _copy(directory, manifest, tmp)
        tmp.rename(output)
    except OSError as e:
        if not disk.is_no_space(e):
            raise
        tmp.unlink(missing_ok=True)  # its space back: the point files and the state log are intact
        raise disk.NoSpace(output) from None
    return n


def _copy(directory: Path, manifest: dict, tmp: Path) -> int:
    """Copies every complete point's file into `tmp`; the number of runs copied."""
    outcomes = State(directory).outcomes()
    n = 0
    with h5py.File(tmp, "w") as out:
        runs, points = point_copy.start(out, "dtune sweep merge")
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
                # A manifest from before secrets were redacted in it still has them: not copied.
                n = point_copy.add(f, pid, recordable_point(point), runs, points, n)
    return n
