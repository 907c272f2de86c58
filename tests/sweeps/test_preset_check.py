"""A topology preset that needs NVLink (nccl-p2p-nvl) against this machine's topology as the real
dtune-probe topology detects it: refused before anything launches (dtune sweep run and dtune tune
exit 2 with one line naming the preset and what was detected; a Slurm task refuses on its node),
only a warning from dtune sweep plan; accepted where NVLink joins the GPUs; and no detection at all
for sweeps whose presets need no link."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import bin_dir

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "sweeps"))
sys.path.insert(0, str(REPO / "report"))
from dtune_sweep import task  # noqa: E402
from dtune_sweep.cli import check_presets  # noqa: E402
from dtune_sweep.hardware import Detected, detect  # noqa: E402
from dtune_sweep.presets import unmet  # noqa: E402
from dtune_sweep.spec import plan  # noqa: E402

SWEEP = "binary: dtune-comm\nargs: [-b, 8, -e, 64, -n, 1]\ntopology: [mpi-shm, {}]\n"


def sweep_file(tmp_path, preset="nccl-p2p-nvl"):
    p = tmp_path / "s.yaml"
    p.write_text(SWEEP.format(preset))
    return p


def dtune(*args):
    env = dict(os.environ, PYTHONPATH=f"{REPO / 'sweeps'}:{REPO / 'report'}", DTUNE_BIN_DIR=str(bin_dir()))
    cmd = [sys.executable, "-m", "dtune_sweep.cli", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def here():
    if not (bin_dir() / "dtune-probe").exists():
        pytest.fail(f"{bin_dir() / 'dtune-probe'} does not exist: build first")
    os.environ["DTUNE_BIN_DIR"] = str(bin_dir())
    return detect()


def test_detected_topology_is_this_machines(here):
    r = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True) if here.gpus else None
    if r is not None and r.returncode == 0:
        assert here.nvlink == any(c.startswith("NV") for c in r.stdout.split())
    else:
        assert not here.nvlink and "no NVLink" in here.summary


def test_sweep_run_refuses_before_launching(here, tmp_path):
    f, out = sweep_file(tmp_path), tmp_path / "out"
    r = dtune("sweep", "run", f, "--out", out)
    if here.nvlink:  # a machine with NVLink: the preset runs (no refusal line)
        assert "needs NVLink" not in r.stderr
        return
    assert r.returncode == 2, r.stdout + r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert "'nccl-p2p-nvl'" in line and "needs NVLink" in line and here.summary in line
    assert not out.exists() or not (out / "points").exists()  # nothing launched


def test_tune_refuses_and_plan_only_warns(here, tmp_path):
    f = sweep_file(tmp_path)
    if here.nvlink:
        assert check_presets(plan(str(f))) is None
        return
    r = dtune("tune", f, "--out", tmp_path / "tune", "--budget", "2")
    assert r.returncode == 2 and "'nccl-p2p-nvl'" in r.stderr, r.stdout + r.stderr
    r = dtune("sweep", "plan", f)
    assert r.returncode == 0, r.stderr
    (warn,) = [ln for ln in r.stdout.splitlines() if ln.startswith("# warning:")]
    assert "'nccl-p2p-nvl'" in warn and "needs NVLink" in warn


def test_slurm_task_refuses_on_its_node(here, tmp_path):
    if here.nvlink:  # the task would run its points: the check passing is what matters
        assert check_presets(plan(str(sweep_file(tmp_path)))) is None
        return
    points = plan(str(sweep_file(tmp_path)))
    d = tmp_path / "sweep"
    (d / "slurm").mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps([p.to_json() for p in points]))
    (d / "slurm" / "bundles-2.json").write_text(json.dumps([[p.id for p in points]]))
    assert task.main([str(d), "2", "0", "mpirun"]) == 2
    assert not (d / "points").exists()


def test_unmet_names_the_preset_and_accepts_nvlink(tmp_path):
    points = plan(str(sweep_file(tmp_path)))
    with_nvlink = Detected(8, True, "8 GPU(s), NVLink; NVML: test")
    without = Detected(2, False, "2 GPU(s), no NVLink; NVML: test")
    assert unmet(points, with_nvlink) is None
    why = unmet(points, without)
    assert why.startswith("topology preset 'nccl-p2p-nvl' needs NVLink") and without.summary in why


def test_presets_without_needs_never_detect(tmp_path, monkeypatch):
    # No dtune-probe where DTUNE_BIN_DIR points: a detection would fail; none is made.
    monkeypatch.setenv("DTUNE_BIN_DIR", str(tmp_path))
    points = plan(str(sweep_file(tmp_path, "nccl-shm")))
    assert check_presets(points) is None
