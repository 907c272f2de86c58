"""`dtune model` end to end on files the real binaries wrote (tiny GPT, a few steps): dtune-train
records each parameter's gradient arrival within backward, in the step order and parameter order
the model reads; the model plans the buckets exactly as the trainer did; `predict`, `check` and
`project` print predictions from a 1-rank profile and a dtune-comm file, `predict
--nodes-per-machine` setting the ranks that share a machine's cores; inputs it cannot use exit 2
with one line; the report gains its scaling-model section with both figures. Timings are never
asserted beyond their signs and bounds (the machine is shared)."""

import re
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest
from test_train_results import run

from conftest import run_comm
from dtune_report.model_check import check
from dtune_report.model_inputs import load_link_fits, one_profile, trainer_placement
from dtune_report.report import build_report
from dtune_report.scaling_model import MIB, Shape, bucket_cost_s, caps_bytes, monotone, plan_buckets

REPO = Path(__file__).resolve().parents[2]
GPT = ["--model", "gpt2-tiny", "--context", "16", "--vocab", "128", "--batch", "2", "--threads", "1"]
STEPS = ["--steps", "4", "--warmup-steps", "1"]


def dtune(*args):
    return subprocess.run(
        [str(REPO / "scripts" / "dtune"), *map(str, args)], capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("model")
    names = ("profile", "comm", "two", "single", "load", "thread")
    out = {n: d / f"{n}.h5" for n in names}
    r = run(GPT + STEPS + ["--output", out["profile"]])
    assert r.returncode == 0, r.stdout + r.stderr
    r = run(GPT + STEPS + ["--bucket-mb", "0.05", "--first-bucket-mb", "0.05", "--output", out["two"]], np_=2)
    assert r.returncode == 0, r.stdout + r.stderr
    r = run_comm(2, ["-b", "1K", "-e", "256K", "-f", "4", "-n", "5", "-w", "2", "--output", out["comm"]])
    assert r.returncode == 0, r.stdout + r.stderr
    r = run_comm(2, ["-b", "1K", "-e", "1K", "-n", "5", "--output", out["single"]])
    assert r.returncode == 0, r.stdout + r.stderr
    load = ["--load-threads", "1", "--gap-us", "2000", "--output", out["load"]]
    r = run_comm(2, ["-b", "1K", "-e", "64K", "-f", "8", "-n", "5", "-w", "1", *load])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "load threads: 1 gap: 2000us" in r.stdout
    thread = ["--mpi-progress", "thread", "--output", out["thread"]]
    r = run_comm(2, ["-b", "1K", "-e", "256K", "-f", "4", "-n", "5", "-w", "2", *thread])
    assert r.returncode == 0, r.stdout + r.stderr
    return out


def group(path):
    f = h5py.File(path, "r")
    (g,) = f["runs"].values()
    return f, g


def test_gradient_arrival_is_recorded_per_step_and_parameter(files):
    f, g = group(files["profile"])
    with f:
        ready, sizes = g["grad_ready_ms"][()], g["param_bytes"][()]
        backward = g["backward_ms"][()][:, 0]
        assert ready.shape == (5, len(sizes))  # warm-up + measured steps, every parameter
        assert int(sizes.sum()) == 4 * int(g.attrs["parameters"])  # fp32
        assert np.isfinite(ready).all() and (ready > 0).all()
        # Every gradient arrives within its step's backward phase.
        assert (ready <= backward[:, None]).all()
        # Backward produces the last parameters first: the first parameter (the token embedding,
        # also the tied head) is never the earliest.
        assert (ready[:, 0] > ready.min(axis=1)).all()


def test_the_model_plans_the_buckets_the_trainer_reduced(files):
    f, g = group(files["two"])
    with f:
        recorded = list(g["bucket_bytes"][()])
        sizes = g["param_bytes"][()]
    planned = [int(sizes[b].sum()) for b in plan_buckets(sizes, *caps_bytes(0.05, 0.05))]
    assert planned == recorded and len(recorded) > 2


def test_predict_prints_a_prediction_per_shape_and_bucket(files):
    r = dtune("model", "predict", files["profile"], files["comm"], "--ranks-per-node", "2", "--bucket-mb", "0.05,25")
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines() if not line.startswith("#")]
    assert len(rows) == 2, r.stdout
    for nodes, R, ranks, K, algo, _bucket, _buckets, cf, step, exposed, comm, eff in rows:
        assert (nodes, R, ranks, K, algo) == ("1", "2", "2", "2", "flat")
        assert float(step) > 0 and float(exposed) >= 0 and float(comm) > 0 and 0 < float(eff) <= 1
        assert float(cf) >= 1  # 2 ranks x 1 thread: contended only on a 1-core machine
    assert int(rows[0][6]) > int(rows[1][6])  # smaller buckets, more of them
    assert re.search(r"#   intra: α = \S+ µs per ring step", r.stdout), r.stdout


def test_links_beside_busy_threads_are_fitted_apart_and_used_during_backward(files):
    f, g = group(files["load"])
    with f:
        assert (int(g.attrs["load_threads"]), int(g.attrs["gap_us"])) == (1, 2000)
    r = dtune("model", "predict", files["profile"], files["comm"], "--ranks-per-node", "2", "--bucket-mb", "0.05")
    assert r.returncode == 0, r.stderr
    assert "idle fits only" in r.stdout and "beside 1 busy thread per rank" not in r.stdout
    r = dtune("model", "predict", files["profile"], files["comm"], files["load"], "--ranks-per-node", "2")
    assert r.returncode == 0, r.stderr
    assert re.search(r"#   intra: α = \S+ µs per ring step, .*beside 1 busy thread per rank, mean call", r.stdout)
    assert "idle fits only" not in r.stdout, r.stdout
    # 2 ranks x 1 thread on this machine's cores (provenance topology): the factor it prints.
    assert "compute x cf = max(1, K·1/" in r.stdout, r.stdout


def test_nodes_per_machine_sets_the_ranks_sharing_a_machine(files, tmp_path):
    # An inter-node fit from the 2-rank comm run with its ranks put on two hosts (its provenance
    # rewritten: the smoke suite has no second node). 2 nodes x 1 rank, 1 thread, --cores 1: one
    # node per machine (default) is 1 rank per core, cf 1; both nodes on one machine (the
    # simulated cluster) are K = 2 ranks on the core, cf 2, and a longer step.
    inter = tmp_path / "comm-inter.h5"
    inter.write_bytes(files["comm"].read_bytes())
    with h5py.File(inter, "a") as f:
        del f["provenance/rank_host"]
        f["provenance"].create_dataset("rank_host", data=["n0", "n1"], dtype=h5py.string_dtype())
    args = [files["profile"], inter, "--nodes", "2", "--ranks-per-node", "1", "--cores", "1", "--bucket-mb", "25"]
    rows = {}
    for m in (None, "1", "2"):
        r = dtune("model", "predict", *args, *(["--nodes-per-machine", m] if m else []))
        assert r.returncode == 0, r.stderr
        (row,) = [line.split() for line in r.stdout.splitlines() if not line.startswith("#")]
        rows[m] = row
        assert f"(--nodes-per-machine {m or 1}" in r.stdout, r.stdout
    assert rows[None] == rows["1"]  # the default: one node per machine
    assert (rows["1"][3], rows["1"][7]) == ("1", "1.00")
    assert (rows["2"][3], rows["2"][7]) == ("2", "2.00")
    assert float(rows["2"][8]) > float(rows["1"][8])


def test_links_measured_as_the_trainer_waits_are_preferred(files):
    # dtune-comm --mpi-progress thread waits as the trainer's reducer does (MPI_Iallreduce polled
    # by a communication thread): where the same link was measured both ways, the fit is from that
    # run.
    f, g = group(files["thread"])
    with f:
        assert g.attrs["mpi_progress"] == "thread"
    f, g = group(files["comm"])
    with f:
        assert g.attrs["mpi_progress"] == "call"
    both = (files["profile"], files["comm"], files["thread"])
    r = dtune("model", "predict", *both, "--ranks-per-node", "2", "--bucket-mb", "0.05")
    assert r.returncode == 0, r.stderr
    assert re.search(r"#   intra: α = .*\(intra, [^)]*2 ranks, thread-polled\)", r.stdout), r.stdout
    r = dtune("model", "predict", files["profile"], files["comm"], "--ranks-per-node", "2", "--bucket-mb", "0.05")
    assert re.search(r"#   intra: α = .*\(intra, [^)]*2 ranks\)", r.stdout), r.stdout
    # The 2-rank link the model reads is the thread run's in-place rows (the trainer reduces in
    # place below 4 ranks): per size the median over iterations of the slowest rank, made
    # non-decreasing; read here with h5py from the file the binary wrote.
    fit = load_link_fits([files["thread"]]).get("intra", 2)
    f, g = group(files["thread"])
    with f:
        placements = list(g["placement"].asstr()[()])
        t = g["time_us"][()][placements.index("in-place")]  # [S, R, I]
        sizes = g["size_bytes"][()]
    assert trainer_placement(2) == "in-place" and trainer_placement(4) == "out-of-place"
    assert fit.table_ranks == 2 and list(fit.sizes) == [float(s) for s in sizes]
    expected = monotone(np.median(t.max(axis=1), axis=1) * 1e-6)
    assert np.allclose(fit.times_s, expected, rtol=1e-12, atol=0)


def test_check_compares_each_multi_rank_run(files):
    r = dtune("model", "check", files["profile"], files["comm"], files["two"])
    assert r.returncode == 0, r.stderr
    assert "median |error| of the predicted step time over 1 runs" in r.stdout, r.stdout


def test_check_predicts_a_sharded_run_with_its_shard_mode(files, tmp_path):
    """A --shard zero1 or zero2 run is checked against the sharded prediction (sharding.py) from
    the same 1-rank DDP profile: each run beside a copy of it relabelled shard none (the same
    measurement, hosts and times), zero1's prediction is the DDP one plus the exposed all-gather of
    every parameter byte, exactly; zero2's communication is half the allreduce's (reduce-scatter)
    plus that all-gather. The printed table names each run's mode."""
    bucket = ["--bucket-mb", "0.05", "--first-bucket-mb", "0.05"]
    paths = [files["profile"], files["comm"]]
    for mode in ("zero1", "zero2"):
        out = tmp_path / f"{mode}.h5"
        r = run(GPT + STEPS + bucket + ["--shard", mode, "--output", out], np_=2)
        assert r.returncode == 0, r.stdout + r.stderr
        ddp = tmp_path / f"{mode}-as-ddp.h5"
        ddp.write_bytes(out.read_bytes())
        with h5py.File(ddp, "a") as f:
            (g,) = f["runs"].values()
            assert g.attrs["shard"] == mode and g.attrs["gathered_bytes_per_step"] > 0
            g.attrs["shard"] = "none"
        paths += [out, ddp]
    rows, _ = check(paths)
    by = {(Path(c.file).stem, c.shard): c.predicted for c in rows}
    assert set(by) == {("zero1", "zero1"), ("zero1-as-ddp", "none"), ("zero2", "zero2"), ("zero2-as-ddp", "none")}
    param_bytes = one_profile([files["profile"]]).profile.param_bytes.sum()
    link = load_link_fits([files["comm"]]).for_shape(Shape(1, 2))
    gather_ms = bucket_cost_s(float(param_bytes), Shape(1, 2), link, "all_gather") * 1e3
    assert gather_ms > 0
    z1, d1 = by[("zero1", "zero1")], by[("zero1-as-ddp", "none")]
    assert z1.step_ms == pytest.approx(d1.step_ms + gather_ms, rel=1e-12)
    assert z1.exposed_ms == pytest.approx(d1.exposed_ms + gather_ms, rel=1e-12)
    z2, d2 = by[("zero2", "zero2")], by[("zero2-as-ddp", "none")]
    assert z2.comm_ms == pytest.approx(d2.comm_ms / 2 + gather_ms, rel=1e-12)
    r = dtune("model", "check", *paths)
    assert r.returncode == 0, r.stderr
    table = [line for line in r.stdout.splitlines() if not line.startswith("#")]
    assert sum(" zero1 " in line for line in table) == 1 and sum(" zero2 " in line for line in table) == 1, r.stdout
    assert "#   sharded runs: zero1/zero2: after the optimizer step" in r.stdout, r.stdout


@pytest.mark.parametrize(
    "unit, prefetch, reshard",
    [("0.05", 0, "on"), ("0.05", 0, "off"), ("0.05", 1, "on"), ("block", 0, "on"), ("block", 2, "on")],
)
def test_zero3_gathered_peak_is_what_the_trainer_held(tmp_path, unit, prefetch, reshard):
    """The model's zero3 gathered units at their peak (sharding.state_memory's in_flight, the
    replay of train/zero3.cc over the model's pieces) are the bytes a 2-rank run measured
    (param_bytes_peak), exactly: reshard on and off, small MiB units (a block then uses several
    at once) and block units, with and without prefetch."""
    from dtune_report.model_pieces import block_units, model_pieces
    from dtune_report.sharding import state_memory

    out = tmp_path / "z3.h5"
    z3 = ["--shard", "zero3", "--shard-unit", unit, "--shard-prefetch", prefetch, "--reshard-after-forward", reshard]
    r = run(GPT + STEPS + [*z3, "--output", out], np_=2)
    assert r.returncode == 0, r.stdout + r.stderr
    with h5py.File(out) as f:
        (g,) = f["runs"].values()
        param_bytes, measured = g["param_bytes"][()], g["param_bytes_peak"][()]
    pieces = model_pieces("gpt2-tiny", len(param_bytes))
    unit_mb, units = (None, block_units(pieces)) if unit == "block" else (float(unit), None)
    z3 = (unit_mb, prefetch, reshard == "on", pieces, units)
    held = state_memory("zero3", param_bytes, 2, "sgd", "fp32", 25.0, 1.0, *z3).in_flight
    assert list(measured) == [held] * 2, (list(measured), held)


def test_check_counts_ranks_per_machine_by_boot_id_and_per_host_in_older_files(files, tmp_path):
    # Every rank records this kernel's boot id; the check counts the ranks sharing the machine by
    # it ("2m"). A file from before rank_boot_id (removed here) is counted per host ("2n").
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    for name in ("profile", "two", "comm"):
        with h5py.File(files[name]) as f:
            ranks = int(f["provenance"].attrs["world_size"])
            assert list(f["provenance/rank_boot_id"].asstr()[()]) == [boot] * ranks, name
    r = dtune("model", "check", files["profile"], files["comm"], files["two"])
    assert re.search(r" 1 x 2 +2m/\d+ ", r.stdout), r.stdout
    old = tmp_path / "two-old.h5"
    old.write_bytes(files["two"].read_bytes())
    with h5py.File(old, "a") as f:
        del f["provenance/rank_boot_id"]
    r = dtune("model", "check", files["profile"], files["comm"], old)
    assert r.returncode == 0, r.stderr
    assert re.search(r" 1 x 2 +2n/\d+ ", r.stdout), r.stdout


def test_project_states_it_is_a_projection(files):
    r = dtune("model", "project", files["profile"], "--nodes", "1,4,1024", "--bucket-mb", "1,25")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("# PROJECTION (not a measurement)")
    assert "latency assumed" in r.stdout and re.search(r"# scaling (breaks|holds)", r.stdout)


@pytest.mark.parametrize(
    "case, message",
    [
        ("no-profile", "no 1-rank dtune-train run with per-parameter gradient times"),
        ("no-comm", "no intra-node allreduce fit"),
        ("no-inter", "no inter-node allreduce fit"),
        ("single-size", "allreduce measured at a single size"),
        ("no-machine", "--nodes-per-machine 0: give a positive count"),
        ("more-nodes-than-shapes", "--nodes-per-machine 3: more than the most nodes asked for (--nodes 1,2)"),
        ("unit-without-zero3", "--shard-unit-mb applies to --shard zero3 only (--shard zero2)"),
        ("negative-prefetch", "--shard-prefetch -1: give an integer in [0, 1024]"),
    ],
)
def test_inputs_it_cannot_use_exit_2_with_one_line(files, case, message):
    args = {
        "no-profile": [files["comm"], files["two"]],
        "no-comm": [files["profile"]],
        "no-inter": [files["profile"], files["comm"], "--nodes", "2"],
        "single-size": [files["profile"], files["comm"], files["single"]],
        "no-machine": [files["profile"], files["comm"], "--nodes-per-machine", "0"],
        "more-nodes-than-shapes": [files["profile"], files["comm"], "--nodes", "1,2", "--nodes-per-machine", "3"],
        "unit-without-zero3": [files["profile"], files["comm"], "--shard", "zero2", "--shard-unit-mb", "1"],
        "negative-prefetch": [files["profile"], files["comm"], "--shard", "zero3", "--shard-prefetch", "-1"],
    }[case]
    r = dtune("model", "predict", *args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stdout == "" and len(r.stderr.splitlines()) == 1 and message in r.stderr, r.stderr


def test_report_draws_the_model_section(files, tmp_path):
    rep = build_report([files["profile"], files["comm"], files["two"]], tmp_path)
    assert {"model_vs_measured", "projection"} <= set(rep["figures"])
    md = (tmp_path / "report.md").read_text()
    assert "## Scaling model" in md and "Projection (not a measurement)" in md


def test_shard_none_prints_what_predict_and_project_printed_before(files):
    # --shard none is DDP: the same bytes as without the flag, no shard header, memory or column.
    for cmd, args in (
        ("predict", [files["profile"], files["comm"], "--ranks-per-node", "2", "--bucket-mb", "0.05,25"]),
        ("project", [files["profile"], "--nodes", "1,4", "--bucket-mb", "1,25"]),
    ):
        plain, none = dtune("model", cmd, *args), dtune("model", cmd, *args, "--shard", "none")
        assert plain.returncode == none.returncode == 0, plain.stderr + none.stderr
        assert none.stdout == plain.stdout
        assert "shard" not in plain.stdout and "state" not in plain.stdout, plain.stdout
    rows = [line.split() for line in plain.stdout.splitlines() if not line.startswith("#")]
    assert rows and all(len(r) == 9 for r in rows)  # project: 7 columns + one per bucket size


def test_shard_modes_add_their_gathers_and_print_state_per_rank(files):
    # The profile's forward time per measured step, as the zero3 timeline reads it.
    prof = one_profile([files["profile"]]).profile
    f, g = group(files["profile"])
    with f:
        assert np.array_equal(prof.forward_ms, g["forward_ms"][()][1:, 0])  # after the 1 warm-up step
    args = [files["profile"], files["comm"], "--ranks-per-node", "2", "--bucket-mb", "0.05"]
    rows, out = {}, {}
    for mode in ("none", "zero1", "zero2", "zero3"):
        r = dtune("model", "predict", *args, "--shard", mode)
        assert r.returncode == 0, r.stderr
        (rows[mode],) = [line.split() for line in r.stdout.splitlines() if not line.startswith("#")]
        out[mode] = r.stdout
    # zero1 exposes DDP's exposed time plus one all-gather of every parameter byte (to the printed
    # 3 decimals); zero2 reduce-scatters the same buckets: never more exposed than zero1.
    fits = load_link_fits([files["comm"]]).for_shape(Shape(1, 2))
    gather_ms = bucket_cost_s(float(prof.param_bytes.sum()), Shape(1, 2), fits, "all_gather") * 1e3
    exposed = {m: float(r[9]) for m, r in rows.items()}
    assert abs(exposed["zero1"] - exposed["none"] - gather_ms) <= 0.0011, (exposed, gather_ms)
    assert exposed["zero2"] <= exposed["zero1"]
    # Each mode's state per rank: its column equals the memory table's; with small units zero1 and
    # zero2 each hold less than the mode before, and zero3 less than zero1 (not always less than
    # zero2: a block's units are all gathered at once, 0.76 MiB of this 1.6 MiB model).
    for mode in ("zero1", "zero2", "zero3"):
        assert len(rows[mode]) == 13 and "half the measured allreduce time" in out[mode]
        (table,) = [ln.split()[1:] for ln in out[mode].splitlines() if re.match(r"# +2 +0.05 ", ln)]
        state = dict(zip(("none", "zero1", "zero2", "zero3"), map(float, table[2:]), strict=True))
        assert float(rows[mode][12]) == state[mode]
        assert state["none"] > state["zero1"] > state["zero2"] and state["zero1"] > state["zero3"]
        assert state["none"] == pytest.approx(3 * prof.param_bytes.sum() / MIB, abs=1e-3)  # fp32 sgd: P + G + O
    assert "optimizer sgd" in out["zero3"] and "prefetch 1, reshard after forward on" in out["zero3"]
    r = dtune("model", "predict", *args, "--shard", "zero1", "--optimizer", "adamw")
    (adamw,) = [line.split() for line in r.stdout.splitlines() if not line.startswith("#")]
    assert "optimizer adamw" in r.stdout and float(adamw[12]) > float(rows["zero1"][12])  # 8 B of state, not 4
