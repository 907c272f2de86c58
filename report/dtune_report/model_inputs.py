"""What `dtune model` reads from results files, and what it refuses (ModelInputError: one line,
exit 2):

- profiles: 1-rank dtune-train runs with per-parameter gradient arrival times (`grad_ready_ms`,
  `param_bytes`; results/SCHEMA.md), their measured steps (warm-up and profiled steps left out);
- link fits: dtune-comm allreduce runs (sum, out-of-place, status ok) at two sizes or more, each
  put on a link level by the hosts its ranks ran on (provenance rank_host): one host → `intra`
  with p = ranks; several hosts with one rank each, or a flat allreduce over several ranks per
  host → `inter` (a ring over all ranks is as slow as its inter-node steps) with p = ranks. Per
  level, α (s per ring step) and β (s per byte) by weighted least squares (weights 1/t², as
  dtune-comm's own fit, doc/metrics.md section 2) of each size's median call time (per timed
  iteration the slowest rank's time, as `dtune compare` counts a call; the median, not the table's
  mean, so that a few calls stalled by a busy machine do not make the link look slow; the mean for
  a run with --load-threads, whose stalls are what it measures) on the ring
  model t = 2(p−1)·α + 2(p−1)/p·S·β, pooled over the runs of that level; a fit from runs of exactly
  the rank count asked for is preferred where there is one, and carries those runs' measured times
  per size (made non-decreasing), which the model reads in place of the line for that rank count
  (scaling_model.LinkFit.measured_s); a run measured as the trainer waits (dtune-comm
  --mpi-progress thread: MPI_Iallreduce polled by a communication thread) counts by the rows of the
  placement the trainer uses for its rank count (trainer_placement) and is preferred over
  blocking-call runs of the same link;
- the launch shape of a multi-rank run: nodes = distinct hosts in its provenance;
- a CPU profile's node cores (provenance topology `cores`) and intra-op threads (`threads`), for
  the compute contention of several ranks on one machine (scaling_model.compute_factor); the ranks
  that share one machine's cores are counted per kernel boot id (provenance rank_boot_id: the
  simulated nodes of scripts/cluster are one machine), per host where a file has no boot ids;
- when each run was measured (provenance start_time and end_time), so that a check can take the
  profile measured nearest in time to each run; a comm run's
  `load_threads` (dtune-comm --load-threads), fitted apart from the idle-core runs: the link
  beside that many busy threads per rank, for reductions that run while backward computes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import h5py
import numpy as np

from .identity import run_identity
from .loader import decode_attr, load_comm, load_runs, open_results, read_topology
from .scaling_model import LinkFit, Profile, Shape, monotone
from .sharding import MODES, Shard, units_from_bytes


class ModelInputError(ValueError):
    """An input `dtune model` cannot use: one line saying what is missing and how to get it."""


# Settings a multi-rank run may differ in from the 1-rank profile it is predicted from: the launch
# shape, and how gradients are synchronised (which the model replays).
SYNC_KEYS = {
    "np",
    "nodes",
    "ranks_per_node",
    "world_size",
    "global_batch",
    "bucket_mb",
    "first_bucket_mb",
    "overlap",
    "compression",
    "backend",
    "reduce_algo",
    "--reduce-algo",
    "shard",  # dtune-train --shard (the flag itself is read from this attribute: identity.py)
    # zero3's units, prefetch and resharding (run_shard reads them): how parameters are gathered,
    # which a 1-rank DDP profile does not depend on.
    "shard_unit",
    "shard_prefetch",
    "reshard_after_forward",
    "OMPI_MCA_mpi_oversubscribe",
}
_WIRE = {"none": 1.0, "fp16": 0.5, "bf16": 0.5}


def _attrs(g) -> dict:
    return {k: decode_attr(v) for k, v in g.attrs.items()}


def measured_steps(g: h5py.Group) -> np.ndarray:
    """Indices of a train run's measured steps: after warm-up, outside a --profile-steps window."""
    a = _attrs(g)
    S = g["total_ms"].shape[0]
    keep = np.arange(S) >= int(a.get("warmup_steps", 0))
    if "profiled" in g:
        keep &= g["profiled"][()] == 0
    return np.flatnonzero(keep)


def shape_of(hosts: list, ranks: int, algorithm: str = "flat") -> Shape:
    """The launch shape from a run's rank → host list; ModelInputError when ranks are spread
    unevenly over hosts (the model has one ranks-per-node figure)."""
    if not hosts or len(hosts) != ranks:
        return Shape(1, ranks, algorithm)
    counts = {h: hosts.count(h) for h in hosts}
    if len(set(counts.values())) != 1:
        raise ModelInputError(f"ranks spread unevenly over hosts {counts}: the model needs the same ranks per node")
    return Shape(len(counts), ranks // len(counts), algorithm)


def ranks_per_machine(hosts: list, boot_ids: list, ranks: int) -> tuple:
    """(the most ranks on one physical machine, what was counted): per kernel boot id ("machine")
    where every rank recorded a non-empty one (provenance rank_boot_id), else per host name
    ("node": files from before boot ids were recorded, where two simulated nodes on one machine
    count apart), else all ranks on one node."""
    if boot_ids and len(boot_ids) == ranks and all(boot_ids):
        return max(boot_ids.count(b) for b in set(boot_ids)), "machine"
    if hosts and len(hosts) == ranks:
        return max(hosts.count(h) for h in set(hosts)), "node"
    return ranks, "node"


def parse_time(text) -> datetime | None:
    """An ISO 8601 provenance time (start_time, end_time) as a datetime; None when absent or bad."""
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")) if text else None
    except ValueError:
        return None


def run_midpoint(run: dict) -> datetime | None:
    """Halfway between a run's provenance start_time and end_time (start_time alone when the file
    has no end; None when neither is recorded)."""
    start, end = parse_time(run.get("start_time")), parse_time(run.get("end_time"))
    if start is None:
        return end
    return start if end is None else start + (end - start) / 2


@dataclass
class ProfileRun:
    file: str
    run: str
    attrs: dict
    identity: dict
    profile: Profile
    cores: int = 0  # the profiled node's cores (provenance topology; 0: not recorded)
    when: datetime | None = None  # the middle of its measurement (run_midpoint)

    @property
    def threads(self) -> int:
        """The intra-op threads the profile computed with (dtune-train records the resolved count)."""
        return int(self.attrs.get("threads", 1) or 1)


def _profile(path: Path, name: str, g: h5py.Group) -> Profile:
    a = _attrs(g)
    steps = measured_steps(g)
    if len(steps) == 0:
        raise ModelInputError(f"{path}: /runs/{name}: no measured step (all warm-up or profiled)")
    ready = g["grad_ready_ms"][()]
    if ready.shape[0] != g["total_ms"].shape[0]:
        raise ModelInputError(f"{path}: /runs/{name}: grad_ready_ms has {ready.shape[0]} steps, total_ms another count")
    return Profile(
        total_ms=g["total_ms"][()][steps, 0],
        backward_ms=g["backward_ms"][()][steps, 0],
        ready_ms=ready[steps],
        param_bytes=g["param_bytes"][()].astype(np.int64),
        first_bucket_mb=float(a.get("first_bucket_mb", 1.0)),
        wire_factor=_WIRE.get(str(a.get("compression", "none")), 1.0),
        label=f"{a.get('model')} batch {a.get('batch')} {a.get('precision')} threads {a.get('threads')}",
        meta=a,
        forward_ms=g["forward_ms"][()][steps, 0] if "forward_ms" in g else None,
    )


def load_profiles(paths) -> list:
    """Every 1-rank train run with gradient arrival times, as ProfileRun (status ok only)."""
    runs = load_runs(paths)
    out = []
    for r in runs[runs.benchmark == "train"].itertuples(index=False):
        a = r.attrs
        if a.get("status") != "ok" or int(a.get("world_size", 0)) != 1:
            continue
        with open_results(Path(r.file)) as f:
            g = f["runs"][r.run]
            if "grad_ready_ms" not in g or "param_bytes" not in g or g["param_bytes"].shape[0] == 0:
                continue
            prof = _profile(Path(r.file), r.run, g)
        # CPU ranks share the node's cores; GPU ranks compute on their own device.
        cpu = str(a.get("device", "cpu")) == "cpu"
        cores = int(read_topology(r.file).get("cores", 0) or 0) if cpu else 0
        row = r._asdict()
        out.append(ProfileRun(r.file, r.run, a, sync_free_identity(row), prof, cores, run_midpoint(row)))
    return out


def sync_free_identity(run: dict) -> dict:
    """A run's identity (identity.run_identity) less what the model varies (SYNC_KEYS) and the
    MPI library's settings (OMPI_MCA_*, PMIX_MCA_*: the launch and the transport, e.g. the
    simulated cluster's tune file, which the link fits stand for; a 1-rank profile has none)."""
    ident = run_identity(run, by_point=False)
    return {k: v for k, v in ident.items() if k not in SYNC_KEYS and not k.startswith(("OMPI_MCA_", "PMIX_MCA_"))}


def pooled_profile(runs: list) -> Profile:
    """One Profile of every measured step of `runs` (profiles of one model and settings, e.g.
    measured in turns between multi-rank runs): their medians are the median over all of them."""
    first = runs[0].profile
    if any(len(r.profile.param_bytes) != len(first.param_bytes) for r in runs):
        raise ModelInputError("profiles with the same settings but different parameters: cannot pool them")
    return Profile(
        np.concatenate([r.profile.total_ms for r in runs]),
        np.concatenate([r.profile.backward_ms for r in runs]),
        np.concatenate([r.profile.ready_ms for r in runs]),
        first.param_bytes,
        first.first_bucket_mb,
        first.wire_factor,
        first.label,
        dict(first.meta, pooled=len(runs)),
        None
        if any(r.profile.forward_ms is None for r in runs)
        else np.concatenate([r.profile.forward_ms for r in runs]),
    )


def nearest_profile(runs: list, when: datetime | None):
    """The profile run measured nearest in time to `when` (the midpoints, run_midpoint); the
    first when either time is unknown."""
    timed = [r for r in runs if r.when is not None]
    if when is None or not timed:
        return runs[0]
    return min(timed, key=lambda r: abs((r.when - when).total_seconds()))


def profile_ids(found: list) -> list:
    """Each profile's identifier `FILE:RUN`, FILE the shortest tail of its path that tells the
    files apart (`profile.h5:RUN`, or `a/profile.h5:RUN` beside `b/profile.h5:RUN`): what
    `--run` takes (one_profile)."""
    files = sorted({str(p.file) for p in found})
    for k in range(1, max((len(Path(f).parts) for f in files), default=1) + 1):
        tails = {f: str(Path(*Path(f).parts[-k:])) for f in files}
        if len(set(tails.values())) == len(files):
            break
    return [f"{tails[str(p.file)]}:{p.run}" for p in found]


def _named(p: ProfileRun, run: str) -> bool:
    """Is `p` the profile `--run` names: a run name (or its prefix), or FILE:RUN with FILE the
    file's path or a tail of it (profile_ids)."""
    if p.run == run or p.run.startswith(run):
        return True
    file, _, name = run.rpartition(":")
    if not file or not (p.run == name or (name and p.run.startswith(name))):
        return False
    parts, want = Path(p.file).parts, Path(file).parts
    return Path(p.file) == Path(file) or (len(want) <= len(parts) and parts[-len(want) :] == want)


def one_profile(paths, run: str | None = None) -> ProfileRun:
    """The profile `dtune model predict/project` uses: the only one, or the one `run` names (a run
    name or prefix, or an identifier FILE:RUN as profile_ids prints it)."""
    found = load_profiles(paths)
    if run is not None:
        found = [p for p in found if _named(p, run)]
    if not found:
        raise ModelInputError(
            f"no 1-rank dtune-train run with per-parameter gradient times (grad_ready_ms) in "
            f"{', '.join(map(str, paths))}{' named ' + run if run else ''}: record one with "
            "`build/bin/dtune-train --model ... --steps 20` (one rank) from this version of dtune"
        )
    if len(found) > 1:
        ids = profile_ids(found)
        names = ", ".join(ids[:6]) + (f", ... ({len(ids) - 6} more)" if len(ids) > 6 else "")
        raise ModelInputError(f"{len(found)} 1-rank profiles ({names}): name one with --run FILE:RUN, as listed")
    return found[0]


@dataclass
class LinkFits:
    """Fits per (level, ranks, load threads) and pooled over rank counts per (level, load
    threads); get() prefers the exact rank count. Load threads: dtune-comm --load-threads, the
    busy threads per rank the link was measured beside (0: idle cores)."""

    by_ranks: dict = field(default_factory=dict)  # (level, p, load) -> LinkFit
    pooled: dict = field(default_factory=dict)  # (level, load) -> LinkFit
    notes: list = field(default_factory=list)

    def get(self, level: str, ranks: int, load: int = 0):
        return self.by_ranks.get((level, ranks, load)) or self.pooled.get((level, load))

    def busy_for_shape(self, shape: Shape, threads: int):
        """{level: LinkFit} measured beside `threads` busy threads per rank, for every level the
        shape's reduction crosses; None where one is missing (or threads < 1)."""
        if threads < 1:
            return None
        try:
            return self.for_shape(shape, threads)
        except ModelInputError:
            return None

    def for_shape(self, shape: Shape, load: int = 0) -> dict:
        """{level: LinkFit} for every level the shape's reduction crosses, measured beside `load`
        busy threads per rank; ModelInputError naming the missing level and how to measure it."""
        out = {}
        for level in shape.levels():
            p = shape.ranks_per_node if level == "intra" and shape.nodes > 1 else shape.ranks
            if level == "inter" and shape.algorithm == "hierarchical" and shape.ranks_per_node > 1:
                p = shape.nodes
            fit = self.get(level, p, load)
            if fit is None:
                how = (
                    "a dtune-comm allreduce on one node with 2 or more ranks (mpirun -np 2 build/bin/dtune-comm "
                    "-b 1K -e 16M -f 4)"
                    if level == "intra"
                    else "a dtune-comm allreduce across nodes (its ranks on two hosts or more)"
                )
                raise ModelInputError(
                    f"no {level}-node allreduce fit for {shape.nodes} node(s) x {shape.ranks_per_node} ranks: add {how}"
                )
            out[level] = fit
        return out


def fit_ring(p: np.ndarray, size: np.ndarray, t_s: np.ndarray, source: str) -> LinkFit:
    """Weighted (1/t²) least squares of t = 2(p−1)·α + 2(p−1)/p·S·β with α, β >= 0 (a negative
    one is set to 0 and the other refitted alone)."""
    X = np.column_stack([2 * (p - 1), 2 * (p - 1) / p * size]).astype(float)
    w = 1.0 / t_s
    coef, *_ = np.linalg.lstsq(X * w[:, None], t_s * w, rcond=None)
    if coef[0] < 0 or coef[1] < 0:
        k = 1 if coef[0] < 0 else 0
        col = X[:, k] * w
        coef = np.zeros(2)
        coef[k] = max(0.0, float(col @ (t_s * w)) / float(col @ col))
    return LinkFit(float(coef[0]), float(coef[1]), source)


def comm_level(shape: Shape):
    """(level, ranks in the ring) a dtune-comm run measures; None for one it cannot be used for."""
    if shape.ranks < 2:
        return None
    if shape.nodes == 1:
        return "intra", shape.ranks
    if shape.algorithm == "flat" or shape.ranks_per_node == 1:
        return "inter", shape.ranks
    return None  # hierarchical across nodes: two levels in one time


def trainer_placement(ranks: int) -> str:
    """How dtune-train's MPI reducer calls MPI_Iallreduce over `ranks` ranks (train/mpi_reducer.cc):
    out of place from 4 ranks (Open MPI's coll/libnbc then reduces large buffers by reduce-scatter
    + allgather instead of a binomial tree; the 64 KiB floor is left out: below it both are
    binomial), in place below."""
    return "out-of-place" if ranks >= 4 else "in-place"


def load_link_fits(paths) -> LinkFits:
    """LinkFits from every usable allreduce run in `paths`; ModelInputError for a run measured at a
    single size (no fit can come from it)."""
    calls = load_comm(paths)
    fits = LinkFits()
    if calls.empty:
        return fits
    runs = load_runs(paths)
    runs = runs[runs.benchmark == "comm"].set_index(["file", "run"])
    sel = calls[(calls.collective == "allreduce") & (calls.op == "sum") & (calls.status == "ok")]
    # (file, run, size) -> the median over iterations of the slowest rank's time; the mean for a
    # run beside busy threads, whose stalls (a rank's core held by them when the call starts) are
    # what it measures: the expected cost of a reduction is their mean.
    slowest = sel.groupby(["file", "run", "placement", "size_bytes", "iteration"]).time_us.max()
    median = slowest.groupby(["file", "run", "placement", "size_bytes"]).median().reset_index()
    mean = slowest.groupby(["file", "run", "placement", "size_bytes"]).mean().reset_index()
    rows = {}  # (level, p, load) -> {progress: [(sizes, seconds)]}
    for (file, run, placement), g in median.groupby(["file", "run", "placement"]):
        # How the run waited: the library's blocking call (its out-of-place rows, as nccl-tests
        # reads them), or (--mpi-progress thread) polled by a communication thread as the
        # trainer's reducer does (the rows of the placement the trainer uses for that many ranks).
        info = runs.loc[(file, run)]
        progress = str(info["attrs"].get("mpi_progress", "") or "call")
        ranks = int(info["world_size"] or len(info["hosts"] or []) or 1)
        if placement != (trainer_placement(ranks) if progress == "thread" else "out-of-place"):
            continue
        if len(g) < 2:
            raise ModelInputError(
                f"{file}: /runs/{run}: allreduce measured at a single size ({int(g.size_bytes.iloc[0])} B); "
                "an α–β fit needs two sizes or more (dtune-comm -b 1K -e 16M -f 4)"
            )
        hosts = list(info["hosts"] or [])
        level = comm_level(shape_of(hosts, ranks, str(info["attrs"].get("algorithm", "flat"))))
        if level is None:
            fits.notes.append(f"{Path(file).name}:{run} not used (one rank, or hierarchical across nodes)")
            continue
        load = int(info["attrs"].get("load_threads", 0))
        if load > 0:
            g = mean[(mean.file == file) & (mean.run == run) & (mean.placement == placement)]
        key = (*level, load)
        parts = rows.setdefault(key, {}).setdefault(progress, [])
        parts.append((g.size_bytes.to_numpy(float), g.time_us.to_numpy(float) * 1e-6))
    # Where a link was measured both ways, the runs that wait as the trainer does are the fit.
    progress_of = {k: "thread" if "thread" in v else "call" for k, v in rows.items()}
    rows = {k: v[progress_of[k]] for k, v in rows.items()}

    def beside(load: int) -> str:
        return f", beside {load} busy thread{'s' if load > 1 else ''} per rank, mean call" if load else ""

    def how(keys) -> str:
        return ", thread-polled" if any(progress_of[k] == "thread" for k in keys) else ""

    for (level, p, load), parts in rows.items():
        size = np.concatenate([s for s, _ in parts])
        t = np.concatenate([x for _, x in parts])
        source = f"{level}, {p} ranks{beside(load)}{how([(level, p, load)])}"
        fit = fit_ring(np.full(len(size), float(p)), size, t, source)
        # The measured times themselves for this rank count: per size the median over the runs,
        # made non-decreasing in size (scaling_model.monotone).
        table = sorted({float(x) for x in size})
        times = monotone([float(np.median(t[size == x])) for x in table])
        fits.by_ranks[(level, p, load)] = LinkFit(
            fit.alpha_s, fit.beta_s_per_byte, source, tuple(table), tuple(float(x) for x in times), p
        )
    for level, load in {(lv, ld) for lv, _, ld in rows}:
        keys = sorted(k for k in rows if k[0] == level and k[2] == load)
        size = np.concatenate([s for k in keys for s, _ in rows[k]])
        t = np.concatenate([x for k in keys for _, x in rows[k]])
        p = np.concatenate([np.full(len(s), float(k[1])) for k in keys for s, _ in rows[k]])
        ps = "/".join(str(k[1]) for k in keys)
        fits.pooled[(level, load)] = fit_ring(p, size, t, f"{level}, pooled over {ps} ranks{beside(load)}{how(keys)}")
    return fits


def train_shape(run: dict) -> Shape:
    """A train run's launch shape (nodes from its recorded hosts) and reduction algorithm."""
    a = run["attrs"]
    algo = str(a.get("reduce_algo", "flat"))
    return shape_of(list(run["hosts"] or []), int(a.get("world_size", 1)), algo)


def run_shard(file: str, run: str, attrs: dict) -> Shard:
    """The sharding a train run ran with, from its results (results/SCHEMA.md): `shard` (none in
    files from before it) and, for zero3, `shard_unit` (block, or a size in MiB), `shard_prefetch`
    and `reshard_after_forward` (zero3 runs written before them: block units, prefetch 0, reshard
    on). Block units are the run's own: its bucket_bytes (one per unit, backward order) cut from its
    param_bytes (sharding.units_from_bytes). ModelInputError for what cannot be modelled."""
    mode = str(attrs.get("shard", "none"))
    if mode not in MODES:
        raise ModelInputError(f"--shard {mode}, not modelled")
    if mode != "zero3":
        return Shard(mode)
    prefetch = int(attrs.get("shard_prefetch", 0))
    reshard = int(attrs.get("reshard_after_forward", 1)) != 0
    unit = str(attrs.get("shard_unit", "block"))
    if unit != "block":
        try:
            mib = float(unit)
        except ValueError:
            mib = float("nan")
        if not np.isfinite(mib) or mib <= 0:
            raise ModelInputError(f"--shard-unit {unit!r}: neither block nor a size in MiB, not modelled")
        return Shard(mode, mib, prefetch, reshard)
    with open_results(Path(file)) as f:
        g = f["runs"][run]
        if "param_bytes" not in g or "bucket_bytes" not in g:
            raise ModelInputError("--shard-unit block: no param_bytes and bucket_bytes to read its units from")
        units = units_from_bytes(g["param_bytes"][()], g["bucket_bytes"][()])
    if units is None:
        raise ModelInputError("--shard-unit block: its units (bucket_bytes) are not runs of whole parameters")
    return Shard(mode, None, prefetch, reshard, tuple(tuple(u) for u in units))


def shard_label(shard: Shard, attrs: dict) -> str:
    """The shard column: the mode; for zero3 `zero3:UNIT,pN,on|off` (unit as given, prefetch,
    reshard after forward)."""
    if shard.mode != "zero3":
        return shard.mode
    unit = "block" if shard.units is not None else str(attrs.get("shard_unit"))
    return f"zero3:{unit},p{shard.prefetch},{'on' if shard.reshard_after_forward else 'off'}"
