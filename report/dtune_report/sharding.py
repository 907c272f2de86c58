"""Sharded data parallelism in the scaling model (`dtune model --shard`): what each mode sends and
when, as dtune-train --shard runs it, replayed on the same profile and link fits as DDP
(scaling_model.py), and each mode's state memory per rank (ZeRO, Rajbhandari et al. 2020; FSDP):

- zero1: gradients bucketed and all-reduced as DDP (overlapped with backward); optimizer state 1/N;
  after the optimizer step every rank all-gathers the updated parameters (P bytes, 1/N from each),
  exposed: step = the DDP step + AG(P), exactly;
- zero2: each bucket reduce-scattered instead (the same buckets, launch order and overlap replay),
  then the parameter all-gather as zero1;
- zero3 (FSDP): parameters sharded by unit (planned as buckets are, every unit capped at
  --shard-unit-mb); before a unit's forward its parameters are all-gathered, the gather of unit
  k+N issued when unit k's forward starts (--shard-prefetch N; 0: issued when the unit is needed,
  no overlap); with --reshard-after-forward on gathered again before its backward (the same
  prefetch); each unit's gradients reduce-scattered once its backward is done. No gather after
  the step.

Costs (scaling_model.COLLECTIVE_SHARE): reduce-scatter and all-gather of n bytes over p ranks are
each (p−1)·α + (p−1)/p·n·β, half of the ring allreduce 2(p−1)·α + 2(p−1)/p·n·β (Thakur,
Rabenseifner, Gropp 2005); on a measured allreduce table half the measured time. Hierarchical:
the allreduce's two-level decomposition halved level by level, (R−1)·α_intra + (R−1)/R·n·β_intra +
(N−1)·α_inter + (N−1)/N·n·β_inter, so RS + AG = allreduce at every level.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .model_assumptions import OPTIMIZERS, SHARD_MODES
from .scaling_model import Prediction, Profile, Shape, bucket_cost_s, caps_bytes, plan_buckets, predict


@dataclass(frozen=True)
class ShardMode:
    """One row per mode: what its backward sends per bucket (or unit), whether every parameter is
    all-gathered after the optimizer step or per unit around forward and backward, and which of
    the per-rank state (params, grads, optim) it holds 1/N of."""

    name: str
    grad_collective: str  # scaling_model.COLLECTIVE_SHARE key
    gather_after_step: bool
    gather_per_unit: bool
    sharded: frozenset


MODES = {
    m.name: m
    for m in [
        ShardMode("none", "allreduce", False, False, frozenset()),
        ShardMode("zero1", "allreduce", True, False, frozenset({"optim"})),
        ShardMode("zero2", "reduce_scatter", True, False, frozenset({"optim", "grads"})),
        ShardMode("zero3", "reduce_scatter", False, True, frozenset({"optim", "grads", "params"})),
    ]
}
assert tuple(MODES) == SHARD_MODES

# Optimizer state in bytes per parameter beyond the weights (train/optimizer.h): sgd's momentum
# buffer (momentum 0.9), adamw's two moments; fp32 (the master copy's dtype with bf16 weights).
OPTIMIZER_STATE_BYTES = {"sgd": 4, "adamw": 8}
assert tuple(OPTIMIZER_STATE_BYTES) == OPTIMIZERS
MASTER_BYTES = 4  # --weights-dtype bf16: the fp32 master copy per parameter


@dataclass(frozen=True)
class Shard:
    """`dtune model --shard MODE --shard-unit-mb U --shard-prefetch N --reshard-after-forward on|off`."""

    mode: str = "none"
    unit_mb: float | None = None  # zero3 unit cap in MiB; None: the bucket size
    prefetch: int = 1
    reshard_after_forward: bool = True
    # zero3 units given outright ([parameter indices] per unit, backward order), in place of
    # unit_mb's: a run's `--shard-unit block` units (units_from_bytes of its bucket_bytes).
    units: tuple | None = None


def units_of(param_bytes, unit_mb: float) -> list:
    """zero3's units: [[parameter indices] per unit] in backward order (reverse parameter order),
    every unit capped at unit_mb MiB (no smaller first one); a parameter larger than the cap is a
    unit of its own. Forward runs them last to first."""
    cap = caps_bytes(unit_mb, unit_mb)[1]
    return plan_buckets(param_bytes, cap, cap)


def units_from_bytes(param_bytes, unit_bytes) -> list | None:
    """The units a run recorded (its bucket_bytes: each unit's bytes in backward order) as runs of
    whole parameters in reverse parameter order, as units_of gives them; None when the bytes do not
    cut the parameters so (a unit of parameters that are not consecutive)."""
    units, k = [], len(param_bytes) - 1
    for want in unit_bytes:
        unit, got = [], 0
        while k >= 0 and got < int(want):
            unit.append(k)
            got += int(param_bytes[k])
            k -= 1
        if got != int(want) or not unit:
            return None
        units.append(unit)
    return units if k < 0 else None


def zero3_units(param_bytes, shard: Shard, bucket_mb: float) -> list:
    """The units zero3 runs with: the shard's own, or units_of its unit size (the bucket size when
    none is given)."""
    if shard.units is not None:
        return [list(u) for u in shard.units]
    return units_of(param_bytes, shard.unit_mb or bucket_mb)


def gathered_phase(compute_ms, gather_ms, prefetch: int, after_ms=None) -> tuple:
    """One phase (forward, or backward) of zero3 units on a compute stream and one communication
    queue served first issued first: unit k computes compute_ms[k] once its gather (gather_ms[k];
    None: already gathered) has ended. The first max(1, N) gathers are issued at the phase start,
    the gather of unit k+N when unit k starts computing (N = prefetch >= 1), or with N = 0 the
    gather of unit k when unit k−1 ends. after_ms[k], when given, is issued when unit k's compute
    ends (its reduce-scatter), before any gather issued at that moment. Issue times never
    decrease, so each operation ends at max(queue free, issued) + cost. Returns (end of compute,
    end of the last communication), ms after the phase began."""
    n = len(compute_ms)
    queue, t = 0.0, 0.0
    ends = np.zeros(n)

    def issue(k: int, at: float) -> None:
        nonlocal queue
        queue = max(queue, at) + gather_ms[k]
        ends[k] = queue

    if gather_ms is not None:
        for k in range(min(max(prefetch, 1), n)):
            issue(k, 0.0)
    for k in range(n):
        if gather_ms is not None and prefetch == 0 and k > 0:
            issue(k, t)
        start = max(t, ends[k]) if gather_ms is not None else t
        if gather_ms is not None and prefetch > 0 and k + prefetch < n:
            issue(k + prefetch, start)
        t = start + compute_ms[k]
        if after_ms is not None:
            queue = max(queue, t) + after_ms[k]
    return t, queue


def _zero3(profile: Profile, shape: Shape, bucket_mb: float, fits: dict, shard: Shard, compute_scale: float):
    """zero3's Prediction: per step forward's and backward's gathered phases, the step the profile's
    plus what each phase ran past its compute. A profile without forward times (forward_ms None)
    is taken as a forward of 0 ms: every forward gather exposed, an upper bound."""
    units = zero3_units(profile.param_bytes, shard, bucket_mb)
    unit_bytes = np.array([profile.param_bytes[u].sum() for u in units], dtype=float)  # (U,) backward order
    ag_ms = np.array([bucket_cost_s(n, shape, fits, "all_gather") * 1e3 for n in unit_bytes])
    rs_ms = np.array([bucket_cost_s(n * profile.wire_factor, shape, fits, "reduce_scatter") * 1e3 for n in unit_bytes])
    prof = profile if compute_scale == 1.0 else profile.scaled(compute_scale)
    forward = np.zeros(len(prof.total_ms)) if prof.forward_ms is None else prof.forward_ms
    share = unit_bytes[::-1] / unit_bytes.sum()  # forward order: forward time apportioned by bytes
    exposed = np.empty(len(prof.total_ms))
    for s in range(len(prof.total_ms)):
        f_end, _ = gathered_phase(forward[s] * share, ag_ms[::-1], shard.prefetch)
        back = float(prof.backward_ms[s])
        arrived = np.where(np.isnan(prof.ready_ms[s]), back, prof.ready_ms[s])
        launch = np.maximum.accumulate([arrived[u].max() for u in units])
        segments = np.diff(launch, prepend=0.0)
        regather = ag_ms if shard.reshard_after_forward else None
        b_end, queue = gathered_phase(segments, regather, shard.prefetch, rs_ms)
        b_wall = b_end + max(0.0, back - launch[-1])  # backward's compute after the last unit
        exposed[s] = (f_end - forward[s]) + (max(b_wall, queue) - back)
    comm = ag_ms.sum() * (2 if shard.reshard_after_forward else 1) + rs_ms.sum()
    return Prediction(
        shape,
        bucket_mb,
        len(units),
        float(np.median(prof.total_ms + exposed)),
        float(np.median(exposed)),
        float(comm),
        float(np.median(profile.total_ms)),
        compute_scale,
    )


def predict_sharded(
    profile: Profile,
    shape: Shape,
    bucket_mb: float,
    fits: dict,
    shard: Shard,
    first_bucket_mb: float | None = None,
    busy_fits: dict | None = None,
    compute_scale: float = 1.0,
    comm_slowdown: float = 1.0,
    overlap: bool = True,
) -> Prediction:
    """scaling_model.predict for a sharded mode (`none` is predict itself). zero1/zero2 add the
    exposed all-gather of every parameter, on idle cores, to each step; `buckets` counts zero3's
    units. zero3 ignores busy_fits, comm_slowdown (idle fits, no polling slowdown: stated) and
    overlap (--overlap off: buckets launched when backward ends, for the other modes)."""
    mode = MODES[shard.mode]
    if mode.gather_per_unit:
        return _zero3(profile, shape, bucket_mb, fits, shard, compute_scale)
    p = predict(
        profile,
        shape,
        bucket_mb,
        fits,
        first_bucket_mb,
        busy_fits=busy_fits,
        compute_scale=compute_scale,
        comm_slowdown=comm_slowdown,
        overlap=overlap,
        collective=mode.grad_collective,
    )
    if not mode.gather_after_step:
        return p
    ag_ms = bucket_cost_s(float(profile.param_bytes.sum()), shape, fits, "all_gather") * 1e3
    return Prediction(
        shape,
        bucket_mb,
        p.buckets,
        p.step_ms + ag_ms,
        p.exposed_ms + ag_ms,
        p.comm_ms + ag_ms,
        p.base_step_ms,
        compute_scale,
    )


@dataclass(frozen=True)
class StateMemory:
    """Per-rank bytes of parameters, gradients, optimizer state and what is gathered in flight."""

    params: float
    grads: float
    optim: float
    in_flight: float

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optim + self.in_flight


def gathered_peak(unit_bytes, uses: list, prefetch: int, reshard_after_forward: bool) -> float:
    """The most unit bytes gathered at once in a step, replaying train/zero3.cc (Zero3Units::forward,
    use, release) event by event: `unit_bytes` (U,) each unit's gathered buffer in forward order,
    `uses` per piece (forward order) the set of units it uses. A unit's buffer is allocated when its
    gather is issued and counted from then. Forward, piece i: its units are issued, and the N =
    `prefetch` units after the last of them; after its forward, with reshard on, the units no later
    piece uses are freed. Backward, piece i (last to first): the units whose first user is piece
    i+1 are freed (its backward is done), then piece i's units are issued (gathered again with
    reshard on; still there without) and the N units before the first of them. So reshard off
    holds every unit at the end of forward; reshard on holds the units of the piece at hand, those
    an earlier piece gathered that a later one still needs (the tied embedding until the head) and
    at most N prefetched, never more than all the units."""
    n = len(uses)
    first_user, last_user = {}, {}
    for i, mine in enumerate(uses):
        for u in mine:
            first_user.setdefault(u, i)
            last_user[u] = i
    gathered, held = set(), [0.0, 0.0]  # the units gathered; [bytes now, the most at once]

    def issue(u: int) -> None:
        if u not in gathered:
            gathered.add(u)
            held[0] += unit_bytes[u]
            held[1] = max(held[1], held[0])

    def release(done: set) -> None:
        for u in done & gathered:
            gathered.discard(u)
            held[0] -= unit_bytes[u]

    def use(i: int, forward: bool) -> None:
        lo, hi = min(uses[i]), max(uses[i])
        ahead = range(hi + 1, min(len(unit_bytes), hi + 1 + prefetch)) if forward else range(max(0, lo - prefetch), lo)
        for u in [*sorted(uses[i]), *ahead]:
            issue(u)

    for i in range(n):
        if uses[i]:
            use(i, True)
        if reshard_after_forward:
            release({u for u, last in last_user.items() if last == i})
    for i in range(n - 1, -1, -1):
        release({u for u, first in first_user.items() if first == i + 1})
        if uses[i]:
            use(i, False)
    return float(held[1])


def piece_uses(units: list, n_params: int, pieces) -> list:
    """Per piece (forward order) the set of units (forward order) it uses: every unit that owns one
    of its parameters (train/zero3.cc uses_). `units` in backward order (units_of); `pieces`
    (model_pieces.Pieces) None: each unit taken as a piece of its own."""
    if pieces is None:
        return [{u} for u in range(len(units))]
    owner = np.empty(n_params, dtype=int)
    for u, params in enumerate(reversed(units)):
        owner[list(params)] = u
    return [{int(owner[k]) for k in params} for params in pieces.uses]


def state_memory(
    mode: str,
    param_bytes,
    ranks: int,
    optimizer: str,
    weights_dtype: str,
    bucket_mb: float,
    first_bucket_mb: float,
    unit_mb: float | None = None,
    prefetch: int = 1,
    reshard_after_forward: bool = True,
    pieces=None,
    units: list | None = None,
) -> StateMemory:
    """Per-rank state of `mode` over `ranks` ranks: P parameter bytes (the profile's param_bytes,
    in the weights' dtype), G = P gradients, O = Ψ·(master + optimizer state) with Ψ = P / (2 for
    bf16 weights, else 4) parameters. DDP P + G + O; zero1 P + G + O/N; zero2 P + G/N + O/N + the
    largest gradient bucket; zero3 P/N + G/N + O/N + gathered_peak of its units (units_of
    `unit_mb`, default the bucket size, or `units` given; each padded to a multiple of N elements as
    train/grad_sync.cc pads them) over the model's `pieces` (model_pieces.py; None: a unit per
    piece)."""
    m = MODES[mode]
    sizes = np.asarray(param_bytes, dtype=float)
    P = float(sizes.sum())
    elem = 2 if weights_dtype == "bf16" else 4
    n_params = P / elem
    optim = n_params * ((MASTER_BYTES if weights_dtype == "bf16" else 0) + OPTIMIZER_STATE_BYTES[optimizer])
    in_flight = 0.0
    if mode == "zero2":
        first = min(first_bucket_mb, bucket_mb)
        in_flight = max(sizes[b].sum() for b in plan_buckets(sizes, *caps_bytes(bucket_mb, first)))
    elif mode == "zero3":
        cut = units if units is not None else units_of(sizes, unit_mb or bucket_mb)
        elems = [int(sizes[u].sum()) // elem for u in reversed(cut)]  # forward order
        padded = [-(-e // ranks) * ranks * elem for e in elems]
        uses = piece_uses(cut, len(sizes), pieces)
        in_flight = gathered_peak(padded, uses, max(prefetch, 0), reshard_after_forward)

    def part(name, x):
        return x / ranks if name in m.sharded else x

    return StateMemory(part("params", P), part("grads", P), part("optim", optim), float(in_flight))


def describe_memory(optimizer: str, weights_dtype: str) -> str:
    """The memory formula's line for the printed header."""
    master = "fp32 master 4Ψ + " if weights_dtype == "bf16" else ""
    elem = 2 if weights_dtype == "bf16" else 4
    state = f"{OPTIMIZER_STATE_BYTES[optimizer]}Ψ ({optimizer})"
    return f"P = G = {elem}Ψ ({weights_dtype} weights), O = {master}{state}"
