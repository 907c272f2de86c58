"""Tensor parallelism for GPT-2 (Megatron's split: c_attn and c_fc column-parallel, both c_proj
row-parallel, the tied token embedding and head split by vocabulary rows with a vocabulary-parallel
cross-entropy): gpt2-tiny on tp 2, with a data axis (ZeRO-1 and ZeRO-3 over it) and with pipeline
stages (the tied embedding's gradient summed between the end stages of each tp coordinate), each
ends every step with the losses and weights of one process accumulating the same micro-batches
(fp32, relative 1e-5); the recorded tensor-parallel bytes equal Megatron's count exactly."""

import h5py
import numpy as np
import pytest

from conftest import run_train
from pipeline_checks import assert_equal_params, merged_tp_dumps

GPT = ["--model", "gpt2-tiny", "--context", "32", "--vocab", "256", "--lr", "0.01"]  # 2 blocks, tied
MICRO = 2  # micro-batches per rank (or per pipeline) per step
BATCH, CONTEXT = 2, 32


def train(tmp_path, name, np_, args, stages=1, tp=1):
    dump, out = tmp_path / f"{name}.pt", tmp_path / f"{name}.h5"
    common = ["--batch", BATCH, "--steps", 3, "--warmup-steps", 0, "--debug-dump", dump, "--output", out]
    r = run_train(np_, [*GPT, *args, *common])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    with h5py.File(out) as f:
        (g,) = f["runs"].values()
        rec = {k: g.attrs[k] for k in g.attrs}
        rec["loss"] = g["loss"][()].mean(axis=1)
        rec["param_bytes_resident"] = g["param_bytes_resident"][()]
        rec["slowest_s"] = g["total_ms"][()].max(axis=1).sum() / 1e3  # every step measured (no warm-up)
        for k in ("tp_comm_bytes_by_layer", "mesh_dp_coord", "mesh_tp_coord"):
            if k in g:
                rec[k] = g[k][()]
    return merged_tp_dumps(dump, stages, tp), rec


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """One process accumulating 2 and 4 micro-batches (the global batches of dp 1 and 2)."""
    tmp = tmp_path_factory.mktemp("ref")
    return {dp: train(tmp, f"ref{dp}", 1, ["--accum-steps", dp * MICRO]) for dp in (1, 2)}


LAYOUTS = [
    # name, ranks, data-parallel degree, pipeline stages, flags (tp 2 in each)
    ("tp2", 2, 1, 1, ["--accum-steps", MICRO]),
    ("tp2-dp2-zero1", 4, 2, 1, ["--accum-steps", MICRO, "--shard", "zero1"]),
    ("tp2-dp2-zero3", 4, 2, 1, ["--accum-steps", MICRO, "--shard", "zero3"]),
    ("tp2-pp2", 4, 1, 2, ["--pp", 2, "--micro-batches", MICRO]),
]


@pytest.mark.parametrize("name,ranks,dp,stages,extra", LAYOUTS, ids=[c[0] for c in LAYOUTS])
def test_gpt_tensor_parallel_layouts_equal_accumulation(tmp_path, references, name, ranks, dp, stages, extra):
    params, rec = train(tmp_path, name, ranks, ["--tp", 2, *extra], stages, tp=2)
    ref_params, ref = references[dp]
    assert_equal_params(params, ref_params)
    np.testing.assert_allclose(rec["loss"], ref["loss"], rtol=1e-5, atol=0)
    assert (rec["mesh_dp"], rec["mesh_pp"], rec["mesh_tp"]) == (dp, stages, 2)
    assert rec["parameters"] == ref["parameters"]  # the model's, not a rank's share
    # A tp group's ranks share their samples: the global batch is batch x dp x micro-batches, and
    # the throughput that batch over the slowest rank's step times (not x every rank).
    assert rec["global_batch"] == BATCH * dp * MICRO
    np.testing.assert_allclose(rec["samples_per_s"], rec["global_batch"] * 3 / rec["slowest_s"], rtol=1e-6)
    # Per micro-batch, fp32, summed over the pipeline's stages (each rank's own layers: tp_comm_bytes):
    # each block all-reduces (B, T, C) after attn.c_proj and mlp.c_proj
    # forward and before c_attn and c_fc backward, the embedding once forward, the head's input
    # once backward, and the loss three (B, T) figures forward.
    width = ref_params["param.transformer.wte.weight"].shape[1]
    layers = sum(k.startswith("param.") and k.endswith("ln_1.weight") for k in ref_params)
    tokens = BATCH * CONTEXT
    assert rec["tp_comm_bytes_per_step"] == MICRO * tokens * 4 * (layers * 4 * width + 2 * width + 3)
    # By layer over one pipeline (the ranks at dp and tp coordinate 0): the embedding's one, each
    # block's four, the head's one and the loss's three (B, T) at the head.
    first = (rec["mesh_dp_coord"] == 0) & (rec["mesh_tp_coord"] == 0)
    by_layer = [width] + [4 * width] * layers + [width + 3]
    assert rec["tp_comm_bytes_by_layer"][first].sum(axis=0).tolist() == [MICRO * tokens * 4 * n for n in by_layer]
    if stages == 1 and "zero3" not in extra:
        # The split layers' bytes a rank are 1/2 of one process's; LayerNorms, the position
        # embedding and the row-parallel biases are whole.
        whole_names = [
            k
            for k in ref_params
            if k.startswith("param.") and (k.split(".")[-2].startswith("ln_") or ".wpe." in k or "c_proj.bias" in k)
        ]
        whole = sum(4 * ref_params[k].numel() for k in whole_names)
        total = ref["param_bytes_resident"][0]
        assert list(rec["param_bytes_resident"]) == [(total - whole) // 2 + whole] * ranks


def test_a_tp_degree_that_does_not_divide_the_vocabulary_is_refused():
    r = run_train(2, [*GPT[:4], "--vocab", "255", "--tp", 2, "--steps", 1, "--no-output"])
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    line = next(x for x in r.stderr.splitlines() if x.startswith("dtune-train: error"))
    assert "--tp 2 does not divide gpt2-tiny's vocabulary (--vocab) 255" in line, line
