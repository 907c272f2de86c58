"""dtune compare's gate and the notes under its table, called in the test process (test_compare.py
runs `dtune compare` in a subprocess, where a mutation run does not reach): the runs that did not
end ok with their side, status, message and configuration; the samples left out as not finite and
the configurations left with none; rows of one-sample and empty sides; a sweep side of one run
matched by its point; each line the gate and the table print, against lines written out by hand.
Train files are built with h5py in dtune-train's layout (train_fixture.py): no binaries."""

import json
import math
from pathlib import Path

import h5py
import numpy as np
import pytest
from train_fixture import train_file

from dtune_report.compare import (
    Comparison,
    NotOk,
    Row,
    compare_results,
    compare_samples,
    format_table,
    gate_failures,
    nothing_compared,
    table_of,
)

STEPS = 1000 + np.arange(12, dtype=float)  # step 0: warm-up; 11 measured steps, 1001 to 1011 ms
CMD = "/x/dtune-train --model resnet18 --width 16 --image-size 32 --batch 8 --steps 11 --warmup-steps 1"
GIB = 1 << 30


def drop_status(path: Path, run: str) -> None:
    """The run group as written before groups carried a status: such a run ran to its end."""
    with h5py.File(path, "r+") as f:
        del f[f"runs/{run}"].attrs["status"]


def test_runs_that_did_not_end_ok_are_named_by_side_status_and_message_and_fail_the_gate(tmp_path):
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    # A: batch 8 ok (a file from before statuses: no status attribute), batch 16 failed with a
    # message over two lines, out of memory at batch 64. B: batch 8 failed, batch 16 diverged
    # (no message), out of memory at batch 64 (as A) and at batch 32 (which A never ran).
    failed16 = {"batch": 16, "status": "failed", "message": "lost rank 1\n   at step 7 "}
    train_file(a, [(STEPS, None, {}), (STEPS, None, failed16)], CMD, oom=[(64, GIB)])
    drop_status(a, "0000-train-resnet18")
    diverged16 = {"batch": 16, "status": "diverged"}
    train_file(b, [(STEPS, None, {"status": "failed", "message": "it failed at step 7"}), (STEPS, None, diverged16)],
               CMD, oom=[(64, GIB), (32, GIB)])  # fmt: skip
    c = compare_results(a, b)
    assert [(r.side, r.file, r.run, r.status, r.message) for r in c.not_ok] == [
        ("A", str(a), "0001-train-resnet18", "failed", "lost rank 1\n   at step 7 "),
        ("A", str(a), "0002-train-resnet18-oom", "oom", "out of memory"),
        ("B", str(b), "0000-train-resnet18", "failed", "it failed at step 7"),
        ("B", str(b), "0001-train-resnet18", "diverged", ""),
        ("B", str(b), "0002-train-resnet18-oom", "oom", "out of memory"),
        ("B", str(b), "0003-train-resnet18-oom", "oom", "out of memory"),
    ]
    # Each carries its configuration: batch 16 failed in A and diverged in B alike, batch 64 out of
    # memory on both sides alike; four configurations in all.
    ids = [r.identity for r in c.not_ok]
    assert [(kind, dict(fields)["batch"]) for kind, fields in ids] == [
        ("train", "16"), ("train", "64"), ("train", "8"), ("train", "16"), ("train", "64"), ("train", "32")
    ]  # fmt: skip
    assert ids[0] == ids[3] and ids[1] == ids[4] and len(set(ids)) == 4
    # Still compared with what they measured (the same steps: no change); out-of-memory runs measured none.
    assert [(r.config, r.n_a, r.n_b, r.ratio) for r in c.rows] == [
        ("resnet18 fp32 batch 8", 11, 11, 1.0),
        ("resnet18 fp32 batch 16", 11, 11, 1.0),
    ]
    assert (c.only_a, c.only_b, c.no_samples, c.non_finite) == ([], [], [], [])
    # Named on one line each (the message's white space collapsed; none: no colon).
    named = [
        f"A: {a} 0001-train-resnet18: status failed: lost rank 1 at step 7",
        f"A: {a} 0002-train-resnet18-oom: status oom: out of memory",
        f"B: {b} 0000-train-resnet18: status failed: it failed at step 7",
        f"B: {b} 0001-train-resnet18: status diverged",
        f"B: {b} 0002-train-resnet18-oom: status oom: out of memory",
        f"B: {b} 0003-train-resnet18-oom: status oom: out of memory",
    ]
    assert [str(r) for r in c.not_ok] == named
    # The gate passes none of them but the out-of-memory runs of A and the one B shares with A.
    assert gate_failures(c, 5) == [f"did not end ok, not a measurement to pass: {named[i]}" for i in (0, 2, 3, 5)]
    # Under the table (header, two rows, geomean), all six.
    assert table_of(c).splitlines()[4:] == [
        "# did not end ok (6; compared with what they measured, no gate passes them):",
        *[f"#   {line}" for line in named],
    ]


def test_non_finite_samples_are_left_out_and_a_configuration_left_with_none_is_named(tmp_path):
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    # By batch: 4 no finite step on either side; 8 some steps not finite on each side; 16 none
    # finite in A; 32 none finite in B. Batch 4 sorts first: the configurations after it are compared.
    nan = np.full(len(STEPS), np.nan)
    some_a, some_b = STEPS.copy(), STEPS.copy()
    some_a[[3, 5]] = np.nan  # 1003 and 1005 ms left out
    some_b[[2, 9, 10]] = [np.inf, np.nan, -np.inf]  # 1002, 1009 and 1010 ms left out
    train_file(a, [(nan, None, {"batch": 4}), (some_a, None, {}), (nan, None, {"batch": 16}),
                   (STEPS, None, {"batch": 32})], CMD)  # fmt: skip
    train_file(b, [(nan, None, {"batch": 4}), (some_b, None, {}), (STEPS, None, {"batch": 16}),
                   (nan, None, {"batch": 32})], CMD)  # fmt: skip
    c = compare_results(a, b)
    # Batch 8 by hand: A 1001 1002 1004 1006 [1007] 1008 1009 1010 1011, median 1007 of 9;
    # B 1001 1003 1004 1005 [1006] 1007 1008 1011 with 1005, median (1005 + 1006) / 2 = 1005.5 of 8.
    (row,) = c.rows
    assert (row.config, row.n_a, row.n_b, row.median_a, row.median_b) == ("resnet18 fp32 batch 8", 9, 8, 1007.0, 1005.5)
    assert row.ratio == pytest.approx(1005.5 / 1007.0, rel=1e-15) and math.isfinite(row.p_value)
    label = "resnet18 fp32 batch"
    assert c.non_finite == [
        f"{label} 4: 11 of 11 samples in A not finite",
        f"{label} 8: 2 of 11 samples in A not finite",
        f"{label} 16: 11 of 11 samples in A not finite",
        f"{label} 4: 11 of 11 samples in B not finite",
        f"{label} 8: 3 of 11 samples in B not finite",
        f"{label} 32: 11 of 11 samples in B not finite",
    ]
    assert c.no_samples == [
        f"{label} 4: no finite sample in A and B",
        f"{label} 16: no finite sample in A",
        f"{label} 32: no finite sample in B",
    ]
    assert (c.not_ok, c.only_a, c.only_b) == ([], [], [])
    # The gate fails on each configuration with nothing valid (batch 8 is 0.15% faster: no regression).
    assert gate_failures(c, 5) == [
        f"nothing valid to compare: {label} 4: no finite sample in A and B",
        f"nothing valid to compare: {label} 16: no finite sample in A",
        f"nothing valid to compare: {label} 32: no finite sample in B",
    ]
    # Under the table (header, one row, geomean): the configurations left empty, then the samples.
    assert table_of(c).splitlines()[3:] == [
        "# left out, not finite (9):",
        *[f"#   {line}" for line in c.no_samples + c.non_finite],
    ]
    # All finite on both sides: nothing named.
    train_file(b, [(STEPS + 1, None, {})], CMD)
    c = compare_results(b, b)
    assert (c.non_finite, c.no_samples, c.not_ok, gate_failures(c, 5)) == ([], [], [], [])


def test_compare_samples_gives_a_side_left_empty_nan_figures_and_compares_a_single_sample():
    nan = float("nan")
    # "both": 1 2 3 against 4 5 6, fully apart: p = 2 / C(6, 3) = 0.1, ratio 5 / 2. "one": a single
    # sample a side, 5 against 6: ratio 1.2, p = 2 P(U <= 0) = 2 / C(2, 1) = 1, the interval [1.2, 1.2].
    # "a empty" and "b empty": every sample not finite on one side: NaN figures, n of the finite ones.
    groups_a = {"both": [3.0, 1.0, 2.0], "one": [5.0], "a empty": [nan, nan], "b empty": [1.0, 2.0], "a only": [1.0]}
    groups_b = {"both": [6.0, 4.0, 5.0], "one": [6.0], "a empty": [1.0, 2.0], "b empty": [np.inf]}
    rows = {r.config: r for r in compare_samples(groups_a, groups_b, "ms", 0.2, label=str.upper)}
    assert list(rows) == ["A EMPTY", "B EMPTY", "BOTH", "ONE"]  # keys of both sides, sorted, as labelled
    r = rows["BOTH"]
    assert (r.unit, r.median_a, r.median_b, r.ratio, r.n_a, r.n_b) == ("ms", 2.0, 5.0, 2.5, 3, 3)
    assert r.p_value == pytest.approx(0.1, rel=1e-12) and r.significant  # 0.1 < alpha 0.2
    assert 4 / 3 <= r.ci_low <= 2.5 <= r.ci_high <= 6.0  # within the ratios a resample can give
    r = rows["ONE"]
    assert (r.median_a, r.median_b, r.ratio, r.ci_low, r.ci_high, r.p_value, r.significant, r.n_a, r.n_b) == (
        5.0, 6.0, 1.2, 1.2, 1.2, 1.0, False, 1, 1
    )  # fmt: skip
    for key, n in (("A EMPTY", (0, 2)), ("B EMPTY", (2, 0))):
        r = rows[key]
        figures = (r.median_a, r.median_b, r.ratio, r.ci_low, r.ci_high, r.p_value)
        assert all(math.isnan(x) for x in figures) and not r.significant and (r.unit, r.n_a, r.n_b) == ("ms", *n), r


def test_a_p_value_that_is_not_finite_prints_as_a_dash():
    nan = float("nan")
    rows = [Row("empty", "ms", nan, 2.0, nan, nan, nan, nan, False, 0, 4), Row("x", "ms", *[1.0] * 6, False, 4, 4)]
    assert format_table(rows).splitlines()[1:3] == [
        "empty           nanms       2.000ms         ~       -        0+4  [   nan,    nan]",
        "x             1.000ms       1.000ms         ~   1.000        4+4  [ 1.000,  1.000]",
    ]


def bad(side: str, status: str, identity: tuple, message: str = "") -> NotOk:
    return NotOk(side, f"{side.lower()}.h5", f"run-{status}-{len(identity)}", status, message, identity)


def test_the_gate_line_by_line_on_a_hand_made_comparison():
    nan = float("nan")
    rows = [
        Row("slower", "ms", 10.0, 11.2, 1.12, 1.1, 1.14, 0.01, True, 8, 8),  # +12%: beyond 5%
        Row("a bit slower", "ms", 10.0, 10.4, 1.04, 1.02, 1.06, 0.01, True, 8, 8),  # +4%: within
        Row("noisy", "ms", 10.0, 13.0, 1.3, 0.8, 1.9, 0.3, False, 8, 8),  # not significant
        Row("faster", "ms", 10.0, 8.0, 0.8, 0.7, 0.9, 0.01, True, 8, 8),
        Row("empty in A", "ms", nan, nan, nan, nan, nan, nan, False, 0, 8),
        Row("empty in B", "ms", nan, nan, nan, nan, nan, nan, False, 8, 0),
    ]
    x, y, z = ("x",), ("y", 1), ("z", 1, 2)  # three configurations' identities
    not_ok = [
        bad("A", "oom", x, "out of memory"),  # out of memory in A: never B's fault
        bad("B", "oom", x, "out of memory"),  # the same configuration out of memory in A too: passes
        bad("B", "oom", y, "out of memory"),  # fits in A, not in B: fails
        bad("A", "failed", z, "boom"),  # any other status on either side fails
        bad("B", "timeout", x),
    ]
    left_out = ["v: 1 of 3 samples in A not finite"]  # left out, the rest compared: not the gate's
    c = Comparison(rows, ["only a"], [], 0.05, not_ok, ["w: no finite sample in B"], left_out)
    assert gate_failures(c, 5) == [
        "regression: slower: +12.0% (> 5%)",
        "did not end ok, not a measurement to pass: B: b.h5 run-oom-2: status oom: out of memory",
        "did not end ok, not a measurement to pass: A: a.h5 run-failed-3: status failed: boom",
        "did not end ok, not a measurement to pass: B: b.h5 run-timeout-1: status timeout",
        "nothing valid to compare: w: no finite sample in B",
        "nothing valid to compare: empty in A: no finite sample",
        "nothing valid to compare: empty in B: no finite sample",
    ]
    # The table of it: after the rows, the configurations of one side, the runs not ok, what was left out.
    assert table_of(c).splitlines()[8:] == [
        "# only in A (1, not compared):",
        "#   only a",
        "# did not end ok (5; compared with what they measured, no gate passes them):",
        *[f"#   {r}" for r in not_ok],
        "# left out, not finite (2):",
        "#   w: no finite sample in B",
        "#   v: 1 of 3 samples in A not finite",
    ]
    c = Comparison(rows[:1], [], ["b1", "b2"], 0.05)
    assert table_of(c).splitlines()[3:] == ["# only in B (2, not compared):", "#   b1", "#   b2"]
    assert gate_failures(Comparison(rows[:4], [], [], 0.05), 2.5) == [
        "regression: slower: +12.0% (> 2.5%)",
        "regression: a bit slower: +4.0% (> 2.5%)",
    ]
    # Nothing compared and nothing else wrong: one line saying why; with only A's out-of-memory runs
    # (which never fail the gate), the same line names them.
    c = Comparison([], ["a1"], ["b1", "b2"], 0.05)
    assert gate_failures(c, 5) == [
        "no configuration appears in both A and B (1 in A alone, 2 in B alone: "
        "runs match only when every setting agrees)"
    ]
    c = Comparison([], [], ["b1"], 0.05, [bad("A", "oom", x, "out of memory")])
    assert gate_failures(c, 5) == [
        "no configuration appears in both A and B (0 in A alone, 1 in B alone; did not end ok: "
        "A: a.h5 run-oom-1: status oom: out of memory)"
    ]


def test_nothing_compared_names_up_to_three_runs_not_ok_or_configurations_without_samples():
    runs = [bad("B", s, ("k",) * (i + 1)) for i, s in enumerate(["failed", "timeout", "diverged", "oom", "failed"])]
    why = "no configuration appears in both A and B (2 in A alone, 0 in B alone"
    c = Comparison([], ["a1", "a2"], [], 0.05, runs, ["s1: no finite sample in A"])
    assert nothing_compared(c) == (
        f"{why}; did not end ok: B: b.h5 run-failed-1: status failed; B: b.h5 run-timeout-2: status timeout; "
        "B: b.h5 run-diverged-3: status diverged and 2 more)"
    )
    c = Comparison([], ["a1", "a2"], [], 0.05, runs[:4])
    assert nothing_compared(c) == (
        f"{why}; did not end ok: B: b.h5 run-failed-1: status failed; B: b.h5 run-timeout-2: status timeout; "
        "B: b.h5 run-diverged-3: status diverged and 1 more)"
    )
    c = Comparison([], ["a1", "a2"], [], 0.05, runs[:3])
    assert nothing_compared(c) == (
        f"{why}; did not end ok: B: b.h5 run-failed-1: status failed; B: b.h5 run-timeout-2: status timeout; "
        "B: b.h5 run-diverged-3: status diverged)"
    )
    empty = [f"s{i}: no finite sample in B" for i in range(1, 5)]
    c = Comparison([], ["a1", "a2"], [], 0.05, [], empty)
    assert nothing_compared(c) == f"{why}; {'; '.join(empty[:3])})"  # s4 not named
    c = Comparison([], ["a1", "a2"], [], 0.05)
    assert nothing_compared(c) == f"{why}: runs match only when every setting agrees)"


def test_a_run_not_ok_is_named_on_one_line_of_at_most_200_characters_of_its_message():
    message = "x" * 150 + " \n\t " + "y" * 100
    r = NotOk("B", "b.h5", "0003-run", "timeout", message, ())
    assert str(r) == "B: b.h5 0003-run: status timeout: " + "x" * 150 + " " + "y" * 49
    assert str(NotOk("A", "a.h5", "0000-run", "interrupted", "", ())) == "A: a.h5 0000-run: status interrupted"


def test_sides_of_one_sweep_run_each_are_matched_by_their_points(tmp_path):
    # One merged run a side (the `point` attribute `dtune sweep merge` writes), repeats 0 and 1 of
    # one point. Their recorded command lines differ in a flag that counts (--timing off in B):
    # read by the points, one configuration (one row, 11 + 11 samples); read by the command lines,
    # two configurations, one on each side.
    point = {"id": "p1", "sweep": "s", "repeat": 0, "binary": "dtune-train", "args": ["--batch", "8"], "env": {}}
    point |= {"ranks": 2, "nodes": 1, "ranks_per_node": 2}
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    train_file(a, [(STEPS, None, {"point": json.dumps(point)})], CMD)
    train_file(b, [(STEPS, None, {"point": json.dumps({**point, "repeat": 1})})], CMD + " --timing off")
    c = compare_results(a, b)
    assert [(r.config, r.n_a, r.n_b) for r in c.rows] == [("resnet18 fp32 batch 8", 11, 11)]
    assert (c.only_a, c.only_b) == ([], [])
    # B as a plain run (no point): matched by command line, A's --timing (none) against B's.
    train_file(b, [(STEPS, None, {})], CMD + " --timing off")
    c = compare_results(a, b)
    assert c.rows == [] and (c.only_a, c.only_b) == (
        ["resnet18 fp32 batch 8 --timing=-"],
        ["resnet18 fp32 batch 8 --timing=off"],
    )


def test_runs_apart_in_one_field_of_their_mesh_alone_are_labelled_by_the_mesh(tmp_path):
    # Two dp2 x pp2 runs on 4 ranks, in orders that place ranks differently: mesh_order is the one
    # field of the mesh that varies, and the label names the whole mesh in its place.
    layout = {"tp,pp,dp": "within-node", "tp,dp,pp": "across-nodes"}
    runs = [
        ([s * 2 for s in STEPS], None, {"rank_factors": (1.0,) * 4, "pipeline_stages": 2, "pipeline_layout": layout[o],
                                        "mesh_dp": 2, "mesh_pp": 2, "mesh_tp": 1, "mesh_order": o})
        for o in layout
    ]  # fmt: skip
    train_file(tmp_path / "a.h5", runs, "/x/dtune-train --model resnet18", hosts=("h0",) * 4)
    c = compare_results(tmp_path / "a.h5", tmp_path / "a.h5")
    assert [r.config for r in c.rows] == [
        "resnet18 fp32 batch 8 mesh=dp2×pp2 (tp,dp,pp)",
        "resnet18 fp32 batch 8 mesh=dp2×pp2 (tp,pp,dp)",
    ]
