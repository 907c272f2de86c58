"""dtune-train's pipeline parallelism is exact and measured: with 2 and 4 stages, under each
schedule, the parameters after 3 optimizer steps equal one process accumulating the same
micro-batches (GPT, and ResNet whose BatchNorm sees the same micro-batches; interleaved with 4
stages x 2 virtual stages on an 8-block GPT), also with 2 data-parallel groups x 2 stages; the end
stages' copies of the tied embedding stay equal; with balanced synthetic stages (sleep-dominated
chunks) the measured bubble is within 5 points of the schedule's theory, and 1F1B's peak
activation memory is below GPipe's; bad pipeline flags exit 2 with one line; a stopped stage ends
the job within --timeout, named; --profile-steps writes one trace row per stage, --tensorboard
every rank's scalars."""

import h5py
import numpy as np
import pytest
import torch

from conftest import bin_dir, mpirun_prefix, run_train
from pipeline_checks import assert_equal_params, merged_stage_dumps, stop_rank_then_wait
from side_by_side import outcome, side_by_side

TINY = ["--model", "gpt2-tiny", "--context", "32", "--vocab", "256", "--lr", "0.01"]  # 2 blocks
D6 = ["--model", "gpt2-d6", "--context", "16", "--vocab", "128", "--lr", "0.01"]  # 6 blocks
TINY8 = [*TINY, "--layers", "8"]  # 8 blocks: 4 stages x 2 virtual stages, one block per chunk
RESNET = ["--model", "resnet18", "--width", "8", "--image-size", "32", "--num-classes", "10", "--lr", "0.01"]


def train(tmp_path, name, np_, args, stages=1):
    """Trains and returns the final parameters ("param.<name>"): one dump, or with stages > 1 every
    stage's merged (the copies of a tied parameter must agree)."""
    dump, out = tmp_path / f"{name}.pt", tmp_path / f"{name}.h5"
    r = run_train(np_, [*args, "--warmup-steps", "0", "--debug-dump", dump, "--output", out])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    if stages == 1:
        return torch.load(dump, weights_only=False), out, r.stdout
    return merged_stage_dumps(dump, stages), out, r.stdout


_references = {}


def reference(tmp_path, args, micro):
    """One process accumulating `micro` micro-steps (cached: several pipelines share one)."""
    key = (tuple(args), micro)
    if key not in _references:
        _references[key], _, _ = train(tmp_path, "ref", 1, [*args, "--accum-steps", micro])
    return _references[key]


CASES = [
    ("tiny-2-gpipe", TINY, 2, ["--schedule", "gpipe"]),
    ("tiny-2-1f1b", TINY, 2, ["--schedule", "1f1b"]),
    ("d6-4-gpipe", D6, 4, ["--schedule", "gpipe"]),
    ("d6-4-1f1b", D6, 4, ["--schedule", "1f1b"]),
    ("d6-2-interleaved", D6, 2, ["--schedule", "interleaved", "--virtual-stages", "3"]),
    ("tiny8-4-interleaved", TINY8, 4, ["--schedule", "interleaved", "--virtual-stages", "2"]),
    ("resnet-2-1f1b", RESNET, 2, ["--schedule", "1f1b"]),
    # Zero bubble: B and W apart (the linear layers' weight gradients deferred; the tied head's too).
    ("tiny-2-zbh1", TINY, 2, ["--schedule", "zb-h1"]),
    ("d6-4-zbh1", D6, 4, ["--schedule", "zb-h1"]),
    # ZB-V: two chunks per stage as a V, the loss back on stage 0 with the tied embedding.
    ("d6-2-zbv", D6, 2, ["--schedule", "zb-v"]),
    ("tiny8-4-zbv", TINY8, 4, ["--schedule", "zb-v"]),
    # A cut between the ends and the blocks.
    ("d6-4-ends-1f1b", D6, 4, ["--schedule", "1f1b", "--stage-pieces", "ends"]),
    ("resnet-4-gpipe", RESNET, 4, ["--schedule", "gpipe"]),
]


@pytest.mark.parametrize("name,model,stages,extra", CASES, ids=[c[0] for c in CASES])
def test_pipeline_equals_accumulation_in_one_process(tmp_path, name, model, stages, extra):
    common = [*model, "--batch", "2", "--steps", "3"]
    pipe, h5, stdout = train(
        tmp_path, name, stages, [*common, "--pipeline-stages", stages, "--micro-batches", 4, *extra], stages
    )
    assert_equal_params(pipe, reference(tmp_path, common, 4))
    assert "cut points:" in stdout and "bubble" in stdout
    with h5py.File(h5) as f:
        (g,) = f["runs"].values()
        assert g.attrs["pipeline_stages"] == stages and g.attrs["micro_batches"] == 4
        p = g["pipeline"]
        assert sorted(p["stage"][()]) == list(range(stages))
        virtual = int(extra[extra.index("--virtual-stages") + 1]) if "--virtual-stages" in extra else 1
        virtual = 2 if "zb-v" in extra else virtual
        assert p.attrs["cuts"].count("|") == stages * virtual - 1
        assert p["timeline"].shape[1] == 6
        assert p["planned_share"][()].sum() == pytest.approx(1.0)  # one pipeline: the whole plan


def test_two_data_parallel_groups_of_two_stages(tmp_path):
    common = [*TINY, "--batch", "2", "--steps", "3"]
    pipe, h5, _ = train(
        tmp_path, "dpxpp", 4, [*common, "--pipeline-stages", 2, "--micro-batches", 2, "--schedule", "1f1b"], 2
    )
    # Data-parallel index d's micro-batch m is the reference's micro-step d x 2 + m.
    assert_equal_params(pipe, reference(tmp_path, common, 4))
    with h5py.File(h5) as f:
        (g,) = f["runs"].values()
        assert g.attrs["global_batch"] == 2 * 2 * 2
        assert list(g["pipeline"]["dp_index"][()]) == [0, 0, 1, 1]  # within-node: stage = rank % 2


# Balanced synthetic stages: a ResNet this small computes in a few ms per micro-batch, so the 100 ms
# each chunk sleeps forward (200 ms backward) dominates every stage equally, wherever the cut is.
# The cases run all at once (each is asleep for 83% of its time; 24 ranks): the test holds the whole
# machine (ctest PROCESSORS), where every stage came within 1.6 points of its theory in 3 runs of
# 24 s (two at a time: 1.7 points, 55 s); beside 2 busy loops on the 2 cores, within 3.1.
SLEEPY = ["--model", "resnet18", "--width", "2", "--image-size", "32", "--num-classes", "10", "--batch", "2"]
SLEEPY += ["--debug-chunk-sleep-ms", "100"]
# Memory: activations of 8 samples x 16 tokens through three GPT blocks of width 384 per micro-batch.
ACTIVATIONS = [*D6, "--batch", "8"]


def measured(tmp_path, name, stages, schedule, micro, model, steps=3):
    out = tmp_path / f"{name}.h5"
    args = [*model, "--steps", steps, "--warmup-steps", "1", "--pipeline-stages", stages, "--micro-batches", micro]
    r = run_train(stages, [*args, "--schedule", schedule, "--output", out])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    with h5py.File(out) as f:
        (g,) = f["runs"].values()
        p = g["pipeline"]
        return p["bubble"][()], p.attrs["theory_bubble"], p["peak_activation_bytes"][()], p["stage"][()]


BUBBLE_CASES = [(s, p, m) for s in ("gpipe", "1f1b", "zb-h1", "zb-v") for p, m in ((2, 4), (4, 8))]


@pytest.fixture(scope="module")
def bubble_runs(tmp_path_factory):
    """Every bubble case launched before the first test reads it, all at once."""
    folder = tmp_path_factory.mktemp("bubble")
    return side_by_side(
        lambda c: measured(folder, "-".join(map(str, c)), c[1], c[0], c[2], SLEEPY),
        BUBBLE_CASES,
        workers=len(BUBBLE_CASES),
    )


# zb-h1: each chunk's B and W sleep as long as its forward (F = B = W, the theory's premise).
@pytest.mark.parametrize("schedule,stages,micro", BUBBLE_CASES, ids=["-".join(map(str, c)) for c in BUBBLE_CASES])
def test_measured_bubble_matches_theory(bubble_runs, schedule, stages, micro):
    bubble, theory, _, _ = outcome(bubble_runs, (schedule, stages, micro))
    # ZB-H1: (P - 1) / (3M + P - 1); ZB-V (two chunks a stage, half the work each): (P - 1) / 2 of
    # bubble time against 3M of work.
    work, ramp = {"zb-h1": (3, 1), "zb-v": (3, 0.5)}.get(schedule, (1, 1))
    assert theory == pytest.approx(ramp * (stages - 1) / (work * micro + ramp * (stages - 1)))
    assert np.all(np.abs(bubble - theory) <= 0.05), (bubble, theory)


def test_one_f_one_b_holds_fewer_activations_than_gpipe(tmp_path):
    # One measured step: the schedule, not the step, sets what a stage holds (the warm-up step,
    # which also allocates the gradients and the optimizer's state, is left out of the peak).
    _, _, gpipe, stage = measured(tmp_path, "g", 2, "gpipe", 8, ACTIVATIONS, steps=1)
    _, _, ofob, _ = measured(tmp_path, "o", 2, "1f1b", 8, ACTIVATIONS, steps=1)
    # Stage 0 holds 8 micro-batches under GPipe, at most 2 under 1F1B (measured: 77 against 22 MiB).
    assert ofob[stage == 0][0] < gpipe[stage == 0][0] / 2, (ofob, gpipe)


BAD_FLAGS = [
    (4, ["--pipeline-stages", 3], "--pipeline-stages 3 does not divide the 4 ranks"),
    (
        2,
        [
            *TINY[:2],
            "--pipeline-stages",
            2,
            "--schedule",
            "interleaved",
            "--virtual-stages",
            2,
            "--micro-batches",
            2,
        ],
        "4 chunks but the model has 2 blocks",
    ),
    (4, [*TINY[:2], "--pipeline-stages", 4], "4 chunks but the model has 2 blocks"),
    (
        2,
        ["--pipeline-stages", 2, "--schedule", "interleaved", "--virtual-stages", 2, "--micro-batches", 1],
        "give a multiple of 2 micro-batches, at least 2",
    ),
    (2, ["--pipeline-stages", 2, "--virtual-stages", 2], "--virtual-stages 2 needs --schedule interleaved"),
    (
        2,
        [*RESNET[:2], "--pipeline-stages", 2, "--schedule", "zb-h1", "--shard", "zero3"],
        "--shard zero3 and --schedule zb-h1",
    ),
    (2, [*TINY[:2], "--pipeline-stages", 2, "--schedule", "zb-v"], "4 chunks but the model has 2 blocks"),
]
BAD_FLAG_IDS = [
    "p-does-not-divide",
    "too-few-blocks-interleaved",
    "more-stages-than-blocks",
    "m-below-p",
    "v-alone",
    "zero3-zbh1",
    "zbv-too-few-blocks",
]


@pytest.fixture(scope="module")
def bad_flag_runs():
    """Every case launched before the first test reads it, four at a time (side_by_side.py)."""
    return side_by_side(
        lambda c: run_train(c[0], [*c[1], "--steps", 1, "--no-output"], timeout=300),
        [(np_, tuple(args)) for np_, args, _ in BAD_FLAGS],
    )


@pytest.mark.parametrize("np_,args,message", BAD_FLAGS, ids=BAD_FLAG_IDS)
def test_bad_pipeline_flags_exit_2_with_one_line(bad_flag_runs, np_, args, message):
    r = outcome(bad_flag_runs, (np_, tuple(args)))
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    assert message in r.stderr, r.stderr
    assert "Exception raised from" not in r.stderr and "frame #" not in r.stderr


def test_a_stopped_stage_ends_the_job_within_timeout_named(tmp_path):
    exe = bin_dir() / "dtune-train"
    cmd = mpirun_prefix(2) + [str(exe), "--threads", "1", *TINY, "--batch", "2", "--steps", "100000"]
    cmd += ["--pipeline-stages", "2", "--micro-batches", "2", "--timeout", "4", "--output", str(tmp_path / "t.h5")]
    rc, err, took, _ = stop_rank_then_wait(cmd, settle_s=8, timeout_s=120)
    assert rc == 3, err
    assert took < 4 + 30, f"ended {took:.0f} s after the stop"
    assert "stage 1 (rank 1)" in err, err
    # The saved run keeps rank 0's own stage rows (the stopped stage cannot be gathered).
    with h5py.File(tmp_path / "t.h5") as f:
        (run,) = f["runs"].values()
        p = run["pipeline"]
        assert (p.attrs["complete"], p.attrs["ranks_reported"]) == (0, 1)
        assert list(p["stage"][()]) == [0] and p["forward_ms"][0] > 0
        assert p["loss_scale"].shape[1] == 1 and p["timeline"].shape[1] == 6


def test_a_stopped_stage_resumed_after_the_timeout_adds_no_second_error(tmp_path):
    """Stage 0 names the stopped stage 1 and ends the job; stage 1, resumed the moment stage 0's
    error appears (its own deadline long past), finds rank 0 gone but stays quiet, since rank 0
    marked the node's rank board: one error line, not a second blaming rank 0 as "gone (killed or
    crashed)". Resumed on the event, not after a time: mpirun may have killed it already, which
    the test tells apart."""
    exe = bin_dir() / "dtune-train"
    cmd = mpirun_prefix(2) + [str(exe), "--threads", "1", *TINY, "--batch", "2", "--steps", "100000"]
    cmd += ["--pipeline-stages", "2", "--micro-batches", "2", "--timeout", "3", "--output", str(tmp_path / "t.h5")]
    rc, err, _, resumed = stop_rank_then_wait(cmd, settle_s=8, timeout_s=120, resume_on_error=True)
    assert rc == 3, err
    assert resumed is True, f"stage 1 was gone before stage 0's error: {err}"
    errors = [line for line in err.splitlines() if line.startswith("dtune-train: error")]
    assert len(errors) == 1 and "stage 1 (rank 1)" in errors[0], err


def test_report_draws_the_timeline_and_compares_pp_with_dp(tmp_path):
    from dtune_report.loader import load_train_summary
    from dtune_report.pipeline import load_pipelines, pp_against_dp
    from dtune_report.report import build_report

    # The same global batch of 8: 2 data-parallel ranks x 2 micro-batches, or 1 pipeline x 4.
    common = [*TINY, "--batch", "2", "--steps", "3", "--warmup-steps", "1"]
    files = []
    for name, stages, micro in (("dp", 1, 2), ("pp", 2, 4)):
        out = tmp_path / f"{name}.h5"
        r = run_train(2, [*common, "--pipeline-stages", stages, "--micro-batches", micro, "--output", out])
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        files.append(out)
    made = build_report(files, tmp_path / "report")
    assert (tmp_path / "report" / "pipeline_timeline_0.png").stat().st_size > 0
    assert "pipeline_timeline_0" in made["figures"]
    table = pp_against_dp(load_train_summary(files), load_pipelines(files))
    assert list(table.layout) == ["dp2", "pp2 1f1b"]
    assert list(table.global_batch) == [8, 8] and table.vs_dp[0] == 1.0
    assert table.bubble.isna()[0] and 0 <= table.bubble[1] < 1


def test_profile_trace_has_one_row_per_stage(tmp_path):
    """--profile-steps with 2 stages: Holistic Trace Analysis (the real reader) loads every rank's
    trace, each with its stage's row of forward/backward/send/recv-wait slices inside the profiled
    step, and the merged trace with one row per stage on one clock: each micro-batch's forward on
    stage 1 starts after stage 0's ended, each backward on stage 0 after stage 1's."""
    import json
    import logging

    from hta.trace_analysis import TraceAnalysis

    logging.getLogger("hta").setLevel(logging.ERROR)
    traces, out = tmp_path / "traces", tmp_path / "p.h5"
    args = [*TINY, "--batch", "2", "--steps", "3", "--warmup-steps", "1", "--pipeline-stages", 2]
    args += ["--micro-batches", 4, "--schedule", "1f1b", "--profile-steps", "1:2", "--profile-dir", traces]
    r = run_train(2, [*args, "--output", out])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    with h5py.File(out) as f:
        (g,) = f["runs"].values()
        assert g["profile"].attrs["steps"] == 2 and list(g["profiled"][()]) == [0, 1, 1, 0]

    per_rank = TraceAnalysis(trace_dir=str(traces)).t
    assert sorted(per_rank.get_ranks()) == [0, 1]
    names = per_rank.symbol_table.get_sym_table()
    for rank in (0, 1):
        df = per_rank.get_trace(rank)
        df = df.assign(name=df["name"].map(names.__getitem__), cat=df["cat"].map(names.__getitem__))
        rows = df[df["cat"] == "dtune_pipeline"]
        assert rows["tid"].nunique() == 1  # one row: "pipeline stage <rank>"
        kinds = {n.rsplit(" ", 1)[0] for n in rows["name"]}
        assert {"forward", "backward", "send", "recv wait"} <= kinds, kinds
        (step,) = df[df["name"].str.startswith("ProfilerStep#")].itertuples()  # HTA keeps whole steps
        inside = (rows["ts"] >= step.ts) & (rows["ts"] + rows["dur"] <= step.ts + step.dur + 1)
        assert inside.all()
    meta = json.loads((traces / "rank1.pt.trace.json").read_text())["traceEvents"]
    assert {"name": "pipeline stage 1"} in [e.get("args") for e in meta if e.get("name") == "thread_name"]

    merged = TraceAnalysis(trace_dir=str(traces / "pipeline")).t
    names = merged.symbol_table.get_sym_table()
    df = merged.get_trace(0)
    df = df.assign(name=df["name"].map(names.__getitem__), end=df["ts"] + df["dur"])
    assert sorted(df["tid"].unique()) == [0, 1] and list(df["pid"].unique()) == [0]
    raw = json.loads((traces / "pipeline" / "pipeline.trace.json").read_text())["traceEvents"]
    step_of = {}  # HTA keeps ts and dur; the step comes from the file's args
    for e in raw:
        if e["ph"] == "X":
            step_of.setdefault((e["tid"], e["name"]), []).append(e["args"]["step"])
    assert all(sorted(v) == [1, 2] for v in step_of.values())
    for step in (1, 2):
        span = {}
        for stage in (0, 1):
            rows = df[df["tid"] == stage].sort_values("ts")
            for m in range(4):
                for kind in ("forward", "backward"):
                    hits = rows[rows["name"] == f"{kind} {m}"].iloc[step - 1]
                    span[stage, kind, m] = (hits.ts, hits.end)
        for m in range(4):
            assert span[1, "forward", m][0] >= span[0, "forward", m][1] - 1
            assert span[0, "backward", m][0] >= span[1, "backward", m][1] - 1


def test_tensorboard_has_every_stage_and_step(tmp_path):
    """--tensorboard with 2 stages: TensorBoard's own reader finds every rank's scalars, each step's
    loss its pipeline's (the same on both stages, as in HDF5)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb, out = tmp_path / "tb", tmp_path / "t.h5"
    args = [*TINY, "--batch", "2", "--steps", "3", "--warmup-steps", "1", "--pipeline-stages", 2]
    r = run_train(2, [*args, "--micro-batches", 2, "--tensorboard", tb, "--output", out])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    with h5py.File(out) as f:
        (g,) = f["runs"].values()
        loss = g["loss"][()]
    assert np.array_equal(loss[:, 0], loss[:, 1])
    for rank in (0, 1):
        acc = EventAccumulator(str(tb / f"rank{rank}"))
        acc.Reload()
        assert {"loss", "step_time_ms", "samples_per_s", "phase/forward_ms"} <= set(acc.Tags()["scalars"])
        got = acc.Scalars("loss")
        assert [e.step for e in got] == [0, 1, 2, 3]
        assert [e.value for e in got] == pytest.approx(list(loss[:, rank]), rel=1e-6)
