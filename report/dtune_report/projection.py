"""`dtune model project`: the scaling model applied to a cluster nobody here has, from published
link figures (/work REFERENCE, "Collective bandwidth"). A projection, not a measurement; what it
assumes is printed with every table:

- intra-node β from the published 8-GPU NVLink allreduce bus bandwidth (busbw of a ring recovers
  1/β): 8×H100 ≈ 370 GB/s, 8×H200 ≈ 475 GB/s;
- inter-node β from InfiniBand NDR 400G ≈ 47 GB/s bus bandwidth per NIC, times the NICs per node
  (8 on a DGX-class node: NCCL spreads the inter-node rings over every NIC);
- α (latency per ring step) is not among the published figures: 2 µs within a node and 6 µs
  between nodes are assumed (--alpha-intra-us, --alpha-inter-us);
- the reduction is hierarchical (within the node, then among nodes, as NCCL's rings over NVLink
  and the network) with rings only: NCCL switches to trees at large node counts, whose latency
  grows as log p rather than p, so the latency-bound end here is pessimistic;
- compute: the profile's measured step times (CPU) scaled by one factor, by default the one that
  makes the profile's training FLOPs per step (× --batch-scale) run at --mfu of the GPU's dense
  peak (datasheet, REFERENCE "Dense peaks"); --compute-scale sets the factor directly. Every
  phase scales alike, and the gradient arrival pattern within backward is the profile's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .clusters import DEFAULT_BUCKETS_MB, DEFAULT_NODES, Cluster
from .scaling_model import LinkFit, Profile, Shape, predict
from .sharding import predict_sharded

BREAK_EFFICIENCY = 0.8  # "scaling breaks" where the best bucket size's efficiency falls below this


def link_fits(c: Cluster, alpha_intra_us: float, alpha_inter_us: float, nics: int) -> dict:
    return {
        "intra": LinkFit(alpha_intra_us * 1e-6, 1 / (c.intra_busbw_gbps * 1e9), f"{c.intra_busbw_gbps:g} GB/s NVLink"),
        "inter": LinkFit(
            alpha_inter_us * 1e-6, 1 / (c.nic_busbw_gbps * nics * 1e9), f"{nics} x {c.nic_busbw_gbps:g} GB/s IB"
        ),
    }


def compute_scale(profile: Profile, peak_tflops: float, mfu: float, batch_scale: float) -> float:
    """The factor that makes the profile's step take its training FLOPs at mfu × peak:
    flops_per_sample × batch × accum_steps × batch_scale / (peak·mfu), over the measured median step."""
    m = profile.meta
    flops = float(m["training_flops_per_sample"]) * float(m["batch"]) * float(m.get("accum_steps", 1)) * batch_scale
    target_ms = flops / (peak_tflops * 1e12 * mfu) * 1e3
    return target_ms / float(np.median(profile.total_ms))


@dataclass
class Projection:
    cluster: Cluster
    fits: dict
    scale: float
    nodes: list
    buckets_mb: list
    step_ms: np.ndarray  # (nodes, buckets)
    exposed_ms: np.ndarray
    efficiency: np.ndarray
    base_step_ms: float
    assumptions: list

    def best(self, i: int) -> int:
        return int(np.argmax(self.efficiency[i]))

    def breaks_at(self):
        """The first node count whose best efficiency is below BREAK_EFFICIENCY (None: never)."""
        for i, n in enumerate(self.nodes):
            if self.efficiency[i].max() < BREAK_EFFICIENCY:
                return n
        return None


def project(
    profile: Profile,
    cluster: Cluster,
    nodes=DEFAULT_NODES,
    buckets_mb=DEFAULT_BUCKETS_MB,
    scale: float = 1.0,
    alpha_intra_us: float = 2.0,
    alpha_inter_us: float = 6.0,
    nics: int | None = None,
    algorithm: str = "hierarchical",
    shard=None,
) -> Projection:
    """The projection over nodes x bucket sizes; `shard` (sharding.Shard), when given, predicts
    that sharded mode instead of DDP."""
    nics = cluster.nics_per_node if nics is None else nics
    fits = link_fits(cluster, alpha_intra_us, alpha_inter_us, nics)
    scaled = profile.scaled(scale)
    step = np.empty((len(nodes), len(buckets_mb)))
    exposed, eff = np.empty_like(step), np.empty_like(step)
    for i, n in enumerate(nodes):
        for j, b in enumerate(buckets_mb):
            shape = Shape(n, cluster.gpus_per_node, algorithm)
            p = predict(scaled, shape, b, fits) if shard is None else predict_sharded(scaled, shape, b, fits, shard)
            step[i, j], exposed[i, j], eff[i, j] = p.step_ms, p.exposed_ms, p.efficiency
    assumptions = [
        f"links: {cluster.source} (REFERENCE.md); {nics} NIC(s) per node",
        f"latency assumed (not published): α = {alpha_intra_us:g} µs per ring step within a node, "
        f"{alpha_inter_us:g} µs between nodes",
        f"reduction: {algorithm}, ring at every level (NCCL uses trees at scale: the latency-bound end is pessimistic)",
        f"compute: the profile's ({profile.label}) measured times x {scale:.4g}",
    ]
    base = float(np.median(scaled.total_ms))
    return Projection(cluster, fits, scale, list(nodes), list(buckets_mb), step, exposed, eff, base, assumptions)


def format_projection(pr: Projection) -> str:
    lines = [f"# PROJECTION (not a measurement) to {pr.cluster.name}"] + [f"#   {a}" for a in pr.assumptions]
    lines.append(f"# 1-GPU step (compute only, scaled): {pr.base_step_ms:.4g} ms")
    lines.append(
        f"# {'nodes':>6} {'GPUs':>6} {'best bucket':>11} {'step_ms':>10} {'exposed_ms':>10} {'efficiency':>10}  "
        + "  ".join(f"{b:g}MiB" for b in pr.buckets_mb)
    )
    for i, n in enumerate(pr.nodes):
        j = pr.best(i)
        effs = "  ".join(f"{e:.3f}" for e in pr.efficiency[i])
        lines.append(
            f"  {n:6d} {n * pr.cluster.gpus_per_node:6d} {pr.buckets_mb[j]:>8g} MiB {pr.step_ms[i, j]:10.4g} "
            f"{pr.exposed_ms[i, j]:10.4g} {pr.efficiency[i, j]:10.3f}  {effs}"
        )
    b = pr.breaks_at()
    lines.append(
        f"# scaling breaks (best efficiency below {BREAK_EFFICIENCY:g}) at {b} nodes"
        if b is not None
        else f"# scaling holds (best efficiency >= {BREAK_EFFICIENCY:g}) up to {pr.nodes[-1]} nodes"
    )
    return "\n".join(lines)
