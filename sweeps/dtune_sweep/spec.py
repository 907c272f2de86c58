"""Sweep files: parsing, validation and expansion into points.

A sweep file holds one sweep, or several under `sweeps:`. Each sweep names a binary and its fixed
arguments, then axes: `axes` (Cartesian product of flag values), `zip` (lists varied together),
`env` (NCCL_*, UCX_*, OMP_*, OMPI_*, ... variables), `launch` (ranks, nodes, ranks_per_node),
`topology` presets, `exclude` rules, `repeats`, `order` (as-written or random with a recorded seed),
`steps` (the measured iterations of every point), `constraints` (comparisons between flags every
point must satisfy, constraints.py: points breaking one are left out, as excluded ones are).
Every point gets a stable id: a hash of its canonical JSON form, independent of key order.
Planning checks every key's type first (errors name the key path: `sweeps[1].zip[0].--batch`),
then counts the points as the product of the axis lengths times the repeats, before building any,
and refuses more than `max_points`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
import re
import reprlib
from dataclasses import dataclass, field

from .constraints import check_names, holds, parse_constraint, point_values
from .presets import TOPOLOGIES, renamed_message
from .rules import check_launch, check_point
from .safe_yaml import SweepError, key_path, load_yaml

BINARIES = ("dtune-comm", "dtune-train", "dtune-data")
ENV_PREFIXES = ("NCCL_", "UCX_", "OMP_", "OMPI_", "DTUNE_", "CUDA_", "MKL_")
SWEEP_KEYS = {
    "name",
    "binary",
    "args",
    "axes",
    "zip",
    "env",
    "launch",
    "topology",
    "exclude",
    "repeats",
    "order",
    "seed",
    "steps",
    "constraints",
}
# `steps:` sets each binary's measured-iterations flag (dtune-data bench: batches per epoch).
STEPS_FLAG = {"dtune-comm": "--iters", "dtune-train": "--steps", "dtune-data": "--max-batches"}
# Arguments a binary's sweep must start with (dtune-data is swept through its `bench` command).
SUBCOMMAND = {"dtune-data": "bench"}
LAUNCH_KEYS = ("ranks", "nodes", "ranks_per_node")
SCALAR = (str, int, float, bool)
DEFAULT_MAX_POINTS = 100_000
_short = reprlib.Repr()
_short.maxstring, _short.maxother, _short.maxlist, _short.maxdict, _short.maxlevel = 40, 40, 4, 4, 2

__all__ = ["SweepError", "Point", "Sweep", "plan", "load", "DEFAULT_MAX_POINTS"]


@dataclass
class Point:
    sweep: str
    binary: str
    args: list  # the full argument list after the binary (fixed + axes)
    env: dict  # variables exported to every rank
    ranks: int
    nodes: int
    ranks_per_node: int
    repeat: int
    values: dict = field(default_factory=dict)  # the axis values that define the point

    def canonical(self) -> dict:
        return {
            "sweep": self.sweep,
            "binary": self.binary,
            "args": [str(a) for a in self.args],
            "env": dict(sorted(self.env.items())),
            "ranks": self.ranks,
            "nodes": self.nodes,
            "ranks_per_node": self.ranks_per_node,
            "repeat": self.repeat,
        }

    @property
    def id(self) -> str:
        text = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def to_json(self) -> dict:
        """The point as manifests record it: secrets redacted (dtune_report.redact), so the id
        (of the real values) is the one thing that still depends on them."""
        from dtune_report.redact import recordable_point

        return recordable_point({"id": self.id, **self.canonical(), "values": self.values})

    def recorded_whole(self) -> bool:
        """Whether to_json() holds the point's real environment (nothing redacted): what a Slurm
        task, which launches from the manifest, needs."""
        return self.to_json()["env"] == dict(sorted(self.env.items()))


def _type(x) -> str:
    return (
        "null"
        if x is None
        else "a list"
        if isinstance(x, list)
        else "a mapping"
        if isinstance(x, dict)
        else type(x).__name__
    )


class _Keys:
    """Raises SweepError for one file, naming the key path."""

    def __init__(self, file: str):
        self.file = file

    def fail(self, path: list, what: str):
        raise SweepError(f"{self.file}: {key_path(path)}: {what}")


def load(path: str) -> list[dict]:
    """Parse a sweep file into its sweeps (dicts), each with a `name`."""
    doc = load_yaml(path)
    k = _Keys(path)
    if not isinstance(doc, dict):
        k.fail(
            [], f"the file holds {_type(doc)}; write a mapping with 'binary:' (one sweep) or 'sweeps:' (a list of them)"
        )
    if "sweeps" in doc:
        extra = [x for x in doc if x != "sweeps"]
        if extra:
            k.fail([extra[0]], "beside 'sweeps:' the file takes no other key; move it into a sweep")
        sweeps, prefix = doc["sweeps"], ["sweeps"]
        if not isinstance(sweeps, list) or not sweeps:
            k.fail(prefix, f"is {_type(sweeps)}; write a non-empty list of sweeps (- binary: ...)")
    else:
        sweeps, prefix = [doc], None
    names = {}
    for i, s in enumerate(sweeps):
        where = prefix + [i] if prefix else []
        if not isinstance(s, dict):
            k.fail(where, f"is {_type(s)}; each sweep is a mapping with 'binary:'")
        name = s.setdefault("name", f"sweep{i}")
        if not isinstance(name, (str, int)) or isinstance(name, bool) or str(name) == "":
            what = "empty" if name == "" else _type(name)
            k.fail(where + ["name"], f"is {what}; write a name such as name: batch-sweep")
        if str(name) in names:
            k.fail(
                where + ["name"], f"{str(name)!r} names sweeps[{names[str(name)]}] too; give each sweep its own name"
            )
        names[str(name)] = i
        s["_where"] = where
    return sweeps


def _values(k: _Keys, path: list, v) -> list:
    """An axis' values: one scalar or a non-empty list of scalars."""
    values = v if isinstance(v, list) else [v]
    if not values:
        k.fail(path, "empty list of values; give at least one value")
    for x in values:
        if x is None or not isinstance(x, SCALAR):
            k.fail(
                path,
                f"value {_short.repr(x)} has the wrong type ({_type(x)}); use a number or a string, or a list of them",
            )
    return values


def _int(k: _Keys, path: list, v, least: int) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < least:
        k.fail(path, f"{_short.repr(v)} is not an integer >= {least}; write e.g. {path[-1]}: {max(least, 2)}")
    return v


def _mapping(k: _Keys, path: list, v, example: str) -> dict:
    if v is None:
        return {}
    if not isinstance(v, dict):
        k.fail(path, f"is {_type(v)}; write a mapping, e.g. {example}")
    return v


def _flag(k: _Keys, path: list, flag):
    if not isinstance(flag, str) or not flag.startswith("--"):
        k.fail(path, f"axis {_short.repr(flag)} must be a long flag such as --batch")
    return flag


def _env_name(k: _Keys, path: list, name):
    if not isinstance(name, str) or not re.fullmatch(r"[A-Z_][A-Za-z0-9_]*", name) or not name.startswith(ENV_PREFIXES):
        k.fail(
            path,
            f"environment axis {_short.repr(name)} must be a variable starting with one of {', '.join(ENV_PREFIXES)}",
        )
    return name


@dataclass
class Sweep:
    """One sweep, validated but not expanded: `dims` are the dimensions of the product, each a
    list of {(kind, key): value} dicts."""

    file: str
    where: list
    name: str
    binary: str
    args: list
    dims: list
    excludes: list
    repeats: int
    order: str
    seed: int
    constraints: list = field(default_factory=list)

    def count(self) -> int:
        """Points before exclusions: the product of the dimension lengths times the repeats."""
        return math.prod(len(d) for d in self.dims) * self.repeats

    def axis_flags(self):
        for d in self.dims:
            for kind, key in d[0]:
                if kind == "arg":
                    yield key


def _args(k: _Keys, w: list, sweep: dict) -> list:
    args = sweep.get("args", [])
    if isinstance(args, str):
        args = args.split()
    if args is None:
        args = []
    if not isinstance(args, list):
        k.fail(w + ["args"], f"is {_type(args)}; write a list such as args: [-b, 8, -e, 1M]")
    return [str(a) for a in _values(k, w + ["args"], args)] if args else []


def _zip_dims(k: _Keys, w: list, sweep: dict) -> list:
    zips = sweep.get("zip") or []
    if not isinstance(zips, list):
        k.fail(
            w + ["zip"],
            f"is {_type(zips)}; write a list of mappings, e.g. "
            f"zip: [{{--bucket-mb: [1, 25], --first-bucket-mb: [0.5, 1]}}]",
        )
    dims = []
    for i, z in enumerate(zips):
        p = w + ["zip", i]
        if not isinstance(z, dict) or not z:
            k.fail(
                p,
                f"is {_type(z) if z != {} else 'empty'}; write a mapping of axes to equally long "
                f"lists, e.g. {{--bucket-mb: [1, 25], --first-bucket-mb: [0.5, 1]}}",
            )
        lists = {}
        for key, v in z.items():
            if isinstance(key, str) and key.startswith("--"):
                lists[("arg", key)] = _values(k, p + [key], v)
            else:
                lists[("env", _env_name(k, p + [key], key))] = _values(k, p + [key], v)
        lengths = {len(v) for v in lists.values()}
        if len(lengths) != 1:
            k.fail(
                p,
                f"lists of different lengths {sorted(lengths)}; a zip varies its lists together, "
                f"so give each the same number of values",
            )
        dims.append((p, [dict(zip(lists, combo)) for combo in zip(*lists.values())]))
    return dims


def _launch_dims(k: _Keys, w: list, sweep: dict) -> list:
    launch = _mapping(k, w + ["launch"], sweep.get("launch"), "launch: {ranks: [2, 4]}")
    dims = []
    for key in launch:
        if key not in LAUNCH_KEYS:
            k.fail(w + ["launch", key], f"unknown key; launch takes {', '.join(LAUNCH_KEYS)}")
    for key in LAUNCH_KEYS:
        p = w + ["launch", key]
        if key == "ranks" and key not in launch:
            # Not given: nodes x ranks_per_node (1 rank per node without ranks_per_node), set per
            # point in points(); 1 for the default launch, as before.
            dims.append((p, [{("launch", key): None}]))
            continue
        least = 0 if key == "ranks_per_node" else 1
        values = [_int(k, p, x, least) for x in _values(k, p, launch.get(key, least))]
        dims.append((p, [{("launch", key): x} for x in values]))
    return dims


def _topology_dim(k: _Keys, w: list, sweep: dict, env_names: set) -> tuple:
    p = w + ["topology"]
    topo = _values(k, p, sweep.get("topology", "default"))
    for t in topo:
        if renamed_message(t):
            k.fail(p, renamed_message(t))
        if t not in TOPOLOGIES:
            k.fail(p, f"topology {_short.repr(t)} is not one of {sorted(TOPOLOGIES)}")
        both = sorted(env_names & set(TOPOLOGIES[t]))
        if both:
            k.fail(
                p,
                f"topology {t!r} sets {both[0]}, which an env or zip axis also sets (the preset "
                f"would override it); drop one of the two",
            )
    return p, [{("topology", "topology"): t} for t in topo]


def _excludes(k: _Keys, w: list, sweep: dict, axis_names: set) -> list:
    excludes = sweep.get("exclude") or []
    if not isinstance(excludes, list):
        k.fail(
            w + ["exclude"],
            f"is {_type(excludes)}; write a list of rules, e.g. exclude: [{{--batch: 64, --precision: fp32}}]",
        )
    for i, rule in enumerate(excludes):
        p = w + ["exclude", i]
        if not isinstance(rule, dict) or not rule:
            k.fail(
                p,
                f"is {_type(rule) if rule != {} else 'empty'}; write a mapping of axis to value, "
                f"e.g. {{--batch: 64, --precision: fp32}}",
            )
        for key, v in rule.items():
            if key not in axis_names:
                k.fail(
                    p + [key],
                    f"{_short.repr(key)} is not an axis of this sweep, so the rule would "
                    f"never match; axes: {', '.join(sorted(map(str, axis_names)))}",
                )
            if v is None or not isinstance(v, SCALAR):
                k.fail(p + [key], f"is {_type(v)}; an exclude rule names one value per axis (write one rule per value)")
    return excludes


def parse(file: str, sweep: dict) -> Sweep:
    """Checks one sweep (from load) key by key; nothing is expanded."""
    k = _Keys(file)
    w = sweep.pop("_where", [])
    name = str(sweep["name"])
    for key in sweep:
        if key not in SWEEP_KEYS:
            k.fail(w + [key], f"unknown key; a sweep takes {', '.join(sorted(SWEEP_KEYS))}")
    binary = sweep.get("binary")
    if not isinstance(binary, str) or binary not in BINARIES:
        k.fail(w + ["binary"], f"binary {_short.repr(binary)} is not one of {list(BINARIES)}")
    args = _args(k, w, sweep)
    if binary in SUBCOMMAND and (not args or args[0] != SUBCOMMAND[binary]):
        k.fail(
            w + ["args"],
            f"a {binary} sweep runs `{binary} {SUBCOMMAND[binary]}`: write args: [{SUBCOMMAND[binary]}, DATASET, ...]",
        )
    if "steps" in sweep:
        args += [STEPS_FLAG[binary], str(_int(k, w + ["steps"], sweep["steps"], 1))]
    dims = []  # (key path, [{(kind, key): value}, ...])
    for flag, v in _mapping(k, w + ["axes"], sweep.get("axes"), "axes: {--batch: [8, 16]}").items():
        _flag(k, w + ["axes", flag], flag)
        dims.append((w + ["axes", flag], [{("arg", flag): x} for x in _values(k, w + ["axes", flag], v)]))
    dims += _zip_dims(k, w, sweep)
    for name_, v in _mapping(k, w + ["env"], sweep.get("env"), "env: {NCCL_ALGO: [Ring, Tree]}").items():
        p = w + ["env", name_]
        dims.append((p, [{("env", _env_name(k, p, name_)): x} for x in _values(k, p, v)]))
    seen = {}
    for p, d in dims:
        for _kind, key in d[0]:
            if key in seen:
                k.fail(
                    p + ([key] if p[-1] != key else []),
                    f"{key} is also an axis at {key_path(seen[key])}; vary it in one place",
                )
            seen[key] = p
    fixed = {a.split("=", 1)[0]: a for a in args if a.startswith("-")}
    for key, p in seen.items():
        if key in fixed:  # the binary would get the flag twice and refuse every point
            where = "steps" if "steps" in sweep and key == STEPS_FLAG[binary] else "args"
            k.fail(
                p,
                f"{key} is also a fixed argument ({key_path(w + [where])}: {' '.join(args)}); give it in one "
                f"place: drop it from args, or drop the axis",
            )
    env_names = {key for _, d in dims for (kind, key) in d[0] if kind == "env"}
    dims += _launch_dims(k, w, sweep)
    dims.append(_topology_dim(k, w, sweep, env_names))
    axis_names = set(seen) | set(LAUNCH_KEYS) | {"topology"}
    excludes = _excludes(k, w, sweep, axis_names)
    repeats = _int(k, w + ["repeats"], sweep.get("repeats", 1), 1)
    order = sweep.get("order", "as-written")
    if order not in ("as-written", "random"):
        k.fail(w + ["order"], f"{_short.repr(order)} is not as-written or random")
    seed = sweep.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        k.fail(w + ["seed"], f"is {_type(seed)}; write one integer, e.g. seed: 7")
    constraints = _constraints(k, w, sweep, binary, args, set(seen))
    return Sweep(file, w, name, binary, args, [d for _, d in dims], excludes, repeats, order, seed, constraints)


def _constraints(k: _Keys, w: list, sweep: dict, binary: str, args: list, axis_names: set) -> list:
    raw = sweep.get("constraints") or []
    if not isinstance(raw, list):
        k.fail(
            w + ["constraints"],
            f"is {_type(raw)}; write a list, e.g. constraints: ['--first-bucket-mb <= --bucket-mb']",
        )
    out = []
    for i, text in enumerate(raw):
        try:
            out.append(parse_constraint(text))
        except ValueError as e:
            k.fail(w + ["constraints", i], str(e))
    fixed = {a for a in args if str(a).startswith("-")}
    check_names(k.file, key_path(w + ["constraints"]), out, binary, axis_names | fixed)
    return out


def _satisfies(sw: Sweep, args: list, env: dict, launch: dict) -> bool:
    if not sw.constraints:
        return True
    values = point_values(sw.binary, args, env, launch)
    for c in sw.constraints:
        try:
            if not holds(c, values):
                return False
        except ValueError as e:
            raise SweepError(f"{sw.file}: {key_path(sw.where + ['constraints'])}: {e}") from None
    return True


def check_flags(sw: Sweep, known_flags: dict | None) -> None:
    """Every axis must be a flag of the binary (`known_flags`: binary -> its flags from --help)."""
    flags = (known_flags or {}).get(sw.binary) if known_flags is not None else None
    if flags is None:
        return
    for flag in sw.axis_flags():
        if flag not in flags:
            raise SweepError(
                f"{sw.file}: {key_path(sw.where + ['axes', flag])}: unknown axis '{flag}' "
                f"(not a flag of {sw.binary}; see its --help)"
            )


def points(sw: Sweep) -> list[Point]:
    """All points of one sweep, in run order."""
    out = []
    for combo in itertools.product(*sw.dims):
        values = {}
        for d in combo:
            values.update(d)
        if values[("launch", "ranks")] is None:
            values[("launch", "ranks")] = values[("launch", "nodes")] * max(values[("launch", "ranks_per_node")], 1)
        flat = {k[1]: v for k, v in values.items()}
        if any(all(str(flat.get(k)) == str(v) for k, v in rule.items()) for rule in sw.excludes):
            continue
        env = {k[1]: str(v) for k, v in values.items() if k[0] == "env"}
        env.update(TOPOLOGIES[values[("topology", "topology")]])
        axis_args = []
        for (kind, k), v in values.items():
            if kind == "arg":
                axis_args += [k] if v is True else [] if v is False else [k, str(v)]
        launch = {k: values[("launch", k)] for k in LAUNCH_KEYS}
        if not _satisfies(sw, sw.args + axis_args, env, launch):
            continue
        for r in range(sw.repeats):
            out.append(
                Point(
                    sw.name,
                    sw.binary,
                    sw.args + axis_args,
                    env,
                    values[("launch", "ranks")],
                    values[("launch", "nodes")],
                    values[("launch", "ranks_per_node")],
                    r,
                    flat,
                )
            )
    if not out:
        key = "constraints" if sw.constraints else "exclude"
        raise SweepError(
            f"{sw.file}: {key_path(sw.where + [key])}: no points left after the exclusions"
            f"{' and constraints' if sw.constraints else ''}; remove a rule"
        )
    if sw.order == "random":
        random.Random(sw.seed).shuffle(out)
    return out


def check_rules(sw: Sweep, pts: list[Point], show: int = 20) -> None:
    """Every point against its binary's cross-flag rules (rules.py); a SweepError names the points
    that break one, with the rule, before anything runs."""
    launch_bad = {p.id for p in pts if check_launch(p.ranks, p.nodes, p.ranks_per_node)}
    bad = [(p, check_launch(p.ranks, p.nodes, p.ranks_per_node) + check_point(p.binary, p.args, p.ranks)) for p in pts]
    bad = [(p, why) for p, why in bad if why]
    if not bad:
        return
    where = key_path(sw.where) if sw.where else sw.name
    lines = [
        f"{sw.file}: {where}: {len(bad)} of {len(pts)} points of sweep '{sw.name}' break "
        f"{sw.binary}'s cross-flag rules or the launch rules (nothing was run; change the values, or add `exclude` "
        f"rules for these combinations):"
    ]
    listed = [(p, why) for p, why in bad if p.repeat == 0]  # repeats break the same rules
    for p, why in listed[:show]:
        # The launch's values only where a launch rule is what the point breaks.
        shown = [k for k in p.values if str(k).startswith("-") or (p.id in launch_bad and k in LAUNCH_KEYS)]
        values = " ".join(f"{k} {p.values[k]}" for k in shown)
        lines.append(f"  {p.id}  {values or '(fixed args)'}: {'; '.join(why)}")
    if len(listed) > show:
        lines.append(f"  ... {len(listed) - show} more")
    raise SweepError("\n".join(lines))


def plan(path: str, known_flags=None, max_points: int | None = DEFAULT_MAX_POINTS) -> list[Point]:
    """The points of every sweep in the file. `known_flags`: binary -> set of flags, or a function
    returning that (called only once the file passed every other check), or None to skip the flag
    check. More than `max_points` points (counted before any is built) is a SweepError."""
    sweeps = [parse(path, s) for s in load(path)]
    counts = [sw.count() for sw in sweeps]
    if max_points is not None and sum(counts) > max_points:
        i = max(range(len(sweeps)), key=counts.__getitem__)
        raise SweepError(
            f"{path}: {key_path(sweeps[i].where) if sweeps[i].where else sweeps[i].name}: "
            f"the file plans {sum(counts):,} points ({counts[i]:,} in sweep "
            f"'{sweeps[i].name}', product of its axis lengths times repeats, before "
            f"exclusions), more than --max-points {max_points:,}; shrink the axes or "
            f"raise --max-points"
        )
    if callable(known_flags):
        known_flags = known_flags()
    out = []
    for sw in sweeps:
        check_flags(sw, known_flags)
        pts = points(sw)
        check_rules(sw, pts)
        out += pts
    ids = [p.id for p in out]
    if len(set(ids)) != len(ids):
        raise SweepError(f"{path}: two points are identical (the same arguments, environment and repeat)")
    return out
