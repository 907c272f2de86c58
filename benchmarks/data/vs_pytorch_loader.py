#!/usr/bin/env python3
"""dtune's loader against PyTorch's DataLoader with torchvision transforms, over the same files and
worker counts, in one run: decode photo-sized JPEGs from WebDataset shards, RandomResizedCrop(224),
RandomHorizontalFlip, ToTensor + Normalize, batches of 32. dtune runs three ways: --decode full
(the whole image, then the crop: the loader before region decoding), --decode roi (the default:
only the rows and iMCU columns around the crop box, the same tensors) and roi with --fast-decode
(DCT-scaled where the box is at least twice 224: other pixels). Reports images/s of the epochs
after the first (page cache warm for all; --epochs 4 times three, which a shared machine's noise
needs: one epoch is about a second) for each worker count; each repeat runs the four loaders once,
in an order rotated per repeat, and the ratios are medians of the per-repeat ratios (paired).

  .venv/bin/python benchmarks/data/vs_pytorch_loader.py [--workers 1 2] [--samples 768] [--repeats 3]
      [--epochs 2] [--before-bin OTHER_BUILD/bin]

--before-bin adds a fifth loader: dtune-data bench of another build with its default flags (e.g. a
build of the commit before a loader change), and the ratio of each dtune way to it.
"""

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("DTUNE_BIN_DIR", REPO / "build" / "bin"))


def dtune_rate(ds, workers, batch, *extra, epochs, bin_dir=BIN):
    r = subprocess.run(
        [
            str(bin_dir / "dtune-data"),
            "bench",
            str(ds),
            "--batch",
            str(batch),
            "--workers",
            str(workers),
            "--epochs",
            str(epochs),
            "--image-size",
            "224",
            "--no-output",
            *extra,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = [line.split() for line in r.stdout.splitlines() if line.strip() and not line.startswith("#")]
    # epochs after the first (page cache warm): delivered samples over the sum of their times
    later = rows[1:]
    return sum(float(x[2]) for x in later) / sum(float(x[2]) / float(x[3]) for x in later)


def torch_rate(ds, workers, batch, epochs):
    import torch
    from PIL import Image
    from torch.utils.data import DataLoader, Dataset
    from torchvision import transforms

    manifest = json.loads((ds / "dataset.json").read_text())
    objects = [ds / o[0] for o in manifest["objects"]]
    tf = transforms.Compose(
        [
            transforms.RandomResizedCrop(224),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        ]
    )

    class Shards(Dataset):
        def __len__(self):
            return len(manifest["samples"])

        def __getitem__(self, i):
            obj, off, size, label = manifest["samples"][i]
            with open(objects[obj], "rb") as f:
                f.seek(off)
                data = f.read(size)
            return tf(Image.open(io.BytesIO(data)).convert("RGB")), label

    torch.set_num_threads(1)
    loader = DataLoader(
        Shards(), batch_size=batch, shuffle=True, num_workers=workers, drop_last=True, persistent_workers=False
    )
    samples, seconds = 0, 0.0
    for epoch in range(epochs):
        t0, n = time.perf_counter(), 0
        for x, _y in loader:
            n += x.shape[0]
        if epoch > 0:  # as dtune's: the epochs after the first, page cache warm
            samples, seconds = samples + n, seconds + time.perf_counter() - t0
    return samples / seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--samples", type=int, default=768)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=2, help="epochs per run; all but the first are timed")
    ap.add_argument("--dir", help="reuse or create the dataset here")
    ap.add_argument("--before-bin", type=Path, help="another build's bin directory (its dtune-data as 'before')")
    args = ap.parse_args()
    tmp = None
    ds = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="dtune-loader-bench-")) / "ds"
    if not (ds / "dataset.json").exists():
        subprocess.run(
            [
                str(BIN / "dtune-data"),
                "make",
                "images",
                "--out",
                str(ds),
                "--samples",
                str(args.samples),
                "--classes",
                "10",
                "--width",
                "500",
                "--height",
                "375",
                "--size-jitter",
                "0.2",
                "--shard-samples",
                "128",
            ],
            check=True,
            capture_output=True,
        )
    size_mb = sum(p.stat().st_size for p in ds.glob("*.tar")) / 1e6
    print(
        f"# {args.samples} JPEGs (500x375 +-20%, {size_mb:.1f} MB in shards), 224x224 random-resized-crop + "
        f"flip + normalise, batch {args.batch}; images/s of epochs 2-{max(2, args.epochs)}, "
        f"medians of {args.repeats} repeats, "
        f"the four loaders alternating; load {os.getloadavg()[0]:.2f} at the start"
    )
    e = max(2, args.epochs)
    loaders = {
        "full": lambda w: dtune_rate(ds, w, args.batch, "--decode", "full", epochs=e),
        "roi": lambda w: dtune_rate(ds, w, args.batch, "--decode", "roi", epochs=e),
        "roi+fast": lambda w: dtune_rate(ds, w, args.batch, "--decode", "roi", "--fast-decode", epochs=e),
        "pytorch": lambda w: torch_rate(ds, w, args.batch, epochs=e),
    }
    if args.before_bin:
        loaders["before"] = lambda w: dtune_rate(ds, w, args.batch, epochs=e, bin_dir=args.before_bin)
    names = list(loaders)
    before = [f"{'roi/before':>10}", f"{'full/before':>11}"] if args.before_bin else []
    print(
        f"# {'workers':>7} "
        + " ".join(f"{n:>10}" for n in names)
        + f" {'roi/full':>9} {'fast/full':>9} {'roi/torch':>9} {'full/torch':>10} "
        + " ".join(before)
        + "   per-repeat roi/full"
    )
    for w in args.workers:
        rates = {n: [] for n in names}
        for k in range(args.repeats):
            for n in names[k % len(names) :] + names[: k % len(names)]:
                rates[n].append(loaders[n](w))

        def ratio(a, b, rates=rates):
            return statistics.median(x / y for x, y in zip(rates[a], rates[b]))

        print(
            f"  {w:>7} "
            + " ".join(f"{statistics.median(rates[n]):>10.1f}" for n in names)
            + f" {ratio('roi', 'full'):>9.2f} {ratio('roi+fast', 'full'):>9.2f} {ratio('roi', 'pytorch'):>9.2f}"
            f" {ratio('full', 'pytorch'):>10.2f} "
            + (f"{ratio('roi', 'before'):>10.2f} {ratio('full', 'before'):>11.2f}" if args.before_bin else "")
            + "   "
            + " ".join(f"{a / b:.2f}" for a, b in zip(rates["roi"], rates["full"]))
        )
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    sys.exit(main())
