"""`dtune model plan`: every layout of a transformer on a cluster (data × tensor × pipeline
parallelism, the sharding of the data axis, the micro-batches, activation checkpointing), its
step time and memory per rank predicted from the model's shape, the layouts that do not fit
dropped, the rest ranked, and why the first beats the second. A plan from arithmetic, not a
measurement; what it assumes is printed with it (ASSUMED).

The model's shape and units come from `dtune-models list --json` (models/model_size.cc: each
unit's parameters and the part of them `--tp` cuts). The mesh is dtune-train's default order,
tp innermost, then pp, then dp (Megatron's and torchtitan's): a tensor-parallel group is T
consecutive ranks, within a node while T divides the GPUs per node.

Per rank (the stage that needs the most; stages hold the blocks evenly, the first one more, the
embedding on the first, the head on the last, a tied embedding on both ends):
- parameters: a unit's uncut elements whole, its cut ones / T; weights at their dtype, gradients
  at the weights' (with a data axis, DDP and zero1 twice: the parameters' and the buckets'), the
  optimizer's state (sgd 4 bytes, adamw 8, and the fp32 master with bf16 weights), 1/D of each as
  ZeRO shards it (zero1 the state, zero2 + gradients with at most two buckets in flight, zero3 +
  weights with the units in use gathered), and under bf16/fp16 autocast with fp32 weights a
  2-byte copy of every weight (doc/metrics.md section 10);
- activations per micro-batch and block, in elements per token (Korthikanti et al. 2022 without
  dropout and with fused attention, so nothing of size T²): the norms' inputs and outputs 4h
  (/T with sequence parallelism), the attention's q, k, v and output and the MLP's inner
  tensors / T (GPT-2: 12h; Llama: 2·H·d + 2·KV·d + 4·I), with tp the two row-parallel layers'
  all-reduced outputs 2h; full checkpointing keeps the block's input h (/T with SP), selective
  drops the attention half's; the head keeps the final norm's input and output and the fp32
  logits and log-softmax (2·V/T per token), and one block's whole set (recomputed, or its
  gradients' transients) takes their place in the backward. Under 1F1B stage k holds
  min(M, P − k) micro-batches. Against dtune-train's measured peak on the CPU (counting
  allocator, llama3-tiny): -10% to +9% without stages; with stages up to 31% low (full
  checkpointing in a pipeline holds more than this counts).

Per step (one pipeline; all pipelines alike):
- compute: the model's training FLOPs (dtune-models' count) at --mfu of the GPU's peak, cut over
  the tp group and the stages (the head's 6·V·h·T per sample on the last stage); checkpointing
  adds the recomputed forward (a third of its blocks' FLOPs, full; of their attention's, selective);
- tensor parallelism, not overlapped (as Megatron without its overlap options): per micro-batch
  and block four all-reduces of b·T·h (five with selective checkpointing, six with full), one for
  the embedding and one for the head, three (B, T) fp32 ones for the cross-entropy; sequence
  parallelism moves the same bytes as all-gathers and reduce-scatters (the same time on a ring);
- the pipeline: the first micro-batch through every stage, the others on the slowest one, with
  each stage's send of b·T·h (/T with SP) forward and back, not overlapped;
- the data axis: each stage's gradients in 25 MiB buckets, all-reduced (zero2, zero3:
  reduce-scattered) as the last micro-batch's backward makes them (scaling_model.replay); zero1
  and zero2 all-gather the parameters after the step; zero3 gathers each unit before its forward
  and backward in every micro-batch, the next one while the current one computes (exposed: what
  the compute does not hide) and reduce-scatters in every micro-batch;
- the links: the cluster's published bus bandwidths (clusters.py) with the projection's latencies;
  a group within a node on NVLink, across nodes hierarchical, the node's NICs shared by the
  groups that cross them at once; the optimizer's step and the data loading are not counted.
"""

from __future__ import annotations

import json
import math
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .scaling_model import LinkFit, Shape, bucket_cost_s, replay

GIB = 1 << 30
BUCKET_BYTES = 25 << 20
OPTIMIZER_BYTES = {"sgd": 4, "adamw": 8}
ASSUMED = [
    "mesh order tp, pp, dp (tp innermost); stages hold blocks evenly, embedding first, head last",
    "compute: the model's training FLOPs at the given MFU of the GPU's peak, split evenly over tp",
    "tensor-parallel and pipeline sends not overlapped with compute; data-parallel buckets (25 MiB) "
    "overlapped with the last micro-batch's backward",
    "activations: Korthikanti et al. 2022's count without dropout, fused attention (no T² term)",
    "not counted: the optimizer's step, data loading, the framework's own memory and fragmentation",
]


class PlanError(ValueError):
    """An input the planner cannot use: the one line to print."""


@dataclass(frozen=True)
class ModelShape:
    name: str
    parameters: int
    flops_per_sample: float  # training FLOPs of one sequence (dtune-models' convention)
    tied: bool
    layers: int
    width: int
    heads: int
    kv_heads: int
    head_dim: int
    mlp: int
    vocab: int
    context: int
    units: tuple  # ((name, parameters, tp_split), ...) in forward order

    @property
    def llama(self) -> bool:
        return self.units[-1][0] == "head"

    def act_elements(self) -> tuple:
        """A block's saved activations per token: (replicated over tp, cut over tp)."""
        h = self.width
        if self.llama:
            return 4 * h, 2 * self.heads * self.head_dim + 2 * self.kv_heads * self.head_dim + 4 * self.mlp
        return 4 * h, 12 * h

    def attention_share(self) -> float:
        """The attention half's part of a block's saved activations cut over tp (what selective
        checkpointing recomputes)."""
        rep, cut = self.act_elements()
        attn = 2 * self.heads * self.head_dim + 2 * self.kv_heads * self.head_dim if self.llama else 4 * self.width
        return attn / cut


def load_shape(model: str, bin_dir: Path, context: int = 0, layers: int = 0, vocab: int = 0) -> ModelShape:
    """The model's shape from `dtune-models list --json` (a transformer's; a ResNet is refused)."""
    cmd = [str(bin_dir / "dtune-models"), "list", "--json", "--model", model]
    for flag, v in (("--context", context), ("--layers", layers), ("--vocab", vocab)):
        if v:
            cmd += [flag, str(v)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except OSError as e:
        raise PlanError(f"cannot run {cmd[0]}: {e.strerror} (build dtune, or set DTUNE_BIN_DIR)") from None
    if out.returncode:
        raise PlanError((out.stderr.strip().splitlines() or [f"dtune-models exited {out.returncode}"])[-1])
    m = json.loads(out.stdout)[0]
    s = m["shape"]
    if not s["layers"]:
        raise PlanError(f"--model {model}: plan lays out transformers (gpt2-*, llama3*); a ResNet has no tp or pp")
    units = tuple((u["name"], int(u["parameters"]), int(u["tp_split"])) for u in m["units"])
    return ModelShape(
        m["name"],
        int(m["parameters"]),
        float(m["training_flops_per_sample"]),
        bool(m["tied_embedding"]),
        *(int(s[k]) for k in ("layers", "width", "heads", "kv_heads", "head_dim", "mlp", "vocab", "context")),
        units,
    )


@dataclass(frozen=True)
class Machine:
    """The cluster as the plan sees it: nodes of G GPUs, their links, each GPU's rate and memory."""

    nodes: int
    gpus_per_node: int
    fits: dict  # {"intra": LinkFit, "inter": LinkFit}: the node's links (inter: all its NICs)
    flops_per_s: float  # one GPU's achieved training rate (peak × MFU)
    memory_bytes: float
    peak_flops_per_s: float

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class Run:
    """What the layouts share: the global batch in sequences, the micro-batch size a rank takes
    at once, the precision of the compute, the weights' dtype and the optimizer."""

    global_batch: int
    micro_batch: int = 1
    precision: str = "bf16"
    weights: str = "fp32"
    optimizer: str = "adamw"

    @property
    def act_bytes(self) -> int:
        return 4 if self.precision in ("fp32", "tf32") else 2

    @property
    def weight_bytes(self) -> int:
        return 2 if self.weights == "bf16" else 4


@dataclass(frozen=True)
class Layout:
    dp: int
    tp: int
    pp: int
    shard: str = "none"
    micro_batches: int = 1
    checkpoint: str = "none"
    sp: bool = False

    def label(self) -> str:
        sp = "+sp" if self.sp else ""
        return f"dp{self.dp} tp{self.tp}{sp} pp{self.pp} {self.shard} M{self.micro_batches} ckpt:{self.checkpoint}"

    def flags(self) -> str:
        """dtune-train's flags for it."""
        f = [f"--tp {self.tp}"] if self.tp > 1 else []
        f += ["--sequence-parallel"] if self.sp else []
        f += [f"--pp {self.pp} --micro-batches {self.micro_batches}"] if self.pp > 1 else []
        f += [f"--accum-steps {self.micro_batches}"] if self.pp == 1 and self.micro_batches > 1 else []
        f += [f"--shard {self.shard}"] if self.shard != "none" else []
        f += [f"--activation-checkpoint {self.checkpoint}"] if self.checkpoint != "none" else []
        return " ".join(f)


@dataclass
class Plan:
    layout: Layout
    parts_ms: dict  # compute, recompute, tp, bubble, p2p, dp, shard: ms per step
    memory: dict  # weights, grads, optimizer, cast, gathered, activations: bytes on the fullest rank
    tp_bytes: int  # one pipeline's tensor-parallel bytes per step (as dtune-train records them)
    fits: bool = True
    mfu: float = 0.0

    @property
    def step_ms(self) -> float:
        return sum(self.parts_ms.values())

    @property
    def memory_bytes(self) -> float:
        return sum(self.memory.values())


def layouts(shape: ModelShape, ranks: int, run: Run, tps, pps, shards, checkpoints, sp=(False, True)):
    """Every layout of `ranks` from the choices, and [(what, why)] for the choices refused."""
    out, refused = [], []
    for tp in tps:
        bad = [
            n
            for n, v in (
                ("heads", shape.heads),
                ("KV heads", shape.kv_heads),
                ("MLP width", shape.mlp),
                ("vocabulary", shape.vocab),
            )
            if v % tp
        ]
        if ranks % tp or bad:
            refused.append((f"tp{tp}", f"does not divide the {', '.join(bad) or f'{ranks} ranks'}"))
            continue
        for pp in pps:
            if (ranks // tp) % pp or pp > shape.layers:
                refused.append(
                    (
                        f"tp{tp} pp{pp}",
                        f"does not divide {ranks} ranks into tp x pp x dp"
                        if (ranks // tp) % pp
                        else f"more stages than {shape.layers} blocks",
                    )
                )
                continue
            dp = ranks // (tp * pp)
            if run.global_batch % (dp * run.micro_batch):
                refused.append(
                    (
                        f"dp{dp} tp{tp} pp{pp}",
                        f"the global batch {run.global_batch} is not a multiple "
                        f"of dp {dp} x micro-batch {run.micro_batch}",
                    )
                )
                continue
            m = run.global_batch // (dp * run.micro_batch)
            for shard in shards:
                if shard != "none" and dp == 1:
                    continue  # the same as none: nothing to shard over
                for ck in checkpoints:
                    for s in sp if tp > 1 and shape.llama and shape.context % tp == 0 else (False,):
                        out.append(Layout(dp, tp, pp, shard, m, ck, s))
    return out, refused


def stage_units(shape: ModelShape, pp: int) -> list:
    """[[unit, ...] per stage]: blocks evenly (the first stages one more), the embedding on the
    first, the head on the last, a tied embedding on both ends."""
    embed, blocks, head = shape.units[0], list(shape.units[1:-1]), shape.units[-1]
    per, extra = divmod(len(blocks), pp)
    stages, i = [], 0
    for k in range(pp):
        n = per + (k < extra)
        stages.append(blocks[i : i + n])
        i += n
    stages[0].insert(0, embed)
    stages[-1].append(head)
    if shape.tied and pp > 1:
        stages[-1].append(embed)
    return stages


def _rank_elems(unit, tp: int) -> float:
    _, n, cut = unit
    return n - cut + cut / tp


def _group(ranks: int, stride: int, gpus: int) -> Shape:
    """The shape of a group of `ranks` ranks `stride` apart on nodes of `gpus` GPUs."""
    per_node = max(1, min(ranks, gpus // stride)) if stride <= gpus else 1
    return Shape(math.ceil(ranks / per_node), per_node, "hierarchical")


def _shared(fits: dict, groups: int) -> dict:
    """The links with the node's NICs shared by `groups` groups crossing them at once."""
    inter = fits["inter"]
    return {
        "intra": fits["intra"],
        "inter": LinkFit(inter.alpha_s, inter.beta_s_per_byte * max(1, groups), inter.source),
    }


def tp_traffic(
    shape: ModelShape, lo: Layout, run: Run, blocks: int, first: bool, last: bool, group: Shape, fits: dict
) -> tuple:
    """A stage's tensor-parallel (bytes, ms) per micro-batch. The bytes as dtune-train records
    them (tp_comm_bytes: each collective's whole tensor, as nccl-tests sizes it): per block four
    all-reduces of the (b, T, h) activations (five with selective checkpointing, six with full),
    the embedding's one and the head's one, the cross-entropy's three (b, T) fp32 figures; with
    sequence parallelism each of those (b, T, h) all-reduces an all-gather and a reduce-scatter of
    it, and the norms' weight gradients all-reduced. The time: a ring all-gather and reduce-scatter
    cost what the all-reduce they replace does."""
    if lo.tp == 1:
        return 0, 0.0
    tokens, h = run.micro_batch * shape.context, shape.width
    act = tokens * h * run.act_bytes
    n = blocks * {"none": 4, "selective": 5, "full": 6}[lo.checkpoint] + first + last
    ce = 3 * tokens * 4 if last else 0
    norms = (2 * blocks + last) * h * run.weight_bytes if lo.sp else 0
    ms = (
        n * bucket_cost_s(act, group, fits)
        + (3 * bucket_cost_s(tokens * 4, group, fits) if last else 0)
        + (2 * blocks + last) * bucket_cost_s(h * run.weight_bytes, group, fits) * lo.sp
    ) * 1e3
    return n * act * (2 if lo.sp else 1) + ce + norms, ms


def plan(shape: ModelShape, layout: Layout, run: Run, machine: Machine) -> Plan:
    """One layout's step time and memory on the machine (the module's docstring says how)."""
    lo, T, h = layout, shape.context, shape.width
    tokens = run.micro_batch * T
    stages = stage_units(shape, lo.pp)
    head_flops = 6 * shape.vocab * h * T  # per sample
    block_flops = (shape.flops_per_sample - head_flops) / shape.layers
    attn_cut = shape.attention_share()
    ck_extra = {"none": 0.0, "full": 1 / 3, "selective": attn_cut / 3}[lo.checkpoint]
    tp_shape = _group(lo.tp, 1, machine.gpus_per_node)
    tp_fits = _shared(machine.fits, machine.gpus_per_node // max(1, tp_shape.ranks_per_node))
    act_b = run.act_bytes
    crossing = lo.tp * lo.pp > machine.gpus_per_node
    p2p_fit = machine.fits["inter" if crossing else "intra"]
    p2p_bytes = tokens * h * act_b / (lo.tp if lo.sp else 1)
    p2p_s = (p2p_fit.alpha_s + p2p_bytes * p2p_fit.beta_s_per_byte) if lo.pp > 1 else 0.0

    per_micro, tp_bytes = [], 0
    for k, units in enumerate(stages):
        blocks = sum(1 for u in units if u[0] not in ("embed", "head", "ln_f"))
        last = k == lo.pp - 1
        flops = run.micro_batch * (blocks * block_flops + (head_flops if last else 0)) / lo.tp
        c = flops / machine.flops_per_s * 1e3
        rc = run.micro_batch * blocks * block_flops * ck_extra / lo.tp / machine.flops_per_s * 1e3
        b, t = tp_traffic(shape, lo, run, blocks, k == 0, last, tp_shape, tp_fits)
        per_micro.append((c, rc, t, 2 * p2p_s * 1e3))
        tp_bytes += b * lo.micro_batches
    slowest = max(range(lo.pp), key=lambda k: sum(per_micro[k]))
    M = lo.micro_batches
    c, rc, t, p = per_micro[slowest]
    compute, recompute, tp_ms, p2p = M * c, M * rc, M * t, M * p
    critical = sum(sum(x) for x in per_micro) + (M - 1) * sum(per_micro[slowest])
    bubble = critical - M * sum(per_micro[slowest])

    # The data axis, on the slowest stage (the step waits for every stage's).
    elems = sum(_rank_elems(u, lo.tp) for u in stages[slowest])
    dp_shape = _group(lo.dp, lo.tp * lo.pp, machine.gpus_per_node)
    dp_fits = _shared(machine.fits, machine.gpus_per_node // max(1, dp_shape.ranks_per_node))
    wb = run.weight_bytes
    grad_bytes = elems * wb
    collective = "reduce_scatter" if lo.shard in ("zero2", "zero3") else "allreduce"
    n_buckets = max(1, math.ceil(grad_bytes / BUCKET_BYTES))
    bucket = grad_bytes / n_buckets
    cost_ms = bucket_cost_s(bucket, dp_shape, dp_fits, collective) * 1e3
    backward = (c + rc) * 2 / 3
    dp_ms, shard_ms = 0.0, 0.0
    if lo.dp > 1:
        ready = [backward * (i + 1) / n_buckets for i in range(n_buckets)]
        exposed, _, _ = replay(ready, backward, [cost_ms] * n_buckets)
        # zero3 reduce-scatters every micro-batch's gradients; the others the last one's.
        dp_ms = exposed * (M if lo.shard == "zero3" else 1)
        if lo.shard in ("zero1", "zero2"):
            shard_ms = bucket_cost_s(elems * wb, dp_shape, dp_fits, "all_gather") * 1e3
        elif lo.shard == "zero3":
            units = stages[slowest]
            gathers = [bucket_cost_s(_rank_elems(u, lo.tp) * wb, dp_shape, dp_fits, "all_gather") * 1e3 for u in units]
            share = [_rank_elems(u, lo.tp) / elems for u in units]
            fwd = gathers[0] + sum(max(0.0, g - c / 3 * s) for g, s in zip(gathers[1:], share))
            bwd = gathers[-1] + sum(max(0.0, g - backward * s) for g, s in zip(gathers[:-1], share[1:]))
            shard_ms = M * (fwd + bwd)

    parts = {
        "compute": compute,
        "recompute": recompute,
        "tp": tp_ms,
        "bubble": bubble,
        "p2p": p2p,
        "dp": dp_ms,
        "shard": shard_ms,
    }
    memory = max((_memory(shape, lo, run, units, k) for k, units in enumerate(stages)), key=lambda m: sum(m.values()))
    pl = Plan(lo, parts, memory, int(tp_bytes))
    pl.fits = pl.memory_bytes <= machine.memory_bytes
    pl.mfu = shape.flops_per_sample * run.global_batch / (pl.step_ms / 1e3) / (machine.ranks * machine.peak_flops_per_s)
    return pl


def _memory(shape: ModelShape, lo: Layout, run: Run, units: list, k: int) -> dict:
    """Stage k's bytes per rank (the module's docstring)."""
    elems = sum(_rank_elems(u, lo.tp) for u in units)
    d, wb = lo.dp, run.weight_bytes
    sharded = {"none": set(), "zero1": {"opt"}, "zero2": {"opt", "grad"}, "zero3": {"opt", "grad", "w"}}[lo.shard]
    state = OPTIMIZER_BYTES[run.optimizer] + (4 if run.weights == "bf16" else 0)
    m = {
        "weights": elems * wb / (d if "w" in sharded else 1),
        # DDP and zero1: the parameters' .grad and the buckets (none without a data axis); zero2
        # and zero3: the parts and two buckets in flight.
        "grads": elems * wb / d + min(2 * BUCKET_BYTES, elems * wb)
        if "grad" in sharded
        else (2 if d > 1 else 1) * elems * wb,
        "optimizer": elems * state / (d if "opt" in sharded else 1),
        "cast": elems * 2 if run.precision in ("bf16", "fp16") and run.weights == "fp32" else 0.0,
        "gathered": 2 * max(_rank_elems(u, lo.tp) for u in units) * wb if "w" in sharded else 0.0,
    }
    tokens, h, act = run.micro_batch * shape.context, shape.width, run.act_bytes
    rep, cut = shape.act_elements()
    # With tp, the two row-parallel layers' all-reduced outputs (h each) are kept too.
    rep_t = rep / (lo.tp if lo.sp else 1) + (2 * h if lo.tp > 1 else 0)
    whole = tokens * act * (rep_t + cut / lo.tp)
    blocks = sum(1 for u in units if u[0] not in ("embed", "head", "ln_f"))
    if lo.checkpoint == "full":
        per_block = tokens * act * h / (lo.tp if lo.sp else 1)
    elif lo.checkpoint == "selective":
        per_block = whole - tokens * act * cut / lo.tp * shape.attention_share()
    else:
        per_block = whole
    in_flight = min(lo.micro_batches, lo.pp - k)
    # The head: the final norm's input and output, the logits and their log-softmax (fp32, V/T).
    head = tokens * (2 * h * act + 2 * 4 * shape.vocab / lo.tp) if k == lo.pp - 1 else 0.0
    # The backward works on one block at a time (its recomputed set, its gradients' transients: about
    # a block's whole set), once the head's tensors are gone.
    m["activations"] = in_flight * blocks * per_block + max(whole if blocks else 0.0, head)
    return m


def rank(plans: list) -> list:
    """The plans that fit, fastest first (ties: less memory, then fewer model-parallel ranks)."""
    return sorted(
        (p for p in plans if p.fits), key=lambda p: (round(p.step_ms, 6), p.memory_bytes, p.layout.tp * p.layout.pp)
    )


PART_NAMES = {
    "compute": "compute",
    "recompute": "recomputation",
    "tp": "tensor-parallel all-reduces",
    "bubble": "the pipeline bubble",
    "p2p": "pipeline sends",
    "dp": "exposed gradient reduction",
    "shard": "ZeRO's parameter gathers",
}


def why(first: Plan, second: Plan) -> str:
    """One sentence: by how much the first is faster, and the parts that make the difference,
    largest first."""
    gap = second.step_ms - first.step_ms
    diffs = sorted(
        ((second.parts_ms[k] - first.parts_ms[k], k) for k in first.parts_ms), reverse=True, key=lambda x: abs(x[0])
    )
    named = [
        f"{PART_NAMES[k]} {first.parts_ms[k]:.4g} against {second.parts_ms[k]:.4g} ms"
        for d, k in diffs
        if abs(d) >= 0.05 * max(gap, 1e-9) and abs(d) > 1e-9
    ][:3]
    return (
        f"{first.layout.label()} beats {second.layout.label()} by {gap:.4g} ms a step "
        f"({gap / second.step_ms:.1%}): "
        + ("; ".join(named) or "the parts are equal within 5%")
        + f"; memory {first.memory_bytes / GIB:.3g} against {second.memory_bytes / GIB:.3g} GiB a rank"
    )


def format_plans(shape: ModelShape, machine: Machine, run: Run, plans: list, refused: list, top: int) -> str:
    ok = rank(plans)
    dropped = [p for p in plans if not p.fits]
    lines = [
        f"# PLAN (arithmetic, not a measurement): {shape.name} ({shape.parameters:,} parameters) on "
        f"{machine.nodes} node(s) x {machine.gpus_per_node} GPUs, global batch {run.global_batch} x "
        f"{shape.context} tokens, micro-batch {run.micro_batch}, {run.precision}, weights {run.weights}, "
        f"{run.optimizer}"
    ]
    lines += [f"#   assumed: {a}" for a in ASSUMED]
    cols = ["step_ms", "compute", "recomp", "tp", "bubble", "p2p", "dp", "shard", "mem_GiB", "MFU"]
    lines.append(f"# {'rank':>4}  {'layout':<40} " + " ".join(f"{c:>8}" for c in cols))
    for i, p in enumerate(ok[:top], 1):
        q = p.parts_ms
        vals = [p.step_ms, q["compute"], q["recompute"], q["tp"], q["bubble"], q["p2p"], q["dp"], q["shard"]]
        lines.append(
            f"  {i:4d}  {p.layout.label():<40} "
            + " ".join(f"{v:8.4g}" for v in vals)
            + f" {p.memory_bytes / GIB:8.3g} {p.mfu:8.1%}"
        )
    if len(ok) > top:
        lines.append(f"# ... {len(ok) - top} more that fit (--top)")
    lines.append(
        f"# {len(ok)} of {len(plans)} layouts fit in {machine.memory_bytes / GIB:.3g} GiB a GPU; {len(dropped)} dropped"
    )
    if dropped:
        least = min(dropped, key=lambda p: p.memory_bytes)
        lines.append(
            f"#   the smallest that does not fit: {least.layout.label()} needs "
            f"{least.memory_bytes / GIB:.3g} GiB ("
            + ", ".join(f"{k} {v / GIB:.3g}" for k, v in least.memory.items() if v)
            + ")"
        )
    for what, reason in refused:
        lines.append(f"#   refused: {what}: {reason}")
    if ok:
        lines.append(f"# first: dtune-train --model {shape.name} {ok[0].layout.flags()}".rstrip())
    if len(ok) > 1:
        lines.append(f"# why: {why(ok[0], ok[1])}")
    return "\n".join(lines)
