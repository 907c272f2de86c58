"""What dtune must not store or print verbatim, the Python twin of core/redact.h (the same rule, so
a sweep's records say what the binaries' provenance says): the value of an environment variable
whose name contains TOKEN, SECRET, PASSWORD, PASSWD, KEY, CREDENTIAL or JWT (case-insensitive) is
REDACTED; any other value loses the user-info of its URLs (s3://user:pass@host -> s3://host).
Names are kept, so a reader still sees that a variable was set. Every writer and printer of a
point's environment (the sweep manifest, state logs, merged.h5, tune.json, `sweep plan`, the
report and its blocks to paste) goes through these functions; the launched process alone gets
the real values (runner.launch_command)."""

from __future__ import annotations

import re

REDACTED = "<redacted>"  # core/redact.h kRedacted
_SECRET_PARTS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL", "JWT")
# scheme://user[:password]@ ; the authority ends at '/', '?', '#' or whitespace, the user-info at
# its last '@' (as core/redact.cc strip_url_userinfo).
_USERINFO = re.compile(r"(://)[^/?#\s]*@")


def is_secret_name(name: str) -> bool:
    upper = str(name).upper()
    return any(p in upper for p in _SECRET_PARTS)


def strip_url_userinfo(text: str) -> str:
    return _USERINFO.sub(r"\1", str(text))


def recordable_env_value(name: str, value) -> str:
    """The value to store or print for environment variable `name`."""
    return REDACTED if is_secret_name(name) else strip_url_userinfo(str(value))


def recordable_env(env: dict) -> dict:
    """An environment mapping as it may be stored or printed."""
    return {k: recordable_env_value(k, v) for k, v in (env or {}).items()}


def recordable_values(values: dict) -> dict:
    """A point's axis values ({"--batch": 4, "NCCL_SOCKET_TOKEN": "..."}): environment axes
    with a secret name redacted (flags, launch keys and `topology` are not variables), and every
    text value without URL user-info."""
    out = {}
    for k, v in (values or {}).items():
        if not str(k).startswith("-") and is_secret_name(k):
            v = REDACTED
        out[k] = strip_url_userinfo(v) if isinstance(v, str) else v
    return out


def recordable_point(point: dict) -> dict:
    """A point's JSON (spec.Point.to_json, a manifest entry, merged.h5's `point` attribute) with its
    `env` and `values` redacted; everything else as it was."""
    out = dict(point)
    if isinstance(out.get("env"), dict):
        out["env"] = recordable_env(out["env"])
    if isinstance(out.get("values"), dict):
        out["values"] = recordable_values(out["values"])
    return out


def recordable_argv(argv: list) -> list:
    """A command line as it may be stored or printed: the value of every `NAME=value` token (a
    shell assignment, mpirun's `-x NAME=value`) through recordable_env_value."""
    out = []
    for t in map(str, argv):
        name, eq, value = t.partition("=")
        if eq and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            t = f"{name}={recordable_env_value(name, value)}"
        else:
            t = strip_url_userinfo(t)
        out.append(t)
    return out


def fill_in_note(names) -> str:
    """The line above a block to paste whose variables were redacted: which ones to set."""
    names = sorted(names)
    return (
        f"# fill in: export {' '.join(n + '=...' for n in names)} before pasting (redacted: "
        f"{'its value is' if len(names) == 1 else 'their values are'} not recorded; mpirun -x NAME passes yours)"
    )
