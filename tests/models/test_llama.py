"""dtune's Llama family against transformers' LlamaForCausalLM (5.x, CPU, fp32).

- Parameter counts: `dtune-models list` (arithmetic, nothing built) equals LlamaForCausalLM built on
  the meta device for every named model, and the published counts.
- Parity: a small random LlamaForCausalLM saved with save_pretrained (safetensors) and loaded by
  `dtune-models parity --model hf:DIR --init-from DIR` gives the same logits, loss and gradients
  for every parameter on a fixed batch: with and without tied embeddings, with and without Llama
  3.1's rope scaling, with grouped-query attention (KV heads < heads) and with attention biases.
  Random q/k weights make the rotary convention visible (rotate_half pairs element j with j + D/2).
  Both sides run the same LibTorch kernels on the same thread count; measured errors are 0 or a
  few ulps. The bounds (1e-5 relative) are far below what a wrong operation gives: rotary halves
  swapped, KV heads repeated in the wrong order or the norm's epsilon dropped each move the
  logits by 1e-3 or more (scripts/cpp-plants.sh plants them).
- Activation checkpointing changes nothing computed (bit-identical logits, loss and gradients)
  and lowers the bytes the forward keeps for the backward: with full checkpointing each decoder
  layer keeps exactly its (B, T, C) fp32 output, measured as the change between 2 and 4 layers.
- A checkpoint or config that does not fit is refused with one message naming the tensor or field
  and exit status 2.
"""

import json
import struct
import subprocess

import pytest
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from conftest import bin_dir

PUBLISHED = {
    "llama3.2-1b": 1_235_814_400,
    "llama3.2-3b": 3_212_749_824,
    "llama3.1-8b": 8_030_261_248,
    "llama3.1-70b": 70_553_706_496,
    "llama3.1-405b": 405_853_388_800,
}
# hidden, layers, heads, KV heads, intermediate, tied, rope factor (REFERENCE.md)
SHAPES = {
    "llama3.2-1b": (2048, 16, 32, 8, 8192, True, 32.0),
    "llama3.2-3b": (3072, 28, 24, 8, 8192, True, 32.0),
    "llama3.1-8b": (4096, 32, 32, 8, 14336, False, 8.0),
    "llama3.1-70b": (8192, 80, 64, 8, 28672, False, 8.0),
    "llama3.1-405b": (16384, 126, 128, 8, 53248, False, 8.0),
}
LOGITS_TOL, LOSS_TOL, GRAD_TOL = 1e-5, 1e-5, 1e-5


def dtune_models(*args, check=True):
    exe = bin_dir() / "dtune-models"
    if not exe.exists():
        pytest.fail(f"{exe} does not exist: build first (scripts/setup.sh)")
    r = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=600)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def listed_parameters(model):
    out = dtune_models("list", "--model", model).stdout
    rows = [line.split() for line in out.splitlines() if not line.startswith("#")]
    assert len(rows) == 1 and rows[0][0] == model, out
    return int(rows[0][1])


def rope(factor, original=8192):
    return {
        "rope_type": "llama3",
        "factor": factor,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": original,
        "rope_theta": 500000.0,
    }


def meta_count(config):
    with torch.device("meta"):
        return sum(p.numel() for p in LlamaForCausalLM(config).parameters())


@pytest.mark.parametrize("model", list(PUBLISHED))
def test_parameter_counts_equal_transformers_and_the_published_ones(model):
    h, layers, heads, kv, inter, tied, factor = SHAPES[model]
    config = LlamaConfig(
        hidden_size=h,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        intermediate_size=inter,
        vocab_size=128256,
        tie_word_embeddings=tied,
        max_position_embeddings=131072,
        rope_parameters=rope(factor),
    )
    assert listed_parameters(model) == meta_count(config) == PUBLISHED[model]


def tiny_config(**kw):
    base = dict(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=160,
        vocab_size=256,
        max_position_embeddings=32,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        rope_parameters=rope(8.0, original=16),
    )
    base.update(kw)
    return LlamaConfig(**base)


def save_tiny(tmp_path, config, seed=0):
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # RMSNorm weights start at 1: make them visible to the gradient check
        for n, p in model.named_parameters():
            if "norm" in n or n.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(tmp_path / "hf")
    return model


def batch(tmp_path, vocab, b=2, t=32, seed=1):
    g = torch.Generator().manual_seed(seed)
    seq = torch.randint(0, vocab, (b, t + 1), generator=g)
    inp, target = seq[:, :-1].contiguous(), seq[:, 1:].contiguous()
    torch.save({"input": inp, "target": target}, tmp_path / "b.pt")
    return inp, target


def run_dtune(tmp_path, extra=(), out="out.pt", init=True):
    """One training step of hf:DIR (from its checkpoint when `init`, else from dtune's own)."""
    hf = str(tmp_path / "hf")
    dtune_models(
        "--threads",
        str(torch.get_num_threads()),
        "parity",
        "--model",
        f"hf:{hf}",
        *(["--init-from", hf] if init else []),
        "--batch",
        str(tmp_path / "b.pt"),
        "--out",
        str(tmp_path / out),
        *extra,
    )
    return torch.load(tmp_path / out, weights_only=False)


def rel_err(got, want):
    scale = want.abs().max().clamp_min(1e-12)
    return ((got - want).abs().max() / scale).item()


CASES = {
    "untied-gqa-rope-scaling": {},
    "tied": {"tie_word_embeddings": True},
    "no-rope-scaling": {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
    "mha-attention-bias": {"num_key_value_heads": 4, "attention_bias": True},
}


@pytest.mark.parametrize("case", list(CASES))
def test_logits_loss_and_gradients_equal_transformers(tmp_path, case):
    config = tiny_config(**CASES[case])
    model = save_tiny(tmp_path, config)
    inp, target = batch(tmp_path, config.vocab_size)
    got = run_dtune(tmp_path)
    model.train()
    logits = model(input_ids=inp).logits
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), target.reshape(-1))
    loss.backward()
    assert rel_err(got["logits"], logits.detach()) <= LOGITS_TOL, rel_err(got["logits"], logits.detach())
    assert abs(got["loss"].item() - loss.item()) <= LOSS_TOL * abs(loss.item()), (got["loss"], loss)
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert {k[5:] for k in got if k.startswith("grad.")} == set(grads)
    worst = max((rel_err(got["grad." + n], g), n) for n, g in grads.items())
    assert worst[0] <= GRAD_TOL, worst


def test_hf_config_count_equals_transformers(tmp_path):
    config = tiny_config(attention_bias=True, mlp_bias=True, head_dim=24)
    save_tiny(tmp_path, config)
    assert listed_parameters(f"hf:{tmp_path / 'hf'}") == meta_count(config)


def activation_run(tmp_path, layers, mode):
    return run_dtune(
        tmp_path,
        ["--layers", str(layers), "--activation-checkpoint", mode],
        out=f"ac-{layers}-{mode}.pt",
        init=False,
    )


def test_activation_checkpointing_changes_nothing_computed_and_keeps_one_tensor_a_layer(tmp_path):
    config = tiny_config(num_hidden_layers=4)
    save_tiny(tmp_path, config)
    inp, _ = batch(tmp_path, config.vocab_size, b=2, t=32)
    runs = {(L, m): activation_run(tmp_path, L, m) for L in (2, 4) for m in ("none", "full", "selective")}
    for L in (2, 4):
        base = runs[(L, "none")]
        for m in ("full", "selective"):
            other = runs[(L, m)]
            assert torch.equal(other["logits"], base["logits"]) and torch.equal(other["loss"], base["loss"])
            for k in base:
                if k.startswith("grad."):
                    assert torch.equal(other[k], base[k]), (m, k)
            assert other["recompute_seconds"].item() > 0
        assert base["recompute_seconds"].item() == 0

    def per_layer(mode):  # activation bytes are affine in the layer count
        return (runs[(4, mode)]["activation_bytes"].item() - runs[(2, mode)]["activation_bytes"].item()) / 2

    block_output = inp.numel() * config.hidden_size * 4  # (B, T, C) fp32
    assert per_layer("full") == block_output
    # Without checkpointing a layer keeps its norms' inputs, q, k, v before and after the rotation,
    # the attention's output and statistics, and the MLP's gate, up and product: many times more.
    assert per_layer("none") >= 8 * block_output, per_layer("none") / block_output
    assert block_output < per_layer("selective") < per_layer("none")


def write_safetensors(path, tensors, lie=None):
    """A safetensors file by the format's rules (REFERENCE.md); `lie` edits the header first."""
    header, data, offset = {}, b"", 0
    for name, t in tensors.items():
        raw = t.contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        data += raw
        offset += len(raw)
    if lie:
        lie(header)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def refused(tmp_path, init_from, model=None):
    model = model or f"hf:{tmp_path / 'hf'}"
    r = dtune_models(
        "parity",
        "--model",
        model,
        "--init-from",
        str(init_from),
        "--batch",
        str(tmp_path / "b.pt"),
        "--out",
        str(tmp_path / "never.pt"),
        check=False,
    )
    assert r.returncode == 2, r.stderr
    assert not (tmp_path / "never.pt").exists()
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    return r.stderr


def test_bad_checkpoints_and_configs_are_refused_naming_what_is_wrong(tmp_path):
    config = tiny_config()
    model = save_tiny(tmp_path, config)
    batch(tmp_path, config.vocab_size)
    state = {k: v.detach() for k, v in model.state_dict().items()}
    good = tmp_path / "hf" / "model.safetensors"
    # truncated: the file ends inside the last tensor
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(good.read_bytes()[:-100])
    assert "truncated" in refused(tmp_path, cut)

    # a header that lies about a tensor's size (shape says more than its offsets hold)
    def bigger(h):
        h["model.norm.weight"]["shape"] = [128]

    liar = tmp_path / "liar.safetensors"
    write_safetensors(liar, state, lie=bigger)
    assert "model.norm.weight" in refused(tmp_path, liar)

    # two tensors claiming the same bytes
    def overlap(h):
        h["model.norm.weight"]["data_offsets"] = list(h["model.layers.0.input_layernorm.weight"]["data_offsets"])

    twice = tmp_path / "twice.safetensors"
    write_safetensors(twice, state, lie=overlap)
    assert "overlap" in refused(tmp_path, twice)

    # a checkpoint of another shape: the message names the tensor
    other = save_tiny(tmp_path / "other", tiny_config(intermediate_size=96))
    del other
    err = refused(tmp_path, tmp_path / "other" / "hf")
    assert "mlp.gate_proj.weight" in err and "shape" in err

    # a config whose head count does not divide the width, and an unknown field
    bad = tmp_path / "bad"
    bad.mkdir()
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**cfg, "num_attention_heads": 5, "head_dim": None}))
    assert "num_attention_heads" in refused(tmp_path, good, model=f"hf:{bad}")
    (bad / "config.json").write_text(json.dumps({**cfg, "sliding_window": 4096}))
    assert "sliding_window" in refused(tmp_path, good, model=f"hf:{bad}")
    (bad / "config.json").write_text(json.dumps({**cfg, "architectures": ["MistralForCausalLM"]}))
    assert "MistralForCausalLM" in refused(tmp_path, good, model=f"hf:{bad}")
