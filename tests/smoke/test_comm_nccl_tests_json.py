"""nccl-tests users are not turned away: -g 1 / -t 1 are accepted (anything else is one line, exit 2),
and -J FILE writes the JSON that nccl-tests writes (NVIDIA/nccl-tests src/util.cu, schema version 3:
key names, their order, value types), its figures the same as in dtune's HDF5 file and table, read
by nccl-tests' own tools/analyze_perf_json.py (copied in nccl_tests/)."""

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from conftest import bin_dir, data_rows, run_comm

ANALYZER = Path(__file__).parent / "nccl_tests" / "analyze_perf_json.py"
TIME_RE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$")  # src/util.cu TIME_STRING_FORMAT

# src/util.cu: jsonOutputInit, writeDeviceReport, writeResultHeader/Footer, writeErrors,
# jsonOutputFinalize, in the order it writes them.
TOP_KEYS = [
    "version",
    "start_time",
    "args",
    "env",
    "nccl_version",
    "config",
    "results",
    "out_of_bounds",
    "average_bus_bandwidth",
    "errors",
    "end_time",
]
CONFIG_KEYS = [
    "nthreads",
    "ngpus",
    "minimum_bytes",
    "maximum_bytes",
    "step_factor",
    "warmup_iters",
    "iterations",
    "aggregated_iterations",
    "validation",
    "graph",
    "blocking_collectives",
    "per_iter_timing",
    "per_iter_skip",
    "parallel_init",
    "devices",
]
DEVICE_KEYS = ["rank", "group", "pid", "hostname", "device", "device_hex", "device_info"]
RESULT_KEYS = [
    "size",
    "count",
    "type",
    "redop",
    "root",
    "out_of_place",
    "out_of_place_per_iter",
    "in_place",
    "in_place_per_iter",
    "actual_iterations",
    "experiment_name",
]
BODY_KEYS = ["time", "alg_bw", "bus_bw", "nwrong"]
PER_ITER_KEYS = [
    "skipped_iterations",
    "min_us",
    "max_us",
    "avg_us",
    "p50_us",
    "p95_us",
    "p99_us",
    "stdev_us",
    "cv_pct",
    "times_us",
    "per_process_max_times_us",
]
ITERS = 7


def load(path):
    def no_duplicates(pairs):
        keys = [k for k, _ in pairs]
        assert len(keys) == len(set(keys)), keys
        return dict(pairs)

    return json.loads(Path(path).read_text(), object_pairs_hook=no_duplicates)


def nccl_tests_stats(times):
    """src/util.cu computeIterStats, written out again from its code."""
    s = sorted(times)
    n = len(s)
    idx = lambda q: min(n - 1, (n * q + 99) // 100 - 1)  # noqa: E731
    avg = sum(s) / n
    stdev = (sum((t - avg) ** 2 for t in s) / n) ** 0.5
    return {
        "min_us": s[0],
        "max_us": s[-1],
        "avg_us": avg,
        "p50_us": s[n // 2],
        "p95_us": s[idx(95)],
        "p99_us": s[idx(99)],
        "stdev_us": stdev,
        "cv_pct": stdev / avg * 100 if avg > 0 else 0.0,
    }


def h5_runs(path):
    with h5py.File(path, "r") as f:
        return {
            g.attrs["collective"]: {k: g[k][()] for k in g} | {"factor": g.attrs["busbw_factor"]}
            for g in f["runs"].values()
        }


@pytest.fixture(scope="module")
def two_collectives(tmp_path_factory):
    d = tmp_path_factory.mktemp("json")
    args = [
        "-b",
        "8",
        "-e",
        "2K",
        "-f",
        "4",
        "-n",
        str(ITERS),
        "-w",
        "1",
        "-c",
        "1",
        "-g",
        "1",
        "-t",
        "1",
        "--collective",
        "allreduce,allgather",
        "-I",
        "1",
        "-J",
        d / "f.json",
        "--output",
        d / "r.h5",
    ]
    r = run_comm(2, args, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    return r, d, [str(bin_dir() / "dtune-comm")] + [str(a) for a in args]


def test_one_file_per_collective_in_nccl_tests_layout(two_collectives):
    r, d, argv = two_collectives
    assert sorted(p.name for p in d.glob("*.json")) == ["f-allgather.json", "f-allreduce.json"]
    for name in ("allreduce", "allgather"):
        assert f"# Writing JSON output to {d / f'f-{name}.json'}" in r.stdout
        doc = load(d / f"f-{name}.json")
        assert list(doc) == TOP_KEYS
        assert doc["version"] == 3
        assert TIME_RE.match(doc["start_time"]) and TIME_RE.match(doc["end_time"])
        assert doc["args"] == argv
        assert all(isinstance(e, str) for e in doc["env"]) and any(e.startswith("PATH=") for e in doc["env"])
        assert doc["nccl_version"] == 0  # mpi backend: no NCCL
        cfg = doc["config"]
        assert list(cfg) == CONFIG_KEYS
        assert {k: cfg[k] for k in CONFIG_KEYS[:-1]} == {
            "nthreads": 1,
            "ngpus": 1,
            "minimum_bytes": 8,
            "maximum_bytes": 2048,
            "step_factor": 4,
            "warmup_iters": 1,
            "iterations": ITERS,
            "aggregated_iterations": 1,
            "validation": 1,
            "graph": 0,
            "blocking_collectives": "false",
            "per_iter_timing": "true",
            "per_iter_skip": 0,
            "parallel_init": "false",
        }  # jsonBool writes the strings "true"/"false"
        assert [list(x) for x in cfg["devices"]] == [DEVICE_KEYS] * 2
        assert [x["rank"] for x in cfg["devices"]] == [0, 1]
        pids = [x["pid"] for x in cfg["devices"]]
        assert all(isinstance(p, int) and p > 0 for p in pids) and len(set(pids)) == 2
        assert {x["hostname"] for x in cfg["devices"]} == {socket.gethostname().split(".")[0]}
        assert {(x["device"], x["device_hex"], x["device_info"]) for x in cfg["devices"]} == {(-1, "", "cpu")}
        assert [x["size"] for x in doc["results"]] == [8, 32, 128, 512, 2048]
        assert doc["out_of_bounds"] == {"count": 0, "okay": "true"}
        assert list(doc["average_bus_bandwidth"]) == ["bandwidth", "okay"]
        assert doc["average_bus_bandwidth"]["okay"] == "unchecked"
        assert doc["errors"] == []


def test_results_agree_with_hdf5_and_table(two_collectives):
    r, d, _ = two_collectives
    runs = h5_runs(d / "r.h5")
    for name, n_factor in (("allreduce", 2 * 1 / 2), ("allgather", 1 / 2)):
        doc, h5 = load(d / f"f-{name}.json"), runs[name]
        assert h5["factor"] == pytest.approx(n_factor)
        busbw = []
        for s, res in enumerate(doc["results"]):
            assert list(res) == RESULT_KEYS
            assert res["size"] == h5["size_bytes"][s] and res["count"] == h5["count"][s]
            assert (res["type"], res["redop"]) == ("float", "sum" if name == "allreduce" else "none")
            assert res["root"] == "    -1"  # "%6i"
            assert res["actual_iterations"] == ITERS and res["experiment_name"] == ""
            for p, key in enumerate(("out_of_place", "in_place")):
                body, it = res[key], res[key + "_per_iter"]
                assert list(body) == BODY_KEYS
                assert all(isinstance(body[k], float) for k in BODY_KEYS)
                assert body["nwrong"] == 0.0
                assert body["time"] == h5["time_us_reported"][p, s]
                assert body["alg_bw"] == h5["algbw_gbps"][p, s]
                assert body["bus_bw"] == h5["busbw_gbps"][p, s]
                assert body["alg_bw"] == pytest.approx(res["size"] / body["time"] / 1e3, rel=1e-12)
                assert body["bus_bw"] == pytest.approx(body["alg_bw"] * n_factor, rel=1e-12)
                busbw.append(body["bus_bw"])
                assert list(it) == PER_ITER_KEYS
                assert it["skipped_iterations"] == 0
                rows = np.array(it["per_process_max_times_us"])
                assert rows.shape == (2, ITERS)  # [process][iteration]
                np.testing.assert_array_equal(rows, h5["time_us"][p, s])  # [rank][iteration]
                assert len(it["times_us"]) == ITERS
                np.testing.assert_array_equal(it["times_us"], rows.max(axis=0))
                want = nccl_tests_stats(it["times_us"])
                for k, v in want.items():
                    assert it[k] == pytest.approx(v, rel=1e-12, abs=1e-12), k
        assert doc["average_bus_bandwidth"]["bandwidth"] == pytest.approx(np.mean(busbw), rel=1e-12)
        # The table: nccl-tests' 13 columns, then the collective; same time as the file.
        rows = [row for row in data_rows(r.stdout) if row[-1] == name]
        assert len(rows) == len(doc["results"]) and all(len(row) == 14 for row in rows)
        for row, res in zip(rows, doc["results"]):
            assert int(row[0]) == res["size"]
            assert float(row[5]) == pytest.approx(res["out_of_place"]["time"], rel=1e-3, abs=0.006)
            assert float(row[9]) == pytest.approx(res["in_place"]["time"], rel=1e-3, abs=0.006)


@pytest.mark.parametrize("placement", [[], ["--in-place"]], ids=["out_of_place", "in_place"])
def test_nccl_tests_analyzer_reads_it(two_collectives, placement):
    _, d, _ = two_collectives
    a = subprocess.run(
        [sys.executable, str(ANALYZER), str(d / "f-allgather.json"), "--all"] + placement,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert a.returncode == 0, a.stderr
    label, name = ("IP", "in-place") if placement else ("OOP", "out-of-place")
    assert f"Placement:  {name}" in a.stdout
    assert f"Consistency (times_us == max over process rows, {label}): PASS" in a.stdout, a.stdout
    assert "Process rows: 2" in a.stdout and f"Iterations: {ITERS}" in a.stdout
    assert "PER-PROCESS STRAGGLER ANALYSIS" in a.stdout and "No per-process data" not in a.stdout


def test_without_per_iter_and_checks(tmp_path):
    """-I 0 (the default): no per-iteration blocks; -c 0: nwrong null; -f 1: step_bytes; one rank:
    no per-process rows even with -I 1."""
    r = run_comm(
        2,
        ["-b", "8", "-e", "24", "-i", "8", "-n", "2", "-c", "0", "-J", tmp_path / "a.json", "--no-output"],
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    doc = load(tmp_path / "a.json")
    assert "step_factor" not in doc["config"] and doc["config"]["step_bytes"] == 8
    assert doc["config"]["per_iter_timing"] == "false" and doc["config"]["validation"] == 0
    assert [list(x) for x in doc["results"]] == [[k for k in RESULT_KEYS if "per_iter" not in k]] * 3
    assert all(x[p]["nwrong"] is None for x in doc["results"] for p in ("out_of_place", "in_place"))
    r = run_comm(0, ["-b", "8", "-e", "8", "-n", "3", "-I", "1", "-J", tmp_path / "b.json", "--no-output"])
    assert r.returncode == 0, r.stderr
    it = load(tmp_path / "b.json")["results"][0]["out_of_place_per_iter"]
    assert list(it) == PER_ITER_KEYS[:-1] and len(it["times_us"]) == 3


def test_existing_file_is_kept_and_numbered(tmp_path):
    """src/util.cu jsonOutputInit: fopen "wx"; on EEXIST try FILE.0, FILE.1, ..."""
    target = tmp_path / "f.json"
    target.write_text("keep")
    for n in (0, 1):
        r = run_comm(2, ["-b", "8", "-e", "8", "-n", "1", "-J", target, "--no-output", "--format", "csv"], timeout=120)
        assert r.returncode == 0, r.stderr
        assert f"# Writing JSON output to {target}.{n}" in r.stderr  # stdout holds the CSV
        assert load(f"{target}.{n}")["results"][0]["size"] == 8
    assert target.read_text() == "keep"


def test_nccl_tests_readme_command_runs():
    """nccl-tests' README: all_reduce_perf -b 8 -e 128M -f 2 -g 1 (sizes cut short here)."""
    r = run_comm(2, ["-b", "8", "-e", "128K", "-f", "2", "-g", "1", "-n", "2", "--no-output"], timeout=180)
    assert r.returncode == 0, r.stderr
    assert [int(x[0]) for x in data_rows(r.stdout)] == [8 << k for k in range(15)]
    assert all(len(x) == 13 for x in data_rows(r.stdout))  # one collective: nccl-tests' columns only


@pytest.mark.parametrize(
    "args,flag",
    [
        (["-g", "2"], "-g/--ngpus"),
        (["-t", "4"], "-t/--nthreads"),
        (["--ngpus", "0"], "-g/--ngpus"),
        (["-J", "out.txt"], "-J/--output_file"),
        (["-J", "/proc/dtune-no-such-dir/f.json"], "-J/--output_file"),
        (["-I", "2"], "--per_iter_timing"),
    ],
)
def test_refused_with_one_line(tmp_path, args, flag):
    r = run_comm(2, ["-b", "8", "-e", "8", "--output", tmp_path / "r.h5"] + args, timeout=60, cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = [line for line in r.stderr.splitlines() if "error" in line]
    assert len(lines) == 1 and flag in lines[0], r.stderr  # once, by rank 0
    if flag in ("-g/--ngpus", "-t/--nthreads"):
        assert "one GPU per rank" in lines[0] and "mpirun -np" in lines[0]
    assert list(tmp_path.iterdir()) == []
