"""A dtune-train run's device mesh (results/SCHEMA.md `mesh_*`): its degrees on the data, pipeline
and tensor axes and the order in which consecutive ranks fill them (innermost first), read from the
run's attributes or, in files written before them, derived from `pipeline_stages` and
`pipeline_layout`; how the order enters a configuration's identity, and how a mesh is shown
("dp2×pp2 (tp,pp,dp)").
"""

from __future__ import annotations

from dataclasses import dataclass

AXES = ("tp", "pp", "dp")
DEFAULT_ORDER = "tp,pp,dp"  # dtune-train's default, --pipeline-layout within-node
# --pipeline-layout's two names for an order (any other value of the attribute is read as an order).
LAYOUT_ORDER = {"within-node": "tp,pp,dp", "across-nodes": "tp,dp,pp"}
# Every order, the default first and --pipeline-layout across-nodes second: of several orders that
# place ranks alike, a configuration is named by the first.
ORDERS = ("tp,pp,dp", "tp,dp,pp", "pp,tp,dp", "pp,dp,tp", "dp,tp,pp", "dp,pp,tp")


@dataclass(frozen=True)
class Mesh:
    """Degrees as recorded (int, or the text of a value that is not one) and the order."""

    dp: object
    pp: object
    tp: object
    order: str

    def degree(self, axis: str):
        return {"dp": self.dp, "pp": self.pp, "tp": self.tp}[axis]


def _int(v):
    try:
        f = float(v)
        return int(f) if f.is_integer() else str(v)
    except (TypeError, ValueError):
        return str(v)


def mesh_of(attrs: dict, world=None) -> Mesh:
    """The mesh of a train run from its attributes: mesh_dp, mesh_pp, mesh_tp and mesh_order where
    written; else pp = pipeline_stages (1 before pipelines), tp = 1, dp = world_size / (pp × tp)
    (`world`: the ranks, where the attributes lack world_size) and the order of pipeline_layout
    (within-node: tp,pp,dp; across-nodes: tp,dp,pp). A NaN (a table row of a file that lacks the
    attribute) counts as absent."""
    attrs = {k: v for k, v in attrs.items() if not (isinstance(v, float) and v != v)}
    pp = _int(attrs.get("mesh_pp", attrs.get("pipeline_stages", 1)))
    tp = _int(attrs.get("mesh_tp", 1))
    if "mesh_dp" in attrs:
        dp = _int(attrs["mesh_dp"])
    else:
        w = _int(attrs.get("world_size", world))
        ok = all(isinstance(x, int) and x > 0 for x in (w, pp, tp))
        dp = w // (pp * tp) if ok and w % (pp * tp) == 0 else None
    layout = str(attrs.get("pipeline_layout", "within-node"))
    order = str(attrs.get("mesh_order", LAYOUT_ORDER.get(layout, layout)))
    return Mesh(dp, pp, tp, order)


def canonical_order(m: Mesh) -> str:
    """The order as a configuration's identity holds it. Ranks are placed by the relative order
    of the axes of degree > 1 only (an axis of degree 1 has one coordinate), so orders that agree
    on those are one configuration, named by the first of ORDERS that agrees: with one such axis
    or none, every order is DEFAULT_ORDER. An order that is no permutation of tp,pp,dp, or a
    degree not known, is kept as written."""
    if m.order not in ORDERS:
        return m.order
    wide = [a for a in AXES if not (isinstance(m.degree(a), int) and m.degree(a) == 1)]
    key = [a for a in m.order.split(",") if a in wide]
    return next(o for o in ORDERS if [a for a in o.split(",") if a in wide] == key)


def mesh_text(m: Mesh) -> str:
    """The mesh as reports show it: the degrees above 1 (dp, pp, tp; "?" for one not known), then
    the order where it places ranks (two axes above 1): "dp4", "dp2×pp2 (tp,pp,dp)", "pp2", "dp1"
    on one rank."""
    parts = [f"{a}{'?' if m.degree(a) is None else m.degree(a)}" for a in ("dp", "pp", "tp") if m.degree(a) != 1]
    wide = [a for a in AXES if m.degree(a) != 1]
    text = "×".join(parts) or "dp1"
    return f"{text} ({canonical_order(m)})" if len(wide) >= 2 else text


def fields_mesh(fields: dict) -> Mesh:
    """The mesh of a configuration's identity (identity.MESH_FIELDS and the ranks `np`)."""
    pp, tp, world = (_int(fields.get(k, 1)) for k in ("mesh_pp", "mesh_tp", "np"))
    ok = all(isinstance(x, int) and x > 0 for x in (world, pp, tp)) and world % (pp * tp) == 0
    return Mesh(world // (pp * tp) if ok else None, pp, tp, str(fields.get("mesh_order", DEFAULT_ORDER)))
