"""The `dtune` command as a package: `dtune --help` names every subcommand with its one-line
description (read from the parsers themselves, so a new subcommand cannot be left out), and the
entry point pyproject.toml declares for `pip install .` maps to the same packages and runs the same
command as scripts/dtune; and the sweep package's modules import one another without a circle."""

import ast
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
    assert len(leaves) == 12, leaves  # sweep plan, run, slurm, status, merge; report; compare; tune; model x4
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


def package_imports(package: Path) -> dict:
    """{module: {modules of the package it imports}} for every module of a flat package, the
    imports inside functions included (one there that closes a circle only hides it until the call)."""
    names = {f.stem for f in package.glob("*.py")}
    graph = {}
    for f in sorted(package.glob("*.py")):
        out = set()
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Import):  # import pkg.x
                out |= {a.name.split(".")[1] for a in node.names if a.name.startswith(package.name + ".")}
            elif isinstance(node, ast.ImportFrom):
                within = node.module.split(".") if node.module else []
                if node.level == 0 and within[:1] != [package.name]:
                    continue  # another package's
                if node.level == 0:
                    within = within[1:]
                # from . import x, y / from pkg import x, y: the names; from .x import y: x
                out |= set(within[:1]) if within else {a.name for a in node.names}
        graph[f.stem] = (out & names) - {f.stem}
    return graph


def circles(graph: dict) -> list[list[str]]:
    """The groups of modules that reach one another through their imports (more than one module
    each), each sorted; [] for a package whose imports form no circle."""
    reach = {}
    for m in graph:
        seen, todo = set(), [m]
        while todo:
            for n in graph[todo.pop()] - seen:
                seen.add(n)
                todo.append(n)
        reach[m] = seen
    groups = {tuple(sorted({m} | {n for n in reach[m] if m in reach[n]})) for m in graph}
    return sorted(list(g) for g in groups if len(g) > 1)


def test_circles_found_by_hand():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}) == [["a", "b"], ["c", "d"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_the_sweep_package_has_no_import_circle():
    # A circle (tune.py and the methods importing one another's helpers, levels.py and paired.py
    # calling each other) makes every module of it one concept to read: issue 62.
    package = REPO / "sweeps" / "dtune_sweep"
    graph = package_imports(package)
    assert {"runner", "halving"} <= graph["tune"]  # the imports are read at all: from .x and from . import x
    found = circles(graph)
    said = [" ".join(f"{m}->{n}" for m in g for n in sorted(graph[m] & set(g))) for g in found]
    assert not found, "import circles in sweeps/dtune_sweep: " + "; ".join(said)
