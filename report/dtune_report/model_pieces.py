"""Which parameters each piece of a model uses (models/pieces.h: the chain that dtune-train --shard
zero3 gathers units around, piece by piece), rebuilt from the model's name (an hf:PATH model's
config.json when it can be read here) and its parameter count, for the zero3 state memory
(sharding.gathered_peak). The layouts follow models/gpt.cc, models/llama.cc and models/resnet.cc
Model::pieces() and the parameters' model order (named_parameters):

- GPT (4 + 12·L parameters): `embed` uses wte and wpe (0, 1); block i its 12 parameters
  (2 + 12i ..); `head` the final LayerNorm's two (the last two) and the tied wte (0);
- Llama (LlamaForCausalLM's order: embed_tokens, k per layer, model.norm, lm_head unless tied;
  k = 9: q, k, v, o, gate, up, down and the two norms, +4 biases with attention_bias, +3 with
  mlp_bias): `embed` embed_tokens (0); `layers.i` its k (1 + k·i ..); `head` model.norm and
  lm_head (the last two), or model.norm (the last) and the tied embed_tokens (0);
- ResNet: `stem` conv1 and bn1 (3); each residual block its convs and batch norms (6 basic, 9
  bottleneck, 3 more with a downsample shortcut), its unit its stage (`layer1`..); `head` fc (2).

A layout whose count differs from the file's (another --layers, an unknown model) is None: the
caller says so and takes each unit as a piece of its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

# ResNet depth -> (blocks per stage, parameters per block, whether stage 1's first block has a
# downsample): models/resnet_config.cc; bottlenecks change width in stage 1 too (64 -> 256).
_RESNETS = {
    "resnet18": ((2, 2, 2, 2), 6, False),
    "resnet34": ((3, 4, 6, 3), 6, False),
    "resnet50": ((3, 4, 6, 3), 9, True),
    "resnet101": ((3, 4, 23, 3), 9, True),
    "resnet152": ((3, 8, 36, 3), 9, True),
}

# The named Llamas (models/llama_config.cc): whether the head is the token embedding.
_LLAMAS = {
    "llama3-tiny": False,
    "llama3.2-1b": True,
    "llama3.2-3b": True,
    "llama3.1-8b": False,
    "llama3.1-70b": False,
    "llama3.1-405b": False,
}
_HF = "hf:"  # --model hf:PATH, a LlamaForCausalLM config.json or its directory


@dataclass(frozen=True)
class Pieces:
    """Per piece in forward order: the parameters it uses (indices in model order) and its
    block unit's name (consecutive pieces of one name are one `--shard-unit block` unit)."""

    uses: tuple  # (pieces,) of tuples of parameter indices
    unit: tuple  # (pieces,) of str


def _gpt(n: int) -> Pieces | None:
    if n < 4 or (n - 4) % 12:
        return None
    blocks = (n - 4) // 12
    uses = [(0, 1), *(tuple(range(2 + 12 * i, 14 + 12 * i)) for i in range(blocks)), (n - 2, n - 1, 0)]
    return Pieces(tuple(uses), ("embed", *(f"h.{i}" for i in range(blocks)), "head"))


def _llama(n: int, tied: bool, per_layer: int) -> Pieces | None:
    rest = n - (2 if tied else 3)
    if rest < 0 or rest % per_layer:
        return None
    layers = rest // per_layer
    head = (n - 1, 0) if tied else (n - 2, n - 1)
    uses = [(0,), *(tuple(range(1 + per_layer * i, 1 + per_layer * (i + 1))) for i in range(layers)), head]
    return Pieces(tuple(uses), ("embed", *(f"layers.{i}" for i in range(layers)), "head"))


def hf_config(model: str) -> dict | None:
    """The config.json that `--model hf:PATH` names (PATH the file or its directory), as a dict;
    None for another model or a file that cannot be read as a JSON object (dtune-train says why)."""
    model = str(model or "")
    if not model.startswith(_HF):
        return None
    path = Path(model[len(_HF) :])
    if path.is_dir():
        path = path / "config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def tied_embedding(model: str) -> bool | None:
    """Whether `model`'s output head is its token embedding: every GPT-2, llama3.2-1b and -3b, an
    hf: config with tie_word_embeddings (LlamaConfig's default: untied); None when unknown (a
    model of no such family, an hf: config that cannot be read)."""
    model = str(model or "")
    if model.startswith("gpt2-"):
        return True
    if model in _LLAMAS:
        return _LLAMAS[model]
    if model in _RESNETS:
        return False
    config = hf_config(model)
    return None if config is None else bool(config.get("tie_word_embeddings", False))


def _resnet(name: str, n: int) -> Pieces | None:
    stages, per_block, first_down = _RESNETS[name]
    uses, units, k = [(0, 1, 2)], ["stem"], 3
    for s, count in enumerate(stages):
        for b in range(count):
            width = per_block + (3 if b == 0 and (s > 0 or first_down) else 0)
            uses.append(tuple(range(k, k + width)))
            units.append(f"layer{s + 1}")
            k += width
    uses.append((k, k + 1))
    units.append("head")
    return Pieces(tuple(uses), tuple(units)) if k + 2 == n else None


def model_pieces(model: str, n_params: int) -> Pieces | None:
    """The pieces of `model` (dtune-train --model) with `n_params` parameters; None when unknown."""
    model = str(model or "")
    if model.startswith("gpt2-"):
        return _gpt(n_params)
    if model in _RESNETS:
        return _resnet(model, n_params)
    if model in _LLAMAS:
        return _llama(n_params, _LLAMAS[model], 9)
    config = hf_config(model)
    if config is not None:
        per_layer = 9 + 4 * bool(config.get("attention_bias")) + 3 * bool(config.get("mlp_bias"))
        return _llama(n_params, bool(config.get("tie_word_embeddings", False)), per_layer)
    return None


def block_units(pieces: Pieces) -> list:
    """`--shard-unit block`'s units as train/zero3.cc forms them: consecutive pieces of one unit
    name make one unit, which owns the parameters its pieces are the first to use. [[parameter
    indices] per unit] in backward order (reverse unit order, each unit's parameters descending),
    as sharding.units_of gives them; a unit that owns none is left out (it gathers nothing)."""
    units, owner = [], {}
    for i, (params, name) in enumerate(zip(pieces.uses, pieces.unit, strict=True)):
        if i == 0 or name != pieces.unit[i - 1]:
            units.append([])
        for k in params:
            if k not in owner:
                owner[k] = len(units) - 1
                units[-1].append(k)
    return [sorted(u, reverse=True) for u in reversed(units) if u]
