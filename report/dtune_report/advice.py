"""The advice, measured: one section per question a user tunes (data loading, batch size,
communication, precision, parallelism; sharding: shard_report.py), each present only when the
results hold its data, each ending with sentences computed from the measurements by the rules
written here (doc/metrics.md section 8 lists them). When the data does not support a rule, the
section says nothing more.

Inputs are the report's studies and findings (configs.py, verdicts.py) and the measured steps
(loader.load_train less warm-up and profiled steps). Shares of the step are sums over measured
steps and ranks (data stall as doc/metrics.md section 6 defines it); throughput comparisons are
verdicts.compare_to rows (Mann-Whitney U decides, the bootstrap interval says how large)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from . import figures as fg
from .configs import axis_name, axis_value
from .sections import _reference
from .units import fmt_bytes, fmt_change, fmt_mib, fmt_sig
from .verdicts import compare_to, verdict_text

# A share of the step (data stall, exposed communication) is worth a sentence when it moves by
# at least this many points between two configurations; a stall below STALL_OK is not limiting.
SHARE_MOVE = 0.05
STALL_OK = 0.05
# Final losses (mean of the last LOSS_TAIL measured steps, ranks averaged) agree within LOSS_AGREE.
LOSS_TAIL = 3
LOSS_AGREE = 0.02
# Forward plus backward time counts as changed with precision beyond this fraction.
COMPUTE_MOVE = 0.05

# The identity fields each section answers for; a summary line links to the sections of its axes.
SECTION_FIELDS = {
    "data-loading": {"workers", "prefetch", "cache_dir", "--cache-mb", "--cache-block-mb", "decode", "fast_decode"},
    "batch-size": {"batch", "global_batch", "accum_steps"},
    "communication": {"bucket_mb", "first_bucket_mb", "overlap", "compression", "local_sgd_every"},
    "precision": {"precision", "tf32", "weights_dtype"},
    "sharding": {"shard"},
}
SECTION_TITLES = {
    "data-loading": "Data loading",
    "batch-size": "Batch size",
    "communication": "Communication",
    "precision": "Precision",
    "parallelism": "Parallelism",
    "sharding": "Sharding",
    "hardware": "Hardware",
    "machines": "Machines side by side",
}


@dataclass
class Evidence:
    """What the sections read: studies and their findings, the measured steps and per-run memory."""

    studies: list
    findings: dict  # id(study) -> Finding
    steps: pd.DataFrame  # loader.load_train rows, warm-up and profiled steps left out
    memory: pd.DataFrame  # loader.load_train_memory
    out_dir: object
    alpha: float = 0.05
    oom: list = field(default_factory=list)  # [(study, batch, peak bytes or NaN)]

    def __post_init__(self):
        self._by_run = {k: g for k, g in self.steps.groupby(["file", "run"])} if not self.steps.empty else {}

    def rows(self, c) -> pd.DataFrame:
        """The measured step rows (all ranks) of a configuration's runs."""
        parts = [self._by_run[k] for k in c.runs if k in self._by_run]
        return pd.concat(parts) if parts else self.steps.iloc[0:0]

    def share(self, c, phase: str) -> float:
        """Sum of `phase` over the sum of total_ms, measured steps and ranks (NaN: no steps)."""
        r = self.rows(c)
        total = r.total_ms.sum()
        return float(r[phase].sum() / total) if total > 0 else float("nan")

    def per_step(self, c, phase: str) -> float:
        """Mean ms of `phase` per step and rank."""
        r = self.rows(c)
        return float(r[phase].mean()) if len(r) else float("nan")

    def peak(self, c) -> float:
        """Largest peak memory over ranks, median over repeats (NaN: not recorded)."""
        m = self.memory
        v = m[[k in set(c.runs) for k in zip(m.file, m.run)]].peak_memory_bytes.dropna()
        return float(np.median(v)) if len(v) else float("nan")


def measured(steps: pd.DataFrame) -> pd.DataFrame:
    return steps[~steps.warmup & ~steps.profiled] if not steps.empty else steps


def _axis(study, names: set):
    return next((ax for ax in study.axes if ax[0] in names), None)


def _interval(c) -> str:
    return f"{fmt_sig(c.median)} [{fmt_sig(c.low)}, {fmt_sig(c.high)}]"


def _vs(ev, base, c) -> str:
    if c is base:
        return "reference"
    r = compare_to(base, c, ev.alpha)
    return f"{fmt_change(r.ratio, r.ci_low, r.ci_high)} {verdict_text(r)}"


def _pct(x: float) -> str:
    return "n/a" if not np.isfinite(x) else f"{x:.0%}" if x >= 0.1 or x == 0 else f"{fmt_sig(100 * x, 2)}%"


def _head(key: str) -> list:
    return [("h", 2, SECTION_TITLES[key], key)]


# -- data loading -------------------------------------------------------------------------------


def _loader_text(c) -> str:
    w = c.fields.get("workers", "?")
    cache = " and a cache" if c.fields.get("cache_dir") == "yes" else ""
    return f"{w} worker{'s' if w != '1' else ''}{cache}"


def data_sentences(ev, configs) -> list:
    """The stall rules: none limiting (every stall under STALL_OK); else the worst configuration
    against the one with the fewest workers (then no cache) under STALL_OK, with the mechanism of
    what differs between them; else the lowest stall reached."""
    stall = {id(c): ev.share(c, "data_ms") for c in configs}
    worst = max(configs, key=lambda c: stall[id(c)])
    if stall[id(worst)] < STALL_OK:
        return [
            f"The steps wait for data less than {STALL_OK:.0%} of the time in every configuration measured "
            f"(at most {_pct(stall[id(worst)])}, with {_loader_text(worst)}): loading does not limit this workload."
        ]
    head = (
        f"With {_loader_text(worst)} the steps wait for data {_pct(stall[id(worst)])} of the time "
        f"({fmt_sig(ev.per_step(worst, 'data_ms'))} ms per step)"
    )
    fine = [c for c in configs if stall[id(c)] < STALL_OK]
    if not fine:
        low = min(configs, key=lambda c: stall[id(c)])
        if stall[id(worst)] - stall[id(low)] < SHARE_MOVE:
            return [head + f"; no configuration measured brings it under {STALL_OK:.0%}."]
        return [
            head + f"; the lowest measured is {_pct(stall[id(low)])} with {_loader_text(low)}, still above "
            f"{STALL_OK:.0%}."
        ]
    fix = min(fine, key=lambda c: (_num(c.fields.get("workers")), c.fields.get("cache_dir") == "yes"))
    text = (
        head
        + f"; {_loader_text(fix)} bring{'s' if fix.fields.get('workers') == '1' else ''} it to "
        + (f"{_pct(stall[id(fix)])}")
    )
    more_workers = _num(fix.fields.get("workers")) > _num(worst.fields.get("workers"))
    cache_added = fix.fields.get("cache_dir") == "yes" and worst.fields.get("cache_dir") != "yes"
    if more_workers:
        text += ": loader workers build the next batches while the step runs"
    elif cache_added:
        text += ": the cache serves repeated reads from local memory or disk instead of the dataset's storage"
    return [text + "."]


def _num(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("inf")


def _decode_mode(c) -> str:
    """How the configuration decoded its JPEGs (results/SCHEMA.md `decode`, `fast_decode`); files
    from before the region decode decoded whole images."""
    mode = str(c.attrs.get("decode", "full") or "full")
    return mode + (" + fast" if str(c.attrs.get("fast_decode", 0)) in ("1", "True") else "")


def _decode_split(c) -> str:
    """Where the loader's per-image time went: the JPEG decoder, then crop + resize + normalise (ms
    per delivered image, summed over workers and ranks); n/a for files without data_jpeg_ms."""
    samples = _num(c.attrs.get("data_samples"))
    jpeg, decode = _num(c.attrs.get("data_jpeg_ms")), _num(c.attrs.get("data_decode_ms"))
    if not (np.isfinite(samples) and samples > 0 and np.isfinite(jpeg) and np.isfinite(decode)):
        return "n/a"
    return f"{fmt_sig(jpeg / samples, 2)} + {fmt_sig(max(decode - jpeg, 0.0) / samples, 2)}"


def data_section(ev) -> list:
    """Per study that reads a dataset: each configuration's loader settings, throughput and stall,
    and where the loader's time per image goes (JPEG decode, then the transforms)."""
    blocks = []
    for s in ev.studies:
        if s.workload.get("data", "synthetic") in ("synthetic", "", None):
            continue
        cs = sorted(s.configs, key=lambda c: (_num(c.fields.get("workers")), c.fields.get("cache_dir", "")))
        base = ev.findings[id(s)].baseline if id(s) in ev.findings else cs[0]
        t = pd.DataFrame(
            [
                {
                    "configuration": c.label,
                    "loader workers": c.fields.get("workers", "?"),
                    "prefetch": c.fields.get("prefetch", "?"),
                    "cache": "yes" if c.fields.get("cache_dir") == "yes" else "no",
                    "JPEG decode": _decode_mode(c),
                    "ms/image: JPEG + transform": _decode_split(c),
                    "samples/s [95%]": _interval(c),
                    "against baseline": "baseline" if c is base else _vs(ev, base, c),
                    "data stall": _pct(ev.share(c, "data_ms")),
                    "data wait (ms/step)": fmt_sig(ev.per_step(c, "data_ms")),
                }
                for c in cs
            ]
        )
        blocks += [
            ("h", 3, f"{s.title}", f"data-loading-{s.anchor}"),
            (
                "table",
                t,
                "Data stall: time the steps waited for their batch over step time, measured steps and all "
                "ranks (doc/metrics.md section 6). ms/image: the loader workers' time per delivered image "
                "in the JPEG decoder (roi: only the rows and iMCU columns around the crop box), then in "
                "crop + resize + normalise.",
            ),
        ]
        blocks += [("p", x) for x in data_sentences(ev, cs)]
    return _head("data-loading") + blocks if blocks else []


# -- batch size ---------------------------------------------------------------------------------


def batch_sentences(ev, along, oom) -> list:
    """The largest batch that fits (and the ones that ran out of memory); the throughput of the
    largest batch against the smallest, and where a larger batch stops gaining measurably; the
    exposed communication per sample when it falls with the batch."""
    out = []
    big = along[-1]
    mem = ev.peak(big)
    at = f" (peak memory {fmt_bytes(mem)} per rank)" if np.isfinite(mem) else ""
    fits = float(big.fields["batch"])
    over = sorted(b for b, _ in oom if b > fits)
    if over:
        out.append(
            f"The largest batch that fits is {fmt_sig(fits)} per rank{at}; batch "
            f"{', '.join(fmt_sig(b) for b in over)} ran out of memory."
        )
    elif oom:
        out.append(f"Batch {', '.join(fmt_sig(b) for b, _ in oom)} ran out of memory.")
    if len(along) < 2:
        return out
    small = along[0]
    r = compare_to(small, big, ev.alpha)
    b0, b1 = small.fields["batch"], big.fields["batch"]
    if not r.significant:
        out.append(
            f"Samples/s at batch {b1} is {fmt_change(r.ratio, r.ci_low, r.ci_high)} against batch {b0}: "
            f"{verdict_text(r, not_significant='no difference measurable here')}."
        )
        return out
    text = f"Samples/s at batch {b1} is {fmt_change(r.ratio, r.ci_low, r.ci_high)} against batch {b0}, significant"
    c0, c1 = ev.per_step(small, "comm_exposed_ms") / _num(b0), ev.per_step(big, "comm_exposed_ms") / _num(b1)
    if r.ratio > 1 and np.isfinite(c0) and c1 < c0 * (1 - COMPUTE_MOVE):
        text += (
            f"; exposed communication per sample falls from {fmt_sig(c0)} to {fmt_sig(c1)} ms: a larger batch "
            "does more computation per gradient reduction"
        )
    out.append(text + ".")
    for a, b in zip(along[:-1], along[1:]):
        step = compare_to(a, b, ev.alpha)
        if r.ratio > 1 and not step.significant and a is not small:
            out.append(
                f"Above batch {a.fields['batch']} a larger batch gains nothing measurable "
                f"(batch {b.fields['batch']}: {fmt_change(step.ratio, step.ci_low, step.ci_high)})."
            )
            break
    return out


def _oom_batches(ev, s) -> list:
    return sorted({(b, m) for st, b, m in ev.oom if st is s})


def batch_section(ev) -> list:
    blocks = []
    for s in ev.studies:
        axis = _axis(s, {"batch"})
        oom = _oom_batches(ev, s)
        if axis is None and not oom:
            continue
        f = ev.findings.get(id(s))
        if axis is not None and f is not None and (found := _reference(f, axis)):
            ref, which, along = found
        else:
            along, which = [max(s.configs, key=lambda c: _num(c.fields.get("batch")))], None
        along = sorted(along, key=lambda c: _num(c.fields.get("batch")))
        rows = [
            {
                "batch per rank": c.fields.get("batch", "?"),
                "global batch": c.fields.get("global_batch", "?"),
                "samples/s [95%]": _interval(c),
                "against the smallest": _vs(ev, along[0], c),
                "peak memory per rank": fmt_bytes(ev.peak(c)) if np.isfinite(ev.peak(c)) else "n/a",
                "status": "ok",
            }
            for c in along
        ]
        rows += [
            {
                "batch per rank": fmt_sig(b),
                "global batch": "",
                "samples/s [95%]": "",
                "against the smallest": "",
                "peak memory per rank": fmt_bytes(m) if np.isfinite(m) else "n/a",
                "status": "out of memory",
            }
            for b, m in oom
        ]
        others = [ax for ax in s.axes if ax is not axis]
        fixed = ", ".join(f"{axis_name(ax)} {axis_value(along[0], ax)}" for ax in others)
        caption = "Throughput and peak memory against the batch per rank" + (
            f", other settings at the {which} configuration's ({fixed})" if which and fixed else ""
        )
        blocks += [("h", 3, s.title, f"batch-size-{s.anchor}"), ("table", pd.DataFrame(rows), caption + ".")]
        blocks += [("p", x) for x in batch_sentences(ev, along, oom)]
    return _head("batch-size") + blocks if blocks else []


# -- exposed communication against bucket size (the training half of the communication section) --


def bucket_sentences(ev, along, base) -> list:
    """Exposed communication at the baseline's bucket size against the bucket size where its share
    of the step is lowest, when they differ by SHARE_MOVE or more; the mechanism by direction."""
    share = {id(c): ev.share(c, "comm_exposed_ms") for c in along}
    ref = next((c for c in along if c.fields.get("bucket_mb") == base.fields.get("bucket_mb")), along[-1])
    low = min(along, key=lambda c: share[id(c)])
    if low is ref or share[id(ref)] - share[id(low)] < SHARE_MOVE:
        return []
    b_ref, b_low = float(ref.fields["bucket_mb"]), float(low.fields["bucket_mb"])
    why = (
        "smaller buckets start reducing earlier in backward, so less communication is left after it"
        if b_low < b_ref
        else "larger buckets mean fewer reductions, each paying its latency once"
    )
    return [
        f"Exposed communication is {_pct(share[id(ref)])} of the step at {fmt_mib(b_ref)} buckets and "
        f"{_pct(share[id(low)])} at {fmt_mib(b_low)} ({fmt_sig(ev.per_step(ref, 'comm_exposed_ms'))} ms and "
        f"{fmt_sig(ev.per_step(low, 'comm_exposed_ms'))} ms per step): {why}."
    ]


def bucket_blocks(ev) -> list:
    blocks = []
    for s in ev.studies:
        axis = _axis(s, {"bucket_mb"})
        f = ev.findings.get(id(s))
        if axis is None or f is None or not (found := _reference(f, axis)):
            continue
        _, _, along = found
        along = sorted(along, key=lambda c: float(c.fields["bucket_mb"]))
        t = pd.DataFrame(
            [
                {
                    "bucket size": fmt_mib(c.fields["bucket_mb"]),
                    "samples/s [95%]": _interval(c),
                    "exposed communication (ms/step)": fmt_sig(ev.per_step(c, "comm_exposed_ms")),
                    "share of the step": _pct(ev.share(c, "comm_exposed_ms")),
                }
                for c in along
            ]
        )
        blocks += [
            ("h", 3, f"Exposed communication against bucket size: {s.title}", f"communication-{s.anchor}"),
            (
                "table",
                t,
                "Exposed communication: from the end of backward until the last gradient bucket is reduced "
                "(not hidden behind backward), its sum over the step total, measured steps and all ranks.",
            ),
        ]
        blocks += [("p", x) for x in bucket_sentences(ev, along, f.baseline)]
    return blocks


# -- precision ----------------------------------------------------------------------------------


def final_loss(ev, c) -> float:
    """Mean over the last LOSS_TAIL measured steps of the ranks' mean loss, median over repeats."""
    r = ev.rows(c)
    if r.empty:
        return float("nan")
    vals = []
    for _, g in r.groupby(["file", "run"]):
        per_step = g.groupby("step").loss.mean().sort_index()
        vals.append(float(per_step.tail(LOSS_TAIL).mean()))
    return float(np.median(vals))


def precision_sentences(ev, along) -> list:
    """Each other precision against the reference (fp32 when measured): speed with its interval,
    the forward plus backward time when it moved, the final loss, and skipped steps."""
    ref = along[0]
    out = []
    comp = {id(c): ev.per_step(c, "forward_ms") + ev.per_step(c, "backward_ms") for c in along}
    l0 = final_loss(ev, ref)
    for c in along[1:]:
        p, p0 = c.fields["precision"], ref.fields["precision"]
        r = compare_to(ref, c, ev.alpha)
        text = f"{p} against {p0}: {fmt_change(r.ratio, r.ci_low, r.ci_high)} samples/s, " + verdict_text(
            r, not_significant="no difference measurable here"
        )
        a, b = comp[id(ref)], comp[id(c)]
        if np.isfinite(a) and a > 0 and abs(b / a - 1) >= COMPUTE_MOVE:
            text += f"; forward and backward take {fmt_sig(b)} ms per step in {p} against {fmt_sig(a)} ms"
            if b > a:
                text += f": this device computes {p} no faster than {p0}"
        l1 = final_loss(ev, c)
        if np.isfinite(l0) and np.isfinite(l1) and l0 != 0:
            gap = abs(l1 / l0 - 1)
            text += (
                f". Final loss {fmt_sig(l1)} against {fmt_sig(l0)} (mean of the last {LOSS_TAIL} measured steps): "
                + (f"within {LOSS_AGREE:.0%}" if gap <= LOSS_AGREE else f"{_pct(gap)} apart; check convergence")
            )
        skipped = ev.rows(c).drop_duplicates(["file", "run", "step"]).skipped.sum()
        if skipped:
            text += f". {int(skipped)} step(s) skipped for inf/NaN gradients (fp16 loss scaling)"
        out.append(text + ".")
    return out


def precision_section(ev) -> list:
    blocks = []
    for s in ev.studies:
        axis = _axis(s, {"precision"})
        f = ev.findings.get(id(s))
        if axis is None or f is None or not (found := _reference(f, axis)):
            continue
        _, _, along = found
        along = sorted(along, key=lambda c: fg.sort_value(c.fields["precision"]))
        t = pd.DataFrame(
            [
                {
                    "precision": c.fields["precision"],
                    "samples/s [95%]": _interval(c),
                    f"against {along[0].fields['precision']}": _vs(ev, along[0], c),
                    "forward + backward (ms/step)": fmt_sig(
                        ev.per_step(c, "forward_ms") + ev.per_step(c, "backward_ms")
                    ),
                    "final loss": fmt_sig(final_loss(ev, c)),
                }
                for c in along
            ]
        )
        key = f"precision-{s.anchor}"
        curves = {c.fields["precision"]: ev.rows(c).groupby("step").loss.mean() for c in along}
        png = fg.precision_side_by_side(along, curves, ev.out_dir / f"{key}.png")
        blocks += [("h", 3, s.title, key), ("table", t, "Speed and final loss per precision.")]
        if png:
            blocks.append(
                (
                    "figure",
                    key,
                    png,
                    "Left: median samples/s with its 95% interval per precision. Right: the loss at each "
                    "measured step (ranks averaged). Read: a faster precision is worth it when its loss "
                    "curve follows the reference's.",
                )
            )
        blocks += [("p", x) for x in precision_sentences(ev, along)]
    return _head("precision") + blocks if blocks else []


# -- parallelism --------------------------------------------------------------------------------

_SHAPE_FIELDS = {"np", "world_size", "nodes", "ranks_per_node", "global_batch"}


def scaling_groups(studies) -> list:
    """[[config, ...]]: configurations equal in everything but the launch shape (ranks, nodes,
    global batch, and so the hosts), over two or more rank counts, sorted by ranks; each on hosts
    shared with the largest one's (one cluster, not two machines)."""
    groups: dict = {}
    for s in studies:
        for c in s.configs:
            key = tuple(sorted((k, v) for k, v in c.fields.items() if k not in _SHAPE_FIELDS | {"machine"}))
            groups.setdefault(key, []).append(c)
    out = []
    for cs in groups.values():
        hosts = lambda c: set(str(c.fields.get("machine", "")).split(","))  # noqa: E731
        cs = [c for c in cs if _num(c.fields.get("np", c.fields.get("world_size"))) < float("inf")]
        if not cs:  # no rank count recorded (a file merged by hand): no scaling to show
            continue
        top = max(cs, key=_ranks)
        cs = [c for c in cs if hosts(c) & hosts(top)]
        if len({_ranks(c) for c in cs}) >= 2:
            out.append(sorted(cs, key=_ranks))
    return out


def _ranks(c) -> int:
    return int(_num(c.fields.get("np", c.fields.get("world_size"))))


def parallel_sentences(ev, cs) -> list:
    a, b = cs[0], cs[-1]
    n0, n1 = _ranks(a), _ranks(b)
    eff = (b.median / n1) / (a.median / n0)
    text = (
        f"From {n0} to {n1} ranks samples/s grows {fmt_sig(b.median / a.median)}x: scaling efficiency "
        f"{_pct(eff)} (1 is perfect)"
    )
    s0, s1 = ev.share(a, "comm_exposed_ms"), ev.share(b, "comm_exposed_ms")
    if np.isfinite(s0) and s1 - s0 >= SHARE_MOVE:
        text += (
            f"; exposed communication grows from {_pct(s0)} to {_pct(s1)} of the step: each gradient "
            "reduction spans more ranks"
        )
    return [text + "."]


def parallel_section(ev) -> list:
    blocks = []
    for n, cs in enumerate(scaling_groups(ev.studies)):
        base = cs[0]
        t = pd.DataFrame(
            [
                {
                    "ranks": str(_ranks(c)),
                    "samples/s [95%]": _interval(c),
                    "per rank": fmt_sig(c.median / _ranks(c)),
                    "scaling efficiency": _pct((c.median / _ranks(c)) / (base.median / _ranks(base))),
                    "exposed communication": _pct(ev.share(c, "comm_exposed_ms")),
                }
                for c in cs
            ]
        )
        title = cs[0].fields.get("model", "?") + (f", {cs[0].label}" if cs[0].label != "the one configuration" else "")
        blocks += [
            ("h", 3, f"Scaling: {title}", f"parallelism-{n + 1}"),
            (
                "table",
                t,
                f"Scaling efficiency: samples/s per rank over that of {_ranks(base)} rank(s) (the fewest measured).",
            ),
        ]
        blocks += [("p", x) for x in parallel_sentences(ev, cs)]
    return _head("parallelism") + blocks if blocks else []
