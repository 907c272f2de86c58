"""A secret in a sweep's environment (`env: {NCCL_SOCKET_TOKEN: [topsecret1, topsecret2]}`) reaches
the launched process and nothing else: not the manifest, the state log, merged.h5, tune.json,
what `sweep plan`, `sweep run`, `tune` and `report` print, nor report.md or report.html. The blocks
to paste pass the variable by name (`-x NCCL_SOCKET_TOKEN`) under a line saying to export it.
`sweep slurm`, whose tasks launch from the manifest, refuses such a sweep with one line. The rule
is core/redact.h's, in one Python module (report/dtune_report/redact.py). Real dtune-train runs
(tiny), launched through a logging wrapper around the real mpirun."""

import os
import subprocess
from pathlib import Path

import pytest

from conftest import bin_dir

REPO = Path(__file__).resolve().parents[2]
SECRETS = ("topsecret1", "topsecret2", "hunter2")

SWEEP = """
name: secret
binary: dtune-train
args: [--model, gpt2-tiny, --context, 16, --vocab, 128, --batch, 2, --threads, 1, --steps, 3, --warmup-steps, 1]
launch: {ranks: 1}
env:
  NCCL_SOCKET_TOKEN: [topsecret1, topsecret2]
  DTUNE_STORE: [s3://alice:hunter2@store.example]
"""

TUNE = """
name: secret-tune
binary: dtune-train
args: [--model, gpt2-tiny, --context, 16, --vocab, 128, --batch, 2, --threads, 1, --warmup-steps, 1]
steps: 4
launch: {ranks: 1}
env:
  NCCL_SOCKET_TOKEN: [topsecret1, topsecret2]
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """mpirun wrapped: each launch's argument list is logged, then the real mpirun runs it."""
    d = tmp_path_factory.mktemp("secrets_bin")
    wrapper = d / "mpirun"
    real = os.environ.get("DTUNE_MPIRUN", "mpirun")
    wrapper.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "$LAUNCH_LOG"\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    return {**os.environ, "DTUNE_MPIRUN": str(wrapper), "DTUNE_BIN_DIR": str(bin_dir()), "LAUNCH_LOG": str(d / "log")}


def dtune(*args, env, timeout=300):
    return subprocess.run(
        [str(REPO / "scripts" / "dtune"), *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env
    )


def assert_no_secret(where: str, text: str):
    for s in SECRETS:
        assert s not in text, f"{s} in {where}: {text[max(0, text.find(s) - 300) : text.find(s) + 100]}"


def all_bytes(directory: Path) -> dict:
    """Every file under `directory` (HDF5 included: its attributes are stored as plain bytes)."""
    return {str(p): p.read_bytes().decode("latin-1") for p in directory.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def swept(tmp_path_factory, env):
    d = tmp_path_factory.mktemp("secret_sweep")
    (d / "s.yaml").write_text(SWEEP)
    out = d / "out"
    printed = ""
    for cmd in (["sweep", "plan", d / "s.yaml"], ["sweep", "run", d / "s.yaml", "--out", out]):
        r = dtune(*cmd, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        printed += r.stdout + r.stderr
    r = dtune("sweep", "merge", d / "s.yaml", "--out", out, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    printed += r.stdout + r.stderr
    r = dtune("report", out / "merged.h5", "-o", d / "report", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    printed += r.stdout + r.stderr
    return d, out, printed


def test_the_launched_process_gets_the_real_values(swept, env):
    log = Path(env["LAUNCH_LOG"]).read_text()
    assert "-x NCCL_SOCKET_TOKEN=topsecret1" in log and "-x NCCL_SOCKET_TOKEN=topsecret2" in log, log
    assert "DTUNE_STORE=s3://alice:hunter2@store.example" in log, log


def test_nothing_stored_or_printed_holds_a_secret(swept):
    d, out, printed = swept
    assert_no_secret("what dtune printed", printed)
    files = {**all_bytes(out), **all_bytes(d / "report")}
    for name in ("manifest.json", "state.jsonl", "merged.h5"):
        assert any(f.endswith(name) for f in files), sorted(files)
    for f, text in files.items():
        if not f.endswith(".log"):  # a point's log holds what the program printed, not dtune's record
            assert_no_secret(f, text)
    # The names stay: a reader sees that the variable was set.
    assert "NCCL_SOCKET_TOKEN" in files[str(out / "manifest.json")]
    assert "s3://store.example" in files[str(out / "manifest.json")]


def test_the_report_says_which_variable_to_fill_in(swept):
    d, _, _ = swept
    md = (d / "report" / "report.md").read_text()
    assert "-x NCCL_SOCKET_TOKEN " in md or "-x NCCL_SOCKET_TOKEN\n" in md, md
    assert "fill in: export NCCL_SOCKET_TOKEN=..." in md, md


def test_tune_records_and_prints_no_secret(tmp_path, env):
    (tmp_path / "t.yaml").write_text(TUNE)
    r = dtune("tune", tmp_path / "t.yaml", "--out", tmp_path / "tune", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert_no_secret("what dtune tune printed", r.stdout + r.stderr)
    for f, text in all_bytes(tmp_path / "tune").items():
        if not f.endswith(".log"):
            assert_no_secret(f, text)
    assert "-x NCCL_SOCKET_TOKEN " in r.stdout and "fill in: export NCCL_SOCKET_TOKEN=..." in r.stdout, r.stdout
    # The export block checks the variable is set instead of carrying a value.
    assert 'export NCCL_SOCKET_TOKEN="${NCCL_SOCKET_TOKEN:?' in r.stdout, r.stdout


def test_slurm_refuses_a_secret_it_would_have_to_store(tmp_path, env):
    (tmp_path / "s.yaml").write_text(SWEEP)
    r = dtune("sweep", "slurm", tmp_path / "s.yaml", "--out", tmp_path / "out", "--dry-run", env=env)
    assert r.returncode == 2, r.stdout + r.stderr
    assert len(r.stderr.splitlines()) == 1 and "NCCL_SOCKET_TOKEN" in r.stderr, r.stderr
    assert not (tmp_path / "out" / "manifest.json").exists()
