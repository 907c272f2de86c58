"""dtune-train's data parallelism is exact: 2 ranks x batch b give the averaged gradients of 1 rank x
2b (tiny GPT) and of 2 accumulation micro-steps of b (ResNet, whose BatchNorm makes batch
statistics per rank); K micro-steps equal one step of K*b; overlapped, bucketed reduction equals the
flat baseline for every bucket cap; an fp16 overflow on one rank makes every rank skip the step and
halve the scale; bf16 and fp16 follow the fp32 loss curve."""

import subprocess

import h5py
import numpy as np
import pytest
import torch

from conftest import bin_dir, mpirun_prefix

GPT_MODEL = ["--model", "gpt2-tiny", "--context", "32", "--vocab", "256"]
GPT = GPT_MODEL + ["--lr", "0.01"]
RESNET = ["--model", "resnet18", "--width", "8", "--image-size", "32", "--num-classes", "10", "--lr", "0.01"]


def train(tmp_path, name, np_, args, timeout=600, warmup=0):
    exe = bin_dir() / "dtune-train"
    if not exe.exists():
        pytest.fail(f"{exe} does not exist: build first (scripts/setup.sh)")
    dump, out = tmp_path / f"{name}.pt", tmp_path / f"{name}.h5"
    cmd = (mpirun_prefix(np_) if np_ > 1 else []) + [
        str(exe),
        "--threads",
        "1",
        "--warmup-steps",
        str(warmup),
        *args,
        "--debug-dump",
        str(dump),
        "--output",
        str(out),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return torch.load(dump, weights_only=False), out


def max_rel(a, b, prefix):
    worst = 0.0
    for k in a:
        if k.startswith(prefix):
            scale = b[k].abs().max().clamp_min(1e-12)
            worst = max(worst, ((a[k].float() - b[k].float()).abs().max() / scale).item())
    return worst


def test_two_ranks_equal_one_rank_with_double_batch(tmp_path):
    # First step: the same parameters, so the averaged gradients must agree to rounding.
    two, _ = train(tmp_path, "two1", 2, GPT + ["--batch", "4", "--steps", "1"])
    one, _ = train(tmp_path, "one1", 1, GPT + ["--batch", "8", "--steps", "1"])
    assert set(two) == set(one)
    assert max_rel(two, one, "grad.") <= 1e-6
    # After 5 steps the parameters still agree (rounding differences do not grow).
    two, _ = train(tmp_path, "two5", 2, GPT + ["--batch", "4", "--steps", "5"])
    one, _ = train(tmp_path, "one5", 1, GPT + ["--batch", "8", "--steps", "5"])
    assert max_rel(two, one, "param.") <= 1e-6
    assert max_rel(two, one, "grad.") <= 1e-5


def test_batchnorm_two_ranks_equal_two_micro_steps(tmp_path):
    two, _ = train(tmp_path, "two", 2, RESNET + ["--batch", "4", "--steps", "3"])
    acc, _ = train(tmp_path, "acc", 1, RESNET + ["--batch", "4", "--accum-steps", "2", "--steps", "3"])
    assert max_rel(two, acc, "grad.") <= 1e-5
    assert max_rel(two, acc, "param.") <= 1e-5


def test_accumulation_equals_larger_batch(tmp_path):
    acc, _ = train(tmp_path, "acc", 1, GPT + ["--batch", "2", "--accum-steps", "4", "--steps", "3"])
    big, _ = train(tmp_path, "big", 1, GPT + ["--batch", "8", "--steps", "3"])
    assert max_rel(acc, big, "grad.") <= 1e-6
    assert max_rel(acc, big, "param.") <= 1e-6


@pytest.mark.parametrize(
    "bucket_mb", ["0.000001", "0.05", "1000"], ids=["bucket-per-parameter", "some-buckets", "one-bucket"]
)
def test_overlap_equals_flat_baseline(tmp_path, bucket_mb):
    on, h5 = train(
        tmp_path,
        "on",
        2,
        GPT
        + ["--batch", "2", "--steps", "2", "--overlap", "on", "--bucket-mb", bucket_mb, "--first-bucket-mb", bucket_mb],
    )
    off, _ = train(tmp_path, "off", 2, GPT + ["--batch", "2", "--steps", "2", "--overlap", "off"])
    # Two ranks: every element is one addition a + b either way, so the results are identical.
    for k in on:
        assert torch.equal(on[k], off[k]), k
    with h5py.File(h5) as f:
        (g,) = f["runs"].values()
        buckets = len(g["bucket_bytes"])
    n_params = sum(1 for k in on if k.startswith("param."))
    assert buckets == {"0.000001": n_params, "1000": 1}.get(bucket_mb, buckets)
    assert 1 <= buckets <= n_params


def test_fp16_overflow_on_one_rank_skips_everywhere(tmp_path):
    _, h5 = train(
        tmp_path,
        "fp16",
        2,
        GPT
        + [
            "--batch",
            "2",
            "--steps",
            "5",
            "--precision",
            "fp16",
            "--debug-plant-inf-step",
            "2",
            "--debug-plant-inf-rank",
            "1",
        ],
    )
    with h5py.File(h5) as f:
        (g,) = f["runs"].values()
        skipped, scale = g["skipped"][()], g["loss_scale"][()]
    assert skipped[2] == 1
    assert scale[3] == scale[2] / 2
    # Both ranks hold the same parameters afterwards (the divergence guard passed: exit 0).


def loss_curve(tmp_path, name, precision):
    _, h5 = train(
        tmp_path,
        name,
        1,
        GPT_MODEL
        + ["--batch", "8", "--steps", "50", "--precision", precision, "--optimizer", "adamw", "--lr", "0.003"],
    )
    with h5py.File(h5) as f:
        (g,) = f["runs"].values()
        return g["loss"][()][:, 0]


def test_low_precision_follows_fp32_loss_curve(tmp_path):
    ref = loss_curve(tmp_path, "fp32", "fp32")
    assert ref[-1] < ref[0] - 0.5  # it learns (the synthetic batch is fixed: memorisation)
    for precision, tol in (("bf16", 0.02), ("fp16", 0.01)):
        got = loss_curve(tmp_path, precision, precision)
        # Stated tolerance: every step's loss within tol x the fp32 loss.
        rel = np.abs(got - ref) / ref
        print(f"{precision}: max relative loss difference to fp32 over 50 steps {rel.max():.4f}")
        assert rel.max() <= tol, (precision, rel.max())


def test_divergence_guard_names_the_rank(tmp_path):
    exe = bin_dir() / "dtune-train"
    r = subprocess.run(
        mpirun_prefix(3)
        + [
            str(exe),
            *GPT,
            "--threads",
            "1",
            "--batch",
            "2",
            "--steps",
            "4",
            "--check-every",
            "2",
            "--debug-perturb-rank",
            "2",
            "--no-output",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode != 0
    assert "rank(s) 2 differ from rank 0" in r.stderr, r.stderr[-2000:]


def test_compressed_gradients_stay_close(tmp_path):
    ref, _ = train(tmp_path, "none", 2, GPT + ["--batch", "2", "--steps", "1"])
    for wire in ("bf16", "fp16"):
        got, _ = train(tmp_path, wire, 2, GPT + ["--batch", "2", "--steps", "1", "--compression", wire])
        # One rounding of each rank's gradient to 8 (bf16) or 11 (fp16) significant bits.
        assert max_rel(got, ref, "grad.") <= (1e-2 if wire == "bf16" else 2e-3), wire


def test_local_sgd_averages_parameters_every_h_steps(tmp_path):
    # Ranks drift apart between averagings (different data, no gradient sync) and agree after one:
    # the run ends on an averaging step, where the divergence guard demands equality (exit 0).
    got, h5 = train(tmp_path, "local", 2, GPT + ["--batch", "2", "--steps", "4", "--local-sgd", "2"])
    with h5py.File(h5) as f:
        (g,) = f["runs"].values()
        assert g.attrs["local_sgd_every"] == 2
        assert len(g["bucket_bytes"]) == 0
    two, _ = train(tmp_path, "sync", 2, GPT + ["--batch", "2", "--steps", "4"])
    assert max_rel(got, two, "param.") > 1e-6  # not the same algorithm as per-step averaging


def run_group(h5):
    with h5py.File(h5) as f:
        (g,) = f["runs"].values()
        return dict(g.attrs), {k: g[k][()] for k in g if isinstance(g[k], h5py.Dataset)}


@pytest.mark.parametrize(
    "h,steps,warmup",
    [(5, 10, 2), (4, 5, 2), (3, 7, 0), (4, 6, 2)],
    ids=["H5-10+2", "H4-5+2", "H3-7+0", "H4-6+2-ends-on-averaging"],
)
def test_local_sgd_ends_with_equal_parameters_on_every_rank(tmp_path, h, steps, warmup):
    # Averaging counts every optimizer step, warm-up included; a run whose last step is not an
    # H-th is averaged once more at the end. Either way the ranks end equal: exit 0, a file with
    # every step, and equal checksums.
    _, h5 = train(
        tmp_path, "local", 2, GPT + ["--batch", "2", "--steps", str(steps), "--local-sgd", str(h)], warmup=warmup
    )
    attrs, data = run_group(h5)
    assert attrs["status"] == "ok"
    assert data["total_ms"].shape == (warmup + steps, 2)
    assert attrs["local_sgd_final_average"] == int((warmup + steps) % h != 0)
    checksum = data["param_checksum"]
    assert len(checksum) == 2 and checksum[0] == checksum[1], checksum


def test_local_sgd_counts_warmup_steps(tmp_path):
    # 2 warm-up + 4 measured steps with H=4 are the same training as 6 measured steps: averaged
    # after the 4th optimizer step and after the last. Bit for bit, as the arithmetic is the same.
    # (Counting measured steps only would average after the 6th alone.)
    warm, _ = train(tmp_path, "warm", 2, GPT + ["--batch", "2", "--steps", "4", "--local-sgd", "4"], warmup=2)
    cold, _ = train(tmp_path, "cold", 2, GPT + ["--batch", "2", "--steps", "6", "--local-sgd", "4"])
    for k in warm:
        assert torch.equal(warm[k], cold[k]), k


def test_local_sgd_final_average_is_an_averaging_step(tmp_path):
    # 3 steps with H=4 (averaged once, after the run) train exactly as 3 steps with H=3 (averaged
    # after the 3rd step, inside the loop).
    end, h5 = train(tmp_path, "end", 2, GPT + ["--batch", "2", "--steps", "3", "--local-sgd", "4"])
    loop, _ = train(tmp_path, "loop", 2, GPT + ["--batch", "2", "--steps", "3", "--local-sgd", "3"])
    assert run_group(h5)[0]["local_sgd_final_average"] == 1
    for k in end:
        if k.startswith("param."):
            assert torch.equal(end[k], loop[k]), k


def test_local_sgd_every_step_is_gradient_averaging(tmp_path):
    # SGD with momentum is linear in the gradient, so averaging parameters after every step (H=1)
    # trains as averaging gradients does, up to rounding; H=4 lets the ranks drift apart between
    # averagings and lands far from it: the averaging schedule is what acts.
    sync, _ = train(tmp_path, "sync", 2, GPT + ["--batch", "2", "--steps", "4"])
    every, _ = train(tmp_path, "h1", 2, GPT + ["--batch", "2", "--steps", "4", "--local-sgd", "1"])
    drift, _ = train(tmp_path, "h4", 2, GPT + ["--batch", "2", "--steps", "4", "--local-sgd", "4"])
    near, far = max_rel(every, sync, "param."), max_rel(drift, sync, "param.")
    print(f"H=1 vs gradient averaging {near:.3g}, H=4 {far:.3g}")
    assert near <= 1e-5  # rounding only (3.6e-7 measured)
    assert far >= 1e-2  # 0.33 measured


def test_divergence_keeps_the_measured_steps(tmp_path):
    exe = bin_dir() / "dtune-train"
    out = tmp_path / "diverged.h5"
    r = subprocess.run(
        mpirun_prefix(2)
        + [
            str(exe),
            *GPT,
            "--threads",
            "1",
            "--batch",
            "2",
            "--steps",
            "6",
            "--warmup-steps",
            "1",
            "--check-every",
            "3",
            "--debug-perturb-rank",
            "1",
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 1, r.stderr[-2000:]
    assert "parameters diverged after step 3 (warm-up included): rank(s) 1 differ from rank 0" in r.stderr
    with h5py.File(out) as f:
        assert f.attrs["status"] == "failed" and f.attrs["exit_status"] == 1
    attrs, data = run_group(out)
    assert attrs["status"] == "diverged" and "after step 3" in attrs["message"]
    assert data["total_ms"].shape == (3, 2)  # the steps up to the failed check
    assert data["param_checksum"][0] != data["param_checksum"][1]


def test_each_rank_records_its_device(tmp_path):
    _, h5 = train(tmp_path, "dev", 2, GPT + ["--batch", "2", "--steps", "1"])
    _, data = run_group(h5)
    assert list(data["device_index"]) == [-1, -1]
    assert [d.decode() for d in data["rank_device"]] == ["cpu", "cpu"]
    with h5py.File(h5) as f:
        assert list(f["provenance"]["rank_device"].asstr()[()]) == ["cpu", "cpu"]
