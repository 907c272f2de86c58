"""Every layout of the device mesh against one process (issue 56's truth): for each model, each
dp x pp (dp in {1, 2, 4}, pp in {1, 2}) and each --shard (none, zero1, zero2, zero3), dtune-train on
dp x pp ranks with the same global batch (dp pipelines or ranks x M micro-batches of --batch
samples) against one process accumulating dp x M micro-steps: the largest relative difference of
any step's loss (averaged over the ranks, which is the global batch's) and of any final parameter
(relative to that tensor's largest |value|). fp32, --steps 4; a row is `ok` when both are at most
1e-5, `refused` when dtune-train refuses the layout (exit 2: pipeline x zero3, not yet built).

Run: DTUNE_BIN_DIR=build/bin .venv/bin/python benchmarks/train/mesh_layouts.py [--models
gpt2-tiny,resnet18] [--dp 1,2,4] [--pp 1,2] [--shards none,zero1,zero2,zero3]. About 5 minutes on
an idle 2-core machine (8-rank layouts are oversubscribed: 1 thread each). Output: `#` header lines
and one row per layout. Exit 0 when every row is ok or refused, 1 otherwise.

Tensor parallelism (issue 57's truth): --tp 1,2,4 adds the tp axis (layouts of at most
--max-ranks ranks) and --sp off,on Megatron's sequence parallelism for tp > 1; GPT-2 and the Llama
family split (ResNets are refused with --tp > 1, and GPT-2 with --sp on: `refused` rows). llama-mha
is llama3-tiny with 4 KV heads (an hf: config.json written by transformers' LlamaConfig), so that
tp 4 divides its KV heads: llama3-tiny's 2 do not. A tp run's weights are its tp ranks' slices
joined. E.g. --models llama-mha,gpt2-tiny --dp 1,2 --pp 1,2 --tp 1,2,4 --sp off,on --shards
none,zero1 --max-ranks 8."""

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np
import torch

SHAPES = {
    "gpt2-tiny": ["--context", "32", "--vocab", "256"],
    # 64 px: at 32 px the last BatchNorm normalises 2 values per channel, and the order of a sum
    # over ranks (rounding) grows to 1e-3 in two steps even for plain DDP against one process.
    "resnet18": ["--width", "8", "--image-size", "64", "--num-classes", "10"],
    "llama3-tiny": ["--context", "32", "--vocab", "256"],
    "llama-mha": ["--context", "32", "--vocab", "256"],  # --model hf:<tmp>/config.json
}


def llama_mha_config(folder):
    """llama3-tiny's shape (models/llama_config.h) with 4 KV heads, as a LlamaForCausalLM config."""
    from transformers import LlamaConfig

    LlamaConfig(
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=32,
        intermediate_size=352,
        vocab_size=256,
        max_position_embeddings=32,
        rope_theta=500000.0,
        tie_word_embeddings=False,
    ).save_pretrained(folder)
    return f"hf:{folder}/config.json"


MICRO = 2
TOL = 1e-5


def run(bin_dir, np_, args, out, dump):
    cmd = [str(Path(bin_dir) / "dtune-train"), "--threads", "1", *map(str, args)]
    cmd += ["--batch", "2", "--steps", "4", "--warmup-steps", "0", "--lr", "0.01"]
    cmd += ["--output", str(out), "--debug-dump", str(dump)]
    if np_ > 1:
        cmd = ["mpirun", "-np", str(np_), "--oversubscribe", "--bind-to", "none", *cmd]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)


# Megatron's split by parameter name (as tests/pipeline_checks.py joins it): row-parallel weights
# along dimension 1, column-parallel layers and the vocabulary-split tables along 0, GPT-2's fused
# c_attn as this rank's heads of q, then k, then v; any other tensor is whole on every tp rank.
TP_ROWS = ("o_proj.weight", "down_proj.weight", "c_proj.weight")
TP_COLUMNS = ("q_proj.", "k_proj.", "v_proj.", "gate_proj.", "up_proj.", "c_fc.", "embed_tokens.", "lm_head.", "wte.")


def joined_tp_slices(slices):
    """The whole tensors from their tp ranks' slices (in tp order)."""
    out = {}
    for k, first in slices[0].items():
        parts = [s[k] for s in slices]
        if k.endswith(TP_ROWS):
            out[k] = torch.cat(parts, dim=1)
        elif any(c in k for c in TP_COLUMNS):
            out[k] = torch.cat(parts, dim=0)
        elif "c_attn." in k:
            thirds = [p.chunk(3, dim=0) for p in parts]
            out[k] = torch.cat([t[i] for i in range(3) for t in thirds], dim=0)
        else:
            out[k] = first
    return out


def params_of(dump, stages, tp=1):
    merged = {}
    names = [f"{dump}.stage{s}" for s in range(stages)] if stages > 1 else [str(dump)]
    for n in names:
        if tp > 1:
            part = joined_tp_slices([torch.load(f"{n}.tp{t}", weights_only=False) for t in range(tp)])
        else:
            part = torch.load(n, weights_only=False)
        for k, v in part.items():
            if k.startswith("param."):
                merged.setdefault(k, v)
    return merged


def losses_of(out):
    with h5py.File(out) as f:
        (g,) = f["runs"].values()
        return g["loss"][()].mean(axis=1)


def rel_params(got, ref):
    assert sorted(got) == sorted(ref), "different parameter names"
    return max(
        ((got[k].float() - ref[k].float()).abs().max() / ref[k].float().abs().max().clamp_min(1e-12)).item()
        for k in ref
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="gpt2-tiny,resnet18")
    ap.add_argument("--dp", default="1,2,4")
    ap.add_argument("--pp", default="1,2")
    ap.add_argument("--shards", default="none,zero1,zero2,zero3")
    ap.add_argument("--tp", default="1")
    ap.add_argument("--sp", default="off", help="off,on: sequence parallelism (tp > 1 only)")
    ap.add_argument("--max-ranks", type=int, default=8)
    a = ap.parse_args()
    bin_dir = os.environ.get("DTUNE_BIN_DIR", "build/bin")
    print(f"# dtune mesh layouts vs one process accumulating dp x {MICRO} micro-steps; fp32, 4 steps")
    print(
        f"# {'model':<11} {'dp':>2} {'pp':>2} {'tp':>2} {'sp':<3} {'shard':<6} {'loss_rel':>9} {'param_rel':>9}"
        "  verdict"
    )
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for model in a.models.split(","):
            name = llama_mha_config(tmp / "mha") if model == "llama-mha" else model
            base = ["--model", name, *SHAPES[model]]
            refs = {}
            for dp in map(int, a.dp.split(",")):
                r = run(bin_dir, 1, [*base, "--accum-steps", dp * MICRO], tmp / "ref.h5", tmp / "ref.pt")
                if r.returncode != 0:
                    sys.exit(f"reference failed: {r.stderr[-2000:]}")
                refs[dp] = (losses_of(tmp / "ref.h5"), params_of(tmp / "ref.pt", 1))
                for pp, tp, sp, shard in (
                    (pp, tp, sp, shard)
                    for pp in map(int, a.pp.split(","))
                    for tp in map(int, a.tp.split(","))
                    for sp in a.sp.split(",")
                    for shard in a.shards.split(",")
                    if dp * pp * tp <= a.max_ranks and (tp > 1 or sp == "off")
                ):
                    args = [*base, "--shard", shard, "--tp", tp] + (["--sequence-parallel"] if sp == "on" else [])
                    args += ["--pipeline-stages", pp, "--micro-batches", MICRO] if pp > 1 else ["--accum-steps", MICRO]
                    out, dump = tmp / "run.h5", tmp / "run.pt"
                    r = run(bin_dir, dp * pp * tp, args, out, dump)
                    row = f"  {model:<11} {dp:>2} {pp:>2} {tp:>2} {sp:<3} {shard:<6}"
                    if r.returncode == 2:
                        print(f"{row} {'-':>9} {'-':>9}  refused")
                        continue
                    if r.returncode != 0:
                        print(f"{row} {'-':>9} {'-':>9}  FAILED (exit {r.returncode})")
                        bad += 1
                        continue
                    ref_loss, ref_params = refs[dp]
                    loss = losses_of(out)
                    lrel = float(np.max(np.abs(loss - ref_loss) / np.abs(ref_loss)))
                    prel = rel_params(params_of(dump, pp, tp), ref_params)
                    ok = lrel <= TOL and prel <= TOL
                    bad += not ok
                    print(f"{row} {lrel:9.2e} {prel:9.2e}  {'ok' if ok else 'MISMATCH'}")
                    sys.stdout.flush()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
