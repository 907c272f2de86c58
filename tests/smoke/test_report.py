"""dtune report on results written by the real binaries during the test run: every figure whose
axes the data has renders a non-empty PNG, the others are left out cleanly, a sweep over
NCCL_ALGO x NCCL_PROTO on the mpi backend yields no nccl_tuner.conf (test_tuner_conf.py checks
the file on synthetic NCCL results), the block to paste starts a run that records the measured
configuration, and the page loads in Chromium with every section, no element wider than the page
and copy blocks equal to the flags in the results (test_verdicts.py checks the verdicts on fixed
inputs)."""

import os
import subprocess
from pathlib import Path

import pytest

from conftest import bin_dir, run_comm
from dtune_report.commands import ATTR_FLAGS, command_tokens, reproduce_command
from dtune_report.identity import parse_flags, run_identity
from dtune_report.loader import load_runs
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


FIGURES = {"busbw_vs_size", "throughput_vs_batch", "step_breakdown", "heatmap", "slowest_rank"}
# The train sweep's two axes (batch; bucket sizes, zipped), each with its own figure.
AXIS_FIGURES = {"study-1-axis-1", "study-1-axis-2"}


def test_figures_render_from_real_results(sweep, tmp_path):
    r = build_report([sweep], tmp_path)
    # Scaling needs several rank counts: left out. The rest have their axes here.
    assert set(r["figures"]) == FIGURES | AXIS_FIGURES
    for png in r["figures"].values():
        data = Path(png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    html = (tmp_path / "report.html").read_text()
    assert html.count("data:image/png;base64,") == len(FIGURES | AXIS_FIGURES)
    md = (tmp_path / "report.md").read_text()
    assert "build/bin/dtune-train \\\n    --model gpt2-tiny \\\n    --context 16" in md
    (s,) = r["studies"]
    assert [ax[0] for ax in s.axes] == ["batch", "bucket_mb"] and len(s.configs) == 4
    # The summary comes first and speaks of this workload against its baseline.
    assert md.index("## Summary") < md.index("## gpt2-tiny")
    assert "batch per rank 2, bucket size 256 KiB" in md or "batch per rank 2, bucket size 25 MiB" in md


def test_the_pasted_block_records_the_measured_configuration(sweep, tmp_path):
    """The best configuration's block, run by bash from the checkout (results directed through
    DTUNE_TRAIN_OUTPUT), records the identity the measured point's run recorded: same flags,
    environment settings and ranks."""
    r = build_report([sweep], tmp_path / "report")
    (f,) = r["findings"]
    c = f.best[0]
    env = {**os.environ, "DTUNE_TRAIN_OUTPUT": str(tmp_path / "pasted.h5")}
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if bin_dir() != REPO / "build" / "bin":
        pytest.fail(f"the block runs build/bin/dtune-train from the checkout; DTUNE_BIN_DIR is {bin_dir()}")
    p = subprocess.run(
        ["bash", "-c", reproduce_command(c)], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert p.returncode == 0, p.stdout + p.stderr
    (new,) = [row._asdict() for row in load_runs(tmp_path / "pasted.h5").itertuples(index=False)]
    measured = [row._asdict() for row in load_runs(sweep).itertuples(index=False) if (row.file, row.run) == c.runs[0]]
    assert run_identity(new, by_point=False) == run_identity(measured[0], by_point=False)


def test_figures_left_out_without_their_axes(sweep, tmp_path):
    # A plain dtune-comm file: no training data, one setting.
    out = tmp_path / "c.h5"
    r = run_comm(1, ["-b", "8", "-e", "1K", "-f", "4", "-n", "3", "--output", out])
    assert r.returncode == 0, r.stderr
    rep = build_report([out], tmp_path / "r")
    assert set(rep["figures"]) == {"busbw_vs_size"} and not rep["tuner"] and not rep["studies"]


def test_no_nccl_tuner_conf_from_mpi_backend_runs(sweep, tmp_path):
    """The sweep sets NCCL_ALGO x NCCL_PROTO, but its runs use the mpi backend, where NCCL
    variables change nothing: no winners to write (test_tuner_conf.py checks the file itself)."""
    r = build_report([sweep], tmp_path)
    assert not r["tuner"] and not (tmp_path / "nccl_tuner.conf").exists()
    assert "nccl_tuner.conf" not in (tmp_path / "report.md").read_text()


def test_html_report_loads_in_headless_chromium(sweep, tmp_path):
    """Every embedded image decodes in a real browser (sizes read from the page), every section is
    there, no element is wider than the page, each copy block's text is a measured run's flags, no
    console errors, and a screenshot is saved beside the report."""
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
        [browser, *flags, "--window-size=1200,3000", "--virtual-time-budget=5000", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]

    def data(name):
        m = re.search(f'data-{name}="([^"]*)"', dom.stdout)
        assert m, "the page's load handler did not run"
        return json.loads(html_unescape(m.group(1)))

    images = data("images")
    assert len(images) == len(r["figures"]) == len(FIGURES | AXIS_FIGURES)
    for name, complete, width, height in images:
        assert complete and width > 100 and height > 100, (name, width, height)
    assert data("sections") == [
        "summary",
        "batch-size",
        "communication",
        "hardware",
        "study-1",
        "collectives",
        "stragglers",
        "figures",
    ]
    assert data("wide") == [], "elements wider than the page"
    copies = data("copies")
    assert len(copies) >= 2  # the best (or the tied) and the baseline
    points = [p for p in load_runs(sweep).point if p["binary"] == "dtune-train"]
    for text in copies:
        argv = command_tokens(text)
        assert argv[:3] == ["mpirun", "-np", "2"] and argv[3] == "build/bin/dtune-train", argv
        flags_ = parse_flags(argv[4:], "dtune-train")
        # The flags of one measured point, plus only attribute settings the point left at defaults.
        matches = [
            p for p in points if all(flags_.get(k) == v for k, v in parse_flags(p["args"], "dtune-train").items())
        ]
        assert matches, text
        extra = set(flags_) - set(parse_flags(matches[0]["args"], "dtune-train"))
        assert extra <= {flag for _, flag, _ in ATTR_FLAGS}, extra
    assert "Uncaught" not in dom.stderr and "CONSOLE" not in dom.stderr, dom.stderr[-2000:]
    shot = tmp_path / "screenshot.png"
    s = subprocess.run(
        [browser, *flags, f"--screenshot={shot}", "--window-size=1200,3000", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert s.returncode == 0 and shot.stat().st_size > 10000, s.stderr[-2000:]


def html_unescape(text):
    import html

    return html.unescape(text)
