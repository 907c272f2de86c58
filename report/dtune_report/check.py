"""Is each results file usable by the report and compare? Checked before anything is drawn, so a
file that is not HDF5, truncated or corrupt, not a dtune results file (no `schema` attribute), or a
dtune file missing a dataset or attribute that the loader reads (results/SCHEMA.md) is one
ValueError naming the file and what is missing, which `dtune` prints as one line with exit 2.
Every dataset the loader reads is read here once, so a corrupt chunk is found here too.
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py

from .loader import COMM_DATASETS, TRAIN_PHASES, PathArg, decode_attr, expand_paths, open_results

COMM_ATTRS = ("collective", "backend", "busbw_factor", "fit_alpha_us", "fit_busbw_gbps")
# A train run with steps (status "ok"; an "oom" run has none): its per-step datasets.
TRAIN_DATASETS = tuple(TRAIN_PHASES) + ("total_ms", "loss", "loss_scale", "skipped")
TRAIN_ATTRS = ("status", "model", "precision", "batch", "world_size")
TRAIN_OK_ATTRS = ("samples_per_s",)


def _one_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _read_all(path: Path, g: h5py.Group, name: str, names) -> None:
    for k in names:
        if k not in g:
            raise ValueError(
                f"{path}: /runs/{name}: missing dataset {k!r} (written by an older or "
                f"interrupted binary?); the report needs it"
            )
        try:
            g[k][()]
        except (OSError, KeyError, ValueError, RuntimeError) as e:
            raise ValueError(
                f"{path}: /runs/{name}/{k}: cannot be read (truncated or corrupt file?): {_one_line(e)}"
            ) from None


def _need_attrs(path: Path, g: h5py.Group, name: str, names) -> None:
    for k in names:
        if k not in g.attrs:
            raise ValueError(f"{path}: /runs/{name}: missing attribute {k!r}; the report needs it")


def _json_kind(path: Path) -> str | None:
    """What a JSON file given as results is, and what to pass instead; None when not JSON."""
    try:
        with open(path, "rb") as fh:
            doc = json.loads(fh.read(64 << 20))
    except (OSError, ValueError):
        return None
    if isinstance(doc, dict) and isinstance(doc.get("benchmarks"), list) and "context" in doc:
        return "Google Benchmark JSON (dtune-micro): `dtune compare A.json B.json` compares two of them"
    if isinstance(doc, dict) and "sweeps" in doc:
        return f"a `dtune tune` record: pass its folder ({path.parent}) or the .h5 files in it"
    if isinstance(doc, list) and doc and isinstance(doc[0], dict) and "binary" in doc[0]:
        return "a sweep manifest: pass the sweep's merged.h5 (`dtune sweep merge`) or its points/ folder"
    return "a JSON file: pass the .h5 files dtune-comm, dtune-train or `dtune sweep merge` wrote"


def _check_file(path: Path) -> None:
    try:
        f = open_results(path)
    except (OSError, KeyError) as e:  # h5py: KeyError for a root group it cannot decode
        json_kind = _json_kind(path)
        if json_kind:
            raise ValueError(f"{path}: {json_kind}, not an HDF5 results file") from None
        why = _one_line(e).strip("'\"").split("cannot open as HDF5: ", 1)[-1]
        raise ValueError(f"{path}: not a readable HDF5 file (truncated, corrupt or another format?): {why}") from None
    try:
        with f:
            _check_runs(path, f)
    except (OSError, KeyError, RuntimeError) as e:  # h5py: RuntimeError for a corrupt symbol table
        raise ValueError(f"{path}: a damaged HDF5 file (truncated or corrupt?): {_one_line(e)}") from None


def _check_runs(path: Path, f: h5py.File) -> None:
    runs = f.get("runs")
    if not isinstance(runs, h5py.Group):
        raise ValueError(
            f"{path}: a dtune results file without a /runs group: nothing measured "
            f"in it (a run that died before its first measurement?)"
        )
    for name in runs:
        g = runs.get(name)
        if not isinstance(g, h5py.Group):
            raise ValueError(f"{path}: /runs/{name}: not a group (corrupt file?)")
        benchmark = decode_attr(g.attrs.get("benchmark"))
        if benchmark == "comm":
            _need_attrs(path, g, name, COMM_ATTRS)
            _read_all(path, g, name, COMM_DATASETS)
        elif benchmark == "train":
            _need_attrs(path, g, name, TRAIN_ATTRS)
            if decode_attr(g.attrs.get("status")) == "ok":
                _need_attrs(path, g, name, TRAIN_OK_ATTRS)
            if "total_ms" in g:
                _read_all(path, g, name, TRAIN_DATASETS)


def check_results(paths: PathArg) -> list[Path]:
    """The files behind `paths` (files or directories, as the loader takes them), each checked;
    ValueError (one line, naming the file) on the first one that cannot be used."""
    try:
        files = expand_paths(paths)
    except OSError as e:
        raise ValueError(_one_line(e)) from None
    for path in files:
        _check_file(path)
    return files


def _measured_so_far(f: h5py.File) -> str:
    """What an incomplete file holds: its train runs' steps and its comm runs' sizes."""
    parts = []
    for name, g in (f.get("runs") or {}).items():
        kind = decode_attr(g.attrs.get("benchmark"))
        status = decode_attr(g.attrs.get("status"))
        if kind == "train":
            steps = decode_attr(g.attrs.get("steps_written"))
            steps = steps if steps is not None else (g["total_ms"].shape[0] if "total_ms" in g else 0)
            parts.append(f"{name}: {steps} steps, status {status}")
        elif kind == "comm" and "size_bytes" in g:
            parts.append(f"{name}: {g['size_bytes'].shape[0]} sizes, status {status}")
    return "; ".join(parts[:4]) + (f"; {len(parts) - 4} more runs" if len(parts) > 4 else "") or "no run"


def incomplete_files(paths: PathArg) -> list[str]:
    """One line per results file that is not a finished run's (root status other than complete: a
    `.partial` left by a run that died says `running`; `interrupted`, `timeout` and `failed` runs
    kept what they measured): the file, its status and what it holds. `dtune report` and `dtune
    compare` use what was measured and show these lines, so that nothing incomplete reads as a
    finished run."""
    out = []
    for path in expand_paths(paths):
        with open_results(path) as f:
            status = decode_attr(f.attrs.get("status"))
            if status == "complete" and not path.name.endswith(".partial"):
                continue
            died = " (its writer died: a .partial)" if status == "running" else ""
            out.append(f"{path}: incomplete, status {status}{died}; measured so far: {_measured_so_far(f)}")
    return out


def machine_warnings(a: PathArg, b: PathArg) -> list[str]:
    """A line when A and B ran on different hosts (provenance rank_host): their difference is then
    the machines' as much as the settings'."""
    from .loader import load_runs

    def hosts(p) -> list:
        runs = load_runs(p)
        return sorted({h for hs in runs["hosts"] for h in (hs or [])})

    ha, hb = hosts(a), hosts(b)
    if not ha or not hb or ha == hb:
        return []
    return [
        f"A ran on {', '.join(ha)} and B on {', '.join(hb)}: the comparison is of the machines as well as "
        "the settings (compare runs from one machine to measure a setting)"
    ]


def sweep_failures(paths: PathArg) -> list[str]:
    """One line per sweep folder among the results (a state*.jsonl beside a file, or in a folder
    given) whose latest outcome for some point is not ok or oom: how many points, by status, and
    the reasons the runner recorded (sweeps/dtune_sweep/runner.py). A merged file holds only the
    points that completed, so without this a report of a failed sweep would not mention them."""
    dirs = []
    for p in map(Path, [paths] if isinstance(paths, (str, Path)) else paths):
        d = p if p.is_dir() else p.parent
        if d not in dirs and any(d.glob("state*.jsonl")):
            dirs.append(d)
    out = []
    for d in dirs:
        latest = {}
        for log in sorted(d.glob("state*.jsonl")):
            for line in log.read_text(errors="replace").splitlines():
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if isinstance(r, dict) and isinstance(r.get("id"), str) and r.get("event") == "finished":
                    latest[r["id"]] = r
        bad = [r for r in latest.values() if r.get("status") not in ("ok", "oom")]
        if not bad:
            continue
        reasons = {}
        for r in bad:
            why = str(r.get("reason") or "no reason recorded")[:200]
            reasons[(str(r.get("status")), why)] = reasons.get((str(r.get("status")), why), 0) + 1
        whys = "; ".join(f"{n} {status}: {why}" for (status, why), n in sorted(reasons.items())[:5])
        out.append(f"{len(bad)} of the {len(latest)} points run in {d} did not complete ({whys})")
    return out
