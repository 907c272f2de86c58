"""A new user's path, from the README alone: the blocks of its "Three everyday tasks" section are
pasted as they are into a clean copy of the checkout (every tracked and unignored file, committed
into a fresh git repository, with this checkout's build/ and .venv linked in), and must work:

- own images: 30 JPEG and PNG files in class folders (plus a text file, a broken JPEG and a hidden
  file, which must be counted and named) converted to shards, then benchmarked with 1 and 2 loader
  workers, each run's results file read back (the `data` layout of results/SCHEMA.md); a --batch
  larger than a rank's samples is refused (exit 2) instead of reporting 0 samples/s;
- the bucket-size sweep planned, run, merged and reported; a copy with a point that breaks
  --first-bucket-mb <= --bucket-mb is refused before anything runs, naming the point; a point that
  fails while running prints its first error line and its log's path;
- two training runs compared.

Then `git status --ignored` in the copy must show nothing outside results/ (and the links): no
README command writes into a source folder. Also: dtune-data as a sweep binary (run and merge),
and each dtune-train cross-flag rule's broken example (tests/sweeps/test_rules.py) refused by the
binary itself, as `dtune sweep plan` refuses it. The doc/ pages' blocks: test_doc_pages.py."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from PIL import Image

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "sweeps")]
from test_rules import CASES  # noqa: E402

from conftest import bin_dir, mpirun_prefix  # noqa: E402
from side_by_side import outcome, side_by_side  # noqa: E402


def readme_blocks() -> list[list[str]]:
    """The fenced code blocks of the README's "Three everyday tasks" section, as command lines."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Three everyday tasks", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```\n(.*?)^```", section, flags=re.M | re.S)
    return [[ln for ln in b.splitlines() if ln.strip()] for b in blocks]


def make_photos(root: Path) -> None:
    """30 images in 3 class folders (6 JPEG and 4 PNG each: RGB, RGBA, palette and 16-bit gray
    among them), and 3 files that must be skipped and named."""
    rng = np.random.default_rng(0)
    for c, name in enumerate(["cat", "dog", "bird"]):
        d = root / name
        d.mkdir(parents=True)
        for i in range(10):
            pixels = rng.integers(0, 256, (48 + 8 * i, 64, 3), dtype=np.uint8)
            pixels[..., c] = 255  # a class-coloured channel
            img = Image.fromarray(pixels)
            if i < 6:
                img.save(d / f"img{i}.jpg", quality=85)
            elif i == 6:
                img.convert("RGBA").save(d / f"img{i}.png")
            elif i == 7:
                img.convert("P").save(d / f"img{i}.png")
            elif i == 8:
                Image.fromarray((pixels[..., 0].astype(np.uint16) * 257)).save(d / f"img{i}.png")
            else:
                img.save(d / f"img{i}.PNG")
    (root / "cat" / "notes.txt").write_text("not an image\n")
    (root / "dog" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated")
    (root / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    return make_clone(tmp_path_factory.mktemp("newuser"))


def make_clone(base: Path) -> tuple[Path, Path]:
    """A clean copy of the checkout as a git repository of its own, and a home with ~/my-photos."""
    dst = base / "dtune"
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for f in filter(None, files):
        src = REPO / f.decode()
        if src.is_file() and not src.is_symlink():
            (dst / f.decode()).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / f.decode())
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q"], cwd=dst, check=True)
    subprocess.run([*git, "add", "-A"], cwd=dst, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "clean"], cwd=dst, check=True)
    (dst / ".venv").symlink_to((REPO / ".venv").resolve())
    (dst / "build").symlink_to(bin_dir().resolve().parent)
    home = base / "home"
    make_photos(home / "my-photos")
    return dst, home


def sh(clone, cmd: str, timeout: float = 600) -> subprocess.CompletedProcess:
    dst, home = clone
    env = dict(os.environ, HOME=str(home), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.pop("DTUNE_BIN_DIR", None)  # the copy's own build/bin (a link to this checkout's)
    env.pop("PYTHONPATH", None)
    return subprocess.run(["bash", "-c", cmd], cwd=dst, env=env, capture_output=True, text=True, timeout=timeout)


def run_block(clone, block: list[str]) -> list[subprocess.CompletedProcess]:
    out = []
    for cmd in block:
        r = sh(clone, cmd)
        assert r.returncode == 0, f"{cmd}\n{r.stdout}\n{r.stderr}"
        out.append(r)
    return out


def data_runs(dst: Path) -> list[dict]:
    """Every `data` run group of the results files under results/ (not the sweeps')."""
    runs = []
    for path in sorted((dst / "results").glob("dtune-data-*.h5")):
        with h5py.File(path) as f:
            assert f.attrs["tool"] == "dtune-data" and f.attrs["status"] == "complete"
            assert "bench" in f["provenance"].attrs["command_line"]
            for g in f["runs"].values():
                runs.append({**dict(g.attrs), "epoch_s": g["epoch_s"][()], "samples": g["samples"][()]})
    return runs


def test_own_images_converted_and_benchmarked_with_1_and_2_workers(clone):
    dst, home = clone
    blocks = readme_blocks()
    assert len(blocks) == 3, blocks
    convert, *benches = run_block(clone, blocks[0])
    out = convert.stdout
    assert "# converted 30 images: 18 JPEG kept as they are, 12 transcoded to JPEG at quality 90" in out, out
    assert "# skipped 3 files (" in out, out
    assert "#   .DS_Store: hidden file" in out, out
    assert "#   cat/notes.txt: not an image (.txt)" in out, out
    assert re.search(r"#   dog/broken\.jpg: undecodable: ", out), out
    data = dst / "results" / "data" / "my-photos"
    assert (data / "classes.txt").read_text() == "bird\ncat\ndog\n"
    import json

    manifest = json.loads((data / "dataset.json").read_text())
    assert manifest["num_classes"] == 3 and len(manifest["samples"]) == 30, manifest.keys()
    runs = data_runs(dst)
    assert sorted(r["workers"] for r in runs) == [1, 2]
    for r in runs:
        # 30 samples, --batch 8, one rank: 3 full batches (the last 6 samples dropped, drop_last)
        assert r["benchmark"] == "data" and r["status"] == "ok" and r["format"] == "webdataset"
        assert (r["data_batches"], r["data_samples"], r["data_bad_samples"]) == (3, 24, 0)
        assert r["epoch_s"].shape == (1, 1) and r["samples"][0, 0] == 24
        assert r["samples_per_s"] > 0
    for b in benches:
        assert re.search(r"^  0 +3 +24 ", b.stdout, flags=re.M), b.stdout


def test_an_epoch_without_a_batch_is_refused(clone):
    r = sh(clone, "build/bin/dtune-data bench results/data/my-photos --batch 32 --no-output")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "fewer than --batch 32, so an epoch would yield no batch; give --batch 30 or less" in r.stderr
    mpirun = " ".join(mpirun_prefix(2))
    two = sh(clone, f"{mpirun} build/bin/dtune-data bench results/data/my-photos --batch 16 --no-output")
    assert two.returncode == 2 and "15 per rank with 2 ranks" in two.stderr, two.stderr


def test_index_names_the_files_it_leaves_out(clone, tmp_path):
    # The loader reads JPEGs as they are: indexing the photos folder itself keeps the 18 good JPEGs
    # (and the broken one, which the loader will count as undecodable), and names the rest.
    _, home = clone
    shutil.copytree(home / "my-photos", tmp_path / "photos")
    r = subprocess.run(
        [str(bin_dir() / "dtune-data"), "index", str(tmp_path / "photos")], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert "imagefolder: 19 files" in r.stdout, r.stdout
    left = sorted(ln.strip("# ").strip() for ln in r.stdout.splitlines() if ln.startswith("#   "))
    assert "# left out 14 files" in r.stdout, r.stdout
    assert left == sorted(
        [".DS_Store", "cat/notes.txt"]
        + [
            f"{c}/img{i}.{e}"
            for c in ("bird", "cat", "dog")
            for i, e in ((6, "png"), (7, "png"), (8, "png"), (9, "PNG"))
        ]
    ), left


def test_bucket_size_sweep_and_a_bad_point_explained_before_running(clone, tmp_path):
    dst, _ = clone
    plan, run, merge, report = run_block(clone, readme_blocks()[1])
    assert "sweeps/bucket-size.yaml: 3 points" in plan.stdout, plan.stdout
    assert run.stdout.count(" ok ") == 3, run.stdout
    assert "# merged 3 runs" in merge.stdout
    assert (dst / "results" / "report-buckets" / "report.html").is_file(), report.stdout
    bad = dst / "results" / "bad-buckets.yaml"
    bad.write_text(
        (dst / "sweeps" / "bucket-size.yaml")
        .read_text()
        .replace("  - {--bucket-mb: [0.25, 1, 25], --first-bucket-mb: [0.25, 1, 1]}", "  - {--bucket-mb: [0.5, 1, 25]}")
    )
    for cmd in ("plan", "run"):
        r = sh(clone, f"scripts/dtune sweep {cmd} results/bad-buckets.yaml")
        assert r.returncode == 2, r.stdout + r.stderr
        lines = r.stderr.splitlines()
        assert "1 of 3 points of sweep 'bucket-size' break dtune-train's cross-flag rules" in lines[0]
        assert re.fullmatch(
            r"  [0-9a-f]{12}  --bucket-mb 0\.5: --first-bucket-mb \(default 1\) must be at most --bucket-mb \(0\.5\)",
            lines[1],
        ), lines
    assert not (dst / "results" / "sweeps" / "bad-buckets").exists()


def test_a_point_that_fails_running_prints_its_error_and_log(clone):
    dst, _ = clone
    f = dst / "results" / "fails.yaml"
    f.write_text("binary: dtune-train\nargs: [--model, gpt2-tiny, --steps, 1, --data, /no/such/dataset]\n")
    r = sh(clone, "scripts/dtune sweep run results/fails.yaml")
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    i = next(i for i, ln in enumerate(lines) if " failed " in ln)
    assert "error" in lines[i + 1] and "/no/such/dataset" in lines[i + 1], lines
    log = lines[i + 2].strip().removeprefix("log: ")
    assert log.startswith("results/sweeps/fails/points/") and (dst / log).is_file(), lines


def test_compare_two_runs(clone):
    *_, compare = run_block(clone, readme_blocks()[2])
    # one configuration found in both, 20 measured steps on each side
    assert "A median" in compare.stdout and re.search(r"\b20\+20\b", compare.stdout), compare.stdout


def test_dtune_data_as_a_sweep_binary(clone):
    dst, _ = clone
    f = dst / "results" / "loader.yaml"
    f.write_text(
        "binary: dtune-data\nargs: [bench, results/data/my-photos, --batch, 4, --image-size, 32]\n"
        "axes: {--workers: [0, 2]}\nsteps: 2\nlaunch: {ranks: 2}\n"
    )
    for cmd in ("run", "merge"):
        r = sh(clone, f"scripts/dtune sweep {cmd} results/loader.yaml")
        assert r.returncode == 0, r.stdout + r.stderr
    with h5py.File(dst / "results" / "sweeps" / "loader" / "merged.h5") as m:
        runs = list(m["runs"].values())
        assert sorted(g.attrs["workers"] for g in runs) == [0, 2]
        # 2 ranks x --max-batches 2 x --batch 4
        assert all(g.attrs["benchmark"] == "data" and g.attrs["data_samples"] == 16 for g in runs)


def test_readme_commands_write_nothing_in_source_folders(clone):
    dst, _ = clone
    # the tests above ran every command of the section; what they left must all be under results/
    status = subprocess.run(
        ["git", "status", "--porcelain", "--ignored", "--untracked-files=all"],
        cwd=dst,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    stray = [ln for ln in status if not ln[3:].startswith(("results/", "build", ".venv"))]
    assert not stray, stray


TRAIN_CASES = [c for c in CASES if c[0] == "dtune-train"]


@pytest.fixture(scope="module")
def refusals(tmp_path_factory):
    """Every dtune-train case launched before the first test reads it, four at a time
    (tests/side_by_side.py): {case: (command, completed process)}."""
    base = tmp_path_factory.mktemp("refusals")

    def launch(case):
        _, ranks, broken, *_ = case
        cmd = [*mpirun_prefix(ranks), str(bin_dir() / "dtune-train"), "--model", "gpt2-tiny", "--steps", "1"]
        cmd += [*broken.split(), "--output", str(base / f"x{TRAIN_CASES.index(case)}.h5")]
        return cmd, subprocess.run(cmd, capture_output=True, text=True, timeout=300)

    return side_by_side(launch, TRAIN_CASES)


@pytest.mark.parametrize("binary,ranks,broken,words,fixed", TRAIN_CASES)
def test_the_binary_refuses_what_plan_refuses(refusals, binary, ranks, broken, words, fixed):
    cmd, r = outcome(refusals, (binary, ranks, broken, words, fixed))
    assert r.returncode == 2, f"{cmd}\n{r.stdout}\n{r.stderr}"
