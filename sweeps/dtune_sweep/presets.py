"""Topology presets: the values of a sweep's `topology:` axis. Each preset sets the environment that
selects one transport and is named for that transport; this table is the one list that planning
and the tests read (doc/sweeps.md shows it; a test keeps the two equal).

NCCL (NVIDIA/nccl src/graph/paths.cc, ncclTopoCheckP2p): path types are ordered LOC < NVL < NVB <
C2C < PIX < PXB < P2C < PXN < PHB < SYS, and two GPUs use the P2P transport when their path type is
at most NCCL_P2P_LEVEL (NCCL_P2P_DISABLE=1 means LOC). An NVLink path ranks below every PCIe path,
so no NCCL variable selects PCIe peer-to-peer between GPUs that NVLink joins: that comparison needs
GPUs without NVLink between them, and there it is NCCL's default (P2P up to PXB on most hosts).
Open MPI 4.1 (opal/mca/common/ucx/common_ucx.c; `ompi_info --param pml ucx --level 9`): the UCX pml
is selectable only where UCX offers a transport of pml_ucx_tls (InfiniBand verbs, mlx5, cuda_ipc)
on a device of pml_ucx_devices (mlx*); the UCX presets set both to `any` so that shared memory and
TCP qualify, else mpirun fails with "No components were able to be opened in the pml framework".
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Preset:
    name: str
    env: dict
    selects: str  # what the variables select, in one sentence (doc/sweeps.md, errors)
    needs: str = ""  # a link the preset is meaningless without ("nvlink"); checked before launch


_UCX_ANY = {"OMPI_MCA_pml": "ucx", "OMPI_MCA_pml_ucx_tls": "any", "OMPI_MCA_pml_ucx_devices": "any"}

PRESETS = [
    Preset("default", {}, "nothing set: each library chooses"),
    Preset(
        "nccl-p2p-nvl",
        {"NCCL_P2P_LEVEL": "NVL"},
        "NCCL's P2P transport only between GPUs joined directly by NVLink; other GPU pairs of a "
        "node go through host memory (SHM)",
        # Without NVLink every pair goes through host memory: nccl-shm under a name that says NVLink.
        needs="nvlink",
    ),
    # NVLink SHARP does not look at NCCL_P2P_DISABLE (src/transport/nvls.cc, ncclNvlsInit), and
    # without NCCL_NET_DISABLE_INTRA a NIC judged faster than the host path carries intra-node
    # pairs (paths.cc, ncclTopoCheckNet): both are switched off so that host memory is the path.
    Preset(
        "nccl-shm",
        {"NCCL_P2P_DISABLE": "1", "NCCL_NET_DISABLE_INTRA": "1", "NCCL_NVLS_ENABLE": "0"},
        "no GPU peer access (neither NVLink nor PCIe): GPU pairs of a node go through host shared "
        "memory (NCCL's SHM transport), NVLink SHARP off",
    ),
    # NCCL_NET=Socket names NCCL's internal socket transport, so neither InfiniBand nor a network
    # plugin is used (docs/userguide/source/env.rst, NCCL_NET; NCCL_IB_DISABLE for NCCL before
    # 2.10); with P2P and SHM off, every pair goes through the network.
    Preset(
        "nccl-socket",
        {
            "NCCL_NET": "Socket",
            "NCCL_IB_DISABLE": "1",
            "NCCL_P2P_DISABLE": "1",
            "NCCL_SHM_DISABLE": "1",
            "NCCL_NVLS_ENABLE": "0",
        },
        "every GPU pair, within a node too, through NCCL's TCP socket transport",
    ),
    Preset(
        "mpi-shm",
        {"OMPI_MCA_pml": "ob1", "OMPI_MCA_btl": "self,vader"},
        "Open MPI's ob1 with the vader shared-memory btl (one node only)",
    ),
    Preset(
        "mpi-tcp",
        {"OMPI_MCA_pml": "ob1", "OMPI_MCA_btl": "self,tcp"},
        "Open MPI's ob1 with the tcp btl, within a node too",
    ),
    Preset(
        "ucx-shm",
        {**_UCX_ANY, "UCX_TLS": "shm,self"},
        "Open MPI's UCX pml over UCX shared memory (posix, sysv, cma, knem, xpmem; one node only)",
    ),
    Preset(
        "ucx-tcp", {**_UCX_ANY, "UCX_TLS": "tcp,self"}, "Open MPI's UCX pml over UCX's tcp transport, within a node too"
    ),
]

# Old names whose meaning held: the same preset under a second name.
ALIASES = {"socket": "nccl-socket"}

# Old names that said something their variables did not do: naming one is an error that points to
# the preset that does what the old one did.
RENAMED = {
    "pcie": (
        "nccl-shm",
        "NCCL_P2P_DISABLE=1 stages through host memory; it does not select PCIe "
        "peer-to-peer, which no NCCL variable does between NVLink-joined GPUs",
    ),
    "nvlink": (
        "nccl-p2p-nvl",
        "NCCL_P2P_LEVEL=NVL does not select NVLink; it sends every GPU pair "
        "without a direct NVLink through host memory",
    ),
}

TOPOLOGIES = {p.name: dict(p.env) for p in PRESETS}
TOPOLOGIES.update({old: TOPOLOGIES[new] for old, new in ALIASES.items()})


def renamed_message(name: str) -> str | None:
    """For an old, misleading preset name: what to write instead and why; else None."""
    if name not in RENAMED:
        return None
    new, why = RENAMED[name]
    return f"topology {name!r} was renamed {new!r}: {why}"


NEEDS = {p.name: p.needs for p in PRESETS if p.needs}
NEEDS.update({old: NEEDS[new] for old, new in ALIASES.items() if new in NEEDS})
_LINK_NAMES = {"nvlink": "NVLink between GPUs"}


def unmet(points, detected) -> str | None:
    """The first topology preset among `points` whose link `detected` (hardware.Detected) lacks,
    as one line naming the preset and what was detected; None when every preset's need is met."""
    for name in dict.fromkeys(p.values.get("topology", "default") for p in points):
        link = NEEDS.get(name)
        if link and not detected.has(link):
            return (
                f"topology preset {name!r} needs {_LINK_NAMES[link]}, and this machine has none "
                f"(dtune-probe topology: {detected.summary}): drop it from the sweep, or run where NVLink joins "
                f"the GPUs"
            )
    return None


def needs_links(points) -> bool:
    """Whether any point's topology preset needs a link (so the topology must be detected)."""
    return any(p.values.get("topology", "default") in NEEDS for p in points)
