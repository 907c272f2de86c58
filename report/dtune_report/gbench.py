"""Google Benchmark JSON (dtune-micro --benchmark_format=json, or any Google Benchmark binary's
--benchmark_out) as samples for `dtune compare`.

Input: the JSON Google Benchmark writes: {"context": {...}, "benchmarks": [{"name", "run_name",
"run_type": "iteration" | "aggregate", "repetitions", "repetition_index", "real_time", "cpu_time",
"time_unit": "ns" | "us" | "ms" | "s", ...}, ...]}. Samples: one per repetition, the per-iteration
real time of each "iteration" row (aggregate rows, the mean/median/stddev Google Benchmark adds,
are not samples); run with --benchmark_repetitions=N for N samples per benchmark.
Output: {run_name: [times in the benchmark's own unit]}, and the unit of each.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Union


def is_gbench_json(path: Union[str, os.PathLike]) -> bool:
    """True for a file that parses as Google Benchmark JSON (a `benchmarks` list and a `context`)."""
    p = Path(path)
    if not p.is_file() or p.suffix.lower() != ".json":
        return False
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and isinstance(doc.get("benchmarks"), list) and "context" in doc


def gbench_samples(path: Union[str, os.PathLike]) -> tuple[dict, dict]:
    """({run_name: [real_time per repetition]}, {run_name: time_unit}); ValueError naming the file
    when it is not Google Benchmark JSON or a benchmark mixes time units."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except ValueError as e:
        raise ValueError(f"{p}: not JSON: {e}") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise ValueError(f"{p}: not Google Benchmark JSON (no 'benchmarks' list)")
    samples: dict = {}
    units: dict = {}
    for b in doc["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
            continue
        name = b.get("run_name", b["name"])
        unit = b.get("time_unit", "ns")
        if units.setdefault(name, unit) != unit:
            raise ValueError(f"{p}: {name} is timed in both {units[name]} and {unit}")
        samples.setdefault(name, []).append(float(b["real_time"]))
    return samples, units


def compare_gbench(a, b, alpha: float = 0.05):
    """The Comparison of two Google Benchmark JSON files, one row per benchmark in both."""
    from .compare import Comparison, compare_samples

    sa, ua = gbench_samples(a)
    sb, ub = gbench_samples(b)
    rows = []
    for name in sorted(set(sa) & set(sb)):
        if ua[name] != ub[name]:
            raise ValueError(f"{name}: timed in {ua[name]} in {a} but {ub[name]} in {b}")
        rows += compare_samples({name: sa[name]}, {name: sb[name]}, ua[name], alpha)
    return Comparison(rows, sorted(set(sa) - set(sb)), sorted(set(sb) - set(sa)), alpha)
