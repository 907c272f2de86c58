"""dtune-train's data parallelism is exact: 2 ranks x batch b give the averaged gradients of 1 rank x
2b (tiny GPT) and of 2 accumulation micro-steps of b (ResNet, whose BatchNorm makes batch
statistics per rank); K micro-steps equal one step of K*b; overlapped, bucketed reduction equals the
flat baseline for every bucket cap, with exactly the buckets DDP's rule plans; an fp16 overflow on
one rank (planted after the reduction) makes every rank skip the step, halve the scale and change
no parameter; bf16 weights keep an fp32 master copy; bf16 and fp16 follow the fp32 loss curve
closely without equalling it, as compressed gradients do."""

import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from conftest import bin_dir, mpirun_prefix

GPT_MODEL = ["--model", "gpt2-tiny", "--context", "32", "--vocab", "256"]
GPT = GPT_MODEL + ["--lr", "0.01"]
# The max relative loss difference to fp32 over 20 steps is 1.2e-3 (bf16) and 1.3e-3 (fp16) on CPU
# (deterministic: one thread; test_low_precision_follows_fp32_loss_curve prints it; over 50 steps,
# 3.1e-3 and 1.9e-3, for the same lesson at 2.5x the cost: fp16 autocast is slow on a CPU); the
# bounds leave 16x and 8x.
BF16_LOSS_TOL, FP16_LOSS_TOL = 2e-2, 1e-2
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


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """runs(ranks, args, warmup=0): `train` launched once per distinct (ranks, args, warmup) in this
    module; tests that compare against the same baseline run share it."""
    base, done = tmp_path_factory.mktemp("runs"), {}

    def run(np_, args, warmup=0):
        key = (np_, tuple(map(str, args)), warmup)
        if key not in done:
            done[key] = train(base, f"run{len(done)}", np_, args, warmup=warmup)
        return done[key]

    return run


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
def test_overlap_equals_flat_baseline(runs, bucket_mb):
    on, h5 = runs(
        2,
        GPT
        + ["--batch", "2", "--steps", "2", "--overlap", "on", "--bucket-mb", bucket_mb, "--first-bucket-mb", bucket_mb],
    )
    off, _ = runs(2, GPT + ["--batch", "2", "--steps", "2", "--overlap", "off"])
    # Two ranks: every element is one addition a + b either way, so the results are identical.
    for k in on:
        assert torch.equal(on[k], off[k]), k
    with h5py.File(h5) as f:
        (g,) = f["runs"].values()
        bucket_bytes = list(g["bucket_bytes"][()])
    cap = int(float(bucket_mb) * (1 << 20))
    assert bucket_bytes == planned_buckets(gpt_param_bytes(on), cap, cap)
    n_params = sum(1 for k in on if k.startswith("param."))
    assert len(bucket_bytes) == {"0.000001": n_params, "1000": 1}.get(bucket_mb, len(bucket_bytes))


def gpt_param_bytes(dump):
    """The tiny GPT's parameter sizes in bytes in registration order, which the nanoGPT reference
    (tests/models/gpt_reference.py, whose names dtune's model shares) defines; checked against the
    dump's names and shapes."""
    from gpt_reference import GPT

    ref = GPT(layers=2, width=128, heads=4, context=32, vocab=256)
    sizes = []
    for name, p in ref.named_parameters():  # the tied lm_head is wte: listed once
        ours = dump["param." + name]
        assert tuple(ours.shape) == tuple(p.shape), name
        sizes.append(ours.numel() * ours.element_size())
    assert len(sizes) == sum(1 for k in dump if k.startswith("param."))
    return sizes


def planned_buckets(param_bytes, first_cap, cap):
    """PyTorch DDP's bucketing rule: parameters in reverse registration order (as backward produces
    their gradients); a bucket is closed when the next parameter would take it past its cap (the
    first bucket's is first_cap); a parameter larger than the cap fills a bucket alone."""
    buckets = []
    for size in reversed(param_bytes):
        limit = first_cap if len(buckets) == 1 else cap
        if not buckets or (buckets[-1] > 0 and buckets[-1] + size > limit):
            buckets.append(0)
        buckets[-1] += size
    return buckets


FP16 = GPT + ["--batch", "2", "--precision", "fp16"]


def plant_inf(step, rank):
    return ["--debug-plant-inf-step", str(step), "--debug-plant-inf-rank", str(rank)]


def test_fp16_overflow_on_one_rank_skips_everywhere(tmp_path):
    # The inf is planted in rank 1's gradients after the reduction: rank 0's are finite, and only
    # the cross-rank found-inf agreement makes it skip too. (Deleting the agreement makes rank 0
    # step, the ranks diverge and the final check exits 1.)
    _, h5 = train(tmp_path, "fp16", 2, FP16 + ["--steps", "5"] + plant_inf(2, 1))
    with h5py.File(h5) as f:
        (g,) = f["runs"].values()
        skipped, scale, loss = g["skipped"][()], g["loss_scale"][()], g["loss"][()]
    assert list(skipped) == [0, 0, 1, 0, 0]
    assert scale[3] == scale[2] / 2
    assert np.isfinite(loss[3:]).all(), loss  # [S, R]: every rank trains on after the skip


@pytest.mark.parametrize("local_sgd", [[], ["--local-sgd", "2"]], ids=["gradient-sync", "local-sgd-2"])
def test_a_skipped_step_changes_no_parameter(tmp_path, local_sgd):
    # Three steps whose last one overflowed on rank 1 leave exactly the parameters of two clean
    # steps, on every rank (the divergence guard at the end compares them: exit 0). Under local
    # SGD (H=2) the ranks average after step 2 and the final average of equal ranks is exact.
    planted, _ = train(tmp_path, "planted", 2, FP16 + ["--steps", "3"] + local_sgd + plant_inf(2, 1))
    clean, _ = train(tmp_path, "clean", 2, FP16 + ["--steps", "2"] + local_sgd)
    params = [k for k in planted if k.startswith("param.")]
    assert params
    for k in params:
        assert torch.equal(planted[k], clean[k]), k


# The ResNet's float32 images meet bf16 convolution weights (the GPT's token ids do not).
@pytest.mark.parametrize("model", [GPT, RESNET], ids=["gpt", "resnet"])
def test_bf16_weights_keep_an_fp32_master_copy(tmp_path, model):
    got, _ = train(tmp_path, "bf16w", 2, model + ["--batch", "2", "--steps", "2", "--weights-dtype", "bf16"])
    params = {k[len("param.") :]: v for k, v in got.items() if k.startswith("param.")}
    master = {k[len("master.") :]: v for k, v in got.items() if k.startswith("master.")}
    assert params and set(master) == set(params)
    for name, m in master.items():
        assert params[name].dtype == torch.bfloat16 and m.dtype == torch.float32, name
        assert torch.equal(params[name], m.to(torch.bfloat16)), name  # the weights are its cast
    # Updated in fp32: the copy holds values bf16 cannot (it started as the bf16 weights, exactly).
    finer = sum(int((m != m.to(torch.bfloat16).float()).sum()) for m in master.values())
    assert finer > 0


def loss_curve(tmp_path, name, precision):
    _, h5 = train(
        tmp_path,
        name,
        1,
        GPT_MODEL
        + ["--batch", "8", "--steps", "20", "--precision", precision, "--optimizer", "adamw", "--lr", "0.003"],
    )
    with h5py.File(h5) as f:
        (g,) = f["runs"].values()
        return g["loss"][()][:, 0]


def test_low_precision_follows_fp32_loss_curve(tmp_path):
    ref = loss_curve(tmp_path, "fp32", "fp32")
    assert ref[-1] < ref[0] - 0.5  # it learns (the synthetic batch is fixed: memorisation)
    for precision, tol in (("bf16", BF16_LOSS_TOL), ("fp16", FP16_LOSS_TOL)):
        got = loss_curve(tmp_path, precision, precision)
        # Every step's loss within tol x the fp32 loss, and not equal to it: a run that ignored
        # --precision would follow fp32 exactly.
        rel = np.abs(got - ref) / ref
        print(f"{precision}: max relative loss difference to fp32 over 20 steps {rel.max():.4g}")
        assert 0 < rel.max() <= tol, (precision, rel.max())


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


def test_compressed_gradients_stay_close(runs):
    ref, _ = runs(2, GPT + ["--batch", "2", "--steps", "1"])
    for wire in ("bf16", "fp16"):
        got, _ = runs(2, GPT + ["--batch", "2", "--steps", "1", "--compression", wire])
        # One rounding of each rank's gradient to 8 (bf16) or 11 (fp16) significant bits: close to
        # the fp32 reduction, and not equal to it (gradients that were not compressed would be).
        rel = max_rel(got, ref, "grad.")
        print(f"--compression {wire}: max relative gradient difference {rel:.3g}")
        assert 0 < rel <= (1e-2 if wire == "bf16" else 2e-3), (wire, rel)


def test_local_sgd_averages_parameters_every_h_steps(runs):
    # Ranks drift apart between averagings (different data, no gradient sync) and agree after one:
    # the run ends on an averaging step, where the divergence guard demands equality (exit 0).
    got, h5 = runs(2, GPT + ["--batch", "2", "--steps", "4", "--local-sgd", "2"])
    with h5py.File(h5) as f:
        (g,) = f["runs"].values()
        assert g.attrs["local_sgd_every"] == 2
        assert len(g["bucket_bytes"]) == 0
    two, _ = runs(2, GPT + ["--batch", "2", "--steps", "4"])
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


def rank_checksums(path, ranks):
    """{rank: [checksum after each step]} from --debug-checksums FILE (FILE.rank<r>: "step sum")."""
    out = {}
    for r in range(ranks):
        lines = [line.split() for line in Path(f"{path}.rank{r}").read_text().splitlines()]
        assert [int(s) for s, _ in lines] == list(range(len(lines)))
        out[r] = [float(c) for _, c in lines]
    return out


@pytest.mark.parametrize("h", [2, 4])
def test_local_sgd_averages_exactly_after_every_hth_step(tmp_path, h):
    # Step by step, each rank's parameter checksum: the ranks train on different data, so they
    # differ after every step except an H-th, after which both hold the mean, bit for bit. H=4
    # must not behave as H=2, nor may averaging happen every step or never. (That the average is
    # the mean: test_local_sgd_every_step_is_gradient_averaging.)
    steps = 8
    sums = tmp_path / "sums"
    train(
        tmp_path,
        "local",
        2,
        GPT + ["--batch", "2", "--steps", str(steps), "--local-sgd", str(h), "--debug-checksums", str(sums)],
    )
    c = rank_checksums(sums, 2)
    equal_after = [step for step in range(steps) if c[0][step] == c[1][step]]
    assert equal_after == [step for step in range(steps) if (step + 1) % h == 0], (h, c)


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


def test_local_sgd_every_step_is_gradient_averaging(runs):
    # SGD with momentum is linear in the gradient, so averaging parameters after every step (H=1)
    # trains as averaging gradients does, up to rounding; H=4 lets the ranks drift apart between
    # averagings and lands far from it: the averaging schedule is what acts.
    sync, _ = runs(2, GPT + ["--batch", "2", "--steps", "4"])
    every, _ = runs(2, GPT + ["--batch", "2", "--steps", "4", "--local-sgd", "1"])
    drift, _ = runs(2, GPT + ["--batch", "2", "--steps", "4", "--local-sgd", "4"])
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


def test_each_rank_records_its_device(runs):
    _, h5 = runs(2, GPT + ["--batch", "2", "--steps", "1"])
    _, data = run_group(h5)
    assert list(data["device_index"]) == [-1, -1]
    assert [d.decode() for d in data["rank_device"]] == ["cpu", "cpu"]
    with h5py.File(h5) as f:
        assert list(f["provenance"]["rank_device"].asstr()[()]) == ["cpu", "cpu"]
