"""The synthetic trainer (fake_train.py) installed as an executable named dtune-train, for the tests
that run sweeps and the tuner without the real binary.

A launch of it is a fork of a server that imported fake_train (numpy and h5py) once per test process,
not a Python start that imports them again: 0.02 s of CPU a launch instead of 0.16, over the
suite's thousand launches. The executable is a small client: it hands the server its arguments,
working directory, environment and its own stdin, stdout and stderr (SCM_RIGHTS), waits, and exits
with the launch's status (killed by the same signal where the launch was). A client that is killed
(the runner's --timeout, a killed tune) takes its launch with it: the server's handler sees the
connection close and kills the forked launch. Without the server (it could not start) the client
runs fake_train.py itself, as before.
"""

import atexit
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
_server: dict = {}  # this process's server: {"proc", "path"}

CLIENT = """\
import json, os, socket, struct, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect({path!r})
except OSError:  # no server: run the synthetic trainer in this process's place
    os.execv({python!r}, [{python!r}, {fake!r}] + sys.argv[1:])
msg = json.dumps({{"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}}).encode()
socket.send_fds(s, [struct.pack("!I", len(msg)) + msg], [0, 1, 2])
got = b""
while len(got) < 4:
    chunk = s.recv(4 - len(got))
    if not chunk:
        sys.exit("dtune-train (fake): the fork server closed the connection")
    got += chunk
rc = struct.unpack("!i", got)[0]
if rc < 0:
    os.kill(os.getpid(), -rc)
sys.exit(rc)
"""


def install_fake_train(tmp_path: Path) -> Path:
    """tmp_path/bin with a dtune-train that runs fake_train.py (through this process's fork server);
    the directory, for DTUNE_BIN_DIR."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "dtune-train"
    path = _server_path()
    client = CLIENT.format(path=path, python=sys.executable, fake=str(HERE / "fake_train.py"))
    # -S: the client needs no site-packages (its start is what the server saves).
    exe.write_text(f"#!{sys.executable} -S\n{client}")
    exe.chmod(0o755)
    return bindir


def _server_path() -> str:
    """The socket of this process's fork server, started on first use ('' when it did not start)."""
    if "path" in _server:
        return _server["path"]
    path = os.path.join(tempfile.mkdtemp(prefix="fake-train-"), "s")  # short: sun_path holds 108 bytes
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, __file__, path, str(os.getpid())],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,  # never the test's pipes: ctest waits for them to close
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while not os.path.exists(path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    _server.update(proc=proc, path=path if os.path.exists(path) else "")
    atexit.register(_stop)
    return _server["path"]


def _stop() -> None:
    proc = _server.get("proc")
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()


def _launch(conn: socket.socket, fake_main) -> None:
    """One launch: reads the client's request, forks the synthetic trainer on the client's fds, and
    answers with its status; kills it when the client goes away first."""
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    while len(data) < 4 or len(data) < 4 + struct.unpack("!I", data[:4])[0]:
        more = conn.recv(1 << 16)
        if not more:
            return
        data += more
    req = json.loads(data[4:])
    pid = os.fork()
    if pid == 0:
        rc = 1
        try:
            for i, fd in enumerate(fds):
                os.dup2(fd, i)
            os.chdir(req["cwd"])
            os.environ.clear()
            os.environ.update(req["env"])
            sys.argv = [str(HERE / "fake_train.py")] + req["argv"]
            rc = fake_main(req["argv"])
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(rc or 0)
    for fd in fds:
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    ready, _, _ = select.select([conn, pidfd], [], [])
    if pidfd not in ready:  # the client closed (it was killed): so is its launch
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    try:
        conn.sendall(struct.pack("!i", os.waitstatus_to_exitcode(status)))
    except OSError:
        pass


def serve(path: str, parent: int) -> None:
    """Accepts launches on `path` until the test process `parent` is gone."""
    sys.path.insert(0, str(HERE))
    import fake_train  # numpy and h5py, once

    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path + ".tmp")
    srv.listen(128)
    os.rename(path + ".tmp", path)  # the test waits for the name: it appears once the server listens
    srv.settimeout(1.0)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the handlers reap themselves
    while True:
        try:
            conn, _ = srv.accept()
        except TimeoutError:
            if os.getppid() != parent:
                break
            continue
        if os.fork() == 0:
            srv.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            conn.settimeout(None)
            try:
                _launch(conn, fake_train.main)
            finally:
                os._exit(0)
        conn.close()


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
