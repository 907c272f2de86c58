"""The sweep runner's decisions without launching anything (sweeps/dtune_sweep/runner.py): the
reason a failed point shows (first_error), the mpirun and srun command lines and placement options,
the state log read back (resume, interruptions, orphans) and written whole on a full disk (disk.py),
which points are unfinished and the counts, and the refusals before anything runs (--timeout, --out,
--hostfile, points over several nodes outside Slurm, a Slurm allocation that lost a node)."""

import errno
import json
import math
import os
import socket
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "sweeps"), str(REPO / "report")]
from dtune_sweep import disk  # noqa: E402
from dtune_sweep.runner import (  # noqa: E402
    MpirunHosts,
    State,
    allocation_shortfall,
    bin_dir,
    check_placement,
    check_timeout,
    counts,
    first_error,
    launch_command,
    make_out_dir,
    placement_options,
    unfinished,
)
from dtune_sweep.spec import Point, SweepError  # noqa: E402


def point(ranks=2, nodes=1, per_node=0, env=None, repeat=0):
    return Point("s", "dtune-comm", ["-b", "8"], dict(env or {}), ranks, nodes, per_node, repeat)


# ---------------------------------------------------------------------------------------------------
# Why a point failed: one line of its log.

BOX = """\
--------------------------------------------------------------------------
There are not enough slots available in the system to satisfy the 4
slots that were requested by the application: more detail here.

Either request fewer slots for your application, or make more slots
--------------------------------------------------------------------------
"""
SLOTS = (
    "There are not enough slots available in the system to satisfy the 4 slots that were requested by the application:"
)


@pytest.mark.parametrize(
    "log,expect",
    [
        (
            "starting\nrank 1: MPI_ABORT was invoked\nsrun: error: Node failure on n2\nlast\n",
            "srun: error: Node failure on n2",
        ),
        (
            "ok\n  dtune-train: error: --batch 0: must be at least 1  \nERROR later\n",
            "dtune-train: error: --batch 0: must be at least 1",
        ),
        (
            "ok\nrank 0: MPI_ABORT was invoked on rank 0\nmpirun noticed that process rank 0 exited\n",
            "rank 0: MPI_ABORT was invoked on rank 0",
        ),
        # mpirun's boxed message: its first sentence, the lines it wraps over joined, dashes never
        (
            "start\n" + BOX + "tail line\n",
            SLOTS,
        ),
        (
            "start\n" + BOX.rsplit("-" * 74, 1)[0],
            SLOTS,
        ),
        ("one\n\ntwo  \n\nthree\n", "three"),
        # a box whose first paragraph has no sentence end: all of it, and not the detail after it
        (
            "-" * 30 + "\nNo nodes are available\nfor this job\n\nDetail. More\n" + "-" * 30 + "\n",
            "No nodes are available for this job",
        ),
        ("-" * 20 + "\n", ""),
        ("", ""),
    ],
)
def test_first_error_is_the_line_that_says_why(tmp_path, log, expect):
    f = tmp_path / "point.log"
    f.write_text(log)
    assert first_error(f) == expect


def test_first_error_of_a_missing_long_or_undecodable_log(tmp_path):
    assert first_error(tmp_path / "none.log") == ""
    f = tmp_path / "long.log"
    f.write_text("first\n" + "x" * 100 + "\nerror: past the limit\n")
    assert first_error(f, limit_bytes=50) == "x" * 44  # only the first 50 bytes are read
    assert first_error(f) == "error: past the limit"
    f.write_bytes(b"start\n\xff\xfe error: bad bytes\n")
    assert first_error(f) == "\ufffd\ufffd error: bad bytes"


# ---------------------------------------------------------------------------------------------------
# Command lines.


def test_mpirun_command_line(monkeypatch, tmp_path):
    monkeypatch.setenv("DTUNE_MPIRUN", "/opt/mpi/bin/mpirun")
    monkeypatch.setenv("DTUNE_BIN_DIR", "/b")
    p = point(ranks=4, nodes=2, env={"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"})
    hosts = MpirunHosts(hostfile="hosts", tune="t.tune")
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    assert launch_command(p, tmp_path / "o.h5", hosts=hosts) == (
        ["/opt/mpi/bin/mpirun", "-np", "4", "--oversubscribe", *root]
        + ["--tune", "t.tune", "--hostfile", "hosts", "--map-by", "node"]
        + ["-x", "NCCL_ALGO=Ring", "-x", "NCCL_PROTO=LL"]
        + ["/b/dtune-comm", "-b", "8", "--output", str(tmp_path / "o.h5"), "--overwrite"]
    )
    monkeypatch.delenv("DTUNE_MPIRUN")
    assert launch_command(point(), tmp_path / "o.h5")[:3] == ["mpirun", "-np", "2"]


def test_srun_command_line(monkeypatch):
    monkeypatch.setenv("DTUNE_BIN_DIR", "/b")
    p = point(ranks=4, nodes=2, per_node=2, env={"NCCL_ALGO": "Ring"})
    assert launch_command(p, Path("o.h5"), launcher="srun") == (
        ["srun", "--mpi=pmix", "-n", "4", "-N", "2", "--ntasks-per-node=2"]
        + ["/b/dtune-comm", "-b", "8", "--output", "o.h5", "--overwrite"]
    )
    assert "--ntasks-per-node=0" not in launch_command(point(), Path("o.h5"), launcher="srun")


@pytest.mark.parametrize(
    "nodes,per_node,hosts,expect",
    [
        (1, 0, None, []),
        (1, 2, None, ["--map-by", "ppr:2:node"]),
        (1, 0, MpirunHosts(hostfile="h"), []),  # a 1-node point runs here, not on the hostfile's nodes
        (2, 0, MpirunHosts(hostfile="h"), ["--hostfile", "h", "--map-by", "node"]),
        (2, 2, MpirunHosts(hostfile="h", tune="t"), ["--tune", "t", "--hostfile", "h", "--map-by", "ppr:2:node"]),
        (1, 0, MpirunHosts(tune="t"), ["--tune", "t"]),
    ],
)
def test_placement_options(nodes, per_node, hosts, expect):
    assert placement_options(point(nodes=nodes, per_node=per_node), hosts) == expect


def test_hostfile_and_tune_file_must_exist(tmp_path):
    f = tmp_path / "hosts"
    f.write_text("n1\n")
    assert MpirunHosts.checked(str(f), None) == MpirunHosts(str(f), None)
    assert MpirunHosts.checked(None, str(f)) == MpirunHosts(None, str(f))
    with pytest.raises(SweepError, match=f"^--mpirun-tune {tmp_path}/t: no such file$"):
        MpirunHosts.checked(str(f), str(tmp_path / "t"))
    with pytest.raises(SweepError, match="^--hostfile nope: no such file$"):
        MpirunHosts.checked("nope", None)


# ---------------------------------------------------------------------------------------------------
# The state log.


def write_log(path, records, torn=""):
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + torn)


def test_state_records_by_time_from_every_log_and_bad_lines_skipped(tmp_path):
    write_log(
        tmp_path / "state.jsonl",
        [
            {"id": "a", "event": "finished", "status": "ok", "time": 3},
            {"id": 7, "event": "finished", "time": 1},  # not an id
            {"id": "b", "event": "exploded", "time": 1},  # not an event
            {"id": "b", "event": "started", "time": "soon"},  # not a time
            ["not", "an", "object"],
            {"id": "b", "event": "started"},  # no time: first
            {"id": "d", "event": "started", "time": 0.5},
        ],
        torn='{"id": "c", "ev',
    )
    with open(tmp_path / "state.jsonl", "ab") as f:  # a torn line, then more records; bytes that are not UTF-8
        f.write(b'\n{"id": "e", "event": "fin\n{"id": "e\xff", "event": "started", "time": 2.5}\n')
    write_log(tmp_path / "state-2-0.jsonl", [{"id": "c", "event": "started", "time": 2}])
    (tmp_path / "other.jsonl").write_text(json.dumps({"id": "z", "event": "started", "time": 0}) + "\n")
    state = State(tmp_path)
    assert [(r["id"], r["time"] if "time" in r else None) for r in state.records()] == [
        ("b", None),
        ("d", 0.5),
        ("c", 2),
        ("e\ufffd", 2.5),
        ("a", 3),
    ]
    assert [r["id"] for r in state.records(own_only=True)] == ["b", "d", "e\ufffd", "a"]
    assert state.outcomes() == {
        "b": "interrupted",
        "d": "interrupted",
        "c": "interrupted",
        "e\ufffd": "interrupted",
        "a": "ok",
    }
    State(tmp_path, "state-9.jsonl").append({"id": "c", "event": "finished", "status": "failed", "time": 4})
    assert state.outcomes()["c"] == "failed"
    assert State(tmp_path / "none").records() == []


def test_a_state_record_is_whole_or_absent_when_the_disk_fills_mid_write(tmp_path, monkeypatch):
    # write(2) on a disk that fills part-way through takes part of the record (a short count), or
    # none of it (ENOSPC): either way the log is left as it was, and the error is disk.NoSpace.
    state = State(tmp_path)
    state.append({"id": "a", "event": "started", "time": 1})
    before = state.path.read_bytes()
    real_write = os.write

    def half(fd, data):
        return real_write(fd, data[: len(data) // 2])

    def none(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    for fake in (half, none):
        monkeypatch.setattr(os, "write", fake)
        with pytest.raises(disk.NoSpace, match=r"^no space left on device: cannot write \S*state\.jsonl \("):
            state.append({"id": "a", "event": "finished", "status": "ok", "time": 2, "command": "x" * 9000})
        monkeypatch.setattr(os, "write", real_write)
        assert state.path.read_bytes() == before
    state.append({"id": "a", "event": "finished", "status": "ok", "time": 2})
    assert [json.loads(line)["event"] for line in state.path.read_text().splitlines()] == ["started", "finished"]


def test_a_record_after_a_torn_last_line_is_kept(tmp_path):
    # A kill -9 or a power cut can tear the last line; the next record starts on a line of its own
    # (glued to the torn one, it would be lost with it, and a finished point rerun).
    write_log(tmp_path / "state.jsonl", [{"id": "a", "event": "started", "time": 1}], torn='{"id": "a", "event": "fin')
    State(tmp_path).append({"id": "a", "event": "finished", "status": "ok", "time": 2})
    assert State(tmp_path).outcomes() == {"a": "ok"}
    lines = (tmp_path / "state.jsonl").read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[2])["status"] == "ok", lines


@pytest.mark.parametrize(
    "log,why",
    [
        (
            "HDF5-DIAG: Error detected\n  file write failed: errno = 28, error message = 'No space left on device'\n",
            "file write failed: errno = 28, error message = 'No space left on device'",
        ),
        (
            "dtune-train: error: --output 'p.h5': cannot write there (No space left on device); choose a writable "
            "location\n",
            "dtune-train: error: --output 'p.h5': cannot write there (No space left on device); choose a writable "
            "location",
        ),
        ("rank 0\nOSError: [Errno 122] Disk quota exceeded\n", "OSError: [Errno 122] Disk quota exceeded"),
        ("dtune-train: error: --batch 0: must be at least 1\n", ""),
        ("", ""),  # an empty log on a disk with room: a failure of the point's own
    ],
)
def test_a_point_that_failed_for_lack_of_space_is_told_apart(tmp_path, log, why):
    (tmp_path / "p.log").write_text(log)
    assert disk.point_no_space(tmp_path / "p.log") == why


def test_a_failed_point_on_a_full_disk_failed_for_lack_of_space_whatever_its_log_says(tmp_path, monkeypatch):
    # Its error line may not have fitted: the log is empty, or ends before it.
    (tmp_path / "p.log").write_text("starting\n")
    monkeypatch.setattr(disk, "free_bytes", lambda path: 4096)
    assert disk.point_no_space(tmp_path / "p.log") == "its log names no error, and its disk has under 64.0 KiB free"


def test_the_no_space_message_names_the_path_what_met_it_and_the_space_left(monkeypatch):
    # The space left in binary units, written out by hand: whole units from exactly 1 KiB, 1 MiB, 1 GiB.
    sizes = {1023: "1023 bytes", 1024: "1.0 KiB", 3 << 20: "3.0 MiB", (1 << 20) - 1: "1024.0 KiB", 1 << 30: "1.0 GiB"}
    tail = ": free some space, then rerun the same command to resume"
    for free, text in sizes.items():
        monkeypatch.setattr(disk, "free_bytes", lambda path, free=free: free)
        assert (
            str(disk.NoSpace("/r/state.jsonl"))
            == f"no space left on device: cannot write /r/state.jsonl ({text} free there)" + tail
        )
    monkeypatch.setattr(disk, "free_bytes", lambda path: None)  # statvfs could not tell: no figure
    assert str(disk.NoSpace("/r/p.h5")) == "no space left on device: cannot write /r/p.h5" + tail
    assert str(disk.NoSpace("/r", why="point p1 failed")) == "no space left on device: point p1 failed in /r" + tail


def test_free_bytes_reads_the_file_system_of_the_path_or_of_its_nearest_existing_parent(tmp_path, monkeypatch):
    asked = []

    def statvfs(path):
        asked.append(Path(path))
        return os.statvfs_result((4096, 512, 100, 90, 80, 0, 0, 0, 0, 255))

    monkeypatch.setattr(os, "statvfs", statvfs)
    assert disk.free_bytes(tmp_path) == 80 * 512 and asked == [tmp_path]  # f_bavail x f_frsize
    assert disk.free_bytes(tmp_path / "not" / "yet.h5") == 80 * 512 and asked[1:] == [tmp_path]


def test_a_logs_first_mib_is_read_for_a_full_disk_whatever_its_bytes_and_a_missing_log_is_no_reason(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(disk, "free_bytes", lambda path: 1 << 30)
    log = tmp_path / "p.log"
    log.write_bytes(b"\xff\xfe not UTF-8\nOSError: [Errno 28] No space left on device\n")
    assert disk.point_no_space(log) == "OSError: [Errno 28] No space left on device"
    log.write_bytes(b"x" * (1 << 20) + b"\nOSError: [Errno 28] No space left on device\n")  # past the first MiB
    assert disk.point_no_space(log) == ""
    assert disk.point_no_space(tmp_path / "missing.log") == ""
    monkeypatch.setattr(disk, "free_bytes", lambda path: disk.LOW_SPACE_BYTES)  # exactly 64 KiB: not under it
    assert disk.point_no_space(tmp_path / "missing.log") == ""


def test_a_state_log_is_created_readable_by_all_and_a_failed_cut_back_still_says_no_space(tmp_path, monkeypatch):
    old = os.umask(0)
    try:
        disk.append_line(tmp_path / "s.jsonl", "{}")
    finally:
        os.umask(old)
    assert os.stat(tmp_path / "s.jsonl").st_mode & 0o777 == 0o644
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, data[:1]))  # a short write

    def ftruncate(fd, size):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "ftruncate", ftruncate)
    with pytest.raises(disk.NoSpace):
        disk.append_line(tmp_path / "s.jsonl", "{}")


def test_a_file_written_atomically_is_the_old_or_the_new_and_a_full_disk_leaves_the_old(tmp_path, monkeypatch):
    f = tmp_path / "manifest.json"
    disk.write_atomic(f, "old")
    disk.write_atomic(f, "new")
    assert f.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]
    real = Path.replace

    def full(self, target):
        assert self.name == "manifest.json.partial" and self.read_text() == "newer"  # written beside it first
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "replace", full)
    with pytest.raises(disk.NoSpace, match="cannot write .*manifest.json"):
        disk.write_atomic(f, "newer")
    monkeypatch.setattr(Path, "replace", real)
    assert f.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]

    def no_inode(self, text):  # full before the .partial could be created: nothing to remove
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "write_text", no_inode)
    with pytest.raises(disk.NoSpace):
        disk.write_atomic(f, "newer")
    monkeypatch.undo()
    monkeypatch.setattr(Path, "replace", lambda self, target: (_ for _ in ()).throw(PermissionError("read-only")))
    with pytest.raises(PermissionError):  # another error passes as it is
        disk.write_atomic(f, "newer")


def test_no_space_is_said_by_errno_or_by_hdf5s_text():
    assert disk.is_no_space(OSError(errno.ENOSPC, "No space left on device"))
    assert disk.is_no_space(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert disk.is_no_space(OSError("Can't write data (file write failed: errno = 28, error message = '...')"))
    assert not disk.is_no_space(OSError(errno.EACCES, "Permission denied"))
    assert not disk.is_no_space(ValueError("No space left on device"))


def test_orphans_are_this_hosts_launches_without_an_outcome(tmp_path):
    host = socket.gethostname()
    write_log(
        tmp_path / "state.jsonl",
        [
            {"id": "done", "event": "launched", "pgid": 10, "host": host, "time": 1},
            {"id": "done", "event": "finished", "status": "ok", "time": 2},
            {"id": "live", "event": "launched", "pgid": 11, "host": host, "time": 3},
            {"id": "elsewhere", "event": "launched", "pgid": 12, "host": host + "-other", "time": 4},
            {"id": "no-group", "event": "launched", "pgid": "12", "host": host, "time": 5},
            {"id": "started", "event": "started", "time": 6},
        ],
    )
    write_log(tmp_path / "state-1-0.jsonl", [{"id": "task", "event": "launched", "pgid": 13, "host": host, "time": 7}])
    assert [r["id"] for r in State(tmp_path).orphans()] == ["live"]


def test_unfinished_points_and_counts(tmp_path):
    ok, oom, failed, cut, pending, timed, started, ok2, odd = (point(repeat=i) for i in range(9))
    write_log(
        tmp_path / "state.jsonl",
        [
            {"id": ok.id, "event": "finished", "status": "ok", "time": 1},
            {"id": oom.id, "event": "finished", "status": "oom", "time": 1},
            {"id": failed.id, "event": "finished", "status": "failed", "reason": "error: x", "time": 1},
            {"id": cut.id, "event": "launched", "time": 2},
            {"id": timed.id, "event": "finished", "status": "failed", "time": 1},
            {"id": timed.id, "event": "finished", "status": "timeout", "time": 3},
            {"id": started.id, "event": "started", "time": 4},
            {"id": ok2.id, "event": "finished", "status": "ok", "time": 4},
            {"id": odd.id, "event": "finished", "status": "vanished", "time": 4},
        ],
    )
    pts = [ok, oom, failed, cut, pending, timed, started, ok2, odd]
    assert unfinished(pts, tmp_path) == [
        (failed, "failed", "error: x"),
        (cut, "interrupted", ""),
        (timed, "timeout", ""),
        (started, "interrupted", ""),
        (odd, "vanished", ""),
    ]
    assert counts(pts, tmp_path) == {
        "ok": 2,
        "oom": 1,
        "failed": 1,
        "timeout": 1,
        "interrupted": 2,
        "pending": 1,
        "vanished": 1,
    }


# ---------------------------------------------------------------------------------------------------
# Refused before anything runs.


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf])
def test_timeout_must_be_finite_seconds_above_zero(bad):
    with pytest.raises(
        SweepError, match=r"^--timeout \S+: give a number of seconds above 0 \(e.g. 600\), or leave it out$"
    ):
        check_timeout(bad)


@pytest.mark.parametrize("good", [None, 0.5, 600])
def test_timeout_accepted(good):
    check_timeout(good)


def test_out_dir_made_with_its_points_or_refused_in_one_line(tmp_path):
    d = make_out_dir(tmp_path / "new" / "sweep")
    assert d == tmp_path / "new" / "sweep" and (d / "points").is_dir() and list(d.iterdir()) == [d / "points"]
    assert make_out_dir(d) == d  # an existing sweep directory: resumed into
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(SweepError, match=f"^--tune-out {f}: is a file, not a directory: give a directory"):
        make_out_dir(f, "--tune-out")
    with pytest.raises(
        SweepError, match=f"^--out {f}/sub: cannot write there \\(Not a directory\\): give a directory you can write$"
    ):
        make_out_dir(f / "sub")


def test_points_over_several_nodes_need_a_hostfile_or_slurm(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    one, two, three = point(), point(nodes=2, ranks=2), point(nodes=3, ranks=3)
    check_placement([one], None)
    with pytest.raises(SweepError) as e:
        check_placement([one, two, three], MpirunHosts(tune="t"))
    assert str(e.value) == (
        f"sweep 's': point {two.id} runs on launch.nodes 2 (2 such points) and no --hostfile was given "
        "outside Slurm: give --hostfile FILE (the nodes), run inside a Slurm allocation (dtune sweep slurm), "
        "or launch on 1 node"
    )
    with pytest.raises(SweepError, match=r"launch.nodes 3 \(1 such point\) and"):
        check_placement([three], None)
    check_placement([two], MpirunHosts(hostfile="h"))
    monkeypatch.setenv("SLURM_JOB_ID", "5")
    check_placement([two], None)


def fake_squeue(monkeypatch, tmp_path, output):
    """squeue that answers only the query the runner makes (a job's node count and node list)."""
    exe = tmp_path / "squeue"
    query = '[ "$1" = -h ] && [ "$2" = -j ] && [ "$4" = -o ] && [ "$5" = "%D %N" ] && [ $# = 5 ] || exit 1'
    exe.write_text(f"#!/bin/sh\n{query}\necho '{output}'\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")


def test_a_slurm_allocation_that_lost_a_node_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    fake_squeue(monkeypatch, tmp_path, "1 n1")
    assert allocation_shortfall(point(nodes=2)) == (
        "Slurm job 42 now holds 1 node (n1) and this point needs 2: a node of the allocation failed "
        "(scontrol show job 42; sinfo -R names the node and why)"
    )
    assert allocation_shortfall(point(nodes=3)).startswith("Slurm job 42 now holds 1 node (n1) and this point needs 3")
    assert allocation_shortfall(point(nodes=1)) == ""  # a 1-node point is running on the node it has
    fake_squeue(monkeypatch, tmp_path, "2 n[1-2]")
    assert allocation_shortfall(point(nodes=2)) == ""
    assert "holds 2 nodes (n[1-2])" in allocation_shortfall(point(nodes=3))
    fake_squeue(monkeypatch, tmp_path, "")  # squeue cannot tell: no claim
    assert allocation_shortfall(point(nodes=2)) == ""
    fake_squeue(monkeypatch, tmp_path, "1 n1")
    monkeypatch.setenv("SLURM_JOB_ID", "4x2")  # not a job id: no claim
    assert allocation_shortfall(point(nodes=2)) == ""
    monkeypatch.delenv("SLURM_JOB_ID")
    assert allocation_shortfall(point(nodes=2)) == ""


def test_binaries_from_the_build_unless_dtune_bin_dir_says(monkeypatch):
    monkeypatch.delenv("DTUNE_BIN_DIR", raising=False)
    assert bin_dir() == REPO / "build" / "bin"
    monkeypatch.setenv("DTUNE_BIN_DIR", "/opt/dtune/bin")
    assert bin_dir() == Path("/opt/dtune/bin")
