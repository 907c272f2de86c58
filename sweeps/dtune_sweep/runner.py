"""Local sweep execution: each point launched with mpirun, its result in its own HDF5 file, its
outcome appended (and fsynced) to the sweep's state log before the next point starts. A rerun skips
points already complete (resume). Ctrl-C or SIGTERM stops the running point's process group and
marks it interrupted; after a kill -9 of the runner, the point that was running has a `started`
record and no outcome, and is marked interrupted and rerun by the next run."""
from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from .spec import Point

COMPLETE = ("ok", "oom")  # outcomes a resume keeps; failed, timeout and interrupted run again
EXIT_STATUS = {0: "ok", 4: "oom", 3: "timeout"}


def bin_dir() -> Path:
    return Path(os.environ.get("DTUNE_BIN_DIR", Path(__file__).resolve().parents[2] / "build" / "bin"))


def known_flags() -> dict:
    """Each binary's long flags, read from its --help (an axis must be one of them)."""
    import re
    out = {}
    for b in ("dtune-comm", "dtune-train"):
        exe = bin_dir() / b
        if exe.exists():
            text = subprocess.run([str(exe), "--help"], capture_output=True, text=True).stdout
            out[b] = set(re.findall(r"(--[a-z0-9][a-z0-9_-]*)", text))
    return out


def launch_command(p: Point, output: Path, launcher: str = "mpirun") -> list:
    """The point's command line: srun --mpi=pmix inside a Slurm allocation, else mpirun."""
    exe = [str(bin_dir() / p.binary), *p.args, "--output", str(output)]
    if launcher == "srun":
        cmd = ["srun", "--mpi=pmix", "-n", str(p.ranks), "-N", str(p.nodes)]
        if p.ranks_per_node:
            cmd += [f"--ntasks-per-node={p.ranks_per_node}"]
        return cmd + exe  # the environment travels with srun (--export=ALL)
    cmd = [os.environ.get("DTUNE_MPIRUN", "mpirun"), "-np", str(p.ranks), "--oversubscribe"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    if p.ranks_per_node:
        cmd += ["--map-by", f"ppr:{p.ranks_per_node}:node"]
    for k, v in sorted(p.env.items()):
        cmd += ["-x", f"{k}={v}"]
    return cmd + exe


class State:
    """The append-only logs of a sweep directory, one JSON object per line: state.jsonl for local
    runs and one state-<shape>-<task>.jsonl per Slurm array task (tasks never share a file).
    Records are read from all of them; this object appends to its own."""

    def __init__(self, directory: Path, name: str = "state.jsonl"):
        self.directory = directory
        self.path = directory / name

    def records(self) -> list[dict]:
        out = []
        for path in sorted(self.directory.glob("state*.jsonl")):
            for line in path.read_text().splitlines():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass  # a line torn by a kill -9 mid-write
        out.sort(key=lambda r: r.get("time", 0))
        return out

    def append(self, record: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def outcomes(self) -> dict:
        """Point id -> its latest status; a start without an outcome reads as interrupted."""
        status = {}
        for r in self.records():
            status[r["id"]] = "interrupted" if r["event"] == "started" else r["status"]
        return status


def run_points(points: list[Point], directory: Path, timeout_s: float | None = None,
               launcher: str = "mpirun", state_name: str = "state.jsonl", write_manifest: bool = True) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "points").mkdir(exist_ok=True)
    if write_manifest:
        (directory / "manifest.json").write_text(json.dumps([p.to_json() for p in points], indent=1))
    state = State(directory, state_name)
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
            cmd = launch_command(p, out, launcher)
            state.append({"event": "started", "id": p.id, "time": time.time(), "command": shlex.join(cmd)})
            t0 = time.monotonic()
            with open(log, "w") as lf:
                env = {**os.environ, **p.env} if launcher == "srun" else None
                proc = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT, start_new_session=True, env=env)
                current["proc"] = proc
                try:
                    rc = proc.wait(timeout=timeout_s)
                    status = EXIT_STATUS.get(rc, "failed")
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    rc, status = None, "timeout"
                current["proc"] = None
            if stop["signal"]:
                status = "interrupted"
            failures += status not in COMPLETE
            state.append({"event": "finished", "id": p.id, "time": time.time(), "status": status, "exit_status": rc,
                          "seconds": round(time.monotonic() - t0, 3), "output": str(out)})
            elapsed = time.monotonic() - start
            eta = elapsed / n * (len(todo) - n)
            print(f"[{skipped + n}/{len(points)}] {p.id} {status:<11s} {p.binary} {' '.join(p.args)} "
                  f"(elapsed {elapsed:.0f} s, about {eta:.0f} s left)", flush=True)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if stop["signal"]:
        print(f"# interrupted: the running point is marked interrupted; rerun to resume", file=sys.stderr)
        return 130
    return 1 if failures else 0


def counts(points: list[Point], directory: Path) -> dict:
    outcomes = State(directory).outcomes()
    c = {"ok": 0, "oom": 0, "failed": 0, "timeout": 0, "interrupted": 0, "pending": 0}
    for p in points:
        s = outcomes.get(p.id, "pending")
        c[s] = c.get(s, 0) + 1
    return c
