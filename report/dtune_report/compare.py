"""A/B comparison of two sets of dtune results, as benchstat (golang.org/x/perf) prints it: for
every configuration in both, the medians, the change in %, the two-sided Mann-Whitney U p-value
with the sample counts, and a 95% bootstrap interval of the ratio of medians; `~` where the change
is not significant (p >= alpha: the test alone decides, the interval is shown beside it); a
geometric-mean row; the configurations found on one side only; and a regression gate.

Rows: one per configuration, matched on everything that defines a run (identity.py), so two
configurations are never pooled. Samples, one per event: dtune-comm, each timed iteration's time
of its slowest rank (the iteration is over when the last rank finishes); dtune-train, each
measured step's total of its slowest rank, leaving out warm-up steps and steps inside a
--profile-steps window. Repeated runs of one configuration pool their samples.

A run whose status is not "ok" (failed, diverged, timed out, interrupted, out of memory, wrong
elements, still running) is compared with what it measured and named under the table; a
non-finite sample (NaN, inf) is left out, and a configuration left with no sample on a side is
named, never given a p-value. The gate (`gate_failures`) fails on both.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .identity import MESH_FIELDS, run_identity
from .loader import load_comm, load_runs, load_train
from .mesh import fields_mesh, mesh_text

# Row fields named first in a label, by benchmark (the rest of the identity follows where it varies).
_BASE = {"comm": ["collective", "dtype", "op", "placement", "size"], "train": ["model", "precision", "batch"]}
_UNIT = {"comm": "us", "train": "ms"}


@dataclass
class Row:
    config: str
    unit: str
    median_a: float
    median_b: float
    ratio: float  # median_b / median_a (time: > 1 is slower)
    ci_low: float
    ci_high: float
    p_value: float
    significant: bool
    n_a: int = 0
    n_b: int = 0
    short: bool = False  # a side ran too short to trust (configs.Config.short): never significant


@functools.lru_cache(maxsize=None)
def _u_cdf(n1: int, n2: int) -> np.ndarray:
    """P(U <= u) for u = 0..n1*n2 under the null hypothesis, no ties: counts of arrangements by
    c(u; m, n) = c(u - n; m - 1, n) + c(u; m, n - 1) (the largest value comes from the first
    sample and exceeds all n of the second, or from the second)."""
    c = [[None] * (n2 + 1) for _ in range(n1 + 1)]
    for m in range(n1 + 1):
        for n in range(n2 + 1):
            if m == 0 or n == 0:
                c[m][n] = np.ones(1)
                continue
            v = np.zeros(m * n + 1)
            v[n : n + len(c[m - 1][n])] += c[m - 1][n]
            v[: len(c[m][n - 1])] += c[m][n - 1]
            c[m][n] = v
    counts = c[n1][n2]
    return np.cumsum(counts) / counts.sum()


def mann_whitney_p(a, b) -> float:
    """Two-sided Mann-Whitney U test as benchstat runs it (go-moremath stats.MannWhitneyUTest):
    the exact U distribution for samples of up to 50 without ties, else the normal approximation
    with tie and continuity corrections (benchstat also goes exact for ties up to 25; that case
    takes the approximation here, as scipy's mannwhitneyu does). All values equal: p = 1. NaN
    when a side is empty or holds a non-finite value (no rank order to test)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0 or not (np.isfinite(a).all() and np.isfinite(b).all()):
        return float("nan")
    both = np.concatenate([a, b])
    values, inverse, counts = np.unique(both, return_inverse=True, return_counts=True)
    if len(values) == 1:
        return 1.0
    midrank = np.cumsum(counts) - (counts - 1) / 2  # rank 1 is the smallest
    u1 = midrank[inverse[:n1]].sum() - n1 * (n1 + 1) / 2
    u2 = n1 * n2 - u1
    if (counts == 1).all() and n1 <= 50 and n2 <= 50:
        return 1.0 if u1 == u2 else float(min(1.0, 2 * _u_cdf(n1, n2)[int(min(u1, u2))]))
    n = n1 + n2
    tie = (counts**3 - counts).sum() / (n * (n - 1))
    sigma = math.sqrt(n1 * n2 / 12 * ((n + 1) - tie))
    z = max(abs(u1 - n1 * n2 / 2) - 0.5, 0) / sigma
    return float(min(1.0, math.erfc(z / math.sqrt(2))))


def samples_needed(alpha: float) -> int:
    """The smallest n for which two samples of n can reach p < alpha (fully separated samples:
    p = 2 / C(2n, n)); benchstat's uTestSamples."""
    n = 1
    while 2 / math.comb(2 * n, n) >= alpha:
        n += 1
    return n


def _bootstrap_medians(rng, x: np.ndarray, resamples: int) -> np.ndarray:
    """Medians of `resamples` resamples of x with replacement (one row of draws per resample)."""
    return np.median(rng.choice(x, (resamples, len(x))), axis=1)


def bootstrap_ratio_ci(a, b, resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of median(b) / median(a), deterministic for `seed`."""
    rng = np.random.default_rng(seed)
    ma = _bootstrap_medians(rng, np.asarray(a, float), resamples)
    mb = _bootstrap_medians(rng, np.asarray(b, float), resamples)
    r = mb / ma
    return float(np.percentile(r, 2.5)), float(np.percentile(r, 97.5))


def bootstrap_median_ci(x, resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of median(x), by the same resampling as the ratio's."""
    m = _bootstrap_medians(np.random.default_rng(seed), np.asarray(x, float), resamples)
    return float(np.percentile(m, 2.5)), float(np.percentile(m, 97.5))


def compare_samples(groups_a: dict, groups_b: dict, unit: str, alpha: float = 0.05, label=str) -> list[Row]:
    """Groups map a configuration key (sortable) to its samples; `label` names a key. Non-finite
    samples are left out (n counts the rest); a side left empty gives NaN figures. A row is
    significant exactly when the U test's p < alpha."""
    rows = []
    for key in sorted(set(groups_a) & set(groups_b)):
        a, b = finite(groups_a[key]), finite(groups_b[key])
        if len(a) == 0 or len(b) == 0:
            nan = float("nan")
            rows.append(Row(label(key), unit, nan, nan, nan, nan, nan, nan, False, len(a), len(b)))
            continue
        ma, mb = float(np.median(a)), float(np.median(b))
        lo, hi = bootstrap_ratio_ci(a, b)
        p = mann_whitney_p(a, b)
        rows.append(Row(label(key), unit, ma, mb, mb / ma, lo, hi, p, bool(p < alpha), len(a), len(b)))
    return rows


def finite(x) -> np.ndarray:
    """The finite values of x, as float."""
    x = np.asarray(x, float)
    return x[np.isfinite(x)]


def _identities(runs: pd.DataFrame, by_point: bool) -> dict:
    return {(r.file, r.run): run_identity(r._asdict(), by_point) for r in runs.itertuples(index=False)}


def comm_iteration_samples(paths) -> pd.DataFrame:
    """One sample per timed iteration: columns file, run, placement, size_bytes, iteration, time_us
    (the slowest rank's time); an iteration that some rank did not run (NaN) is left out."""
    df = load_comm(paths)
    cols = ["file", "run", "placement", "size_bytes", "iteration", "time_us"]
    if df.empty:
        return pd.DataFrame(columns=cols)
    ranks = df.groupby(["file", "run"])["rank"].nunique().rename("ranks")
    it = df.groupby(["file", "run", "placement", "size_bytes", "iteration"]).time_us.agg(["max", "count"])
    it = it.reset_index().merge(ranks.reset_index(), on=["file", "run"])
    it = it[it["count"] == it["ranks"]]
    return it.rename(columns={"max": "time_us"})[cols]


def _comm_samples(paths, ident: dict) -> dict:
    """{(identity, placement, size): per-iteration slowest-rank times} of the runs in `ident`."""
    out = {}
    for (f, run, placement, size), g in comm_iteration_samples(paths).groupby(
        ["file", "run", "placement", "size_bytes"]
    ):
        if (f, run) not in ident:
            continue
        fields = {**ident[(f, run)], "placement": placement, "size": str(size)}
        out.setdefault(("comm", _key(fields)), []).extend(g["time_us"].tolist())
    return out


def train_step_samples(paths) -> pd.DataFrame:
    """One sample per measured step: columns file, run, step, total_ms (the slowest rank's total),
    warm-up steps and steps inside a --profile-steps window left out."""
    df = load_train(paths)
    if df.empty:
        return pd.DataFrame(columns=["file", "run", "step", "total_ms"])
    df = df[~df.warmup & ~df.profiled]
    return df.groupby(["file", "run", "step"]).total_ms.max().reset_index()


def _train_samples(paths, ident: dict) -> dict:
    """{identity: per-step slowest-rank totals} over measured steps outside a profiling window, of
    the runs in `ident`."""
    out = {}
    for (f, run), g in train_step_samples(paths).groupby(["file", "run"]):
        if (f, run) not in ident:
            continue
        out.setdefault(("train", _key(ident[(f, run)])), []).extend(g.total_ms.tolist())
    return out


def _key(fields: dict) -> tuple:
    return tuple(sorted(fields.items()))


def _sort_value(v: str):
    try:
        return (0, float(v), "")
    except ValueError:
        return (1, 0.0, v)


def _labeller(keys) -> tuple:
    """(label, sort key) functions for (benchmark, identity) keys: the benchmark's base fields,
    then `name=value` for every other field whose value differs among `keys`."""
    values = {}
    for kind, fields in keys:
        for name, v in fields:
            values.setdefault((kind, name), set()).add(v)
    for kind, fields in keys:  # a field one key lacks varies too
        names = {n for n, _ in fields}
        for (k, name), vs in values.items():
            if k == kind and name not in names:
                vs.add(None)

    def parts(key):
        kind, fields = key
        d = dict(fields)
        base = [d.get(n, "-") for n in _BASE[kind]]
        extra = [
            f"{n}={d.get(n, '-')}"
            for (k, n) in sorted(values)
            if k == kind and n not in _BASE[kind] and len(values[(k, n)]) > 1
        ]
        mesh = [x for x in extra if x.split("=")[0] in MESH_FIELDS]  # shown as one: mesh=dp2×pp2 (tp,pp,dp)
        if mesh:
            extra[extra.index(mesh[0])] = f"mesh={mesh_text(fields_mesh(d))}"
            extra = [x for x in extra if x not in mesh]
        return kind, base, extra

    def label(key):
        kind, base, extra = parts(key)
        if kind == "comm":
            base[-1] += " B"
        else:
            base[-1] = f"batch {base[-1]}"
        return " ".join(base + extra)

    def sort_key(key):
        kind, base, extra = parts(key)
        return (list(_BASE).index(kind), [_sort_value(v) for v in base], extra)

    return label, sort_key


@dataclass
class NotOk:
    """A run that did not end "ok"."""

    side: str  # "A" or "B"
    file: str
    run: str
    status: str
    message: str
    identity: tuple  # its identity key (_key), to tell whether the other side failed alike

    def __str__(self) -> str:
        why = f": {' '.join(self.message.split())[:200]}" if self.message else ""
        return f"{self.side}: {self.file} {self.run}: status {self.status}{why}"


@dataclass
class Comparison:
    rows: list
    only_a: list  # labels of configurations in A alone
    only_b: list
    alpha: float
    not_ok: list = field(default_factory=list)  # NotOk: runs that did not end ok (still compared)
    no_samples: list = field(default_factory=list)  # "label: no finite sample in B", left out
    non_finite: list = field(default_factory=list)  # "label: k of n samples in A not finite", left out


# Run kinds whose samples compare.py reads.
_SAMPLED = ("comm", "train")


def _status(attrs: dict) -> str:
    """A run's status; a run written before groups carried one ran to its end: "ok"."""
    s = attrs.get("status")
    return "ok" if s is None else str(s)


def _not_ok(runs: pd.DataFrame, ident: dict, side: str) -> list:
    """[NotOk] of the compared benchmarks' runs whose status is not "ok"."""
    bad = []
    for r in runs.itertuples(index=False):
        status = _status(r.attrs)
        if r.benchmark in _SAMPLED and status != "ok":
            message = str(r.attrs.get("message", "") or "")
            bad.append(NotOk(side, r.file, r.run, status, message, (r.benchmark, _key(ident[(r.file, r.run)]))))
    return bad


def _finite_groups(groups: dict, side: str, label) -> tuple:
    """(groups with their non-finite samples left out, notes naming what was left out)."""
    out, notes = {}, []
    for k, v in groups.items():
        x = finite(v)
        if len(x) < len(v):
            notes.append(f"{label(k)}: {len(v) - len(x)} of {len(v)} samples in {side} not finite")
        out[k] = x
    return out, notes


def compare_results(a, b, alpha: float = 0.05) -> Comparison:
    runs_a, runs_b = load_runs(a), load_runs(b)
    by_point = len(runs_a) > 0 and len(runs_b) > 0 and runs_a.point.notna().all() and runs_b.point.notna().all()
    ia, ib = _identities(runs_a, by_point), _identities(runs_b, by_point)
    bad_a, bad_b = _not_ok(runs_a, ia, "A"), _not_ok(runs_b, ib, "B")
    ga = {**_comm_samples(a, ia), **_train_samples(a, ia)}
    gb = {**_comm_samples(b, ib), **_train_samples(b, ib)}
    label, sort_key = _labeller(set(ga) | set(gb))
    ga, notes_a = _finite_groups(ga, "A", label)
    gb, notes_b = _finite_groups(gb, "B", label)
    rows, empty = [], []
    for key in sorted(set(ga) & set(gb), key=sort_key):
        sides = [s for s, g in (("A", ga), ("B", gb)) if len(g[key]) == 0]
        if sides:
            empty.append(f"{label(key)}: no finite sample in {' and '.join(sides)}")
            continue
        rows += compare_samples({key: ga[key]}, {key: gb[key]}, _UNIT[key[0]], alpha, label)
    only = lambda g, h: [label(k) for k in sorted(set(g) - set(h), key=sort_key)]  # noqa: E731
    return Comparison(rows, only(ga, gb), only(gb, ga), alpha, bad_a + bad_b, empty, notes_a + notes_b)


def geomean_ratio(rows: list[Row]) -> float:
    return float(np.exp(np.mean([np.log(r.ratio) for r in rows]))) if rows else float("nan")


def format_table(rows: list[Row], only_a=(), only_b=(), alpha: float = 0.05, not_ok=(), left_out=()) -> str:
    """The table, then `#` lines (so `grep -v '^#'` leaves the table): configurations on one side
    only, runs that did not end ok (`not_ok`: lines), non-finite samples left out (`left_out`:
    lines), and rows with too few samples to ever reach p < alpha (benchstat's warning). A
    p-value that is not finite prints as `-`."""
    width = max([len(r.config) for r in rows] + [len("geomean")])
    lines = [
        f"{'config':<{width}}  {'A median':>12}  {'B median':>12}  {'delta':>8}  "
        f"{'p':>6}  {'n':>9}  {'95% CI of B/A':>17}"
    ]
    for r in rows:
        delta = f"{(r.ratio - 1) * 100:+.1f}%" if r.significant else "~"
        lines.append(
            f"{r.config:<{width}}  {r.median_a:10.3f}{r.unit:>2}  {r.median_b:10.3f}{r.unit:>2}  "
            f"{delta:>8}  {_p_text(r.p_value):>6}  {f'{r.n_a}+{r.n_b}':>9}  "
            f"[{r.ci_low:6.3f}, {r.ci_high:6.3f}]"
        )
    g = geomean_ratio(rows)
    lines.append(f"{'geomean':<{width}}  {'':>12}  {'':>12}  {(g - 1) * 100:+7.1f}%")
    for side, labels in (("A", only_a), ("B", only_b)):
        if labels:
            lines.append(f"# only in {side} ({len(labels)}, not compared):")
            lines += [f"#   {lab}" for lab in labels]
    if not_ok:
        lines.append(f"# did not end ok ({len(not_ok)}; compared with what they measured, no gate passes them):")
        lines += [f"#   {line}" for line in not_ok]
    if left_out:
        lines.append(f"# left out, not finite ({len(left_out)}):")
        lines += [f"#   {line}" for line in left_out]
    need = samples_needed(alpha)
    few = [r for r in rows if not r.significant and r.n_a < need and r.n_b < need]
    if few:
        lines.append(f"# need >= {need} samples to detect a difference at alpha level {alpha:g}:")
        lines += [f"#   {r.config} (n={r.n_a}+{r.n_b})" for r in few]
    return "\n".join(lines)


def _p_text(p: float) -> str:
    return f"{p:6.3f}" if np.isfinite(p) else "-"


def table_of(c: Comparison) -> str:
    """format_table of a Comparison, with its runs not ok and its non-finite samples."""
    return format_table(c.rows, c.only_a, c.only_b, c.alpha, [str(r) for r in c.not_ok], c.no_samples + c.non_finite)


def regressions(rows: list[Row], pct: float) -> list[Row]:
    """Significant slowdowns (time up) by more than `pct` percent."""
    return [r for r in rows if r.significant and (r.ratio - 1) * 100 > pct]


def nothing_compared(c: Comparison) -> str:
    """Why no row was compared, in one line."""
    why = f"no configuration appears in both A and B ({len(c.only_a)} in A alone, {len(c.only_b)} in B alone"
    bad = c.not_ok[:3]
    if bad:
        more = f" and {len(c.not_ok) - 3} more" if len(c.not_ok) > 3 else ""
        return why + f"; did not end ok: {'; '.join(map(str, bad))}{more})"
    if c.no_samples:
        return why + f"; {'; '.join(c.no_samples[:3])})"
    return why + ": runs match only when every setting agrees)"


def gate_failures(c: Comparison, pct: float) -> list[str]:
    """Why `--fail-on-regression PCT` fails, one line each; [] when it passes. It fails on a
    significant slowdown beyond PCT, and whenever what it judges is not a valid measurement: a run
    of either side that did not end ok (B out of memory counts only where A's same configuration
    did not run out of memory too), a configuration in both with no finite sample on a side, or no
    configuration compared at all."""
    out = [f"regression: {r.config}: {(r.ratio - 1) * 100:+.1f}% (> {pct:g}%)" for r in regressions(c.rows, pct)]
    oom_a = {r.identity for r in c.not_ok if r.side == "A" and r.status == "oom"}
    for r in c.not_ok:
        if r.status == "oom" and (r.side == "A" or r.identity in oom_a):
            continue  # the same out-of-memory point on both sides, or one that fits in B now
        out.append(f"did not end ok, not a measurement to pass: {r}")
    out += [f"nothing valid to compare: {line}" for line in c.no_samples]
    out += [f"nothing valid to compare: {r.config}: no finite sample" for r in c.rows if not (r.n_a and r.n_b)]
    if not c.rows and not out:
        out.append(nothing_compared(c))
    return out
