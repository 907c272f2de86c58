"""Shared pytest fixtures: where the built binaries are and how to launch them with mpirun; and the
suite's skip policy. Under CI=true every dependency is installed by scripts/setup.sh, so a skipped
test is a failure unless it is marked `gpu` (the only thing CI lacks). Elsewhere a run with skips
exits with SKIP_EXIT_STATUS, which ctest reports as Skipped (SKIP_RETURN_CODE), and -rs prints
each reason: a skip is never a silent Passed."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SKIP_EXIT_STATUS = 77  # cmake/DtuneTesting.cmake: SKIP_RETURN_CODE


def under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a GPU; the only tests that may skip under CI=true")
    config.addinivalue_line(
        "markers",
        "opt_in(VAR): needs an outside resource that neither PyPI nor Debian ships, named by the "
        "environment variable VAR; collected only when VAR is set (not a skip)",
    )


def pytest_collection_modifyitems(config, items):
    """Opt-in tests whose variable is unset are deselected, and the run says so."""
    keep, opted_out = [], []
    for item in items:
        mark = item.get_closest_marker("opt_in")
        (keep if mark is None or os.environ.get(mark.args[0]) else opted_out).append(item)
    if opted_out:
        config.hook.pytest_deselected(items=opted_out)
        items[:] = keep
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        for item in opted_out:
            line = f"opt-in, not run: {item.nodeid} (set {item.get_closest_marker('opt_in').args[0]})"
            if reporter is not None:
                reporter.write_line(line)


def _ci_refuses(rep, marked_gpu: bool) -> None:
    """Turns a skip report into a failure under CI=true (unless the test is marked gpu)."""
    if not (rep.skipped and under_ci() and not marked_gpu):
        return
    reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
    rep.outcome = "failed"
    rep.longrepr = f"skipped under CI=true, where scripts/setup.sh installs every dependency: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _ci_refuses(outcome.get_result(), item.get_closest_marker("gpu") is not None)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    # A module that skips as a whole (pytest.importorskip, a module-level skip).
    outcome = yield
    marks = getattr(getattr(collector, "obj", None), "pytestmark", [])
    marks = marks if isinstance(marks, list) else [marks]
    _ci_refuses(outcome.get_result(), any(m.name == "gpu" for m in marks))


def pytest_sessionfinish(session, exitstatus):
    if exitstatus != 0:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and reporter.stats.get("skipped"):
        session.exitstatus = SKIP_EXIT_STATUS


def bin_dir() -> Path:
    return Path(os.environ.get("DTUNE_BIN_DIR", REPO / "build" / "bin"))


def visible_gpus() -> int:
    """GPUs this process would see: nvidia-smi's list, cut to CUDA_VISIBLE_DEVICES when set."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return 0
    r = subprocess.run([smi, "-L"], capture_output=True, text=True)
    n = sum(1 for line in r.stdout.splitlines() if line.startswith("GPU "))
    mask = os.environ.get("CUDA_VISIBLE_DEVICES")
    if mask is not None:
        n = min(n, len([d for d in mask.split(",") if d.strip()]))
    return n


def mpirun_prefix(np: int) -> list:
    cmd = [os.environ.get("DTUNE_MPIRUN", "mpirun"), "-np", str(np), "--oversubscribe"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    return cmd


def run_comm(np: int, args: list, timeout: float = 300, cwd=None) -> subprocess.CompletedProcess:
    exe = bin_dir() / "dtune-comm"
    if not exe.exists():
        pytest.fail(f"{exe} does not exist: build first (scripts/setup.sh)")
    cmd = (mpirun_prefix(np) if np > 0 else []) + [str(exe)] + [str(a) for a in args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd)


def run_train(np: int, args: list, timeout: float = 600, cwd=None) -> subprocess.CompletedProcess:
    """dtune-train with one intra-op thread per rank, under mpirun when np > 1 (in `cwd`, if given)."""
    exe = bin_dir() / "dtune-train"
    if not exe.exists():
        pytest.fail(f"{exe} does not exist: build first (scripts/setup.sh)")
    cmd = (mpirun_prefix(np) if np > 1 else []) + [str(exe), "--threads", "1", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd)


def data_rows(stdout: str) -> list:
    """Table rows as nccl-tests parsers see them: lines not starting with '#'."""
    return [line.split() for line in stdout.splitlines() if line.strip() and not line.startswith("#")]


@pytest.fixture
def comm():
    return run_comm


def rank_pid(session: int, rank: int, binary: str):
    """The pid of MPI world rank `rank` among the `binary` processes of session `session` (an mpirun
    started with start_new_session=True leads it; Open MPI gives the ranks process groups of their
    own, but they stay in its session). None when there is no such process."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if binary.encode() not in (d / "cmdline").read_bytes():
                continue
            env = (d / "environ").read_bytes().split(b"\0")
            if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env and os.getsid(int(d.name)) == session:
                return int(d.name)
        except OSError:
            continue
    return None
