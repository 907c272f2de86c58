"""`dtune report` and `dtune compare` on files they cannot use, and on hostile recorded values.

Unusable input (not HDF5, truncated, zeroed, no schema, a dtune file missing a group, dataset or
attribute the loader reads, nothing to draw) is one line naming the file and what is missing,
exit 2, nothing written. Recorded values are data: the report's block to paste (the launcher with
its `-x NAME=value` settings, the binary and its flags), run by bash, runs no command substitution
and gives the program and the variables exactly the recorded strings; report.md and report.html
show no markup from them."""

import html
import html.parser
import re
import shutil
import subprocess
from pathlib import Path

import h5py
import pytest

from conftest import bin_dir

REPO = Path(__file__).resolve().parents[2]
DTUNE = [str(REPO / "scripts" / "dtune")]


def dtune(*args, timeout=300, cwd=None):
    return subprocess.run(DTUNE + [str(a) for a in args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


def run_binary(name, args, out):
    r = subprocess.run(
        [str(bin_dir() / name), *map(str, args), "--output", str(out)], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return out


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    d = tmp_path_factory.mktemp("good")
    comm = run_binary("dtune-comm", ["-b", "8", "-e", "1K", "-f", "4", "-n", "3"], d / "comm.h5")
    train = run_binary(
        "dtune-train",
        [
            "--model",
            "gpt2-tiny",
            "--context",
            "16",
            "--vocab",
            "128",
            "--steps",
            "3",
            "--warmup-steps",
            "1",
            "--threads",
            "1",
            "--batch",
            "2",
        ],
        d / "train.h5",
    )
    return comm, train


def first_run(f):
    return f["runs"][sorted(f["runs"])[0]]


def derived(src, dst, edit):
    shutil.copy(src, dst)
    with h5py.File(dst, "r+") as f:
        edit(f)
    return dst


def broken_files(good, d):
    """(file, what the error line must say about it), one per way a file can be unusable."""
    comm, train = good
    data = comm.read_bytes()
    (d / "garbage.h5").write_bytes(b"not hdf5 at all\n" * 10)
    (d / "truncated.h5").write_bytes(data[: len(data) // 2])
    zeroed = bytearray(data)
    zeroed[len(data) // 3 :] = bytes(len(data) - len(data) // 3)
    (d / "zeroed.h5").write_bytes(bytes(zeroed))
    with h5py.File(d / "plain.h5", "w") as f:
        f["x"] = [1, 2, 3]
    (d / "empty_dir").mkdir()

    def drop(name):
        return lambda f: first_run(f).__delitem__(name)

    return [
        (d / "garbage.h5", "HDF5"),
        (d / "truncated.h5", "HDF5"),
        (d / "zeroed.h5", "HDF5"),
        (d / "plain.h5", "not a dtune results file"),
        (d / "missing.h5", "no such file"),
        (d / "empty_dir", "no *.h5"),
        (derived(comm, d / "no_runs.h5", lambda f: f.__delitem__("runs")), "without a /runs group"),
        (derived(comm, d / "no_time.h5", drop("time_us")), "missing dataset 'time_us'"),
        (derived(comm, d / "no_busbw.h5", drop("busbw_gbps")), "missing dataset 'busbw_gbps'"),
        (
            derived(comm, d / "no_fit.h5", lambda f: first_run(f).attrs.__delitem__("fit_alpha_us")),
            "missing attribute 'fit_alpha_us'",
        ),
        (derived(train, d / "no_loss.h5", drop("loss")), "missing dataset 'loss'"),
        (
            derived(train, d / "no_model.h5", lambda f: first_run(f).attrs.__delitem__("model")),
            "missing attribute 'model'",
        ),
    ]


def assert_one_line(r, file, what):
    assert r.returncode == 2, r.stdout + r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"dtune: error: {file}") and what in lines[0], lines[0]


def test_report_refuses_unusable_files_and_writes_nothing(good, tmp_path):
    for file, what in broken_files(good, tmp_path):
        out = tmp_path / f"out-{file.name}"
        r = dtune("report", good[0], file, "-o", out)
        assert_one_line(r, file, what)
        assert not out.exists(), f"{file.name}: report wrote {out}"


def test_compare_refuses_unusable_files(good, tmp_path):
    for file, what in broken_files(good, tmp_path):
        assert_one_line(dtune("compare", good[0], file), file, what)
        assert_one_line(dtune("compare", file, good[0]), file, what)


def test_report_with_nothing_to_draw_exits_2(good, tmp_path):
    def empty(f):
        for name in list(f["runs"]):
            del f["runs"][name]

    f = derived(good[0], tmp_path / "empty_runs.h5", empty)
    r = dtune("report", f, "-o", tmp_path / "out")
    assert r.returncode == 2 and "nothing to report" in r.stderr and str(f) in r.stderr, r.stdout + r.stderr
    assert not (tmp_path / "out").exists()


# Recorded values that a shell, an HTML page or a Markdown renderer would act on.
MODEL = "<script>alert(1)</script>|tiny"
DATA = '/data/it\'s a "set" $HOME `touch pwned_data`'
CACHE = "/tmp/cache dir\nrm -rf x"
ENV = {
    "NCCL_FOO": "$(touch pwned)",
    "NCCL_BAR": "a b 'c' \"d\" `touch pwned2` \\ $x ```",
    "bad name": "$(touch pwned3)",
}


@pytest.fixture(scope="module")
def hostile(good, tmp_path_factory):
    import json

    def edit(f):
        a = first_run(f).attrs
        a["model"], a["data"], a["cache_dir"] = MODEL, DATA, CACHE
        args = ["--model", MODEL, "--context", "16", "--data", DATA, "--cache-dir", CACHE, "--batch", "2"]
        a["point"] = json.dumps({"binary": "dtune-train", "args": args, "env": ENV, "ranks": 1, "values": {}})

    d = tmp_path_factory.mktemp("hostile")
    f = derived(good[1], d / "train.h5", edit)
    r = dtune("report", f, "-o", d / "report")
    assert r.returncode == 0, r.stdout + r.stderr
    return d / "report"


def fenced_blocks(md):
    """(code blocks, the text outside them), by CommonMark's rule: a block closes at a fence of
    the same character at least as long as the opening one."""
    blocks, outside, lines, i = [], [], md.splitlines(), 0
    while i < len(lines):
        m = re.fullmatch(r"(`{3,})\s*", lines[i])
        if not m:
            outside.append(lines[i])
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not re.fullmatch(f"`{{{len(m.group(1))},}}\\s*", lines[j]):
            j += 1
        assert j < len(lines), "an unclosed code block"
        blocks.append("\n".join(lines[i + 1 : j]))
        i = j + 1
    return blocks, "\n".join(outside)


# Stands in for mpirun: exports each -x NAME=value as mpirun passes it to the ranks, then records
# the program's arguments (NUL separated) and the two variables.
MPIRUN = """mpirun() {
  while [ $# -gt 0 ]; do
    case $1 in -np|--map-by) shift 2;; -x) export "$2"; shift 2;; *) break;; esac
  done
  shift; printf "%s\\0" "$@" > args.bin
  printf "%s" "$NCCL_FOO" > foo.txt; printf "%s" "$NCCL_BAR" > bar.txt
}
"""


def copy_blocks(blocks):
    return [b for b in blocks if "build/bin/dtune-train" in b]


def test_pasted_block_runs_nothing_and_keeps_values_exact(hostile, tmp_path):
    blocks, _ = fenced_blocks((hostile / "report.md").read_text())
    (block,) = copy_blocks(blocks)
    script = MPIRUN + block

    r = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert not list(tmp_path.glob("pwned*")), "a recorded value ran as a command"
    assert (tmp_path / "foo.txt").read_text() == ENV["NCCL_FOO"]
    assert (tmp_path / "bar.txt").read_text() == ENV["NCCL_BAR"]
    args = (tmp_path / "args.bin").read_text().split("\0")[:-1]
    for flag, value in (("--model", MODEL), ("--data", DATA), ("--cache-dir", CACHE)):
        assert args[args.index(flag) + 1] == value, args
    assert "# left out 'bad name'" in block


class Tags(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.pre = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_data(self, data):
        if self.tags and self.tags[-1] == "pre":
            self.pre.append(data)


def test_markdown_and_html_show_recorded_values_as_text(hostile):
    md = (hostile / "report.md").read_text()
    blocks, outside = fenced_blocks(md)
    outside = re.sub(r"(?m)^<a id='[a-z0-9-]+'></a>$", "", outside)  # the report's own anchors
    assert "<script" not in outside.lower() and "<" not in outside.replace("<br>", ""), outside
    assert f"## {html.escape(MODEL.split('|')[0], quote=False)}\\|tiny" in outside
    header = None
    for line in outside.splitlines():  # table rows: as many unescaped pipes as their header's
        if line.startswith("| ") and header is None:
            header = len(re.findall(r"(?<!\\)\|", line))
        elif line.startswith("|"):
            assert len(re.findall(r"(?<!\\)\|", line)) == header, line
        else:
            header = None
    page = (hostile / "report.html").read_text()
    p = Tags()
    p.feed(page)
    assert p.tags.count("script") == 1  # the report's own image check, nothing recorded
    (pasted,) = copy_blocks(blocks)
    assert pasted in [t for t in p.pre], "the HTML's block to paste differs from report.md's"


def test_dollar_signs_in_a_legend_are_text(good, tmp_path):
    """A setting (legend, table) holding `$...$` is drawn as written, not parsed as mathtext."""
    import json

    value = "$\\frac{$ x $(touch pwned)$"

    def edit(f):
        for name in f["runs"]:
            f["runs"][name].attrs["point"] = json.dumps({"env": {"NCCL_FOO": value}, "values": {}})

    f = derived(good[0], tmp_path / "comm.h5", edit)
    r = dtune("report", f, "-o", tmp_path / "out")
    assert r.returncode == 0 and "1 figures" in r.stdout, r.stdout + r.stderr
    assert f"NCCL_FOO={value}" in html.unescape((tmp_path / "out" / "report.html").read_text())


def test_a_reader_that_goes_away_is_not_an_error(tmp_path):
    # `dtune compare A B | head -1`: the pipe closes after one line; dtune stops quietly, exit 0.
    a = run_binary("dtune-comm", ["-b", "8", "-e", "1M", "-f", "2", "-n", "3"], tmp_path / "a.h5")
    b = run_binary("dtune-comm", ["-b", "8", "-e", "1M", "-f", "2", "-n", "3"], tmp_path / "b.h5")
    r = subprocess.run(
        ["bash", "-c", 'set -o pipefail; "$0" compare "$1" "$2" | head -1', DTUNE[0], str(a), str(b)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("config") and "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr
