"""The scaling model behind `dtune model`: from a 1-rank training profile (when each parameter's
gradient became ready in backward, results/SCHEMA.md `grad_ready_ms`) and α–β link fits, the step
time, exposed communication and scaling efficiency of N nodes × R ranks per node, replaying
dtune-train's gradient synchronisation (train/grad_sync.cc) step by step:

- buckets are planned exactly as `plan_buckets` does: reverse parameter order, the first bucket
  capped at --first-bucket-mb, later ones at --bucket-mb (MiB = 2^20 bytes, truncated to bytes);
- bucket b is ready when its last parameter's gradient arrived; buckets launch in index order
  (launch_b = max(ready_0..ready_b)); one communication thread reduces them one at a time:
  start_b = max(launch_b, end_{b-1}), end_b = start_b + T(bytes_b);
- exposed_ms = max(0, end_last − backward_ms): what is left after backward ends; the predicted
  step is the profiled step plus that (the profile's step has no communication at all);
- on CPU ranks sharing cores, backward computes comm_slowdown_factor times slower while a
  reduction is in flight (each rank's communication thread polls it), so its buckets become ready
  and it ends later in wall time; the step grows by that too (replay);
- efficiency = the 1-rank step over the predicted step (weak scaling: the batch per rank fixed).

Ring allreduce of n bytes over p ranks (Thakur, Rabenseifner, Gropp 2005; /work REFERENCE):
T = 2(p−1)·α + 2(p−1)/p·n·β. Flat: one ring over all N·R ranks, every step as slow as its slowest
link (the inter-node one once N > 1). Hierarchical (reduce within the node, allreduce among node
leaders, broadcast within the node): the reduce and the broadcast are each half a ring allreduce
within the node (reduce-scatter + gather, scatter + allgather), so
T = 2(R−1)·α_intra + 2(R−1)/R·n·β_intra + 2(N−1)·α_inter + 2(N−1)/N·n·β_inter.
Reduce-scatter and all-gather are each half of that (COLLECTIVE_SHARE), for the sharded modes of
sharding.py (`dtune model --shard`). Everything here is pure arithmetic on arrays; model_inputs.py
reads the files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

MIB = 1 << 20
LEVELS = ("intra", "inter")  # within a node (shared memory, NVLink), between nodes (the network)


@dataclass(frozen=True)
class LinkFit:
    """One link level's ring allreduce constants: α seconds per ring step, β seconds per byte;
    and, where the link was measured at exactly `table_ranks` ranks, the measured call time per
    size (`sizes` bytes ascending, `times_s`), which ring_s reads for that rank count in place of
    the α–β line: a real link is not one straight line in size (a shaped link's burst lets small
    calls through at line rate, the library switches algorithm and protocol with size), and the
    α–β fit over all sizes can miss the sizes a gradient bucket has by a factor of two."""

    alpha_s: float
    beta_s_per_byte: float
    source: str = ""
    sizes: tuple = ()
    times_s: tuple = ()
    table_ranks: int = 0

    def ring_s(self, n_bytes: float, p: int) -> float:
        """Allreduce of n bytes over p ranks (0 for one rank): measured_s(n) for the table's rank
        count, else the ring model 2(p−1)α + 2(p−1)/p·n·β."""
        if p <= 1:
            return 0.0
        if self.sizes and p == self.table_ranks:
            return self.measured_s(n_bytes)
        return 2 * (p - 1) * self.alpha_s + 2 * (p - 1) / p * n_bytes * self.beta_s_per_byte

    def measured_s(self, n_bytes: float) -> float:
        """The measured time at n bytes: linear between the two measured sizes around it; the
        smallest size's time below the table (a call is not cheaper than the smallest measured
        one); above it, the largest size's time plus the extra bytes at the α–β fit's β."""
        s, t = self.sizes, self.times_s
        if n_bytes <= s[0]:
            return float(t[0])
        if n_bytes >= s[-1]:
            p = self.table_ranks
            return float(t[-1] + (n_bytes - s[-1]) * 2 * (p - 1) / p * self.beta_s_per_byte)
        return float(np.interp(n_bytes, s, t))


def monotone(values) -> np.ndarray:
    """The non-decreasing sequence nearest to `values` in least squares (pool adjacent violators):
    measured call times by ascending size, where a larger call measured faster than a smaller one
    is noise (a busy machine's stalls), not the link."""
    blocks = []  # [mean, count]
    for v in np.asarray(values, dtype=float):
        blocks.append([v, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, c2 = blocks.pop()
            m1, c1 = blocks.pop()
            blocks.append([(m1 * c1 + m2 * c2) / (c1 + c2), c1 + c2])
    return np.concatenate([np.full(c, m) for m, c in blocks]) if blocks else np.array([])


@dataclass(frozen=True)
class Shape:
    """N nodes × R ranks per node, and how a bucket is reduced across them."""

    nodes: int
    ranks_per_node: int
    algorithm: str = "flat"  # flat | hierarchical

    @property
    def ranks(self) -> int:
        return self.nodes * self.ranks_per_node

    def levels(self) -> list:
        """The link levels a reduction over this shape crosses."""
        if self.ranks <= 1:
            return []
        if self.nodes == 1:
            return ["intra"]
        if self.algorithm == "flat" or self.ranks_per_node == 1:
            return ["inter"]
        return ["intra", "inter"]


@dataclass
class Profile:
    """A 1-rank run's measured steps: per step (S rows) its total and backward milliseconds and
    each parameter's gradient arrival (S, P) in ms after backward began (NaN: never arrived, taken
    at the end of backward, as GradSync.finish does); the parameters' bytes (P,) in model order;
    each step's forward milliseconds (S,) where the file has them (the zero3 timeline needs them)."""

    total_ms: np.ndarray  # (S,)
    backward_ms: np.ndarray  # (S,)
    ready_ms: np.ndarray  # (S, P)
    param_bytes: np.ndarray  # (P,)
    first_bucket_mb: float = 1.0
    wire_factor: float = 1.0  # bytes on the wire per parameter byte (0.5 with fp16/bf16 compression)
    label: str = ""
    meta: dict = field(default_factory=dict)
    forward_ms: np.ndarray | None = None  # (S,)

    def scaled(self, factor: float) -> Profile:
        """The same profile with every compute time multiplied by `factor` (a projection to other
        hardware: a stated assumption, not a measurement)."""
        return Profile(
            self.total_ms * factor,
            self.backward_ms * factor,
            self.ready_ms * factor,
            self.param_bytes,
            self.first_bucket_mb,
            self.wire_factor,
            self.label,
            dict(self.meta, compute_scale=factor),
            None if self.forward_ms is None else self.forward_ms * factor,
        )


def ranks_sharing_machine(shape: Shape, nodes_per_machine: int = 1) -> int:
    """The most ranks of `shape` on one machine's cores, where a machine holds up to
    `nodes_per_machine` (M) of its nodes: R·min(M, N). M = 1 is a real cluster, one node per
    machine; the simulated nodes of scripts/cluster all share this machine (M = N). With N not a
    multiple of M the fullest machine counts (the slowest rank paces every step). What
    model_inputs.ranks_per_machine counts for a measured run (per kernel boot id), for a shape that
    was not run (`dtune model predict --nodes-per-machine`)."""
    if nodes_per_machine < 1:
        raise ValueError(f"nodes per machine {nodes_per_machine}: give a positive count")
    return shape.ranks_per_node * min(nodes_per_machine, shape.nodes)


def compute_factor(cores: int, threads: int, ranks_sharing: int, profile_threads: int | None = None) -> float:
    """How much longer each rank's compute takes beside the other ranks on its machine than in the
    1-rank profile, on CPU ranks sharing `cores`: R ranks × T intra-op threads on C cores get
    C/(R·T) of a core per thread once they outnumber the cores (fair shares), so the time grows by
    max(1, R·T/C), over the profile's own max(1, T_p/C) (T_p = T unless given). R counts the ranks
    that share one physical machine's cores (model_inputs.ranks_per_machine: simulated nodes on
    one machine count together), not those of one node. 1 for cores <= 0 (unknown: no contention
    assumed; said where it is printed)."""
    if cores <= 0:
        return 1.0
    tp = threads if profile_threads is None else profile_threads
    return max(1.0, ranks_sharing * threads / cores) / max(1.0, tp / cores)


def comm_slowdown_factor(cores: int, threads: int, ranks_sharing: int) -> float:
    """How much slower backward computes while a reduction is in flight than otherwise, on CPU
    ranks sharing `cores`: each rank's communication thread polls its reduction to completion
    (train/mpi_reducer.cc: MPI_Test, yielding), so R·(T+1) threads share the C cores instead of
    R·T: max(1, R·(T+1)/C) / max(1, R·T/C). 1 for cores <= 0 (unknown, or GPU ranks)."""
    if cores <= 0:
        return 1.0
    return max(1.0, ranks_sharing * (threads + 1) / cores) / max(1.0, ranks_sharing * threads / cores)


def plan_buckets(param_bytes, first_cap_bytes: int, cap_bytes: int) -> list:
    """train/grad_sync.cc plan_buckets, line for line: [[parameter indices] per bucket], reverse
    parameter order; bucket 0 capped at first_cap, later ones at cap; a parameter larger than the
    cap gets a bucket of its own."""
    buckets, sizes = [], []
    for k in range(len(param_bytes) - 1, -1, -1):
        limit = first_cap_bytes if len(buckets) == 1 else cap_bytes
        if not buckets or (sizes[-1] > 0 and sizes[-1] + int(param_bytes[k]) > limit):
            buckets.append([])
            sizes.append(0)
        buckets[-1].append(k)
        sizes[-1] += int(param_bytes[k])
    return buckets


def caps_bytes(bucket_mb: float, first_bucket_mb: float) -> tuple:
    """(first cap, cap) in bytes as dtune-train computes them: static_cast<int64_t>(mb · 2^20)."""
    return int(first_bucket_mb * MIB), int(bucket_mb * MIB)


# A collective's time as a share of a ring allreduce's on the same n bytes (Thakur, Rabenseifner,
# Gropp 2005): a ring reduce-scatter or all-gather is (p−1)·α + (p−1)/p·n·β, half of 2(p−1)·α +
# 2(p−1)/p·n·β; an allreduce is one of each. Hierarchical: each level's half, so RS + AG = allreduce.
COLLECTIVE_SHARE = {"allreduce": 1.0, "reduce_scatter": 0.5, "all_gather": 0.5}


def bucket_cost_s(n_bytes: float, shape: Shape, fits: dict, collective: str = "allreduce") -> float:
    """Seconds to allreduce (or reduce-scatter, all-gather: COLLECTIVE_SHARE of that) one bucket
    of n bytes over `shape` with the fits {level: LinkFit}."""
    share = COLLECTIVE_SHARE[collective]
    if share != 1.0:
        return share * bucket_cost_s(n_bytes, shape, fits)
    if shape.ranks <= 1:
        return 0.0
    if shape.nodes == 1:
        return fits["intra"].ring_s(n_bytes, shape.ranks)
    if shape.algorithm == "flat" or shape.ranks_per_node == 1:
        return fits["inter"].ring_s(n_bytes, shape.ranks)
    return fits["intra"].ring_s(n_bytes, shape.ranks_per_node) + fits["inter"].ring_s(n_bytes, shape.nodes)


def replay(ready_ms, backward_ms: float, costs_ms, busy_costs_ms=None, slowdown: float = 1.0) -> tuple:
    """One step's overlap as the trainer runs it. `ready_ms` (B,) bucket ready times in backward
    order, in backward's compute time; `costs_ms` (B,) each bucket's reduction time on idle cores;
    `busy_costs_ms` (B,), when given, its time while backward computes beside it (its
    communication thread competing with the compute threads for the cores). A reduction advances
    by the share of its cost that each moment allows: 1/busy per ms while backward computes, 1/idle
    per ms after backward ended, so one that starts during backward and ends after it pays the busy
    rate only for the part that overlapped. `slowdown` (>= 1): while a reduction is in flight
    during backward, backward's compute advances `slowdown` times slower (CPU ranks: the
    communication thread polls, taking its share of the cores). Returns (exposed_ms, end of the
    last reduction, end of backward), both in ms of wall time after backward began; with slowdown 1
    backward ends at backward_ms."""
    launch = np.maximum.accumulate(np.asarray(ready_ms, dtype=float))
    busy = costs_ms if busy_costs_ms is None else busy_costs_ms
    n = len(launch)
    wall, done, b = 0.0, 0.0, 0  # done: backward's compute progress
    k, left, last_end = -1, 0.0, 0.0  # the reduction in flight, the share of it still to do
    while done < backward_ms:
        if left <= 0 and b < n and launch[b] <= done:  # the communication thread takes the next bucket
            k, left, b = b, 1.0, b + 1
            continue
        active = left > 0
        speed = 1.0 / slowdown if active else 1.0
        target = launch[b] if b < n and launch[b] > done else backward_ms
        target = min(target, backward_ms)
        dt = (target - done) / speed
        if active and (busy[k] <= 0 or left * busy[k] <= dt):  # the reduction ends first
            dt = left * max(busy[k], 0.0)
            done += dt * speed
            wall += dt
            left, last_end = 0.0, wall
        else:
            wall += dt
            done = target
            if active:
                left -= dt / busy[k]
    back_wall = wall
    end = back_wall + left * costs_ms[k] if left > 0 else last_end
    for j in range(b, n):  # launched by the end of backward, reduced one after another on idle cores
        end = max(end, back_wall) + costs_ms[j]
    return max(0.0, end - back_wall), end, back_wall


def replay_step(ready_ms, backward_ms: float, costs_ms, busy_costs_ms=None) -> tuple:
    """replay() without a compute slowdown: (exposed_ms, end of the last reduction in ms after
    backward began)."""
    exposed, end, _ = replay(ready_ms, backward_ms, costs_ms, busy_costs_ms)
    return exposed, end


@dataclass(frozen=True)
class Prediction:
    shape: Shape
    bucket_mb: float
    buckets: int
    step_ms: float  # median over the profile's steps of (step + exposed)
    exposed_ms: float  # median over steps
    comm_ms: float  # the buckets' reduction times summed (the same every step; idle-core fits)
    base_step_ms: float  # the profile's median step (1 rank)
    compute_factor: float = 1.0  # the profile's compute times were multiplied by this

    @property
    def efficiency(self) -> float:
        return self.base_step_ms / self.step_ms if self.step_ms > 0 else math.nan


def predict(
    profile: Profile,
    shape: Shape,
    bucket_mb: float,
    fits: dict,
    first_bucket_mb: float | None = None,
    overlap: bool = True,
    busy_fits: dict | None = None,
    compute_scale: float = 1.0,
    comm_slowdown: float = 1.0,
    collective: str = "allreduce",
) -> Prediction:
    """The Prediction for one shape and bucket size. `fits` must hold every level of
    shape.levels() (KeyError otherwise: model_inputs checks before calling). overlap=False
    (--overlap off): every bucket is launched when backward ends. `busy_fits` (same levels), when
    given, cost a reduction that starts while backward computes (replay_step), `fits` one that
    starts after. `compute_scale` multiplies every compute time of the profile (compute_factor:
    ranks sharing the node's cores); the efficiency stays against the unscaled 1-rank step.
    `comm_slowdown` (replay): backward's compute runs that many times slower while a reduction is
    in flight (comm_slowdown_factor); the step grows by the time backward lost. `collective`: what
    each bucket runs (COLLECTIVE_SHARE; reduce_scatter for --shard zero2)."""
    # The first bucket's cap, never above the others' (dtune-train refuses --first-bucket-mb > --bucket-mb).
    first = min(profile.first_bucket_mb if first_bucket_mb is None else first_bucket_mb, bucket_mb)
    buckets = plan_buckets(profile.param_bytes, *caps_bytes(bucket_mb, first))
    wire = np.array([profile.param_bytes[b].sum() * profile.wire_factor for b in buckets], dtype=float)
    costs_ms = np.array([bucket_cost_s(n, shape, fits, collective) * 1e3 for n in wire])
    busy_ms = (
        None if busy_fits is None else np.array([bucket_cost_s(n, shape, busy_fits, collective) * 1e3 for n in wire])
    )
    prof = profile if compute_scale == 1.0 else profile.scaled(compute_scale)
    exposed = np.empty(len(prof.total_ms))
    stretch = np.zeros(len(prof.total_ms))  # backward's compute lost to polling communication threads
    for s in range(len(prof.total_ms)):
        back = float(prof.backward_ms[s])
        arrived = np.where(np.isnan(prof.ready_ms[s]) | (not overlap), back, prof.ready_ms[s])
        ready = [arrived[b].max() for b in buckets]
        exposed[s], _, back_wall = replay(ready, back, costs_ms, busy_ms, comm_slowdown)
        stretch[s] = back_wall - back
    return Prediction(
        shape,
        bucket_mb,
        len(buckets),
        float(np.median(prof.total_ms + stretch + exposed)),
        float(np.median(exposed)),
        float(costs_ms.sum()),
        float(np.median(profile.total_ms)),
        compute_scale,
    )
