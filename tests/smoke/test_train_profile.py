"""dtune-train --profile-steps: the operator table (printed, and per rank in HDF5) covers the
profiled window and has the matrix multiplies on top for the tiny GPT; every rank's Chrome trace
loads in Holistic Trace Analysis with its rank, holds the ProfilerStep#N annotations, the operators
and dtune's phase and bucket-reduction spans aligned inside the steps; Perfetto's trace processor
loads it where its binary is available; profiling off leaves no trace of itself."""

import json
import math
import os
from collections import Counter
from pathlib import Path

import h5py
import numpy as np
import pytest
from test_train_results import run

GPT = ["--model", "gpt2-tiny", "--threads", "1"]
MATMUL = ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear")


def events(trace):
    return json.loads(Path(trace).read_text())["traceEvents"]


def steps_of(evs):
    return {e["name"]: e for e in evs if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")}


def hta_ranks(trace_dir):
    from hta.trace_analysis import TraceAnalysis  # the real reader

    analysis = TraceAnalysis(trace_dir=str(trace_dir))
    t = analysis.t
    names = t.symbol_table.get_sym_table()
    out = {}
    for r in t.get_ranks():
        df = t.get_trace(r)
        out[r] = {
            "names": {names[i] for i in df["name"].unique()},
            "cats": {names[i] for i in df["cat"].unique()},
            "meta": t.meta_data[r],
        }
    return out


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    d = tmp_path_factory.mktemp("profile1")
    r = run(
        GPT
        + [
            "--batch",
            "8",
            "--steps",
            "4",
            "--warmup-steps",
            "1",
            "--profile-steps",
            "2:2",
            "--profile-dir",
            d / "traces",
            "--output",
            d / "t.h5",
        ]
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return d, r


def test_operator_table_has_the_matmuls_on_top_and_covers_the_window(one_rank):
    d, r = one_rank
    assert "# profile: steps 2-3" in r.stdout and "aten::mm" in r.stdout
    with h5py.File(d / "t.h5") as f:
        (g,) = f["runs"].values()
        p = g["profile"]
        assert p.attrs["first_step"] == 2 and p.attrs["steps"] == 2 and p.attrs["sort_by"] == "self_cpu_us"
        t = p["rank0"]
        names = [n.decode() if isinstance(n, bytes) else n for n in t["name"][()]]
        self_cpu = t["self_cpu_us"][()]
        assert list(self_cpu) == sorted(self_cpu, reverse=True)
        assert any(n in MATMUL for n in names[:3]), names[:10]
        assert (t["calls"][()] >= 1).all() and (t["cpu_total_us"][()] >= self_cpu - 1e-6).all()
        calls = dict(zip(names, t["calls"][()].tolist()))
        window = p["window_us"][0]
        # One thread records operators (--threads 1, autograd on CPU runs on the caller), so their
        # self times are disjoint spans inside the window: a bound no machine load can break.
        assert 0 < self_cpu.sum() <= window, (self_cpu.sum(), window)
        # The profiled steps are marked and left out of the throughput; the overhead is stored.
        assert list(g["profiled"][()]) == [0, 0, 1, 1, 0]
        assert g.attrs["throughput_steps"] == 2 and g.attrs["steps"] == 4
        assert np.isfinite(p.attrs["overhead"]) and p.attrs["profiled_step_p50_ms"] > 0
        trace = p["trace_path"][0]
        trace = trace.decode() if isinstance(trace, bytes) else trace
    assert Path(trace) == d / "traces" / "rank0.pt.trace.json"
    # The table covers exactly the window's operators, as the trace (the same profiler events)
    # records them: per-name call counts equal, and the self times (duration minus the children's)
    # add up to the top-level operators' time, all inside the two profiled steps, both of which hold
    # operators. Counts and sums of the same events: exact on any machine, where the share of the
    # wall time (96-98% measured) moves with the load.
    evs = events(trace)
    ops = [e for e in evs if e.get("cat") == "cpu_op" and e.get("ph") == "X"]
    assert calls == dict(Counter(e["name"] for e in ops))
    steps = steps_of(evs)
    top, per_step, end = 0.0, dict.fromkeys(steps, 0.0), -math.inf
    assert len({e["tid"] for e in ops}) == 1
    for e in sorted(ops, key=lambda e: (e["ts"], -e["dur"])):
        if e["ts"] >= end:  # not nested in the previous top-level operator
            top, end = top + e["dur"], e["ts"] + e["dur"]
            (step,) = [n for n, s in steps.items() if s["ts"] - 1 <= e["ts"] and end <= s["ts"] + s["dur"] + 1]
            per_step[step] += e["dur"]
    assert self_cpu.sum() == pytest.approx(top, rel=1e-9, abs=1e-3)
    assert set(steps) == {"ProfilerStep#2", "ProfilerStep#3"} and all(v > 0 for v in per_step.values()), per_step


def test_trace_has_steps_operators_and_aligned_phases(one_rank):
    d, _ = one_rank
    evs = events(d / "traces" / "rank0.pt.trace.json")
    steps = steps_of(evs)
    assert set(steps) == {"ProfilerStep#2", "ProfilerStep#3"}
    assert any(e.get("cat") == "cpu_op" and e["name"] == "aten::mm" for e in evs)
    phases = [e for e in evs if e.get("cat") == "dtune_phase"]
    assert {"data", "forward", "backward", "optimizer"} <= {e["name"] for e in phases}
    # dtune's spans come from the steady clock; aligned, each one lies inside a profiled step.
    slack = 50.0  # microseconds
    for e in phases:
        assert any(
            s["ts"] - slack <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + slack for s in steps.values()
        ), e
    fwd = next(e for e in phases if e["name"] == "forward")
    assert any(e.get("cat") == "cpu_op" and fwd["ts"] <= e["ts"] <= fwd["ts"] + fwd["dur"] for e in evs)
    rows = {e["args"]["name"] for e in evs if e.get("ph") == "M" and e.get("name") == "thread_name"}
    assert "dtune phases (CPU side)" in rows


def test_holistic_trace_analysis_reads_the_trace(one_rank):
    d, _ = one_rank
    ranks = hta_ranks(d / "traces")
    assert list(ranks) == [0]
    assert ranks[0]["meta"]["distributedInfo"] == {"backend": "mpi", "rank": 0, "world_size": 1}
    assert "aten::mm" in ranks[0]["names"] and {"cpu_op", "dtune_phase"} <= ranks[0]["cats"]


def test_two_ranks_each_write_a_trace_with_their_rank_and_reductions(tmp_path):
    r = run(
        GPT
        + [
            "--batch",
            "4",
            "--steps",
            "3",
            "--warmup-steps",
            "1",
            "--bucket-mb",
            "0.5",
            "--first-bucket-mb",
            "0.25",
            "--profile-steps",
            "1:2",
            "--profile-dir",
            tmp_path / "tr",
            "--output",
            tmp_path / "t.h5",
        ],
        np_=2,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    with h5py.File(tmp_path / "t.h5") as f:
        (g,) = f["runs"].values()
        assert set(g["profile"]) == {"rank0", "rank1", "window_us", "finish_ms", "trace_path"}
        buckets = len(g["bucket_bytes"][()])
    assert buckets > 1
    for rank in (0, 1):
        evs = events(tmp_path / "tr" / f"rank{rank}.pt.trace.json")
        red = [e for e in evs if e.get("cat") == "dtune_comm"]
        # Every bucket of both profiled steps, in order within each step.
        assert len(red) == 2 * buckets, [e["name"] for e in red]
        assert [e["args"]["bucket"] for e in red] == list(range(buckets)) * 2
        assert all(e["args"]["bytes"] > 0 and e["dur"] >= 0 for e in red)
    ranks = hta_ranks(tmp_path / "tr")
    assert sorted(ranks) == [0, 1]
    for rank, info in ranks.items():
        assert info["meta"]["distributedInfo"] == {"backend": "mpi", "rank": rank, "world_size": 2}
        assert "dtune_comm" in info["cats"]


@pytest.mark.opt_in("DTUNE_TRACE_PROCESSOR")
def test_perfetto_trace_processor_loads_the_trace(one_rank):
    # Perfetto's Python package drives the trace_processor_shell binary, which it would download
    # from Google at run time; neither PyPI nor Debian ships it, so it runs (opt-in) where
    # DTUNE_TRACE_PROCESSOR names one.
    shell = os.environ["DTUNE_TRACE_PROCESSOR"]
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    d, _ = one_rank
    tp = TraceProcessor(trace=str(d / "traces" / "rank0.pt.trace.json"), config=TraceProcessorConfig(bin_path=shell))
    names = {row.name for row in tp.query("select distinct name from slice")}
    tp.close()
    assert {"ProfilerStep#2", "forward", "backward", "aten::mm"} <= names


def test_profiling_off_leaves_nothing(tmp_path):
    r = run(GPT + ["--batch", "4", "--steps", "2", "--warmup-steps", "0", "--output", tmp_path / "t.h5"], timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "# profile" not in r.stdout
    with h5py.File(tmp_path / "t.h5") as f:
        (g,) = f["runs"].values()
        assert "profile" not in g and list(g["profiled"][()]) == [0, 0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.h5"]


@pytest.mark.parametrize("value", ["3", "a:b", "2:0", "-1:2", "4:3"])
def test_bad_profile_window_exits_2(tmp_path, value):
    r = run(
        GPT
        + [
            "--batch",
            "2",
            "--steps",
            "4",
            "--warmup-steps",
            "1",
            "--profile-steps",
            value,
            "--output",
            tmp_path / "t.h5",
        ],
        timeout=120,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    errors = [line for line in r.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "--profile-steps" in errors[0], r.stderr
    assert list(tmp_path.iterdir()) == []
