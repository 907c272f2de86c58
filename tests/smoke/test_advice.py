"""The report's advice sections on fixed inputs: each section appears exactly when the results hold
its data, and each rule-based sentence states the numbers planted in the fixture (phase shares,
losses, rank counts, memory, devices, machines, collective times). Also the collectives stated
against their baseline and the srun form of the copy block for runs Slurm launched.

Results are written with h5py in the binaries' layouts (train_fixture.py; dtune-comm groups
below) from fixed values: nothing depends on timing noise or a random draw."""

import json
import os
import re
import stat
import subprocess

import h5py
import numpy as np
import pytest
from test_verdicts import BASE, CMD, shuffled
from train_fixture import train_file

from dtune_report.commands import command_tokens, reproduce_command
from dtune_report.report import build_report
from dtune_report.units import fmt_sig

ADVICE = {"data-loading", "batch-size", "communication", "precision", "parallelism", "hardware", "machines"}


def sections(out) -> list:
    """The level-2 section anchors of report.md, in order."""
    return re.findall(r"<a id='([^']+)'></a>\n## ", (out / "report.md").read_text())


def section_text(out, anchor) -> str:
    md = (out / "report.md").read_text().replace("\\", "")
    return md.split(f"<a id='{anchor}'></a>", 1)[1].split("\n## ", 2)[1]


def report(tmp_path, runs, **kw):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "r.h5"
    train_file(path, runs, kw.pop("cmd", CMD), **kw)
    build_report([path], tmp_path / "out")
    return tmp_path / "out"


def two(a: dict, b: dict, scale_b=1.0):
    return [(shuffled(1), None, a), (shuffled(2, scale_b), None, b)]


DATA = {"data": "s3://bucket/images", "workers": 0}
CASES = {
    # (runs, the one advice section they hold data for)
    "bucket": (two({}, {"bucket_mb": 5.0}), {"communication"}),
    "workers": (two(DATA, {**DATA, "workers": 2}), {"data-loading"}),
    "batch": (two({}, {"batch": 16, "global_batch": 32}), {"batch-size"}),
    "precision": (two({}, {"precision": "bf16"}), {"precision"}),
    "overlap": (two({}, {"overlap": "off"}), {"communication"}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_section_appears_exactly_when_its_data_exists(tmp_path, case):
    runs, expected = CASES[case]
    out = report(tmp_path, runs)
    present = set(sections(out)) & ADVICE
    if case == "overlap":  # overlap is a communication setting, but there is no bucket axis or comm run
        expected = set()
    assert present == expected, (case, sections(out))
    # The summary line links to exactly the sections present for its axes.
    summary = section_text(out, "summary")
    assert {a for a in ADVICE if f"(#{a})" in summary} == expected


def test_exposed_communication_sentence_states_the_planted_shares(tmp_path):
    runs = [
        (shuffled(1), None, {"shares": {"comm_exposed_ms": 0.18}}),
        (shuffled(2, 0.9), None, {"bucket_mb": 5.0, "shares": {"comm_exposed_ms": 0.06}}),
    ]
    out = report(tmp_path, runs)
    text = section_text(out, "communication")
    ms25 = np.mean(shuffled(1)[1:]) * 0.18 * (1 + 0.98) / 2
    ms5 = np.mean(shuffled(2, 0.9)[1:]) * 0.06 * (1 + 0.98) / 2
    want = (
        f"Exposed communication is 18% of the step at 25 MiB buckets and 6% at 5 MiB ({fmt_sig(ms25)} ms and "
        f"{fmt_sig(ms5)} ms per step): smaller buckets start reducing earlier in backward"
    )
    assert want in text, text
    assert "[communication](#communication)" in (out / "report.md").read_text()


def test_larger_buckets_get_the_other_mechanism_and_small_moves_none(tmp_path):
    runs = [
        (shuffled(1), None, {"shares": {"comm_exposed_ms": 0.20}}),
        (shuffled(2), None, {"bucket_mb": 100.0, "shares": {"comm_exposed_ms": 0.08}}),
    ]
    text = section_text(report(tmp_path / "a", runs), "communication")
    assert "is 20% of the step at 25 MiB buckets and 8% at 100 MiB" in text
    assert "larger buckets mean fewer reductions" in text
    runs = [
        (shuffled(1), None, {"shares": {"comm_exposed_ms": 0.10}}),
        (shuffled(2), None, {"bucket_mb": 5.0, "shares": {"comm_exposed_ms": 0.07}}),
    ]
    text = section_text(report(tmp_path / "b", runs), "communication")
    assert "Exposed communication is" not in text  # 3 points: below the rule's 5


def test_data_stall_sentences(tmp_path):
    runs = [
        (shuffled(1, 1.4), None, {**DATA, "shares": {"data_ms": 0.30}}),
        (shuffled(2, 1.1), None, {**DATA, "workers": 1, "shares": {"data_ms": 0.12}}),
        (shuffled(3), None, {**DATA, "workers": 4, "shares": {"data_ms": 0.02}}),
    ]
    text = section_text(report(tmp_path / "a", runs), "data-loading")
    ms = np.mean(shuffled(1, 1.4)[1:]) * 0.30 * 1.98 / 2
    assert (
        f"With 0 workers the steps wait for data 30% of the time ({fmt_sig(ms)} ms per step); "
        "4 workers bring it to 2%: loader workers build the next batches while the step runs." in text
    ), text
    runs = [(shuffled(n), None, {**DATA, "workers": w, "shares": {"data_ms": 0.03}}) for n, w in enumerate((0, 2))]
    text = section_text(report(tmp_path / "b", runs), "data-loading")
    assert "less than 5% of the time in every configuration measured (at most 3%" in text, text


def test_batch_section_names_the_largest_that_fits(tmp_path):
    runs = [
        (shuffled(1), None, {"batch": 8, "global_batch": 16, "peak_memory": 3 << 20}),
        (shuffled(2, 1.5), None, {"batch": 16, "global_batch": 32, "peak_memory": 5 << 20}),
    ]
    out = report(tmp_path, runs, oom=[(32, 9 << 20)])
    text = section_text(out, "batch-size")
    assert (
        "The largest batch that fits is 16 per rank (peak memory 5 MiB per rank); batch 32 ran out of memory." in text
    )
    # 16 per rank at 1.5x the step time: 2/1.5 = +33% samples/s, significant.
    assert "Samples/s at batch 16 is +33.3% [" in text and "against batch 8, significant" in text, text
    assert "| 32 |" in text and "out of memory" in text and "9 MiB" in text


def test_an_oom_alone_makes_the_batch_section(tmp_path):
    out = report(tmp_path, two({}, {"precision": "bf16"}), oom=[(64, 7 << 20)])
    assert "batch-size" in sections(out)
    assert "The largest batch that fits is 8 per rank (peak memory 1 MiB per rank); batch 64 ran out of memory." in (
        section_text(out, "batch-size")
    )


def test_precision_sentences_and_the_side_by_side_figure(tmp_path):
    steps = len(BASE)
    runs = [
        (shuffled(1), None, {"loss": np.linspace(3.0, 2.0, steps)}),
        (shuffled(2, 1.25), None, {"precision": "fp16", "loss": np.linspace(3.0, 2.5, steps), "skipped": 2}),
    ]
    out = report(tmp_path, runs)
    text = section_text(out, "precision")
    tail = lambda end: np.mean(np.linspace(3.0, end, steps)[-3:])  # noqa: E731
    assert "fp16 against fp32: -20% [" in text and "samples/s, significant" in text, text
    # Each phase a tenth of the step: forward + backward scale with the step time, 1.25x.
    fb32 = np.mean(shuffled(1)[1:]) * 0.2 * 1.98 / 2
    assert f"forward and backward take {fb32 * 1.25:.0f} ms per step in fp16 against {fb32:.0f} ms" in text
    assert "this device computes fp16 no faster than fp32" in text
    l32, l16 = tail(2.0), tail(2.5)
    assert f"Final loss {l16:.2f} against {l32:.2f}" in text and f"{abs(l16 / l32 - 1):.0%} apart" in text, text
    assert "2 step(s) skipped for inf/NaN gradients" in text
    png = out / "precision-study-1.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_parallelism_states_the_scaling_efficiency(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    train_file(d / "np1.h5", [(shuffled(1), None, {"global_batch": 8, "rank_factors": (1.0,)})], CMD, hosts=("h0",))
    # Two ranks, each step 1.25x as long: 2 / 1.25 = 1.6x the samples/s, 80% efficiency.
    train_file(d / "np2.h5", [(shuffled(2, 1.25), None, {"global_batch": 16})], CMD)
    build_report([d], tmp_path / "out")
    text = section_text(tmp_path / "out", "parallelism")
    assert "From 1 to 2 ranks samples/s grows 1.6x: scaling efficiency 80% (1 is perfect)." in text, text


def test_hardware_from_provenance_and_peaks(tmp_path):
    dev = ["cuda:0 NVIDIA H200 (0000:1b:00.0)", "cuda:1 NVIDIA H200 (0000:2a:00.0)"]
    runs = [(shuffled(1), None, {"device": "cuda", "peak_tflops": 989.0, "peak_source": "H200 SXM", "mfu": 0.41})]
    out = report(tmp_path, runs, devices=dev)
    text = section_text(out, "hardware")
    assert "| devices | NVIDIA H200 |" in text
    assert "the best run reaches 41.0% of the 989 TFLOPS peak (H200 SXM): resnet18, fp32, batch 8 per rank." in text
    assert "hardware" not in sections(report(tmp_path / "none", [(shuffled(1), None, {})]))  # no device, no peak


def test_two_machines_side_by_side(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    train_file(d / "a.h5", two({}, {"bucket_mb": 5.0}), CMD, hosts=("a100-0", "a100-1"))
    train_file(
        d / "b.h5",
        [(shuffled(n, 1 / 1.2), None, s) for n, s in ((1, {}), (2, {"bucket_mb": 5.0}))],
        CMD,
        hosts=("h100-0", "h100-1"),
    )
    build_report([d], tmp_path / "out")
    text = section_text(tmp_path / "out", "machines")
    assert "| a100-0,a100-1 | h100-0,h100-1 | h100-0,h100-1 against a100-0,a100-1 |" in text.replace("\n", " ")
    assert "2 of the 2 configurations measured on both run significantly faster on h100-0,h100-1, by +20%" in text


# -- collectives against their baseline ----------------------------------------------------------

SIZES = [1024, 65536, 1 << 20]


# busbw factor on 2 ranks (doc/metrics.md section 1): allreduce 2(n-1)/n = 1, allgather (n-1)/n = 0.5.
FACTOR_2_RANKS = {"allreduce": 1.0, "allgather": 0.5}


def comm_file(path, settings, collective="allreduce"):
    """A merged sweep file of `collective` runs on 2 ranks: settings is [(env, time scale)], each run
    20 iterations of distinct times (the same values, scaled), per-size time 5 µs + size/1e4."""
    with h5py.File(path, "w") as f:
        f.attrs.update(
            schema="dtune-results",
            schema_version=np.int64(1),
            tool="dtune sweep merge",
            status="complete",
            dtune_version="0.1.0",
            exit_status=np.int64(0),
        )
        runs, points = f.create_group("runs"), f.create_group("points")
        for k, (env, scale) in enumerate(settings):
            pid = f"p{k:03d}"
            point = {
                "id": pid,
                "sweep": "c",
                "binary": "dtune-comm",
                "args": [],
                "env": env,
                "ranks": 2,
                "nodes": 1,
                "ranks_per_node": 0,
                "repeat": 0,
                "values": {},
            }
            pg = points.create_group(pid)
            pg.attrs["point"] = json.dumps(point)
            prov = pg.create_group("provenance")
            prov.attrs["world_size"] = np.int64(2)
            prov["rank_host"] = np.array([b"n0", b"n0"])
            prov.create_group("env").attrs.update(env)
            g = runs.create_group(f"{k:04d}-{pid}-{collective}")
            g.attrs.update(
                benchmark="comm",
                collective=collective,
                backend="mpi",
                dtype="float32",
                op="sum" if collective == "allreduce" else "none",
                root=np.int64(-1),
                busbw_factor=FACTOR_2_RANKS[collective],
                status="ok",
                fit_alpha_us=5.0,
                fit_busbw_gbps=10.0 / scale,
                fit_r2=0.99,
                point_id=pid,
                point=json.dumps(point),
            )
            base = np.array([5.0 + s / 1e4 for s in SIZES]) * scale
            it = base[None, :, None, None] * (1 + np.arange(20) / 100)[None, None, None, :]
            t = np.broadcast_to(it, (2, len(SIZES), 2, 20)).copy()
            g["placement"] = np.array([b"out-of-place", b"in-place"])
            g["size_bytes"] = np.array(SIZES, np.int64)
            g["requested_bytes"] = np.array(SIZES, np.int64)
            g["count"] = np.array([s // (4 if collective == "allreduce" else 8) for s in SIZES], np.int64)
            g["time_us"] = t
            g["wrong"] = np.zeros((2, len(SIZES), 2), np.int64)
            rep = np.median(t[:, :, 0, :], axis=2)
            g["time_us_reported"] = rep
            g["algbw_gbps"] = np.array(SIZES) / rep / 1e3
            g["busbw_gbps"] = np.array(SIZES) * FACTOR_2_RANKS[collective] / rep / 1e3
            g["slowest_rank"] = np.zeros((2, len(SIZES)), np.int64)
    return path


def summary_lines(out) -> list:
    return [line.replace("\\", "") for line in section_text(out, "summary").splitlines() if line.startswith("- ")]


def test_a_faster_setting_is_stated_against_the_no_settings_baseline(tmp_path):
    f = comm_file(tmp_path / "c.h5", [({}, 1.0), ({"OMPI_MCA_btl": "self,tcp"}, 1.5), ({"NCCL_ALGO": "Tree"}, 0.7)])
    build_report([f], tmp_path / "out")
    (line,) = [x for x in summary_lines(tmp_path / "out") if "allreduce" in x]
    assert line.startswith("- **-30% [") and "significant" in line, line
    assert "set `NCCL_ALGO=Tree` (against the baseline mpi)" in line, line
    table = section_text(tmp_path / "out", "collectives")
    assert "| mpi | baseline (no settings: the defaults) |" in table
    assert "| mpi OMPI_MCA_btl=self,tcp | +50% [" in table


def test_nothing_beats_the_baseline(tmp_path):
    f = comm_file(tmp_path / "c.h5", [({}, 1.0), ({"OMPI_MCA_btl": "self,tcp"}, 1.5)])
    build_report([f], tmp_path / "out")
    (line,) = [x for x in summary_lines(tmp_path / "out") if "allreduce" in x]
    assert "no setting measured beats the baseline (mpi); every other setting is slower." in line, line


def test_the_fit_sentence_states_the_half_bandwidth_size(tmp_path):
    f = comm_file(tmp_path / "c.h5", [({}, 1.0)])
    build_report([f], tmp_path / "out")
    text = section_text(tmp_path / "out", "communication")
    # α = 5 µs, B = 10 GB/s, factor 1: half of B at 5 * 10 * 1e3 = 50000 bytes = 48.8 KiB.
    assert "allreduce approaches 10 GB/s bus bandwidth (mpi; fit r² 0.99); below 48.8 KiB per rank the latency" in text


def test_the_half_bandwidth_size_divides_by_the_busbw_factor(tmp_path):
    # allgather on 2 ranks moves (n-1)/n = 0.5 of its size per rank over the link: busbw = S x 0.5 / t.
    # Under t = α + 0.5 S / B, busbw is B/2 where 0.5 S = α·B: S = 5 µs x 10 GB/s / 0.5 = 100000 bytes.
    f = comm_file(tmp_path / "c.h5", [({}, 1.0)], collective="allgather")
    build_report([f], tmp_path / "out")
    text = section_text(tmp_path / "out", "communication")
    assert "allgather approaches 10 GB/s bus bandwidth (mpi; fit r² 0.99); below 97.7 KiB per rank the latency" in text


# -- the srun form -------------------------------------------------------------------------------


def test_slurm_runs_get_the_srun_form_and_the_shell_exports_its_settings(tmp_path):
    env = {"SLURM_JOB_ID": "123", "NCCL_DEBUG": "WARN", "UCX_TLS": "rc x"}
    out = report(tmp_path, [(shuffled(1), None, {})], env=env)
    r = build_report([tmp_path / "r.h5"], out)
    (c,) = r["studies"][0].configs
    text = reproduce_command(c)
    assert command_tokens(text)[:8] == [
        "NCCL_DEBUG=WARN",
        "UCX_TLS=rc x",
        "srun",
        "--mpi=pmix",
        "-n",
        "2",
        "-N",
        "2",
    ], text
    assert "mpirun" not in text
    # Pasted into bash with an srun on PATH that records its environment and arguments.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    shim = bindir / "srun"
    shim.write_text('#!/bin/sh\nprintf "%s|%s\\n" "$NCCL_DEBUG" "$UCX_TLS"; printf "%s\\n" "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    p = subprocess.run(
        ["bash", "-c", text],
        env={**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "WARN|rc x" and lines[1:6] == ["--mpi=pmix", "-n", "2", "-N", "2"]
    assert lines[6] == "build/bin/dtune-train" and "--width" in lines


# -- every pasted form, with values that need quoting ---------------------------------------------

# Values a shell would split, unquote or expand if they were pasted unquoted.
NEEDS_QUOTING = {"UCX_TLS": "rc x", "NCCL_SOCKET_IFNAME": "a\"b'c", "OMPI_MCA_btl_tcp_if_include": "$HOME;`id`"}


def pasted(tmp_path, script) -> list:
    """The stdout lines of `script` run by bash, with an mpirun and an srun on PATH that print the
    NEEDS_QUOTING variables of their environment, then their arguments, one per line."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    prints = "".join(f'printf "%s\\n" "${k}"\n' for k in NEEDS_QUOTING) + 'printf "%s\\n" "$@"\n'
    for name in ("mpirun", "srun"):
        shim = bindir / name
        shim.write_text("#!/bin/sh\n" + prints)
        shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    p = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()


@pytest.mark.parametrize("form", ["mpirun", "srun", "change"])
def test_every_pasted_form_carries_values_that_need_quoting(tmp_path, form):
    # The baseline without the settings, a faster configuration with them: its copy block (mpirun
    # -x NAME=value, or NAME=value before srun for a run Slurm launched) and the summary's words of
    # what to change, pasted into bash, hand every value over exactly as recorded.
    slurm = {"SLURM_JOB_ID": "123"} if form == "srun" else {}
    d = tmp_path / "d"
    d.mkdir()
    train_file(d / "base.h5", [(shuffled(1, 1.1), None, {})], CMD, env=slurm)
    train_file(d / "fast.h5", [(shuffled(2), None, {})], CMD, env={**slurm, **NEEDS_QUOTING})
    (f,) = build_report([d], tmp_path / "out")["findings"]
    assert f.improves and f.best[0].env["UCX_TLS"] == "rc x"
    n = len(NEEDS_QUOTING)
    if form == "change":
        assert len(f.changes) == n, f.changes
        lines = pasted(tmp_path, "".join(f"export {c}\n" for c in f.changes) + "mpirun\n")
        assert lines[:n] == list(NEEDS_QUOTING.values()), (f.changes, lines)
    elif form == "srun":
        lines = pasted(tmp_path, reproduce_command(f.best[0]))
        assert lines[: n + 1] == [*NEEDS_QUOTING.values(), "--mpi=pmix"], lines
    else:
        args = pasted(tmp_path, reproduce_command(f.best[0]))[n:]
        given = [args[i + 1] for i, a in enumerate(args) if a == "-x"]
        assert sorted(given) == sorted(f"{k}={v}" for k, v in NEEDS_QUOTING.items()), args


def test_the_mesh_axis_states_tensor_parallel_communication(tmp_path):
    """Two tp 2 x dp 2 orders on 2 nodes: the report's table gains the tensor-parallel column and a
    sentence states each order's share of the step, with why (issue 57's placement: the order
    decides whether a tp group shares a node)."""
    quads = (1.0, 1.0, 1.0, 1.0)
    m1, m2 = np.mean(shuffled(1)[1:]), np.mean(shuffled(2, 1.5)[1:])  # measured steps, ms
    mesh = {"rank_factors": quads, "mesh_dp": 2, "mesh_pp": 1, "mesh_tp": 2}
    runs = [
        (shuffled(1), None, {**mesh, "mesh_order": "tp,pp,dp", "tp_comm_ms_per_step": 0.1 * m1}),
        (shuffled(2, 1.5), None, {**mesh, "mesh_order": "dp,pp,tp", "tp_comm_ms_per_step": 0.5 * m2}),
    ]
    md = (report(tmp_path, runs, hosts=("h0", "h0", "h1", "h1")) / "report.md").read_text().replace("\\", "")
    assert "| tensor-parallel communication (ms) |" in md, md
    want = (
        f"tensor-parallel communication is 50% of the step at mesh dp2×tp2 (pp,dp,tp) and 10% at dp2×tp2 "
        f"(tp,pp,dp) ({fmt_sig(0.5 * m2)} ms and {fmt_sig(0.1 * m1)} ms per step): a tensor-parallel group's "
        "collectives"
    )
    assert want in md, md
