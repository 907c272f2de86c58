"""Verdicts: per study (configs.py), the baseline the user runs today, the honest best, and one
finding stated against the baseline with its interval.

- Baseline: the configuration named by `--baseline` (a sweep point id, or the runs of a results
  file), else the one closest to the defaults (configs.DEFAULTS: fp32, 25 MiB buckets, dtune-train's
  own loader settings, no environment settings; batch as given: on a tie, the smallest batch).
- Best: the highest median throughput; a winner only when it beats the runner-up significantly,
  otherwise every configuration not significantly slower than it is listed as tied.
- Finding: the best against the baseline, as compare.py states a change (Mann-Whitney U decides,
  p < alpha; the 95% bootstrap interval of the ratio of medians says how large); "no change
  measurable here" when nothing beats the baseline significantly.
- Too short: a comparison in which either configuration ran too short to trust (configs.Config.short)
  is never significant, whatever p says; its verdict reads "too short to trust" (verdict_text).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .commands import changes
from .compare import Row, compare_samples
from .configs import DEFAULTS, Config, Study, steps_to_separate
from .identity import settings_env


def compare_to(base: Config, cand: Config, alpha: float) -> Row:
    """cand against base: ratio = median(cand) / median(base) of samples/s (> 1: cand faster);
    not significant when either ran too short to trust (row.short)."""
    (row,) = compare_samples({0: base.samples}, {0: cand.samples}, "samples/s", alpha)
    if base.short or cand.short:
        row.short, row.significant = True, False
    return row


def verdict_text(row: Row, significant: str = "significant", not_significant: str = "~") -> str:
    """A row's verdict in words: "too short to trust" for a short row (whatever p says), else the
    words given for a significant and a not significant one."""
    if row.short:
        return "too short to trust"
    return significant if row.significant else not_significant


def default_distance(c: Config) -> tuple:
    """(settings differing from DEFAULTS + environment settings, batch, identity) for sorting."""
    d = 0
    for k, v in DEFAULTS.items():
        if k in c.fields:
            try:
                d += float(c.fields[k]) != float(v)
            except ValueError:
                d += c.fields[k] != v
    d += len(settings_env({**c.env, **(c.point or {}).get("env", {})}))
    try:
        batch = float(c.fields.get("batch", 0))
    except ValueError:
        batch = 0.0
    return d, batch, sorted(c.fields.items())


def _named(c: Config, baseline: str | None) -> bool:
    """Whether `baseline` (a point id or id prefix, or a results file) names configuration c."""
    if not baseline:
        return False
    if Path(baseline).exists():
        return any(Path(f).resolve() == Path(baseline).resolve() for f, _ in c.runs)
    pid = (c.point or {}).get("id") or c.attrs.get("point_id") or ""
    return len(baseline) >= 4 and str(pid).startswith(baseline)


def choose_baseline(study: Study, baseline: str | None = None) -> tuple:
    """(baseline config, how it was chosen)."""
    named = [c for c in study.configs if _named(c, baseline)]
    if named:
        return named[0], "named by --baseline"
    return min(study.configs, key=default_distance), "closest to the defaults"


@dataclass
class Finding:
    study: Study
    baseline: Config
    how: str  # how the baseline was chosen
    best: list  # the winner, or the configurations tied for best
    row: Row | None  # best[0] against the baseline (None: the baseline is among the best)
    rows: dict = field(default_factory=dict)  # id(config) -> Row against the baseline
    changes: list = field(default_factory=list)  # what to change, shell-quoted
    steps_needed: int | None = None  # per configuration, to separate a tie at the top

    @property
    def gain(self) -> float:
        return self.row.ratio - 1 if self.row is not None and self.improves else 0.0

    @property
    def improves(self) -> bool:
        return self.row is not None and self.row.significant and self.row.ratio > 1


def decide(study: Study, baseline: str | None = None, alpha: float = 0.05) -> Finding:
    base, how = choose_baseline(study, baseline)
    ranked = sorted(study.configs, key=lambda c: -c.median)
    top = ranked[0]
    if len(ranked) > 1 and compare_to(ranked[1], top, alpha).significant:
        best = [top]
    else:
        best = [c for c in ranked if c is top or not compare_to(c, top, alpha).significant]
    rows = {id(c): compare_to(base, c, alpha) for c in study.configs if c is not base}
    f = Finding(study, base, how, best, None if base in best else rows[id(top)], rows)
    if f.improves:
        f.changes = changes(base, top)
    if len(best) > 1:
        f.steps_needed = steps_to_separate(best[0], best[1])
    return f


def decide_all(studies: list, baseline: str | None = None, alpha: float = 0.05) -> list:
    """Findings for every study with at least two configurations, largest gain first."""
    found = [decide(s, baseline, alpha) for s in studies if len(s.configs) > 1]
    if baseline and not any(_named(c, baseline) for s in studies for c in s.configs):
        raise ValueError(f"--baseline {baseline}: no measured dtune-train configuration has this point id or file")
    return sorted(found, key=lambda f: (-f.gain, f.study.anchor))
