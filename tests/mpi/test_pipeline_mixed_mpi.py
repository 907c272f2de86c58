"""dtune-train's pipeline takes the flags data parallelism takes: with --precision fp16 (loss
scaling), --weights-dtype bf16 (fp32 master copy), --reduce-algo hierarchical (the stage's
data-parallel group reduced within its nodes first) and --data (stage 0 loads, the last stage gets
the targets from it), 2 stages (and 2 data-parallel groups x 2 stages) leave the parameters of one
process accumulating the same micro-batches (or, with --data and 2 groups, of 2 data-parallel ranks
reading the same slices). An inf planted in one stage's gradients makes every stage skip that
step and halve the loss scale, recorded per rank under pipeline/ and leaving the parameters a
single process leaves when it overflows at the same step."""

import subprocess

import h5py
import numpy as np
import pytest
import torch
from test_pipeline_mpi import TINY, reference, train

from conftest import bin_dir
from pipeline_checks import assert_equal_params, max_rel

COMMON = [*TINY, "--batch", "2", "--steps", "3"]
# fp16 and bf16 round sums that a pipeline forms in another order than one process (the tied
# embedding's gradient: per stage over the micro-batches, then between the end stages; with 2
# groups, the data-parallel average of two partial sums) to 11 and 8 significant bits, and a
# rounding that flips grows over the steps (fp32: 2.4e-7 after 3 steps). fp16 (fp32 weights): one
# step is as exact as fp32 (4e-8); after 3 the parameters differ by at most 1.9e-4 of a tensor's
# largest value (the gradients by 4.1e-4), below fp16's unit roundoff 2^-11, the bound. bf16
# weights (bf16 gradients): after 2 steps the weights differ by at most 7.2e-3, the fp32 master
# copy by 6.5e-3 (after 1 step with 2 groups 1.1e-2), a few bf16 roundings (2^-8 each) of a
# tensor's largest value; the bound 2^-5 leaves 3x.
FP16_TOL, BF16_TOL = 2.0**-11, 2.0**-5
OVERFLOW = [*TINY, "--batch", "2", "--steps", "4", "--precision", "fp16"]
PIPE = ["--pipeline-stages", 2, "--schedule", "1f1b"]


def pipeline_group(h5):
    with h5py.File(h5) as f:
        (g,) = f["runs"].values()
        p = g["pipeline"]
        return {k: p[k][()] for k in ("loss_scale", "found_inf", "skipped", "stage", "dp_index")} | {
            "run_skipped": g["skipped"][()],
            "run_loss_scale": g["loss_scale"][()],
            "reduce_algo": g.attrs["reduce_algo"],
        }


# (ranks, micro-batches per pipeline): one pipeline of 4, or 2 data-parallel pipelines of 2; both
# are the reference's 4 micro-batches (data-parallel index d's micro-batch m is its d x 2 + m).
LAYOUTS = [(2, 4), (4, 2)]


@pytest.mark.parametrize("np_,micro", LAYOUTS, ids=["pp2", "dp2xpp2"])
def test_fp16_pipeline_equals_accumulation_in_one_process(tmp_path, np_, micro):
    fp16 = [*COMMON, "--precision", "fp16"]
    pipe, h5, _ = train(tmp_path, "fp16", np_, [*fp16, *PIPE, "--micro-batches", micro], 2)
    rel = max_rel(pipe, reference(tmp_path, fp16, 4))
    print(f"fp16 {np_} ranks: largest relative parameter difference {rel:.3g}")
    assert rel <= FP16_TOL
    p = pipeline_group(h5)
    assert p["loss_scale"].shape == (3, np_) and np.all(p["loss_scale"] == 65536.0)
    assert not p["skipped"].any() and not p["found_inf"].any()


@pytest.mark.parametrize("np_,micro", LAYOUTS, ids=["pp2", "dp2xpp2"])
def test_bf16_weights_pipeline_equals_accumulation_in_one_process(tmp_path, np_, micro):
    bf16 = [*TINY, "--batch", "2", "--steps", "2", "--weights-dtype", "bf16"]
    pipe, _, _ = train(tmp_path, "bf16", np_, [*bf16, *PIPE, "--micro-batches", micro], 2)
    ref = reference(tmp_path, bf16, 4)
    # Every stage keeps an fp32 master copy, and its bf16 weights are that copy's cast.
    for k, w in pipe.items():
        if k.startswith("param."):
            m = pipe["master." + k[len("param.") :]]
            assert w.dtype == torch.bfloat16 and m.dtype == torch.float32, k
            assert torch.equal(w, m.to(torch.bfloat16)), k
    weights, master = max_rel(pipe, ref), max_rel(pipe, ref, "master.")
    print(f"bf16 weights, {np_} ranks: largest relative difference {weights:.3g}, of the master copy {master:.3g}")
    assert weights <= BF16_TOL and master <= BF16_TOL


def plant_inf(step, rank):
    return ["--debug-plant-inf-step", step, "--debug-plant-inf-rank", rank]


# (ranks, micro-batches, the rank whose gradients overflow): stage 0 or stage 1 of one pipeline;
# with 2 pipelines, stage 1 of the second (rank 3: within-node, stage = rank mod 2).
OVERFLOWS = [(2, 4, 0), (2, 4, 1), (4, 2, 3)]


@pytest.mark.parametrize("np_,micro,rank", OVERFLOWS, ids=["pp2-stage0", "pp2-stage1", "dp2xpp2-rank3"])
def test_an_overflow_on_one_stage_skips_the_step_on_every_stage(tmp_path, np_, micro, rank):
    fp16 = OVERFLOW
    pipe, h5, _ = train(tmp_path, "o", np_, [*fp16, *PIPE, "--micro-batches", micro, *plant_inf(1, rank)], 2)
    p = pipeline_group(h5)
    # Only the planted rank's stage found inf (agreed over that stage's data-parallel group) ...
    found = np.zeros((4, np_), dtype=np.int64)
    found[1, p["stage"] == p["stage"][rank]] = 1
    assert np.array_equal(p["found_inf"], found), p["found_inf"]
    # ... every rank skipped step 1 and halved its scale, the same scale everywhere.
    assert np.array_equal(p["skipped"], np.repeat([[0], [1], [0], [0]], np_, axis=1)), p["skipped"]
    assert np.array_equal(p["loss_scale"], np.repeat([[65536.0], [65536.0], [32768.0], [32768.0]], np_, axis=1))
    assert list(p["run_skipped"]) == [0, 1, 0, 0] and list(p["run_loss_scale"]) == [65536, 65536, 32768, 32768]
    # The parameters are those of one process whose step 1 overflowed: skipped there too, and
    # steps 2 and 3 taken at half the scale (stages that disagreed on it would unscale wrongly).
    ref, _, _ = train(tmp_path, "ref-o", 1, [*fp16, "--accum-steps", 4, *plant_inf(1, 0)])
    assert max_rel(pipe, ref) <= FP16_TOL


def test_hierarchical_reduction_within_each_stage_group(tmp_path):
    args = [*COMMON, *PIPE, "--micro-batches", 2, "--reduce-algo", "hierarchical"]
    pipe, h5, _ = train(tmp_path, "hier", 4, args, 2)
    assert_equal_params(pipe, reference(tmp_path, COMMON, 4))
    assert pipeline_group(h5)["reduce_algo"] == "hierarchical"


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    """A token dataset made by dtune-data from 1,960 bytes of text (windows of --context 32)."""
    d = tmp_path_factory.mktemp("tokens")
    text = d / "t.txt"
    text.write_text("hello world, dtune loads tokens for a pipeline. " * 40)
    r = subprocess.run(
        [str(bin_dir() / "dtune-data"), "make", "tokens", "--out", str(d / "tok"), "--input", str(text)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return d / "tok"


# zb-v: stage 0 loads the micro-batches and computes their loss, its targets handed within the stage
# (the 2-block GPT's embedding, blocks and head as the 4 chunks).
ZBV = ["--pipeline-stages", 2, "--schedule", "zb-v", "--stage-pieces", "ends"]


@pytest.mark.parametrize("layout", [PIPE, ZBV], ids=["1f1b", "zb-v"])
def test_data_pipeline_equals_accumulation_in_one_process(tmp_path, tokens, layout):
    data = [*COMMON, "--data", tokens]
    pipe, h5, stdout = train(tmp_path, "data", 2, [*data, *layout, "--micro-batches", 4], 2)
    ref, _, _ = train(tmp_path, "data-ref", 1, [*data, "--accum-steps", 4])
    assert_equal_params(pipe, ref)
    assert "# data: tokens" in stdout
    with h5py.File(h5) as f:
        (g,) = f["runs"].values()
        assert g["data_ms"].shape == (3, 2)


def test_data_two_pipelines_equal_two_data_parallel_ranks(tmp_path, tokens):
    # Pipeline d reads slice d of 2, as data-parallel rank d does: the same global batch.
    data = [*COMMON, "--data", tokens]
    pipe, _, _ = train(tmp_path, "data-dp", 4, [*data, *PIPE, "--micro-batches", 2], 2)
    ref, _, _ = train(tmp_path, "data-dp-ref", 2, [*data, "--accum-steps", 2])
    assert_equal_params(pipe, ref)
