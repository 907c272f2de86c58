"""`dtune sweep plan|run|slurm|status|merge FILE` and `dtune compare A B`: dtune's command line."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import runner, slurm
from .spec import DEFAULT_MAX_POINTS, SweepError, plan


def sweep_dir(file: str, out: str | None) -> Path:
    return Path(out) if out else Path("results") / "sweeps" / Path(file).stem


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="dtune", description="dtune's sweeps over its benchmarks")
    sub = ap.add_subparsers(dest="group", required=True)
    sw = sub.add_parser("sweep", help="plan, run, inspect and merge sweeps").add_subparsers(dest="cmd", required=True)
    cap = argparse.ArgumentParser(add_help=False)
    cap.add_argument("--max-points", type=int, default=DEFAULT_MAX_POINTS, metavar="N",
                     help=f"refuse a file that plans more than N points, counted before expanding "
                          f"(default {DEFAULT_MAX_POINTS:,})")
    p_plan = sw.add_parser("plan", parents=[cap], help="expand a sweep file into points and print them")
    p_plan.add_argument("file")
    p_plan.add_argument("--show", type=int, default=10, help="points to print (default 10)")
    p_run = sw.add_parser("run", parents=[cap], help="run every point not yet complete, locally with mpirun")
    p_run.add_argument("file")
    p_run.add_argument("--out", help="sweep directory (default results/sweeps/<file stem>)")
    p_run.add_argument("--timeout", type=float, default=None, help="seconds per point before it is killed")
    p_slurm = sw.add_parser("slurm", parents=[cap], help="write (and submit) Slurm job arrays, one task per bundle of points")
    p_slurm.add_argument("file")
    p_slurm.add_argument("--out", help="sweep directory (default results/sweeps/<file stem>)")
    p_slurm.add_argument("--dry-run", action="store_true", help="write the sbatch scripts, do not submit")
    p_slurm.add_argument("--throttle", type=int, default=8, help="array tasks running at once (default 8)")
    p_slurm.add_argument("--points-per-task", type=int, default=4, help="points in one array task (default 4)")
    p_slurm.add_argument("--launcher", choices=["srun", "mpirun"], default="srun",
                         help="how a task starts each point (default srun --mpi=pmix)")
    p_slurm.add_argument("--sbatch", action="append", default=[], metavar="OPTION",
                         help="an sbatch option passed through, e.g. --sbatch=--partition=gpu (repeatable)")
    p_status = sw.add_parser("status", parents=[cap], help="count points by status")
    p_status.add_argument("file")
    p_status.add_argument("--out")
    p_merge = sw.add_parser("merge", parents=[cap], help="one HDF5 file from the sweep's point files")
    p_merge.add_argument("file")
    p_merge.add_argument("--out")
    p_merge.add_argument("-o", "--output", help="merged file (default <sweep dir>/merged.h5)")
    cmp = sub.add_parser("compare", help="A/B comparison of two results (files or directories)",
                         description="One row per configuration found in both A and B (runs match on every "
                         "setting: attributes, flags, environment, ranks; sweep runs on their point), with "
                         "medians, the change, the Mann-Whitney U p-value (significant when p < alpha; `~` "
                         "otherwise) and a 95% bootstrap interval of B/A. Samples: per iteration the slowest "
                         "rank's time (comm), per measured unprofiled step the slowest rank's total (train).")
    cmp.add_argument("a", help="results before: an HDF5 file or a directory of them")
    cmp.add_argument("b", help="results after: an HDF5 file or a directory of them")
    cmp.add_argument("--alpha", type=float, default=0.05, help="significance level (default 0.05)")
    cmp.add_argument("--fail-on-regression", type=float, metavar="PCT",
                     help="exit 1 when a significant (p < alpha) slowdown exceeds PCT percent")
    rep = sub.add_parser("report", help="HTML report with figures and recommendations from results")
    rep.add_argument("results", nargs="+", help="HDF5 files or directories (a sweep's merged.h5)")
    rep.add_argument("-o", "--output", required=True, help="directory for report.html, report.md and the PNGs")
    a = ap.parse_args(argv)
    if a.group == "report":
        from dtune_report.report import build_report
        try:
            r = build_report(a.results, a.output)
        except (OSError, ValueError) as e:
            return _error(e)
        print(f"# report: {r['dir'] / 'report.html'} ({len(r['figures'])} figures"
              f"{', nccl_tuner.conf' if r['tuner'] else ''})")
        return 0
    if a.group == "compare":
        return compare_main(a)
    if a.max_points < 1:
        print(f"dtune: error: --max-points {a.max_points}: give a positive count", file=sys.stderr)
        return 2
    try:
        points = plan(a.file, runner.known_flags, a.max_points)
    except SweepError as e:
        print(f"dtune: error: {e}", file=sys.stderr)
        return 2
    if a.cmd == "plan":
        print(f"# {a.file}: {len(points)} points")
        for p in points[: a.show]:
            env = " ".join(f"{k}={v}" for k, v in sorted(p.env.items()))
            print(f"  {p.id}  np={p.ranks}  {env + '  ' if env else ''}{p.binary} {' '.join(p.args)}"
                  f"{'  (repeat ' + str(p.repeat) + ')' if p.repeat else ''}")
        if len(points) > a.show:
            print(f"  ... {len(points) - a.show} more")
        return 0
    d = sweep_dir(a.file, a.out)
    if a.cmd == "run":
        try:
            return runner.run_points(points, d, a.timeout)
        except SweepError as e:
            print(f"dtune: error: {e}", file=sys.stderr)
            return 2
    if a.cmd == "slurm":
        if a.throttle < 1 or a.points_per_task < 1:
            print("dtune: error: --throttle and --points-per-task must be at least 1", file=sys.stderr)
            return 2
        try:
            scripts = slurm.write_scripts(points, d, a.sbatch, a.throttle, a.points_per_task, a.launcher)
            for s in scripts:
                print(f"# wrote {s}")
            if not a.dry_run:
                for job in slurm.submit(scripts):
                    print(f"# submitted job array {job}")
        except SweepError as e:
            print(f"dtune: error: {e}", file=sys.stderr)
            return 2
        return 0
    if a.cmd == "status":
        c = runner.counts(points, d)
        print(f"# {d}: " + ", ".join(f"{k} {v}" for k, v in c.items()))
        return 0
    from . import merge as merge_mod  # h5py: imported only when merging, so planning starts fast
    out = Path(a.output) if a.output else d / "merged.h5"
    try:
        n = merge_mod.merge(d, out)
    except SweepError as e:
        print(f"dtune: error: {e}", file=sys.stderr)
        return 2
    print(f"# merged {n} runs into {out}")
    return 0


def _error(e: BaseException) -> int:
    """One line on stderr, exit 2: a file dtune cannot use is a usage error."""
    text = str(e).strip()
    if isinstance(e, KeyError):  # h5py: a group or attribute that is not there
        text = f"missing in the results: {text.strip(chr(34))}"
    print(f"dtune: error: {text.splitlines()[0] if text else type(e).__name__}", file=sys.stderr)
    return 2


def compare_main(a) -> int:
    from dtune_report.check import check_results
    from dtune_report.compare import compare_results, format_table, regressions
    if not 0 < a.alpha < 1:
        print(f"dtune: error: --alpha {a.alpha}: must be between 0 and 1", file=sys.stderr)
        return 2
    try:
        check_results(a.a)
        check_results(a.b)
        c = compare_results(a.a, a.b, a.alpha)
    except (OSError, ValueError, KeyError) as e:
        return _error(e)
    if not c.rows:
        print(f"dtune: error: no configuration appears in both A and B ({len(c.only_a)} in A alone, "
              f"{len(c.only_b)} in B alone: runs match only when every setting agrees)", file=sys.stderr)
        return 2
    print(format_table(c.rows, c.only_a, c.only_b, c.alpha))
    if a.fail_on_regression is not None:
        bad = regressions(c.rows, a.fail_on_regression)
        for r in bad:
            print(f"# regression: {r.config}: {(r.ratio - 1) * 100:+.1f}% (> {a.fail_on_regression}%)", file=sys.stderr)
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
