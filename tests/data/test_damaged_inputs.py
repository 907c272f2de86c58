"""One bad file never costs a good one (issue 31): a matrix of damaged inputs, made as real files,
through dtune-data convert, dtune-data bench with 0, 1 and 2 workers, and dtune-train --data on 2
ranks. Kinds of damage: truncated inside the header, truncated inside the scan, a bogus Huffman
table, zero bytes, random bytes, a PNG named .jpg, a CMYK JPEG (TurboJPEG does not convert CMYK: it
is counted and named as undecodable), an unreadable file and folder, a dangling symlink, a symlink
loop, a link to a folder and a second link to a good file; beside them the good images a real
folder holds: baseline, progressive and grayscale JPEGs and 1x1 and 65500x1 pixel ones. The
damaged ones sit first, in the middle and last in their class folders (sorted), and the loader
shuffles them anywhere in an epoch. Properties: every good image is delivered exactly once per
epoch and decodes (with --no-augment) to the same tensor as from a copy without the damaged files;
every damaged one is counted under its cause and named. Before the fix a damaged header poisoned the
thread's decoder: bench delivered a fraction of the good images, convert dropped good ones."""

import io
import json
import os
import shutil
import subprocess
import tarfile
from collections import Counter
from pathlib import Path

import h5py
import numpy as np
import pytest

from conftest import bin_dir, mpirun_prefix

W, H = 64, 48


def run(args, np_=1, timeout=300, unprivileged=False):
    # Root reads files whatever their mode: in a user namespace of its own, root's files are
    # subject to their permission bits, so that a file of mode 000 is really unreadable.
    prefix = ["unshare", "--user"] if unprivileged and os.geteuid() == 0 else []
    cmd = prefix + (mpirun_prefix(np_) if np_ > 1 else []) + [str(bin_dir() / args[0]), *map(str, args[1:])]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def ok(r):
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r


def jpeg(seed, size=(W, H), mode="RGB", **save):
    from PIL import Image

    rng = np.random.default_rng(seed)
    w, h = size
    # A smooth gradient plus noise: distinct per seed, compressible like a photo.
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * 255 // max(w, 1)), (y * 255 // max(h, 1)), ((x + y) * 3) % 256], -1)
    pixels = np.clip(base + rng.integers(-40, 40, (h, w, 3)), 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(out, "PNG" if save.pop("png", False) else "JPEG", **save)
    return out.getvalue()


def marker(data, code):
    return data.index(bytes([0xFF, code]), 2)


def claiming(data, width, height):
    """A good JPEG whose frame header (SOF0) claims width x height: a few hundred bytes that, read
    naively, ask for width x height x 3 bytes of pixels before any data is read."""
    out = bytearray(data)
    sof = marker(data, 0xC0)
    out[sof + 5 : sof + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
    return bytes(out)


def damaged(seed):
    """Each kind of damaged bytes, from a good JPEG of its own."""
    g = [jpeg(1000 + seed + i) for i in range(6)]
    bogus = bytearray(g[2])
    dht = marker(g[2], 0xC4)
    bogus[dht + 5 : dht + 21] = b"\xff" * 16  # the first Huffman table's 16 code counts
    sos = marker(g[1], 0xDA)
    return {
        "trunc-header": g[0][: marker(g[0], 0xC4) + 8],
        "trunc-scan": g[1][: sos + (len(g[1]) - sos) // 2],
        "bogus-huffman": bytes(bogus),
        "random": np.random.default_rng(seed).integers(0, 256, 3000, dtype=np.uint8).tobytes(),
        "cmyk": jpeg(2000 + seed, mode="CMYK"),
        # Past Pillow's decompression-bomb limit (178,956,970 pixels): 1.2 GB and 12.9 GB of pixels
        # (the second was std::bad_alloc: convert and bench died and wrote nothing).
        "bomb-20000": claiming(g[4], 20000, 20000),
        "bomb-65500": claiming(g[5], 65500, 65500),
    }


# Good images by name (class folder a or b), in sorted order within a folder.
def good_images():
    imgs = {}
    for i in range(12):
        imgs[f"{'ab'[i % 2]}/m{i:02d}.jpg"] = jpeg(i)
    imgs["a/m50-progressive.jpg"] = jpeg(50, progressive=True)
    imgs["b/m51-gray.jpg"] = jpeg(51, mode="L")
    imgs["a/m52-1x1.jpg"] = jpeg(52, size=(1, 1))
    imgs["b/m53-65500x1.jpg"] = jpeg(53, size=(65500, 1))
    return imgs


# Damaged JPEG bytes by name: first ("0"), middle ("m3") and last ("z") in their folders.
def damaged_images():
    out = {}
    for n, (kind, data) in enumerate(damaged(0).items()):
        where = ("0", "m05", "z")[n % 3]
        out[f"{'ab'[n % 2]}/{where}-{kind}.jpg"] = data
    return out


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """clean/: the good images only; dirty/: the same plus every kind of damage."""
    root = tmp_path_factory.mktemp("damaged")
    clean, dirty = root / "clean", root / "dirty"
    for name, data in good_images().items():
        for d in (clean, dirty):
            (d / name).parent.mkdir(parents=True, exist_ok=True)
            (d / name).write_bytes(data)
    for name, data in damaged_images().items():
        (dirty / name).write_bytes(data)
    (dirty / "a/z-zero.jpg").write_bytes(b"")
    (dirty / "b/0-png-named.jpg").write_bytes(jpeg(60, png=True))  # good, but a PNG: transcoded
    (dirty / "a/m06-unreadable.jpg").write_bytes(jpeg(61))
    (dirty / "a/m06-unreadable.jpg").chmod(0)
    (dirty / "locked").mkdir()
    (dirty / "locked/hidden.jpg").write_bytes(jpeg(62))
    (dirty / "locked").chmod(0)
    (dirty / "b/z-dangling.jpg").symlink_to(root / "nowhere.jpg")
    (dirty / "b/m07-loop.jpg").symlink_to(dirty / "b/m07-loop.jpg")
    (dirty / "b/m08-folder.jpg").symlink_to(dirty / "a")
    (dirty / "b/zz-second-link.jpg").symlink_to(dirty / "b/m01.jpg")
    yield root
    for p in (dirty / "locked", dirty / "a/m06-unreadable.jpg"):
        p.chmod(0o755)


def shard_members(out):
    """(label, sha of the JPEG) of every sample convert wrote, as a Counter."""
    import hashlib

    got = Counter()
    for shard in sorted(Path(out).glob("*.tar")):
        with tarfile.open(shard) as t:
            files = {m.name: t.extractfile(m).read() for m in t.getmembers()}
        for name, data in files.items():
            if name.endswith(".jpg"):
                label = int(files[name[:-4] + ".cls"])
                got[(label, hashlib.sha256(data).hexdigest())] += 1
    return got


def test_convert_keeps_every_good_image_and_names_every_damaged_one(folders, tmp_path):
    clean = ok(run(["dtune-data", "convert", folders / "clean", "--out", tmp_path / "clean"]))
    dirty = ok(run(["dtune-data", "convert", folders / "dirty", "--out", tmp_path / "dirty"], unprivileged=True))
    want, got = shard_members(tmp_path / "clean"), shard_members(tmp_path / "dirty")
    assert "# converted 16 images" in clean.stdout, clean.stdout
    assert "# converted 17 images: 16 JPEG kept as they are, 1 transcoded" in dirty.stdout, dirty.stdout
    # Every good JPEG exactly once, byte for byte, under its class; plus the transcoded PNG.
    assert sum((got - want).values()) == 1 and not (want - got), (want - got, got - want)
    assert all(n == 1 for n in got.values())
    lines = {ln.split(": ", 1)[0].strip("# "): ln for ln in dirty.stdout.splitlines() if ln.startswith("#   ")}
    causes = {
        "a/0-trunc-header.jpg": "undecodable",
        "b/m05-trunc-scan.jpg": "undecodable",
        "a/z-bogus-huffman.jpg": "undecodable",
        "b/0-random.jpg": "neither a JPEG nor a PNG",
        "a/m05-cmyk.jpg": "undecodable",
        "b/z-bomb-20000.jpg": "undecodable",
        "a/0-bomb-65500.jpg": "undecodable",
        "a/z-zero.jpg": "empty file",
        "a/m06-unreadable.jpg": "unreadable",
        "locked/": "unreadable folder",
        "b/z-dangling.jpg": "dangling symlink",
        "b/m07-loop.jpg": "symlink loop",
        "b/m08-folder.jpg": "symlink to a folder",
        "b/zz-second-link.jpg": "duplicate",
    }
    for name, cause in causes.items():
        assert name in lines and cause in lines[name], (name, cause, dirty.stdout)
    for name in ("b/z-bomb-20000.jpg", "a/0-bomb-65500.jpg"):  # refused from the header, with why
        assert "decompression-bomb limit" in lines[name], lines[name]
    assert f"# skipped {len(causes)} files" in dirty.stdout, dirty.stdout


def test_convert_refuses_out_inside_the_source_and_a_non_empty_out(folders, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(folders / "clean", src)
    for out in (src, src / "out"):
        r = run(["dtune-data", "convert", src, "--out", out])
        err = [ln for ln in r.stderr.splitlines() if "error" in ln]
        assert r.returncode == 2 and len(err) == 1 and str(src) in err[0] and "--out" in err[0], r.stderr
    assert not (src / "out").exists() and sorted(p.name for p in src.iterdir()) == ["a", "b"]
    ok(run(["dtune-data", "convert", src, "--out", tmp_path / "o"]))
    r = run(["dtune-data", "convert", src, "--out", tmp_path / "o"])
    assert r.returncode == 2 and "--overwrite" in r.stderr, r.stderr
    ok(run(["dtune-data", "convert", src, "--out", tmp_path / "o", "--overwrite"]))


def test_convert_tokens_reads_a_linked_file_once(tmp_path):
    d = tmp_path / "text"
    d.mkdir()
    (d / "a.txt").write_text("hello world\n" * 10)
    (d / "b.txt").symlink_to(d / "a.txt")
    r = ok(run(["dtune-data", "convert", "tokens", d, d / "a.txt", "--out", tmp_path / "tok"]))
    named = [ln for ln in r.stdout.splitlines() if ln.startswith("#   ") and "duplicate" in ln]
    assert "# converted 1 text files" in r.stdout and len(named) == 2, r.stdout
    assert json.loads((tmp_path / "tok/dataset.json").read_text())["tokens"] == 120


def write_shard(path, members):
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
        for i, (label, data) in enumerate(members):
            for ext, payload in (("jpg", data), ("cls", str(label).encode())):
                info = tarfile.TarInfo(f"sample-{i:06d}.{ext}")
                info.size = len(payload)
                t.addfile(info, io.BytesIO(payload))


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """clean/ and dirty/: two shards each (with 2 ranks, a rank's slice is one whole shard); dirty's
    hold the same good JPEGs in the same order with the damaged ones first, in the middle and last,
    15 samples each: shard 0 one more random-bytes sample, shard 1 a copy of a good one that is cut
    short (read short: truncated). Returns the root and the undecodable samples of an epoch."""
    root = tmp_path_factory.mktemp("shards")
    good = [(int(n[0] == "b"), d) for n, d in sorted(good_images().items())]
    bad = [(0, d) for _, d in sorted(damaged_images().items())] + [(1, jpeg(70, png=True))]
    halves = [good[0::2], good[1::2]]
    for name in ("clean", "dirty"):
        (root / name).mkdir()
        for s, half in enumerate(halves):
            members = list(half)
            if name == "dirty":
                extra = [(0, bytes(range(256)) * 4)] if s == 0 else [half[0]]
                members = bad[:2] + half[:3] + bad[2:4] + half[3:] + bad[4:] + extra
            write_shard(root / name / f"shard-{s:06d}.tar", members)
        ok(run(["dtune-data", "index", root / name]))
    last = root / "dirty/shard-000001.tar"
    m = json.loads((root / "dirty/dataset.json").read_text())
    _, offset, size, _ = m["samples"][-1]
    last.write_bytes(last.read_bytes()[: offset + size // 2])
    return root, 2 * len(bad) + 1


def digests(prefix, ranks):
    """Counter of (label, digest) over ranks, and the ids each epoch delivered."""
    got, ids = Counter(), Counter()
    for r in range(ranks):
        for line in Path(f"{prefix}.rank{r}").read_text().splitlines():
            epoch, sid, label, digest = line.split()
            got[(label, digest)] += 1
            ids[sid] += 1
    return got, ids


def bench_args(workers):
    return ["--batch", 2, "--workers", workers, "--image-size", 32, "--no-augment", "--keep-last", "--no-output"]


@pytest.fixture(scope="module")
def clean_digests(shards, tmp_path_factory):
    """What the clean copy delivers, decoding whole images (the same for any worker count: the
    loader's batches do not depend on it, tests/data/test_loader.py)."""
    root, _ = shards
    prefix = tmp_path_factory.mktemp("clean-digests") / "c"
    args = [*bench_args(1), "--decode", "full", "--dump-digests", prefix]
    ok(run(["dtune-data", "bench", root / "clean", *args], np_=2))
    return digests(prefix, 2)[0]


# Both decoders meet every kind of damage: the region decoder (the default) must refuse what the
# whole-image one refuses, though it stops reading below the crop box, and deliver the same tensors.
@pytest.mark.parametrize("workers,decode", [(0, "roi"), (1, "full"), (2, "roi")])
def test_bench_delivers_every_good_image_once_as_from_a_clean_copy(shards, clean_digests, tmp_path, workers, decode):
    root, undecodable = shards
    args = [*bench_args(workers), "--decode", decode, "--dump-digests", tmp_path / "d"]
    r = ok(run(["dtune-data", "bench", root / "dirty", *args], np_=2))
    want = clean_digests
    got, ids = digests(tmp_path / "d", 2)
    assert sum(want.values()) == len(good_images()) and all(n == 1 for n in want.values())
    # The dirty shards hold each good image once more (the copy of half[0] that was cut short).
    assert got == want and all(n == 1 for n in ids.values()), (want - got, got - want)
    (row,) = [ln.split() for ln in r.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
    assert (int(row[2]), int(row[10]), int(row[11])) == (len(good_images()), undecodable, 1), r.stdout
    assert row[13] == "LOST", row
    named = [ln for ln in r.stdout.splitlines() if ln.startswith("#     rank")]
    assert len(named) == 10 and f"#   {undecodable + 1} bad samples skipped:" in r.stdout, r.stdout
    assert f"... and {undecodable + 1 - 10} more" in r.stdout, r.stdout
    assert any("Bogus Huffman" in ln for ln in named), named


def test_train_on_two_ranks_counts_every_damaged_sample_and_fills_every_batch(shards, tmp_path):
    # Each rank's slice is one whole shard (2 shards of 15, 2 ranks): 8 good samples, 4 batches of 2
    # per epoch. 9 steps read epochs 0 and 1 to their end and start epoch 2, so the counts lie
    # between 2 and 3 epochs' worth. Before the fix the poisoned decoder left fewer than 2 good
    # samples in an epoch: exit 2.
    root, undecodable = shards
    out = tmp_path / "t.h5"
    args = ["--model", "resnet18", "--width", 8, "--image-size", 32, "--num-classes", 2, "--batch", 2]
    args += ["--steps", 9, "--warmup-steps", 0, "--threads", 1, "--workers", 1, "--output", out]
    ok(run(["dtune-train", *args, "--data", root / "dirty"], np_=2, timeout=600))
    with h5py.File(out) as f:
        (g,) = f["runs"].values()
        a = g.attrs
        assert a["data_batches"] == 18 and a["data_samples"] == 36, dict(a)
        per_epoch = (undecodable, 1)  # both ranks together
        for field, n in zip(("data_undecodable", "data_truncated"), per_epoch):
            assert 2 * n <= a[field] <= 3 * n, (field, a[field], n)
