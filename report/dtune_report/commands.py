"""The command that reproduces a measured configuration, to paste into a shell: the launcher
(`mpirun -np N`, with `-x NAME=value` for every environment setting the run recorded; for a run
whose provenance shows it ran under Slurm (SLURM_JOB_ID recorded), `srun --mpi=pmix -n N -N nodes`
as `dtune sweep` launches there, preceded by `NAME=value` assignments, which srun exports), the binary
as `build/bin/<binary>` (run from the checkout) and every flag of the measured run, the model's
shape flags included, less where the results went (--output, --overwrite, --no-output), plus the
settings the run recorded as attributes that its arguments left at their defaults (so the block is
complete even for a run set through the environment). A variable whose value is redacted
(redact.py: a secret, recorded as `<redacted>`) is passed by name (`-x NAME`: mpirun takes the
user's value), and a comment above the block names the variables to export first. A run of `--batch auto` (and
`--batch-sweep`) is reproduced at the batch it measured. Every token goes through
shlex.quote: a recorded value is data and reaches the program as written, never the shell."""

from __future__ import annotations

import os
import re
import shlex

from .identity import LAUNCHER_SET_ENV, parse_flags, settings_env
from .redact import REDACTED, fill_in_note

_OUTPUT_FLAGS = {"--output", "--overwrite", "--no-output"}
# dtune-train's flags without a value (benchmarks/train/options.cc add_flag), set through the
# environment as DTUNE_TRAIN_<NAME>=1.
_BOOL_FLAGS = {"--batch-sweep", "--channels-last", "--mllog", "--strict"}
_FLAG_ENV = ("DTUNE_TRAIN_", "DTUNE_COMM_")
_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"^-\d")


def _groups(tokens: list) -> list:
    """Tokens grouped as a flag and its value(s): [['--model', 'resnet18'], ['--overlap', 'on']]."""
    out = []
    for t in map(str, tokens):
        if t.startswith("-") and not _NUMBER.match(t) or not out:
            out.append([t])
        else:
            out[-1].append(t)
    return out


def _flag(group: list) -> str:
    return group[0].split("=", 1)[0]


# Settings dtune-train records as run attributes, by flag, with the flag's default
# (train/config.h): the command carries the measured value where the arguments lack the flag and
# the value is not the default, or where they hold `auto`.
ATTR_FLAGS = [
    ("batch", "--batch", None),
    ("accum_steps", "--accum-steps", "1"),
    ("precision", "--precision", "fp32"),
    ("weights_dtype", "--weights-dtype", "fp32"),
    ("bucket_mb", "--bucket-mb", "25"),
    ("first_bucket_mb", "--first-bucket-mb", "1"),
    ("overlap", "--overlap", "on"),
    ("compression", "--compression", "none"),
    ("local_sgd_every", "--local-sgd", "0"),
    ("shard", "--shard", "none"),
    ("workers", "--workers", "2"),
    ("prefetch", "--prefetch", "4"),
]


def _text(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _with_attributes(groups: list, attrs: dict, binary: str) -> list:
    if binary != "dtune-train":
        return groups
    have = {_flag(g): i for i, g in enumerate(groups)}
    synthetic = str(attrs.get("data", "synthetic")) == "synthetic"
    for attr, flag, default in ATTR_FLAGS:
        if attr not in attrs or (attr in ("workers", "prefetch") and synthetic):
            continue
        if flag == "--batch" and "--global-batch" in have:
            continue
        value = _text(attrs[attr])
        if flag in have:
            g = groups[have[flag]]
            if len(g) > 1 and g[-1] == "auto":
                groups[have[flag]] = [flag, value]
        elif value != default and not (default is not None and _same_number(value, default)):
            groups.append([flag, value])
    return groups


def _same_number(a: str, b: str) -> bool:
    try:
        return float(a) == float(b)
    except ValueError:
        return False


def run_command(config) -> tuple:
    """(binary, argument groups, env settings, ranks, ranks_per_node) of a measured configuration
    (configs.Config): from its sweep point when it has one, else from the recorded command line,
    with DTUNE_TRAIN_* / DTUNE_COMM_* fallbacks turned back into flags."""
    env = dict(config.env or {})
    p = config.point or {}
    env.update(p.get("env", {}))
    ranks, per_node = p.get("ranks") or config.attrs.get("world_size"), p.get("ranks_per_node")
    if "args" in p:
        binary, tokens = p.get("binary", "dtune-train"), list(p["args"])
    else:
        argv = shlex.split(config.command_line or "")
        binary, tokens = (os.path.basename(argv[0]) if argv else "dtune-train"), argv[1:]
        given = parse_flags(tokens, binary)
        for k, v in sorted(env.items()):
            if k.startswith(_FLAG_ENV):
                flag = "--" + k.split("_", 2)[2].lower().replace("_", "-")
                if flag not in given and flag not in _OUTPUT_FLAGS:
                    tokens += [flag] if flag in _BOOL_FLAGS else [flag, v]
    groups = [g for g in _groups(tokens) if _flag(g) not in _OUTPUT_FLAGS]
    groups = [g for g in groups if _flag(g) != "--batch-sweep"]  # reproduced at the batch it measured
    groups = _with_attributes(groups, config.attrs, binary)
    env = {k: v for k, v in settings_env(env).items() if k not in LAUNCHER_SET_ENV}  # mpirun sets these
    return binary, groups, env, int(ranks or 1), per_node


def launcher_tokens(ranks: int, per_node, env: dict) -> list:
    """`mpirun -np N [--map-by ppr:K:node] -x NAME=value ...` (names the shell cannot take left out)."""
    cmd = ["mpirun", "-np", str(ranks)]
    if per_node:
        cmd += ["--map-by", f"ppr:{per_node}:node"]
    for k, v in sorted(env.items()):
        if _SHELL_NAME.fullmatch(k):
            cmd += ["-x", k if v == REDACTED else f"{k}={v}"]  # redacted: mpirun passes the user's value
    return cmd


def from_slurm(config) -> bool:
    """Whether the run was launched by Slurm: its recorded environment holds SLURM_JOB_ID."""
    return "SLURM_JOB_ID" in (config.env or {})


def _nodes(config):
    p = config.point or {}
    if p.get("nodes"):
        return int(p["nodes"])
    hosts = [h for h in str(config.fields.get("machine", "")).split(",") if h]
    return len(hosts) or None


def srun_tokens(ranks: int, nodes, per_node) -> list:
    """`srun --mpi=pmix -n N [-N nodes] [--ntasks-per-node=K]`, as dtune sweep launches a point."""
    cmd = ["srun", "--mpi=pmix", "-n", str(ranks)]
    if nodes:
        cmd += ["-N", str(nodes)]
    if per_node:
        cmd.append(f"--ntasks-per-node={per_node}")
    return cmd


def reproduce_command(config) -> str:
    """The whole command, one flag per line, lines joined by ` \\` so that it pastes as one; a
    recorded variable whose name the shell cannot take is named in a comment above it (printed
    with ascii(), so it cannot end the comment line)."""
    binary, groups, env, ranks, per_node = run_command(config)
    left_out = [
        f"# left out {ascii(k)}: not a shell variable name" for k in sorted(env) if not _SHELL_NAME.fullmatch(k)
    ]
    secret = [k for k, v in sorted(env.items()) if v == REDACTED and _SHELL_NAME.fullmatch(k)]
    left_out += [fill_in_note(secret)] if secret else []
    if from_slurm(config):
        # An assignment word: the name bare (a shell name), the value quoted; a redacted one is
        # left to the user's environment, which srun exports.
        lines = [
            f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()) if _SHELL_NAME.fullmatch(k) and k not in secret
        ]
        lines.append(" ".join(map(shlex.quote, srun_tokens(ranks, _nodes(config), per_node))))
    else:
        launch = launcher_tokens(ranks, per_node, env)
        lines = [" ".join(map(shlex.quote, launch[:3]))]
        lines += [" ".join(map(shlex.quote, launch[k : k + 2])) for k in range(3, len(launch), 2)]
    lines.append(shlex.quote(f"build/bin/{binary}"))
    lines += [" ".join(map(shlex.quote, g)) for g in groups]
    return "\n".join(left_out + [" \\\n    ".join(lines)])


def command_tokens(text: str) -> list:
    """The argv a pasted block gives (backslash-newline continuations joined, as a shell does)."""
    return shlex.split(text.replace("\\\n", " "))


def changes(base, cand) -> list:
    """What to change from the baseline's command to the candidate's, shell-quoted: flags whose
    value differs or that only the candidate has (`--precision bf16`), `drop --x` for flags only the
    baseline has, `NAME=value` for environment settings added or changed, `unset NAME` for those
    removed."""
    bb, bg, benv, br, _ = run_command(base)
    cb, cg, cenv, cr, _ = run_command(cand)
    bflags, cflags = {_flag(g): g for g in bg}, {_flag(g): g for g in cg}
    out = []
    if br != cr:
        out.append(f"-np {cr}")
    out += [" ".join(map(shlex.quote, g)) for f, g in cflags.items() if bflags.get(f) != g]
    out += [f"drop {shlex.quote(f)}" for f in bflags if f not in cflags]
    out += [shlex.quote(f"{k}={v}") for k, v in sorted(cenv.items()) if benv.get(k) != v]
    out += [f"unset {shlex.quote(k)}" for k in sorted(benv) if k not in cenv]
    return out
