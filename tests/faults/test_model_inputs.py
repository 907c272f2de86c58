"""`dtune model predict|project` on assumptions the model is not defined for, and on profiles that
only their folder tells apart. Every assumption a user sets is finite and in the range its --help
names (report/dtune_report/model_assumptions.py): NaN, zero, negative, infinite or absurdly large
values are one line naming the flag and that range, exit 2, never a table or a verdict. Two
profiles with the same file name in two folders get identifiers that differ, and `--run` takes
each of them. Files are written by the real dtune-train and dtune-comm (tiny sizes)."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import bin_dir, run_comm

REPO = Path(__file__).resolve().parents[2]
GPT = ["--model", "gpt2-tiny", "--context", "16", "--vocab", "128", "--batch", "2", "--threads", "1"]


def dtune(*args):
    return subprocess.run(
        [str(REPO / "scripts" / "dtune"), *map(str, args)], capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("model_inputs")
    profile, comm = d / "profile.h5", d / "comm.h5"
    r = subprocess.run(
        [str(bin_dir() / "dtune-train"), *GPT, "--steps", "3", "--warmup-steps", "1", "--output", str(profile)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    r = run_comm(2, ["-b", "1K", "-e", "64K", "-f", "4", "-n", "3", "-w", "1", "--output", comm])
    assert r.returncode == 0, r.stdout + r.stderr
    return profile, comm


def assert_refused(r, flag, allowed):
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"dtune model: error: {flag} ") and allowed in lines[0], lines[0]
    assert r.stdout == "", r.stdout  # no table, no verdict


PROJECT_BAD = [("--mfu", v, "(0, 1]") for v in ("nan", "0", "-1", "inf", "1.5")] + [
    ("--alpha-inter-us", "nan", "(0, 1000000]"),
    ("--alpha-intra-us", "-2", "(0, 1000000]"),
    ("--bucket-mb", "nan", "(0, 65536]"),
    ("--bucket-mb", "inf", "(0, 65536]"),
    ("--bucket-mb", "1,nan", "(0, 65536]"),
    ("--nics", "0", "[1, 64]"),
    ("--peak-tflops", "0", "(0, 100000]"),
    ("--peak-tflops", "nan", "(0, 100000]"),
    ("--batch-scale", "-1", "(0, 1000000]"),
    ("--compute-scale", "inf", "(0, 1000000]"),
    ("--nodes", "1000000000", "[1, 65536]"),
]


@pytest.mark.parametrize("flag,value,allowed", PROJECT_BAD)
def test_project_refuses_an_assumption_outside_its_range(files, flag, value, allowed):
    assert_refused(dtune("model", "project", files[0], f"{flag}={value}"), flag, allowed)


PREDICT_BAD = [
    ("--bucket-mb", "inf", "(0, 65536]"),
    ("--first-bucket-mb", "nan", "(0, 65536]"),
    ("--first-bucket-mb", "-5", "(0, 65536]"),
    ("--first-bucket-mb", "inf", "(0, 65536]"),
    ("--cores", "-3", "[0, 65536]"),
    ("--ranks-per-node", "1000000000", "[1, 1024]"),
]


@pytest.mark.parametrize("flag,value,allowed", PREDICT_BAD)
def test_predict_refuses_an_assumption_outside_its_range(files, flag, value, allowed):
    assert_refused(dtune("model", "predict", *files, f"{flag}={value}"), flag, allowed)


def test_values_at_the_edges_of_the_ranges_are_accepted(files):
    r = dtune("model", "project", files[0], "--mfu", "1", "--nics", "1", "--nodes", "1,2", "--bucket-mb", "25")
    assert r.returncode == 0, r.stderr
    assert "nan" not in r.stdout and re.search(r"^# scaling (holds|breaks)", r.stdout, re.M), r.stdout
    r = dtune("model", "predict", *files, "--ranks-per-node", "2", "--cores", "0", "--first-bucket-mb", "0.5")
    assert r.returncode == 0, r.stderr


def test_the_ranges_are_in_the_help():
    text = dtune("model", "project", "--help").stdout
    assert "range (0, 1]" in " ".join(text.split()), text  # --mfu
    text = " ".join(dtune("model", "predict", "--help").stdout.split())
    assert "range [1, 1024]" in text and "range [0, 65536]" in text, text


def test_profiles_with_one_file_name_in_two_folders_are_named_apart(files, tmp_path):
    a, b = tmp_path / "a" / "profile.h5", tmp_path / "b" / "profile.h5"
    for p in (a, b):
        p.parent.mkdir()
        shutil.copy(files[0], p)
    for cmd in (["project", a, b], ["predict", a, b, files[1]]):
        r = dtune("model", *cmd)
        assert r.returncode == 2, r.stdout + r.stderr
        listed = re.search(r"2 1-rank profiles \((.*)\): name one with --run", r.stderr)
        assert listed, r.stderr
        ids = listed.group(1).split(", ")
        assert len(set(ids)) == 2, ids
        for ident, folder in zip(ids, ("a", "b")):
            assert ident.startswith(f"{folder}/profile.h5:"), ident
            r = dtune("model", *cmd, "--run", ident)
            assert r.returncode == 0, r.stderr
