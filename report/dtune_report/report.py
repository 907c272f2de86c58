"""`dtune report RESULTS... -o DIR [--baseline POINT|FILE]`: the report as a decision. A
self-contained HTML page (figures embedded as PNG; the PNGs, the same page as Markdown and, for NCCL
sweeps, an nccl_tuner.conf beside it) that opens with what to change, by how much, and how sure we
are (verdicts.py), then one section per workload with the evidence and the commands that reproduce
it, the collectives, the stragglers and the remaining figures. Figures appear only when the data
has their axes. Files the loader cannot use (report.check) and results with no run to draw are a
ValueError naming them (exit 2), before anything is written. A file that is not a finished run's
(a `.partial` left by a run that died, an interrupted or timed-out run) is reported as measured so
far, under a warning at the top naming it, its status and what it holds (check.incomplete_files).
Recorded values are data: report.md escapes them, the HTML escapes them, and every block to paste is
shell-quoted."""

from __future__ import annotations

from pathlib import Path

from . import advice as ad
from . import ceilings as ce
from . import collectives as cl
from . import figures as fg
from . import machines as mc
from . import pipeline as pl
from . import sections as sc
from . import shard_report as sh
from . import tables as tb
from .check import check_results, incomplete_files, sweep_failures
from .compare import comm_iteration_samples
from .configs import studies, train_configs
from .loader import (
    load_comm_runs,
    load_comm_summary,
    load_provenances,
    load_train,
    load_train_memory,
    load_train_summary,
)
from .model_report import model_section
from .page import render_html, render_md
from .stragglers import stragglers
from .tuning import tune_blocks
from .units import fmt_pct
from .verdicts import decide, decide_all

# What each figure shows and what to read from it.
CAPTIONS = {
    "busbw_vs_size": "Bus bandwidth (GB/s, nccl-tests' definition) against the size per rank, one line per "
    "collective and setting, dashed the fit t = α + S/B. Read: the plateau is the link's bandwidth; where "
    "lines part, the settings differ. Dotted: the ceiling a dtune-probe file among the inputs measured (GPU "
    "pairs, or host memory for CPU ranks), where there is one.",
    "throughput_vs_batch": "Samples/s against the batch per rank, one line per model and precision (the best "
    "run at each batch); red crosses: out of memory. Read: the curve flattens where a larger batch stops "
    "paying; the largest batch before a cross is the largest that fits.",
    "step_breakdown": "Mean time per step by phase for every run (measured steps, all ranks). Read: the "
    "tallest segment is where time goes; exposed communication is the part not hidden behind backward.",
    "scaling": "Scaling efficiency: samples/s on N ranks over N times one rank's. Read: 1 is perfect scaling.",
    "heatmap": "Samples/s over batch and gradient bucket size (best run per cell). Read: the brightest cell "
    "is fastest; compare along a row or column to see one setting's effect.",
    "data_workers": "Throughput and data stall (time steps waited for their batch, % of the step) against "
    "loader workers. Read: the stall should fall to near zero with enough workers.",
    "slowest_rank": "Distribution of each measured step's time on its slowest rank, per run. Read: a wide "
    "box is a noisy run; see Stragglers for ranks slow beyond noise.",
}


def _figures(comm, fits, train, steps, out, ceiling=None) -> dict:
    made = {}
    if not comm.empty:
        made["busbw_vs_size"] = fg.busbw_vs_size(comm, fits, out / "busbw_vs_size.png", ceiling)
    if not train.empty:
        made["throughput_vs_batch"] = fg.throughput_vs_batch(train, out / "throughput_vs_batch.png")
        made["step_breakdown"] = fg.step_breakdown(steps, train, out / "step_breakdown.png")
        made["scaling"] = fg.scaling(train, out / "scaling.png")
        made["heatmap"] = fg.heatmap(train, out / "heatmap_batch_bucket.png")
        made["data_workers"] = fg.data_workers(train, steps, out / "data_workers.png")
        made["slowest_rank"] = fg.slowest_rank_steps(steps, train, out / "slowest_rank_steps.png")
    return {k: v for k, v in made.items() if v is not None}


def _straggler_blocks(steps, sources):
    found = stragglers(steps) if not steps.empty else []
    if steps.empty or steps["rank"].nunique() < 2:
        return [], None
    if found:
        lines = [
            f"rank {s['rank']} of {Path(s['file']).name} is slower than the others beyond noise in "
            f"{s['runs_slow']} of its {s['runs']} runs, by {fmt_pct(1 + s['gap'])} (median step time)."
            for s in found
        ]
        head = [("b", "Stragglers"), f": {len(found)} rank(s) slow beyond noise. ", ("a", "evidence", "#stragglers")]
    else:
        lines = [
            "No straggler: no rank's median step time lies above the other ranks' 95% interval by 5% or more "
            "in most runs."
        ]
        head = [("b", "Stragglers"), ": none beyond noise. ", ("a", "details", "#stragglers")]
    return [("h", 2, "Stragglers", "stragglers"), ("ul", lines)], head


def _oom_runs(paths, groups) -> list:
    """[(study, batch, peak bytes)] for out-of-memory runs, each matched to the study whose
    workload agrees with it on every field both record (an oom run lacks the summary attributes)."""
    from .configs import _machines, _workload
    from .identity import run_identity
    from .loader import load_runs, load_train_memory

    runs = load_runs(paths)
    runs = runs[runs.benchmark == "train"]
    oom = runs[[a.get("status") == "oom" for a in runs["attrs"]]]
    if oom.empty:
        return []
    by_point = bool(runs.point.notna().all())
    machine = _machines(runs)
    mem = load_train_memory(paths).set_index(["file", "run"]).peak_memory_bytes
    out = []
    for r in oom.itertuples(index=False):
        fields = run_identity(r._asdict(), by_point)
        fields["machine"] = machine[(r.file, r.run)]
        w = _workload(fields)
        for s in groups:
            if all(s.workload[k] == v for k, v in w.items() if k in s.workload):
                out.append(
                    (s, float(r.attrs.get("batch", float("nan"))), float(mem.get((r.file, r.run), float("nan"))))
                )
                break
    return out


def _communication(comm, fits, figures, ev, runs, tuner, ceiling=None, probes=False) -> list:
    """The communication section: the fit read as latency and bandwidth with the busbw figure, each
    run's peak against the ceiling a probe measured (ceilings.py), the NCCL winners per size range,
    and exposed communication against bucket size."""
    blocks = []
    if not comm.empty and not fits.empty:
        blocks.append(
            (
                "table",
                cl.fit_table(comm, fits, ceiling),
                "Each collective and setting: the α–β fit t = α + x/B "
                "(doc/metrics.md section 2), where it reaches half of B, and the measured peak"
                + (", with the probe's ceiling and the peak as a fraction of it" if probes else "")
                + ".",
            )
        )
        blocks += [("p", x) for x in ce.note_lines(ceiling, probes)] if ceiling is not None else []
        if "busbw_vs_size" in figures:
            blocks.append(("figure", "busbw_vs_size", figures.pop("busbw_vs_size"), CAPTIONS["busbw_vs_size"]))
        blocks += [("p", x) for x in cl.fit_sentences(fits)]
        w = cl.nccl_winners(comm, runs)
        if not w.empty:
            blocks += [
                ("h", 3, "NCCL algorithm and protocol per size", "communication-nccl"),
                ("table", w, "The fastest NCCL_ALGO/NCCL_PROTO pair (lowest median time) over each range of sizes."),
            ]
            blocks += [("p", x) for x in cl.winner_sentences(w)]
            if tuner:
                blocks.append(("p", ["These ranges are in ", ("a", "nccl_tuner.conf", "#tuner"), "."]))
    blocks += ad.bucket_blocks(ev)
    return [("h", 2, ad.SECTION_TITLES["communication"], "communication")] + blocks if blocks else []


def _machine_blocks(provenances, train, comm, paths, groups, alpha) -> list:
    blocks = []
    table, lines = mc.hardware(provenances, train, comm, paths)
    if table is not None:
        blocks += [
            ("h", 2, ad.SECTION_TITLES["hardware"], "hardware"),
            ("table", table, "One column per machine (its host names): what the provenance and the runs recorded."),
        ]
        blocks += [("p", x) for x in lines]
    table, lines = mc.side_by_side(groups, alpha)
    if table is not None:
        blocks += [
            ("h", 2, ad.SECTION_TITLES["machines"], "machines"),
            ("table", table, "Median samples/s [95% interval] of each configuration measured on several machines."),
        ]
        blocks += [("p", x) for x in lines]
    return blocks


def _advice_links(sections: list):
    """study -> [(anchor, title)] of the advice sections its axes concern, among those present."""
    present = {b[3] for b in sections if b[0] == "h" and b[1] == 2}

    def of(study):
        fields = {k for ax in study.axes for k in ax}
        return [(a, ad.SECTION_TITLES[a]) for a, names in ad.SECTION_FIELDS.items() if a in present and fields & names]

    return of


def build_report(paths, out_dir, baseline: str | None = None, alpha: float = 0.05) -> dict:
    paths = list(paths) if isinstance(paths, (list, tuple)) else [paths]
    if baseline and Path(baseline).exists() and baseline not in map(str, paths):
        paths.append(baseline)
    files = check_results(paths)
    tune = tune_blocks(paths)  # results of `dtune tune`: checked before anything is written
    incomplete = incomplete_files(files)
    comm, train, steps = load_comm_summary(paths), load_train_summary(paths), load_train(paths)
    fits = fg.comm_fits(paths)
    failed = sweep_failures(paths)
    if comm.empty and train.empty:
        why = f": {failed[0]}" if failed else ""
        raise ValueError(
            f"nothing to report: no dtune-comm size or dtune-train run in {', '.join(map(str, files))}{why}"
        )
    groups = studies(train_configs(paths))
    findings = decide_all(groups, baseline, alpha)
    singles = [s for s in groups if len(s.configs) == 1]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ceiling = ce.ceilings(paths) if not comm.empty else None
    probes = ceiling is not None and ce.has_probes(paths)
    figures = _figures(comm, fits, train, steps, out, ceiling)
    configs = [c for s in groups for c in s.configs]
    phases = sc.phase_means(steps, configs, train)
    comm_cmp = cl.comparisons(comm_iteration_samples(paths), fits, alpha) if not comm.empty else []
    straggle, straggle_line = _straggler_blocks(steps, paths)
    comm_runs = load_comm_runs(paths)
    tuner = tb.nccl_tuner_conf(comm, comm_runs)
    if tuner:
        (out / "nccl_tuner.conf").write_text(tuner)

    by_study = {id(f.study): f for f in findings}
    for s in groups:
        by_study.setdefault(id(s), decide(s, baseline, alpha))
    ev = ad.Evidence(groups, by_study, ad.measured(steps), load_train_memory(paths), out, alpha)
    ev.oom = _oom_runs(paths, groups)
    advice = ad.data_section(ev) + ad.batch_section(ev)
    advice += _communication(comm, fits, figures, ev, comm_runs, tuner, ceiling, probes)
    advice += ad.precision_section(ev) + ad.parallel_section(ev)
    advice += sh.shard_section(groups, paths, out)
    advice += _machine_blocks(load_provenances(paths), train, comm, paths, groups, alpha)
    model_blocks, _ = model_section(paths, out)
    advice += model_blocks

    blocks = [("h", 1, "dtune report", ""), ("p", f"Sources: {', '.join(map(str, paths))}")]
    blocks += [("p", [("b", "Warning: incomplete results. "), line]) for line in incomplete]
    blocks += [("p", [("b", "Failed points. "), line]) for line in failed]
    comm_lines = [cl.summary_line(c) for c in comm_cmp]
    blocks += sc.summary_blocks(findings, singles, comm_lines, straggle_line, _advice_links(advice))
    blocks += tune  # how the budget of `dtune tune` was spent
    blocks += advice
    for s in sorted(groups, key=lambda s: s.anchor):
        blocks += sc.study_blocks(by_study[id(s)], phases, out)
    blocks += pl.pipeline_blocks(paths, train, out)
    if comm_cmp:
        blocks += [
            ("h", 2, "Collectives", "collectives"),
            (
                "table",
                cl.comparison_table(comm_cmp),
                "Each setting's median time per call against the baseline's (the run with no NCCL, UCX or MPI "
                "settings; else the fewest), at the largest size all measured, out-of-place; significant: Mann-Whitney "
                "U p < 0.05 over per-call samples (each timed iteration's slowest rank); the interval is a 95% "
                "bootstrap interval of the ratio of medians.",
            ),
        ]
    blocks += straggle
    if tuner:
        blocks += [("h", 2, "nccl_tuner.conf", "tuner"), ("pre", tuner.rstrip())]
    if figures:
        blocks.append(("h", 2, "More figures", "figures"))
        blocks += [("figure", k, v, CAPTIONS[k]) for k, v in figures.items()]
    all_figures = {**figures, **{b[1]: b[2] for b in blocks if b[0] == "figure"}}
    (out / "report.md").write_text(render_md(blocks))
    (out / "report.html").write_text(render_html(blocks))
    return {
        "dir": out,
        "figures": all_figures,
        "tuner": tuner is not None,
        "findings": findings,
        "studies": groups,
        "incomplete": incomplete,
    }
