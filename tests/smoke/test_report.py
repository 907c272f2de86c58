"""dtune report on results written by the real binaries during the test run: every figure whose
axes the data has renders a non-empty PNG, the others are left out cleanly, and a sweep over
NCCL_ALGO x NCCL_PROTO on the mpi backend yields no nccl_tuner.conf (test_tuner_conf.py checks
the file on synthetic NCCL results)."""

import subprocess
from pathlib import Path

import pytest

from conftest import run_comm
from dtune_report.report import build_report

REPO = Path(__file__).resolve().parents[2]
DTUNE = [str(REPO / "scripts" / "dtune")]


def dtune(*args, timeout=600):
    r = subprocess.run(DTUNE + [str(a) for a in args], capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    d = tmp_path_factory.mktemp("rep")
    f = d / "s.yaml"
    f.write_text("""
sweeps:
  - name: nccl-knobs
    binary: dtune-comm
    args: [-b, 8, -e, 64K, -f, 8, -n, 5, -c, 0, --collective, "allreduce,allgather"]
    env: {NCCL_ALGO: [Ring, Tree], NCCL_PROTO: [Simple, LL]}
    launch: {ranks: 2}
  - name: train
    binary: dtune-train
    args: [--model, gpt2-tiny, --context, 16, --vocab, 128, --steps, 3, --warmup-steps, 1, --threads, 1]
    axes: {--batch: [2, 4]}
    zip: [{--bucket-mb: [0.25, 25], --first-bucket-mb: [0.25, 1]}]
    launch: {ranks: 2}
""")
    dtune("sweep", "run", f, "--out", d / "sweep")
    dtune("sweep", "merge", f, "--out", d / "sweep")
    return d / "sweep" / "merged.h5"


def test_figures_render_from_real_results(sweep, tmp_path):
    r = build_report([sweep], tmp_path)
    # Scaling needs several rank counts: left out. The rest have their axes here.
    assert set(r["figures"]) == {"busbw_vs_size", "throughput_vs_batch", "step_breakdown", "heatmap", "slowest_rank"}
    for png in r["figures"].values():
        data = Path(png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    html = (tmp_path / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 5
    md = (tmp_path / "report.md").read_text()
    assert "dtune-train --model gpt2-tiny" in md


def test_figures_left_out_without_their_axes(sweep, tmp_path):
    # A plain dtune-comm file: no training data, one setting.
    out = tmp_path / "c.h5"
    r = run_comm(1, ["-b", "8", "-e", "1K", "-f", "4", "-n", "3", "--output", out])
    assert r.returncode == 0, r.stderr
    rep = build_report([out], tmp_path / "r")
    assert set(rep["figures"]) == {"busbw_vs_size"} and not rep["tuner"]


def test_no_nccl_tuner_conf_from_mpi_backend_runs(sweep, tmp_path):
    """The sweep sets NCCL_ALGO x NCCL_PROTO, but its runs use the mpi backend, where NCCL
    variables change nothing: no winners to write (test_tuner_conf.py checks the file itself)."""
    r = build_report([sweep], tmp_path)
    assert not r["tuner"] and not (tmp_path / "nccl_tuner.conf").exists()
    assert "nccl_tuner.conf" not in (tmp_path / "report.md").read_text()


def test_html_report_loads_in_headless_chromium(sweep, tmp_path):
    """Every embedded image decodes in a real browser (sizes read from the page), no console
    errors, and a screenshot is saved beside the report."""
    import json
    import re
    import shutil

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.fail("chromium not found: scripts/setup.sh installs Debian's chromium")
    r = build_report([sweep], tmp_path)
    url = (tmp_path / "report.html").as_uri()
    flags = ["--headless=new", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0"]
    dom = subprocess.run(
        [browser, *flags, "--virtual-time-budget=5000", "--dump-dom", url], capture_output=True, text=True, timeout=120
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    m = re.search(r'data-images="([^"]*)"', dom.stdout)
    assert m, "the page's load handler did not run"
    images = json.loads(m.group(1).replace("&quot;", '"'))
    assert len(images) == len(r["figures"]) == 5
    for name, complete, width, height in images:
        assert complete and width > 100 and height > 100, (name, width, height)
    assert "Uncaught" not in dom.stderr and "CONSOLE" not in dom.stderr, dom.stderr[-2000:]
    shot = tmp_path / "screenshot.png"
    s = subprocess.run(
        [browser, *flags, f"--screenshot={shot}", "--window-size=1200,3000", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert s.returncode == 0 and shot.stat().st_size > 10000, s.stderr[-2000:]
