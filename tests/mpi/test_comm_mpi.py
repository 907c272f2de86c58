"""dtune-comm under mpirun with 2 and 4 ranks (oversubscribed): every collective x dtype x op is
exactly right, with the library's blocking calls and with the nonblocking ones polled by a
communication thread (--mpi-progress thread), a planted wrong element is caught, and a rank that
stops taking part makes the job end with a message naming it instead of hanging; --pattern fsdp
replays FSDP's calls of a model's step in order, padded and exact, and stores them."""

import os
import time

import pytest

from conftest import data_rows, run_comm


@pytest.mark.parametrize("progress", ["call", "thread"])
@pytest.mark.parametrize("np", [2, 4])
def test_every_collective_dtype_op_is_exact(np, progress):
    # 4 sizes from 8 B to 24 KiB (3 x nranks does not divide some: rounding is exercised too).
    r = run_comm(
        np,
        [
            "-b",
            "8",
            "-e",
            "24K",
            "-f",
            "8",
            "-n",
            "2",
            "-w",
            "1",
            "-c",
            "1",
            "--collective",
            "all",
            "-d",
            "all",
            "-o",
            "all",
            "--mpi-progress",
            progress,
            "--no-output",
        ],
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"mpi progress: {progress} " in r.stdout
    rows = data_rows(r.stdout)
    # 3 reductions x 5 dtypes x 5 ops + 4 others x 5 dtypes, 4 sizes each.
    assert len(rows) == (3 * 5 * 5 + 4 * 5) * 4
    checked = 0
    for row in rows:
        # size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong | collective
        # (the last column only in a run of several collectives)
        assert len(row) == 14, row
        for wrong in (row[8], row[12]):
            assert wrong in ("0", "N/A"), row
            checked += wrong == "0"
    assert checked >= len(rows)  # out-of-place always checked
    # In place, only empty shapes (size 0: fewer elements than ranks) are not run, and polled
    # also sendrecv (MPI 3.1 has no nonblocking MPI_Sendrecv_replace): every other row ran.
    not_run = [row for row in rows if row[12] == "N/A"]
    expected = [row for row in rows if row[0] == "0" or (progress == "thread" and row[13] == "sendrecv")]
    assert not_run == expected
    assert "# Out of bounds values : 0 OK" in r.stdout


@pytest.mark.parametrize("progress", ["call", "thread"])
@pytest.mark.parametrize("np", [3, 4])
def test_hierarchical_allreduce_is_exact_on_one_node(np, progress):
    # One node: the leaders' allreduce has one rank, the node's reduce and broadcast do the work.
    # (Across simulated nodes: tests/cluster/test_cluster.py.)
    args = ["-b", "8", "-e", "24K", "-f", "8", "-n", "2", "-w", "1", "-c", "1", "-d", "all", "-o", "all"]
    r = run_comm(np, [*args, "--algorithm", "hierarchical", "--mpi-progress", progress, "--no-output"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert "nnodes 1 algorithm: hierarchical" in r.stdout
    rows = data_rows(r.stdout)
    assert len(rows) == 5 * 5 * 4 and all(row[8] == "0" and row[12] == "0" for row in rows)


def test_thread_progress_is_refused_with_nccl():
    r = run_comm(0, ["--backend", "nccl", "--mpi-progress", "thread", "--no-output"])
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "dtune-comm: error: --mpi-progress thread is for --backend mpi (NCCL progresses on the GPU): drop one of them"
    ]


def test_hierarchical_is_refused_with_nccl():
    r = run_comm(0, ["--backend", "nccl", "--algorithm", "hierarchical", "--no-output"])
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "dtune-comm: error: --algorithm hierarchical is for --backend mpi (NCCL picks its own ring or "
        "tree across nodes): drop one of them"
    ]


@pytest.mark.parametrize(
    "collective, progress",
    [("allreduce", "call"), ("reduce_scatter", "call"), ("alltoall", "call"), ("allreduce", "thread")],
)
def test_planted_wrong_element_fails_the_run(collective, progress):
    r = run_comm(
        2,
        [
            "-b",
            "64",
            "-e",
            "1K",
            "-f",
            "4",
            "-n",
            "2",
            "-c",
            "1",
            "--collective",
            collective,
            "--debug-plant-wrong",
            "1",
            "--mpi-progress",
            progress,
            "--no-output",
        ],
    )
    assert r.returncode == 1, r.stdout + r.stderr
    wrong = [int(row[8]) for row in data_rows(r.stdout)]
    assert all(w > 0 for w in wrong), wrong
    assert "FAILED" in r.stdout
    assert "wrong elements" in r.stderr


@pytest.mark.parametrize("progress", ["call", "thread"])
def test_hung_rank_is_named_and_job_ends(progress):
    # Polled (thread): the other ranks' communication threads spin on MPI_Test; the job still ends.
    start = time.monotonic()
    args = ["-b", "8", "-e", "64", "-f", "2", "--timeout", "3", "--debug-hang-rank", "2"]
    r = run_comm(3, [*args, "--mpi-progress", progress, "--no-output"], timeout=60)
    elapsed = time.monotonic() - start
    assert r.returncode == 3, r.stdout + r.stderr
    assert "rank 2 did not arrive" in r.stderr
    assert elapsed < 45


def test_single_rank_without_mpirun_runs():
    r = run_comm(0, ["-b", "8", "-e", "1K", "-f", "4", "-n", "2", "-c", "1", "--no-output"])
    assert r.returncode == 0, r.stderr
    assert len(data_rows(r.stdout)) == 4  # 8, 32, 128, 512


def test_silent_singleton_launch_is_warned():
    import os
    import subprocess

    from conftest import bin_dir

    env = dict(os.environ, SLURM_NTASKS="4")
    r = subprocess.run(
        [str(bin_dir() / "dtune-comm"), "-b", "8", "-e", "8", "--no-output"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    assert "MPI world size is 1 but SLURM_NTASKS=4" in r.stderr


@pytest.mark.parametrize("np_", [1, 2, 4])
def test_sigint_keeps_what_was_measured(tmp_path, np_):
    """Ctrl-C: the ranks stop at the next size, the sizes measured so far are written, the file
    says "interrupted" and the exit status is 130. With several ranks the signal goes to the last
    rank only: the ranks' agreement at each size (the arrival check) is what stops the others."""
    import signal
    import subprocess
    import time

    import h5py

    from conftest import bin_dir, mpirun_prefix, rank_pid
    from dtune_report.loader import load_comm

    out = tmp_path / "int.h5"
    exe = str(bin_dir() / "dtune-comm")
    args = ["-b", "8", "-e", "256M", "-f", "2", "-n", "100", "--output", str(out)]
    p = subprocess.Popen(
        (mpirun_prefix(np_) if np_ > 1 else []) + [exe, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    # Wait for the first table row, then interrupt.
    for line in p.stdout:
        if line.strip() and not line.startswith("#"):
            break
    if np_ == 1:
        p.send_signal(signal.SIGINT)
    else:
        deadline = time.monotonic() + 30
        while (victim := rank_pid(p.pid, np_ - 1, "dtune-comm")) is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert victim, f"rank {np_ - 1} not found"
        os.kill(victim, signal.SIGINT)
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 130, stderr
    with h5py.File(out) as f:
        assert f.attrs["status"] == "interrupted"
        assert f.attrs["exit_status"] == 130
        (group,) = f["runs"].values()
        assert group.attrs["status"] == "interrupted"
        measured = len(group["size_bytes"])
    assert 1 <= measured < 26
    df = load_comm(out)
    assert df.size_bytes.nunique() == measured
    assert sorted(df["rank"].unique()) == list(range(np_))  # every rank's samples were kept


# gpt2-tiny (L 2, C 128, T 128, V 1024) as FSDP wraps it: embed (wte, wpe), two blocks, ln_f.
GPT2_TINY_UNITS = [1024 * 128 + 128 * 128, 12 * 128 * 128 + 13 * 128, 12 * 128 * 128 + 13 * 128, 2 * 128]


def test_fsdp_step_of_gpt2_tiny_is_replayed_and_stored(tmp_path):
    """--pattern fsdp on 2 ranks: the table has one exact row per call, and the HDF5 group holds
    FSDP's calls in order (all-gathers 0..3 forward; backward, from unit 3 down, all-gather then
    reduce-scatter) with the units' bytes, every rank's iterations and the step's totals."""
    import h5py

    out = tmp_path / "fsdp.h5"
    args = ["--pattern", "fsdp", "--model", "gpt2-tiny", "--shard-unit", "block", "-n", "3", "-w", "1"]
    r = run_comm(2, [*args, "--output", out])
    assert r.returncode == 0, r.stderr[-2000:]
    rows = data_rows(r.stdout)
    assert len(rows) == 12
    # call phase unit name collective placement size count type time algbw busbw #wrong
    assert all(row[12] == "0" for row in rows)
    assert "# Out of bounds values : 0 OK" in r.stdout
    unit_bytes = [4 * n for n in GPT2_TINY_UNITS]  # float32; already multiples of 2 elements
    order = [(0, "allgather"), (1, "allgather"), (2, "allgather"), (3, "allgather")]
    for u in (3, 2, 1, 0):
        order += [(u, "allgather"), (u, "reduce_scatter")]
    with h5py.File(out) as f:
        assert f.attrs["status"] == "complete"
        (g,) = f["runs"].values()
        a = g.attrs
        assert a["benchmark"] == "comm-fsdp" and a["model"] == "gpt2-tiny" and a["shard_unit"] == "block"
        assert a["model_parameters"] == sum(GPT2_TINY_UNITS) == 544256
        assert a["reshard_after_forward"] == 1 and a["placement"] == "fsdp2" and a["status"] == "ok"
        assert [n.decode() for n in g["unit_name"][()]] == ["embed", "h.0", "h.1", "ln_f"]
        assert g["unit_bytes"][()].tolist() == unit_bytes
        calls = list(zip(g["call_unit"][()].tolist(), [c.decode() for c in g["call_collective"][()]]))
        assert calls == order
        assert [p.decode() for p in g["call_phase"][()]] == ["forward"] * 4 + ["backward"] * 8
        placements = [p.decode() for p in g["call_placement"][()]]
        assert placements == ["in-place" if c == "allgather" else "out-of-place" for _, c in order]
        sizes = g["size_bytes"][()].tolist()
        assert sizes == [unit_bytes[u] for u, _ in order]
        assert g["count"][()].tolist() == [b // 4 // 2 for b in sizes]
        assert a["step_calls"] == 12 and a["step_bytes"] == sum(sizes)
        times = g["time_us"][()]
        assert times.shape == (12, 2, 3) and (times > 0).all()
        assert (g["wrong"][()] == 0).all()
        reported = g["time_us_reported"][()]
        assert a["step_time_us"] == pytest.approx(reported.sum())
        assert a["step_busbw_gbps"] == pytest.approx(a["step_algbw_gbps"] / 2)
        assert g["busbw_gbps"][()] == pytest.approx(g["algbw_gbps"][()] / 2)


def test_fsdp_size_units_are_padded_for_3_ranks_and_exact(tmp_path):
    """bfloat16 units of at most 0.25 MiB (131,072 elements) on 3 ranks, reshard off: whole
    parameters grouped as gradient buckets are (report/dtune_report/scaling_model.py plan_buckets
    of gpt2-tiny's parameter sizes, which dtune-train --shard-unit cuts alike), 6 units padded to a
    multiple of 3 elements, 2 calls each, every result exact."""
    import h5py

    from dtune_report.scaling_model import plan_buckets

    out = tmp_path / "fsdp3.h5"
    args = ["--pattern", "fsdp", "--model", "gpt2-tiny", "--shard-unit", "0.25", "-d", "bf16"]
    r = run_comm(3, [*args, "--reshard-after-forward", "off", "-n", "2", "-w", "0", "--output", out])
    assert r.returncode == 0, r.stderr[-2000:]
    C, V, T = 128, 1024, 128  # gpt2-tiny: width, vocabulary, context; 2 blocks
    block = [C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C]
    elems = [V * C, T * C, *block, *block, C, C]  # model order
    cap = 131072 * 2
    params = [sum(elems[k] for k in u) for u in reversed(plan_buckets([2 * n for n in elems], cap, cap))]
    assert params == [131072, 65792, 82688, 115584, 82688, 66432] and sum(params) == 544256
    padded = [-(-p // 3) * 3 for p in params]
    assert padded[1] == 65793
    with h5py.File(out) as f:
        (g,) = f["runs"].values()
        assert g.attrs["dtype"] == "bfloat16" and g.attrs["reshard_after_forward"] == 0
        assert g["unit_parameters"][()].tolist() == params
        assert g["unit_padded"][()].tolist() == padded
        assert g["call_unit"][()].tolist() == [0, 1, 2, 3, 4, 5, 5, 4, 3, 2, 1, 0]
        assert g["size_bytes"][()].tolist() == [2 * padded[u] for u in g["call_unit"][()]]
        assert (g["wrong"][()] == 0).all() and g.attrs["wrong"] == 0
