"""What joins this machine's GPUs, as `dtune-probe topology` detects it (hwloc and NVML loaded at run
time: the code that records the topology in every results file, core/topology.h), read before a
sweep launches a point whose topology preset needs a link (presets.Preset.needs). Works without a
GPU or driver: NVML is then unavailable, and the machine has 0 GPUs and no NVLink.

    detect() -> Detected(gpus, nvlink, summary)   # SweepError when dtune-probe cannot say
"""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .runner import bin_dir
from .spec import SweepError


@dataclass(frozen=True)
class Detected:
    gpus: int  # GPUs NVML lists
    nvlink: bool  # some GPU pair joined by NVLink, directly or through NVSwitches (an NV# cell)
    summary: str  # dtune-probe's one line and NVML's status, for messages

    def has(self, link: str) -> bool:
        return {"nvlink": self.nvlink}[link]


def from_topology(t: dict) -> Detected:
    """From dtune_report.loader.read_topology's dict (a topology group of a results file)."""
    # NV# as `nvidia-smi topo -m` writes NVLink; NODE is a PCIe path (core/topology.cc has_nvlink).
    nvlink = any(c.startswith("NV") and c != "NODE" for row in t.get("links", []) for c in row)
    gpus = len(t.get("gpu_name", []))
    summary = f"{gpus} GPU(s), {'NVLink' if nvlink else 'no NVLink'}; NVML: {t.get('nvml_status', '')}"
    return Detected(gpus, nvlink, summary)


def detect() -> Detected:
    """This machine's topology from `dtune-probe topology` (build/bin, or $DTUNE_BIN_DIR)."""
    from dtune_report.loader import read_topology  # h5py: imported only when a preset needs it

    exe = bin_dir() / "dtune-probe"
    if not exe.exists():
        raise SweepError(f"cannot detect this machine's topology: {exe} does not exist (build first)")
    with tempfile.TemporaryDirectory(prefix="dtune-topology-") as d:
        out = Path(d) / "topology.h5"
        try:
            r = subprocess.run(
                [str(exe), "--output", str(out), "topology"], capture_output=True, text=True, timeout=120
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise SweepError(f"cannot detect this machine's topology: dtune-probe topology: {e}") from None
        if r.returncode != 0 or not out.exists():
            last = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
            raise SweepError(f"cannot detect this machine's topology: dtune-probe topology: {last}")
        return from_topology(read_topology(out))
