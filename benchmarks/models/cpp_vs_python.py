"""Forward + backward throughput of dtune's C++ models against the same models in Python, with the
same torch, the same thread count, the same weights and the same batch: ResNet-18 (64x64, batch
32, 10 classes) and the tiny GPT (batch 8, context 128). Prints samples/s and the C++/Python ratio
(target: >= 1.05). Run: .venv/bin/python benchmarks/models/cpp_vs_python.py [--threads N]
[--steps N] [--repeats N]; the binary comes from DTUNE_BIN_DIR (default build/bin)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import torchvision

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "models"))
from gpt_reference import GPT  # noqa: E402


def python_rate(model, inp, target, loss_fn, steps, warmup):
    model.train()

    def step():
        model.zero_grad(set_to_none=False)
        loss_fn(model(inp), target).backward()

    for _ in range(warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return steps * inp.size(0) / (time.perf_counter() - t0)


def cpp_rate(exe, name, args, tmp, steps, warmup, threads):
    out = subprocess.run([str(exe), "--threads", str(threads), "bench", "--model", name, *args,
                          "--weights", str(tmp / "w.pt"), "--batch", str(tmp / "b.pt"),
                          "--steps", str(steps), "--warmup", str(warmup)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["samples_per_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3, help="alternating C++/Python pairs; medians reported")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    exe = Path(os.environ.get("DTUNE_BIN_DIR", REPO / "build" / "bin")) / "dtune-models"
    torch.manual_seed(0)
    cases = [
        ("resnet18", ["--num-classes", "10", "--image-size", "64"], torchvision.models.resnet18(num_classes=10),
         torch.randn(32, 3, 64, 64), torch.randint(0, 10, (32,)), F.cross_entropy),
    ]
    seq = torch.randint(0, 1024, (8, 129))
    cases.append(("gpt2-tiny", [], GPT(2, 128, 4, 128, 1024), seq[:, :-1].contiguous(),
                  seq[:, 1:].contiguous(), GPT.loss))
    print(f"# forward+backward, torch {torch.__version__}, {a.threads} threads, {a.steps} steps after "
          f"{a.warmup} warm-up, median of {a.repeats} alternating pairs")
    print(f"# {'model':<10s} {'C++ samples/s':>14s} {'Python samples/s':>17s} {'ratio':>6s}  ratio range")
    for name, args, model, inp, target, loss_fn in cases:
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            torch.save({k: v.contiguous() for k, v in model.state_dict().items()}, tmp / "w.pt")
            torch.save({"input": inp, "target": target}, tmp / "b.pt")
            cpp, py = [], []
            for r in range(a.repeats):
                order = [0, 1] if r % 2 == 0 else [1, 0]
                for which in order:
                    if which == 0:
                        cpp.append(cpp_rate(exe, name, args, tmp, a.steps, a.warmup, a.threads))
                    else:
                        py.append(python_rate(model, inp, target, loss_fn, a.steps, a.warmup))
        ratios = [c / p for c, p in zip(cpp, py)]
        print(f"  {name:<10s} {statistics.median(cpp):14.2f} {statistics.median(py):17.2f} "
              f"{statistics.median(cpp) / statistics.median(py):6.3f}  {min(ratios):.3f}-{max(ratios):.3f}")


if __name__ == "__main__":
    main()
