"""The `dtune` command as a package: `dtune --help` names every subcommand with its one-line
description (read from the parsers themselves, so a new subcommand cannot be left out), and the
entry point pyproject.toml declares for `pip install .` maps to the same packages and runs the same
command as scripts/dtune."""

import errno
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def dtune(*args):
    env = dict(os.environ, PYTHONPATH=f"{REPO / 'sweeps'}:{REPO / 'report'}")
    return subprocess.run(
        [str(REPO / "scripts" / "dtune"), *args], capture_output=True, text=True, env=env, timeout=120
    )


def subcommands(help_text: str) -> dict:
    """{name: description} from the `{a,b,...}` block argparse prints for a group's subparsers."""
    return dict(re.findall(r"^    (\S+)\s+(\S.*)$", help_text, flags=re.M))


def test_help_lists_every_subcommand_with_its_description():
    top = dtune("--help")
    assert top.returncode == 0, top.stderr
    assert "dtune: sweeps, reports and comparisons over dtune's benchmarks" in top.stdout
    groups = subcommands(top.stdout)
    assert set(groups) == {"sweep", "report", "compare", "tune", "model"}, top.stdout
    leaves = {name: text for name, text in groups.items() if name not in ("sweep", "model")}
    for group in ("sweep", "model"):
        sub = dtune(group, "--help")
        leaves.update({f"{group} {name}": text for name, text in subcommands(sub.stdout).items()})
    assert len(leaves) == 11, leaves  # sweep plan, run, slurm, status, merge; report; compare; tune; model x3
    for name, text in leaves.items():
        # one line of the top-level help: the full command, then the subparser's own description
        # (`text` is its first line where argparse wraps it, so a prefix of the whole)
        line = re.search(rf"^  dtune {name}\s+(\S.*)$", top.stdout, flags=re.M)
        assert line, f"`dtune --help` does not list `dtune {name}`:\n{top.stdout}"
        assert line.group(1).startswith(text.strip()), (name, text, line.group(1))


def test_pyproject_entry_point_runs_the_dtune_command(tmp_path):
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert meta["project"]["scripts"] == {"dtune": "dtune_sweep.cli:main"}
    tool = meta["tool"]["setuptools"]
    assert sorted(tool["packages"]) == ["dtune_report", "dtune_sweep"]
    for package, folder in tool["package-dir"].items():
        assert (REPO / folder / "__init__.py").is_file() and Path(folder).name == package
    # The entry point as pip's console script calls it: sys.exit(main()), with the packages importable.
    module, func = meta["project"]["scripts"]["dtune"].split(":")
    code = (
        f"import sys; sys.path[:0] = {[str(REPO / 'sweeps'), str(REPO / 'report')]!r}; "
        f"from {module} import {func}; sys.exit({func}())"
    )
    args = ["sweep", "plan", str(REPO / "sweeps" / "quickstart.yaml"), "--show", "1"]
    installed = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    in_place = dtune(*args)
    assert installed.returncode == in_place.returncode == 0, installed.stderr + in_place.stderr
    assert installed.stdout == in_place.stdout and "points" in installed.stdout


def test_a_full_disk_met_by_any_write_is_one_line_and_exit_1(monkeypatch, capsys):
    # Writes outside the runner's own (tune.json, the Slurm scripts) meet a full disk as a raw
    # OSError: the command says it in one line, as the runner's disk.NoSpace does, not a traceback.
    sys.path[:0] = [str(REPO / "sweeps"), str(REPO / "report")]
    from dtune_sweep import cli

    def full(*args, **kw):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/nonexistent/out/tune.json")

    monkeypatch.setattr(cli, "plan", full)
    assert cli.main(["sweep", "plan", "s.yaml"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert re.fullmatch(
        r"dtune: error: no space left on device: cannot write /nonexistent/out/tune\.json \(.* free there\): "
        r"free some space, then rerun the same command to resume",
        err[0],
    ), err

    def denied(*args, **kw):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), "/nonexistent/out/tune.json")

    monkeypatch.setattr(cli, "plan", denied)
    with pytest.raises(PermissionError):  # another OSError is not taken for a full disk
        cli.main(["sweep", "plan", "s.yaml"])
