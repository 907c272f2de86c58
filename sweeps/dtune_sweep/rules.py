"""Cross-flag rules: the checks a binary makes between its flags (and against its number of ranks),
applied to every planned point at `dtune sweep plan` time, so that a sweep that would fail a point
on them stops before anything runs, naming the points and the rule. They mirror the binaries' own
checks (benchmarks/train/options.cc, benchmarks/comm/options.cc), which also list them in
`--help`; tests/smoke/test_new_user.py runs each rule's broken example (tests/sweeps/test_rules.py
CASES) through the real binary.

    >>> check_point("dtune-train", ["--bucket-mb", "0.25"], ranks=2)
    ['--first-bucket-mb (default 1) must be at most --bucket-mb (0.25)']
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from dtune_report.model_pieces import tied_embedding

# Defaults the rules need (as the binaries' --help shows them).
TRAIN_DEFAULTS = {
    "--bucket-mb": "25",
    "--first-bucket-mb": "1",
    "--batch": "8",
    "--accum-steps": "1",
    "--steps": "10",
    "--warmup-steps": "2",
    "--device": "cpu",
    "--precision": "fp32",
    "--backend": "mpi",
    "--weights-dtype": "fp32",
    "--local-sgd": "0",
    "--data": "synthetic",
    "--pipeline-stages": "1",
    "--tp": "1",
    "--schedule": "1f1b",
    "--virtual-stages": "1",
    "--shard": "none",
    "--model": "gpt2-tiny",
}
SHARD_MODES = ("zero1", "zero2", "zero3")  # --shard values other than none (DDP)
# The values the sharding flags take, as the binaries parse them (a value outside them fails the
# point at launch, exit 2): --shard and --reshard-after-forward are CLI11 IsMember choices
# (train/config.h kShardNames; on, off); --shard-prefetch a CLI11 integer (strtoll, base 0) in
# CLI::Range(0, 64) (benchmarks/train/options.cc); --shard-unit `block` or a strtod size in MiB in
# (0, 1 PiB] (models/shard_unit.cc, parse_shard_unit, which dtune-comm --pattern fsdp shares).
SHARD_NAMES = ("none", *SHARD_MODES)
RESHARD_NAMES = ("on", "off")
SHARD_PREFETCH_MAX = 64
MAX_SHARD_UNIT_MIB = float(1 << 30)  # models/shard_unit.h kMaxShardUnitMib: 1 PiB
_C_INTEGER = re.compile(r"[ \t\n\v\f\r]*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")
_C_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_C_HEX = re.compile(r"[+-]?0[xX]([0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)([pP][+-]?[0-9]+)?")
_C_SPECIAL = re.compile(r"[+-]?(inf|infinity|nan(\([0-9a-zA-Z_]*\))?)", re.IGNORECASE)
# The device mesh (train/mesh.h): --mesh-order names these axes once each; --pipeline-layout's two
# values are two of its orders.
MESH_AXES = ("tp", "pp", "dp")
LAYOUT_ORDERS = {"within-node": "tp,pp,dp", "across-nodes": "tp,dp,pp"}
COMM_DEFAULTS = {"-b": "32M", "-e": "32M", "-r": "0"}
COMM_ALIASES = {"--minbytes": "-b", "--maxbytes": "-e", "--root": "-r", "--backend": "--backend"}
_SIZE = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_args(args: list) -> dict:
    """Flags to their values (the last one wins, as CLI11 keeps it); a flag without a value maps
    to True. `--flag=value` is split."""
    out = {}
    i = 0
    while i < len(args):
        a = str(args[i])
        if a.startswith("-") and "=" in a and a.startswith("--"):
            k, v = a.split("=", 1)
            out[k] = v
        elif a.startswith("-") and not _is_number(a):
            nxt = str(args[i + 1]) if i + 1 < len(args) else None
            if nxt is not None and (not nxt.startswith("-") or _is_number(nxt)):
                out[a] = nxt
                i += 1
            else:
                out[a] = True
        i += 1
    return out


def _is_number(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


def _num(v) -> Fraction | None:
    try:
        return Fraction(str(v))
    except (ValueError, ZeroDivisionError):
        return None  # not a number: the binary's own parser will say so


def _size(v) -> int | None:
    s = str(v).strip().upper().removesuffix("IB").removesuffix("B")
    unit = s[-1:] if s[-1:] in ("K", "M", "G") else ""
    n = _num(s[: len(s) - len(unit)])
    return None if n is None else int(n * _SIZE[unit])


def c_integer(text: str) -> int | None:
    """The integer C's strtoll(text, &end, 0) reads when it reads all of `text` (CLI11's integer
    options): decimal, 0x hex or 0 octal, after white space; None otherwise."""
    m = _C_INTEGER.fullmatch(text)
    if m is None:
        return None
    digits = m.group(2)
    base = 16 if digits[:2] in ("0x", "0X") else 8 if digits.startswith("0") and len(digits) > 1 else 10
    return int(m.group(1) + (digits[2:] if base == 16 else digits), base)


def c_double(text: str) -> float | None:
    """The number C's strtod reads when it reads all of `text` (decimal or hex, inf and nan
    included, after white space); None otherwise."""
    s = text.lstrip(" \t\n\v\f\r")
    if _C_HEX.fullmatch(s):
        sign = -1.0 if s.startswith("-") else 1.0
        return sign * float.fromhex(s.lstrip("+-"))
    if _C_DECIMAL.fullmatch(s) or _C_SPECIAL.fullmatch(s):
        return float(s.split("(")[0])
    return None


def _as_given(flag: str, value) -> str:
    return flag if value is True else f"{flag} {value}"  # True: the flag without a value


def shard_unit_error(value) -> str | None:
    """Why the binaries refuse this --shard-unit (models/shard_unit.cc's message), or None."""
    mib = None if value is True else c_double(str(value))
    if value == "block" or (mib is not None and math.isfinite(mib) and 0 < mib <= MAX_SHARD_UNIT_MIB):
        return None
    return (
        f"{_as_given('--shard-unit', value)}: give block (one unit per transformer block or ResNet stage) "
        f"or a size in MiB greater than 0 and at most {MAX_SHARD_UNIT_MIB:.0f} (1 PiB), e.g. 4 or 0.5"
    )


def _shard_values(given: dict, choices: tuple) -> list[str]:
    """The sharding flags' values the binary's parser refuses: `choices` are (flag, names) pairs
    (--shard, --reshard-after-forward), then --shard-unit and --shard-prefetch."""
    bad = [
        f"{_as_given(flag, given[flag])}: give one of {', '.join(names)}"
        for flag, names in choices
        if flag in given and given[flag] not in names
    ]
    why = shard_unit_error(given["--shard-unit"]) if "--shard-unit" in given else None
    bad += [why] if why else []
    if "--shard-prefetch" in given:
        v = given["--shard-prefetch"]
        n = None if v is True else c_integer(str(v))
        if n is None or not 0 <= n <= SHARD_PREFETCH_MAX:
            bad.append(
                f"{_as_given('--shard-prefetch', v)}: give a whole number of units from 0 to {SHARD_PREFETCH_MAX}"
            )
    return bad


def _shown(flags: dict, given: dict, name: str) -> str:
    return f"{name} ({flags[name]})" if name in given else f"{name} (default {flags[name]})"


def _mesh(given: dict) -> list[str]:
    """The mesh flags' own rules (benchmarks/train/options.cc parse_mesh, its messages): --tp a
    positive whole number; --mesh-order a permutation of tp,pp,dp; --pipeline-layout, if given with it, the same
    order; --pp and --pipeline-stages one option, given once (CLI11 refuses it twice)."""
    bad = []
    if "--pp" in given and "--pipeline-stages" in given:
        bad.append("--pp and --pipeline-stages are one option (the pipeline's stages): give it once")
    tp = given.get("--tp", "1")
    if tp is True or (c_integer(str(tp)) or 0) < 1:  # a bare --tp reads as "True"
        bad.append(f"{_as_given('--tp', tp)}: give a whole number of tensor-parallel ranks, 1 or more")
    order = given.get("--mesh-order")
    if order is not None and sorted(str(order).split(",")) != sorted(MESH_AXES):  # bare: "True"
        named = "--mesh-order" if order is True else f"--mesh-order '{order}'"
        bad.append(
            f"{named}: give the axes tp, pp and dp once each, innermost first, e.g. tp,pp,dp (the default) or tp,dp,pp"
        )
    elif order is not None and given.get("--pipeline-layout") in LAYOUT_ORDERS:
        layout = given["--pipeline-layout"]
        if LAYOUT_ORDERS[layout] != order:
            bad.append(
                f"--pipeline-layout {layout} is --mesh-order {LAYOUT_ORDERS[layout]}, not {order}: give one of the two"
            )
    return bad


def _train(given: dict, ranks: int) -> list[str]:
    f = {**TRAIN_DEFAULTS, **given}
    pp_flag = "--pp" if "--pp" in given and "--pipeline-stages" not in given else "--pipeline-stages"
    f["--pipeline-stages"] = f.get(pp_flag)  # --pp is --pipeline-stages
    bad = _mesh(given)
    first, bucket = _num(f["--first-bucket-mb"]), _num(f["--bucket-mb"])
    if first is not None and bucket is not None and first > bucket:
        bad.append(f"{_shown(f, given, '--first-bucket-mb')} must be at most {_shown(f, given, '--bucket-mb')}")
    auto = f["--batch"] == "auto"
    if "--batch-sweep" in given and not auto:
        bad.append("--batch-sweep needs --batch auto")
    stages, tp = _num(f["--pipeline-stages"]), _num(f["--tp"])
    mesh = stages * tp if stages is not None and tp is not None and stages > 0 and tp > 0 else None
    if mesh is not None and ranks % mesh != 0:
        by = f"--tp ({f['--tp']}) x " if tp != 1 else ""
        bad.append(f"{by}{pp_flag} ({f['--pipeline-stages']}) must divide ranks ({ranks})")
    dp = ranks // mesh if mesh and ranks % mesh == 0 else ranks  # data-parallel ranks: the mesh's dp
    if "--micro-batches" in given and "--accum-steps" in given and f["--micro-batches"] != f["--accum-steps"]:
        bad.append("--micro-batches and --accum-steps differ: they are the same; keep one")
    micro = _num(f.get("--micro-batches", f["--accum-steps"]))
    virtual = _num(f["--virtual-stages"])
    if f["--schedule"] == "zb-v" and f["--backend"] == "nccl" and (stages or 1) > 1:
        bad.append("--schedule zb-v needs --backend mpi (the NCCL stage channel runs one way)")
    if "--stage-pieces" in given and given["--stage-pieces"] not in ("blocks", "ends"):
        bad.append(f"{_as_given('--stage-pieces', given['--stage-pieces'])}: choose blocks or ends")
    if f["--schedule"] != "interleaved" and virtual is not None and virtual > 1:
        bad.append("--virtual-stages > 1 needs --schedule interleaved")
    if f["--schedule"] == "interleaved" and stages is not None and stages > 1:
        if virtual is not None and virtual < 2:
            bad.append("--schedule interleaved needs --virtual-stages 2 or more")
        if micro is not None and (micro < stages or micro % stages != 0):
            bad.append(f"--schedule interleaved needs --micro-batches ({micro}) a multiple of {pp_flag}")
    if "--global-batch" in given:
        g, acc = _num(f["--global-batch"]), _num(f.get("--micro-batches", f["--accum-steps"]))
        if auto:
            bad.append("--global-batch and --batch auto both given: keep one")
        elif g is not None and acc is not None and acc > 0 and g % (dp * acc) != 0:
            bad.append(
                f"--global-batch ({f['--global-batch']}) must divide by data-parallel ranks ({dp}) x "
                + (
                    f"--micro-batches ({f['--micro-batches']})"
                    if "--micro-batches" in f
                    else _shown(f, given, "--accum-steps")
                )
            )
    cuda = f["--device"] == "cuda"
    if f["--backend"] == "nccl" and not cuda:
        bad.append("--backend nccl needs --device cuda")
    if f["--backend"] == "nccl" and f.get("--reduce-algo") == "hierarchical":
        bad.append("--reduce-algo hierarchical is for --backend mpi")
    if f["--precision"] == "tf32" and not cuda:
        bad.append("--precision tf32 needs --device cuda")
    if f["--weights-dtype"] == "bf16" and f["--precision"] == "fp16":
        bad.append("--weights-dtype bf16 does not go with --precision fp16 (use --precision bf16)")
    sgd, acc = _num(f["--local-sgd"]), _num(f["--accum-steps"])
    if sgd is not None and acc is not None and sgd > 0 and acc > 1:
        bad.append("--local-sgd does not go with --accum-steps > 1")
    bad += _shard_values(given, (("--shard", SHARD_NAMES), ("--reshard-after-forward", RESHARD_NAMES)))
    shard = f["--shard"] if f["--shard"] in SHARD_MODES else None
    if shard and (sgd or 0) > 0:
        bad.append(f"--shard {shard} does not go with --local-sgd (local SGD keeps every rank's optimizer state)")
    if shard and auto:
        bad.append(f"--shard {shard} does not go with --batch auto (the batch finder probes unsharded)")
    if shard in ("zero2", "zero3") and f.get("--reduce-algo") == "hierarchical":
        bad.append(f"--shard {shard} does not go with --reduce-algo hierarchical (it all-reduces)")
    if shard == "zero3":
        if (_num(f.get("--check-every", "0")) or 0) > 0:
            bad.append("--shard zero3 does not go with --check-every (the parameters are sharded between steps)")
        if "--channels-last" in given:
            bad.append("--shard zero3 does not go with --channels-last (a unit's parameters are one flat buffer)")
    for flag in ("--reshard-after-forward", "--shard-unit", "--shard-prefetch"):
        if flag in given and shard != "zero3" and f["--shard"] in SHARD_NAMES:  # a bad --shard: said above
            bad.append(f"{flag} needs --shard zero3 (not {f['--shard']})")
    if auto and not cuda and "--memory-limit-mb" not in given:
        bad.append("--batch auto on CPU needs --memory-limit-mb")
    if "--cache-dir" in given and f["--data"] == "synthetic":
        bad.append("--cache-dir needs --data (a dataset, not synthetic)")
    if "--fast-decode" in given and f.get("--decode", "roi") != "roi":
        bad.append("--fast-decode needs --decode roi (it scales the region decode)")
    if stages is not None and stages > 1:  # what a pipeline does not support (yet): dtune-train refuses it
        for flag, bad_value in (
            ("--local-sgd", (sgd or 0) > 0),
            ("--batch", auto),
            # zero1 and zero2 shard each stage over its data-parallel group; zero3 cuts a stage's units
            # from its one chunk, and a tied embedding (GPT-2's, llama3.2-1b's and -3b's, an hf:
            # config's with tie_word_embeddings; on both end stages) cannot be summed. An hf: config
            # that cannot be read is left to dtune-train, which names what is wrong with it.
            (
                "--shard",
                shard == "zero3"
                and (bool(tied_embedding(f["--model"])) or f["--schedule"] in ("interleaved", "zb-h1", "zb-v")),
            ),
        ):
            if bad_value:
                bad.append(f"{pp_flag} {f['--pipeline-stages']} does not go with {flag} {f.get(flag, '')}".rstrip())
    if "--activation-checkpoint" in given:  # options.cc: the names, then the family
        ac = given["--activation-checkpoint"]
        model = str(f["--model"])
        if ac not in ("none", "full", "selective"):
            bad.append(f"{_as_given('--activation-checkpoint', ac)}: choose none, full or selective")
        elif ac != "none" and not (model.startswith("llama3") or model.startswith("hf:")):
            bad.append(
                f"--activation-checkpoint {ac} with --model {model}: only the Llama family recomputes "
                "activations (llama3-*, hf:PATH)"
            )
    if "--sequence-parallel" in given and not (tp is not None and tp > 1):
        bad.append("--sequence-parallel needs --tp 2 or more (it cuts the sequence over the tensor-parallel ranks)")
    llama = str(f["--model"]).startswith(("llama3", "hf:"))
    if "--sequence-parallel" in given and tp is not None and tp > 1 and not llama:
        bad.append(
            f"--sequence-parallel with --model {f['--model']}: sequence parallelism is built for the Llama "
            "family (llama3-*, hf:PATH)"
        )
    if tp is not None and tp > 1:  # tensor parallelism: GPT-2 and the Llama family over MPI (parse_mesh)
        model = str(f["--model"])
        if not (llama or model.startswith("gpt2")):
            bad.append(
                f"--tp {f['--tp']} with --model {model}: tensor parallelism splits the transformers' layers "
                "(gpt2-*, llama3-*, hf:PATH); give --tp 1"
            )
        if f["--backend"] == "nccl":
            bad.append(
                f"--tp {f['--tp']} with --backend nccl: the tp group's collectives run over MPI only so far; "
                "use --backend mpi"
            )
        if (sgd or 0) > 0:
            bad.append(f"--tp {f['--tp']} with --local-sgd: drop one")
    if "--profile-steps" in given:
        start, _, count = str(f["--profile-steps"]).partition(":")
        total = (_num(f["--warmup-steps"]) or 0) + (_num(f["--steps"]) or 0)
        if _num(start) is not None and _num(count) is not None and _num(start) + _num(count) > total:
            bad.append(f"--profile-steps {f['--profile-steps']} goes past the last step ({total} steps)")
    return bad


def _comm(given: dict, ranks: int) -> list[str]:
    f = {**COMM_DEFAULTS, **{COMM_ALIASES.get(k, k): v for k, v in given.items()}}
    bad = []
    lo, hi = _size(f["-b"]), _size(f["-e"])
    if lo is not None and hi is not None and lo > hi:
        bad.append(f"-b ({f['-b']}) must be at most -e ({f['-e']})")
    root = _num(f["-r"])
    if root is not None and not 0 <= root < ranks:
        bad.append(f"-r ({f['-r']}) must be a rank, 0..{ranks - 1}")
    if f.get("--mpi-buffers") == "device" and f.get("--backend") == "nccl":
        bad.append("--mpi-buffers device is for --backend mpi")
    if f.get("--algorithm") == "hierarchical" and f.get("--backend") == "nccl":
        bad.append("--algorithm hierarchical is for --backend mpi")
    return bad + _comm_pattern(given, f)


# --pattern fsdp takes its sizes and calls from --model: the flags that set them are refused.
FSDP_ONLY = ("--model", "--shard-unit", "--reshard-after-forward", "--placement")
NOT_WITH_FSDP = {
    "-b": "-b/--minbytes",
    "-e": "-e/--maxbytes",
    "-i": "-i/--stepbytes",
    "--stepbytes": "-i/--stepbytes",
    "-f": "-f/--stepfactor",
    "--stepfactor": "-f/--stepfactor",
    "--collective": "--collective",
    "-o": "-o/--op",
    "--op": "-o/--op",
    "-J": "-J/--output_file",
    "--output_file": "-J/--output_file",
    "-I": "-I/--per_iter_timing",
    "--per_iter_timing": "-I/--per_iter_timing",
}
FSDP_DTYPES = ("float32", "float", "fp32", "bfloat16", "bf16")


def _comm_pattern(given: dict, f: dict) -> list[str]:
    if f.get("--pattern") != "fsdp":
        return [f"{flag} is for --pattern fsdp" for flag in FSDP_ONLY if flag in given]
    bad = [] if "--model" in given else ["--pattern fsdp needs --model"]
    fsdp_flags = {k: v for k, v in given.items() if k in ("--shard-unit", "--reshard-after-forward")}
    bad += _shard_values(fsdp_flags, (("--reshard-after-forward", RESHARD_NAMES),))
    named = {COMM_ALIASES.get(k, k) for k in given}
    bad += [f"{NOT_WITH_FSDP[k]} does not apply to --pattern fsdp" for k in NOT_WITH_FSDP if k in named]
    if f.get("--algorithm") == "hierarchical":
        bad.append("--algorithm hierarchical does not apply to --pattern fsdp (no allreduce)")
    if f.get("--format", "table") != "table":
        bad.append("--pattern fsdp prints a table only (no --format json or csv)")
    dtype = str(f.get("-d", f.get("--datatype", "float32"))).lower()
    if dtype not in FSDP_DTYPES:
        bad.append(f"-d {dtype}: --pattern fsdp takes one of float32 and bfloat16")
    return bad


def check_launch(ranks: int, nodes: int, ranks_per_node: int) -> list[str]:
    """The launch shape's rules: every node gets a rank, and ranks_per_node (0: not set) times the
    nodes is the ranks (what srun -n R -N N --ntasks-per-node and mpirun --map-by ppr need)."""
    if ranks < nodes:
        return [f"ranks {ranks} on nodes {nodes}: every node needs at least one rank"]
    if ranks_per_node and ranks != nodes * ranks_per_node:
        return [
            f"ranks {ranks} is not nodes {nodes} x ranks_per_node {ranks_per_node} "
            f"(= {nodes * ranks_per_node}); leave ranks out to have it computed"
        ]
    return []


def check_point(binary: str, args: list, ranks: int) -> list[str]:
    """The rules a point's arguments break (empty: none). The sweep runner adds --output, so
    --no-output is refused for every binary."""
    given = parse_args(args)
    bad = ["--no-output: the sweep runner writes each point's results file"] if "--no-output" in given else []
    if binary == "dtune-train":
        bad += _train(given, ranks)
    elif binary == "dtune-comm":
        bad += _comm(given, ranks)
    return bad


RULES_HELP = """cross-flag rules, checked for every point when the sweep is planned (before anything runs):
  dtune-train: --first-bucket-mb <= --bucket-mb; --batch-sweep needs --batch auto;
    --global-batch divides by ranks x --accum-steps, and not with --batch auto;
    --backend nccl and --precision tf32 need --device cuda; --weights-dtype bf16 not with
    --precision fp16; --local-sgd not with --accum-steps > 1; --batch auto on CPU needs
    --memory-limit-mb; --cache-dir needs --data; --fast-decode needs --decode roi;
    --profile-steps within --warmup-steps + --steps; --pipeline-stages (--pp) x --tp divides
    ranks; --tp > 1 needs gpt2-*, llama3-* or hf:PATH, and not --backend nccl or --local-sgd;
    --sequence-parallel needs --tp > 1 (Llama family); --mesh-order names tp, pp and dp once each,
    and --pipeline-layout, if given too, is the same order; --pp and --pipeline-stages not both;
    --virtual-stages > 1 needs --schedule interleaved, which needs
    --micro-batches a multiple of --pipeline-stages; --micro-batches equals --accum-steps if both;
    --shard not with --local-sgd or --batch auto; --shard zero2 or zero3 not with --reduce-algo
    hierarchical; --shard zero3 not with --check-every or --channels-last;
    --reshard-after-forward, --shard-unit and --shard-prefetch need --shard zero3;
    --shard is none, zero1, zero2 or zero3; --reshard-after-forward on or off; --shard-unit
    block or a size in MiB (a number, no unit) in (0, 1073741824]; --shard-prefetch 0 to 64;
    --pipeline-stages > 1 not with --local-sgd, --batch auto, or --shard zero3 with a tied embedding
    (GPT-2, llama3.2-1b, llama3.2-3b, hf:PATH with tie_word_embeddings) or --schedule interleaved
    or zb-h1 or zb-v; --schedule zb-v not with --backend nccl; --stage-pieces blocks or
    ends;
    --reduce-algo hierarchical only with --backend mpi
  dtune-comm: -b <= -e; -r is a rank; --mpi-buffers device only with --backend mpi;
    --pattern fsdp needs --model, one -d of float32 or bfloat16 and the table format, and not
    -b -e -i -f --collective -o -J -I or --algorithm hierarchical; --model, --shard-unit,
    --reshard-after-forward and --placement only with --pattern fsdp (their values as dtune-train's)
  every binary: no --no-output (the runner writes each point's file)
  launch: ranks >= nodes; ranks = nodes x ranks_per_node when ranks_per_node is set (ranks left
    out: nodes x ranks_per_node)"""
