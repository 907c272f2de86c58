"""Slurm job arrays for a sweep. Points are grouped by resource shape (ranks, nodes, ranks per
node) and cut into bundles; each shape gets one sbatch script whose array has one task per bundle
(`--array=0-(B-1)%throttle`). A task runs its bundle's points one after another with
`srun --mpi=pmix` (or mpirun) and records them in its own state log, so tasks never write the same
file. Jobs are submitted with --no-kill: a failed node fails the points that needed it, and the
task goes on with the rest (runner.allocation_shortfall). No point's arguments or environment
appear in the scripts: tasks read them from the sweep's manifest and pass them as argument lists,
so nothing in a sweep file can reach a shell. Under Slurm the allocation gives the nodes, so a
hostfile is refused; a task that launches with mpirun can be given a tune file (mpirun_tune)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

from .runner import MpirunHosts
from .spec import Point, SweepError

HOSTFILE_REFUSED = (
    "--hostfile: under Slurm the job's allocation gives the nodes (sbatch --nodes from the points' "
    "launch: nodes; srun, and mpirun inside the job, start the ranks on them); a hostfile is for "
    "dtune sweep run and dtune tune without --slurm"
)


def mpirun_tune(hostfile: str | None, tune: str | None, launcher: str) -> str | None:
    """The tune file (absolute) the array tasks pass to mpirun, or None; SweepError for a hostfile
    (HOSTFILE_REFUSED), a tune file that is not there, or one with the srun launcher."""
    if hostfile:
        raise SweepError(HOSTFILE_REFUSED)
    if not tune:
        return None
    if launcher != "mpirun":
        raise SweepError(
            f"--mpirun-tune {tune}: the tasks launch with srun, which does not read mpirun's tune file "
            "(give --launcher mpirun, or the MCA settings as OMPI_MCA_* in the sweep's env)"
        )
    return str(Path(MpirunHosts.checked(None, tune).tune).resolve())


def shapes(points: list[Point]) -> "OrderedDict[tuple, list[Point]]":
    out: OrderedDict = OrderedDict()
    for p in points:
        out.setdefault((p.ranks, p.nodes, p.ranks_per_node), []).append(p)
    return out


def _directive(opt: str) -> str:
    if "\n" in opt or "\r" in opt or not opt.startswith("-"):
        raise SweepError(f"--sbatch option {opt!r}: give one option such as --partition=gpu (no newlines)")
    return f"#SBATCH {opt}"


def write_scripts(
    points: list[Point],
    directory: Path,
    sbatch_opts: list[str],
    throttle: int,
    per_task: int,
    launcher: str,
    tune: str | None = None,
) -> list[Path]:
    """Writes manifest.json, slurm/bundles-<k>.json and slurm/shape-<k>.sbatch; returns the scripts.
    `tune`: mpirun's tune file for every point (launcher mpirun; see mpirun_tune)."""
    secret = next((p for p in points if not p.recorded_whole()), None)
    if secret is not None:
        names = sorted(k for k, v in secret.to_json()["env"].items() if v != secret.env[k])
        raise SweepError(
            f"point {secret.id} sets {', '.join(names)}, whose value is a secret (or a URL with user-info): "
            "Slurm tasks launch from the sweep's manifest, which never records it; export it before "
            "submitting (sbatch passes your environment to the tasks) and leave it out of the sweep file"
        )
    directory = directory.resolve()
    (directory / "points").mkdir(parents=True, exist_ok=True)
    sdir = directory / "slurm"
    sdir.mkdir(exist_ok=True)
    (directory / "manifest.json").write_text(json.dumps([p.to_json() for p in points], indent=1))
    scripts = []
    python = shlex.quote(sys.executable)
    # Both packages: the runner redacts what it records with dtune_report.redact.
    here = Path(__file__).resolve().parents[1]
    pkg = shlex.quote(f"{here}:{here.parent / 'report'}")
    for k, ((ranks, nodes, rpn), pts) in enumerate(shapes(points).items()):
        bundles = [[p.id for p in pts[i : i + per_task]] for i in range(0, len(pts), per_task)]
        (sdir / f"bundles-{k}.json").write_text(json.dumps(bundles))
        lines = [
            "#!/bin/bash",
            f"#SBATCH --job-name=dtune-sweep-{k}",
            f"#SBATCH --array=0-{len(bundles) - 1}%{throttle}",
            f"#SBATCH --ntasks={ranks}",
            f"#SBATCH --nodes={nodes}",
            f"#SBATCH --output={shlex.quote(str(sdir / f'shape-{k}-task-%a.out'))}",
        ]
        if rpn:
            lines.append(f"#SBATCH --ntasks-per-node={rpn}")
        # A node failure ends the point running on it (srun: "Node failure on NODE"), not the
        # whole task: without --no-kill Slurm cancels the job and requeues it, and the requeued
        # task waits for the dead node. The runner then fails the bundle's points that need more
        # nodes than the job still holds, with that reason, and runs the others.
        lines.append("#SBATCH --no-kill")
        lines += [_directive(o) for o in sbatch_opts]
        lines += [
            "set -euo pipefail",
            f"export PYTHONPATH={pkg}${{PYTHONPATH:+:$PYTHONPATH}}",
            f"exec {python} -m dtune_sweep.task {shlex.quote(str(directory))} {k} "
            f'"$SLURM_ARRAY_TASK_ID" {shlex.quote(launcher)}' + (f" {shlex.quote(tune)}" if tune else ""),
            "",
        ]
        script = sdir / f"shape-{k}.sbatch"
        script.write_text("\n".join(lines))
        scripts.append(script)
    return scripts


def submit(scripts: list[Path]) -> list[str]:
    ids = []
    for s in scripts:
        r = subprocess.run(["sbatch", "--parsable", str(s)], capture_output=True, text=True)
        if r.returncode != 0:
            raise SweepError(f"sbatch {s} failed: {r.stderr.strip()}")
        ids.append(r.stdout.strip().split(";")[0])
    return ids
