"""`dtune tune FILE`: the best configuration of a sweep's space within a budget, through the sweep
runners (runner.py locally, slurm.py as job arrays), so that its state logs, resume after kill -9
and merge are the sweep's own.

Each sweep of the file is tuned on its own: its points (repeat 0; constraints, zips and excludes
applied by the planner) are the candidates, put in an order shuffled with --seed. Every run is a
sweep point whose steps (dtune-train --steps, dtune-comm --iters) are set by its rung, so a run is
identified, recorded and resumed like any point, and a rerun of `dtune tune` (after a kill -9, or
with a larger budget) reuses every run already made: the decisions are functions of the results
files, made again the same way. A run that failed is recorded and never retried; one that timed out
is retried only by a tune that allows it more time than it had (no --timeout, or a larger one), so
that a too-short --timeout does not decide later tunes in the same directory; one out of memory is
a result (the candidate is dropped). One tune per directory: the state log's lock is taken before
anything is written there (a second tune, or `sweep run`, is refused and changes nothing).

The budget is runs (`--budget 40`) or run time (`--budget 60s`, `10m`, `1h`: the seconds the runs
took, as their state records say). It is shared among the sweeps by their candidate counts (a
sweep's unspent share passes to the next). With a time budget the sweep's first run is a probe
(one run of --min-steps): its time and step times give the cost of a run of s steps, a + b s, from which the
schedule is sized. A budget too small for the full schedule draws fewer candidates into the first
rung (the first ones of the shuffled order); one that cannot pay for a rung of two is refused.

The method is successive halving over paired, interleaved rungs (interleaved.py, over halving.py's
schedule); what a candidate is (its steps, its record, the recommendation) is candidates.py's.
`--method optuna` (TPE with Hyperband) was removed in 2026-12: on the synthetic spaces it found the
optimum far less often than halving at the same budget (benchmarks/tune_research/README.md, "Layers").
The outcome, rung by rung, is in <out>/tune.json, which `dtune report` shows as "How the budget was
spent" (dtune_report.tuning).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from . import runner
from .candidates import TuneError, steps_of
from .halving import Measured
from .interleaved import tune_sweep
from .objective import DEFAULT, OBJECTIVES, ObjectiveError, samples
from .spec import Point

MIN_RUN_S = 1.0  # mpirun's start alone: a time budget below 2 runs of this per sweep is refused
NEVER_RETRIED = ("failed", "timeout")
# --seed seeds halving's generators (numpy's default_rng of seed x 1000 + rung, which refuses a
# negative seed) and Python's shuffles; 0 .. 2**32 - 1, the range numpy's seeds share.
SEED_MAX = 2**32 - 1
NOTHING_MEASURED = (
    "no candidate measured: every run failed, or recorded figures that are not a measurement (see the lines "
    "above and the logs in points/)"
)
INVALID = "invalid"  # the status of a run whose figures are not a measurement (NaN, infinite, <= 0 ms)


def check_seed(seed: int) -> None:
    """TuneError for a --seed the tune's generators refuse (numpy's: 0 .. 2**32 - 1),
    said before anything runs rather than as a traceback after the first rung."""
    if not 0 <= seed <= SEED_MAX:
        raise TuneError(f"--seed {seed}: give an integer from 0 to {SEED_MAX} (numpy's seed range)")


def invalid_figures(x: np.ndarray, higher: bool) -> str | None:
    """Why a run's objective samples are no measurement, or None: a sample that is NaN or infinite
    (a step time of NaN or 0 ms), negative, or 0 where lower is better (a step of 0 ms). Such a run
    is a failed measurement, never a figure to rank (0 where higher is better is measured: busbw
    with 1 rank, which halving.no_pick names)."""
    bad = {
        "NaN": np.isnan(x),
        "infinite": np.isinf(x),
        "negative": x < 0,
        "0 (lower is better)": (x == 0) & (not higher),
    }
    said = [f"{int(m.sum())} {k}" for k, m in bad.items() if m.any()]
    if not said:
        return None
    return f"{', '.join(said)} of its {len(x)} step figures: not a measurement"


def parse_budget(text: str | None) -> tuple[str, float] | None:
    """('runs', n) or ('seconds', s); None: no budget (the whole schedule)."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|m|h|runs?)?\s*", str(text))
    if not m:
        raise TuneError(f"--budget {text!r}: give run time (60s, 10m, 1h) or a number of runs (40)")
    n, unit = float(m.group(1)), m.group(2) or "runs"
    if unit.startswith("run"):
        if n != int(n) or n < 1:
            raise TuneError(f"--budget {text!r}: a number of runs is a positive integer")
        return "runs", int(n)
    return "seconds", n * {"s": 1, "m": 60, "h": 3600}[unit]


class Runs:
    """Runs points through the sweep runners in one directory and reads their outcomes."""

    def __init__(self, directory: Path, timeout_s=None, slurm_opts: dict | None = None, hosts=None):
        self.directory = directory
        self.timeout_s = timeout_s
        self.slurm = slurm_opts
        self.hosts = hosts or runner.MpirunHosts()  # local runs: --hostfile, --mpirun-tune
        self.planned: dict[str, Point] = {}
        self.said_invalid: set = set()  # runs whose figures were said to be no measurement
        runner.make_out_dir(directory)
        self.jobs_file = directory / "tune-jobs.json"

    def _manifest(self):
        tmp = self.directory / "manifest.json.partial"
        tmp.write_text(json.dumps([p.to_json() for p in self.planned.values()], indent=1))
        tmp.replace(self.directory / "manifest.json")

    def outcomes(self) -> dict:
        return runner.State(self.directory).outcomes()

    def run(self, points: list[Point]) -> int:
        """Runs the points not yet complete and not failed before; 130 when interrupted."""
        for p in points:
            self.planned[p.id] = p
        self._manifest()
        done = self.outcomes()
        retry = self._longer_timeout(points, done)
        todo = [p for p in points if done.get(p.id) not in runner.COMPLETE + NEVER_RETRIED or p.id in retry]
        for p in points:
            if p.id in retry:
                print(f"# tune: {p.id} timed out before after {retry[p.id]:g} s: retried, {self._limit()}", flush=True)
            elif done.get(p.id) in NEVER_RETRIED:
                print(f"# tune: {p.id} {done[p.id]} before: recorded, not retried", flush=True)
        if not todo:
            return 0
        if self.slurm is None:
            rc = runner.run_points(
                todo, self.directory, self.timeout_s, write_manifest=False, hosts=self.hosts, lock_held=True
            )
            return 130 if rc == 130 else 0
        return self._run_slurm(todo)

    def _limit(self) -> str:
        return f"--timeout {self.timeout_s:g}" if self.timeout_s else "no --timeout"

    def _longer_timeout(self, points: list[Point], done: dict) -> dict:
        """{id: seconds it had} of the points whose latest run the runner killed at its --timeout
        (no exit status: a binary's own timeout, exit 3, is a hang and stays recorded) with less
        time than this tune allows (its recorded timeout_s, else the seconds it ran)."""
        last = {}
        for r in runner.State(self.directory).records():
            if r["event"] == "finished":
                last[r["id"]] = r
        out = {}
        for p in points:
            r = last.get(p.id)
            if done.get(p.id) != "timeout" or r is None or r.get("exit_status") is not None:
                continue
            had = float(r.get("timeout_s") or r.get("seconds") or 0)
            if self.timeout_s is None or self.timeout_s > had:
                out[p.id] = had
        return out

    def wait_jobs(self):
        """Waits for job arrays an earlier (killed) `dtune tune --slurm` submitted."""
        if self.slurm is None or not self.jobs_file.exists():
            return
        jobs = json.loads(self.jobs_file.read_text())
        while jobs:
            r = subprocess.run(["squeue", "-h", "-j", ",".join(jobs)], capture_output=True, text=True)
            if r.returncode == 0 and not r.stdout.strip():
                break
            time.sleep(self.slurm.get("poll_s", 2))
        self.jobs_file.unlink(missing_ok=True)

    def _run_slurm(self, todo: list[Point]) -> int:
        from . import slurm

        o = self.slurm
        scripts = slurm.write_scripts(
            todo, self.directory, o["sbatch"], o["throttle"], o["per_task"], o["launcher"], o["mpirun_tune"]
        )
        jobs = slurm.submit(scripts)
        self.jobs_file.write_text(json.dumps(jobs))
        print(f"# tune: submitted job array(s) {', '.join(jobs)} ({len(todo)} points)", flush=True)
        self.wait_jobs()
        self._manifest()  # write_scripts wrote this rung's points alone
        return 0

    def seconds(self, ids) -> float:
        """Run time the state logs record for these points (every finished attempt)."""
        return sum(self.seconds_by_id(ids).values())

    def seconds_by_id(self, ids) -> dict:
        """{id: run time the state logs record for it (every finished attempt)} for these points."""
        ids, out = set(ids), {}
        for r in runner.State(self.directory).records():
            if r["event"] == "finished" and r["id"] in ids:
                out[r["id"]] = out.get(r["id"], 0.0) + float(r.get("seconds") or 0)
        return out

    def step_seconds(self, p: Point) -> float | None:
        """Seconds one measured step of this finished run took (step_seconds); None: no file."""
        f = self.directory / "points" / f"{p.id}.h5"
        return step_seconds(f, p.binary) if f.exists() else None

    def measure(self, p: Point, key: int, objective: str) -> Measured:
        status = self.outcomes().get(p.id, "pending")
        if status != "ok":
            return Measured(key, status)
        try:
            x = samples(self.directory / "points" / f"{p.id}.h5", objective)
        except ObjectiveError:
            raise
        except (OSError, KeyError, ValueError) as e:
            print(f"# tune: {p.id}: results unreadable ({e})", file=sys.stderr)
            return Measured(key, "unreadable")
        why = invalid_figures(np.asarray(x, float), OBJECTIVES[objective][2])
        if why is None:
            return Measured(key, "ok", x)
        if p.id not in self.said_invalid:  # measured again by the cost model and each rung's reading
            self.said_invalid.add(p.id)
            print(f"# tune: {p.id}: {INVALID}: {why}", flush=True)
        return Measured(key, INVALID, why=why)


def step_seconds(path: Path, binary: str) -> float:
    """Seconds one measured step (dtune-comm: one iteration over every size) takes in a run."""
    from dtune_report.compare import comm_iteration_samples, train_step_samples

    if binary == "dtune-train":
        s = train_step_samples([path])
        return float(s.total_ms.median()) / 1000 if not s.empty else 0.0
    it = comm_iteration_samples([path])
    if it.empty:
        return 0.0
    return float(it.groupby(["run", "placement", "size_bytes"]).time_us.median().sum()) / 1e6


def _share(budget, total_left: float, n: int, n_left: int):
    if budget is None:
        return None
    return budget[0], total_left * n / n_left


def print_summary(rec: dict, say) -> None:
    """A sweep's outcome on the terminal: what it spent, then the pick as the report states it
    (dtune_report.tuning.verdict, a sentence a line) and the command to run it."""
    from dtune_report.redact import fill_in_note
    from dtune_report.tuning import verdict

    b, rungs = rec.get("budget"), ", ".join(f"{len(r['candidates'])} x {r['steps']} steps" for r in rec["rungs"])
    of = f" of {b['share']:.0f} {'s' if b['kind'] == 'seconds' else 'runs'}" if b else ""
    say(f"# {rec['sweep']}: {rec['spent_runs']} runs, {rec.get('spent_seconds', 0):.0f} s{of} (rungs: {rungs})")
    if not rec.get("winner"):
        say(f"  {rec.get('no_pick') or NOTHING_MEASURED}")
        return
    lines = ["".join(p if isinstance(p, str) else p[1] for p in sentence).strip() for sentence in verdict(rec)]
    if rec.get("spent_split"):
        sp = rec["spent_split"]
        lines.append(
            f"cost: {rec['spent_seconds']:.0f} s, {rec['spent_steps']} steps (start-up {sp['startup_s']:.0f} s, "
            f"steps {sp['steps_s']:.0f} s by the cost model)"
        )
    rc = rec["recommendation"]
    lines += [f"flags: {rc['flags'] or '(the fixed arguments)'}", f"command: {rc['command']}"]
    lines += ([fill_in_note(rc["fill_in"])] if rc.get("fill_in") else []) + rc["export"]
    lines += ["nccl_tuner.conf: written beside tune.json"] if rc.get("nccl_tuner_conf") else []
    for line in lines:
        say(f"  {line}")


def tune(a, points: list[Point], directory: Path, say=print) -> int:
    """The `dtune tune` command over planned points; exit status."""
    check_seed(a.seed)
    budget = parse_budget(a.budget)
    by_sweep: dict[str, list[Point]] = {}
    repeats: dict[str, int] = {}
    for p in points:
        repeats[p.sweep] = max(repeats.get(p.sweep, 1), p.repeat + 1)
        if p.repeat == 0:
            by_sweep.setdefault(p.sweep, []).append(p)
    if a.sweep:
        missing = [s for s in a.sweep if s not in by_sweep]
        if missing:
            raise TuneError(f"--sweep {missing[0]}: no such sweep in {a.file} (sweeps: {', '.join(by_sweep)})")
        by_sweep = {k: v for k, v in by_sweep.items() if k in a.sweep}
    objectives = {}
    for name, pts in by_sweep.items():
        binary = pts[0].binary
        if binary not in DEFAULT:
            raise TuneError(
                f"sweep '{name}': {binary} sweeps are not tuned (dtune tune tunes dtune-train and dtune-comm); "
                f"leave it out with --sweep"
            )
        obj = a.objective if a.objective and OBJECTIVES[a.objective][0] == binary else DEFAULT[binary]
        if a.objective and all(OBJECTIVES[a.objective][0] != p[0].binary for p in by_sweep.values()):
            raise TuneError(
                f"--objective {a.objective} is measured by {OBJECTIVES[a.objective][0]}, and no sweep of "
                f"{a.file} runs it"
            )
        if a.objective and obj != a.objective:  # a mixed file: said, never silently replaced
            say(
                f"# tune: sweep '{name}' runs {binary}: tuned for {obj} (--objective {a.objective} is "
                f"measured by {OBJECTIVES[a.objective][0]} alone)"
            )
        objectives[name] = obj
    for name, pts in by_sweep.items():
        if objectives[name] == "mfu":
            _refuse_mfu_without_peak(name, pts)
    if budget is not None:
        for name, pts in by_sweep.items():
            share = budget[1] * len(pts) / sum(map(len, by_sweep.values()))
            s_max = steps_of(pts[0])
            need = min(2, len(pts)) * (1 if budget[0] == "runs" else MIN_RUN_S)
            if share < need:
                raise TuneError(
                    f"--budget {a.budget} cannot run one rung: sweep '{name}' gets {share:g} "
                    f"{'runs' if budget[0] == 'runs' else 's'} of it, and its smallest rung is "
                    f"{min(2, len(pts))} runs of {s_max} steps"
                    + (f" (at least {MIN_RUN_S:g} s each)" if budget[0] == "seconds" else "")
                    + f"; give at least {need * sum(map(len, by_sweep.values())) / len(pts):g}"
                    + ("" if budget[0] == "runs" else " s")
                )
    runs = Runs(directory, a.timeout, _slurm_opts(a), runner.MpirunHosts(a.hostfile, a.mpirun_tune))
    # The directory's one runner for the whole tune, taken before anything is written in it (the
    # manifest, tune.json): a refused tune leaves a running one's files alone.
    with runner.RunnerLock(runner.State(directory).path):
        return _tune_locked(a, by_sweep, objectives, budget, runs, directory, say, repeats)


def _refuse_mfu_without_peak(name: str, pts: list[Point]) -> None:
    """--objective mfu where a run can know no peak (the CPU, without --peak-tflops or --peak-from):
    refused before the first rung instead of failing after it."""
    for p in pts:
        opts = {k: v for k, v in zip(p.args, p.args[1:])}
        env = {k.removeprefix("DTUNE_TRAIN_").lower().replace("_", "-"): v for k, v in p.env.items()}
        device = opts.get("--device", env.get("device", "cpu"))
        peak = any(f in p.args for f in ("--peak-tflops", "--peak-from")) or {"peak-tflops", "peak-from"} & set(env)
        if device == "cpu" and not peak:
            raise TuneError(
                f"--objective mfu: sweep '{name}' trains on the CPU (point {p.id}) without --peak-tflops or "
                f"--peak-from, so no run knows its peak and none can report MFU: add one of them to args, or "
                f"tune for samples_per_s"
            )


def _tune_locked(a, by_sweep, objectives, budget, runs, directory, say, repeats) -> int:
    min_steps = a.min_steps
    runs.wait_jobs()
    records = []
    left = budget[1] if budget else None
    n_left = sum(map(len, by_sweep.values()))
    try:
        for name, pts in by_sweep.items():
            share = _share(budget, left, len(pts), n_left) if budget else None
            rec = tune_sweep(name, pts, runs, objectives[name], share, a.seed, a.alpha, min_steps, say, repeats[name])
            records.append(rec)
            if budget:
                left -= rec["spent"]
                n_left -= len(pts)
            _write(directory, records, a, budget)
    except KeyboardInterrupt:
        say("# tune: interrupted; rerun the same command to resume (finished runs are kept)")
        return 130
    except ObjectiveError as e:
        raise TuneError(str(e)) from None
    for rec in records:
        print_summary(rec, say)
        conf = (rec.get("recommendation") or {}).get("nccl_tuner_conf")
        if conf:
            (directory / f"nccl_tuner-{rec['sweep']}.conf").write_text(conf)
    _write(directory, records, a, budget)
    _merge_and_report(directory, say, not a.no_report)
    return 0 if all(r.get("winner") for r in records) else 1


def _slurm_opts(a):
    if not getattr(a, "slurm", False):
        return None
    return {
        "sbatch": a.sbatch,
        "throttle": a.throttle,
        "per_task": a.points_per_task,
        "launcher": a.launcher,
        "mpirun_tune": a.mpirun_tune,  # checked by the command (slurm.mpirun_tune)
    }


def _write(directory: Path, records: list, a, budget) -> None:
    doc = {
        "file": str(a.file),
        "method": a.method,
        "seed": a.seed,
        "budget": {"kind": budget[0], "amount": budget[1], "text": a.budget} if budget else None,
        "sweeps": records,
    }
    tmp = directory / "tune.json.partial"
    # Strict JSON (RFC 8259 has no NaN or Infinity; jq and JavaScript readers refuse them): a
    # figure that is not finite is written as null.
    tmp.write_text(json.dumps(_plain(doc), indent=1, allow_nan=False))
    tmp.replace(directory / "tune.json")


def _plain(x):
    """`x` with numpy scalars as Python ones and every non-finite float as None."""
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, (np.floating, np.integer, np.bool_)):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _merge_and_report(directory: Path, say, report: bool) -> None:
    from . import merge

    n = merge.merge(directory, directory / "merged.h5")
    say(f"# tune: {directory / 'tune.json'}; merged {n} runs into {directory / 'merged.h5'}")
    if n == 0 or not report:
        return
    from dtune_report.report import build_report

    try:
        r = build_report([directory / "merged.h5"], directory / "report")
        say(f"# report: {r['dir'] / 'report.html'} (section 'How the budget was spent')")
    except (OSError, ValueError) as e:
        say(f"# tune: no report ({str(e).splitlines()[0]})")
