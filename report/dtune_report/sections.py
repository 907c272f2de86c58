"""The report's sections as page blocks (page.py): the summary of verdicts first, then one section
per study (its configurations against the baseline, one small table and figure per swept axis, the
explanation the phase times support, and the commands that reproduce the best and the baseline),
the collectives, and the stragglers. Numbers are formatted by units.py; every statement is derived
from the measurements by a rule written here."""

from __future__ import annotations

import pandas as pd

from . import figures as fg
from .commands import reproduce_command
from .configs import SHORT_STEPS, SHORT_WIDTH, axis_name, axis_value
from .loader import TRAIN_PHASES
from .units import fmt_change, fmt_sig, setting_name
from .verdicts import verdict_text

ALPHA_TEXT = "significant: Mann-Whitney U p < 0.05 over per-step samples; the interval is a 95% bootstrap interval"


def _sig(row) -> str:
    p = "p < 0.001" if row.p_value < 0.001 else f"p = {fmt_sig(row.p_value, 2)}"
    return f"{verdict_text(row, 'significant', 'not significant')} ({p})"


def _short_note(f) -> list:
    short = [c for c in f.study.configs if c.short]
    if not short:
        return []
    return [
        f"{len(short)} of {len(f.study.configs)} configurations ran too short to trust (fewer than "
        f"{SHORT_STEPS} measured steps or an interval wider than {SHORT_WIDTH:.0%}). "
    ]


def finding_line(f, advice=()) -> list:
    """One summary line: the change, its interval and significance, what to change, the evidence
    and the advice sections (anchor, title) that concern it."""
    s, base = f.study, f.baseline
    link = ("a", "evidence", f"#{s.anchor}")
    if f.improves:
        top = f.best[0]
        parts = [
            ("b", f"{fmt_change(f.row.ratio, f.row.ci_low, f.row.ci_high)} samples/s"),
            f", {_sig(f.row)}: ",
            ("b", s.title),
            ": change ",
            ("code", " ".join(f.changes)) if f.changes else "nothing on the command line (see the table)",
            f" (from the baseline: {base.label}; to: {top.label}). ",
        ]
        if len(f.best) > 1:
            parts.append(f"Tied with it: {'; '.join(c.label for c in f.best[1:])}. ")
    else:
        parts = [("b", s.title), f": no change measurable here: nothing beat the baseline ({base.label}) significantly"]
        slower = [c for c in s.configs if c is not base and f.rows[id(c)].significant and f.rows[id(c)].ratio < 1]
        parts.append("; the baseline is fastest. " if len(slower) == len(s.configs) - 1 else "; keep what you run. ")
    more = [x for anchor, title in advice for x in ("; ", ("a", title.lower(), f"#{anchor}"))]
    return parts + _short_note(f) + [link] + more


def summary_blocks(findings, singles, comm_lines, straggler_line, advice_of=lambda s: ()) -> list:
    """`advice_of(study)`: the advice sections (anchor, title) its line links to."""
    items = [finding_line(f, advice_of(f.study)) for f in findings]
    items += [
        [("b", s.title), ": one configuration measured, nothing to compare. ", ("a", "details", f"#{s.anchor}")]
        for s in singles
    ]
    items += comm_lines
    if straggler_line:
        items.append(straggler_line)
    intro = (
        "Each line: the fastest configuration of one workload against its baseline (the configuration "
        "closest to the defaults: fp32, 25 MiB gradient buckets, no NCCL or MPI settings, the batch as "
        f"given; or the one named by --baseline), as the change in median samples/s; {ALPHA_TEXT}."
    )
    return [("h", 2, "Summary: what to change", "summary"), ("p", intro), ("ul", items)]


def _config_table(f) -> pd.DataFrame:
    rows = []
    for c in f.study.configs:
        row = {axis_name(ax): axis_value(c, ax) for ax in f.study.axes}
        if c is f.baseline:
            vs = "baseline"
        else:
            r = f.rows[id(c)]
            vs = f"{fmt_change(r.ratio, r.ci_low, r.ci_high)} {verdict_text(r)}"
        note = ["best" if len(f.best) == 1 and c in f.best else "tied for best" if c in f.best else ""]
        note += ["short run" if c.short else ""]
        row.update(
            {
                "samples/s": fmt_sig(c.median),
                "95% interval": f"[{fmt_sig(c.low)}, {fmt_sig(c.high)}]",
                "against baseline": vs,
                "steps": str(c.n),
                "runs": str(len(c.runs)),
                "note": ", ".join(n for n in note if n),
            }
        )
        rows.append(row)
    return pd.DataFrame(rows)


def _along(study, axis, ref):
    others = [ax for ax in study.axes if ax is not axis]
    return [c for c in study.configs if all(c.fields.get(ax[0]) == ref.fields.get(ax[0]) for ax in others)]


def _reference(f, axis):
    """(reference config, "best" or "baseline", the configs along `axis` with the other axes at the
    reference's values): the best's when that gives two or more, else the baseline's, else None."""
    for ref, which in ((f.best[0], "best"), (f.baseline, "baseline")):
        along = _along(f.study, axis, ref)
        if len(along) > 1:
            return ref, which, along
    return None


def axis_blocks(f, phases, out_dir) -> list:
    """Per swept axis: throughput against it, the other axes at the best configuration's values
    (else the baseline's), as a table, a figure and the explanation the phase times give."""
    blocks = []
    for n, axis in enumerate(f.study.axes):
        name = axis_name(axis)
        found = _reference(f, axis)
        if found is None:
            continue
        ref, which, along = found
        along.sort(key=lambda c: fg.sort_value(c.fields.get(axis[0])))
        fixed = [f"{axis_name(ax)} {axis_value(ref, ax)}" for ax in f.study.axes if ax is not axis]
        at = f", other axes at the {which} configuration's values ({', '.join(fixed)})" if fixed else ""
        # Tensor parallelism's collectives run inside forward and backward: their own column.
        tp_column = ("tp_comm_ms",) if any("tp_comm_ms" in phases.get(id(c), {}) for c in along) else ()
        t = pd.DataFrame(
            [
                {
                    name: axis_value(c, axis),
                    "samples/s": fmt_sig(c.median),
                    "95% interval": f"[{fmt_sig(c.low)}, {fmt_sig(c.high)}]",
                    **{
                        setting_name(p) + " (ms)": fmt_sig(phases.get(id(c), {}).get(p, float("nan")))
                        for p in ("data_ms", "forward_ms", "backward_ms", "comm_exposed_ms") + tp_column
                    },
                }
                for c in along
            ]
        )
        key = f"{f.study.anchor}-axis-{n + 1}"
        png = fg.axis_throughput(along, axis, f.baseline, name, out_dir / f"{key}.png")
        caption = (
            f"Throughput against {name}{at}: median samples/s per measured step with its 95% interval "
            f"(bars); the baseline is the square. Overlapping intervals: no difference measurable here."
        )
        blocks += [("h", 3, f"Throughput against {name}", key), ("table", t, None if png else caption)]
        if png:
            blocks.append(("figure", key, png, caption))
        blocks += [("p", line) for line in explain(axis, along, phases)]
    return blocks


# Why a phase's share of the step moves along an axis (ordered small to large, fp32 before the
# lower precisions): (axis field, phase, "up" or "down" along the axis) -> the mechanism. A
# sentence gives one only when the share moved the way the mechanism predicts.
_MECHANISM = {
    ("bucket_mb", "comm_exposed_ms", "up"): "smaller buckets start reducing earlier in backward, so less "
    "communication is left after it",
    ("bucket_mb", "comm_exposed_ms", "down"): "larger buckets mean fewer reductions, each paying its latency once",
    ("workers", "data_ms", "down"): "loader workers build the next batches while the step runs",
    ("workers", "data_ms", "up"): "more workers compete with the training threads for the cores",
    ("precision", "forward_ms", "down"): "the lower precision's kernels do the same work faster on this device",
    ("precision", "forward_ms", "up"): "this device has no faster kernels for the lower precision, and the "
    "casts cost extra",
    ("precision", "backward_ms", "down"): "the lower precision's kernels do the same work faster on this device",
    ("precision", "backward_ms", "up"): "this device has no faster kernels for the lower precision, and the "
    "casts cost extra",
    ("batch", "comm_exposed_ms", "down"): "a larger batch does more computation per gradient reduction",
    ("batch", "data_ms", "down"): "a larger batch amortises the per-batch loading overhead",
}


def explain(axis, along, phases) -> list:
    """A sentence per phase whose share of the step moved by at least 5 points between the ends of
    the axis, with its mechanism where _MECHANISM has one."""
    first, last = along[0], along[-1]
    p0, p1 = phases.get(id(first)), phases.get(id(last))
    if not p0 or not p1 or not p0.get("total_ms") or not p1.get("total_ms"):
        return []
    out = []
    for ph in ("data_ms", "comm_exposed_ms", "tp_comm_ms", "forward_ms", "backward_ms"):
        if ph not in p0 or ph not in p1:  # tp_comm_ms: runs with tensor parallelism only
            continue
        s0, s1 = p0[ph] / p0["total_ms"], p1[ph] / p1["total_ms"]
        if abs(s1 - s0) < 0.05:
            continue
        a0, a1 = axis_value(first, axis), axis_value(last, axis)
        text = (
            f"{setting_name(ph)} is {s0:.0%} of the step at {axis_name(axis)} {a0} and {s1:.0%} at {a1} "
            f"({fmt_sig(p0[ph])} ms and {fmt_sig(p1[ph])} ms per step)"
        )
        # A mechanism only when the phase's own time moved the way its share did.
        same = (p1[ph] - p0[ph]) * (s1 - s0) > 0
        why = _MECHANISM.get((axis[0], ph, "up" if s1 > s0 else "down")) if same else None
        if same and ph == "tp_comm_ms" and axis_name(axis) == "mesh":
            why = (
                "a tensor-parallel group's collectives (two each way in every layer, every micro-batch) run "
                "between the ranks the order puts in it, over the link between them"
            )
        out.append(text + (f": {why}." if why else "."))
    return out


def reproduce_blocks(f) -> list:
    blocks = [("h", 3, "Reproduce", f"{f.study.anchor}-reproduce")]
    shown = list(f.best) + ([f.baseline] if f.baseline not in f.best else [])
    for c in shown:
        role = "baseline" if c is f.baseline else "best" if len(f.best) == 1 else "tied for best"
        if c is f.baseline and c in f.best:
            role = "baseline, " + ("best" if len(f.best) == 1 else "tied for best")
        caption = f"{c.label} ({role}): {fmt_sig(c.median)} samples/s, {c.n} measured steps"
        blocks.append(("copy", reproduce_command(c), caption))
    return blocks


def study_blocks(f, phases, out_dir) -> list:
    s = f.study
    best = (
        f"The best is {f.best[0].label}, faster than the runner-up beyond noise."
        if len(f.best) == 1
        else f"No winner: {len(f.best)} configurations are tied for best ({'; '.join(c.label for c in f.best)})"
        + (f"; about {f.steps_needed} measured steps each would separate the first two." if f.steps_needed else ".")
    )
    if len(s.configs) == 1:
        best = "One configuration measured."
    blocks = [
        ("h", 2, s.title, s.anchor),
        ("p", f"Baseline: {f.baseline.label} ({f.how}). {best}"),
        ("table", _config_table(f), f"Every configuration measured, repeats pooled; {ALPHA_TEXT}."),
    ]
    return blocks + axis_blocks(f, phases, out_dir) + reproduce_blocks(f)


def phase_means(steps: pd.DataFrame, configs, summary: pd.DataFrame | None = None) -> dict:
    """id(config) -> {phase: mean ms over measured steps, ranks and repeats, total_ms too}; with
    `summary` (load_train_summary) and tensor parallelism, tp_comm_ms: the runs' mean
    tp_comm_ms_per_step (one pipeline's tp groups' collectives, inside forward and backward, on its slowest stage)."""
    if steps.empty:
        return {}
    m = steps[~steps.warmup & ~steps.profiled].groupby(["file", "run"])[TRAIN_PHASES + ["total_ms"]].mean()
    tp = None
    if summary is not None and "tp_comm_ms_per_step" in summary:
        tp = summary.set_index(["file", "run"])["tp_comm_ms_per_step"].astype(float)
    out = {}
    for c in configs:
        keys = [k for k in c.runs if k in m.index]
        if keys:
            out[id(c)] = m.loc[keys].mean().to_dict()
            tp_keys = [k for k in keys if tp is not None and k in tp.index]
            if tp_keys and tp.loc[tp_keys].max() > 0:
                out[id(c)]["tp_comm_ms"] = float(tp.loc[tp_keys].mean())
    return out
