"""The `dtune` command: sweeps, reports and comparisons over dtune's benchmarks.

    dtune sweep plan|run|slurm|status|merge FILE   a sweep file (YAML, doc/sweeps.md) -> points,
                                                   runs, Slurm job arrays, one merged HDF5 file
    dtune report RESULTS... -o DIR                 HDF5 results -> DIR/report.html, report.md, PNGs
    dtune compare A B                              two sets of HDF5 results -> a benchstat-like table
    dtune tune FILE [--budget 60s]                 the best point of a sweep file's space within a
                                                   budget (successive halving, or Optuna)
    dtune model predict|check|project FILES...     the scaling model (report/dtune_report/scaling_model.py)

One function per subcommand (`cmd_*`, registered with `set_defaults(func=...)`), each returning the
exit status: 0 done, 1 a failed point, a regression or a full disk, 2 a usage error (one line on
stderr).
Installed by `pip install .` as the `dtune` entry point; `scripts/dtune` runs this module in place.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
from pathlib import Path

from . import disk, presets, runner, slurm
from .rules import RULES_HELP
from .spec import DEFAULT_MAX_POINTS, SweepError, plan


def sweep_dir(file: str, out: str | None) -> Path:
    return Path(out) if out else Path("results") / "sweeps" / Path(file).stem


def _usage(message: str) -> int:
    print(f"dtune: error: {message}", file=sys.stderr)
    return 2


def _error(e: BaseException) -> int:
    """One line on stderr, exit 2: a file dtune cannot use is a usage error."""
    text = str(e).strip()
    if isinstance(e, KeyError):  # h5py: a group or attribute that is not there
        text = f"missing in the results: {text.strip(chr(34))}"
    return _usage(text.splitlines()[0] if text else type(e).__name__)


def _points(a):
    """The sweep file's points (planned before any subcommand acts on them); SweepError if the file
    or --max-points is bad."""
    if a.max_points < 1:
        raise SweepError(f"--max-points {a.max_points}: give a positive count")
    return plan(a.file, runner.known_flags, a.max_points)


def check_presets(points) -> str | None:
    """Why a point's topology preset cannot run on this machine (presets.unmet: a preset that needs
    NVLink where dtune-probe topology finds none), or None. Detects only when a preset needs it."""
    if not presets.needs_links(points):
        return None
    from .hardware import detect

    return presets.unmet(points, detect())


def cmd_plan(a) -> int:
    """Print the points a sweep file expands into, each with its stable id; a topology preset this
    machine cannot serve is a `# warning:` line (a plan runs nothing, and may be made elsewhere)."""
    from dtune_report.redact import recordable_env

    points = _points(a)
    print(f"# {a.file}: {len(points)} points")
    why = check_presets(points)
    if why:
        print(f"# warning: {why} (dtune sweep run refuses it here)")
    try:
        runner.check_placement(points, None)
    except SweepError as e:  # a plan may be run under Slurm or with --hostfile: said, not refused
        print(f"# warning: {e} (dtune sweep run refuses it then)")
    for p in points[: a.show]:
        env = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in sorted(recordable_env(p.env).items()))
        print(
            f"  {p.id}  np={p.ranks}{f' nodes={p.nodes}' if p.nodes > 1 else ''}"
            f"{f' per-node={p.ranks_per_node}' if p.ranks_per_node else ''}  "
            f"{env + '  ' if env else ''}{p.binary} {' '.join(p.args)}"
            f"{'  (repeat ' + str(p.repeat) + ')' if p.repeat else ''}"
        )
    if len(points) > a.show:
        print(f"  ... {len(points) - a.show} more")
    return 0


def cmd_run(a) -> int:
    """Run every point not yet complete, locally with mpirun; 1 when a point failed; 2 before
    launching anything when a topology preset needs a link this machine lacks."""
    runner.check_timeout(a.timeout)
    points = _points(a)
    why = check_presets(points)
    if why:
        return _usage(why)
    hosts = runner.MpirunHosts.checked(a.hostfile, a.mpirun_tune)
    runner.check_placement(points, hosts)
    return runner.run_points(points, sweep_dir(a.file, a.out), a.timeout, hosts=hosts)


def cmd_slurm(a) -> int:
    """Write one sbatch job-array script per resource shape, and submit them unless --dry-run."""
    points = _points(a)
    if a.throttle < 1 or a.points_per_task < 1:
        return _usage("--throttle and --points-per-task must be at least 1")
    tune = slurm.mpirun_tune(a.hostfile, a.mpirun_tune, a.launcher)
    d = sweep_dir(a.file, a.out)
    scripts = slurm.write_scripts(points, d, a.sbatch, a.throttle, a.points_per_task, a.launcher, tune)
    for s in scripts:
        print(f"# wrote {s}")
    if not a.dry_run:
        for job in slurm.submit(scripts):
            print(f"# submitted job array {job}")
    return 0


def cmd_status(a) -> int:
    """Count the sweep's points by their latest status, then list each point that did not
    complete with its status and the first error its log held."""
    points = _points(a)
    d = sweep_dir(a.file, a.out)
    tuned = _tune_runs(d)
    if tuned is not None:
        return _tune_status(d, points, tuned)
    c = runner.counts(points, d)
    print(f"# {d}: " + ", ".join(f"{k} {v}" for k, v in c.items()))
    for p, status, why in runner.unfinished(points, d):
        print(f"{p.id}  {status}  [{' '.join(p.args)}]  {why or '(no error line in its log)'}")
    return 0


def _tune_runs(d: Path) -> list | None:
    """The runs a `dtune tune` directory planned (its manifest.json, whose points carry the steps
    of their rung), or None when `d` is not a tune's."""
    import json

    try:
        manifest = json.loads((d / "manifest.json").read_text())
    except (OSError, ValueError):
        manifest = None
    if not isinstance(manifest, list) or not all(isinstance(m, dict) and "id" in m for m in manifest):
        return [] if (d / "tune.json").exists() else None
    if (d / "tune.json").exists() or any("steps" in (m.get("values") or {}) for m in manifest):
        return manifest
    return None


def _tune_status(d: Path, points, runs: list) -> int:
    """`sweep status` on a tune directory: its runs (each candidate at the steps of its rung) by
    status, not the file's points at full length, most of which a tune never runs."""
    import json

    outcomes = runner.State(d).outcomes()
    c = {"ok": 0, "oom": 0, "failed": 0, "timeout": 0, "interrupted": 0, "not yet run": 0}
    for m in runs:
        s = outcomes.get(m["id"], "not yet run")
        c[s] = c.get(s, 0) + 1
    candidates = sum(p.repeat == 0 for p in points)
    print(
        f"# {d}: a dtune tune directory: {len(runs)} runs planned so far over {candidates} candidates "
        f"(halving drops candidates, so most never run at full length): " + ", ".join(f"{k} {v}" for k, v in c.items())
    )
    try:
        sweeps = json.loads((d / "tune.json").read_text()).get("sweeps") or []
    except (OSError, ValueError, AttributeError):
        sweeps = None
    if sweeps is None:
        print("# tune.json: not written yet (the tune is running, or stopped before its first sweep ended)")
    for rec in sweeps or []:
        if not isinstance(rec, dict):
            continue
        w = rec.get("winner")
        verdict = (
            f"best {w.get('label')}: {w.get('median'):.4g} {rec.get('unit', '')}"
            if isinstance(w, dict) and isinstance(w.get("median"), (int, float))
            else rec.get("no_pick") or "no pick: no candidate measured"
        )
        print(f"# sweep '{rec.get('sweep')}': {verdict}")
    for m in runs:
        s = outcomes.get(m["id"])
        if s is not None and s not in runner.COMPLETE:
            print(f"{m['id']}  {s}  [{' '.join(map(str, m.get('args', [])))}]")
    return 0


def cmd_merge(a) -> int:
    """Merge the point files whose latest outcome is ok or oom into one HDF5 file."""
    _points(a)
    from . import merge as merge_mod  # h5py: imported only when merging, so planning starts fast

    d = sweep_dir(a.file, a.out)
    out = Path(a.output) if a.output else d / "merged.h5"
    n = merge_mod.merge(d, out)
    print(f"# merged {n} runs into {out}")
    return 0


def cmd_report(a) -> int:
    """Write report.html, report.md and the figures for a set of results."""
    from dtune_report.report import build_report

    out = Path(a.output)
    if out.exists() and not out.is_dir():
        return _usage(
            f"-o {a.output}: is a file, not a directory: give a directory for report.html, report.md and the figures"
        )
    # Created first, so that an unwritable place is said before any work; removed again (the folders
    # this call made) when the inputs are refused, so a refusal leaves nothing behind.
    made = out
    while not made.parent.exists() and made.parent != made:
        made = made.parent
    created = not made.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return _usage(f"-o {a.output}: cannot create it ({e.strerror or e}): give a directory you can write")
    try:
        r = build_report(a.results, a.output, baseline=a.baseline)
    except (OSError, ValueError) as e:
        if created:
            shutil.rmtree(made, ignore_errors=True)
        return _error(e)
    for line in r["incomplete"]:
        print(f"# warning: {line}")
    print(
        f"# report: {r['dir'] / 'report.html'} ({len(r['figures'])} figures{', nccl_tuner.conf' if r['tuner'] else ''})"
    )
    return 0


def cmd_compare(a) -> int:
    """Print the A/B table; 1 when the --fail-on-regression gate fails (compare.gate_failures)."""
    from dtune_report.check import check_results, incomplete_files, machine_warnings
    from dtune_report.compare import compare_results, gate_failures, nothing_compared, table_of

    if not 0 < a.alpha < 1:
        return _usage(f"--alpha {a.alpha}: must be between 0 and 1")
    from dtune_report.gbench import compare_gbench, is_gbench_json

    warnings = []
    try:
        if is_gbench_json(a.a) and is_gbench_json(a.b):  # two dtune-micro (Google Benchmark) files
            c = compare_gbench(a.a, a.b, a.alpha)
        else:
            check_results(a.a)
            check_results(a.b)
            c = compare_results(a.a, a.b, a.alpha)
            warnings = [f"{side}: {line}" for side, p in (("A", a.a), ("B", a.b)) for line in incomplete_files(p)]
            warnings += machine_warnings(a.a, a.b)
    except (OSError, ValueError, KeyError) as e:
        return _error(e)
    gate = None if a.fail_on_regression is None else gate_failures(c, a.fail_on_regression)
    if not c.rows and not gate:
        return _usage(nothing_compared(c))
    for line in warnings:
        print(f"# warning: {line}")
    if c.rows:
        print(table_of(c))
    for line in gate or []:
        print(f"# {line}", file=sys.stderr)
    return 1 if gate else 0


def cmd_tune(a) -> int:
    """Tune every sweep of the file (or those named by --sweep) within the budget."""
    from .objective import OBJECTIVES
    from .tune import tune

    if a.objective is not None and a.objective not in OBJECTIVES:
        return _usage(f"--objective {a.objective}: not one of {', '.join(OBJECTIVES)}")
    if not 0 < a.alpha < 1:
        return _usage(f"--alpha {a.alpha}: must be between 0 and 1")
    if a.min_steps < 1:
        return _usage(f"--min-steps {a.min_steps}: give a positive count")
    runner.check_timeout(a.timeout)
    points = _points(a)
    why = None if a.slurm else check_presets(points)  # Slurm tasks check on their own nodes
    if why:
        return _usage(why)
    if a.slurm:
        a.mpirun_tune = slurm.mpirun_tune(a.hostfile, a.mpirun_tune, a.launcher)
    else:
        runner.check_placement(points, runner.MpirunHosts.checked(a.hostfile, a.mpirun_tune))
    d = Path(a.out) if a.out else Path("results") / "tune" / Path(a.file).stem
    return tune(a, points, d)


def _numbers(kind):
    """An argparse type: a comma-separated list of positive numbers."""

    def parse(text: str) -> list:
        try:
            values = [kind(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: give comma-separated numbers, e.g. 1,2,4") from None
        if not values or any(v <= 0 for v in values):
            raise argparse.ArgumentTypeError(f"{text!r}: give positive numbers")
        return values

    return parse


def cmd_model(a) -> int:
    """`dtune model predict|check|project` (report/dtune_report/model_cmd.py)."""
    from dtune_report.model_cmd import run

    return run(a)


def add_model_parser(sub) -> None:
    """`dtune model ...` under the top-level subparsers `sub`."""
    from dtune_report.model_assumptions import OPTIMIZERS, SHARD_MODES  # no numpy: quick to import
    from dtune_report.model_assumptions import range_text as rng

    m = sub.add_parser("model", help="the scaling model: predict, check against measured runs, project to clusters")
    mm = m.add_subparsers(dest="cmd", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--run", help="the 1-rank profile's run group (a name or prefix) when the files hold several")
    common.add_argument(
        "--bucket-mb",
        type=_numbers(float),
        default=None,
        metavar="LIST",
        help=f"bucket sizes in MiB (comma separated; {rng('bucket_mb')})",
    )
    common.add_argument(
        "--nodes", type=_numbers(int), default=None, metavar="LIST", help=f"node counts ({rng('nodes')})"
    )
    common.add_argument(
        "--shard",
        choices=SHARD_MODES,
        default="none",
        help="sharded data parallelism: none (DDP), zero1 (optimizer state), zero2 (+ gradients: buckets "
        "reduce-scattered), zero3 (+ parameters, FSDP units gathered per forward and backward) (default none)",
    )
    common.add_argument(
        "--shard-unit-mb",
        type=float,
        default=None,
        help=f"zero3: a unit's parameter MiB (default: the bucket size; {rng('shard_unit_mb')})",
    )
    common.add_argument(
        "--shard-prefetch",
        type=int,
        default=None,
        metavar="N",
        help=f"zero3: units gathered ahead of the one computing, 0: no overlap (default 1; {rng('shard_prefetch')})",
    )
    common.add_argument(
        "--reshard-after-forward",
        choices=["on", "off"],
        default=None,
        help="zero3: free each unit after its forward and gather it again before its backward (default on)",
    )
    common.add_argument(
        "--optimizer",
        choices=OPTIMIZERS,
        default=None,
        help="the optimizer whose state the memory counts (default: the profile's)",
    )
    p = mm.add_parser(
        "predict",
        parents=[common],
        help=_HELP["model predict"],
        description="From a 1-rank profile (gradient arrival times) and α–β fits of dtune-comm allreduce runs "
        "per link level: step time, exposed communication and scaling efficiency per shape and bucket size.",
    )
    p.set_defaults(func=cmd_model)
    p.add_argument("files", nargs="+", help="results files: a 1-rank dtune-train run and dtune-comm allreduce runs")
    p.add_argument(
        "--ranks-per-node",
        type=_numbers(int),
        default=[2, 4],
        metavar="LIST",
        help=f"(default 2,4; {rng('ranks_per_node')})",
    )
    p.add_argument(
        "--first-bucket-mb",
        type=float,
        default=None,
        help=f"(default: the profile's, at most the bucket; {rng('first_bucket_mb')})",
    )
    p.add_argument("--algorithm", choices=["flat", "hierarchical"], default="flat", help="(default flat)")
    p.add_argument(
        "--cores",
        type=int,
        default=None,
        help="cores per machine that a CPU run's ranks share (default: the profile's provenance topology; "
        f"0: no compute contention; {rng('cores')})",
    )
    p.add_argument(
        "--nodes-per-machine",
        type=int,
        default=1,
        metavar="M",
        help="nodes on one physical machine, whose ranks share its cores for the compute contention: K = "
        "R·min(M, nodes) ranks per machine, as dtune model check counts a run's ranks per boot id (default 1: "
        "one node per machine; the simulated cluster of scripts/cluster: all its nodes, e.g. 2; "
        f"{rng('nodes_per_machine')})",
    )
    c = mm.add_parser("check", help=_HELP["model check"])
    c.set_defaults(func=cmd_model)
    c.add_argument("files", nargs="+", help="results files: multi-rank and 1-rank dtune-train runs, dtune-comm runs")
    c.add_argument(
        "--profile",
        choices=["nearest", "pooled"],
        default="nearest",
        help="with several matching 1-rank profiles: the one measured nearest in time to each run, or all "
        "of them pooled (default nearest; the summary gives both)",
    )
    j = mm.add_parser("project", parents=[common], help=_HELP["model project"])
    j.set_defaults(func=cmd_model)
    j.add_argument("files", nargs="+", help="results files holding one 1-rank dtune-train profile")
    j.add_argument("--cluster", default="h100-ib400", help="h100-ib400 or h200-ib400 (default h100-ib400)")
    j.add_argument("--algorithm", choices=["flat", "hierarchical"], default="hierarchical", help="(default hier.)")
    j.add_argument(
        "--compute-scale",
        type=float,
        default=None,
        help=f"multiply the profile's times by this ({rng('compute_scale')})",
    )
    j.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        help=f"the GPU's dense peak (default: the cluster's; {rng('peak_tflops')})",
    )
    j.add_argument(
        "--mfu", type=float, default=0.4, help=f"assumed model FLOPs utilisation (default 0.4; {rng('mfu')})"
    )
    j.add_argument(
        "--batch-scale",
        type=float,
        default=1.0,
        help=f"the GPU's batch over the profile's (default 1; {rng('batch_scale')})",
    )
    j.add_argument(
        "--alpha-intra-us",
        type=float,
        default=2.0,
        help=f"assumed latency per ring step (default 2; {rng('alpha_intra_us')})",
    )
    j.add_argument(
        "--alpha-inter-us",
        type=float,
        default=6.0,
        help=f"assumed latency per ring step (default 6; {rng('alpha_inter_us')})",
    )
    j.add_argument("--nics", type=int, default=None, help=f"NICs per node (default: the cluster's, 8; {rng('nics')})")
    add_plan_parser(mm)


def add_plan_parser(mm) -> None:
    """`dtune model plan`: the layouts of a named transformer on a published cluster."""
    from dtune_report.clusters import CLUSTERS

    q = mm.add_parser(
        "plan",
        help=_HELP["model plan"],
        description="Every layout (dp x tp x pp, the data axis' sharding, micro-batches, activation "
        "checkpointing, sequence parallelism) of a named transformer on N nodes of a published cluster: step "
        "time and memory per rank from the model's shape (report/dtune_report/layouts.py says how), the "
        "layouts that do not fit in the GPU's memory dropped, the rest ranked, and why the first beats the "
        "second. Arithmetic, not a measurement: the assumptions are printed with the table.",
    )
    q.set_defaults(func=cmd_model)
    q.add_argument("--model", required=True, help="a transformer: gpt2-*, llama3* or hf:PATH (dtune-models list)")
    q.add_argument("--cluster", default="h100-ib400", choices=sorted(CLUSTERS), help="(default h100-ib400)")
    q.add_argument("--nodes", type=int, default=1, help="nodes (default 1)")
    q.add_argument("--global-batch", type=int, required=True, help="sequences per optimizer step, all ranks")
    q.add_argument("--micro-batch", type=int, default=1, help="sequences a rank takes at once (default 1)")
    q.add_argument("--context", type=int, default=0, help="sequence length (default: the model's)")
    q.add_argument("--layers", type=int, default=0, help="blocks (default: the model's)")
    q.add_argument("--vocab", type=int, default=0, help="vocabulary (default: the model's)")
    q.add_argument("--precision", choices=["fp32", "tf32", "bf16", "fp16"], default="bf16", help="(default bf16)")
    q.add_argument("--weights-dtype", choices=["fp32", "bf16"], default="fp32", help="(default fp32)")
    q.add_argument("--optimizer", choices=["sgd", "adamw"], default="adamw", help="(default adamw)")
    q.add_argument("--mfu", type=float, default=0.4, help="model FLOPs utilisation of the compute (default 0.4)")
    q.add_argument("--memory-gb", type=float, default=None, help="each GPU's memory (default: the cluster's)")
    q.add_argument("--tp", type=_numbers(int), default=[1, 2, 4, 8], metavar="LIST", help="(default 1,2,4,8)")
    q.add_argument("--pp", type=_numbers(int), default=[1, 2, 4], metavar="LIST", help="(default 1,2,4)")
    q.add_argument(
        "--shard",
        type=_choices(["none", "zero1", "zero2", "zero3"]),
        default=["none", "zero1", "zero2", "zero3"],
        metavar="LIST",
        help="data-axis sharding to consider (default none,zero1,zero2,zero3)",
    )
    q.add_argument(
        "--activation-checkpoint",
        type=_choices(["none", "selective", "full"]),
        default=["none", "full"],
        metavar="LIST",
        help="(default none,full)",
    )
    q.add_argument("--top", type=int, default=10, help="rows to print (default 10)")
    q.add_argument("--alpha-intra-us", type=float, default=2.0, help="assumed latency per ring step (default 2)")
    q.add_argument("--alpha-inter-us", type=float, default=6.0, help="assumed latency per ring step (default 6)")


def _choices(allowed: list):
    """argparse type: a comma-separated list of some of `allowed`."""

    def parse(text: str) -> list:
        values = [v.strip() for v in text.split(",") if v.strip()]
        bad = [v for v in values if v not in allowed]
        if not values or bad:
            raise argparse.ArgumentTypeError(f"{text!r}: give some of {','.join(allowed)}")
        return values

    return parse


# (command words, one-line description, handler): the parsers and `dtune --help` read this table.
COMMANDS = [
    ("sweep plan", "expand a sweep file into points and print them", cmd_plan),
    ("sweep run", "run every point not yet complete, locally with mpirun", cmd_run),
    ("sweep slurm", "write (and submit) Slurm job arrays, one task per bundle of points", cmd_slurm),
    ("sweep status", "count points by status", cmd_status),
    ("sweep merge", "one HDF5 file from the sweep's point files", cmd_merge),
    (
        "report",
        "HTML report: what to change against a baseline, with intervals, evidence, the advice sections the "
        "data supports (data loading, batch, communication, precision, parallelism, hardware) and commands "
        "that reproduce each run (mpirun, or srun for runs Slurm launched)",
        cmd_report,
    ),
    ("compare", "A/B comparison of two results (files or directories)", cmd_compare),
    (
        "tune",
        "the best configuration of a sweep file's space within a budget: successive halving over steps with "
        "noise-aware promotion, through the sweep runners; the flags, an export block and a report",
        cmd_tune,
    ),
    ("model predict", "scaling model: step time, exposed communication, efficiency for N nodes x R ranks", cmd_model),
    ("model check", "scaling model against every multi-rank run in the files (median abs error)", cmd_model),
    ("model project", "scaling model on a published cluster's links (assumptions printed)", cmd_model),
    (
        "model plan",
        "every dp x tp x pp layout of a transformer on a published cluster: step time and memory per rank, "
        "ranked, the ones that do not fit dropped (arithmetic; assumptions printed)",
        cmd_model,
    ),
]
_HELP = {words: text for words, text, _ in COMMANDS}
# The C++ binaries `dtune --help` points to (one line each).
BINARIES = [
    ("dtune-comm", "collective benchmark (nccl-tests' flags and table; MPI or NCCL)"),
    ("dtune-train", "data-parallel training of ResNets and GPT-2s with a per-step time breakdown"),
    ("dtune-data", "convert your images or text into shards, make synthetic ones, index, bench the loader"),
    ("dtune-models", "the models: parameters and FLOPs (list), parity with PyTorch"),
]
_FUNC = {words: func for words, _, func in COMMANDS}


PRESET_CHECK_HELP = """\
A topology preset that needs NVLink (nccl-p2p-nvl) is checked against this machine's topology
(dtune-probe topology: hwloc and NVML) before anything launches: `sweep run` and `tune` exit 2
naming the preset and what was detected; `sweep plan` prints it as a `# warning:` line and exits 0
(a plan runs nothing and may be made on another machine); a Slurm task checks on its own node
and exits 2 there."""


def _add_sweep_commands(sw) -> None:
    cap = argparse.ArgumentParser(add_help=False)
    cap.add_argument(
        "--max-points",
        type=int,
        default=DEFAULT_MAX_POINTS,
        metavar="N",
        help=f"refuse a file that plans more than N points, counted before expanding (default {DEFAULT_MAX_POINTS:,})",
    )

    def add(name):
        p = sw.add_parser(
            name,
            parents=[cap],
            help=_HELP[f"sweep {name}"],
            description=_HELP[f"sweep {name}"].capitalize() + ".",
            epilog=f"{RULES_HELP}\n{PRESET_CHECK_HELP}\nSweep files: sweeps/README.md (every key, with an example).",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.set_defaults(func=_FUNC[f"sweep {name}"])
        p.add_argument("file", help="the sweep file (YAML; sweeps/README.md describes every key)")
        return p

    add("plan").add_argument("--show", type=int, default=10, help="how many points to print (default 10)")
    p_run = add("run")
    p_run.add_argument("--out", help="sweep directory (default results/sweeps/<file stem>)")
    p_run.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds (above 0) a point may run before it is killed (default: no limit)",
    )
    add_host_flags(p_run)
    p_slurm = add("slurm")
    p_slurm.epilog = (
        "Jobs are submitted --no-kill: a node that dies fails the point running on it (srun: error: Node\n"
        "failure on NODE, the point's reason), a later point needing more nodes than the job still holds\n"
        "fails at once, the others run (--sbatch=--no-kill=off: Slurm's default, cancel and requeue).\n\n"
        + p_slurm.epilog
    )
    p_slurm.add_argument("--out", help="sweep directory (default results/sweeps/<file stem>)")
    p_slurm.add_argument("--dry-run", action="store_true", help="write the sbatch scripts, do not submit")
    p_slurm.add_argument("--throttle", type=int, default=8, help="array tasks running at once (default 8)")
    p_slurm.add_argument("--points-per-task", type=int, default=4, help="points in one array task (default 4)")
    p_slurm.add_argument(
        "--launcher",
        choices=["srun", "mpirun"],
        default="srun",
        help="how a task starts each point (default srun --mpi=pmix)",
    )
    add_host_flags(p_slurm, slurm=True)
    p_slurm.add_argument(
        "--sbatch",
        action="append",
        default=[],
        metavar="OPTION",
        help="an sbatch option passed through, e.g. --sbatch=--partition=gpu (repeatable)",
    )
    add("status").add_argument("--out", help="sweep directory (default results/sweeps/<file stem>)")
    p_merge = add("merge")
    p_merge.add_argument("--out", help="sweep directory (default results/sweeps/<file stem>)")
    p_merge.add_argument("-o", "--output", help="merged file (default <sweep dir>/merged.h5)")


def add_host_flags(p, slurm: bool | None = False) -> None:
    """--hostfile and --mpirun-tune (runner.MpirunHosts): for local runs (`sweep run`), for Slurm
    tasks (`sweep slurm`: no hostfile, the allocation gives the nodes), or either (`tune`, by --slurm)."""
    where = {False: "", True: " (refused: under Slurm the job's allocation gives the nodes)"}
    where[None] = " (not with --slurm)"
    p.add_argument(
        "--hostfile",
        metavar="FILE",
        help="mpirun's hostfile for points over several nodes (launch: {nodes: N}); 1-node points run here "
        f"(the simulated cluster's: /run/dtune-cluster/NAME/hostfile){where[slurm]}",
    )
    task = {False: "", True: " (--launcher mpirun)", None: " (with --slurm: --launcher mpirun)"}
    p.add_argument(
        "--mpirun-tune",
        metavar="FILE",
        help="mpirun --tune FILE for every point: MCA settings such as the rsh agent and the TCP subnet "
        f"(scripts/cluster writes /run/dtune-cluster/NAME/mpirun.tune){task[slurm]}",
    )


TUNE_EPILOG = """\
Each sweep of the file is tuned on its own (--sweep NAME picks some): its points (repeat 0, after
zips, excludes and the constraints: block) are the candidates. Every run is a sweep point whose
steps (dtune-train --steps, dtune-comm --iters) its rung sets, run by the sweep runner: the state
log, resume (rerun the same command after a kill -9: finished runs are kept) and merge are the
sweep's. Failed runs are recorded and never retried (a full disk is no failure of the run: the tune
stops, exit 1, and the rerun runs it again); a run --timeout killed is retried by a tune
that gives it more time (no --timeout, or a larger one).

halving: the first rung runs every drawn candidate for a few steps; steps double up to the sweep's
own steps while the candidates shrink to two at the top rung. A rung runs in blocks (the sweep's
repeats:, the top rung at least 3), each in a shuffled order with a run of the incumbent (the best
so far) after every 4 candidates; each run's figure is read against the incumbent runs beside it,
so that the machine's drift between runs cancels. The incumbent's repeats give the noise floor;
candidates go up by their probability of being the best (at least alpha / candidates); the pick
is named with every candidate tied with it and the blocks that would separate them; significant
needs the paired interval clear of 1 and the Wilcoxon signed-rank p < alpha (6 blocks or more).
There is no optuna method any more (removed 2026-12): on the synthetic spaces Optuna's TPE with
Hyperband found the optimum in 715 of 1200 small-sweep tunes where halving found 1046 at the same
budget (doc/tuning.md).

Output: per sweep the best configuration with its interval, its margin over the runner-up, the
candidates tied with it, the noise floor, the cost (run time, steps, start-up), the flags, the
command, an export block (DTUNE_TRAIN_*/DTUNE_COMM_* and the environment), for an NCCL
space an nccl_tuner.conf; <out>/tune.json, <out>/merged.h5 and <out>/report/report.html with the
section "How the budget was spent". Exit status: 0 done, 1 a sweep without a pick (no candidate
measured, all measured the same, e.g. busbw 0 with 1 rank; or a full disk: no space left on
device), 2 bad input (an unknown objective,
a budget that cannot run one rung, constraints that leave no point, a bad --timeout or --out),
130 interrupted.
Sweep files: sweeps/README.md ("Tuning")."""


def _add_tune_command(sub) -> None:
    from .objective import OBJECTIVES

    t = sub.add_parser(
        "tune",
        help=_HELP["tune"],
        description=_HELP["tune"][0].upper() + _HELP["tune"][1:] + ".",
        epilog=TUNE_EPILOG + "\n" + PRESET_CHECK_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    t.set_defaults(func=cmd_tune)
    t.add_argument("file", help="the sweep file (YAML; sweeps/README.md describes every key)")
    t.add_argument(
        "--budget",
        metavar="TIME|RUNS",
        help="run time (60s, 10m, 1h: the seconds the runs take) or a number of runs (40); default: the "
        "whole schedule over every candidate",
    )
    t.add_argument(
        "--method",
        choices=["halving"],
        default="halving",
        help="successive halving over paired rungs, the only method (optuna was removed: doc/tuning.md says why)",
    )
    t.add_argument(
        "--objective",
        metavar="NAME",
        help=f"one of {', '.join(OBJECTIVES)} (default: samples_per_s for dtune-train sweeps, busbw for "
        "dtune-comm ones)",
    )
    t.add_argument("--seed", type=int, default=0, help="the candidates' order and each block's order (default 0)")
    t.add_argument("--out", help="directory of the runs (default results/tune/<file stem>)")
    t.add_argument("--sweep", action="append", metavar="NAME", help="tune this sweep of the file (repeatable)")
    t.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="significance level of the pick's verdict; halving promotes candidates whose probability of being "
        "the best is at least alpha / candidates (default 0.05)",
    )
    t.add_argument(
        "--min-steps", type=int, default=4, help="steps of the shortest rung, at least (default 4: the U test's least)"
    )
    t.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds (above 0) a run may take before it is killed (default: no limit)",
    )
    t.add_argument(
        "--max-points",
        type=int,
        default=DEFAULT_MAX_POINTS,
        metavar="N",
        help=f"refuse a file that plans more than N points (default {DEFAULT_MAX_POINTS:,})",
    )
    t.add_argument("--no-report", action="store_true", help="do not write <out>/report/ (tune.json and merged.h5 only)")
    t.add_argument("--slurm", action="store_true", help="run each rung as Slurm job arrays (dtune sweep slurm's)")
    t.add_argument("--throttle", type=int, default=8, help="--slurm: array tasks running at once (default 8)")
    t.add_argument("--points-per-task", type=int, default=1, help="--slurm: points in one array task (default 1)")
    t.add_argument("--launcher", choices=["srun", "mpirun"], default="srun", help="--slurm: how a task starts a point")
    t.add_argument("--sbatch", action="append", default=[], metavar="OPTION", help="--slurm: an sbatch option")
    add_host_flags(t, slurm=None)


def build_parser() -> argparse.ArgumentParser:
    width = max(len(words) for words, _, _ in COMMANDS)
    ap = argparse.ArgumentParser(
        prog="dtune",
        description="dtune: sweeps, reports and comparisons over dtune's benchmarks",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="commands:\n"
        + "\n".join(f"  dtune {w:<{width}}  {t}" for w, t, _ in COMMANDS)
        + "\n\nthe benchmarks themselves (build/bin/, each with --help; launch with mpirun -np N):\n"
        + "\n".join(f"  {b:<{width + 6}}  {t}" for b, t in BINARIES)
        + "\n\n`dtune COMMAND --help` shows a command's arguments. Exit status: 0 done, 1 a failed "
        "point, a regression or a full disk, 2 a usage error (README, 'Exit codes').",
    )
    sub = ap.add_subparsers(dest="group", required=True)
    sw = sub.add_parser("sweep", help="plan, run, inspect and merge sweeps").add_subparsers(dest="cmd", required=True)
    _add_sweep_commands(sw)
    cmp = sub.add_parser(
        "compare",
        help=_HELP["compare"],
        description="One row per configuration found in both A and B (runs match on every "
        "setting: attributes, flags, environment, ranks; sweep runs on their point), with "
        "medians, the change, the Mann-Whitney U p-value (significant when p < alpha; `~` "
        "otherwise) and a 95% bootstrap interval of B/A. Samples: per iteration the slowest "
        "rank's time (comm), per measured unprofiled step the slowest rank's total (train); runs "
        "that did not end ok are named, non-finite times left out. "
        "Two Google Benchmark JSON files (dtune-micro --benchmark_format=json "
        "--benchmark_repetitions=N) compare benchmark by benchmark, a sample per repetition. "
        "The statistics: doc/metrics.md.",
    )
    cmp.set_defaults(func=cmd_compare)
    cmp.add_argument("a", help="results before: an HDF5 file or a directory of them, or a Google Benchmark JSON file")
    cmp.add_argument("b", help="results after: an HDF5 file or a directory of them, or a Google Benchmark JSON file")
    cmp.add_argument("--alpha", type=float, default=0.05, help="significance level (default 0.05)")
    cmp.add_argument(
        "--fail-on-regression",
        type=float,
        metavar="PCT",
        help="exit 1 when a significant (p < alpha) slowdown exceeds PCT percent, or when there is nothing "
        "valid to judge: a run of A or B not ok (failed, diverged, timed out, ...), no finite step time",
    )
    _add_tune_command(sub)
    add_model_parser(sub)
    rep = sub.add_parser("report", help=_HELP["report"])
    rep.set_defaults(func=cmd_report)
    rep.add_argument("results", nargs="+", help="HDF5 files or directories (a sweep's merged.h5)")
    rep.add_argument("-o", "--output", required=True, help="directory for report.html, report.md and the PNGs")
    rep.add_argument(
        "--baseline",
        metavar="POINT|FILE",
        help="the configuration you run today, which every finding is stated against: a sweep point id "
        "(or a prefix of at least 4 characters; `dtune sweep plan` prints them) or a results file of its "
        "runs (added to the results). Default: per workload, the configuration closest to the defaults "
        "(fp32, 25 MiB buckets, dtune-train's loader settings, no NCCL/MPI environment settings, the "
        "smallest batch measured)",
    )
    return ap


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    try:
        return a.func(a)
    except SweepError as e:  # a bad sweep file, or a sweep directory another runner holds
        return _usage(str(e))
    except disk.NoSpace as e:  # the runner's own writes, or a point that failed for lack of space
        print(f"dtune: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (`dtune compare ... | head`): not an error; stop writing quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:  # a full disk met by a write outside the runner (tune.json, slurm scripts)
        if not disk.is_no_space(e):
            raise
        said = disk.NoSpace(e.filename) if e.filename else f"no space left on device: {str(e).splitlines()[0]}"
        print(f"dtune: error: {said}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
