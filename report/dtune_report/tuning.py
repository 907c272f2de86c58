"""The report's section "How the budget was spent", for results `dtune tune` produced: read from
the tune.json beside them (a results file's directory, or a directory given as results). Per tuned
sweep: the budget and what was spent, one table row per candidate and rung (its measured median
with its 95% bootstrap interval, promoted or dropped and why), the best configuration's margin over
the runner-up at the top rung and whether it is significant, then the flags and the export block to
paste."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from .redact import fill_in_note


def find_tune_files(paths) -> list[Path]:
    """tune.json files beside the given results (each directory once)."""
    seen, out = set(), []
    for p in map(Path, paths):
        d = p if p.is_dir() else p.parent
        f = d / "tune.json"
        if f.exists() and f.resolve() not in seen:
            seen.add(f.resolve())
            out.append(f)
    return out


def _value(c: dict) -> str:
    if c.get("median") is None:
        return "—"
    return f"{c['median']:.4g} [{c['lo']:.4g}, {c['hi']:.4g}]"


def _paired(c: dict) -> str:
    if c.get("ratio") is None:
        return "—"
    p = f", P(best) {c['p_best']:.2f}" if c.get("p_best") is not None else ""
    if c.get("combined_ratio") is not None:
        p = f"; with the earlier rungs x{c['combined_ratio']:.3f} [{c['combined_lo']:.3f}, {c['combined_hi']:.3f}]{p}"
    if c.get("model_ratio") is not None:
        p = f"; axes model x{c['model_ratio']:.3f} [{c['model_lo']:.3f}, {c['model_hi']:.3f}]{p}"
    return f"x{c['ratio']:.3f} [{c['ratio_lo']:.3f}, {c['ratio_hi']:.3f}]{p}"


def _label(values: dict) -> str:
    parts = []
    for k, v in values.items():
        if k in ("ranks", "nodes", "ranks_per_node") or (k == "topology" and v == "default"):
            continue
        parts.append(str(k) if v is True else f"{k} {v}" if str(k).startswith("-") else f"{k}={v}")
    return " ".join(parts) or "(fixed arguments)"


def _budget_line(doc: dict, rec: dict) -> str:
    b = rec.get("budget")
    spent = f"{rec.get('spent_runs', 0)} runs taking {rec.get('spent_seconds', 0):.0f} s"
    if not b:
        return f"No budget given: the whole schedule ran, {spent}."
    share = f"{b['share']:.0f} s" if b["kind"] == "seconds" else f"{b['share']:.0f} runs"
    return f"Budget {share} of `--budget {doc['budget']['text']}`; spent {spent}."


def sweep_blocks(doc: dict, rec: dict) -> list:
    unit = rec["unit"]
    blocks = [("h", 3, f"{rec['sweep']}: {rec['objective']} ({unit})", f"tune-{rec['sweep']}")]
    sched = ", ".join(f"{r['candidates']} x {r['steps']} steps" for r in rec.get("schedule", []))
    blocks.append(
        (
            "p",
            f"{rec['method']} over {rec['candidates']} candidates of {rec['binary']} (seed {rec['seed']}), "
            f"planned rungs: {sched}. {_budget_line(doc, rec)}"
            + (f" Stopped {rec['stopped']}." if rec.get("stopped") else ""),
        )
    )
    rows = []
    sign = -1 if rec.get("higher", True) else 1
    for k, rung in enumerate(rec.get("rungs", [])):
        ordered = sorted(rung["candidates"], key=lambda c: (c.get("median") is None, sign * (c.get("median") or 0)))
        for c in ordered:
            outcome = "top rung" if k == len(rec["rungs"]) - 1 else ("promoted" if c.get("promoted") else "dropped")
            rows.append(
                {
                    "rung": f"{k} ({rung['steps']} steps)",
                    "candidate": _label(c["values"]),
                    "status": c["status"],
                    "samples": str(c["n"]),
                    f"median [95% CI] {unit}": _value(c),
                    "paired ratio to the incumbent": _paired(c),
                    "outcome": outcome + (f": {c['why']}" if c.get("why") and outcome != "top rung" else ""),
                }
            )
    if rows:
        blocks.append(
            (
                "table",
                pd.DataFrame(rows),
                "Every candidate, rung by rung: the median over its measured steps with a 95% bootstrap interval, "
                "and its figure paired with the incumbent runs beside it (the machine's drift between runs "
                "cancels), with its probability of being the best; candidates go up by that probability. In a "
                "rung of more candidates than its axes have values, the axes model's estimate stands beside it "
                "(each candidate borrows the runs of those that share its axis values) and its probability decides. "
                "Below the top rung that figure is combined with what the earlier rungs said of the candidate, "
                "and the combination decides; the top rung's pick reads its own runs. "
                "Tunes before paired rungs leave the paired column empty.",
            )
        )
    w = rec.get("winner")
    if not w:
        blocks.append(("p", rec.get("no_pick") or "No candidate measured: every run failed."))
        return blocks
    blocks.append(("p", [part for sentence in verdict(rec) for part in sentence]))
    rc = rec.get("recommendation") or {}
    if rc.get("flags"):
        blocks.append(("copy", rc["flags"], "The flags to set."))
    fill = f" {fill_in_note(rc['fill_in']).lstrip('# ')}." if rc.get("fill_in") else ""
    if rc.get("command"):
        blocks.append(("copy", rc["command"], f"The whole command, at the sweep's own steps.{fill}"))
    if rc.get("export"):
        blocks.append(("copy", "\n".join(rc["export"]), f"The same as environment settings (export block).{fill}"))
    if rc.get("nccl_tuner_conf"):
        blocks.append(("pre", rc["nccl_tuner_conf"].rstrip()))
    return blocks


def verdict(rec: dict) -> list:
    """The pick of a sweep whose tune picked one, sentence by sentence (each a list of page.py's inline
    parts, each but the first with its leading space): the best with its interval, what decided it,
    the margin over the runner-up, the candidates tied with it, the noise floor. The report joins
    them into one paragraph; `dtune tune` prints one a line."""
    unit, w = rec["unit"], rec["winner"]
    note = f" ({w['note']}; a larger --budget measures it at full length)." if w.get("note") else "."
    out = [[("b", "Best: "), ("code", w["label"]), f": {_value(w)} {unit}{note}"]]
    est = rec.get("estimates")
    if est:
        alone = est.get("paired_best")
        tail = ["; its own runs alone rank ", ("code", alone), " first."] if alone else ["."]
        out.append([f" Picked by the {est.get('by', 'axes model')}: {est['why']}", *tail])
    if rec.get("runner_up"):
        m, r = rec["margin"], rec["runner_up"]
        sig = "significant" if m["significant"] else "not significant: a tie within the noise"
        blocks = f", paired over {m['blocks']} block(s)" if "blocks" in m else ""
        out.append(
            [" Over the runner-up ", ("code", r["label"]), f" ({r['median']:.4g} {unit}): x{m['ratio']:.3f}, 95% "]
            + [f"interval [{m['lo']:.3f}, {m['hi']:.3f}], p = {m['p']:.3g}, {sig}{blocks}."]
        )
    for t in rec.get("tied") or []:
        more = t.get("blocks_to_separate")
        runs = f" ({t['more_runs']} more runs)" if t.get("more_runs") else ""
        more = f"; about {more} blocks{runs} would separate them" if more else ""
        out.append(
            [" Tied with it: ", ("code", t["label"]), f" (x{t['ratio']:.3f} [{t['lo']:.3f}, {t['hi']:.3f}]{more})."]
        )
    nf = rec.get("noise_floor")
    if nf:
        floor = f"{nf['floor_one_block']:.1%}, from {nf['incumbent_repeats']} incumbent repeats"
        out.append([f" Noise floor of one block: {floor}."])
    return out


def tune_blocks(paths) -> list:
    """The section, or [] when no tune.json lies beside the results; ValueError naming the file
    when one is not JSON or not of the shape `dtune tune` writes."""
    blocks = []
    for f in find_tune_files(paths):
        try:
            doc = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"{f}: not a dtune tune record ({e})") from None
        try:
            for rec in doc["sweeps"]:
                blocks += sweep_blocks(doc, rec)
        except (TypeError, KeyError, AttributeError, ValueError, IndexError) as e:
            what = f"missing {e}" if isinstance(e, KeyError) else str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ValueError(
                f"{f}: not a tune record of the shape `dtune tune` writes ({what}); rerun the tune, or move the "
                "file out of the results' folder"
            ) from None
    return [("h", 2, "How the budget was spent", "tune")] + blocks if blocks else []
