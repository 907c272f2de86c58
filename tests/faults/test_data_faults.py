"""Faults in the data pipeline end cleanly: a bad record in dataset.json (a negative offset, a size
past its shard, a label outside the classes, a token shard whose header does not match its size)
stops every rank at open with exit 2 and one line naming the sample, quickly, with no rank left
waiting; corrupt and truncated JPEGs are skipped, counted exactly by cause, and every batch is
refilled to full size, so a BatchNorm ResNet trains on 2 ranks; sizes that cannot fit in memory
are refused before anything is allocated; a missing dataset is exit 2 from dtune-data and
dtune-train alike."""

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import h5py
import pytest

from conftest import bin_dir, mpirun_prefix

BATCH = 4


def run(args, np_=1, timeout=300):
    """Runs a dtune binary (under mpirun for np_ > 1) in its own process group, killed whole on
    timeout, so that no rank outlives the test."""
    cmd = (mpirun_prefix(np_) if np_ > 1 else []) + [str(bin_dir() / args[0]), *map(str, args[1:])]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        pytest.fail(f"{args[0]} still running after {timeout} s: {err[-2000:]}")
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def ok(r):
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return r


def error_lines(r, tool):
    return [line for line in r.stderr.splitlines() if line.startswith(f"{tool}: error:")]


def one_error(r, tool, *words):
    """Exit 2 with exactly one error line that holds every word, and no crash."""
    lines = error_lines(r, tool)
    assert r.returncode == 2 and len(lines) == 1, r.stdout[-1500:] + r.stderr[-3000:]
    for w in words:
        assert w in lines[0], (w, lines[0])
    for crash in ("bad_alloc", "terminate called", "Traceback", "Segmentation"):
        assert crash not in r.stderr, r.stderr[-2000:]
    return lines[0]


def no_process_left(marker):
    """No process whose command line mentions `marker` (a tmp path of this test) is alive."""
    left = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmdline = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(marker) in cmdline:
                left.append(cmdline)
    return left


def make_images(out, samples=40, shard=20):
    ok(
        run(
            [
                "dtune-data",
                "make",
                "images",
                "--out",
                out,
                "--samples",
                samples,
                "--classes",
                3,
                "--width",
                64,
                "--height",
                48,
                "--shard-samples",
                shard,
            ]
        )
    )
    return json.loads((Path(out) / "dataset.json").read_text())


def save_manifest(d, manifest):
    (Path(d) / "dataset.json").write_text(json.dumps(manifest))


def train_args(data, out=None, steps=1, classes=3):
    return [
        "dtune-train",
        "--model",
        "resnet18",
        "--width",
        8,
        "--image-size",
        32,
        "--num-classes",
        classes,
        "--batch",
        BATCH,
        "--steps",
        steps,
        "--warmup-steps",
        0,
        "--threads",
        1,
        "--data",
        data,
        *(["--output", out] if out else ["--no-output"]),
    ]


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    d = tmp_path_factory.mktemp("images") / "ds"
    make_images(d)
    return d


def copy(images, dst):
    shutil.copytree(images, dst)
    return json.loads((dst / "dataset.json").read_text())


def test_negative_offset_stops_every_rank_at_open_naming_the_sample(images, tmp_path):
    # Before: the rank whose slice held the record failed when it read it; the other waited in the
    # gradient reduction until --timeout.
    m = copy(images, tmp_path / "neg")
    m["samples"][5][1] = -512
    save_manifest(tmp_path / "neg", m)
    t0 = time.monotonic()
    r = run(train_args(tmp_path / "neg", steps=20) + ["--timeout", 200], np_=2, timeout=240)
    took = time.monotonic() - t0
    line = one_error(r, "dtune-train", "sample 5", m["objects"][m["samples"][5][0]][0], "offset -512")
    assert "negative" in line
    assert took < 60, f"the job took {took:.0f} s to end"
    assert not no_process_left(tmp_path / "neg")


@pytest.mark.parametrize("case", ["size", "past-end", "object", "num-classes"])
def test_bad_image_records_are_refused_at_open(images, tmp_path, case):
    d = tmp_path / case
    m = copy(images, d)
    obj, off, size, _ = m["samples"][7]
    key = m["objects"][obj][0]
    words = ["sample 7", key]
    if case == "size":
        m["samples"][7][2] = 0
        words += ["size 0"]
    elif case == "past-end":
        m["samples"][7][1] = m["objects"][obj][1] - size + 1
        words += ["runs past the end", str(m["objects"][obj][1])]
    elif case == "object":
        m["samples"][7][0] = len(m["objects"])
        words = ["sample 7", f"object {len(m['objects'])}"]
    else:
        m["num_classes"] = 0
        words = ["num_classes 0"]
    save_manifest(d, m)
    one_error(run(["dtune-data", "bench", d, "--image-size", 32, "--batch", BATCH]), "dtune-data", str(d), *words)


def test_labels_outside_the_classes_are_refused_naming_both(images, tmp_path):
    # A label past the manifest's num_classes: before, the loss crashed on it.
    m = copy(images, tmp_path / "label")
    m["samples"][9][3] = 7
    save_manifest(tmp_path / "label", m)
    one_error(
        run(train_args(tmp_path / "label")), "dtune-train", "sample 9", "label 7", "outside 0..2", "num_classes 3"
    )
    # Labels within the manifest's 5 classes but past the model's 3.
    m = copy(images, tmp_path / "wide")
    m["num_classes"] = 5
    m["samples"][11][3] = 4
    save_manifest(tmp_path / "wide", m)
    one_error(run(train_args(tmp_path / "wide")), "dtune-train", "5 classes", "sample 11", "label 4", "--num-classes 3")


@pytest.mark.parametrize("case", ["magic", "size"])
def test_bad_token_shards_are_refused_at_open(tmp_path, case):
    text = tmp_path / "t.txt"
    text.write_text("tokens for a faulty shard. " * 40)
    ok(run(["dtune-data", "make", "tokens", "--out", tmp_path / "tok", "--input", text, "--shard-tokens", 500]))
    shard = tmp_path / "tok" / "tokens-000001.bin"
    data = bytearray(shard.read_bytes())
    if case == "magic":
        data[0:4] = (20240521).to_bytes(4, "little")
        words = ["tokens-000001.bin", "magic 20240521"]
    else:
        data[8:12] = (400).to_bytes(4, "little")  # declares 400 tokens, holds 500
        words = ["tokens-000001.bin", "declares 400 tokens", "1824 bytes", "2024"]
    shard.write_bytes(bytes(data))
    one_error(run(["dtune-data", "bench", tmp_path / "tok", "--context", 16]), "dtune-data", *words)


def corrupt(src, dst, undecodable):
    """A copy of `src` with the JPEGs of `undecodable` (sample indices) made no JPEG at all, and
    every shard cut in the middle of its last sample (read short: truncated). Returns the expected
    counts per shard as {shard: (undecodable, truncated)}."""
    m = copy(src, dst)
    per_shard = {}
    for i in undecodable:
        obj, off, size, _ = m["samples"][i]
        path = dst / m["objects"][obj][0]
        data = bytearray(path.read_bytes())
        data[off : off + size] = b"XX" + b"\0" * (size - 2)
        path.write_bytes(bytes(data))
        per_shard[obj] = per_shard.get(obj, 0) + 1
    for obj, (key, _) in enumerate(m["objects"]):
        last = max((s for s in m["samples"] if s[0] == obj), key=lambda s: s[1])
        path = dst / key
        path.write_bytes(path.read_bytes()[: last[1] + last[2] // 2])
    return {obj: (per_shard.get(obj, 0), 1) for obj in range(len(m["objects"]))}


def test_corrupt_jpegs_are_skipped_and_every_batch_is_refilled(images, tmp_path):
    # 2 shards of 20 samples and 2 ranks: each epoch, each rank's slice is one whole shard. Shard 0
    # loses 3 samples (2 undecodable, 1 truncated), shard 1 loses 2: 17 and 18 good samples, 4 full
    # batches of 4 on either rank per epoch (the 5th cannot be filled: that epoch ends early, see
    # data/loader/loader.h). 8 steps are 2 epochs on each rank, in which every shard was read
    # twice: the skipped counts are exact. Before, a batch that lost samples went short (a batch of
    # one stops BatchNorm) and the counts did not tell the causes apart.
    m = json.loads((images / "dataset.json").read_text())
    in0 = [i for i, s in enumerate(m["samples"]) if s[0] == 0]
    in1 = [i for i, s in enumerate(m["samples"]) if s[0] == 1]
    expected = corrupt(images, tmp_path / "bad", [in0[3], in0[4], in1[10]])
    undecodable = sum(u for u, _ in expected.values())
    truncated = sum(t for _, t in expected.values())
    assert (undecodable, truncated) == (3, 2)
    out = tmp_path / "t.h5"
    r = ok(run(train_args(tmp_path / "bad", out=out, steps=8) + ["--workers", 2, "--lr", 0.05], np_=2, timeout=600))
    assert "bad (skipped)" in r.stdout
    with h5py.File(out) as f:
        (g,) = f["runs"].values()
        a = g.attrs
        assert a["data_batches"] == 2 * 8  # every rank, every step
        assert a["data_samples"] == a["data_batches"] * BATCH  # every batch full
        assert a["data_undecodable"] == 2 * undecodable and a["data_truncated"] == 2 * truncated, dict(a)
        assert a["data_bad_samples"] == a["data_undecodable"] + a["data_truncated"]
        loss = g["loss"][:]
    assert (loss == loss).all(), loss  # no NaN

    # The loader alone: one epoch with the tail kept, deterministic whatever the worker count.
    runs = []
    for w in (1, 3):
        r = ok(
            run(
                [
                    "dtune-data",
                    "bench",
                    tmp_path / "bad",
                    "--batch",
                    BATCH,
                    "--workers",
                    w,
                    "--image-size",
                    32,
                    "--dump-ids",
                    tmp_path / f"ids{w}",
                ],
                np_=2,
            )
        )
        rows = [line.split() for line in r.stdout.splitlines() if line.strip() and not line.startswith("#")]
        (row,) = rows
        assert (int(row[1]), int(row[2])) == (8, 32)  # 4 full batches per rank
        assert (int(row[10]), int(row[11])) == (undecodable, truncated), r.stdout
        runs.append([(tmp_path / f"ids{w}.rank{k}").read_text() for k in (0, 1)])
    assert runs[0] == runs[1]


@pytest.mark.parametrize(
    "args, words",
    [
        (["make", "images", "--width", 1000000], ["--width 1000000", "65500", "JPEG"]),
        (["make", "images", "--width", 60000, "--size-jitter", 0.5], ["90000x562", "65500"]),
        (
            ["bench", "{images}", "--batch", 100000000, "--image-size", 4096],
            ["needs", "bytes", "available", "MemAvailable"],
        ),
        (
            ["make", "tokens", "--input", "{text}", "--repeat", 2000000000],
            ["--repeat 2000000000", "needs", "available"],
        ),
    ],
)
def test_sizes_that_cannot_fit_are_refused_before_allocating(images, tmp_path, args, words):
    text = tmp_path / "t.txt"
    text.write_text("x" * 4096)
    args = [str(a).format(images=images, text=text) for a in args]
    if args[0] == "make":
        args += ["--out", tmp_path / "out"]
    t0 = time.monotonic()
    r = run(["dtune-data", *args], timeout=120)
    one_error(r, "dtune-data", *words)
    assert time.monotonic() - t0 < 30


@pytest.mark.parametrize("tool", ["dtune-data index", "dtune-data bench", "dtune-train"])
def test_a_missing_dataset_is_exit_2_from_every_binary(tmp_path, tool):
    missing = tmp_path / "nowhere"
    args = {
        "dtune-data index": ["dtune-data", "index", missing],
        "dtune-data bench": ["dtune-data", "bench", missing, "--image-size", 32],
        "dtune-train": train_args(missing),
    }[tool]
    one_error(run(args), args[0], str(missing), "does not exist")
