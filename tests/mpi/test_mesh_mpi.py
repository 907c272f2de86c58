"""The device mesh (train/mesh.h) composes pipeline stages with sharded data parallelism: on
dp x pp layouts of up to 8 ranks, with --shard zero1 and zero2 on the data axis (the GPT, whose
tied embedding's gradient the end stages sum, and the BatchNorm ResNet) and zero3 (the ResNet),
every step's loss and the final parameters equal one process accumulating the same dp x M
micro-batches (fp32, relative 1e-5); another --mesh-order moves the ranks but trains
bit-identically; each rank's optimizer state is its stage's divided over the data axis; the
results file records the mesh and every rank's coordinates; a planted fp16 overflow skips the same
step everywhere; --tp other than 1 and pipeline x zero3 with a tied embedding are refused in one
line."""

import math

import h5py
import numpy as np
import pytest
import torch

from conftest import run_train
from pipeline_checks import assert_equal_params, merged_stage_dumps
from side_by_side import outcome, side_by_side

GPT = ["--model", "gpt2-tiny", "--context", "32", "--vocab", "256", "--lr", "0.01"]  # 2 blocks, tied
GPT4 = [*GPT, "--layers", "4"]  # 2 stages x 2 virtual stages
# 64 px: at 32 px the last stage's BatchNorm normalises 2 values per channel (2 samples at 1 x 1),
# so the order of a sum over ranks (rounding, 1.5e-7 after one step) grew to 1e-3 after two, even
# for plain DDP on 2 ranks against one process (measured); at 2 x 2 it stays at 3e-6 after 3 steps.
RESNET = ["--model", "resnet18", "--width", "8", "--image-size", "64", "--num-classes", "10", "--lr", "0.01"]
MICRO = 2  # micro-batches per pipeline per step


def train(tmp_path, name, np_, args, stages):
    """(final parameters merged over the stages, every step's loss averaged over the ranks, the
    run's HDF5 group as a dict)."""
    dump, out = tmp_path / f"{name}.pt", tmp_path / f"{name}.h5"
    common = ["--batch", "2", "--steps", "3", "--warmup-steps", "0", "--debug-dump", dump, "--output", out]
    r = run_train(np_, [*args, *common])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    params = merged_stage_dumps(dump, stages) if stages > 1 else torch.load(dump, weights_only=False)
    with h5py.File(out) as f:
        (g,) = f["runs"].values()
        rec = {k: g.attrs[k] for k in g.attrs}
        for k in ("loss", "optimizer_state_bytes", "mesh_dp_coord", "mesh_pp_coord", "mesh_tp_coord"):
            rec[k] = g[k][()]
    # Every rank of a pipeline records its pipeline's loss: the mean over ranks is the mean over
    # the data-parallel groups, which is the global batch's.
    return params, rec["loss"].mean(axis=1), rec, dump


_references = {}


def reference(tmp_path, model, micro):
    key = (tuple(model), micro)
    if key not in _references:
        params, loss, _, _ = train(tmp_path, f"ref{len(_references)}", 1, [*model, "--accum-steps", micro], 1)
        _references[key] = (params, loss)
    return _references[key]


def assert_equals_reference(tmp_path, model, dp, params, loss):
    ref_params, ref_loss = reference(tmp_path, model, dp * MICRO)
    assert_equal_params(params, ref_params)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, atol=0)


LAYOUTS = [
    ("gpt-dp1-pp2-zero2", GPT, 1, ["--shard", "zero2"]),
    ("gpt-dp2-pp2-zero1", GPT, 2, ["--shard", "zero1"]),
    ("gpt-dp2-pp2-zero2", GPT, 2, ["--shard", "zero2", "--bucket-mb", "0.05", "--first-bucket-mb", "0.01"]),
    ("gpt-dp4-pp2-zero1", GPT, 4, ["--shard", "zero1"]),
    (
        "gpt-dp2-pp2-zero2-interleaved",
        GPT4,
        2,
        ["--shard", "zero2", "--schedule", "interleaved", "--virtual-stages", "2"],
    ),
    # zb-h1: the weight gradients done in W, the buckets reduce-scattered after the schedule.
    ("gpt-dp2-pp2-zero2-zbh1", GPT, 2, ["--shard", "zero2", "--schedule", "zb-h1"]),
    ("resnet-dp2-pp2-zero2", RESNET, 2, ["--shard", "zero2", "--bucket-mb", "0.05", "--first-bucket-mb", "0.01"]),
    # zero3: each stage's units cut from its pieces, gathered around them; gpipe and 1F1B.
    ("resnet-dp2-pp2-zero3", RESNET, 2, ["--shard", "zero3"]),
    ("resnet-dp2-pp2-zero3-gpipe-mib", RESNET, 2, ["--shard", "zero3", "--schedule", "gpipe", "--shard-unit", "0.05"]),
]


@pytest.mark.parametrize("name,model,dp,extra", LAYOUTS, ids=[c[0] for c in LAYOUTS])
def test_pipeline_with_sharded_data_axis_equals_accumulation(tmp_path, name, model, dp, extra):
    args = [*model, "--pp", 2, "--micro-batches", MICRO, *extra]
    params, loss, rec, _ = train(tmp_path, name, 2 * dp, args, 2)
    assert_equals_reference(tmp_path, model, dp, params, loss)
    assert (rec["mesh_dp"], rec["mesh_pp"], rec["mesh_tp"]) == (dp, 2, 1)
    assert rec["global_batch"] == 2 * dp * MICRO


def test_mesh_order_moves_ranks_and_trains_identically(tmp_path):
    """dp2 x pp2: tp,pp,dp puts a pipeline on consecutive ranks, tp,dp,pp a stage's data-parallel
    group; each rank's coordinates are written out by hand, and the losses are bit-identical."""
    args = [*GPT, "--pp", 2, "--micro-batches", MICRO, "--shard", "zero2"]
    _, within, a, _ = train(tmp_path, "within", 4, [*args, "--mesh-order", "tp,pp,dp"], 2)
    params, across, b, _ = train(tmp_path, "across", 4, [*args, "--mesh-order", "tp,dp,pp"], 2)
    assert list(a["mesh_pp_coord"]) == [0, 1, 0, 1] and list(a["mesh_dp_coord"]) == [0, 0, 1, 1]
    assert list(b["mesh_pp_coord"]) == [0, 0, 1, 1] and list(b["mesh_dp_coord"]) == [0, 1, 0, 1]
    assert list(a["mesh_tp_coord"]) == list(b["mesh_tp_coord"]) == [0, 0, 0, 0]
    assert (a["mesh_order"], b["mesh_order"]) == ("tp,pp,dp", "tp,dp,pp")
    assert (a["pipeline_layout"], b["pipeline_layout"]) == ("within-node", "across-nodes")
    assert np.array_equal(within, across)
    assert_equals_reference(tmp_path, GPT, 2, params, across)


def test_a_planted_overflow_skips_the_same_step_on_every_rank_of_a_sharded_pipeline(tmp_path):
    """fp16: rank 0 plants an inf in its (sharded) gradients at step 1; the stage group's maximum and
    the stages' exchange skip that step everywhere, as one process skips it. Under fp16 autocast
    the step-1 differences flip fp16 roundings in the later forwards (2.6e-4 measured): 1e-3."""
    fp16 = ["--precision", "fp16", "--debug-plant-inf-step", "1"]
    ref, _, _, _ = train(tmp_path, "ref-fp16", 1, [*GPT, *fp16, "--accum-steps", 2 * MICRO], 1)
    for shard in ("zero1", "zero2"):
        args = [*GPT, *fp16, "--pp", 2, "--micro-batches", MICRO, "--shard", shard]
        params, _, _, _ = train(tmp_path, f"fp16-{shard}", 4, args, 2)
        with h5py.File(tmp_path / f"fp16-{shard}.h5") as f:
            (g,) = f["runs"].values()
            skipped = g["skipped"][()]
        assert list(np.ravel(skipped)) == [0, 1, 0], skipped
        assert_equal_params(params, ref, tol=1e-3)


def test_each_rank_holds_its_stages_optimizer_state_divided_over_the_data_axis(tmp_path):
    """AdamW: two fp32 moments per element of the shard and one 4-byte step count; a zero1 shard
    is ceil(T / dp) elements of the stage's T, whose count comes from the stage's own dump.
    Replicated (--shard none), every rank holds its whole stage's: 8 T and a step count per tensor."""
    args = [*GPT, "--pp", 2, "--micro-batches", MICRO, "--optimizer", "adamw"]
    dp = 2
    _, _, rec, dump = train(tmp_path, "zero1", 2 * dp, [*args, "--shard", "zero1"], 2)
    _, _, ddp, _ = train(tmp_path, "none", 2 * dp, args, 2)
    for r, stage in enumerate(rec["mesh_pp_coord"]):
        mine = [v for k, v in torch.load(f"{dump}.stage{stage}", weights_only=False).items() if k.startswith("param.")]
        elements = sum(t.numel() for t in mine)
        assert rec["optimizer_state_bytes"][r] == 8 * math.ceil(elements / dp) + 4, (r, stage)
        assert ddp["optimizer_state_bytes"][r] == 8 * elements + 4 * len(mine), (r, stage)


REFUSED = [
    (["--tp", "2", "--sequence-parallel"], ["--sequence-parallel with --model gpt2-tiny", "Llama family"]),
    (["--pp", "2", "--shard", "zero3"], ["--pipeline-stages 2", "--shard zero3", "tied embedding"]),
    (["--mesh-order", "tp,pp"], ["--mesh-order 'tp,pp'", "tp, pp and dp"]),
    (["--mesh-order", "dp,pp,dp"], ["--mesh-order 'dp,pp,dp'"]),
    (
        ["--pp", "2", "--pipeline-layout", "within-node", "--mesh-order", "tp,dp,pp"],
        ["--pipeline-layout within-node", "tp,pp,dp", "tp,dp,pp"],
    ),
    (["--pp", "3"], ["--pipeline-stages 3 does not divide the 2 ranks"]),
]


@pytest.fixture(scope="module")
def refusals():
    """Every case launched before the first test reads it, four at a time (side_by_side.py)."""
    return side_by_side(
        lambda extra: run_train(2, [*GPT, "--steps", "1", "--no-output", *extra], timeout=120),
        [tuple(c[0]) for c in REFUSED],
    )


@pytest.mark.parametrize("extra, names", REFUSED)
def test_what_the_mesh_cannot_be_is_refused_in_one_line(refusals, extra, names):
    r = outcome(refusals, tuple(extra))
    assert r.returncode == 2, r.stdout + r.stderr
    line = next(x for x in r.stderr.splitlines() if x.startswith("dtune-train: error"))
    for n in names:
        assert n in line, line
