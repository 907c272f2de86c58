"""Markdown-safe text for the report (md_text, md_code) and, for NCCL sweeps, the winning
algorithm and protocol per collective, launch shape and message-size range as an nccl_tuner.conf
for NCCL's example tuner plugin (columns: collective_type,min_bytes,max_bytes,algorithm,protocol,
channels,nNodes,nRanks,numPipeOps,regBuff; -1 is a wildcard)."""

from __future__ import annotations

import html
import re
import textwrap

import numpy as np
import pandas as pd


def md_text(value) -> str:
    """A value as Markdown text that renders as itself: HTML special characters as entities,
    backquotes, stars, brackets and table pipes backslash-escaped, line breaks as spaces; an
    underscore too where it could open or close emphasis (CommonMark: not between two letters or
    digits, so NCCL_ALGO stays as written but /scratch/_cache_/ does not turn italic)."""
    text = html.escape(str(value), quote=False).replace("\r", " ").replace("\n", " ")
    text = re.sub(r"([\\`*\[\]|])", r"\\\1", text)
    return re.sub(r"(?<![^\W_])_|_(?![^\W_])", r"\\_", text)


def md_code(text: str) -> list[str]:
    """A fenced code block whose fence is longer than any run of backquotes inside (CommonMark),
    so no recorded value can close it early."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence, text, fence]


# nccl_tuner.conf for NCCL's example tuner plugin: NVIDIA/nccl plugins/tuner/example/plugin.c
# (ext-tuner/example/plugin.c before 2.29.7; the config file exists since 2.27.5). Everything below
# follows that file: it splits a line on commas (strtok, blanks trimmed), takes 8 to 10 fields
# collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks[,numPipeOps,regBuff],
# skips only lines whose first byte is '#' or that are empty, reads at most 255 bytes per fgets (a
# longer line's rest becomes a line of its own), compares names with strcmp and silently reads an
# unknown collective as allreduce, algorithm as ring and protocol as simple. A line matches when
# min_bytes <= nBytes <= max_bytes (strtoull, so up to 2^64-1), nNodes and nRanks equal the
# communicator's or are -1; the first matching line wins.
TUNER_COLUMNS = [
    "collective_type",
    "min_bytes",
    "max_bytes",
    "algorithm",
    "protocol",
    "channels",
    "nNodes",
    "nRanks",
    "numPipeOps",
    "regBuff",
]
NCCL_COLLECTIVE = {
    "allreduce": "allreduce",
    "allgather": "allgather",
    "reduce_scatter": "reducescatter",
    "broadcast": "broadcast",
    "reduce": "reduce",
}
# NCCL reads NCCL_ALGO / NCCL_PROTO case-insensitively (src/graph/tuning.cc parseList, strcasecmp
# against src/init.cc ncclAlgoStr "Tree Ring CollNetDirect CollNetChain NVLS NVLSTree PAT" and
# ncclProtoStr "LL LL128 Simple"); the plugin's spellings (parseAlgorithm, parseProtocol) differ.
PLUGIN_ALGORITHM = {
    "ring": "ring",
    "tree": "tree",
    "collnetdirect": "collnet_direct",
    "collnetchain": "collnet_chain",
    "nvls": "nvls",
    "nvlstree": "nvls_tree",
    "pat": "pat",
}
PLUGIN_PROTOCOL = {"ll": "ll", "ll128": "ll128", "simple": "simple"}
TUNER_OPEN_END = 2**64 - 1  # max_bytes of the last range: SIZE_MAX, what strtoull reads at most
# pluginGetCollInfo presets *nChannels = 1 and overrides it only for a channels field != -1; NCCL
# (src/enqueue.cc ncclGetAlgoInfo) keeps its own channel count when the plugin leaves 0.
TUNER_DEFAULT_CHANNELS = 0
_TUNER_HEADER = [
    "nccl_tuner.conf written by dtune report for NCCL's example tuner plugin (NVIDIA/nccl "
    "plugins/tuner/example, ext-tuner/example before NCCL 2.29.7; config files since 2.27.5).",
    "Use: NCCL_TUNER_PLUGIN=/path/libnccl-tuner-example.so NCCL_TUNER_CONFIG_FILE=/path/nccl_tuner.conf, "
    "and leave NCCL_ALGO and NCCL_PROTO unset (a pair they exclude is skipped by the plugin).",
    "Fields: " + ",".join(TUNER_COLUMNS) + " (-1 = any). The first matching line wins; byte bounds are inclusive.",
    "Bytes are NCCL's nBytes, max(send, recv) bytes per rank (count x ranks for allgather and "
    "reducescatter), which is dtune-comm's size column.",
    "Each (collective, nNodes, nRanks) gets the winners of its own runs (lowest median time at each "
    "measured size, out-of-place); ranges switch at the midpoint between measured sizes, and the "
    f"last one is open ({TUNER_OPEN_END}).",
    "channels 0 = NCCL's own channel count: the plugin presets 1 channel and keeps it for -1 and for "
    "every call no line matches; a count is written only where the run pinned it (NCCL_MIN_CTAS = "
    "NCCL_MAX_CTAS, or NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS).",
]


def _comment(text: str) -> list[str]:
    """`text` as '#' lines short enough for the plugin's 256-byte fgets buffer."""
    return ["# " + t for t in textwrap.wrap(text, 100)]


def _pinned_channels(env: dict) -> int:
    for lo, hi in (("NCCL_MIN_CTAS", "NCCL_MAX_CTAS"), ("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS")):
        a, b = str(env.get(lo, "")).strip(), str(env.get(hi, "")).strip()
        if a.isdigit() and a == b and int(a) > 0:
            return int(a)
    return TUNER_DEFAULT_CHANNELS


def _plugin_setting(env: dict):
    """(algorithm, protocol, channels) in the plugin's spelling, or None when NCCL_ALGO or
    NCCL_PROTO is not one name the plugin knows (a list such as "Ring,Tree", "^LL", a typo)."""
    algo = PLUGIN_ALGORITHM.get(str(env["NCCL_ALGO"]).strip().lower())
    proto = PLUGIN_PROTOCOL.get(str(env["NCCL_PROTO"]).strip().lower())
    return (algo, proto, _pinned_channels(env)) if algo and proto else None


def _winner_ranges(g: pd.DataFrame) -> list[tuple[int, int, tuple]]:
    """[(min_bytes, max_bytes, setting)] from rows of one shape, dtype and op: the setting with the
    lowest median time at each measured size (repeats of a setting are pooled; a tie goes to the
    first setting in sorted order), switching at midpoints, from 0 to TUNER_OPEN_END."""
    med = g.groupby(["size_bytes", "setting"]).time_us_reported.median().reset_index()
    med = med.sort_values(["size_bytes", "time_us_reported", "setting"], kind="stable")
    winners = med.groupby("size_bytes").head(1).sort_values("size_bytes")
    sizes, keys = [int(s) for s in winners.size_bytes], list(winners.setting)
    out, lo = [], 0
    for k, (size, key) in enumerate(zip(sizes, keys)):
        hi = TUNER_OPEN_END if k == len(sizes) - 1 else (size + sizes[k + 1]) // 2
        if out and out[-1][2] == key:
            out[-1] = (out[-1][0], hi, key)
        else:
            out.append((lo, hi, key))
        lo = hi + 1
    return out


def nccl_tuner_conf(comm: pd.DataFrame, runs: pd.DataFrame) -> str | None:
    """nccl_tuner.conf text from NCCL-backend comm runs that set both NCCL_ALGO and NCCL_PROTO.

    `comm`: load_comm_summary; `runs`: load_comm_runs (world size, node count, environment).
    One block of lines per (collective, nNodes, nRanks) measured, from the runs of that shape
    only. The plugin cannot tell dtypes or ops apart, so each block uses one (dtype, op): the one
    with the most measured points (ties: sorted order); the others are named in a comment.
    Settings the plugin cannot spell are left out and named in a comment. None when no line can
    be written (no such run: the mpi backend ignores NCCL variables; or none the plugin can spell)."""
    if comm.empty or runs.empty:
        return None
    d = comm[
        (comm.placement == "out-of-place")
        & (comm.backend == "nccl")
        & (comm.wrong <= 0)
        & comm.collective.isin(list(NCCL_COLLECTIVE))
        & np.isfinite(comm.time_us_reported)
    ]
    d = d.merge(runs[["file", "run", "world_size", "nodes", "env"]], on=["file", "run"])
    d = d[[("NCCL_ALGO" in e and "NCCL_PROTO" in e) for e in d.env]]
    if d.empty:
        return None
    d = d.assign(
        setting=[_plugin_setting(e) for e in d.env],
        nodes=[int(n) if pd.notna(n) else -1 for n in d.nodes],
        world_size=d.world_size.astype(int),
    )
    lines, n_config = [c for t in _TUNER_HEADER for c in _comment(t)], 0
    shape_cols = ["collective", "nodes", "world_size"]
    # A block with a known node count before one with -1, which would also match its calls.
    blocks = sorted(d.groupby(shape_cols), key=lambda kv: (kv[0][0], kv[0][1] == -1, kv[0]))
    for (coll, nodes, nranks), g in blocks:
        where = f"{NCCL_COLLECTIVE[coll]} nNodes={nodes} nRanks={nranks}"
        bad = g[g.setting.isna()]
        for algo, proto in sorted({(e["NCCL_ALGO"], e["NCCL_PROTO"]) for e in bad.env}):
            lines += _comment(
                f"{where}: left out NCCL_ALGO={algo} NCCL_PROTO={proto}: not one algorithm "
                f"and one protocol the example plugin knows by name"
            )
        g = g[g.setting.notna()]
        if g.empty:
            continue
        counts = g.groupby(["dtype", "op"]).size().reset_index(name="n")
        counts = counts.sort_values(["n", "dtype", "op"], ascending=[False, True, True], kind="stable")
        dtype, op = counts.iloc[0]["dtype"], counts.iloc[0]["op"]
        others = [f"{r.dtype}/{r.op}" for r in counts.iloc[1:].itertuples()]
        lines += _comment(
            f"{where}: winners among {dtype}/{op} runs"
            + (
                f" (also measured, not used: {', '.join(others)}; the plugin cannot tell dtypes or ops apart)"
                if others
                else ""
            )
        )
        for lo, hi, (algo, proto, channels) in _winner_ranges(g[(g.dtype == dtype) & (g.op == op)]):
            lines.append(
                ",".join(map(str, [NCCL_COLLECTIVE[coll], lo, hi, algo, proto, channels, nodes, nranks, -1, -1]))
            )
            n_config += 1
    return "\n".join(lines) + "\n" if n_config else None
