"""dtune-train against the same Llama trained in eager PyTorch through Hugging Face transformers, in
one run: llama3-tiny's shape (2 layers, width 128, 4 heads over 2 KV heads of 32, SwiGLU 352,
vocabulary 1,024, context 128, untied, Llama 3.1's rope scaling) as a LlamaForCausalLM config,
saved with save_pretrained (safetensors) to a temporary directory that both sides start from:
dtune-train --model llama3-tiny --init-from DIR (the script first checks that `dtune-models list`
counts hf:DIR and llama3-tiny alike), and LlamaForCausalLM.from_pretrained(DIR) with
attn_implementation "sdpa" (the fused attention dtune calls too) and use_cache off (no KV cache in
training). 1 rank on CPU, fp32, the same torch, the same intra-op threads, the same batch size,
one fixed synthetic batch, and on both sides the same step: forward, cross-entropy over every
position, backward, SGD (momentum 0.9, lr 1e-3), zero_grad. Target (issue 58): dtune/transformers
>= 1.1.

Throughput as vs_pytorch.py counts it (whose launch, pairing and timed loop this reuses): samples
over the sum of the measured steps' times; each repeat a fresh pair of launches, alternating which
goes first; the row gives the medians over repeats, the range of the per-pair ratios, p50_ratio
(the ratio of median step times, which a few stalled steps do not move) and other_cores (CPU that
other processes used meanwhile: above ~0.2 on a 2-core machine the ratio says little).

Run: .venv/bin/python benchmarks/train/vs_transformers.py [--threads 2] [--batch 8] [--steps 60]
[--warmup 10] [--repeats 3]; the binary comes from DTUNE_BIN_DIR (default build/bin). About a minute
on an idle 2-core machine. Exit 0 whether or not the target is met (a benchmark, not a test); 2 if a
launch fails. --worker is the transformers side."""

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import vs_pytorch as vp

REPO = vp.REPO
TARGET = 1.1
NOISY_CORES = 0.2
# llama3-tiny (models/llama_config.h) as transformers' LlamaConfig keywords.
TINY = dict(
    hidden_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    intermediate_size=352,
    vocab_size=1024,
    max_position_embeddings=128,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
    rope_parameters={
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    },
)


def save_model(directory: Path, seed: int) -> None:
    """llama3-tiny's random initial weights and config.json, as save_pretrained writes them."""
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(seed)
    LlamaForCausalLM(LlamaConfig(**TINY)).save_pretrained(directory)


def worker(a):
    """The transformers side: the saved model, a fixed batch (B, T + 1) cut into input and target,
    vs_pytorch's timed loop; writes a.result."""
    import torch
    import torch.nn.functional as F
    from transformers import LlamaForCausalLM

    torch.set_num_threads(a.threads)
    lm = LlamaForCausalLM.from_pretrained(a.dir, attn_implementation="sdpa", dtype=torch.float32)

    class Logits(torch.nn.Module):  # tokens (B, T) -> logits (B, T, V), what train_and_record calls
        def __init__(self):
            super().__init__()
            self.lm = lm

        def forward(self, x):
            return self.lm(input_ids=x, use_cache=False).logits

    def loss_fn(logits, y):  # (B, T, V), (B, T): the mean over every position, as dtune's loss
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))

    gen = torch.Generator().manual_seed(a.seed)
    seq = torch.randint(0, TINY["vocab_size"], (a.batch, TINY["max_position_embeddings"] + 1), generator=gen)
    x, y = seq[:, :-1].contiguous(), seq[:, 1:].contiguous()  # (B, T) each
    vp.train_and_record(a, Logits(), x, y, loss_fn, 1, 0)


def same_as_named(directory: Path) -> None:
    """Exits 2 unless dtune-models counts hf:DIR as llama3-tiny (parameters, MACs, FLOPs)."""
    exe = Path(os.environ.get("DTUNE_BIN_DIR", REPO / "build" / "bin")) / "dtune-models"

    def row(model):
        out = subprocess.run([str(exe), "list", "--model", model], capture_output=True, text=True, check=True)
        return [line.split()[1:4] for line in out.stdout.splitlines() if not line.startswith("#")]

    if row(f"hf:{directory}") != row("llama3-tiny"):
        sys.exit(f"vs_transformers: {directory}/config.json is not llama3-tiny: {row(f'hf:{directory}')}")


def dtune_run(a, directory: Path, tmp: Path, env):
    """-> (samples/s, median step ms, other cores) of one dtune-train launch."""
    import h5py

    out = tmp / "dtune.h5"
    out.unlink(missing_ok=True)
    exe = Path(os.environ.get("DTUNE_BIN_DIR", REPO / "build" / "bin")) / "dtune-train"
    numbers = f"--batch {a.batch} --threads {a.threads} --steps {a.steps} --warmup-steps {a.warmup} --lr {vp.LR}"
    cmd = [str(exe), "--model", "llama3-tiny", "--init-from", str(directory), "--optimizer", "sgd"]
    cmd += [*numbers.split(), "--output", str(out)]
    other = vp.launch(cmd, env)
    with h5py.File(out) as f:
        (run,) = f["runs"].values()
        return float(run.attrs["samples_per_s"]), float(run.attrs["step_time_p50_ms"]), other


def transformers_run(a, directory: Path, tmp: Path, env):
    """-> (samples/s, median step ms, other cores) of one worker launch."""
    import json

    result = tmp / "transformers.json"
    result.unlink(missing_ok=True)
    numbers = f"--batch {a.batch} --threads {a.threads} --steps {a.steps} --warmup {a.warmup} --seed {a.seed}"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--dir", str(directory)]
    cmd += [*numbers.split(), "--result", str(result)]
    other = vp.launch(cmd, env)
    r = json.loads(result.read_text())
    return r["samples_per_s"], r["step_time_p50_ms"], other


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2, help="intra-op threads on both sides (default 2)")
    ap.add_argument("--batch", type=int, default=8, help="samples per step (default 8)")
    ap.add_argument("--steps", type=int, default=60, help="measured steps (default 60)")
    ap.add_argument("--warmup", type=int, default=10, help="warm-up steps, not measured (default 10)")
    ap.add_argument("--repeats", type=int, default=3, help="alternating pairs (default 3)")
    ap.add_argument("--seed", type=int, default=1234, help=argparse.SUPPRESS)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    if min(a.threads, a.batch, a.steps, a.repeats) < 1 or a.warmup < 0:
        ap.error("--threads, --batch, --steps and --repeats want >= 1, --warmup >= 0")

    import torch
    import transformers

    print(
        f"# dtune-train vs transformers {transformers.__version__} LlamaForCausalLM (sdpa, use_cache off): "
        f"torch {torch.__version__}, fp32, {a.threads} threads, SGD momentum 0.9, lr {vp.LR}, one fixed "
        f"synthetic batch; 1 rank; medians of {a.repeats} alternating pairs; sps = samples/s"
    )
    print(
        f"# {'model':<11} {'batch':>5} {'warm+steps':>10} {'dtune_sps':>10} {'hf_sps':>10} {'ratio':>6} "
        f"{'ratio_range':>12} {'p50_ratio':>9} {'other_cores':>11} {'target':>6}  result",
        flush=True,
    )
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    with tempfile.TemporaryDirectory(prefix="dtune-vs-transformers.") as d:
        tmp = Path(d)
        directory = tmp / "llama3-tiny"
        save_model(directory, a.seed)
        same_as_named(directory)
        d_sps, h_sps, ratio, ratios, p50_ratio, other = vp.alternate_pairs(
            a.repeats, lambda: dtune_run(a, directory, tmp, env), lambda: transformers_run(a, directory, tmp, env)
        )
    verdict = "noisy" if other > NOISY_CORES else ("ok" if ratio >= TARGET else "MISSED")
    span = f"{min(ratios):.3f}-{max(ratios):.3f}"
    print(
        f"  {'llama3-tiny':<11} {a.batch:>5} {f'{a.warmup}+{a.steps}':>10} {d_sps:>10.2f} {h_sps:>10.2f} "
        f"{ratio:>6.3f} {span:>12} {p50_ratio:>9.3f} {other:>11.2f} {TARGET:>6.2f}  {verdict}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
