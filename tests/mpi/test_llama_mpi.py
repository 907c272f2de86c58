"""The Llama family in the layouts: llama3-tiny (untied, grouped-query attention, Llama 3.1's rope
scaling) trained on 2 and 4 ranks as DDP, ZeRO-3, pipeline stages and pipeline stages with ZeRO-3
units, with and without activation checkpointing, ends every step with the loss and parameters of
one process accumulating the same micro-batches (fp32, relative 1e-5); a run from a save_pretrained
checkpoint (--init-from) starts from its weights; the results file records the attention kernel,
the checkpointing, the activation bytes and the recompute time."""

import h5py
import numpy as np
import pytest
import torch

from conftest import run_train
from pipeline_checks import assert_equal_params, max_rel, merged_stage_dumps

LLAMA = ["--model", "llama3-tiny", "--context", "32", "--vocab", "256"]
MICRO = 2  # micro-batches per rank (or per pipeline) per step


def train(tmp_path, name, np_, args, stages=1, steps=3, lr="0.01"):
    dump, out = tmp_path / f"{name}.pt", tmp_path / f"{name}.h5"
    common = [
        "--batch",
        "2",
        "--steps",
        steps,
        "--lr",
        lr,
        "--warmup-steps",
        "0",
        "--debug-dump",
        dump,
        "--output",
        out,
    ]
    r = run_train(np_, [*LLAMA, *args, *common])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    params = merged_stage_dumps(dump, stages) if stages > 1 else torch.load(dump, weights_only=False)
    with h5py.File(out) as f:
        (g,) = f["runs"].values()
        rec = {k: g.attrs[k] for k in g.attrs}
        rec["loss"] = g["loss"][()]
    return params, rec["loss"].mean(axis=1), rec


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """One process accumulating 2 and 4 micro-batches (the global batches of dp 1 and 2)."""
    tmp = tmp_path_factory.mktemp("ref")
    return {dp: train(tmp, f"ref{dp}", 1, ["--accum-steps", dp * MICRO]) for dp in (1, 2)}


LAYOUTS = [
    # name, ranks, data-parallel degree, pipeline stages, flags
    ("ddp", 2, 2, 1, ["--accum-steps", MICRO]),
    ("zero3-full-checkpoint", 2, 2, 1, ["--accum-steps", MICRO, "--shard", "zero3", "--activation-checkpoint", "full"]),
    ("pp2-1f1b-selective", 2, 1, 2, ["--pp", 2, "--micro-batches", MICRO, "--activation-checkpoint", "selective"]),
    ("dp2-pp2-zero3", 4, 2, 2, ["--pp", 2, "--micro-batches", MICRO, "--shard", "zero3"]),
]


@pytest.mark.parametrize("name,ranks,dp,stages,extra", LAYOUTS, ids=[c[0] for c in LAYOUTS])
def test_llama_layouts_equal_accumulation(tmp_path, references, name, ranks, dp, stages, extra):
    params, loss, rec = train(tmp_path, name, ranks, extra, stages)
    ref_params, ref_loss, _ = references[dp]
    assert_equal_params(params, ref_params)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, atol=0)
    assert (rec["mesh_dp"], rec["mesh_pp"]) == (dp, stages)


def test_results_record_attention_checkpointing_and_activation_bytes(tmp_path):
    """One rank, fp32: the CPU's fused attention kernel is recorded; full checkpointing keeps fewer
    activation bytes than none and spends time recomputing, none spends none."""
    _, _, none = train(tmp_path, "none", 1, [])
    _, _, full = train(tmp_path, "full", 1, ["--activation-checkpoint", "full"])
    assert none["attention_backend"] == full["attention_backend"] == "flash_attention"
    assert (none["activation_checkpoint"], full["activation_checkpoint"]) == ("none", "full")
    assert 0 < full["activation_bytes"] < none["activation_bytes"] / 2
    assert none["recompute_ms_per_step"] == 0 < full["recompute_ms_per_step"]


def test_init_from_a_checkpoint_starts_from_its_weights(tmp_path):
    """A save_pretrained checkpoint of llama3-tiny's shape, trained one step at a negligible
    learning rate: every parameter ends where the checkpoint put it (not where dtune's own
    initialisation would), and the file names the checkpoint."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=352,
        vocab_size=256,
        max_position_embeddings=128,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        rope_parameters={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
            "rope_theta": 500000.0,
        },
    )
    torch.manual_seed(5)
    hf = LlamaForCausalLM(config)
    hf.save_pretrained(tmp_path / "hf")
    want = {f"param.{k}": v.detach() for k, v in hf.named_parameters()}
    got, _, rec = train(tmp_path, "init", 1, ["--init-from", tmp_path / "hf"], steps=1, lr="1e-9")
    own, _, _ = train(tmp_path, "own", 1, [], steps=1, lr="1e-9")
    assert rec["init_from"] == str(tmp_path / "hf")
    assert_equal_params(got, want, tol=1e-6)
    assert max_rel(own, want) > 0.5
