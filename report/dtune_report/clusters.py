"""Clusters `dtune model project` can project to: published link and peak figures only
(/work REFERENCE: "Collective bandwidth", "Dense peaks"), and the default grid it projects over.
No numpy here: `dtune --help` builds its parsers from this without loading the model."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cluster:
    name: str
    gpus_per_node: int
    intra_busbw_gbps: float
    nic_busbw_gbps: float
    nics_per_node: int
    peak_tflops: float  # dense bf16, datasheet
    source: str
    memory_gb: float = 80.0  # each GPU's, datasheet (10^9 bytes)


CLUSTERS = {
    "h100-ib400": Cluster(
        "8xH100 SXM (NVLink) per node, InfiniBand NDR 400G",
        8,
        370.0,
        47.0,
        8,
        989.0,
        "8xH100 NVLink ring allreduce busbw ~370 GB/s; IB NDR 400G ~46-48 GB/s per NIC; H100 SXM bf16 dense 989 "
        "TFLOP/s",
    ),
    "h200-ib400": Cluster(
        "8xH200 SXM (NVLink) per node, InfiniBand NDR 400G",
        8,
        475.0,
        47.0,
        8,
        989.0,
        "8xH200 allreduce busbw ~475 GB/s; IB NDR 400G ~46-48 GB/s per NIC; H200 SXM bf16 dense 989 TFLOP/s",
        141.0,
    ),
}
DEFAULT_NODES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
DEFAULT_BUCKETS_MB = [1, 2, 5, 10, 25, 50, 100, 200]
