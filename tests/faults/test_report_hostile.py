"""`dtune report` and `dtune compare` on inputs that are not what they seem: a killed run's
`.partial` (root status `running`) is used as measured but never presented as finished (a warning
naming the file, its status and its steps, printed and at the top of the report); a `tune.json` of
the wrong shape and a JSON file given as results are one line, exit 2, nothing written; two hosts
compared are named in a warning; a report of a sweep whose points all failed says how many and why.
Files are written by the real dtune-train (tiny), a killed one by kill -9."""

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import h5py
import pytest

from conftest import bin_dir

REPO = Path(__file__).resolve().parents[2]
GPT = ["--model", "gpt2-tiny", "--context", "16", "--vocab", "128", "--batch", "2", "--threads", "1"]


def dtune(*args, timeout=300):
    return subprocess.run(
        [str(REPO / "scripts" / "dtune"), *map(str, args)], capture_output=True, text=True, timeout=timeout
    )


def train(*args):
    return subprocess.run(
        [str(bin_dir() / "dtune-train"), *GPT, *map(str, args)], capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    d = tmp_path_factory.mktemp("good")
    r = train("--steps", "3", "--warmup-steps", "1", "--output", d / "train.h5")
    assert r.returncode == 0, r.stdout + r.stderr
    return d / "train.h5"


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    """A dtune-train run killed with kill -9 after it wrote a few steps: its .partial."""
    d = tmp_path_factory.mktemp("killed")
    out = d / "killed.h5"
    p = subprocess.Popen(
        [str(bin_dir() / "dtune-train"), *GPT, "--steps", "100000", "--output", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    partial = d / "killed.h5.partial"
    deadline = time.monotonic() + 120
    while not partial.exists() or partial.stat().st_size < 200_000:  # the steps' datasets growing
        assert p.poll() is None and time.monotonic() < deadline, "the run ended or wrote nothing"
        time.sleep(0.2)
    time.sleep(1.0)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    with h5py.File(partial, "r") as f:
        assert f.attrs["status"] == "running"
        (g,) = f["runs"].values()
        steps = int(g.attrs["steps_written"])
    assert steps > 0
    return partial, steps


def test_report_of_a_killed_run_says_it_is_incomplete(killed, tmp_path):
    partial, steps = killed
    r = dtune("report", partial, "-o", tmp_path / "rep")
    assert r.returncode == 0, r.stderr
    warning = [line for line in r.stdout.splitlines() if line.startswith("# warning:")]
    assert len(warning) == 1 and str(partial) in warning[0] and "status running" in warning[0], r.stdout
    assert f"{steps} steps" in warning[0], warning
    for page in ("report.md", "report.html"):
        text = (tmp_path / "rep" / page).read_text()
        head = text[: text.find("Summary") if "Summary" in text else 3000]
        assert "incomplete results" in head and partial.name in head and "status running" in head, head


def test_compare_with_a_killed_run_says_it_is_incomplete(killed):
    partial, steps = killed
    r = dtune("compare", partial, partial)
    assert r.returncode == 0, r.stderr
    warning = [line for line in r.stdout.splitlines() if line.startswith("# warning:")]
    assert any(w.startswith("# warning: A: ") and "status running" in w and f"{steps} steps" in w for w in warning)
    assert any(w.startswith("# warning: B: ") for w in warning), r.stdout


def test_compare_across_two_hosts_names_both(good, tmp_path):
    other = tmp_path / "other.h5"
    shutil.copy(good, other)
    with h5py.File(other, "r+") as f:
        hosts = f["provenance/rank_host"]
        mine = hosts.asstr()[0]
        hosts[0] = "elsewhere-node7"
    r = dtune("compare", good, other)
    assert r.returncode == 0, r.stderr
    line = [x for x in r.stdout.splitlines() if x.startswith("# warning:")]
    assert len(line) == 1 and mine in line[0] and "elsewhere-node7" in line[0], r.stdout
    r = dtune("compare", good, good)
    assert "# warning" not in r.stdout, r.stdout  # one machine: nothing to warn about


def one_line(r, what):
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and what in lines[0], r.stderr


@pytest.mark.parametrize(
    "doc",
    [{"sweeps": [1, 2]}, [1], {"sweeps": [{"sweep": "x"}]}, {"sweeps": {"a": 1}}, {"sweeps": [{"rungs": "x"}]}],
)
def test_a_tune_record_of_the_wrong_shape_is_one_line(good, tmp_path, doc):
    d = tmp_path / "tunedir"
    d.mkdir()
    shutil.copy(good, d / "train.h5")
    (d / "tune.json").write_text(json.dumps(doc))
    r = dtune("report", d, "-o", tmp_path / "rep")
    one_line(r, f"{d / 'tune.json'}: not a tune record")
    assert not (tmp_path / "rep").exists()


@pytest.mark.parametrize(
    "doc,what",
    [
        ({"context": {}, "benchmarks": []}, "Google Benchmark JSON"),
        ({"sweeps": []}, "a `dtune tune` record: pass its folder"),
        ({"x": 1}, "a JSON file: pass the .h5 files"),
    ],
)
def test_a_json_file_given_as_results_says_what_it_is(tmp_path, doc, what):
    f = tmp_path / "thing.json"
    f.write_text(json.dumps(doc))
    r = dtune("report", f, "-o", tmp_path / "rep")
    one_line(r, what)
    assert "not a readable HDF5" not in r.stderr


def test_a_report_of_an_all_failed_sweep_says_how_many_and_why(tmp_path):
    (tmp_path / "s.yaml").write_text(
        "name: doomed\nbinary: dtune-train\n"
        "args: [--model, gpt2-tiny, --context, 16, --vocab, 128, --steps, 2, --threads, 1]\n"
        "axes: {--batch: [-1, -2]}\nlaunch: {ranks: 1}\n"
    )
    out = tmp_path / "out"
    r = dtune("sweep", "run", tmp_path / "s.yaml", "--out", out)
    assert r.returncode == 1, r.stdout + r.stderr
    r = dtune("sweep", "merge", tmp_path / "s.yaml", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    r = dtune("report", out / "merged.h5", "-o", tmp_path / "rep")
    one_line(r, "2 of the 2 points run in")
    assert r.stderr.count("1 failed: dtune-train: error: --batch") == 2, r.stderr  # each reason recorded
