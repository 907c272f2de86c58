"""The scaling model's assumptions that a user sets (`dtune model predict|project` flags): one row
per flag with the range the model is defined on, checked in one place (check_assumptions) before
any subcommand computes, and shown in each flag's --help (range_text). A value outside its range,
NaN or infinite, is one line naming the flag and its range (exit 2): the model divides by MFU, peak
and NIC count and sums latencies, so such a value would print nan, negative step times or a verdict
for a cluster that cannot exist. No numpy here: `dtune --help` builds its parsers from this."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Range:
    flag: str
    lo: float
    hi: float
    lo_open: bool  # lo itself excluded: (lo, hi]
    integer: bool
    meaning: str  # what the value is, for the error line

    def text(self) -> str:
        """`(0, 1]` or `[1, 1024]`: the allowed values."""

        def num(x):
            return f"{int(x)}" if float(x).is_integer() else f"{x:g}"

        return f"{'(' if self.lo_open else '['}{num(self.lo)}, {num(self.hi)}]"

    def holds(self, v) -> bool:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return False
        return (v > self.lo if self.lo_open else v >= self.lo) and v <= self.hi


# dest (argparse's attribute) -> its range. The upper bounds are far beyond any machine today (a
# GPU's dense peak 989 TFLOP/s, 8 NICs and GPUs per node, 10^4 nodes): a value past them is a typo
# or a unit mistake, not a cluster, and the model would extrapolate it silently.
RANGES = {
    r.flag.lstrip("-").replace("-", "_"): r
    for r in [
        Range("--mfu", 0, 1, True, False, "the fraction of the GPU's dense peak the model runs at"),
        Range("--peak-tflops", 0, 100_000, True, False, "the GPU's dense peak in TFLOP/s"),
        Range("--compute-scale", 0, 1e6, True, False, "the factor on the profile's times"),
        Range("--batch-scale", 0, 1e6, True, False, "the GPU's batch over the profile's"),
        Range("--alpha-intra-us", 0, 1e6, True, False, "the latency per ring step in µs"),
        Range("--alpha-inter-us", 0, 1e6, True, False, "the latency per ring step in µs"),
        Range("--nics", 1, 64, False, True, "NICs per node"),
        Range("--bucket-mb", 0, 65536, True, False, "a gradient bucket's size in MiB"),
        Range("--first-bucket-mb", 0, 65536, True, False, "the first gradient bucket's size in MiB"),
        Range("--nodes", 1, 65536, False, True, "a node count"),
        Range("--ranks-per-node", 1, 1024, False, True, "ranks on one node"),
        Range("--cores", 0, 65536, False, True, "cores per machine (0: no compute contention)"),
        Range("--nodes-per-machine", 1, 65536, False, True, "nodes on one physical machine"),
        Range("--shard-unit-mb", 0, 65536, True, False, "a zero3 unit's size in MiB"),
        Range("--shard-prefetch", 0, 1024, False, True, "zero3 units gathered ahead of the one computing"),
    ]
}

# `--shard`: how the data-parallel ranks hold the model (sharding.py has what each mode sends).
SHARD_MODES = ("none", "zero1", "zero2", "zero3")
# `--optimizer` (default: the profile's `optimizer` attribute): dtune-train's two (train/optimizer.h).
OPTIMIZERS = ("sgd", "adamw")

# What the sharded modes assume beyond the DDP model, printed with every `--shard` table.
SHARD_ASSUMPTIONS = [
    "reduce-scatter and all-gather of n bytes over p ranks each cost half a ring allreduce of n bytes, "
    "(p-1)·α + (p-1)/p·n·β (Thakur, Rabenseifner, Gropp 2005); where the link was measured (an allreduce "
    "table at that rank count) half the measured allreduce time: dtune-comm measured no reduce-scatter or "
    "all-gather to read; hierarchical: each level's half, the same bytes per level as the allreduce",
    "zero1/zero2: after the optimizer step every rank all-gathers the updated parameters (their full bytes "
    "in the weights' dtype, no compression), exposed after backward's communication; the optimizer's time "
    "is the profile's (not divided by the ranks: pessimistic by at most (1-1/N) of it)",
    "zero3: units planned as buckets are (reverse parameter order, every unit capped at --shard-unit-mb, "
    "default the bucket size); the profile's forward time (0 where the file has none: every forward gather "
    "exposed) apportioned to units by parameter bytes; one "
    "communication queue, first issued first served, for gathers and reduce-scatters; every collective at "
    "the idle-core link fits and backward not slowed by polling (the CPU contention terms apply to "
    "none/zero1/zero2 only)",
    "state memory per rank: parameters P and gradients G in the weights' dtype, optimizer state O = the "
    "fp32 master copy (bf16 weights) + sgd's momentum (4 B per parameter, dtune's sgd has momentum 0.9) or "
    "adamw's two moments (8 B); zero2 adds one gradient bucket, zero3 its gathered units at their peak as "
    "dtune-train holds them (each piece's units, the prefetched ones, the tied embedding until the head; "
    "reshard after forward off: every unit); activations and workspace left out",
]


def range_text(dest: str) -> str:
    """`range (0, 1]` for a flag's --help."""
    return f"range {RANGES[dest].text()}"


def check_assumptions(args) -> str | None:
    """The first assumption in `args` (an argparse namespace) outside its range, as the line to
    print (`--mfu nan: give a number in (0, 1] (...)`); None when all hold. Unset (None) values
    are left to their defaults, which hold; a list (--nodes 1,2) is checked value by value."""
    for dest, r in RANGES.items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if not r.holds(v):
                kind = "an integer" if r.integer else "a number"
                shown = f"{v:g}" if isinstance(v, float) else str(v)
                return f"{r.flag} {shown}: give {kind} in {r.text()} ({r.meaning})"
    return None
