"""The data pipeline end to end, through dtune-data and dtune-train: an epoch covers the dataset
exactly once across ranks (images and token windows), shuffling is deterministic per seed and
different per epoch; the node cache serves the second epoch from S3 data (real moto server,
signed requests), keeps to its capacity, and two ranks filling it at once fetch each block once and
never read a partial one; corrupt and truncated data are skipped and counted (fatal with
--strict); missing paths, buckets and objects fail before anything is read; dtune-train learns from
real shards and records what loading cost."""

import json
import re
import subprocess
from collections import Counter
from pathlib import Path

import h5py
import pytest

from conftest import bin_dir, mpirun_prefix


def tool(args, np_=1, env=None, timeout=300):
    exe = bin_dir() / args[0]
    cmd = (mpirun_prefix(np_) if np_ > 1 else []) + [str(exe), *[str(a) for a in args[1:]]]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def ok(r):
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return r


def epochs_table(stdout):
    rows = [line.split() for line in stdout.splitlines() if line.strip() and not line.startswith("#")]
    return [
        dict(
            epoch=int(r[0]),
            batches=int(r[1]),
            samples=int(r[2]),
            bad=int(r[7]),
            hit=r[8],
            fetched_mb=float(r[9]),
            undecodable=int(r[10]),
            truncated=int(r[11]),
        )
        for r in rows
    ]


def make_images(out, samples=60, shard=16, env=None, **kw):
    args = [
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
        96,
        "--height",
        72,
        "--shard-samples",
        shard,
    ]
    for k, v in kw.items():
        args += [f"--{k.replace('_', '-')}", v]
    return ok(tool(args, env=env))


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    d = tmp_path_factory.mktemp("images") / "ds"
    make_images(d)
    return d


def read_ids(prefix, ranks):
    per_rank = []
    for r in range(ranks):
        lines = Path(f"{prefix}.rank{r}").read_text().split()
        pairs = list(zip(map(int, lines[0::2]), map(int, lines[1::2])))
        per_rank.append(pairs)
    return per_rank


@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_every_sample_once_per_epoch_across_ranks(images, tmp_path, ranks):
    ok(
        tool(
            [
                "dtune-data",
                "bench",
                images,
                "--batch",
                4,
                "--workers",
                2,
                "--epochs",
                2,
                "--keep-last",
                "--image-size",
                32,
                "--dump-ids",
                tmp_path / "ids",
            ],
            np_=ranks,
        )
    )
    per_rank = read_ids(tmp_path / "ids", ranks)
    for epoch in (0, 1):
        seen = [i for pairs in per_rank for e, i in pairs if e == epoch]
        assert sorted(seen) == list(range(60)), (epoch, Counter(seen).most_common(3))
        # disjoint: no id on two ranks
        sets = [{i for e, i in pairs if e == epoch} for pairs in per_rank]
        assert sum(len(s) for s in sets) == 60
    order = [[i for e, i in pairs if e == epoch] for pairs in per_rank for epoch in (0, 1)]
    assert order[0] != order[1]  # reshuffled between epochs


def test_shuffling_is_deterministic_for_a_seed_and_worker_count_free(images, tmp_path):
    runs = []
    for name, workers, seed in [("a", 1, 7), ("b", 3, 7), ("c", 1, 8)]:
        ok(
            tool(
                [
                    "dtune-data",
                    "bench",
                    images,
                    "--batch",
                    5,
                    "--workers",
                    workers,
                    "--seed",
                    seed,
                    "--image-size",
                    32,
                    "--dump-ids",
                    tmp_path / name,
                ]
            )
        )
        runs.append(Path(f"{tmp_path / name}.rank0").read_text())
    assert runs[0] == runs[1] and runs[0] != runs[2]
    for name in ("a", "c"):  # each a permutation of the whole dataset, and not the stored order
        ids = [i for _, i in read_ids(tmp_path / name, 1)[0]]
        assert sorted(ids) == list(range(60)) and ids != list(range(60)), ids


def bench_digests(data, prefix, *extra):
    """Runs one epoch of dtune-data bench on one rank with --dump-digests: {id: (label, digest)}
    and the results file's run group attributes."""
    out = Path(f"{prefix}.h5")
    args = ["dtune-data", "bench", data, "--batch", 4, "--workers", 2, "--keep-last"]
    if "--image-size" not in extra:
        args += ["--image-size", 32]
    ok(tool([*args, "--dump-digests", prefix, "--output", out, *extra]))
    rows = [line.split() for line in Path(f"{prefix}.rank0").read_text().splitlines()]
    with h5py.File(out) as f:
        (g,) = f["runs"].values()
        attrs = dict(g.attrs)
    return {int(sid): (label, digest) for _, sid, label, digest in rows}, attrs


@pytest.mark.parametrize("augment", ["random-resized-crop", "center-crop"])
def test_region_decode_delivers_the_tensors_of_a_whole_image_decode(tmp_path, augment):
    # Sizes 96x72 +-40%, so boxes fall on, off and across the 16-pixel iMCU grid at every edge.
    make_images(tmp_path / "ds", samples=40, size_jitter=0.4)
    extra = ["--no-augment"] if augment == "center-crop" else []
    full, fa = bench_digests(tmp_path / "ds", tmp_path / "full", "--decode", "full", *extra)
    roi, ra = bench_digests(tmp_path / "ds", tmp_path / "roi", *extra)  # roi is the default
    assert len(full) == 40 and roi == full
    assert (fa["decode"], ra["decode"], ra["fast_decode"]) == ("full", "roi", 0), (fa, ra)
    # The region decoder inverse-transforms fewer coefficients, and both timed the decoder.
    assert 0 < ra["data_coef_bytes"] < fa["data_coef_bytes"], (ra["data_coef_bytes"], fa["data_coef_bytes"])
    assert 0 < ra["data_jpeg_ms"] <= ra["data_decode_ms"] and 0 < fa["data_jpeg_ms"] <= fa["data_decode_ms"]


def test_fast_decode_changes_only_the_pixels_of_boxes_it_can_scale(tmp_path):
    # 96x72 images to 24 pixels: boxes of 48x48 or more are DCT-scaled, the smaller ones are not.
    make_images(tmp_path / "ds", samples=40)
    extra = ["--image-size", 24]
    exact, _ = bench_digests(tmp_path / "ds", tmp_path / "exact", *extra)
    fast, fa = bench_digests(tmp_path / "ds", tmp_path / "fast", "--fast-decode", *extra)
    assert fast.keys() == exact.keys() and fa["fast_decode"] == 1
    assert all(fast[i][0] == exact[i][0] for i in exact)  # labels
    changed = sum(fast[i][1] != exact[i][1] for i in exact)
    assert 0 < changed < len(exact), changed


def test_fast_decode_with_whole_image_decode_is_refused(images, tmp_path):
    for binary, args in (
        ("dtune-data", ["bench", images, "--no-output"]),
        ("dtune-train", ["--data", images, "--no-output", "--steps", 1]),
    ):
        r = tool([binary, *args, "--decode", "full", "--fast-decode"])
        assert r.returncode == 2 and "--fast-decode" in r.stderr and "--decode full" in r.stderr, r.stderr


def test_nvjpeg_decode_is_refused_cleanly_without_a_gpu(images, tmp_path):
    # On a machine with a CUDA device this is the GPU tests' business (tests/gpu/test_nvjpeg.cc).
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible: --decode nvjpeg runs here")
    for binary, args in (
        ("dtune-data", ["bench", images, "--no-output"]),
        (
            "dtune-train",
            ["--model", "resnet18", "--width", 8, "--image-size", 32, "--num-classes", 3]
            + ["--batch", 2, "--data", images, "--no-output", "--steps", 1],
        ),
    ):
        r = tool([binary, *args, "--decode", "nvjpeg"])
        assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
        lines = [line for line in r.stderr.splitlines() if "--decode nvjpeg" in line]
        assert lines and "no CUDA device" in lines[0] and "--decode roi" in lines[0], r.stderr
        assert "Traceback" not in r.stderr and "terminate called" not in r.stderr, r.stderr


def test_token_windows_once_per_epoch(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 40)  # 1800 bytes
    ok(tool(["dtune-data", "make", "tokens", "--out", tmp_path / "tok", "--input", text, "--shard-tokens", 500]))
    manifest = json.loads((tmp_path / "tok" / "dataset.json").read_text())
    assert manifest["kind"] == "tokens" and manifest["tokens"] == 1800 and len(manifest["objects"]) == 4
    head = (tmp_path / "tok" / "tokens-000000.bin").read_bytes()[:12]
    assert int.from_bytes(head[:4], "little") == 20240520 and int.from_bytes(head[8:12], "little") == 500
    ok(
        tool(
            [
                "dtune-data",
                "bench",
                tmp_path / "tok",
                "--context",
                16,
                "--batch",
                3,
                "--keep-last",
                "--dump-ids",
                tmp_path / "ids",
            ],
            np_=2,
        )
    )
    seen = [i for pairs in read_ids(tmp_path / "ids", 2) for e, i in pairs]
    # windows of 17 every 16 in shards of 500, 500, 500, 300 tokens: 31 + 31 + 31 + 18
    assert sorted(seen) == list(range(111))


def test_imagefolder_layout_is_read_with_sorted_class_labels(tmp_path):
    make_images(tmp_path / "folder", samples=12, layout="imagefolder")
    root = tmp_path / "folder"
    (root / "dataset.json").unlink()  # index it from the tree, as a user's folder
    # Folder names whose sorted order is not the order they were made in, one image a level
    # deeper (<class>/<...>/<image>.jpg) and a file that is no image: labels follow the names.
    for old, new in (("class-000000", "zebra"), ("class-000001", "apple"), ("class-000002", "mango")):
        (root / old).rename(root / new)
    (root / "mango" / "sub").mkdir()
    (root / "mango" / "img-000002.jpg").rename(root / "mango" / "sub" / "img-000002.jpg")
    (root / "apple" / "notes.txt").write_text("not an image")
    r = ok(tool(["dtune-data", "bench", root, "--batch", 4, "--image-size", 32]))
    assert "no dataset.json: indexed it now" in r.stdout and "imagefolder: 12 files" in r.stdout
    ok(tool(["dtune-data", "index", root]))
    manifest = json.loads((root / "dataset.json").read_text())
    assert manifest["format"] == "imagefolder" and manifest["num_classes"] == 3
    label_of = {"apple": 0, "mango": 1, "zebra": 2}
    keys = [manifest["objects"][obj][0] for obj, _, _, _ in manifest["samples"]]
    assert sorted(keys) == sorted(p.relative_to(root).as_posix() for p in root.rglob("*.jpg"))
    got = {key: label for key, (_, _, _, label) in zip(keys, manifest["samples"], strict=True)}
    assert got == {key: label_of[key.split("/")[0]] for key in keys}
    assert Counter(got.values()) == {0: 4, 1: 4, 2: 4}


def s3_dataset(s3_server, tmp_path, bucket, samples=48, shard=8):
    env = s3_server.subprocess_env()
    s3_server.make_bucket(bucket)
    make_images(s3_server.url(bucket, "ds"), samples=samples, shard=shard, env=env)
    return env, s3_server.url(bucket, "ds")


def test_second_epoch_comes_from_the_cache(s3_server, tmp_path):
    env, url = s3_dataset(s3_server, tmp_path, "cache-epochs")
    r = ok(
        tool(
            [
                "dtune-data",
                "bench",
                url,
                "--batch",
                4,
                "--workers",
                2,
                "--epochs",
                2,
                "--image-size",
                32,
                "--cache-dir",
                tmp_path / "cache",
                "--cache-block-mb",
                0.0625,
            ],
            env=env,
        )
    )
    e0, e1 = epochs_table(r.stdout)
    assert e0["fetched_mb"] > 0 and e0["bad"] == 0
    assert float(e1["hit"]) >= 99.0 and e1["fetched_mb"] == 0.0, r.stdout
    # The data went through the real server: the storage line counts signed requests.
    assert re.search(r"rank 0 storage: \d+ requests", r.stdout)


def test_eviction_keeps_the_cache_within_capacity(s3_server, tmp_path):
    env, url = s3_dataset(s3_server, tmp_path, "cache-evict")
    cap_mb = 0.0625  # two blocks
    total = sum(
        o["Size"] for o in s3_server.client.list_objects_v2(Bucket="cache-evict", Prefix="ds/shard")["Contents"]
    )
    assert total > 2 * cap_mb * 2**20
    r = ok(
        tool(
            [
                "dtune-data",
                "bench",
                url,
                "--batch",
                4,
                "--epochs",
                2,
                "--image-size",
                32,
                "--cache-dir",
                tmp_path / "cache",
                "--cache-block-mb",
                cap_mb / 2,
                "--cache-mb",
                cap_mb,
            ],
            env=env,
        )
    )
    blocks = [p for p in (tmp_path / "cache" / "blocks").iterdir() if ".tmp." not in p.name]
    assert sum(p.stat().st_size for p in blocks) <= cap_mb * 2**20
    e0, e1 = epochs_table(r.stdout)
    assert e1["fetched_mb"] > 0 and float(e1["hit"]) < 99  # the data is larger than the cache


def test_two_ranks_fill_the_cache_at_once_without_duplicates_or_partial_reads(s3_server, tmp_path):
    env, url = s3_dataset(s3_server, tmp_path, "cache-race", samples=64, shard=16)
    total = sum(o["Size"] for o in s3_server.client.list_objects_v2(Bucket="cache-race", Prefix="ds/shard")["Contents"])
    r = ok(
        tool(
            [
                "dtune-data",
                "bench",
                url,
                "--batch",
                4,
                "--workers",
                3,
                "--image-size",
                32,
                "--strict",
                "--debug-same-slice",
                "--cache-dir",
                tmp_path / "cache",
                "--cache-block-mb",
                0.0625,
            ],
            np_=2,
            env=env,
        )
    )
    (e0,) = epochs_table(r.stdout)
    assert e0["samples"] == 2 * 64 and e0["bad"] == 0  # --strict: a partial block would have stopped it
    # Both ranks read everything, yet the blocks came from S3 once: fetched bytes = the shards' size
    # (the last block of each shard is short).
    assert e0["fetched_mb"] == pytest.approx(total / 1e6, abs=0.006), (e0, total)


def corrupt_copy(src, dst):
    """A copy of `src` where sample 5 is no JPEG at all and the last shard is cut in half; returns
    the manifest and the new length of the last shard."""
    import shutil

    shutil.copytree(src, dst)
    manifest = json.loads((dst / "dataset.json").read_text())
    obj, off, size, _ = manifest["samples"][5]
    shard = dst / manifest["objects"][obj][0]
    data = bytearray(shard.read_bytes())
    data[off + 200 : off + size - 2] = b"\x00" * (size - 202)  # keep the markers, wipe the scan
    data[off : off + 2] = b"XX"  # and make it no JPEG at all
    shard.write_bytes(bytes(data))
    last = dst / manifest["objects"][-1][0]
    cut = last.stat().st_size // 2
    last.write_bytes(last.read_bytes()[:cut])  # a truncated shard
    return manifest, cut


def test_corrupt_and_truncated_samples_are_skipped_and_counted(images, tmp_path):
    manifest, cut = corrupt_copy(images, tmp_path / "bad")
    last = len(manifest["objects"]) - 1
    assert manifest["samples"][5][0] != last  # the undecodable sample is whole
    # Exactly the samples that end past the cut read short (the one across it included); the ones
    # before it decode. So: 1 undecodable, `short` truncated, nothing else bad.
    short = sum(1 for obj, off, size, _ in manifest["samples"] if obj == last and off + size > cut)
    in_last = sum(1 for s in manifest["samples"] if s[0] == last)
    assert 0 < short < in_last  # the cut falls inside the shard: some of it survives
    r = ok(tool(["dtune-data", "bench", tmp_path / "bad", "--batch", 4, "--keep-last", "--image-size", 32]))
    (e0,) = epochs_table(r.stdout)
    assert (e0["undecodable"], e0["truncated"], e0["bad"]) == (1, short, 1 + short), r.stdout
    assert e0["samples"] == 60 - 1 - short, r.stdout
    strict = tool(["dtune-data", "bench", tmp_path / "bad", "--batch", 4, "--image-size", 32, "--strict"])
    assert strict.returncode == 1 and "--strict" in strict.stderr


@pytest.mark.parametrize("case", ["missing-dir", "empty-dir", "missing-object", "missing-bucket"])
def test_missing_data_is_a_clear_error_before_reading(s3_server, images, tmp_path, case):
    env = None
    if case == "missing-dir":
        url = tmp_path / "nowhere"
    elif case == "empty-dir":
        (tmp_path / "empty").mkdir()
        url = tmp_path / "empty"
    elif case == "missing-object":
        import shutil

        shutil.copytree(images, tmp_path / "gone")
        (tmp_path / "gone" / "shard-000001.tar").unlink()
        url = tmp_path / "gone"
    else:
        env, url = s3_server.subprocess_env(), s3_server.url("no-such-bucket", "ds")
    for args in (
        ["dtune-data", "bench", url, "--image-size", 32],
        [
            "dtune-train",
            "--model",
            "resnet18",
            "--width",
            8,
            "--image-size",
            32,
            "--num-classes",
            3,
            "--batch",
            2,
            "--steps",
            1,
            "--data",
            url,
            "--no-output",
        ],
    ):
        r = tool(args, env=env)
        errors = [line for line in r.stderr.splitlines() if "error" in line]
        assert r.returncode == 2 and len(errors) == 1, r.stdout + r.stderr
        assert str(url) in errors[0] or "no-such-bucket" in errors[0], errors[0]


def test_train_learns_from_shards_and_records_loading(tmp_path):
    make_images(tmp_path / "ds", samples=96, shard=32)
    out = tmp_path / "t.h5"
    r = ok(
        tool(
            [
                "dtune-train",
                "--model",
                "resnet18",
                "--width",
                8,
                "--image-size",
                32,
                "--num-classes",
                3,
                "--batch",
                16,
                "--steps",
                24,
                "--warmup-steps",
                0,
                "--lr",
                0.05,
                "--threads",
                1,
                "--data",
                tmp_path / "ds",
                "--workers",
                2,
                "--cache-dir",
                tmp_path / "cache",
                "--output",
                out,
            ],
            timeout=600,
        )
    )
    assert "# data: webdataset: 3 shards, 96 images, 3 classes" in r.stdout
    with h5py.File(out) as f:
        (g,) = f["runs"].values()
        a = g.attrs
        assert a["data"] == str(tmp_path / "ds") and a["workers"] == 2
        assert a["decode"] == "roi" and a["fast_decode"] == 0 and a["data_coef_bytes"] > 0
        assert a["data_samples"] >= 24 * 16 and a["data_bad_samples"] == 0 and a["data_bytes"] > 0
        assert a["cache_hits"] + a["cache_misses"] > 0 and a["cache_misses"] > 0
        loss = g["loss"][:, 0]
    # ln 3 = 1.10 at chance; the classes are learnable: the last steps are clearly below it.
    assert loss[-4:].mean() < 0.85 * loss[:2].mean(), loss


def test_train_on_token_shards(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("hello world, dtune loads tokens. " * 60)
    ok(tool(["dtune-data", "make", "tokens", "--out", tmp_path / "tok", "--input", text]))
    r = ok(
        tool(
            [
                "dtune-train",
                "--model",
                "gpt2-tiny",
                "--context",
                16,
                "--vocab",
                256,
                "--batch",
                4,
                "--steps",
                3,
                "--threads",
                1,
                "--data",
                tmp_path / "tok",
                "--no-output",
            ],
            np_=2,
        )
    )
    assert "# data: tokens: 1 shards" in r.stdout


def test_report_draws_the_data_stall_against_workers(tmp_path):
    from dtune_report.report import build_report

    make_images(tmp_path / "ds", samples=64, shard=32)
    files = []
    for w in (0, 2):
        out = tmp_path / f"w{w}.h5"
        ok(
            tool(
                [
                    "dtune-train",
                    "--model",
                    "resnet18",
                    "--width",
                    8,
                    "--image-size",
                    32,
                    "--num-classes",
                    3,
                    "--batch",
                    8,
                    "--steps",
                    3,
                    "--threads",
                    1,
                    "--data",
                    tmp_path / "ds",
                    "--workers",
                    w,
                    "--output",
                    out,
                ]
            )
        )
        files.append(out)
    made = build_report(files, tmp_path / "report")
    assert "data_workers" in made["figures"] and Path(made["figures"]["data_workers"]).stat().st_size > 1000
    md = (tmp_path / "report" / "report.md").read_text()
    assert "--workers" in md and f"--data {tmp_path / 'ds'}" in md
