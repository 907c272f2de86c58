#!/usr/bin/env python3
"""What --fast-decode changes: for JPEGs and RandomResizedCrop boxes (torchvision's parameters,
seeded), the 224x224 crop through the exact region decode against the DCT-scaled one, as 8-bit
levels (the normalised floats mapped back through each channel's std). Prints, per image, the share
of boxes that were scaled and the mean and largest absolute difference over the scaled ones, then
over all; the same question Pillow's draft-mode users ask. Drives dtune_image_tool from the build.

  .venv/bin/python benchmarks/data/fast_decode_diff.py [JPEG ...] [--boxes 40] [--seed 0]

Without JPEG arguments it measures a real photograph (matplotlib's sample grace_hopper.jpg, 512x600)
at its own size and scaled up 2x (re-encoded at quality 90), and synthetic 1024x768 and 500x375
images.
"""

import argparse
import math
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("DTUNE_BIN_DIR", REPO / "build" / "bin"))
STD = np.array([0.229, 0.224, 0.225], dtype=np.float64).reshape(3, 1, 1)
SIZE = 224


def box_params(width, height, rng, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """torchvision's RandomResizedCrop.get_params (top, left, h, w)."""
    area = width * height
    for _ in range(10):
        target = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(math.log(ratio[0]), math.log(ratio[1])))
        w, h = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, height - h), rng.randint(0, width - w), h, w
    return 0, 0, height, width


def transform(path, box, out, fast):
    args = [str(BIN / "dtune_image_tool"), "transform", str(path), str(out), "--box", *map(str, box)]
    args += ["--size", str(SIZE), str(SIZE), "--decode", "roi"] + (["--fast"] if fast else [])
    subprocess.run(args, check=True, capture_output=True)
    return np.fromfile(out, dtype=np.float32).reshape(3, SIZE, SIZE).astype(np.float64)


def default_images(tmp):
    photo = REPO / ".venv/lib/python3.11/site-packages/matplotlib/mpl-data/sample_data/grace_hopper.jpg"
    images = []
    if photo.exists():
        from PIL import Image

        big = tmp / "grace_hopper_2x.jpg"
        with Image.open(photo) as im:
            im.convert("RGB").resize((im.width * 2, im.height * 2), Image.LANCZOS).save(big, quality=90)
        images += [photo, big]
    for w, h in ((1024, 768), (500, 375)):
        p = tmp / f"synth_{w}x{h}.jpg"
        subprocess.run(
            [str(BIN / "dtune_image_tool"), "synth", str(p), "--width", str(w), "--height", str(h)],
            check=True,
            capture_output=True,
        )
        images.append(p)
    return images


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jpegs", nargs="*", type=Path)
    ap.add_argument("--boxes", type=int, default=40, help="RandomResizedCrop boxes per image")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        images = args.jpegs or default_images(tmp)
        print(
            f"# 224x224 RandomResizedCrop, {args.boxes} boxes per image (seed {args.seed}): exact region "
            "decode vs --fast-decode, |difference| in 8-bit levels over the scaled boxes"
        )
        print(f"# {'image':<28} {'size':>10} {'scaled':>7} {'mean':>7} {'p99':>7} {'max':>5}")
        every = []
        for path in images:
            from PIL import Image

            with Image.open(path) as im:
                width, height = im.size
            rng = random.Random(args.seed)
            diffs, scaled = [], 0
            for _ in range(args.boxes):
                box = box_params(width, height, rng)
                if min(box[2], box[3]) < 2 * SIZE:
                    continue  # not scaled: --fast-decode gives the exact pixels
                scaled += 1
                a = transform(path, box, tmp / "a.f32", False)
                b = transform(path, box, tmp / "b.f32", True)
                diffs.append((np.abs(a - b) * STD * 255).ravel())
            d = np.concatenate(diffs) if diffs else np.zeros(1)
            every.append(d)
            print(
                f"  {path.name:<28} {f'{width}x{height}':>10} {scaled:>3}/{args.boxes:<3} {d.mean():>7.2f} "
                f"{np.percentile(d, 99):>7.1f} {d.max():>5.0f}"
            )
        d = np.concatenate(every)
        print(f"  {'all':<28} {'':>10} {'':>7} {d.mean():>7.2f} {np.percentile(d, 99):>7.1f} {d.max():>5.0f}")


if __name__ == "__main__":
    sys.exit(main())
