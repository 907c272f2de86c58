"""`dtune tune` against a known optimum on a drifting machine, run live (nothing replayed).

    benchmarks/tune_research/synthetic_live.py [--seeds 10] [--first-seed 1] [--budget-frac 0.3] [--space 48|quickstart]
                                      [--startup-ms 0] [--out DIR]
    benchmarks/tune_research/synthetic_live.py --grid-only [--seeds 10] [--first-seed 1] [--space 48|quickstart]

The synthetic trainer (tests/sweeps/fake_train.py, installed as dtune-train) with its seeded drift
(--drift SEED: 5-20% step noise, slow periods of x1.3-1.8 on the launch clock) and steps long
enough that step time dominates a run (--sleep-ms 40, 64 steps: ~2.6 s of steps against ~0.3 s of start-up). Its
optimum is --x 3 --z 0 (--y has no effect, so every --y of it is the optimum too); --x 2 and 4 are
5% slower, --z 1 10%. First the whole grid once (`dtune sweep run`, one run per point at full length,
drift seed 1): its run time and steps are the cost a tune is measured against. Then per seed
`dtune tune --budget` (that fraction of the grid's run time) in a fresh directory with drift seed =
seed and --seed seed. Prints one row per seed and a
total: the pick, its true ratio to the optimum, whether it is within 3%, whether the tune called its
margin significant (and whether that was wrong), and the cost in run time and steps.

--grid-only: the yardstick a tune's hit rate is read against: the whole grid once per drift seed
(cost 1.00), each sweep's best figure named, as `dtune sweep run` and a report would.

--startup-ms MS: every run sleeps MS more before its steps (fake_train.py --startup-ms), to put the
tune where start-up weighs more (this machine's own start-up, 0.25-0.7 s a run, varies by the hour).

--first-seed F: seeds F..F+SEEDS-1, to split the seeds over processes run side by side (the tune
mode with an --out each: each process runs its own grid).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "tests" / "sweeps")]

from fake_train_bin import install_fake_train  # noqa: E402

ARGS = "[--warmup-steps, 1, --sleep-ms, 40, --drift, {seed}, --slow-period-ms, 4000{extra}]"
STARTUP_MS = 0  # --startup-ms: a start-up added to every run
STEPS = 64
SPACES = {
    "48": "name: s48\nbinary: dtune-train\nargs: {args}\nsteps: {steps}\n"
    "axes: {{--x: [0, 1, 2, 3, 4, 5], --z: [0, 1], --y: [a, b, c, d]}}\n",
    # Candidates of very different cost, as the quickstart's train-resnet on a CPU (bf16 12 times
    # dearer a step than fp32): a tune must price each candidate by its own runs.
    "mixed": "sweeps:\n"
    "  - {{name: m4, binary: dtune-train, args: {args}, steps: {steps},\n"
    "      axes: {{--x: [2, 3], --precision: [fp32, bf16]}}}}\n"
    "  - {{name: m6, binary: dtune-train, args: {args}, steps: {steps},\n"
    "      axes: {{--x: [1, 2, 3], --precision: [fp32, bf16]}}}}\n",
    "quickstart": "sweeps:\n"
    "  - {{name: q4, binary: dtune-train, args: {args}, steps: {steps}, axes: {{--x: [2, 3], --z: [0, 1]}}}}\n"
    "  - {{name: q3, binary: dtune-train, args: {args}, steps: {steps}, axes: {{--x: [1, 3, 5]}}}}\n"
    "  - {{name: q2, binary: dtune-train, args: {args}, steps: {steps}, axes: {{--z: [0, 1]}}}}\n"
    "  - {{name: q3b, binary: dtune-train, args: {args}, steps: {steps}, axes: {{--x: [3, 4, 5]}}}}\n",
}


def true_ratio(values: dict) -> float:
    """The step time of a configuration over the optimum's (fake_train.py's formula)."""
    x, z = float(values.get("--x", 3)), int(values.get("--z", 0))
    slow = 12 if values.get("--precision") == "bf16" else 1
    return (1 + 0.05 * (x - 3) ** 2) * (1 + 0.1 * (z == 1)) * slow


def run(cmd, env) -> subprocess.CompletedProcess:
    return subprocess.run([str(REPO / "scripts" / "dtune"), *map(str, cmd)], capture_output=True, text=True, env=env)


def grid_cost(d: Path) -> tuple[float, int]:
    recs = [json.loads(x) for x in (d / "state.jsonl").read_text().splitlines() if x.strip()]
    secs = sum(float(r.get("seconds") or 0) for r in recs if r["event"] == "finished")
    man = json.loads((d / "manifest.json").read_text())
    return secs, STEPS * len(man)


def setup(d: Path, space: str, seed: int) -> tuple[Path, dict]:
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    fake = {"DTUNE_BIN_DIR": str(install_fake_train(d)), "DTUNE_MPIRUN": str(REPO / "tests/sweeps/fake_mpirun.sh")}
    f = d / "space.yaml"
    extra = f", --startup-ms, {STARTUP_MS:g}" if STARTUP_MS else ""
    f.write_text(SPACES[space].format(args=ARGS.format(seed=seed, extra=extra), steps=STEPS))
    return f, {**os.environ, **fake}


def grid(space: str, out: Path, seed: int = 1, name: str = "grid") -> tuple[float, int]:
    """The whole grid once (drift seed `seed`): its run time and steps."""
    f, env = setup(out / name, space, seed)
    g = run(["sweep", "run", f, "--out", out / name / "runs"], env)
    if g.returncode != 0:
        raise SystemExit(g.stdout + g.stderr)
    return grid_cost(out / name / "runs")


def grid_picks(d: Path) -> list[dict]:
    """What the grid itself names per sweep: the point with the best figure (the median of its
    samples/s, as `dtune report` ranks a sweep's runs), one run of each at full length."""
    sys.path[:0] = [str(REPO / "sweeps"), str(REPO / "report")]
    from dtune_sweep.objective import samples

    man = json.loads((d / "manifest.json").read_text())
    best: dict = {}
    for p in man:
        x = samples(d / "points" / f"{p['id']}.h5", "samples_per_s")
        if not len(x):
            continue
        f = float(np.median(x))
        if p["sweep"] not in best or f > best[p["sweep"]][0]:
            best[p["sweep"]] = (f, p["values"])
    return [{"sweep": k, "values": v[1], "ratio": true_ratio(v[1])} for k, v in best.items()]


def grid_baseline(space: str, seeds: range, out: Path) -> int:
    """The grid's own hit rate at its full cost: the whole grid once per drift seed, its best named."""
    rows = []
    for seed in seeds:
        grid(space, out, seed, f"grid-seed{seed}")
        for r in grid_picks(out / f"grid-seed{seed}" / "runs"):
            label = " ".join(f"{k} {v}" for k, v in r["values"].items() if k.startswith("--"))
            print(f"{seed:>4} {r['sweep']:<6} {label:<22} {r['ratio']:6.3f} {int(r['ratio'] <= 1.03):>4}", flush=True)
            rows.append(r)
    by = {}
    for r in rows:
        by.setdefault(r["sweep"], []).append(r["ratio"] <= 1.03)
    per = ", ".join(f"{k} {sum(v)}" for k, v in by.items())
    hits = [h for v in by.values() for h in v]
    print(f"# the grid itself (cost 1.00), space {space}: within 3% of the optimum {sum(hits)}/{len(hits)} ({per})")
    return 0


def one_seed(space: str, seed: int, grid_s: float, grid_steps: int, frac: float, out: Path, method: str) -> list:
    d = out / f"{method}-seed{seed}"
    f, env = setup(d, space, seed)
    budget = f"{frac * grid_s:.1f}s"
    t = run(
        ["tune", f, "--out", d / "tune", "--budget", budget, "--seed", seed, "--method", method, "--no-report"], env
    )
    if t.returncode not in (0, 1):  # 1: a sweep without a pick (its budget ran out): a miss
        raise SystemExit(t.stdout + t.stderr)
    rows = []
    sweeps = json.loads((d / "tune" / "tune.json").read_text())["sweeps"]
    spent_s = sum(r["spent_seconds"] for r in sweeps)
    spent_steps = sum(r.get("spent_steps", 0) for r in sweeps)
    for r in sweeps:
        w = r.get("winner") or {}
        ratio = true_ratio(w.get("values", {})) if w else float("nan")
        m = r.get("margin") or {}
        rows.append(
            {
                "seed": seed,
                "sweep": r["sweep"],
                "pick": w.get("label"),
                "ratio": ratio,
                "hit": ratio <= 1.03,
                "significant": bool(m.get("significant")),
                "wrong_significant": bool(m.get("significant")) and ratio > 1.03,
                "tied": len(r.get("tied") or []),
                "cost_s": spent_s / grid_s,
                "cost_steps": spent_steps / grid_steps,
            }
        )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--first-seed", type=int, default=1, help="seeds FIRST..FIRST+SEEDS-1 (to split them)")
    ap.add_argument("--budget-frac", type=float, default=0.3)
    ap.add_argument("--space", choices=list(SPACES), default="48")
    ap.add_argument("--method", choices=["halving"], default="halving")  # optuna: removed 2026-12 (README.md)
    ap.add_argument("--out", default=None)
    ap.add_argument("--startup-ms", type=float, default=0, help="a start-up every run sleeps (fake_train.py)")
    ap.add_argument("--grid-only", action="store_true", help="the grid's own picks, one whole grid per seed")
    a = ap.parse_args()
    global STARTUP_MS
    STARTUP_MS = a.startup_ms
    out = Path(a.out or f"results/bench-tune/live-{a.space}")
    seeds = range(a.first_seed, a.first_seed + a.seeds)
    if a.grid_only:
        return grid_baseline(a.space, seeds, out)
    grid_s, grid_steps = grid(a.space, out)
    print(f"# grid: {grid_s:.1f} s of run time, {grid_steps} steps; budget {a.budget_frac:.0%} of the run time")
    print(
        f"{'seed':>4} {'sweep':<6} {'pick':<22} {'ratio':>6} {'hit':>4} {'sig':>4} {'tied':>4} "
        f"{'cost_s':>7} {'cost_steps':>10}"
    )
    rows = []
    for seed in seeds:
        for r in one_seed(a.space, seed, grid_s, grid_steps, a.budget_frac, out, a.method):
            rows.append(r)
            print(
                f"{r['seed']:>4} {r['sweep']:<6} {str(r['pick']):<22} {r['ratio']:6.3f} {int(r['hit']):>4} "
                f"{int(r['significant']):>4} {r['tied']:>4} {r['cost_s']:7.2f} {r['cost_steps']:10.2f}",
                flush=True,
            )
    hits = sum(r["hit"] for r in rows)
    by: dict = {}
    for r in rows:
        by.setdefault(r["sweep"], []).append(r["hit"])
    wrong = sum(r["wrong_significant"] for r in rows)
    per_seed = {r["seed"]: (r["cost_s"], r["cost_steps"]) for r in rows}
    cs = sum(c for c, _ in per_seed.values()) / len(per_seed)
    cst = sum(c for _, c in per_seed.values()) / len(per_seed)
    print(
        f"# {a.method}, space {a.space}: within 3% of the optimum {hits}/{len(rows)} "
        f"({', '.join(f'{k} {sum(v)}' for k, v in by.items())}), "
        f"wrong winner called significant {wrong}, "
        f"mean cost {cs:.2f} of the grid's run time, {cst:.2f} of its steps"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
