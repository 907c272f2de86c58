"""Local sweep execution: each point launched with mpirun, its result in its own HDF5 file, its
outcome appended (and fsynced) to the sweep's state log before the next point starts. A rerun skips
points already complete (resume). Ctrl-C or SIGTERM stops the running point's process group and
marks it interrupted; after a kill -9 of the runner, the point that was running has a `started`
record and no outcome, and is marked interrupted and rerun by the next run. Its process group (its
own session, recorded in a `launched` record) may outlive the runner: the next run ends it before
anything else, so no two launches of a point ever write at once. One runner per state log: an
flock on `<state log>.lock` holding the runner's pid and host. A full disk stops the run with one
line (disk.NoSpace, exit 1): a point that failed for lack of space is recorded interrupted, not
failed, so the rerun that resumes runs it again."""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from dtune_report.redact import recordable_argv

from . import disk
from .spec import Point, SweepError

COMPLETE = ("ok", "oom")  # outcomes a resume keeps; failed, timeout and interrupted run again
EXIT_STATUS = {0: "ok", 4: "oom", 3: "timeout"}


def bin_dir() -> Path:
    return Path(os.environ.get("DTUNE_BIN_DIR", Path(__file__).resolve().parents[2] / "build" / "bin"))


def known_flags() -> dict:
    """Each binary's long flags, read from its --help (an axis must be one of them)."""
    out = {}
    for b, words in (("dtune-comm", []), ("dtune-train", []), ("dtune-data", ["bench"])):
        exe = bin_dir() / b
        if exe.exists():
            text = subprocess.run([str(exe), *words, "--help"], capture_output=True, text=True).stdout
            out[b] = set(re.findall(r"(--[a-z0-9][a-z0-9_-]*)", text))
    return out


# Slurm's word that the step lost its allocation (a node died, the job was cancelled): it explains
# every error the ranks print as their peers vanish, so it wins over them.
SLURM_CAUSE = re.compile(r"srun: error: Node failure on |CANCELLED AT \S+ DUE TO ")


DASHES = re.compile(r"^\s*[-=*]{8,}\s*$")


def _message_lines(text: str) -> tuple[list[str], list[str]]:
    """(lines, boxed): the log's non-empty lines, with each of mpirun's boxed messages (a
    paragraph between two lines of dashes: "No nodes are available for this job, ...", "Your job
    has requested more processes than the ppr for this topology can support:") as one line, its
    first sentence with the lines it wraps over joined; `boxed` holds those alone. The dashes
    themselves are never a reason."""
    out, boxed, box, para = [], [], False, []

    def flush():
        if para:
            boxed.append(_first_sentence(" ".join(para)))
            out.append(boxed[-1])

    for raw in text.splitlines():
        ln = raw.strip()
        if DASHES.match(ln):
            if box:
                flush()
            box, para = not box, []
        elif not box:
            if ln:
                out.append(ln)
        elif ln and para is not None:
            para.append(ln)
        elif para:  # the box's first paragraph ended: the rest of the box is detail
            flush()
            para = None
    if box:  # a box the log ends inside
        flush()
    return out, boxed


def _first_sentence(text: str) -> str:
    m = re.search(r"[.:](\s|$)", text)
    return text[: m.start() + 1] if m else text


def first_error(log: Path, limit_bytes: int = 1 << 20) -> str:
    """The line of a point's log that says why it failed: Slurm's node failure or cancellation if
    there is one, else the first line naming an error (`dtune-train: error: ...`, mpirun's
    "ERROR"), else the first of mpirun's boxed messages, else the last non-empty line; empty when
    the log is."""
    try:
        with open(log, "rb") as f:
            text = f.read(limit_bytes).decode(errors="replace")
    except OSError:
        return ""
    lines, boxed = _message_lines(text)
    for ln in lines:
        if SLURM_CAUSE.search(ln):
            return ln
    for ln in lines:
        if "error" in ln.lower() or "abort" in ln.lower():
            return ln
    return boxed[0] if boxed else lines[-1] if lines else ""


@dataclass(frozen=True)
class MpirunHosts:
    """Where mpirun starts a point's ranks (`dtune sweep run --hostfile/--mpirun-tune`): a point
    over several nodes goes to the hostfile's nodes (--hostfile, --map-by ppr:R:node), every point
    gets the tune file's MCA settings (mpirun --tune: the rsh agent and transport settings a
    cluster needs, e.g. scripts/cluster's /run/dtune-cluster/NAME/mpirun.tune); a 1-node point
    runs on this machine. `dtune tune` runs its points with the same; under Slurm the allocation
    gives the nodes (no hostfile), and a task launching with mpirun gets the tune file alone."""

    hostfile: str | None = None
    tune: str | None = None

    @classmethod
    def checked(cls, hostfile: str | None, tune: str | None) -> "MpirunHosts":
        """From --hostfile and --mpirun-tune; SweepError (exit 2) naming a flag whose file is not there."""
        for flag, path in (("--hostfile", hostfile), ("--mpirun-tune", tune)):
            if path and not Path(path).is_file():
                raise SweepError(f"{flag} {path}: no such file")
        return cls(hostfile, tune)


def launch_command(p: Point, output: Path, launcher: str = "mpirun", hosts: MpirunHosts | None = None) -> list:
    """The point's command line: srun --mpi=pmix inside a Slurm allocation, else mpirun (on the
    nodes of `hosts` for a point over several nodes)."""
    # --overwrite: the runner owns points/ and has ended any earlier launch of this point, so a
    # .partial left by a killed launch is stale and this launch replaces it under the same name.
    exe = [str(bin_dir() / p.binary), *p.args, "--output", str(output), "--overwrite"]
    if launcher == "srun":
        cmd = ["srun", "--mpi=pmix", "-n", str(p.ranks), "-N", str(p.nodes)]
        if p.ranks_per_node:
            cmd += [f"--ntasks-per-node={p.ranks_per_node}"]
        return cmd + exe  # the environment travels with srun (--export=ALL)
    cmd = [os.environ.get("DTUNE_MPIRUN", "mpirun"), "-np", str(p.ranks), "--oversubscribe"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += placement_options(p, hosts)
    for k, v in sorted(p.env.items()):
        cmd += ["-x", f"{k}={v}"]
    return cmd + exe


def placement_options(p: Point, hosts: MpirunHosts | None = None) -> list:
    """mpirun's options that place the point's ranks: the tune file, the hostfile for a point over
    several nodes, and the mapping."""
    hosts = hosts or MpirunHosts()
    cmd = ["--tune", hosts.tune] if hosts.tune else []
    per_node = p.ranks_per_node
    if hosts.hostfile and p.nodes > 1:
        cmd += ["--hostfile", hosts.hostfile]
        if not per_node:  # ranks spread over the nodes in turn (--map-by node), as many on each as can be
            cmd += ["--map-by", "node"]
    if per_node:
        cmd += ["--map-by", f"ppr:{per_node}:node"]
    return cmd


def allocation_shortfall(p: Point) -> str:
    """Inside a Slurm allocation (SLURM_JOB_ID set): why the point cannot run there, when the job
    now holds fewer nodes than the point needs (a node failed: with --no-kill, Slurm removes it
    from the job and keeps the job running, and an srun asking for the old node count waits
    forever, silently); empty when it can, or when squeue cannot tell."""
    job = os.environ.get("SLURM_JOB_ID", "")
    if not job.isdigit() or p.nodes < 2:  # a 1-node job whose node died is not running this
        return ""
    try:
        r = subprocess.run(["squeue", "-h", "-j", job, "-o", "%D %N"], capture_output=True, text=True, timeout=60)
        held, nodelist = r.stdout.split()[:2]
        held = int(held)
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return ""
    if held >= p.nodes:
        return ""
    return (
        f"Slurm job {job} now holds {held} node{'s' if held != 1 else ''} ({nodelist}) and this point "
        f"needs {p.nodes}: a node of the allocation failed (scontrol show job {job}; "
        f"sinfo -R names the node and why)"
    )


def _launch(p: Point, cmd: list, log: Path, launcher: str, state: "State", current: dict, timeout_s) -> tuple:
    """Runs the point's command in a session of its own, its output in `log`; (exit status,
    status), exit status None on a timeout."""
    with disk.writing(log):
        lf = open(log, "w")
    with lf:
        env = {**os.environ, **p.env} if launcher == "srun" else None
        proc = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        current["proc"] = proc
        # Its own session: its group id is its pid. Recorded so that a runner started after a
        # kill -9 of this one can end it before relaunching the point.
        try:
            state.append(
                {
                    "event": "launched",
                    "id": p.id,
                    "time": time.time(),
                    "pgid": proc.pid,
                    "host": socket.gethostname(),
                    "binary": p.binary,
                }
            )
        except disk.NoSpace:  # unrecorded, the launch must not outlive the runner
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            current["proc"] = None
            raise
        try:
            rc = proc.wait(timeout=timeout_s)
            status = EXIT_STATUS.get(rc, "failed")
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc, status = None, "timeout"
        current["proc"] = None
    return rc, status


class State:
    """The append-only logs of a sweep directory, one JSON object per line: state.jsonl for local
    runs and one state-<shape>-<task>.jsonl per Slurm array task (tasks never share a file).
    Records are read from all of them; this object appends to its own."""

    def __init__(self, directory: Path, name: str = "state.jsonl"):
        self.directory = directory
        self.path = directory / name

    def records(self, own_only: bool = False) -> list[dict]:
        """Every log's records by time; with own_only, this runner's log alone (Slurm array tasks
        share the directory, each with its own log)."""
        out = []
        paths = [self.path] if own_only else sorted(self.directory.glob("state*.jsonl"))
        for path in paths:
            if not path.exists():
                continue
            for line in path.read_text(errors="replace").splitlines():
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line torn by a kill -9 mid-write
                if isinstance(r, dict) and isinstance(r.get("id"), str) and r.get("event") in EVENTS:
                    if not isinstance(r.get("time", 0), (int, float)):
                        continue
                    out.append(r)
        out.sort(key=lambda r: r.get("time", 0))
        return out

    def append(self, record: dict) -> None:
        """One record, whole or not at all (disk.append_line); disk.NoSpace on a full disk."""
        disk.append_line(self.path, json.dumps(record))

    def outcomes(self) -> dict:
        """Point id -> its latest status; a start without an outcome reads as interrupted."""
        status = {}
        for r in self.records():
            status[r["id"]] = "interrupted" if r["event"] in ("started", "launched") else str(r.get("status"))
        return status

    def orphans(self) -> list[dict]:
        """`launched` records (on this host, in this runner's own log) of points with no outcome
        after them: launches whose runner died, whose process group may still be running. Other
        logs belong to other runners (Slurm array tasks) whose launches are alive and theirs."""
        latest = {}
        for r in self.records(own_only=True):
            latest[r["id"]] = r
        host = socket.gethostname()
        return [
            r
            for r in latest.values()
            if r["event"] == "launched" and isinstance(r.get("pgid"), int) and r.get("host") == host
        ]


EVENTS = ("started", "launched", "finished")


def _group_members(pgid: int) -> list[int]:
    """Live processes in process group `pgid` (from /proc)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(d.name))
        except (OSError, ValueError, IndexError):
            continue
    return out


def end_orphans(state: "State") -> None:
    """Ends the process groups of launches whose runner died (kill -9), before anything relaunches:
    otherwise the old launch and the new one would write the same point file at once. A group is
    ended only when one of its processes still runs the point's command (a recycled group id is
    left alone)."""
    for r in state.orphans():
        pgid, binary = r["pgid"], r.get("binary", "dtune-")
        members = _group_members(pgid)
        ours = False
        for pid in members:
            try:
                ours |= binary.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                pass
        if not ours:
            continue
        print(
            f"# resume: ending {r['id']}'s earlier launch (process group {pgid}), still running "
            f"after its runner stopped",
            flush=True,
        )
        for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait_s
            while _group_members(pgid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if not _group_members(pgid):
                break


def make_out_dir(directory: Path, flag: str = "--out") -> Path:
    """Creates a sweep or tune directory (and its points/); SweepError (exit 2, one line) naming the
    flag when the path is a file or cannot be created or written, never a raw OSError."""
    if directory.exists() and not directory.is_dir():
        raise SweepError(f"{flag} {directory}: is a file, not a directory: give a directory (new or existing)")
    try:
        (directory / "points").mkdir(parents=True, exist_ok=True)
        probe = directory / f".write-test-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as e:
        if disk.is_no_space(e):
            raise disk.NoSpace(directory) from None
        raise SweepError(
            f"{flag} {directory}: cannot write there ({e.strerror or e}): give a directory you can write"
        ) from None
    return directory


def check_placement(points: list[Point], hosts: "MpirunHosts | None") -> None:
    """A point over several nodes needs nodes: mpirun's --hostfile, or a Slurm allocation (mpirun
    reads it; `dtune sweep slurm` and `tune --slurm` run inside one). Without either, refused before
    anything runs (SweepError, exit 2): otherwise every such point fails in mpirun ("more
    processes than the ppr for this topology can support") after the others ran."""
    if (hosts and hosts.hostfile) or os.environ.get("SLURM_JOB_ID"):
        return
    multi = [p for p in points if p.nodes > 1]
    if multi:
        p = multi[0]
        raise SweepError(
            f"sweep '{p.sweep}': point {p.id} runs on launch.nodes {p.nodes} ({len(multi)} such point"
            f"{'s' if len(multi) > 1 else ''}) and no --hostfile was given outside Slurm: give --hostfile FILE "
            f"(the nodes), run inside a Slurm allocation (dtune sweep slurm), or launch on 1 node"
        )


class RunnerLock:
    """One runner per state log: an exclusive flock on `<state log>.lock`, which holds the runner's
    pid and host for the message a second runner prints. The kernel drops the lock when the runner
    dies, kill -9 included."""

    def __init__(self, state_path: Path):
        self.path = state_path.with_name(state_path.name + ".lock")
        self.fd = None

    def __enter__(self):
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise SweepError(
                f"another dtune sweep runner ({holder}) is running {self.path.parent}: "
                f"wait for it, or stop it and rerun to resume"
            ) from None
        os.ftruncate(fd, 0)
        try:
            with disk.writing(self.path):
                os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        except disk.NoSpace:
            os.close(fd)
            raise
        self.fd = fd
        return self

    def __exit__(self, *exc):
        os.close(self.fd)
        return False


def run_points(
    points: list[Point],
    directory: Path,
    timeout_s: float | None = None,
    launcher: str = "mpirun",
    state_name: str = "state.jsonl",
    write_manifest: bool = True,
    hosts: MpirunHosts | None = None,
    lock_held: bool = False,
) -> int:
    """Runs the points not yet complete under the state log's lock (`lock_held`: the caller took
    it, as `dtune tune` does for its whole run, before it writes anything)."""
    make_out_dir(directory)
    state = State(directory, state_name)
    with contextlib.nullcontext() if lock_held else RunnerLock(state.path):
        if write_manifest:
            disk.write_atomic(directory / "manifest.json", json.dumps([p.to_json() for p in points], indent=1))
        end_orphans(state)
        return _run_locked(points, directory, state, timeout_s, launcher, hosts)


def _run_locked(
    points: list[Point], directory: Path, state: State, timeout_s: float | None, launcher: str, hosts=None
) -> int:
    done = state.outcomes()
    todo = [p for p in points if done.get(p.id) not in COMPLETE]
    skipped = len(points) - len(todo)
    if skipped:
        print(f"# resume: {skipped} of {len(points)} points already complete")
    stop = {"signal": 0}
    current = {"proc": None}

    def on_signal(sig, _frame):
        stop["signal"] = sig
        if current["proc"] is not None:
            try:
                os.killpg(current["proc"].pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    start = time.monotonic()
    failures = 0
    try:
        for n, p in enumerate(todo, 1):
            if stop["signal"]:
                break
            out = directory / "points" / f"{p.id}.h5"
            log = directory / "points" / f"{p.id}.log"
            cmd = launch_command(p, out, launcher, hosts)
            record = {"event": "started", "id": p.id, "time": time.time(), "command": shlex.join(recordable_argv(cmd))}
            state.append(record)
            t0 = time.monotonic()
            short = allocation_shortfall(p) if launcher == "srun" else ""
            if short:  # srun would wait for the missing nodes forever: the point fails now
                with disk.writing(log):
                    log.write_text(f"dtune sweep: error: {short}\n")
                rc, status = None, "failed"
            else:
                rc, status = _launch(p, cmd, log, launcher, state, current, timeout_s)
            if stop["signal"]:
                status = "interrupted"
            # A point the full disk failed is no failure of its own: recorded interrupted (with
            # why), so that the rerun that resumes runs it again, and the run stops here.
            no_space = disk.point_no_space(log) if status == "failed" and not short else ""
            status = "interrupted" if no_space else status
            failures += status not in COMPLETE
            why = f"no space left on device: {no_space}" if no_space else ""
            if status not in COMPLETE and status != "interrupted":
                why = first_error(log) or "(the log is empty)"
            state.append(
                {
                    "event": "finished",
                    "id": p.id,
                    "time": time.time(),
                    "status": status,
                    "exit_status": rc,
                    "seconds": round(time.monotonic() - t0, 3),
                    "output": str(out),
                    **({"reason": why} if why else {}),
                    **({"timeout_s": timeout_s} if status == "timeout" and timeout_s else {}),
                }
            )
            elapsed = time.monotonic() - start
            eta = elapsed / n * (len(todo) - n)
            print(
                f"[{skipped + n}/{len(points)}] {p.id} {status:<11s} {p.binary} {' '.join(p.args)} "
                f"(elapsed {elapsed:.0f} s, about {eta:.0f} s left)",
                flush=True,
            )
            if why:
                print(f"    {why}\n    log: {log}", flush=True)
            if no_space:
                raise disk.NoSpace(out.parent, f"point {p.id} failed for lack of space ({no_space})")
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if stop["signal"]:
        print("# interrupted: the running point is marked interrupted; rerun to resume", file=sys.stderr)
        return 130
    return 1 if failures else 0


def check_timeout(timeout_s: float | None) -> None:
    """--timeout of `sweep run` and `tune`: none, or a finite number of seconds above 0; 0,
    negative and nan would time every run out at once (SweepError, exit 2, before anything runs)."""
    if timeout_s is not None and not (math.isfinite(timeout_s) and timeout_s > 0):
        raise SweepError(f"--timeout {timeout_s:g}: give a number of seconds above 0 (e.g. 600), or leave it out")


def unfinished(points: list[Point], directory: Path) -> list[tuple]:
    """(point, status, reason) of every point whose latest outcome is neither complete nor
    pending, in the sweep's order: the reason is the first error line the runner kept from the
    point's log ("" when the log held none, or for an interrupted point)."""
    latest = {}
    for r in State(directory).records():
        latest[r["id"]] = r
    out = []
    for p in points:
        r = latest.get(p.id)
        if r is None:
            continue
        if r["event"] in ("started", "launched"):
            out.append((p, "interrupted", ""))
        elif str(r.get("status")) not in COMPLETE:
            out.append((p, str(r.get("status")), str(r.get("reason", ""))))
    return out


def counts(points: list[Point], directory: Path) -> dict:
    outcomes = State(directory).outcomes()
    c = {"ok": 0, "oom": 0, "failed": 0, "timeout": 0, "interrupted": 0, "pending": 0}
    for p in points:
        s = outcomes.get(p.id, "pending")
        c[s] = c.get(s, 0) + 1
    return c
