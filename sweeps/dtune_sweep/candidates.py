"""What `dtune tune` knows of a candidate: its run at a given number of steps (steps_of,
with_steps), the cost model taught from its runs (teach), its record and label in tune.json
(measured_record, label) and, for the winner, the recommendation users copy. A leaf: it imports
neither interleaved.py nor tune.py, which drives it.
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path

from . import runner
from .halving import Measured
from .spec import Point, SweepError

STEPS_FLAGS = {"dtune-train": ("--steps",), "dtune-comm": ("--iters", "-n")}
DEFAULT_STEPS = {"dtune-train": 10, "dtune-comm": 20}
ENV_PREFIX = {"dtune-train": "DTUNE_TRAIN_", "dtune-comm": "DTUNE_COMM_"}
# A flag whose environment fallback is named after another spelling of it (CLI11 aliases).
ENV_SPELLING = {"dtune-train": {"--pp": "--pipeline-stages"}}


class TuneError(SweepError):
    """Bad input to `dtune tune` (exit 2)."""


def steps_of(p: Point) -> int:
    flags = STEPS_FLAGS[p.binary]
    value = None
    for i, a in enumerate(p.args[:-1]):
        if a in flags:
            value = p.args[i + 1]
    try:
        return int(value) if value is not None else DEFAULT_STEPS[p.binary]
    except ValueError:
        raise TuneError(f"sweep '{p.sweep}': {flags[0]} {value!r} is not a number of steps") from None


def with_steps(p: Point, steps: int) -> Point:
    """The point measured for `steps` steps (its steps flag replaced, or added)."""
    flags = STEPS_FLAGS[p.binary]
    args, found = list(p.args), False
    for i in range(len(args) - 1):
        if args[i] in flags:
            args[i + 1], found = str(steps), True
    if not found:
        args += [flags[0], str(steps)]
    return replace(p, args=args, values={**p.values, "steps": steps})


def teach(model, runs, pts, keys, ok) -> None:
    """Teaches a cost model the finished runs it has not seen (pts[i] a run of candidate keys[i],
    read through `runs`, a Runs): each one's run time, and its steps' time when ok(p, key) says it
    measured. Halving's Sweep.run learns through it."""
    secs = runs.seconds_by_id({p.id for p in pts} - model.seen())
    for p, key in zip(pts, keys):
        if p.id in secs:
            b = runs.step_seconds(p) if ok(p, key) else None
            model.observe(p.id, key, secs[p.id], steps_of(p), b)


def measured_record(m: Measured, p: Point, higher: bool) -> dict:
    from dtune_report.compare import bootstrap_median_ci
    from dtune_report.redact import recordable_values

    r = {"id": p.id, "values": recordable_values(axis_values(p)), "status": m.status, "n": int(len(m.samples))}
    if m.why:
        r["reason"] = m.why
    if m.ok:
        lo, hi = bootstrap_median_ci(m.samples)
        r.update(median=m.median, lo=lo, hi=hi)
    return r


def axis_values(p: Point) -> dict:
    return {str(k): v for k, v in p.values.items() if k != "steps"}


def label(values: dict) -> str:
    from dtune_report.redact import recordable_values

    parts = []
    for k, v in recordable_values(values).items():
        if k in ("ranks", "nodes", "ranks_per_node") or (k == "topology" and v == "default"):
            continue
        parts.append(k if v is True else f"{k} {v}" if str(k).startswith("-") else f"{k}={v}")
    return " ".join(parts) or "(fixed arguments)"


def recommendation(p: Point, directory: Path, top_ids: list[str], hosts=None) -> dict:
    """The winner's flags, its whole command (placed as the runs were: runner.placement_options),
    an `export` block and, for an NCCL space, an nccl_tuner.conf from the top rung's runs. A
    variable whose value is redacted (dtune_report.redact) is passed by name (`-x NAME`: mpirun
    takes the user's value) and checked in the export block; `fill_in` names them."""
    from dtune_report.redact import recordable_env

    env = recordable_env(p.env)
    fill_in = sorted(k for k in env if env[k] != str(p.env[k]))
    axis_flags = [(k, v) for k, v in p.values.items() if str(k).startswith("-") and k != "steps" and v is not False]
    flags = " ".join(shlex.quote(k) if v is True else f"{shlex.quote(k)} {shlex.quote(str(v))}" for k, v in axis_flags)
    launch = ["mpirun", "-np", str(p.ranks), *runner.placement_options(p, hosts)]
    for k, v in sorted(env.items()):
        launch += ["-x", k if k in fill_in else f"{k}={v}"]
    command = " ".join(map(shlex.quote, launch + [f"build/bin/{p.binary}", *p.args]))
    export = [
        f'export {k}="${{{k}:?fill in {k}: its value is redacted}}"' if k in fill_in else f"export {k}={shlex.quote(v)}"
        for k, v in sorted(env.items())
    ]
    prefix = ENV_PREFIX.get(p.binary)
    if prefix:
        for k, v in axis_flags:
            name = prefix + ENV_SPELLING.get(p.binary, {}).get(k, k).lstrip("-").upper().replace("-", "_")
            export.append(f"export {name}={shlex.quote('1' if v is True else str(v))}")
    conf = None
    if p.binary == "dtune-comm" and {"NCCL_ALGO", "NCCL_PROTO"} <= set(p.env):
        from dtune_report.loader import load_comm_runs, load_comm_summary
        from dtune_report.tables import nccl_tuner_conf

        files = [directory / "points" / f"{i}.h5" for i in top_ids if (directory / "points" / f"{i}.h5").exists()]
        if files:
            conf = nccl_tuner_conf(load_comm_summary(files), load_comm_runs(files))
    return {"flags": flags, "command": command, "export": export, "nccl_tuner_conf": conf, "fill_in": fill_in}
