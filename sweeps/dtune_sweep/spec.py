"""Sweep files: parsing, validation and expansion into points.

A sweep file holds one sweep, or several under `sweeps:`. Each sweep names a binary and its fixed
arguments, then axes: `axes` (Cartesian product of flag values), `zip` (lists varied together),
`env` (NCCL_*, UCX_*, OMP_*, OMPI_*, ... variables), `launch` (ranks, nodes, ranks_per_node),
`topology` presets, `exclude` rules, `repeats`, `order` (as-written or random with a recorded seed),
`steps` (the measured iterations of every point).
Every point gets a stable id: a hash of its canonical JSON form, independent of key order.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import random
import re
from dataclasses import dataclass, field

import yaml

from .presets import TOPOLOGIES, renamed_message

BINARIES = ("dtune-comm", "dtune-train")
ENV_PREFIXES = ("NCCL_", "UCX_", "OMP_", "OMPI_", "DTUNE_", "CUDA_", "MKL_")
SWEEP_KEYS = {"name", "binary", "args", "axes", "zip", "env", "launch", "topology", "exclude",
              "repeats", "order", "seed", "steps"}
# `steps:` sets each binary's measured-iterations flag.
STEPS_FLAG = {"dtune-comm": "--iters", "dtune-train": "--steps"}
LAUNCH_KEYS = {"ranks", "nodes", "ranks_per_node"}
SCALAR = (str, int, float, bool)


class SweepError(Exception):
    """A sweep file that cannot be run; the message says where and what to change (exit 2)."""


@dataclass
class Point:
    sweep: str
    binary: str
    args: list          # the full argument list after the binary (fixed + axes)
    env: dict           # variables exported to every rank
    ranks: int
    nodes: int
    ranks_per_node: int
    repeat: int
    values: dict = field(default_factory=dict)  # the axis values that define the point

    def canonical(self) -> dict:
        return {"sweep": self.sweep, "binary": self.binary, "args": [str(a) for a in self.args],
                "env": dict(sorted(self.env.items())), "ranks": self.ranks, "nodes": self.nodes,
                "ranks_per_node": self.ranks_per_node, "repeat": self.repeat}

    @property
    def id(self) -> str:
        text = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def to_json(self) -> dict:
        return {"id": self.id, **self.canonical(), "values": self.values}


def _where(node) -> str:
    m = getattr(node, "start_mark", None)
    return f"line {m.line + 1}, column {m.column + 1}" if m else "?"


def load(path: str) -> list[dict]:
    """Parse a sweep file into its sweeps (dicts), keeping line numbers for messages."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise SweepError(f"{path}: cannot read ({e.strerror})") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        m = e.problem_mark
        where = f"line {m.line + 1}, column {m.column + 1}" if m else "?"
        raise SweepError(f"{path}: YAML syntax error at {where}: {e.problem}") from None
    if not isinstance(doc, dict):
        raise SweepError(f"{path}: expected a mapping with 'binary' (or 'sweeps:'), got {type(doc).__name__}")
    sweeps = doc["sweeps"] if "sweeps" in doc else [doc]
    if not isinstance(sweeps, list) or not sweeps:
        raise SweepError(f"{path}: 'sweeps' must be a non-empty list")
    for i, s in enumerate(sweeps):
        if not isinstance(s, dict):
            raise SweepError(f"{path}: sweeps[{i}] must be a mapping")
        s.setdefault("name", f"sweep{i}")
    return sweeps


def _scalar_list(path, where, v) -> list:
    values = v if isinstance(v, list) else [v]
    if not values:
        raise SweepError(f"{path}: {where}: empty list of values")
    for x in values:
        if not isinstance(x, SCALAR):
            raise SweepError(f"{path}: {where}: value {x!r} has the wrong type "
                             f"({type(x).__name__}); use a number or a string")
    return values


def _check_flag(path, where, flag, known_flags):
    if not isinstance(flag, str) or not flag.startswith("--"):
        raise SweepError(f"{path}: {where}: axis '{flag}' must be a long flag such as --batch")
    if known_flags is not None and flag not in known_flags:
        raise SweepError(f"{path}: {where}: unknown axis '{flag}' (not a flag of the binary; see its --help)")


def expand(path: str, sweep: dict, known_flags: dict | None = None) -> list[Point]:
    """All points of one sweep, in run order. `known_flags` maps binary -> set of its flags
    (from --help) to reject unknown axes; None skips that check."""
    name = str(sweep["name"])
    where = f"sweep '{name}'"
    unknown = set(sweep) - SWEEP_KEYS
    if unknown:
        raise SweepError(f"{path}: {where}: unknown key(s) {sorted(unknown)} (allowed: {sorted(SWEEP_KEYS)})")
    binary = sweep.get("binary")
    if binary not in BINARIES:
        raise SweepError(f"{path}: {where}: binary {binary!r} is not one of {list(BINARIES)}")
    flags = (known_flags or {}).get(binary) if known_flags is not None else None
    args = sweep.get("args", [])
    if isinstance(args, str):
        args = args.split()
    if not isinstance(args, list):
        raise SweepError(f"{path}: {where}: args must be a list")
    args = [str(a) for a in _scalar_list(path, f"{where}: args", args)] if args else []
    if "steps" in sweep:
        steps = sweep["steps"]
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            raise SweepError(f"{path}: {where}: steps must be a positive integer")
        args += [STEPS_FLAG[binary], str(steps)]

    axes = []  # list of (kind, key) -> values, each a "dimension" of the product
    dims = []
    for flag, v in (sweep.get("axes") or {}).items():
        _check_flag(path, f"{where}: axes", flag, flags)
        dims.append([{("arg", flag): x} for x in _scalar_list(path, f"{where}: axes.{flag}", v)])
    for i, z in enumerate(sweep.get("zip") or []):
        if not isinstance(z, dict) or not z:
            raise SweepError(f"{path}: {where}: zip[{i}] must map axes to equally long lists")
        lists = {}
        for k, v in z.items():
            if k.startswith("--"):
                _check_flag(path, f"{where}: zip[{i}]", k, flags)
                lists[("arg", k)] = _scalar_list(path, f"{where}: zip[{i}].{k}", v)
            else:
                lists[("env", _env_name(path, f"{where}: zip[{i}]", k))] = _scalar_list(path, f"{where}: zip[{i}].{k}", v)
        lengths = {len(v) for v in lists.values()}
        if len(lengths) != 1:
            raise SweepError(f"{path}: {where}: zip[{i}]: lists of different lengths {sorted(lengths)}")
        dims.append([dict(zip(lists, combo)) for combo in zip(*lists.values())])
    for k, v in (sweep.get("env") or {}).items():
        dims.append([{("env", _env_name(path, f"{where}: env", k)): x}
                     for x in _scalar_list(path, f"{where}: env.{k}", v)])
    launch = sweep.get("launch") or {}
    if not isinstance(launch, dict) or set(launch) - LAUNCH_KEYS:
        raise SweepError(f"{path}: {where}: launch takes {sorted(LAUNCH_KEYS)}")
    for k in ("ranks", "nodes", "ranks_per_node"):
        values = _scalar_list(path, f"{where}: launch.{k}", launch.get(k, 1 if k != "ranks_per_node" else 0))
        for x in values:
            if not isinstance(x, int) or isinstance(x, bool) or x < (0 if k == "ranks_per_node" else 1):
                raise SweepError(f"{path}: {where}: launch.{k}: {x!r} is not a positive integer")
        dims.append([{("launch", k): x} for x in values])
    topo = _scalar_list(path, f"{where}: topology", sweep.get("topology", "default"))
    for t in topo:
        if renamed_message(t):
            raise SweepError(f"{path}: {where}: {renamed_message(t)}")
        if t not in TOPOLOGIES:
            raise SweepError(f"{path}: {where}: topology {t!r} is not one of {sorted(TOPOLOGIES)}")
    dims.append([{("topology", "topology"): t} for t in topo])

    excludes = sweep.get("exclude") or []
    if not isinstance(excludes, list) or not all(isinstance(e, dict) for e in excludes):
        raise SweepError(f"{path}: {where}: exclude must be a list of mappings (axis: value)")
    repeats = sweep.get("repeats", 1)
    if not isinstance(repeats, int) or repeats < 1:
        raise SweepError(f"{path}: {where}: repeats must be a positive integer")
    order = sweep.get("order", "as-written")
    if order not in ("as-written", "random"):
        raise SweepError(f"{path}: {where}: order must be as-written or random")

    points = []
    for combo in itertools.product(*dims):
        values = {}
        for d in combo:
            values.update(d)
        flat = {k[1]: v for k, v in values.items()}
        if any(all(str(flat.get(k)) == str(v) for k, v in rule.items()) for rule in excludes):
            continue
        env = {k[1]: str(v) for k, v in values.items() if k[0] == "env"}
        env.update(TOPOLOGIES[values[("topology", "topology")]])
        axis_args = []
        for (kind, k), v in values.items():
            if kind == "arg":
                axis_args += [k] if v is True else [] if v is False else [k, str(v)]
        for r in range(repeats):
            points.append(Point(name, binary, args + axis_args, env, values[("launch", "ranks")],
                                values[("launch", "nodes")], values[("launch", "ranks_per_node")], r, flat))
    if not points:
        raise SweepError(f"{path}: {where}: no points left after the exclusions")
    if order == "random":
        random.Random(sweep.get("seed", 0)).shuffle(points)
    return points


def _env_name(path, where, k):
    if not isinstance(k, str) or not re.fullmatch(r"[A-Z_][A-Za-z0-9_]*", k) or not k.startswith(ENV_PREFIXES):
        raise SweepError(f"{path}: {where}: environment axis {k!r} must be a variable starting with one of "
                         f"{', '.join(ENV_PREFIXES)}")
    return k


def plan(path: str, known_flags: dict | None = None) -> list[Point]:
    points = []
    for s in load(path):
        points += expand(path, s, known_flags)
    ids = [p.id for p in points]
    if len(set(ids)) != len(ids):
        raise SweepError(f"{path}: two points are identical (the same arguments, environment and repeat)")
    return points
