"""dtune tune --slurm through a real Slurm (the local_slurm fixture): the small real tune of
tests/sweeps/test_tune_real.py, each rung submitted as job arrays (srun --mpi=pmix) and waited for,
each array task with its own state log, then the same record, merge and recommendation."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(REPO / "tests" / "sweeps"))
from local_slurm import LocalSlurm  # noqa: E402
from test_tune_real import SPACE, check_tune  # noqa: E402

DTUNE = [str(REPO / "scripts" / "dtune")]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    s = LocalSlurm(tmp_path_factory.mktemp("slurm"))
    missing = s.missing()
    if missing:
        pytest.fail(f"{missing} not found: scripts/setup.sh installs slurm-wlm and munge")
    s.start()
    yield s
    s.stop()


def test_small_tune_through_slurm(tmp_path, slurm):
    f = tmp_path / "tiny.yaml"
    f.write_text(SPACE)
    out = tmp_path / "out"
    r = subprocess.run(
        DTUNE + ["tune", str(f), "--out", str(out), "--slurm", "--throttle", "2", "--no-report"],
        capture_output=True,
        text=True,
        timeout=900,
        env=slurm.env,
    )
    assert r.returncode == 0, r.stdout + r.stderr + slurm.logs()
    # The first rung's incumbent alone, then one array per block of each rung (one launch shape): a
    # block's outcome decides what the next launches (a failed candidate is not launched again).
    blocks = sum(int(b) for b in re.findall(r"x (\d+) block\(s\)", r.stdout.splitlines()[0]))
    assert blocks >= 2 and r.stdout.count("submitted job array") == 1 + blocks, r.stdout
    check_tune(out, r.stdout)
    assert not (out / "state.jsonl").exists()  # every run was an array task's, in its task's log
    assert list(out.glob("state-*.jsonl"))
