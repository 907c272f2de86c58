"""One Slurm array task: runs its bundle of sweep points inside the allocation.
Usage (from the generated sbatch script):
python -m dtune_sweep.task SWEEP_DIR SHAPE TASK_ID LAUNCHER [MPIRUN_TUNE_FILE]"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .disk import NoSpace
from .runner import MpirunHosts, run_points
from .spec import Point


def main(argv: list[str]) -> int:
    directory, shape, task, launcher = Path(argv[0]), int(argv[1]), int(argv[2]), argv[3]
    hosts = MpirunHosts(tune=argv[4] if len(argv) > 4 else None)  # the allocation gives the nodes
    bundles = json.loads((directory / "slurm" / f"bundles-{shape}.json").read_text())
    wanted = set(bundles[task])
    points = []
    for p in json.loads((directory / "manifest.json").read_text()):
        if p["id"] in wanted:
            values = p.pop("values", {})
            pid = p.pop("id")
            pt = Point(**p, values=values)
            assert pt.id == pid, "manifest and code disagree on a point's id"
            points.append(pt)
    # This node, not the submitting one, is where the points run: a topology preset that needs a
    # link the node lacks (presets.unmet) refuses the task before anything launches.
    from .cli import check_presets

    why = check_presets(points)
    if why:
        print(f"dtune: error: {why}", file=sys.stderr)
        return 2
    state = f"state-{shape}-{task}.jsonl"
    try:
        return run_points(points, directory, launcher=launcher, state_name=state, write_manifest=False, hosts=hosts)
    except NoSpace as e:  # the points it did not finish stay to run: `dtune sweep slurm` again resumes
        print(f"dtune: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
