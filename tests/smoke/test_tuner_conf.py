"""The nccl_tuner.conf that `dtune report` writes, read back by a re-implementation of NCCL's example
tuner plugin (NVIDIA/nccl plugins/tuner/example/plugin.c: loadConfig and pluginGetCollInfo), from
synthetic dtune-comm results whose winners are known by construction: for every measured
(collective, launch shape, size), between measured sizes and past the largest, the plugin must
apply exactly the algorithm, protocol and channel count that won there."""

import json
from html.parser import HTMLParser

import h5py
import numpy as np
import pandas as pd
import pytest
from markdown_it import MarkdownIt

from dtune_report.report import build_report
from dtune_report.tables import md_code, md_text, nccl_tuner_conf

# The plugin's own spellings (plugin.c parseCollType, parseAlgorithm, parseProtocol), written out
# here rather than imported, so that a wrong table in the code under test cannot agree with itself.
PLUGIN_NAME = {
    "NVLSTree": "nvls_tree",
    "CollnetDirect": "collnet_direct",
    "Ring": "ring",
    "Tree": "tree",
    "LL128": "ll128",
    "Simple": "simple",
    "LL": "ll",
}
PLUGIN_COLL = {"allreduce": "allreduce", "allgather": "allgather"}
SIZE_MAX = 2**64 - 1

# ---------------------------------------------------------------------------------------------------
# The example plugin, as plugin.c does it.


def _strtoull(s):
    digits = ""
    for ch in s.lstrip(" \t"):
        if not ch.isdigit():
            break
        digits += ch
    return min(int(digits), SIZE_MAX) if digits else 0


def _atoi(s):
    s = s.lstrip(" \t")
    sign = -1 if s[:1] == "-" else 1
    s = s[1:] if s[:1] in "+-" else s
    digits = ""
    for ch in s:
        if not ch.isdigit():
            break
        digits += ch
    return sign * int(digits) if digits else 0


def plugin_load(text):
    """loadConfig: fgets into a 256-byte buffer (a longer line arrives in pieces), skip a piece whose
    first byte is '#' or '\\n', cut at '\\n', strtok on ',' (empty tokens vanish, at most 10 taken),
    trim blanks and tabs, keep lines of 8 to 10 tokens; unknown names fall back silently."""
    pieces = []
    for line in text.encode().splitlines(keepends=True):
        pieces += [line[i : i + 255] for i in range(0, len(line), 255)]
    configs = []
    for piece in pieces:
        if piece[:1] in (b"#", b"\n"):
            continue
        line = piece.decode().split("\n")[0]
        tokens = [t.strip(" \t") for t in line.split(",") if t != ""][:10]
        if not 8 <= len(tokens) <= 10:
            continue
        coll = (
            tokens[0]
            if tokens[0] in ("broadcast", "reduce", "allgather", "reducescatter", "allreduce")
            else "allreduce"
        )
        algo = (
            tokens[3]
            if tokens[3] in ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
            else "ring"
        )
        proto = tokens[4] if tokens[4] in ("ll", "ll128", "simple") else "simple"
        configs.append(
            {
                "coll": coll,
                "min": _strtoull(tokens[1]),
                "max": _strtoull(tokens[2]),
                "algo": algo,
                "proto": proto,
                "channels": _atoi(tokens[5]),
                "nNodes": _atoi(tokens[6]),
                "nRanks": _atoi(tokens[7]),
                "pipeOps": _atoi(tokens[8]) if len(tokens) > 8 else -1,
                "regBuff": _atoi(tokens[9]) if len(tokens) > 9 else -1,
            }
        )
    return configs


def plugin_get_coll_info(configs, coll, n_bytes, n_nodes, n_ranks, num_pipe_ops=1, reg_buff=0):
    """pluginGetCollInfo with every algorithm/protocol available: (algo, proto, nChannels handed to
    NCCL); algo and proto None when no line matches. nChannels starts at 1 and a matching line
    with channels != -1 replaces it; NCCL keeps its own count when it gets 0 (src/enqueue.cc)."""
    n_channels = 1
    for c in configs:
        if (
            c["coll"] == coll
            and c["min"] <= n_bytes <= c["max"]
            and c["nNodes"] in (-1, n_nodes)
            and c["nRanks"] in (-1, n_ranks)
            and c["pipeOps"] in (-1, num_pipe_ops)
            and c["regBuff"] in (-1, reg_buff)
        ):
            if c["channels"] != -1:
                n_channels = c["channels"]
            return c["algo"], c["proto"], n_channels
    return None, None, n_channels


# ---------------------------------------------------------------------------------------------------
# Synthetic results in dtune-comm's layout (results/SCHEMA.md), with known winners.

SIZES = [1024, 4096, 16384, 65536, 262144, 1 << 20, 4 << 20, 16 << 20]
SETTINGS = [  # (NCCL_ALGO, NCCL_PROTO, pinned channels or None)
    ("NVLSTree", "Simple", None),
    ("CollnetDirect", "Simple", None),
    ("Ring", "LL128", None),
    ("Tree", "Simple", None),
    ("Ring", "Simple", None),
    ("Tree", "LL128", None),
    ("Ring", "Simple", 8),
]
COMMA = ("Ring,Tree", "Simple", None)  # fastest everywhere, but the plugin cannot spell it
# Winner per size index, per (collective, world size): an index into SETTINGS.
WINNERS = {
    ("allreduce", 2): [2, 2, 5, 5, 3, 0, 0, 0],
    ("allreduce", 4): [5, 2, 2, 3, 1, 1, 4, 4],
    ("allgather", 2): [2, 2, 2, 4, 4, 4, 6, 6],
    ("allgather", 4): [3, 3, 0, 0, 2, 2, 1, 6],
}
HOSTS = {2: ["node-a", "node-a"], 4: ["node-a", "node-a", "node-b", "node-b"]}  # 1 node, 2 nodes
# bfloat16 allreduce on 2 ranks, at fewer sizes, where Tree/Simple wins everywhere: the plugin
# cannot tell dtypes apart, so these must not leak into the float32 block (more points).
BF16_SIZES = SIZES[:4]
BF16_WINNER = 3


def _time_us(size, winner):
    return 5.0 + size / 1e4 if winner else 9.0 + size / 5e3


def _run_group(runs, name, coll, dtype, sizes, ranks, times, point=None, backend="nccl"):
    g = runs.create_group(name)
    es = {"float32": 4, "bfloat16": 2}[dtype]
    n = ranks if coll == "allgather" else 1
    count = np.array([s // (n * es) for s in sizes], dtype=np.int64)
    a = {
        "benchmark": "comm",
        "collective": coll,
        "backend": backend,
        "dtype": dtype,
        "op": "sum" if coll == "allreduce" else "none",
        "root": np.int64(-1),
        "iters": np.int64(2),
        "warmup_iters": np.int64(1),
        "check_iters": np.int64(1),
        "blocking": np.int64(0),
        "time_mode": "avg",
        "busbw_factor": 1.0,
        "status": "ok",
        "fit_alpha_us": 5.0,
        "fit_busbw_gbps": 10.0,
        "fit_r2": 1.0,
    }
    if point:
        a.update(point_id=point["id"], point=json.dumps(point))
    g.attrs.update(a)
    n_sizes, n_iters = len(sizes), 2
    rep = np.array([times, times], dtype=np.float64)
    g.create_dataset("placement", data=np.array(["out-of-place", "in-place"], dtype=object), dtype=h5py.string_dtype())
    g.create_dataset("size_bytes", data=np.array(sizes, dtype=np.int64))
    g.create_dataset("requested_bytes", data=np.array(sizes, dtype=np.int64))
    g.create_dataset("count", data=count)
    g.create_dataset("time_us", data=np.broadcast_to(rep[:, :, None, None], (2, n_sizes, ranks, n_iters)).copy())
    g.create_dataset("wrong", data=np.zeros((2, n_sizes, ranks), dtype=np.int64))
    g.create_dataset("time_us_reported", data=rep)
    g.create_dataset("algbw_gbps", data=np.array(sizes) / rep / 1e3)
    g.create_dataset("busbw_gbps", data=np.array(sizes) / rep / 1e3)
    g.create_dataset("slowest_rank", data=np.zeros((2, n_sizes), dtype=np.int64))


def _env(setting):
    algo, proto, ch = setting
    env = {"NCCL_ALGO": algo, "NCCL_PROTO": proto}
    if ch:
        env.update(NCCL_MIN_CTAS=str(ch), NCCL_MAX_CTAS=str(ch))
    return env


def _provenance(parent, ranks, env):
    p = parent.create_group("provenance")
    p.attrs["world_size"] = np.int64(ranks)
    p.create_dataset("rank_host", data=np.array(HOSTS[ranks], dtype=object), dtype=h5py.string_dtype())
    e = p.create_group("env")
    e.attrs.update(env)


def _root(f, tool):
    f.attrs.update(
        schema="dtune-results",
        schema_version=np.int64(1),
        tool=tool,
        status="complete",
        dtune_version="0.1.0",
        exit_status=np.int64(0),
    )


def write_results(d, backend="nccl"):
    """World size 2 as a merged sweep file (env in each run's point, provenance under /points);
    world size 4 as one plain dtune-comm file per setting (env in /provenance/env only)."""
    d.mkdir(parents=True, exist_ok=True)
    with h5py.File(d / "merged.h5", "w") as f:
        _root(f, "dtune sweep merge")
        runs, points = f.create_group("runs"), f.create_group("points")
        n = 0
        for k, setting in enumerate(SETTINGS + [COMMA]):
            pid = f"p{k:03d}"
            point = {
                "id": pid,
                "sweep": "nccl",
                "binary": "dtune-comm",
                "args": [],
                "env": _env(setting),
                "ranks": 2,
                "nodes": 1,
                "ranks_per_node": 0,
                "repeat": 0,
                "values": {},
            }
            pg = points.create_group(pid)
            pg.attrs["point"] = json.dumps(point)
            _provenance(pg, 2, {"NCCL_DEBUG": "WARN"})
            for coll in ("allreduce", "allgather"):
                times = [
                    _time_us(s, True) * 0.5 if setting == COMMA else _time_us(s, WINNERS[(coll, 2)][i] == k)
                    for i, s in enumerate(SIZES)
                ]
                _run_group(runs, f"{n:04d}-{pid}-{coll}", coll, "float32", SIZES, 2, times, point, backend)
                n += 1
            bf = [_time_us(s, BF16_WINNER == k) * (0.1 if BF16_WINNER == k else 1) for s in BF16_SIZES]
            _run_group(
                runs, f"{n:04d}-{pid}-allreduce-bfloat16", "allreduce", "bfloat16", BF16_SIZES, 2, bf, point, backend
            )
            n += 1
    for k, setting in enumerate(SETTINGS + [COMMA]):
        with h5py.File(d / f"w4-{k}.h5", "w") as f:
            _root(f, "dtune-comm")
            _provenance(f, 4, {**_env(setting), "NCCL_DEBUG": "WARN"})
            runs = f.create_group("runs")
            for j, coll in enumerate(("allreduce", "allgather")):
                times = [
                    _time_us(s, True) * 0.5 if setting == COMMA else _time_us(s, WINNERS[(coll, 4)][i] == k)
                    for i, s in enumerate(SIZES)
                ]
                _run_group(runs, f"{j:04d}-{coll}", coll, "float32", SIZES, 4, times, backend=backend)
    return d


def expected(coll, ranks, size_index):
    algo, proto, ch = SETTINGS[WINNERS[(coll, ranks)][size_index]]
    return PLUGIN_NAME[algo], PLUGIN_NAME[proto], ch or 0  # 0: NCCL keeps its own channel count


def nccl_bytes(coll, ranks, size):
    """NCCL's nBytes for the tuner (src/enqueue.cc ncclGetAlgoInfo: elementSize x
    ncclFuncMaxSendRecvCount): count x ranks for allgather, count otherwise, from the count that
    dtune-comm passed (float32)."""
    count = size // (4 * ranks) if coll == "allgather" else size // 4
    return 4 * count * (ranks if coll == "allgather" else 1)


@pytest.fixture(scope="module")
def conf(tmp_path_factory):
    d = write_results(tmp_path_factory.mktemp("tuner") / "results")
    out = tmp_path_factory.mktemp("report")
    r = build_report([d], out)
    assert r["tuner"]
    return (out / "nccl_tuner.conf").read_text()


def test_every_line_is_a_comment_or_a_ten_field_config_the_plugin_reads_whole(conf):
    lines = conf.splitlines()
    assert lines and all(len(line.encode()) + 1 <= 255 for line in lines)  # fgets reads 255 bytes
    configs = [line for line in lines if line and not line.startswith("#")]
    assert all(len(line.split(",")) == 10 for line in configs)
    assert len(plugin_load(conf)) == len(configs)
    # Only names the plugin knows (an unknown one would silently become allreduce/ring/simple).
    for line in configs:
        f = line.split(",")
        assert f[0] in ("broadcast", "reduce", "allgather", "reducescatter", "allreduce"), line
        assert f[3] in ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"), line
        assert f[4] in ("ll", "ll128", "simple") and f[1].isdigit() and f[2].isdigit(), line
        assert all(x.lstrip("-").isdigit() for x in f[5:]), line
    # The setting the plugin cannot spell is named in a comment, never in a config line.
    assert any(line.startswith("#") and "Ring,Tree" in line for line in lines)
    assert not any("Ring" in line for line in configs)


# NCCL's own example file (plugins/tuner/example/nccl_tuner.conf) documents its lines as
# "# Format: collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff";
# the field list is written out here, not taken from the code under test.
NCCL_FORMAT = "collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff"


def test_the_header_names_the_fields_in_nccls_documented_order(conf):
    comments = " ".join(line[1:].strip() for line in conf.splitlines() if line.startswith("#"))
    assert NCCL_FORMAT in comments, comments[:400]
    assert conf.startswith("#")  # the header comes first


@pytest.mark.parametrize("coll,ranks", sorted(WINNERS))
def test_the_rows_are_the_known_winners(conf, coll, ranks):
    """The config lines for one shape, exactly: WINNERS with consecutive equal winners merged,
    ranges switching at the midpoint between measured sizes (inclusive bounds, the midpoint to the
    lower size), the last open up to 2^64 - 1, channels 0 unless pinned, any numPipeOps/regBuff."""
    nodes = len(set(HOSTS[ranks]))
    want = []
    for i, w in enumerate(WINNERS[(coll, ranks)]):
        hi = SIZE_MAX if i == len(SIZES) - 1 else (SIZES[i] + SIZES[i + 1]) // 2
        algo, proto, ch = SETTINGS[w]
        row = [PLUGIN_COLL[coll], None, hi, PLUGIN_NAME[algo], PLUGIN_NAME[proto], ch or 0, nodes, ranks, -1, -1]
        if want and want[-1][3:6] == row[3:6]:
            want[-1][2] = hi
        else:
            row[1] = want[-1][2] + 1 if want else 0
            want.append(row)
    got = [
        [f[0], *map(int, f[1:3]), f[3], f[4], *map(int, f[5:])]
        for f in (line.split(",") for line in conf.splitlines() if line and not line.startswith("#"))
        if f[0] == PLUGIN_COLL[coll] and int(f[6]) == nodes and int(f[7]) == ranks
    ]
    assert got == want


@pytest.mark.parametrize("coll,ranks", sorted(WINNERS))
def test_the_plugin_applies_the_winner_at_and_between_measured_sizes(conf, coll, ranks):
    configs = plugin_load(conf)
    nodes = len(set(HOSTS[ranks]))
    for i, size in enumerate(SIZES):
        n_bytes = nccl_bytes(coll, ranks, size)
        assert n_bytes == size  # dtune-comm's size column is NCCL's nBytes
        want = expected(coll, ranks, i)
        assert plugin_get_coll_info(configs, PLUGIN_COLL[coll], n_bytes, nodes, ranks) == want, (coll, ranks, size)
        if i + 1 < len(SIZES):  # the nearer measured size decides; the midpoint goes to the lower one
            mid = (size + SIZES[i + 1]) // 2
            for b, j in ((size + 1, i), (mid, i), (mid + 1, i + 1), (SIZES[i + 1] - 1, i + 1)):
                got = plugin_get_coll_info(configs, PLUGIN_COLL[coll], b, nodes, ranks)
                assert got == expected(coll, ranks, j), (coll, ranks, b)
    for b in (0, 1, SIZES[0] - 1):
        assert plugin_get_coll_info(configs, PLUGIN_COLL[coll], b, nodes, ranks) == expected(coll, ranks, 0)
    for b in (SIZES[-1] + 1, 2 * SIZES[-1], 2**40, SIZE_MAX):
        assert plugin_get_coll_info(configs, PLUGIN_COLL[coll], b, nodes, ranks) == expected(coll, ranks, -1)


def test_no_line_matches_a_shape_or_collective_that_was_not_measured(conf):
    configs = plugin_load(conf)
    for coll, nodes, ranks in (("allreduce", 1, 8), ("allreduce", 1, 4), ("reducescatter", 1, 2), ("broadcast", 2, 4)):
        assert plugin_get_coll_info(configs, coll, 65536, nodes, ranks)[:2] == (None, None)


# Every algorithm and protocol NCCL takes (src/init.cc ncclAlgoStr, ncclProtoStr) with the plugin's
# spelling of it (plugin.c parseAlgorithm, parseProtocol), written out here.
NCCL_ALGORITHMS = {
    "Tree": "tree",
    "Ring": "ring",
    "CollNetDirect": "collnet_direct",
    "CollNetChain": "collnet_chain",
    "NVLS": "nvls",
    "NVLSTree": "nvls_tree",
    "PAT": "pat",
}
NCCL_PROTOCOLS = {"LL": "ll", "LL128": "ll128", "Simple": "simple"}
PAIRS = [(a, p) for a in NCCL_ALGORITHMS for p in NCCL_PROTOCOLS]
PAIR_SIZES = [1024 << k for k in range(len(PAIRS))]  # pair k wins at PAIR_SIZES[k] alone


@pytest.fixture(scope="module")
def every_name_conf(tmp_path_factory):
    """nccl_tuner.conf from one dtune-comm file per (NCCL_ALGO, NCCL_PROTO) pair, allreduce on 2
    ranks of one node, each pair fastest at one size of its own."""
    d = tmp_path_factory.mktemp("names") / "results"
    d.mkdir()
    for k, (algo, proto) in enumerate(PAIRS):
        with h5py.File(d / f"pair-{k}.h5", "w") as f:
            _root(f, "dtune-comm")
            _provenance(f, 2, {"NCCL_ALGO": algo, "NCCL_PROTO": proto})
            times = [_time_us(s, i == k) for i, s in enumerate(PAIR_SIZES)]
            _run_group(f.create_group("runs"), "0000-allreduce", "allreduce", "float32", PAIR_SIZES, 2, times)
    out = tmp_path_factory.mktemp("names-report")
    assert build_report([d], out)["tuner"]
    return plugin_load((out / "nccl_tuner.conf").read_text())


@pytest.mark.parametrize("algo,proto", PAIRS)
def test_every_nccl_algorithm_and_protocol_reaches_the_plugin_by_its_own_name(every_name_conf, algo, proto):
    size = PAIR_SIZES[PAIRS.index((algo, proto))]
    want = (NCCL_ALGORITHMS[algo], NCCL_PROTOCOLS[proto], 0)
    assert plugin_get_coll_info(every_name_conf, "allreduce", size, 1, 2) == want


def test_repeats_pool_by_median_time(tmp_path):
    # Three runs of each setting: Ring/LL at 1x, 1x and 4x the winner's time (median 1x, mean 2x),
    # Tree/Simple at 1.5x three times. The lower median wins at every size: Ring/LL.
    d = tmp_path / "results"
    d.mkdir()
    sizes = SIZES[:3]
    for k, (setting, scale) in enumerate([(("Ring", "LL"), s) for s in (1, 1, 4)] + [(("Tree", "Simple"), 1.5)] * 3):
        with h5py.File(d / f"r{k}.h5", "w") as f:
            _root(f, "dtune-comm")
            _provenance(f, 2, {"NCCL_ALGO": setting[0], "NCCL_PROTO": setting[1]})
            times = [_time_us(s, True) * scale for s in sizes]
            _run_group(f.create_group("runs"), "0000-allreduce", "allreduce", "float32", sizes, 2, times)
    build_report([d], tmp_path / "out")
    configs = plugin_load((tmp_path / "out" / "nccl_tuner.conf").read_text())
    assert [plugin_get_coll_info(configs, "allreduce", s, 1, 2) for s in sizes] == [("ring", "ll", 0)] * 3


def test_mpi_backend_runs_give_no_tuner_file(tmp_path):
    """NCCL_ALGO and NCCL_PROTO do nothing under --backend mpi: no winners to write."""
    d = write_results(tmp_path / "results", backend="mpi")
    r = build_report([d], tmp_path / "report")
    assert not r["tuner"] and not (tmp_path / "report" / "nccl_tuner.conf").exists()


DRIVER_C = r"""
#include "tuner.h"
#include <stdio.h>
extern const ncclTuner_v6_t ncclTunerPlugin_v6;
int main(int argc, char** argv) {  /* argv: nRanks nNodes; stdin: "collType nBytes" lines */
  void* ctx;
  if (ncclTunerPlugin_v6.init(&ctx, 0, atoi(argv[1]), atoi(argv[2]), NULL, NULL, NULL) != ncclSuccess) return 1;
  int coll; unsigned long long nb;
  while (scanf("%d %llu", &coll, &nb) == 2) {
    float table[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
    for (int a = 0; a < NCCL_NUM_ALGORITHMS; a++) for (int p = 0; p < NCCL_NUM_PROTOCOLS; p++) table[a][p] = 1.0f;
    int nch = -99, fa = -1, fp = -1;
    ncclTunerPlugin_v6.getCollInfo(ctx, (ncclFunc_t)coll, (size_t)nb, 1, (float**)table, NCCL_NUM_ALGORITHMS,
                                   NCCL_NUM_PROTOCOLS, 0, &nch);
    for (int a = 0; a < NCCL_NUM_ALGORITHMS; a++) for (int p = 0; p < NCCL_NUM_PROTOCOLS; p++)
      if (table[a][p] == 0.0f) { fa = a; fp = p; }
    printf("%d %d %d\n", fa, fp, nch);
  }
  return 0;
}
"""


@pytest.mark.opt_in("DTUNE_NCCL_SOURCE")
def test_the_reimplementation_agrees_with_the_real_plugin(conf, tmp_path):
    """With DTUNE_NCCL_SOURCE set to an NVIDIA/nccl checkout (2.29.7 or newer layout), compile its
    example plugin and check that it and plugin_get_coll_info answer every query alike (opt-in:
    the checkout is not on PyPI or Debian)."""
    import os
    import shutil
    import subprocess
    from pathlib import Path

    src = Path(os.environ["DTUNE_NCCL_SOURCE"]) / "plugins" / "tuner" / "example"
    cc = shutil.which("cc") or shutil.which("gcc")
    assert (src / "plugin.c").exists(), f"DTUNE_NCCL_SOURCE: {src / 'plugin.c'} not found"
    assert cc is not None, "no C compiler (cc or gcc)"
    (tmp_path / "driver.c").write_text(DRIVER_C)
    exe = tmp_path / "driver"
    subprocess.run([cc, "-O1", f"-I{src / 'nccl'}", "-o", exe, tmp_path / "driver.c", src / "plugin.c"], check=True)
    (tmp_path / "nccl_tuner.conf").write_text(conf)
    algos = ["tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"]
    protos = ["ll", "ll128", "simple"]
    colls = ["broadcast", "reduce", "allgather", "reducescatter", "allreduce"]
    sizes = sorted(
        {0, 1, 2**40, SIZE_MAX}
        | {s + k for s in SIZES for k in (-1, 0, 1)}
        | {(a + b) // 2 + k for a, b in zip(SIZES, SIZES[1:]) for k in (0, 1)}
    )
    configs = plugin_load(conf)
    for ranks, nodes in ((2, 1), (4, 2), (4, 1), (8, 1)):
        queries = [(c, s) for c in range(len(colls)) for s in sizes]
        out = subprocess.run(
            [exe, str(ranks), str(nodes)],
            input="".join(f"{c} {s}\n" for c, s in queries),
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "NCCL_TUNER_CONFIG_FILE": str(tmp_path / "nccl_tuner.conf")},
        )
        for (c, s), line in zip(queries, out.stdout.splitlines(), strict=True):
            a, p, ch = map(int, line.split())
            real = (algos[a] if a >= 0 else None, protos[p] if p >= 0 else None, ch)
            assert real == plugin_get_coll_info(configs, colls[c], s, nodes, ranks), (colls[c], s, ranks, nodes)


# ---------------------------------------------------------------------------------------------------
# nccl_tuner_conf on small frames in load_comm_summary's and load_comm_runs' layout: the exact lines.


def _frames(points, env_by_run):
    """points: (run, size_bytes, time_us); one allreduce float32/sum, 2 ranks on 1 node per run."""
    comm = pd.DataFrame(
        [
            dict(file="f.h5", run=run, size_bytes=size, time_us_reported=t, placement="out-of-place")
            | dict(backend="nccl", wrong=0, collective="allreduce", dtype="float32", op="sum")
            for run, size, t in points
        ]
    )
    runs = pd.DataFrame([dict(file="f.h5", run=run, world_size=2, nodes=1, env=env) for run, env in env_by_run.items()])
    return comm, runs


def _config_lines(text):
    return [line for line in text.splitlines() if not line.startswith("#")]


RING_LL = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL"}
TREE_SIMPLE = {"NCCL_ALGO": "Tree", "NCCL_PROTO": "Simple"}


def test_ranges_start_at_0_switch_at_midpoints_and_merge_a_repeated_winner():
    sizes = [1024, 4096, 65536, 1 << 20]
    ring = [(0, s, t) for s, t in zip(sizes, [5, 6, 90, 50])]  # wins at 1 KiB, 4 KiB and 1 MiB
    tree = [(1, s, t) for s, t in zip(sizes, [9, 9, 70, 80])]  # wins at 64 KiB
    text = nccl_tuner_conf(*_frames(ring + tree, {0: RING_LL, 1: TREE_SIMPLE}))
    mid1, mid2 = (4096 + 65536) // 2, (65536 + (1 << 20)) // 2
    assert _config_lines(text) == [
        f"allreduce,0,{mid1},ring,ll,0,1,2,-1,-1",
        f"allreduce,{mid1 + 1},{mid2},tree,simple,0,1,2,-1,-1",
        f"allreduce,{mid2 + 1},{2**64 - 1},ring,ll,0,1,2,-1,-1",
    ]


@pytest.mark.parametrize(
    "pins,channels",
    [
        ({"NCCL_MIN_CTAS": "4", "NCCL_MAX_CTAS": "4"}, 4),
        ({"NCCL_MIN_NCHANNELS": "8", "NCCL_MAX_NCHANNELS": " 8"}, 8),
        ({"NCCL_MIN_CTAS": "1", "NCCL_MAX_CTAS": "1"}, 1),
        # 0 pins nothing: the next pair still can
        ({"NCCL_MIN_CTAS": "0", "NCCL_MAX_CTAS": "0", "NCCL_MIN_NCHANNELS": "2", "NCCL_MAX_NCHANNELS": "2"}, 2),
        ({"NCCL_MIN_CTAS": "4", "NCCL_MAX_CTAS": "8"}, 0),  # a range: NCCL chooses
        ({"NCCL_MIN_CTAS": "4"}, 0),
        ({"NCCL_MAX_NCHANNELS": "4"}, 0),
        ({}, 0),
    ],
)
def test_a_channel_count_only_where_the_run_pinned_it(pins, channels):
    text = nccl_tuner_conf(*_frames([(0, 1024, 5.0)], {0: RING_LL | pins}))
    assert _config_lines(text) == [f"allreduce,0,{2**64 - 1},ring,ll,{channels},1,2,-1,-1"]


def test_comment_lines_stay_within_100_columns_of_text():
    text = nccl_tuner_conf(*_frames([(0, 1024, 5.0)], {0: RING_LL}))
    comments = [line for line in text.splitlines() if line.startswith("#")]
    assert comments and max(len(c) for c in comments) <= len("# ") + 100
    assert any(len(c) > 72 for c in comments)  # wrapped at 100, not at textwrap's default 70


def test_a_setting_the_plugin_cannot_spell_is_left_out_and_named():
    text = nccl_tuner_conf(
        *_frames([(0, 1024, 5.0), (1, 1024, 4.0)], {0: RING_LL, 1: {"NCCL_ALGO": "Ring,Tree", "NCCL_PROTO": "LL"}})
    )
    assert _config_lines(text) == [f"allreduce,0,{2**64 - 1},ring,ll,0,1,2,-1,-1"]
    assert "# allreduce nNodes=1 nRanks=2: left out NCCL_ALGO=Ring,Tree NCCL_PROTO=LL: not one algorithm" in text
    assert nccl_tuner_conf(*_frames([(0, 1024, 5.0)], {0: {"NCCL_ALGO": "Ring", "NCCL_PROTO": "^LL"}})) is None


@pytest.mark.parametrize(
    "text,fence",
    [("plain", "```"), ("one ` two `` three", "```"), ("a ``` b", "````"), ("x `````", "``````"), ("", "```")],
)
def test_a_code_block_fence_is_longer_than_any_backquote_run_inside(text, fence):
    # CommonMark: a fence closes only on a run of at least its length, so the recorded text can
    # never end the block early.
    assert md_code(text) == [fence, text, fence]


class _CellText(HTMLParser):
    """The text of each <td> of rendered HTML, character references resolved."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.cells, self.cell = [], None

    def handle_starttag(self, tag, attrs):
        self.cell = "" if tag == "td" else self.cell

    def handle_endtag(self, tag):
        if tag == "td":
            self.cells.append(self.cell)
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data


RECORDED = [
    "a|b",  # a pipe would end the table cell
    "*x* `c` [l](u) <b>&amp; \\ end\\",  # emphasis, code, link, HTML, an entity, backslashes
    "/scratch/_cache_/x __init__ a _b_ c OMPI_MCA_*",  # underscores that could make emphasis
    "line\nbreak\r\nand\rcr",  # a line break would end the table row
    'NCCL_ALGO="Ring,Tree" it\'s ^LL',
]


@pytest.mark.parametrize("value", RECORDED)
def test_md_text_renders_as_itself_in_a_table_cell(value):
    """Read by a CommonMark reader with tables (markdown-it-py, pinned in requirements.txt), a
    recorded value in a report table shows as written, its line breaks as spaces."""
    html = MarkdownIt("commonmark").enable("table").render(f"| h |\n|---|\n| {md_text(value)} |\n")
    cells = _CellText()
    cells.feed(html)
    assert cells.cells == [value.replace("\r", " ").replace("\n", " ")], html


def test_md_text_leaves_what_needs_no_escape_as_written():
    # The Markdown file stays readable as text: quotes, apostrophes and underscores inside a word
    # render as themselves, so they are not turned into entities or backslashed.
    for value in ['NCCL_ALGO="Ring" it\'s 50% ~ #1 reduce_scatter', "", 42]:
        assert md_text(value) == str(value)


def _conf(*runs):
    """nccl_tuner_conf of runs given as dicts: env, times ({size_bytes: time_us}) and, where they
    differ from one float32/sum allreduce on 2 ranks of 1 node, collective, dtype, op, world_size,
    nodes (None: unknown, as load_comm_runs leaves it) and wrong."""
    base = dict(collective="allreduce", dtype="float32", op="sum", world_size=2, nodes=1, wrong=0)
    comm, shape = [], []
    for k, r in enumerate(runs):
        r = base | r
        comm += [
            dict(file="f.h5", run=k, size_bytes=s, time_us_reported=t, placement="out-of-place", backend="nccl")
            | {c: r[c] for c in ("wrong", "collective", "dtype", "op")}
            for s, t in r["times"].items()
        ]
        shape.append(dict(file="f.h5", run=k, world_size=r["world_size"], nodes=r["nodes"], env=r["env"]))
    return nccl_tuner_conf(pd.DataFrame(comm), pd.DataFrame(shape))


def _comment_text(text):
    return " ".join(line[2:] for line in text.splitlines() if line.startswith("# "))


TREE_LL128 = {"NCCL_ALGO": "Tree", "NCCL_PROTO": "LL128"}


def test_a_block_of_a_known_node_count_comes_before_the_wildcard_that_would_also_match_it():
    """Runs on 2 ranks of 1 node, on 2 ranks of an unknown node count (nNodes -1: any) and on 4
    ranks of 2 nodes, each with its own winner: every call gets the winner of its own shape, and
    only a shape never measured falls to the wildcard."""
    fast, slow = {1024: 5.0}, {1024: 9.0}
    text = _conf(
        dict(env=RING_LL, times=fast),
        dict(env=TREE_SIMPLE, times=slow),
        dict(env=TREE_SIMPLE, times=fast, nodes=None),
        dict(env=RING_LL, times=slow, nodes=None),
        dict(env=TREE_LL128, times=fast, world_size=4, nodes=2),
        dict(env=RING_LL, times=slow, world_size=4, nodes=2),
    )
    configs = plugin_load(text)
    assert all(field.lstrip("-").isdigit() for line in _config_lines(text) for field in line.split(",")[5:])
    assert plugin_get_coll_info(configs, "allreduce", 1024, 1, 2) == ("ring", "ll", 0)
    assert plugin_get_coll_info(configs, "allreduce", 1024, 2, 4) == ("tree", "ll128", 0)
    assert plugin_get_coll_info(configs, "allreduce", 1024, 3, 2) == ("tree", "simple", 0)  # the wildcard
    assert plugin_get_coll_info(configs, "allreduce", 1024, 1, 4) == (None, None, 1)  # nothing measured


@pytest.mark.parametrize(
    "measured,used,others",
    [
        # The most measured sizes wins; the others are named, in sorted order.
        (
            {("float32", "sum"): 3, ("bfloat16", "sum"): 2, ("float32", "max"): 1},
            "float32/sum",
            "bfloat16/sum, float32/max",
        ),
        ({("float32", "sum"): 2, ("bfloat16", "sum"): 2}, "bfloat16/sum", "float32/sum"),  # a tie: sorted order
        ({("float32", "sum"): 2, ("float32", "max"): 2}, "float32/max", "float32/sum"),
        ({("float32", "sum"): 2}, "float32/sum", None),
    ],
)
def test_each_block_uses_one_dtype_and_op_the_most_measured_and_names_the_others(measured, used, others):
    """The plugin cannot tell dtypes or ops apart: the block's lines are the winners of one
    (dtype, op) alone. Here Ring/LL wins every size of the one used, Tree/Simple every size of
    every other, by far."""
    sizes = [1024, 4096, 16384]
    runs = []
    for (dtype, op), n in measured.items():
        win, lose = (RING_LL, TREE_SIMPLE) if f"{dtype}/{op}" == used else (TREE_SIMPLE, RING_LL)
        runs.append(dict(env=win, times={s: 5.0 for s in sizes[:n]}, dtype=dtype, op=op))
        runs.append(dict(env=lose, times={s: 50.0 for s in sizes[:n]}, dtype=dtype, op=op))
    text = _conf(*runs)
    assert _config_lines(text) == [f"allreduce,0,{2**64 - 1},ring,ll,0,1,2,-1,-1"]
    note = f"allreduce nNodes=1 nRanks=2: winners among {used} runs"
    if others:
        note += f" (also measured, not used: {others}; the plugin cannot tell dtypes or ops apart)"
    assert note in _comment_text(text)
    assert _comment_text(text).endswith(note)  # the block's comment, last, and nothing more


def test_runs_with_wrong_results_or_without_both_settings_are_not_used():
    """A setting whose results were wrong never wins (-1: not checked, counts); a run that leaves
    the algorithm or the protocol to NCCL measured no setting the plugin can apply."""
    text = _conf(
        dict(env=RING_LL, times={1024: 1.0}, wrong=1),
        dict(env={"NCCL_ALGO": "Ring"}, times={1024: 1.0}),
        dict(env={"NCCL_PROTO": "LL128"}, times={1024: 1.0}),
        dict(env=TREE_SIMPLE, times={1024: 5.0}, wrong=-1),
        dict(env=TREE_LL128, times={1024: 6.0}),
    )
    assert _config_lines(text) == [f"allreduce,0,{2**64 - 1},tree,simple,0,1,2,-1,-1"]
    assert _conf(dict(env={"NCCL_ALGO": "Ring"}, times={1024: 1.0})) is None


def test_a_shape_with_no_setting_the_plugin_can_spell_is_named_and_the_others_follow():
    # allgather (sorted first) measured only a list of algorithms; allreduce a plain setting.
    text = _conf(
        dict(env={"NCCL_ALGO": "Ring,Tree", "NCCL_PROTO": "LL"}, times={1024: 1.0}, collective="allgather"),
        dict(env={"NCCL_ALGO": "Tree", "NCCL_PROTO": "^LL"}, times={1024: 1.0}, collective="allgather"),
        dict(env=RING_LL, times={1024: 5.0}),
    )
    assert _config_lines(text) == [f"allreduce,0,{2**64 - 1},ring,ll,0,1,2,-1,-1"]
    comments = _comment_text(text)
    assert comments.startswith("nccl_tuner.conf written by dtune report") and NCCL_FORMAT in comments
    for algo, proto in (("Ring,Tree", "LL"), ("Tree", "^LL")):
        assert f"allgather nNodes=1 nRanks=2: left out NCCL_ALGO={algo} NCCL_PROTO={proto}: not one" in comments
