"""`dtune report RESULTS... -o DIR`: a self-contained HTML report (figures embedded as PNG; the
PNGs, a Markdown summary and, for NCCL sweeps, an nccl_tuner.conf beside it) from HDF5 files or a
sweep directory, through the loader. Figures appear only when the data has their axes.
Files the loader cannot use (report.check) and results with no run to draw are a ValueError naming
them (exit 2), before anything is written. Recorded values are data: report.md escapes them
(tables.md_text), the HTML escapes them, and every block to paste is shell-quoted."""

from __future__ import annotations

import base64
import html
from pathlib import Path

import pandas as pd

from . import figures as fg
from . import tables as tb
from .check import check_results
from .loader import load_comm_runs, load_comm_summary, load_train, load_train_summary


def build_report(paths, out_dir) -> dict:
    files = check_results(paths)
    comm = load_comm_summary(paths)
    fits = fg.comm_fits(paths)
    train = load_train_summary(paths)
    steps = load_train(paths)
    if comm.empty and train.empty:
        raise ValueError(f"nothing to report: no dtune-comm size or dtune-train run in {', '.join(map(str, files))}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    made = {}
    if not comm.empty:
        made["busbw_vs_size"] = fg.busbw_vs_size(comm, fits, out / "busbw_vs_size.png")
    if not train.empty:
        made["throughput_vs_batch"] = fg.throughput_vs_batch(train, out / "throughput_vs_batch.png")
        made["step_breakdown"] = fg.step_breakdown(steps, train, out / "step_breakdown.png")
        made["scaling"] = fg.scaling(train, out / "scaling.png")
        made["heatmap"] = fg.heatmap(train, out / "heatmap_batch_bucket.png")
        made["data_workers"] = fg.data_workers(train, steps, out / "data_workers.png")
        made["slowest_rank"], stragglers = fg.slowest_rank_steps(steps, out / "slowest_rank_steps.png")
    else:
        stragglers = {}
    figures = {k: v for k, v in made.items() if v is not None}
    best = tb.best_training(train, fg.train_peaks(paths))
    recs = tb.recommendations(train)
    tuner = tb.nccl_tuner_conf(comm, load_comm_runs(paths))
    if tuner:
        (out / "nccl_tuner.conf").write_text(tuner)
    comm_best = pd.DataFrame()
    if not comm.empty:
        d = comm[comm.placement == "out-of-place"].merge(fits[["file", "run", "setting"]], on=["file", "run"])
        top = d.sort_values("size_bytes").groupby(["collective", "setting"]).tail(1)
        comm_best = top[["collective", "setting", "size_bytes", "busbw_gbps", "time_us_reported"]].reset_index(
            drop=True
        )
    sources = paths if isinstance(paths, (list, tuple)) else [paths]
    md = ["# dtune report", "", f"Sources: {', '.join(tb.md_text(p) for p in sources)}", ""]
    if not comm_best.empty:
        md += ["## Collectives: bus bandwidth at the largest size", "", tb.markdown_table(comm_best)]
    if not best.empty:
        md += ["## Best training configuration per model and launch shape", "", tb.markdown_table(best)]
    for r in recs:
        md += [
            f"### {tb.md_text(r['model'])} on {r['ranks']} rank(s): {r['samples_per_s']:.1f} samples/s",
            "",
            *tb.md_code("\n".join([f"dtune-train {r['flags']}", *([r["env"]] if r["env"] else [])])),
            "",
        ]
    if stragglers:
        md += [
            "## Stragglers (rank most often slowest per run)",
            "",
            *[f"- {tb.md_text(run)}: rank {rank}" for run, rank in sorted(stragglers.items())],
            "",
        ]
    if tuner:
        md += ["## nccl_tuner.conf", "", *tb.md_code(tuner.rstrip()), ""]
    md += ["## Figures", "", *[f"![{k}]({Path(v).name})" for k, v in figures.items()], ""]
    (out / "report.md").write_text("\n".join(md))
    (out / "report.html").write_text(_html(md, figures, comm_best, best, recs, tuner, stragglers))
    return {"dir": out, "figures": figures, "tuner": tuner is not None}


def _html(md, figures, comm_best, best, recs, tuner, stragglers) -> str:
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>dtune report</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 6px;font-size:12px}pre{background:#f4f4f4;padding:6px}"
        "img{max-width:100%}</style></head><body><h1>dtune report</h1>",
    ]
    if not comm_best.empty:
        parts += ["<h2>Collectives: bus bandwidth at the largest size</h2>", comm_best.to_html(index=False)]
    if not best.empty:
        parts += ["<h2>Best training configuration per model and launch shape</h2>", best.to_html(index=False)]
    for r in recs:
        body = f"dtune-train {r['flags']}" + (f"\n{r['env']}" if r["env"] else "")
        parts += [f"<h3>{html.escape(r['model'])} on {r['ranks']} rank(s)</h3><pre>{html.escape(body)}</pre>"]
    if stragglers:
        parts += (
            ["<h2>Stragglers</h2><ul>"]
            + [f"<li>{html.escape(k)}: rank {v}</li>" for k, v in sorted(stragglers.items())]
            + ["</ul>"]
        )
    if tuner:
        parts += ["<h2>nccl_tuner.conf</h2>", f"<pre>{html.escape(tuner)}</pre>"]
    parts.append("<h2>Figures</h2>")
    for k, v in figures.items():
        data = base64.b64encode(Path(v).read_bytes()).decode()
        parts.append(
            f"<figure><img id='{k}' alt='{k}' src='data:image/png;base64,{data}'><figcaption>{k}</figcaption></figure>"
        )
    # For headless checks: after load, record each image's decoded size in the DOM.
    parts.append(
        "<script>window.addEventListener('load',()=>{document.body.dataset.images=JSON.stringify("
        "[...document.images].map(i=>[i.id,i.complete,i.naturalWidth,i.naturalHeight]));});</script>"
    )
    parts.append("</body></html>")
    return "\n".join(parts)
