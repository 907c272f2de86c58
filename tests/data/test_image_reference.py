# dtune's JPEG decoding and training transform against the Python stack it replaces: decoded
# pixels against Pillow's Image.open(...).convert("RGB"), crop + bilinear resize + flip + normalise
# against torchvision's F.resized_crop / to_tensor / normalize on the PIL image (both bit-identical),
# and the synthetic images against Pillow's reader. Drives dtune_image_tool from the build
# (DTUNE_BIN_DIR). torch and torchvision are pinned in requirements.txt: without them the
# torchvision cases fail, naming what is missing, and the Pillow-only cases still run.
import subprocess

import numpy as np
import pytest
from PIL import Image

from conftest import bin_dir, require

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def tool_path():
    exe = bin_dir() / "dtune_image_tool"
    if not exe.exists():
        pytest.fail(f"{exe} does not exist: build the dtune_image_tool target first", pytrace=False)
    return exe


def run_tool(*args, check=True):
    proc = subprocess.run([str(tool_path()), *map(str, args)], capture_output=True, text=True, timeout=120)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def photo_like(width, height, seed):
    """A smooth colour field with edges and mild noise, like a downscaled photograph."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    img = np.empty((height, width, 3))
    for c in range(3):
        fx, fy, ph = rng.uniform(0.005, 0.05), rng.uniform(0.005, 0.05), rng.uniform(0, 6.3)
        img[..., c] = 128 + 90 * np.sin(fx * x + ph) * np.cos(fy * y)
    img[(x - width / 3) ** 2 + (y - height / 2) ** 2 < (min(width, height) / 5) ** 2] = (230, 40, 60)
    img += rng.normal(0, 4, img.shape)
    return np.clip(img + 0.5, 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    d = tmp_path_factory.mktemp("jpegs")
    files = {}
    for name, (w, h, label) in {
        "synth_500x375": (500, 375, 1),
        "synth_224": (224, 224, 4),
        "synth_333x517": (333, 517, 7),
    }.items():
        run_tool(
            "synth", d / f"{name}.jpg", "--width", w, "--height", h, "--label", label, "--classes", 10, "--seed", 11
        )
        files[name] = d / f"{name}.jpg"
    pil_variants = {
        "pil_420_640x480": ((640, 480), dict(quality=90, subsampling=2)),
        "pil_444_333x517": ((333, 517), dict(quality=95, subsampling=0)),
        "pil_422_1024x768": ((1024, 768), dict(quality=85, subsampling=1)),
        "pil_progressive_500x375": ((500, 375), dict(quality=90, progressive=True)),
        "pil_odd_1x1": ((1, 1), dict(quality=90)),
        "pil_odd_17x9": ((17, 9), dict(quality=75)),
    }
    for i, (name, ((w, h), kwargs)) in enumerate(pil_variants.items()):
        Image.fromarray(photo_like(w, h, i)).save(d / f"{name}.jpg", **kwargs)
        files[name] = d / f"{name}.jpg"
    Image.fromarray(photo_like(333, 517, 99)).convert("L").save(d / "pil_gray_333x517.jpg", quality=90)
    files["pil_gray_333x517"] = d / "pil_gray_333x517.jpg"
    return files


def decode(path, out_dir):
    out = out_dir / (path.stem + ".rgb")
    w, h = map(int, run_tool("decode", path, out).stdout.split())
    return np.fromfile(out, dtype=np.uint8).reshape(h, w, 3)


@pytest.mark.parametrize(
    "name",
    [
        "synth_500x375",
        "synth_224",
        "synth_333x517",
        "pil_420_640x480",
        "pil_444_333x517",
        "pil_422_1024x768",
        "pil_progressive_500x375",
        "pil_odd_1x1",
        "pil_odd_17x9",
        "pil_gray_333x517",
    ],
)
def test_decode_equals_pillow(jpegs, tmp_path, name):
    ours = decode(jpegs[name], tmp_path)
    ref = np.asarray(Image.open(jpegs[name]).convert("RGB"))
    assert ours.shape == ref.shape
    # Both are libjpeg-turbo with the accurate integer IDCT and fancy upsampling: bit-identical.
    np.testing.assert_array_equal(ours, ref)


def reference_transform(path, box, size, flip):
    F = require("torchvision.transforms.functional")
    InterpolationMode = require("torchvision.transforms").InterpolationMode
    top, left, h, w = box
    img = F.resized_crop(Image.open(path).convert("RGB"), top, left, h, w, list(size), InterpolationMode.BILINEAR)
    if flip:
        img = F.hflip(img)
    return F.normalize(F.to_tensor(img), MEAN, STD).numpy()


TRANSFORM_CASES = [
    # (image, (top, left, height, width), (out_h, out_w), flip)
    ("synth_500x375", (0, 0, 375, 500), (224, 224), False),  # whole image, non-square
    ("synth_500x375", (40, 60, 300, 300), (224, 224), True),  # mild downscale, flip
    ("synth_500x375", (10, 20, 100, 120), (224, 224), False),  # upscale ~2x
    ("synth_500x375", (300, 450, 75, 50), (224, 224), True),  # upscale ~4x, touching edges
    ("pil_422_1024x768", (0, 0, 768, 1024), (224, 224), False),  # downscale ~3.4-4.6x
    ("pil_422_1024x768", (60, 24, 700, 1000), (160, 200), True),  # downscale ~5x, non-square out
    ("pil_420_640x480", (240, 320, 240, 320), (112, 64), False),  # bottom-right quarter
    ("pil_444_333x517", (0, 0, 517, 333), (517, 333), False),  # identity: no resampling
    ("pil_444_333x517", (7, 5, 224, 300), (224, 150), True),  # vertical identity, 2x horizontal
    ("pil_gray_333x517", (3, 1, 511, 331), (97, 301), False),  # odd sizes, mixed scales
    ("pil_odd_17x9", (0, 0, 9, 17), (224, 224), False),  # tiny source
]


@pytest.mark.parametrize("decode", ["full", "roi"])
@pytest.mark.parametrize("name,box,size,flip", TRANSFORM_CASES)
def test_transform_matches_torchvision(jpegs, tmp_path, name, box, size, flip, decode):
    out = tmp_path / "out.f32"
    flags = ["--flip"] if flip else []
    run_tool("transform", jpegs[name], out, "--box", *box, "--size", *size, *flags, "--decode", decode)
    ours = np.fromfile(out, dtype=np.float32).reshape(3, *size)
    ref = reference_transform(jpegs[name], box, size, flip)
    # Same fixed-point arithmetic as Pillow's resampler and the same float32 to_tensor/normalize
    # steps: bit-identical (measured: 0 differing values in every case), so any difference is a bug.
    diff = np.abs(ours - ref)
    assert np.array_equal(ours, ref), f"{np.count_nonzero(diff)} values differ, max {diff.max()}"


def region_fields(path, out_dir, box, fast=None):
    """dtune's region decoder: the decoded region's pixels, then the tool's fields (W H top left h w
    d coef full_coef: the box inside the region, the DCT scale, the coefficient bytes)."""
    out = out_dir / (path.stem + ".region.rgb")
    extra = ["--fast", *fast] if fast else []
    fields = list(map(int, run_tool("decode", path, out, "--region", *box, *extra).stdout.split()))
    w, h = fields[:2]
    return np.fromfile(out, dtype=np.uint8).reshape(h, w, 3), fields


def region(path, out_dir, box, fast=None):
    """dtune's region decoder: the box's pixels and the DCT scale."""
    pixels, (_, _, top, left, bh, bw, d, *_) = region_fields(path, out_dir, box, fast)
    return pixels[top : top + bh, left : left + bw], d


def edge_boxes(w, h):
    """Boxes touching each edge and corner, on and off the 16-pixel grid, and the whole image."""
    bw, bh = max(1, w // 3), max(1, h // 3)
    return [
        (0, 0, h, w),
        (0, 0, bh, bw),
        (h - bh, w - bw, bh, bw),
        (0, w - bw, bh, bw),
        (h - bh, 0, bh, bw),
        (min(16, h - 1), min(16, w - 1), max(1, min(bh, h - 16)), max(1, min(bw, w - 16))),
        (h // 2, min(17, w - 1), h - h // 2, max(1, min(bw, w - 17))),
    ]


@pytest.mark.parametrize(
    "name",
    [
        "synth_333x517",
        "pil_420_640x480",
        "pil_444_333x517",
        "pil_422_1024x768",
        "pil_progressive_500x375",
        "pil_odd_17x9",
        "pil_gray_333x517",
    ],
)
def test_region_decode_equals_pillow_inside_the_box(jpegs, tmp_path, name):
    ref = np.asarray(Image.open(jpegs[name]).convert("RGB"))
    h, w, _ = ref.shape
    for top, left, bh, bw in edge_boxes(w, h):
        ours, d = region(jpegs[name], tmp_path, (top, left, bh, bw))
        assert d == 1
        np.testing.assert_array_equal(ours, ref[top : top + bh, left : left + bw], err_msg=str((top, left, bh, bw)))


@pytest.mark.parametrize(
    "name,box,fast,scale",
    [
        ("pil_422_1024x768", (0, 0, 768, 1024), 224, 2),
        ("pil_420_640x480", (16, 8, 464, 630), 224, 2),
        ("pil_422_1024x768", (100, 50, 600, 960), 224, 2),
        # Odd right and bottom edges (205, 303: a box one pixel narrow if rounded down), and the
        # image's own right and bottom edges, odd (333, 517) and even, at scales 2, 4 and 8.
        ("pil_444_333x517", (3, 5, 300, 200), 40, 4),
        ("pil_444_333x517", (1, 1, 516, 332), 100, 2),
        ("pil_420_640x480", (1, 3, 477, 637), 100, 4),
        ("pil_422_1024x768", (7, 9, 761, 1015), 90, 8),
    ],
)
def test_fast_region_decode_equals_pillow_draft_mode(jpegs, tmp_path, name, box, fast, scale):
    # --fast-decode is Pillow's draft mode on the region: the same DCT-scaled pixels, and the box
    # in the scaled image from floor(left / d) to ceil(right / d) (libjpeg scales a side to
    # ceil(n / d)), whatever the edges' parity.
    ours, d = region(jpegs[name], tmp_path, box, fast=(fast, fast))
    top, left, bh, bw = box
    assert d == scale and ours.shape[:2] == (-(-(top + bh) // d) - top // d, -(-(left + bw) // d) - left // d)
    with Image.open(jpegs[name]) as im:
        w, h = im.size
        # Pillow picks the largest scale s with size // requested >= s: W // d asks for scale d
        # (ceil(W / d) would give 2 for a 333-pixel side at d = 4).
        im.draft("RGB", (w // d, h // d))
        draft = np.asarray(im.convert("RGB"))
    assert draft.shape[:2] == (-(-h // d), -(-w // d)), draft.shape
    np.testing.assert_array_equal(
        ours, draft[top // d : top // d + ours.shape[0], left // d : left // d + ours.shape[1]]
    )


# The coefficient bytes (64 two-byte coefficients per 8x8 block) the region decoder
# inverse-transforms, counted by hand: the box plus kRoiMargin (2) pixels, its left edge aligned down
# to the iMCU's width (jpeg_crop_scanline), its rows from the iMCU row holding the first to the one
# holding the last. A component with sampling factors h x v of the frame's largest hmax x vmax has
# blocks of 8 * hmax / h pixels across and 8 * vmax / v down (chroma of 4:2:0: 16 x 16 pixels).
# full: every block of every component (a whole decode's count).
@pytest.mark.parametrize(
    "name,box,coef_blocks,full_blocks",
    [
        # 4:2:0 640x480, iMCU 16x16: columns 98..202 from 96, rows 0..18 -> iMCU rows 0-1.
        # luma (26 - 12) x 4 = 56; each chroma (13 - 6) x 2 = 14: 84. full 80x60 + 2 x 40x30.
        ("pil_420_640x480", (0, 100, 16, 100), 56 + 2 * 14, 4800 + 2 * 1200),
        # 4:2:2 1024x768, iMCU 16x8: columns 98..202 from 96, rows 98..152 -> block rows 12-18.
        # luma (26 - 12) x 7 = 98; each chroma (13 - 6) x 7 = 49: 196. full 128x96 + 2 x 64x96.
        ("pil_422_1024x768", (100, 100, 50, 100), 98 + 2 * 49, 12288 + 2 * 6144),
        # 4:4:4 333x517, iMCU 8x8: columns 28..82 from 24, rows 18..62 -> block rows 2-7.
        # each of three (11 - 3) x 6 = 48: 144. full 3 x 42x65.
        ("pil_444_333x517", (20, 30, 40, 50), 3 * 48, 3 * 42 * 65),
    ],
)
def test_region_coefficient_bytes_are_the_blocks_around_the_box(jpegs, tmp_path, name, box, coef_blocks, full_blocks):
    _, fields = region_fields(jpegs[name], tmp_path, box)
    coef, full = fields[7:9]
    assert (coef, full) == (coef_blocks * 128, full_blocks * 128), (coef // 128, full // 128)


@pytest.mark.parametrize("make", ["truncated", "corrupt_header", "garbage", "empty", "png"])
def test_bad_images_exit_2_with_one_line(jpegs, tmp_path, make):
    good = jpegs["synth_500x375"].read_bytes()
    bad = tmp_path / f"{make}.jpg"
    if make == "truncated":
        bad.write_bytes(good[: len(good) // 2])
    elif make == "corrupt_header":
        bad.write_bytes(good[:2] + b"\xff\xc0\x00\x03" + bytes(200))
    elif make == "garbage":
        bad.write_bytes(np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8).tobytes())
    elif make == "empty":
        bad.write_bytes(b"")
    else:
        Image.fromarray(photo_like(32, 32, 0)).save(bad, format="PNG")
    for cmd in (
        ["decode", bad, tmp_path / "x.rgb"],
        ["transform", bad, tmp_path / "x.f32", "--box", 0, 0, 8, 8, "--size", 4, 4],
    ):
        proc = run_tool(*cmd, check=False)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("dtune_image_tool: error: bad image"), lines


def test_usage_errors_exit_2(jpegs, tmp_path):
    for args in (
        ["transform", jpegs["synth_224"], tmp_path / "x", "--box", 0, 0, 300, 10, "--size", 4, 4],
        ["decode", tmp_path / "missing.jpg", tmp_path / "x"],
        ["synth", tmp_path / "x.jpg", "--label", 10, "--classes", 10],
        ["transform", jpegs["synth_224"], tmp_path / "x", "--box", 0, 0],
    ):
        proc = run_tool(*args, check=False)
        assert proc.returncode == 2, (args, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("dtune_image_tool: error:"), lines


def test_synthetic_jpegs_have_class_structure(tmp_path):
    classes = 5
    means, sizes = {}, []
    for label in range(classes):
        per_class = []
        for seed in range(4):
            p = tmp_path / f"c{label}_s{seed}.jpg"
            run_tool(
                "synth",
                p,
                "--width",
                224,
                "--height",
                224,
                "--label",
                label,
                "--classes",
                classes,
                "--seed",
                seed,
                "--quality",
                90,
            )
            with Image.open(p) as im:
                assert im.format == "JPEG" and im.size == (224, 224) and im.mode == "RGB"
                per_class.append(np.asarray(im, dtype=np.float64).reshape(-1, 3).mean(0))
            sizes.append(p.stat().st_size)
        means[label] = np.array(per_class)
    # Photo-like compressibility: neither a flat card nor noise.
    assert 10_000 <= min(sizes) and max(sizes) <= 40_000, sizes
    # The mean colour separates classes: each sample is nearer its own class centroid than any
    # other class's.
    centroids = np.array([means[c].mean(0) for c in range(classes)])
    for c in range(classes):
        for m in means[c]:
            assert np.argmin(np.linalg.norm(centroids - m, axis=1)) == c


def test_synthetic_deterministic_and_sized(tmp_path):
    a, b, c = tmp_path / "a.jpg", tmp_path / "b.jpg", tmp_path / "c.jpg"
    for path, seed in ((a, 3), (b, 3), (c, 4)):
        run_tool("synth", path, "--width", 500, "--height", 375, "--label", 2, "--seed", seed)
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    assert 30_000 <= a.stat().st_size <= 100_000, a.stat().st_size
