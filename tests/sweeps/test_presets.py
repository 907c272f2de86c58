"""Topology presets: each one's exact variables (what NCCL's and Open MPI's documented rules need for
the transport its name says), old misleading names rejected with exit 2 and the new name, the
table of doc/sweeps.md equal to the presets, and the report's label for a setting naming the preset and its
variables."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "sweeps"))
sys.path.insert(0, str(REPO / "report"))
from dtune_sweep.presets import PRESETS, TOPOLOGIES  # noqa: E402
from dtune_sweep.spec import ENV_PREFIXES, SweepError, plan  # noqa: E402

UCX_ANY = {"OMPI_MCA_pml": "ucx", "OMPI_MCA_pml_ucx_tls": "any", "OMPI_MCA_pml_ucx_devices": "any"}
# Written out by hand, not copied from the table: a changed variable must be a deliberate edit here.
EXPECTED = {
    "default": {},
    "nccl-p2p-nvl": {"NCCL_P2P_LEVEL": "NVL"},
    "nccl-shm": {"NCCL_P2P_DISABLE": "1", "NCCL_NET_DISABLE_INTRA": "1", "NCCL_NVLS_ENABLE": "0"},
    "nccl-socket": {
        "NCCL_NET": "Socket",
        "NCCL_IB_DISABLE": "1",
        "NCCL_P2P_DISABLE": "1",
        "NCCL_SHM_DISABLE": "1",
        "NCCL_NVLS_ENABLE": "0",
    },
    "socket": {
        "NCCL_NET": "Socket",
        "NCCL_IB_DISABLE": "1",
        "NCCL_P2P_DISABLE": "1",
        "NCCL_SHM_DISABLE": "1",
        "NCCL_NVLS_ENABLE": "0",
    },
    "mpi-shm": {"OMPI_MCA_pml": "ob1", "OMPI_MCA_btl": "self,vader"},
    "mpi-tcp": {"OMPI_MCA_pml": "ob1", "OMPI_MCA_btl": "self,tcp"},
    "ucx-shm": {**UCX_ANY, "UCX_TLS": "shm,self"},
    "ucx-tcp": {**UCX_ANY, "UCX_TLS": "tcp,self"},
}


def sweep_file(tmp_path, topology):
    p = tmp_path / "s.yaml"
    p.write_text(f"binary: dtune-comm\nargs: [-b, 8]\nenv: {{NCCL_DEBUG: [INFO]}}\ntopology: {topology}\n")
    return str(p)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_preset_sets_exactly_its_variables(tmp_path, name):
    (point,) = plan(sweep_file(tmp_path, name))
    assert point.env == {"NCCL_DEBUG": "INFO", **EXPECTED[name]}
    assert point.values["topology"] == name
    assert all(k.startswith(ENV_PREFIXES) for k in point.env)


def test_env_axis_takes_open_mpi_parameter_names(tmp_path):
    # Open MPI reads OMPI_MCA_<parameter> with the parameter's own (lower-case) name.
    p = tmp_path / "s.yaml"
    p.write_text("binary: dtune-comm\nenv: {OMPI_MCA_btl_tcp_if_include: [lo, eth0]}\ntopology: mpi-tcp\n")
    assert [pt.env["OMPI_MCA_btl_tcp_if_include"] for pt in plan(str(p))] == ["lo", "eth0"]


def test_no_preset_beyond_the_expected_ones():
    assert set(TOPOLOGIES) == set(EXPECTED)


def test_nccl_p2p_levels_are_names_nccl_accepts():
    # NVIDIA/nccl src/graph/topo.cc topoPathTypeStr: the strings ncclGetLevel compares with.
    path_types = {"LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS", "NET", "DIS"}
    for env in TOPOLOGIES.values():
        if "NCCL_P2P_LEVEL" in env:
            assert env["NCCL_P2P_LEVEL"] in path_types
        # ncclGetLevel reads NCCL_P2P_DISABLE first: set together, the level would be ignored.
        assert not ("NCCL_P2P_LEVEL" in env and "NCCL_P2P_DISABLE" in env)


@pytest.mark.parametrize("old,new", [("pcie", "nccl-shm"), ("nvlink", "nccl-p2p-nvl")])
def test_misleading_old_names_exit_2_naming_the_new_preset(tmp_path, old, new):
    f = sweep_file(tmp_path, f"[mpi-shm, {old}]")
    with pytest.raises(SweepError, match=f"topology '{old}' was renamed '{new}'"):
        plan(f)
    env = dict(os.environ, PYTHONPATH=f"{REPO / 'sweeps'}:{REPO / 'report'}")
    r = subprocess.run(
        [sys.executable, "-m", "dtune_sweep.cli", "sweep", "plan", f],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"'{new}'" in lines[0] and "Traceback" not in r.stderr, r.stderr


def test_doc_table_is_the_presets():
    text = (REPO / "doc" / "sweeps.md").read_text()
    rows = {}
    for m in re.finditer(r"^\| `([a-z0-9-]+)`[^|]*\| ([^|]+) \|", text, re.M):
        variables = m.group(2).strip()
        rows[m.group(1)] = {} if variables == "none" else dict(kv.split("=", 1) for kv in variables.strip("`").split())
    assert rows == {p.name: p.env for p in PRESETS}


def test_report_label_names_the_preset_and_its_variables(tmp_path):
    import json

    from dtune_report.figures import comm_setting

    (point,) = plan(sweep_file(tmp_path, "ucx-tcp"))
    label = comm_setting(json.dumps(point.to_json()), "mpi")
    assert label.split()[:2] == ["mpi", "topology=ucx-tcp"]
    for k, v in EXPECTED["ucx-tcp"].items():
        assert f"{k}={v}" in label.split()
    (point,) = plan(sweep_file(tmp_path, "default"))
    assert "topology=" not in comm_setting(json.dumps(point.to_json()), "mpi")
