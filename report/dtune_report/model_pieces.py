"""Which parameters each piece of a model uses (models/pieces.h: the chain that dtune-train --shard
zero3 gathers units around, piece by piece), rebuilt from the model's name and its parameter count,
for the zero3 state memory (sharding.gathered_peak). The layouts follow models/gpt.cc and
models/resnet.cc Model::pieces() and the parameters' model order (named_parameters):

- GPT (4 + 12·L parameters): `embed` uses wte and wpe (0, 1); block i its 12 parameters
  (2 + 12i ..); `head` the final LayerNorm's two (the last two) and the tied wte (0);
- ResNet: `stem` conv1 and bn1 (3); each residual block its convs and batch norms (6 basic, 9
  bottleneck, 3 more with a downsample shortcut), its unit its stage (`layer1`..); `head` fc (2).

A layout whose count differs from the file's (another --layers, an unknown model) is None: the
caller says so and takes each unit as a piece of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

# ResNet depth -> (blocks per stage, parameters per block, whether stage 1's first block has a
# downsample): models/resnet_config.cc; bottlenecks change width in stage 1 too (64 -> 256).
_RESNETS = {
    "resnet18": ((2, 2, 2, 2), 6, False),
    "resnet34": ((3, 4, 6, 3), 6, False),
    "resnet50": ((3, 4, 6, 3), 9, True),
    "resnet101": ((3, 4, 23, 3), 9, True),
    "resnet152": ((3, 8, 36, 3), 9, True),
}


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
