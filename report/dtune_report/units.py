"""Numbers as a reader wants them: sizes in B/KiB/MiB/GiB (2^10 steps, as dtune's flags take
them), other values to three significant digits, changes as signed percentages with their
interval, and settings by the name a user types."""

from __future__ import annotations

import math

_SIZE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB"]


def fmt_sig(x, digits: int = 3) -> str:
    """`digits` significant digits but every digit before the point, no exponent below 1e6 and no
    trailing zeros: 1234.6 -> 1235, 15.83 -> 15.8, 0.01234 -> 0.0123, 25.0 -> 25."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return str(x)
    if not math.isfinite(x):
        return "n/a" if math.isnan(x) else str(x)
    if x == 0:
        return "0"
    if abs(x) >= 1e6:
        return f"{x:.{digits - 1}e}"
    decimals = max(digits - 1 - math.floor(math.log10(abs(x))), 0)
    text = f"{round(x, decimals):.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def fmt_bytes(n) -> str:
    """1536 -> '1.5 KiB', 4194304 -> '4 MiB' (three significant digits)."""
    n = float(n)
    k = 0
    while abs(n) >= 1024 and k < len(_SIZE_UNITS) - 1:
        n /= 1024
        k += 1
    return f"{fmt_sig(n)} {_SIZE_UNITS[k]}"


def fmt_mib(mib) -> str:
    """A size given in MiB (bucket caps), readably: 0.25 -> '256 KiB', 25 -> '25 MiB'."""
    return fmt_bytes(float(mib) * 2**20)


def fmt_pct(ratio: float) -> str:
    """A ratio as a signed change: 1.234 -> '+23%', 0.987 -> '-1.3%' (two significant digits
    below 10%)."""
    pct = (ratio - 1) * 100
    text = fmt_sig(abs(pct), 2 if abs(pct) < 10 else 3)
    return ("+" if pct >= 0 else "-") + text + "%"


def fmt_change(ratio: float, low: float, high: float) -> str:
    """'+23% [+19%, +27%]'."""
    return f"{fmt_pct(ratio)} [{fmt_pct(low)}, {fmt_pct(high)}]"


# Identity fields shown with a unit.
_MIB_FIELDS = {"bucket_mb", "first_bucket_mb", "--cache-mb", "--cache-block-mb"}
_NAMES = {
    "bucket_mb": "bucket size",
    "first_bucket_mb": "first bucket size",
    "workers": "loader workers",
    "prefetch": "prefetch",
    "precision": "precision",
    "batch": "batch per rank",
    "global_batch": "global batch",
    "local_sgd_every": "local SGD every",
    "shard": "sharding",
    "accum_steps": "accumulation steps",
    "data_ms": "data wait",
    "h2d_ms": "host-to-device copy",
    "forward_ms": "forward",
    "backward_ms": "backward",
    "comm_exposed_ms": "exposed communication",
    "tp_comm_ms": "tensor-parallel communication",
    "optimizer_ms": "optimizer",
    "scaler_ms": "loss scaler",
}


def setting_name(field: str) -> str:
    return _NAMES.get(field, field.lstrip("-").replace("_", " ") if field.islower() else field)


def setting_text(field: str, value) -> str:
    if field in _MIB_FIELDS:
        try:
            return fmt_mib(value)
        except (TypeError, ValueError):
            return str(value)
    if value is None:
        return "unset"
    return str(value)
