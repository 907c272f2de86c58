"""A sweep's `constraints:` block: comparisons every point must satisfy, checked when the sweep is
planned, so that points breaking one are left out before anything runs (as `exclude` rules are).

Each constraint is one string `LEFT OP RIGHT`, OP one of <= < >= > == !=, each side a product of
terms joined by `*`: a flag (`--bucket-mb`), an environment variable (`NCCL_NTHREADS`), a launch
key (`ranks`, `nodes`, `ranks_per_node`), a number, or a word compared as text (`fp16`). A term
takes the point's value: its axis value, else its fixed argument, else the binary's default
(rules.py). Examples:

    constraints:
      - --first-bucket-mb <= --bucket-mb
      - --batch * --context <= 4096        # a memory cap: tokens per rank per step
      - --batch * ranks <= 64

    >>> c = parse_constraint("--batch * ranks <= 64")
    >>> holds(c, {"--batch": "16", "ranks": 4})
    True
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from .rules import COMM_DEFAULTS, TRAIN_DEFAULTS, parse_args
from .safe_yaml import SweepError

OPS = {
    "<=": lambda a, b: a <= b,
    ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    ">": lambda a, b: a > b,
}
LAUNCH = ("ranks", "nodes", "ranks_per_node")
DEFAULTS = {"dtune-train": TRAIN_DEFAULTS, "dtune-comm": COMM_DEFAULTS, "dtune-data": {}}
_TERM = re.compile(r"^(--[a-z0-9][a-z0-9_-]*|-[a-zA-Z]|[A-Za-z0-9_.+:,]+)$")
_VARIABLE = re.compile(r"^(NCCL_|UCX_|OMP_|OMPI_|DTUNE_|CUDA_|MKL_)[A-Za-z0-9_]*$")
_SPLIT = re.compile(r"\s*(<=|>=|==|!=|<|>)\s*")


@dataclass
class Constraint:
    text: str
    left: list  # terms multiplied together
    op: str
    right: list


def parse_constraint(text) -> Constraint:
    """A Constraint from its text; ValueError naming what is wrong."""
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not a string; write e.g. '--first-bucket-mb <= --bucket-mb'")
    parts = _SPLIT.split(text.strip())
    if len(parts) != 3:
        raise ValueError(f"{text!r}: write one comparison LEFT OP RIGHT with OP one of {' '.join(OPS)}")
    sides = []
    for side in (parts[0], parts[2]):
        terms = [t.strip() for t in side.split("*")]
        for t in terms:
            if not _TERM.match(t):
                raise ValueError(
                    f"{text!r}: {t!r} is not a flag (--batch), a variable (NCCL_ALGO), ranks, nodes, "
                    f"ranks_per_node, a number or a word"
                )
        sides.append(terms)
    return Constraint(text.strip(), sides[0], parts[1], sides[1])


def _is_name(t: str) -> bool:
    return t.startswith("-") or t in LAUNCH or bool(_VARIABLE.match(t))


def names(c: Constraint) -> set:
    """The flags, variables and launch keys a constraint reads (numbers and words are literals)."""
    return {t for t in c.left + c.right if _is_name(t)}


def _value(term: str, values: dict):
    return values.get(term) if _is_name(term) else term


def _number(v):
    try:
        return Fraction(str(v))
    except (ValueError, ZeroDivisionError):
        return None


def holds(c: Constraint, values: dict) -> bool:
    """Whether the point with these values (term -> value) satisfies c. One term per side that is
    not a number compares as text (== and != only: e.g. `--precision != fp16`)."""
    sides = []
    for terms in (c.left, c.right):
        vals = [_value(t, values) for t in terms]
        nums = [_number(v) for v in vals]
        if all(n is not None for n in nums):
            prod = Fraction(1)
            for n in nums:
                prod *= n
            sides.append(prod)
        elif len(vals) == 1 and c.op in ("==", "!="):
            sides.append(str(vals[0]))
        else:
            raise ValueError(f"{c.text!r}: {' * '.join(map(str, vals))} is not a number")
    a, b = sides
    if type(a) is not type(b):
        a, b = str(a), str(b)
    return OPS[c.op](a, b)


def point_values(binary: str, args: list, env: dict, launch: dict) -> dict:
    """term -> value for one point: the binary's defaults, then its arguments, its environment and
    its launch shape."""
    out = dict(DEFAULTS.get(binary, {}))
    out.update({k: v for k, v in parse_args(args).items()})
    out.update(env)
    out.update(launch)
    return out


def check_names(file: str, where: str, constraints: list, binary: str, known: set) -> None:
    """Every term a constraint names must have a value for every point: an axis, a fixed argument,
    a default the rules know, or a launch key."""
    for c in constraints:
        for n in names(c):
            if n not in known and n not in DEFAULTS.get(binary, {}) and n not in LAUNCH:
                raise SweepError(
                    f"{file}: {where}: constraint {c.text!r} names {n}, which is neither an axis nor a fixed "
                    f"argument of this sweep (nor a default dtune knows): the constraint could not be checked"
                )
