"""The report's verdicts on fixed inputs: one configuration truly faster (a planted slowdown of the
others) is the one the summary names, and nothing else; equal configurations give "no change
measurable here"; ties are listed together; repeats pool into one row; short runs are marked; a
baseline can be named; stragglers are named only beyond noise; two machines stay apart.

Results are written with h5py in dtune-train's layout (train_fixture.py) from fixed step times: the
same multiset of values in another order is an equal configuration (U test p = 1), so nothing here
depends on timing noise or on a random draw (the bootstrap is seeded)."""

import re
import shlex
from pathlib import Path

import numpy as np
import pytest
from train_fixture import config_attrs, train_file

from dtune_report.commands import command_tokens, reproduce_command
from dtune_report.configs import Config, Study, _workload, steps_to_separate
from dtune_report.identity import run_identity
from dtune_report.report import build_report
from dtune_report.units import fmt_bytes, fmt_pct, fmt_sig
from dtune_report.verdicts import choose_baseline, compare_to, decide, decide_all, default_distance

# 20 measured steps after one warm-up, all distinct, in a fixed shuffled order.
BASE = 1000 + np.random.default_rng(3).permutation(21).astype(float)
CMD = "/x/dtune-train --model resnet18 --width 16 --image-size 32 --num-classes 10 --steps 20 --warmup-steps 1"


def shuffled(seed, scale=1.0):
    """BASE's values in another order (an equal configuration), times scale."""
    return np.concatenate([BASE[:1], np.random.default_rng(seed).permutation(BASE[1:])]) * scale


def summary(out) -> list:
    """The summary's finding lines in report.md."""
    md = (out / "report.md").read_text()
    section = md.split("## Summary", 1)[1].split("\n## ", 1)[0]
    lines = [line.replace("\\", "") for line in section.splitlines() if line.startswith("- ")]
    return [line for line in lines if "**Stragglers**" not in line]


SETTINGS = [
    {},  # the defaults: the baseline
    {"bucket_mb": 5.0},
    {"bucket_mb": 100.0},
    {"precision": "bf16"},
    {"overlap": "off"},
]


def sweep_file(path, scales, **kw):
    runs = [(shuffled(n, scale), None, dict(s)) for n, (s, scale) in enumerate(zip(SETTINGS, scales))]
    train_file(path, runs, CMD, **kw)
    return path


@pytest.mark.parametrize("faster", [1, 2, 3, 4])
def test_a_planted_speedup_is_the_one_finding(tmp_path, faster):
    # Every configuration but one is slowed by 8%: that one is truly faster, the others equal.
    scales = [1.08] * len(SETTINGS)
    scales[faster] = 1.0
    r = build_report([sweep_file(tmp_path / "r.h5", scales)], tmp_path / "out")
    (f,) = r["findings"]
    assert f.baseline.fields["bucket_mb"] == "25.0" and f.baseline.fields["precision"] == "fp32"
    assert f.improves and len(f.best) == 1
    (key, value) = next(iter(SETTINGS[faster].items()))
    assert str(f.best[0].attrs[key]) == str(value)
    assert f.row.significant and f.row.ratio == pytest.approx(1.08, rel=1e-9) and f.row.ci_low > 1.0
    (line,) = summary(tmp_path / "out")
    assert "+8% [" in line and "significant" in line, line
    # Exactly that one: its flag is the change, and no other configuration's setting is named.
    named = {flag_of(k, v) for s in SETTINGS for k, v in s.items() if flag_of(k, v) in line}
    assert named == {flag_of(key, value)}, line
    assert f"`{flag_of(key, value)}`" in line, line


def flag_of(key, value) -> str:
    flag = {"bucket_mb": "--bucket-mb", "precision": "--precision", "overlap": "--overlap"}[key]
    return f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}"


def test_no_difference_names_none(tmp_path):
    r = build_report([sweep_file(tmp_path / "r.h5", [1.0] * len(SETTINGS))], tmp_path / "out")
    (f,) = r["findings"]
    assert not f.improves and f.row is None and f.baseline in f.best
    assert len(f.best) == len(SETTINGS)  # all tied: no winner named
    (line,) = summary(tmp_path / "out")
    assert "no change measurable here" in line and "`" not in line, line
    md = (tmp_path / "out" / "report.md").read_text()
    assert f"No winner: {len(SETTINGS)} configurations are tied for best" in md


def test_a_slower_everything_keeps_the_baseline(tmp_path):
    r = build_report([sweep_file(tmp_path / "r.h5", [1.0] + [1.2] * (len(SETTINGS) - 1))], tmp_path / "out")
    (f,) = r["findings"]
    assert not f.improves and f.best == [f.baseline]
    (line,) = summary(tmp_path / "out")
    assert "no change measurable here" in line and "the baseline is fastest" in line, line


def test_two_equally_fast_are_listed_together(tmp_path):
    scales = [1.1, 1.0, 1.0, 1.1, 1.1]
    r = build_report([sweep_file(tmp_path / "r.h5", scales)], tmp_path / "out")
    (f,) = r["findings"]
    assert f.improves and sorted(c.fields["bucket_mb"] for c in f.best) == ["100.0", "5.0"]
    (line,) = summary(tmp_path / "out")
    assert "Tied with it: bucket size" in line, line


def test_repeats_pool_into_one_row_and_one_machine_per_study(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    sweep_file(d / "a.h5", [1.0, 0.9, 1.0, 1.0, 1.0])
    train_file(d / "b.h5", [(shuffled(9), None, {})], CMD + " --seed 4")  # a repeat of the baseline
    r = build_report([d], tmp_path / "out")
    (s,) = r["studies"]
    assert len(s.configs) == len(SETTINGS)
    (base,) = [c for c in s.configs if len(c.runs) == 2]
    assert base.n == 40 and r["findings"][0].baseline is base
    # Another machine (other hosts): the same configurations form a study of their own.
    sweep_file(d / "c.h5", [1.0] * len(SETTINGS), hosts=("gpu7", "gpu8"))
    r = build_report([d], tmp_path / "out2")
    assert len(r["studies"]) == 2 and any(s.title.endswith("on gpu7,gpu8") for s in r["studies"])


def test_short_runs_are_marked_with_the_steps_that_would_separate_them(tmp_path):
    short = [(BASE[:4] * s, None, dict(st)) for s, st in ((1.0, {}), (1.01, {"bucket_mb": 5.0}))]
    train_file(tmp_path / "r.h5", short, CMD)
    r = build_report([tmp_path / "r.h5"], tmp_path / "out")
    (f,) = r["findings"]
    assert all(c.short for c in f.study.configs) and len(f.best) == 2 and f.steps_needed > 3
    (line,) = summary(tmp_path / "out")
    assert "ran too short to trust" in line, line
    md = (tmp_path / "out" / "report.md").read_text()
    assert f"about {f.steps_needed} measured steps each would separate the first two" in md
    assert "short run" in md


def test_a_comparison_too_short_to_trust_is_never_called_significant(tmp_path):
    # 9 measured steps each (short: fewer than 10), fully separated: p = 2 / C(18, 9) < 0.001, yet
    # no verdict calls the change significant beside "too short to trust" (issue 60).
    steps = BASE[:10]
    train_file(tmp_path / "r.h5", [(steps, None, {}), (steps / 1.3, None, {"precision": "bf16"})], CMD)
    r = build_report([tmp_path / "r.h5"], tmp_path / "out")
    (f,) = r["findings"]
    (bf16,) = [c for c in f.study.configs if c is not f.baseline]
    row = f.rows[id(bf16)]
    assert all(c.short for c in f.study.configs) and row.p_value < 0.001 and row.ratio > 1.2
    assert row.short and not row.significant and not f.improves and len(f.best) == 2
    md = (tmp_path / "out" / "report.md").read_text()
    rows = [line for line in md.splitlines() if line.startswith("|") and "bf16" in line and "+30%" in line]
    assert len(rows) == 2 and all("too short to trust" in line for line in rows), rows  # advice, study
    (line,) = summary(tmp_path / "out")
    assert "no change measurable here" in line and "ran too short to trust" in line, line
    for line in md.splitlines():
        if "short" in line:
            assert not re.search(r"(?<!not )\bsignificant\b", line), line


# dtune-train's flags (benchmarks/train/options.cc): the model and its shape (`mo.` options), the
# optimizer and learning rate, the device, the dataset (configs.WORKLOAD_FIELDS) and the --debug-*
# test hooks define a workload; every other flag is a setting.
OPTIONS = (Path(__file__).resolve().parents[2] / "benchmarks/train/options.cc").read_text()
TRAIN_FLAGS = sorted(set(re.findall(r'add_(?:option|flag)(?:_function<[^>]*>)?\("(--[a-z0-9-]+)"', OPTIONS)))
WORKLOAD_FLAGS = set(re.findall(r'add_option\("(--[a-z-]+)", mo\.', OPTIONS)) | {
    "--model",
    "--optimizer",
    "--lr",
    "--device",
    "--data",
}


def test_the_flags_are_read_from_the_binary():
    assert {"--decode", "--fast-decode", "--reduce-algo", "--timing", "--workers"} <= set(TRAIN_FLAGS)
    assert {"--width", "--context"} <= WORKLOAD_FLAGS


@pytest.mark.parametrize("flag", [f for f in TRAIN_FLAGS if f not in WORKLOAD_FLAGS and not f.startswith("--debug-")])
def test_a_setting_flag_never_makes_a_workload_of_its_own(flag):
    # A run with the flag given (and, where dtune-train records it, its attribute changed) is of
    # the same workload as one without: the two are compared, not each "nothing to compare".
    run = dict(benchmark="train", command_line=CMD, env={}, attrs=config_attrs(8, 2), world_size=2, point=None)
    attr = flag[2:].replace("-", "_")
    other = {**run, "command_line": f"{CMD} {flag} 2", "attrs": {**run["attrs"], attr: "2"}}
    assert _workload(run_identity(run, False)) == _workload(run_identity(other, False))


def test_decode_modes_are_compared_within_one_workload(tmp_path):
    """--decode roi (the default) and full, and --fast-decode, run on one dataset: one study whose
    axes are the decode settings, the fastest named against roi (issue 60: each mode was a workload
    of its own, "one configuration measured, nothing to compare")."""
    d = tmp_path / "d"
    d.mkdir()
    cmd = CMD + " --data /datasets/imagenet-shards"
    data = {"data": "/datasets/imagenet-shards"}
    for name, scale, flags, attrs in (
        ("roi", 1.0, "", {"decode": "roi", "fast_decode": 0}),
        ("full", 1.3, " --decode full", {"decode": "full", "fast_decode": 0}),
        ("fast", 0.8, " --fast-decode", {"decode": "roi", "fast_decode": 1}),
    ):
        train_file(d / f"{name}.h5", [(shuffled(len(name), scale), None, {**data, **attrs})], cmd + flags)
    r = build_report([d], tmp_path / "out")
    (s,) = r["studies"]
    assert len(s.configs) == 3 and sorted(s.axes) == [["decode"], ["fast_decode"]], s.axes
    (f,) = r["findings"]
    assert f.baseline.fields["decode"] == "roi" and f.baseline.fields["fast_decode"] == "0"
    assert f.improves and f.best[0].fields["fast_decode"] == "1" and f.changes == ["--fast-decode"]
    (line,) = summary(tmp_path / "out")
    assert "nothing to compare" not in line and "`--fast-decode`" in line, line


def test_a_named_baseline_file(tmp_path):
    sweep_file(tmp_path / "r.h5", [1.0, 1.0, 1.0, 1.0, 0.8])
    base = tmp_path / "today.h5"
    train_file(base, [(shuffled(5, 1.25), None, {"bucket_mb": 50.0})], CMD + " --bucket-mb 50")
    r = build_report([tmp_path / "r.h5"], tmp_path / "out", baseline=str(base))
    (f,) = r["findings"]
    assert f.how == "named by --baseline" and f.baseline.fields["bucket_mb"] == "50.0"
    assert f.improves and f.best[0].fields["overlap"] == "off"
    assert f.row.ratio == pytest.approx(1.25 / 0.8, rel=1e-9)
    with pytest.raises(ValueError, match="--baseline ffff"):
        build_report([tmp_path / "r.h5"], tmp_path / "out3", baseline="ffff")


def test_throughput_is_the_median_sample_not_the_mean(tmp_path):
    # Five of twenty measured steps stalled (three times longer) against a steady run whose every
    # step is 3% longer: by median samples/s the stalled run is the faster, by mean the slower.
    stalled = BASE.copy()
    stalled[1:6] *= 3
    train_file(tmp_path / "r.h5", [(stalled, None, {}), (shuffled(1, 1.03), None, {"bucket_mb": 5.0})], CMD)
    r = build_report([tmp_path / "r.h5"], tmp_path / "out")
    (f,) = r["findings"]
    base, other = f.baseline, next(c for c in f.study.configs if c is not f.baseline)
    assert base.median == pytest.approx(np.median(16e3 / stalled[1:]), rel=1e-12)  # global batch 16
    assert other.median == pytest.approx(np.median(16e3 / shuffled(1, 1.03)[1:]), rel=1e-12)
    assert f.best == [base] and not f.improves


def test_the_baseline_counts_environment_settings_as_differences(tmp_path):
    # Defaults plus two environment settings (distance 2) against 5 MiB buckets alone (distance 1):
    # the baseline is the bucket change, the configuration closer to what a user runs today.
    d = tmp_path / "d"
    d.mkdir()
    train_file(d / "env.h5", [(shuffled(1), None, {})], CMD, env={"NCCL_ALGO": "Ring", "OMP_NUM_THREADS": "2"})
    train_file(d / "bucket.h5", [(shuffled(2), None, {"bucket_mb": 5.0})], CMD + " --bucket-mb 5")
    r = build_report([d], tmp_path / "out")
    (f,) = r["findings"]
    assert len(f.study.configs) == 2 and f.how == "closest to the defaults"
    assert f.baseline.fields["bucket_mb"] == "5.0" and "NCCL_ALGO" not in f.baseline.fields, f.baseline.fields


def test_a_baseline_tie_goes_to_the_smallest_batch(tmp_path):
    # Three batches, every other setting the default: tied on distance, the smallest batch is the
    # baseline (verdicts.py: "on a tie, the smallest batch"), wherever it sits in the file.
    runs = [(shuffled(n), None, {"batch": b, "global_batch": 2 * b}) for n, b in enumerate((16, 8, 32))]
    train_file(tmp_path / "r.h5", runs, CMD)
    r = build_report([tmp_path / "r.h5"], tmp_path / "out")
    (f,) = r["findings"]
    assert len(f.study.configs) == 3 and f.how == "closest to the defaults"
    assert f.baseline.fields["batch"] == "8", f.baseline.fields


def test_stragglers_only_beyond_noise(tmp_path):
    noisy = [(shuffled(n), None, {"rank_factors": (1.0, 0.99), **s}) for n, s in enumerate(SETTINGS[:3])]
    train_file(tmp_path / "a.h5", noisy, CMD)
    build_report([tmp_path / "a.h5"], tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    assert "No straggler" in md and "slower than the others beyond noise" not in md
    slow = [(shuffled(n), None, {"rank_factors": (1.0, 1.2), **s}) for n, s in enumerate(SETTINGS[:3])]
    train_file(tmp_path / "b.h5", slow, CMD)
    build_report([tmp_path / "b.h5"], tmp_path / "out2")
    md = (tmp_path / "out2" / "report.md").read_text()
    assert "rank 1 of b.h5 is slower than the others beyond noise in 3 of its 3 runs, by +20%" in md


def test_a_rank_with_a_few_stalled_steps_is_no_straggler(tmp_path):
    # Rank 1 takes rank 0's time but for 4 of its 20 measured steps, five times longer: its median
    # step is within 1% of rank 0's, though its mean is 80% above.
    factors = np.ones((len(BASE), 2))
    factors[[3, 8, 13, 18], 1] = 5.0
    runs = [(shuffled(n), None, {"rank_factors": factors, **s}) for n, s in enumerate(SETTINGS[:3])]
    train_file(tmp_path / "r.h5", runs, CMD)
    build_report([tmp_path / "r.h5"], tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    assert "No straggler" in md and "slower than the others beyond noise" not in md


def test_a_stragglers_gap_is_the_median_over_its_runs(tmp_path):
    # Rank 1 slow in each of three runs, by 10%, 20% and 60%: +20% (the mean would say +30%).
    runs = [
        (shuffled(n), None, {"rank_factors": (1.0, k), **s}) for n, (k, s) in enumerate(zip((1.1, 1.2, 1.6), SETTINGS))
    ]
    train_file(tmp_path / "r.h5", runs, CMD)
    build_report([tmp_path / "r.h5"], tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    assert "rank 1 of r.h5 is slower than the others beyond noise in 3 of its 3 runs, by +20%" in md


def test_the_copy_block_is_the_measured_command(tmp_path):
    train_file(tmp_path / "r.h5", [(shuffled(1), None, {"bucket_mb": 5.0})], CMD + " --bucket-mb 5 --output x.h5")
    r = build_report([tmp_path / "r.h5"], tmp_path / "out")
    (s,) = r["studies"]
    text = reproduce_command(s.configs[0])
    assert command_tokens(text) == [
        "mpirun",
        "-np",
        "2",
        "build/bin/dtune-train",
        *shlex.split(CMD)[1:],
        "--bucket-mb",
        "5",
        "--batch",
        "8",
    ]
    assert all(len(line) <= 100 for line in text.splitlines())


def test_readable_numbers():
    assert [fmt_bytes(v) for v in (8, 1536, 4 << 20, 3 << 30)] == ["8 B", "1.5 KiB", "4 MiB", "3 GiB"]
    assert [fmt_sig(v) for v in (1234.6, 0.012345, 25.0, 15.83)] == ["1235", "0.0123", "25", "15.8"]
    assert [fmt_pct(v) for v in (1.234, 0.987, 1.0)] == ["+23.4%", "-1.3%", "+0%"]
    assert re.fullmatch(r"[+-][0-9.]+%", fmt_pct(1.05))


# The verdict's rules on hand-made configurations (samples/s, higher is better), no files.


def config(fields, scale=1.0, env=None, point=None, runs=(), command_line=CMD):
    samples = np.asarray(shuffled(len(fields), scale)[1:], float)
    return Config(
        dict(fields), list(runs), {}, point, command_line, dict(env or {}), samples, median=float(np.median(samples))
    )


def test_distance_from_the_defaults_counts_settings_then_environment_then_batch():
    assert default_distance(config({"precision": "fp32", "bucket_mb": "25.0", "batch": "8"}))[:2] == (0, 8.0)
    assert default_distance(config({"precision": "bf16", "overlap": "off", "batch": "4"}))[:2] == (2, 4.0)
    assert default_distance(config({"batch": "auto", "model": "m"})) == (0, 0.0, [("batch", "auto"), ("model", "m")])
    env = {"NCCL_ALGO": "Ring", "OMPI_MCA_pmix": "pmix3x"}  # the launcher's own setting does not count
    assert default_distance(config({}, env=env, point={"env": {"NCCL_PROTO": "LL"}}))[:2] == (2, 0.0)


def test_a_baseline_named_by_point_id_prefix_or_results_file(tmp_path):
    results = tmp_path / "base.h5"
    results.write_text("")
    by_file = config({"precision": "bf16"}, runs=[(str(results), "0000")])
    by_point = config({"overlap": "off"}, point={"id": "abcdef12"})
    by_attr = config({"workers": "4"})
    by_attr.attrs["point_id"] = "fedcba98"
    defaults = config({"precision": "fp32"})
    study = Study({}, [by_file, by_point, by_attr, defaults])
    assert choose_baseline(study, str(results)) == (by_file, "named by --baseline")
    assert choose_baseline(study, "abcd") == (by_point, "named by --baseline")
    assert choose_baseline(study, "fedcba98") == (by_attr, "named by --baseline")
    # Three characters name nothing (too easy to match by chance): the closest to the defaults.
    for baseline in ("abc", None, "", "0123"):
        assert choose_baseline(study, baseline) == (defaults, "closest to the defaults")


def test_the_finding_names_a_clear_winner_and_what_to_change():
    base = config({"precision": "fp32"})
    fast = config({"precision": "bf16"}, 1.2, command_line=CMD + " --precision bf16")
    mid = config({"overlap": "off"}, 1.1, command_line=CMD + " --overlap off")
    f = decide(Study({}, [mid, base, fast]))
    assert f.baseline is base and f.how == "closest to the defaults" and f.best == [fast]
    assert f.row.ratio == pytest.approx(1.2) and f.row.significant and f.improves
    assert f.gain == pytest.approx(0.2) and f.changes == ["--precision bf16"] and f.steps_needed is None
    assert set(f.rows) == {id(mid), id(fast)} and f.rows[id(mid)].ratio == pytest.approx(1.1)


def test_a_tie_at_the_top_is_listed_with_the_steps_that_would_separate_it():
    base = config({"precision": "fp32"})
    a = config({"precision": "bf16"}, 1.2)
    b = config({"overlap": "off"}, 1.2001)
    f = decide(Study({}, [base, a, b]))
    assert f.best == [b, a] and f.row is f.rows[id(b)] and f.improves
    assert f.steps_needed == steps_to_separate(b, a) and f.steps_needed > len(a.samples)


def test_no_change_when_the_baseline_is_the_best():
    base = config({"precision": "fp32"}, 1.3)
    slower = config({"precision": "bf16"}, 1.0)
    f = decide(Study({}, [base, slower]))
    assert f.best == [base] and f.row is None and not f.improves and f.gain == 0.0 and f.changes == []
    # Equal samples: tied with the baseline, nothing to gain.
    same = config({"overlap": "off"}, 1.3)
    f = decide(Study({}, [base, same]))
    assert f.row is None and f.gain == 0.0 and f.steps_needed is None


def test_findings_largest_gain_first_and_a_baseline_that_names_nothing_is_refused():
    def study(anchor, scale):
        return Study({}, [config({"precision": "fp32"}), config({"precision": "bf16"}, scale)], anchor=anchor)

    lone = Study({}, [config({})], anchor="a-lone")
    found = decide_all([study("b-small", 1.1), lone, study("c-large", 1.5), study("a-none", 1.0)])
    assert [f.study.anchor for f in found] == ["c-large", "b-small", "a-none"]
    with pytest.raises(ValueError, match="--baseline zzzz: no measured dtune-train configuration has this"):
        decide_all([study("s", 1.1)], baseline="zzzz")


def test_compare_to_takes_the_callers_alpha():
    # 20 runs each, fully separated: the U test's p is about 1.5e-11, significant at any usual
    # alpha but not at 1e-12; the verdict follows the alpha given (not the default 0.05).
    base, fast = config({"precision": "fp32"}), config({"precision": "bf16"}, 1.2)
    assert compare_to(base, fast, 0.05).significant
    row = compare_to(base, fast, 1e-12)
    assert not row.significant and 1e-12 < row.p_value < 1e-10 and row.unit == "samples/s", row


def test_decide_all_takes_the_callers_alpha_and_0_05_by_default():
    # 20 steps each. Fully separated (p about 1.5e-11): a winner at the default 0.05, a tie at 1e-12.
    # Shifted by 0.01% (p = 0.8): a tie at the default 0.05, a winner at 0.9.
    base = config({"precision": "fp32"})
    clear = Study({}, [base, config({"precision": "bf16"}, 1.2)], anchor="clear")
    near = Study({}, [base, config({"overlap": "off"}, 1.0001)], anchor="near")
    (f,) = decide_all([clear])
    assert f.improves and len(f.best) == 1
    (f,) = decide_all([clear], alpha=1e-12)
    assert not f.improves and len(f.best) == 2
    (f,) = decide_all([near])
    assert not f.improves and len(f.best) == 2
    p = compare_to(base, near.configs[1], 0.05).p_value
    (f,) = decide_all([near], alpha=0.9)
    assert 0.05 < p < 0.9 and f.improves and len(f.best) == 1
