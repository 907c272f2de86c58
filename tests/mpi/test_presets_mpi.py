"""Every MPI and UCX topology preset, run as a sweep (mpirun -np 2 of dtune-comm, small sizes), carries
its traffic over the transport it is named for. The proof is the libraries' own selection output:
Open MPI's pml framework names the pml it selected (pml_base_verbose), ob1's bml names the btl used
for each peer (btl_base_verbose: "mca: bml: Using tcp btl for send to [[job,1],1]"), and UCX names
each endpoint's transports (UCX_LOG_LEVEL=info, ucp_worker.c: "ep_cfg[1]: tag(sysv/memory cma/memory)").
Each point's results file records the preset's variables, and the report labels it with the preset."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import h5py
import pytest

from conftest import bin_dir

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "sweeps"))
from dtune_sweep.presets import TOPOLOGIES  # noqa: E402

# UCX 1.13 src/ucp/core/ucp_context.c: the "shm" alias expands to these transports.
UCX_SHM = {"posix", "sysv", "cma", "knem", "xpmem"}
PRESETS = ["mpi-shm", "mpi-tcp", "ucx-shm", "ucx-tcp"]
# For each preset: the pml Open MPI must select, and the transports that must carry the traffic to
# the peer (btls for ob1, UCX transports for ucx), beside the loopback "self".
EXPECT = {
    "mpi-shm": ("ob1", {"vader"}),
    "mpi-tcp": ("ob1", {"tcp"}),
    "ucx-shm": ("ucx", UCX_SHM),
    "ucx-tcp": ("ucx", {"tcp"}),
}


def selected_pmls(log: str) -> set:
    return set(re.findall(r"select: component (\w+) selected", log))


def ob1_btls(log: str) -> set:
    return set(re.findall(r"mca: bml: Using (\w+) btl for send to", log))


def ucx_transports(log: str) -> set:
    """Transport names of every UCX endpoint configuration printed ("tcp/eth0" -> "tcp")."""
    out = set()
    for lanes in re.findall(r"ep_cfg\[\d+\]: \w+\(([^)]*)\)", log):
        out |= {lane.split("/")[0] for lane in lanes.split()}
    return out


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """The four presets as one sweep run and merged by `dtune sweep`, as a user would."""
    tmp = tmp_path_factory.mktemp("presets")
    f = tmp / "presets.yaml"
    f.write_text(f"""
binary: dtune-comm
args: [-b, 8, -e, 1M, -f, 32, -n, 3, -w, 1, -c, 1, --collective, "allreduce,sendrecv"]
env: {{OMPI_MCA_pml_base_verbose: [10], OMPI_MCA_btl_base_verbose: [1], UCX_LOG_LEVEL: [info]}}
launch: {{ranks: [2]}}
topology: {json.dumps(PRESETS)}
""")
    # Nothing inherited may choose a transport for the presets.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_MCA_", "UCX_"))}
    env["PYTHONPATH"] = f"{REPO / 'sweeps'}:{REPO / 'report'}"
    env["DTUNE_BIN_DIR"] = str(bin_dir())
    cli = [sys.executable, "-m", "dtune_sweep.cli", "sweep"]
    out = tmp / "out"
    run = subprocess.run(
        cli + ["run", str(f), "--out", str(out), "--timeout", "120"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    merge = subprocess.run(
        cli + ["merge", str(f), "--out", str(out)], capture_output=True, text=True, env=env, timeout=120
    )
    if not (out / "manifest.json").exists():
        pytest.fail(f"dtune sweep run planned nothing: {run.stdout[-2000:]}{run.stderr[-2000:]}")
    manifest = json.loads((out / "manifest.json").read_text())
    by_preset = {p["values"]["topology"]: p for p in manifest}
    return {"run": run, "merge": merge, "out": out, "points": by_preset}


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_runs_over_the_transport_it_names(sweep, preset):
    point = sweep["points"][preset]
    log = (sweep["out"] / "points" / f"{point['id']}.log").read_text()
    assert "No components were able to be opened" not in log, log[-3000:]
    assert (sweep["out"] / "points" / f"{point['id']}.h5").exists(), log[-3000:]
    pml, carriers = EXPECT[preset]
    assert selected_pmls(log) == {pml}, log[-3000:]
    if pml == "ob1":
        used = ob1_btls(log) - {"self"}
        assert used and used <= carriers, f"{preset}: btls used {sorted(used)}"
    else:
        assert not ob1_btls(log)
        used = ucx_transports(log) - {"self"}
        assert used and used <= carriers, f"{preset}: UCX transports used {sorted(used)}"


def test_every_point_ok_and_its_file_records_the_preset(sweep):
    assert sweep["run"].returncode == 0, sweep["run"].stdout[-3000:] + sweep["run"].stderr[-3000:]
    assert sweep["merge"].returncode == 0, sweep["merge"].stderr
    from dtune_report.loader import read_provenance

    for preset, point in sweep["points"].items():
        recorded = read_provenance(sweep["out"] / "points" / f"{point['id']}.h5")["env"]
        for k, v in TOPOLOGIES[preset].items():
            assert recorded.get(k) == v, (preset, k, recorded.get(k))


def test_report_labels_each_setting_with_its_preset_and_variables(sweep):
    from dtune_report.figures import comm_fits

    fits = comm_fits([sweep["out"] / "merged.h5"])
    labels = set(fits.setting)
    for preset in PRESETS:
        (label,) = {s for s in labels if f"topology={preset}" in s.split()}
        assert {f"{k}={v}" for k, v in TOPOLOGIES[preset].items()} <= set(label.split())
    with h5py.File(sweep["out"] / "merged.h5") as h:
        assert len(h["points"]) == len(PRESETS)
