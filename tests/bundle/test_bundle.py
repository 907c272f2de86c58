"""The GPU bundle is complete: built here by scripts/gpu-bundle.sh, then scripts/gpu-check.sh
--rehearsal runs in a mount namespace where every library the bundle carries is hidden from the
system (tests/bundle/rehearse.sh), with a plain venv holding only torch, its dependencies, numpy and
h5py. Every step but the CUDA ones must pass there, and the files it brings back must be readable
by the report. A bundle missing one library must fail the check's facts, naming it: that shows the
hiding works (without it the system's copy would be found and the check would pass)."""

import gzip
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from dtune_report.loader import load_comm_summary, load_train_summary

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("DTUNE_BIN_DIR", REPO / "build" / "bin")).parent
REHEARSE = REPO / "tests" / "bundle" / "rehearse.sh"

# What a bundle must never carry: the GPU machine's own torch and CUDA libraries.
FORBIDDEN = re.compile(r"^lib(torch|c10|cudart|cuda|nccl|cublas|cudnn|cupti|nvrtc|nvToolsExt)[._]")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("the rehearsal needs root (a mount namespace); CI runs as root")
    out = tmp_path_factory.mktemp("bundle") / "gpu"
    r = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu-bundle.sh"), "--out", str(out), "--build-dir", str(BUILD)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert re.search(r": \d+ MiB \(", r.stdout), r.stdout
    return out


def rehearse(bundle: Path, out: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(REHEARSE), str(bundle), str(out), *args], capture_output=True, text=True, timeout=900
    )


def steps(summary: str) -> dict:
    """{step: status} from summary.txt's step table."""
    table = summary.split("## steps", 1)[1].split("##", 1)[0]
    rows = [line.split() for line in table.splitlines()[2:] if line.strip()]
    return {row[0]: row[1] for row in rows}


def test_bundle_holds_no_torch_or_cuda_and_fits_a_carry(bundle):
    libs = sorted(p.name for p in (bundle / "lib").iterdir())
    assert not [n for n in libs if FORBIDDEN.match(n)], libs
    for needed in ("libmpi.so.40", "libhdf5_serial.so.103", "libcurl.so.4", "libturbojpeg.so.0", "libhwloc.so.15"):
        assert needed in libs, libs
    size = sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file() and not p.is_symlink())
    assert size <= 60 << 20, size
    manifest = dict(line.split("=", 1) for line in (bundle / "MANIFEST").read_text().splitlines())
    assert manifest["torch_version"] == "2.11.0"
    assert re.fullmatch(r"2\.\d+", manifest["glibc_min"])


def test_rehearsal_runs_every_step_but_the_cuda_ones(bundle, tmp_path):
    out = tmp_path / "out"
    r = rehearse(bundle, out)
    assert r.returncode == 0, r.stdout[-5000:] + r.stderr[-3000:]
    hidden = int(re.search(r"rehearse.sh: (\d+) system library files hidden", r.stdout).group(1))
    assert hidden >= 40, r.stdout[:2000]
    summary = (out / "summary.txt").read_text()
    assert "facts: ok" in summary, summary
    got = steps(summary)
    for name in ("gpu.nccl_backend.no_gpu", "comm.mpi_2ranks", "resnet.cpu", "gpt2-tiny.cpu", "resnet.profile"):
        assert got.get(name) == "ok", (name, summary)
    for name in ("data.make", "resnet.jpeg.w2"):
        assert got.get(name) == "ok", (name, summary)
    assert got["comm.nccl_1rank"] == "skipped" and "rehearsal: no GPU" in summary
    # The Python gpu tests ran under the bundle's pytest and skipped for want of GPUs, not for a
    # missing module.
    assert got["gpu.python_tests"] == "skipped", summary
    log = (out / "gpu-check.log").read_text()
    assert "ModuleNotFoundError" not in log and "cannot open shared object" not in log, log[-3000:]
    assert "Sorry!" not in log, "Open MPI or PMIx could not find their files in the bundle"
    # What comes back: at most 8 files, each under 16 MiB, and the merged results read by the report.
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and all((out / f).stat().st_size < 16 << 20 for f in files), files
    train = load_train_summary(out / "results.h5")
    assert len(train) == 4, train
    assert set(train.model) == {"resnet18", "gpt2-tiny"}
    comm = load_comm_summary(out / "results.h5")
    assert len(comm) > 0 and set(comm.collective) == {"allreduce"}
    trace = json.loads(gzip.decompress((out / "rank0.pt.trace.json.gz").read_bytes()))
    assert trace["traceEvents"], "empty profiler trace"


def test_a_bundle_missing_a_library_fails_the_facts_naming_it(bundle, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(bundle, broken, symlinks=True)
    (broken / "lib" / "libhdf5_serial.so.103").unlink()
    r = rehearse(broken, tmp_path / "out")
    assert r.returncode == 2, r.stdout[-3000:] + r.stderr[-3000:]
    assert "FACT WRONG: libraries do not resolve" in r.stdout and "libhdf5_serial.so.103" in r.stdout, r.stdout[-3000:]


def test_without_a_gpu_the_real_check_stops_at_the_facts(bundle, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DTUNE_BIN_DIR", "DTUNE_MPIRUN")}
    env.update(DTUNE_GPU_BUNDLE=str(bundle), DTUNE_PYTHON=str(REPO / ".venv" / "bin" / "python"))
    env["PATH"] = ":".join(p for p in env["PATH"].split(":") if not shutil.which("nvidia-smi", path=p))
    r = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu-check.sh"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 2, r.stdout[-3000:] + r.stderr[-3000:]
    assert "FACT WRONG: no nvidia-smi" in r.stdout, r.stdout[-3000:]
