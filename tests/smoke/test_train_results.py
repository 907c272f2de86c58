"""dtune-train end to end: every precision and backend available here writes an HDF5 run that h5py
and the loader read; bad input exits 2 naming the flag; --batch auto finds the boundary of a CPU
memory limit exactly (the found batch fits, one more does not, recorded as status "oom")."""

import subprocess

import h5py
import pytest

from conftest import bin_dir, mpirun_prefix
from dtune_report.loader import load_train, load_train_summary
from side_by_side import outcome, side_by_side

TINY = ["--model", "gpt2-tiny", "--context", "16", "--vocab", "128", "--threads", "1"]


def run(args, np_=1, timeout=600):
    exe = bin_dir() / "dtune-train"
    if not exe.exists():
        pytest.fail(f"{exe} does not exist: build first (scripts/setup.sh)")
    cmd = (mpirun_prefix(np_) if np_ > 1 else []) + [str(exe), *[str(a) for a in args]]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_each_precision_writes_a_valid_run(tmp_path, precision):
    out = tmp_path / "t.h5"
    r = run(
        TINY + ["--batch", "2", "--steps", "3", "--warmup-steps", "1", "--precision", precision, "--output", out], np_=2
    )
    assert r.returncode == 0, r.stderr[-2000:]
    with h5py.File(out) as f:
        assert f.attrs["status"] == "complete"
        (g,) = f["runs"].values()
        assert g.attrs["benchmark"] == "train" and g.attrs["precision"] == precision
        assert g["total_ms"].shape == (4, 2)
        # The counting allocator caches nothing: what it reserved is what tensors held.
        peak, reserved = g["peak_memory_bytes"][()], g["peak_reserved_bytes"][()]
        assert (peak > 0).all() and list(reserved) == list(peak)
    steps = load_train(out)
    assert len(steps) == 4 * 2
    assert (steps.total_ms > 0).all() and (steps.forward_ms > 0).all() and (steps.backward_ms > 0).all()
    # The phases add up to at most the step total (the rest is loop bookkeeping).
    phases = steps[[c for c in steps.columns if c.endswith("_ms") and c != "total_ms"]].sum(axis=1)
    assert (phases <= steps.total_ms * 1.0001).all()
    s = load_train_summary(out).iloc[0]
    assert s.status == "ok" and s.samples_per_s > 0 and s.global_batch == 4
    assert s.flops_formula == "6N+6LCT (llm.c)" and s.alt_flops_formula == "6N+12LCT (PaLM, nanoGPT)"
    # Both figures recorded; PaLM counts attention in full, so its figure is the larger here.
    assert s.alt_training_flops_per_sample > s.training_flops_per_sample > 0


def test_weights_bf16_with_master_copy_and_adamw(tmp_path):
    out = tmp_path / "t.h5"
    r = run(
        TINY
        + [
            "--batch",
            "2",
            "--steps",
            "2",
            "--precision",
            "bf16",
            "--weights-dtype",
            "bf16",
            "--optimizer",
            "adamw",
            "--output",
            out,
        ],
        np_=2,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert load_train_summary(out).iloc[0].weights_dtype == "bf16"


BAD_INPUT = [
    (["--batch", "0"], "--batch"),
    (["--batch", "many"], "--batch"),
    (["--precision", "fp8"], "--precision"),
    (["--model", "resnet19"], "--model"),
    (["--global-batch", "7"], "--global-batch"),
    (["--backend", "nccl"], "--backend nccl"),
    (["--precision", "tf32"], "--precision tf32"),
    (["--batch", "auto"], "--memory-limit-mb"),
    (["--first-bucket-mb", "50"], "--first-bucket-mb"),
]


@pytest.fixture(scope="module")
def bad_input_runs(tmp_path_factory):
    """Every case launched before the first test reads it, four at a time (side_by_side.py), each
    with an --output in a folder of its own: {args: (that folder, the completed process)}."""

    keys = [tuple(c[0]) for c in BAD_INPUT]
    folders = {k: tmp_path_factory.mktemp("bad") for k in keys}

    def launch(args):
        return folders[args], run(TINY + list(args) + ["--output", folders[args] / "t.h5"], np_=2, timeout=120)

    return side_by_side(launch, keys)


@pytest.mark.parametrize("args,flag", BAD_INPUT)
def test_bad_input_exits_2(bad_input_runs, args, flag):
    folder, r = outcome(bad_input_runs, tuple(args))
    assert r.returncode == 2, r.stdout + r.stderr
    errors = [line for line in r.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and flag in errors[0], r.stderr
    assert list(folder.iterdir()) == []


def test_batch_finder_lands_on_the_memory_boundary(tmp_path):
    # 64x64 so that even batch 1 leaves 2x2 maps for the last BatchNorm.
    model = ["--model", "resnet18", "--width", "8", "--image-size", "64", "--num-classes", "10", "--threads", "1"]
    limit = ["--memory-limit-mb", "80"]
    r = run(model + limit + ["--batch", "auto", "--steps", "1", "--warmup-steps", "0", "--output", tmp_path / "a.h5"])
    assert r.returncode == 0, r.stderr[-2000:]
    found = int(load_train_summary(tmp_path / "a.h5").iloc[0].batch)
    assert found > 1
    ok = run(model + limit + ["--batch", found, "--steps", "2", "--output", tmp_path / "ok.h5"])
    assert ok.returncode == 0, ok.stderr[-2000:]
    over = run(model + limit + ["--batch", found + 1, "--steps", "2", "--output", tmp_path / "over.h5"])
    assert over.returncode == 4, over.stdout + over.stderr
    s = load_train_summary(tmp_path / "over.h5").iloc[0]
    assert s.status == "oom" and s.batch == found + 1


def test_batch_sweep_measures_powers_of_two_up_to_the_limit(tmp_path):
    model = ["--model", "resnet18", "--width", "8", "--image-size", "64", "--num-classes", "10", "--threads", "1"]
    r = run(
        model
        + [
            "--memory-limit-mb",
            "40",
            "--batch",
            "auto",
            "--batch-sweep",
            "--steps",
            "2",
            "--warmup-steps",
            "1",
            "--output",
            tmp_path / "s.h5",
        ]
    )
    assert r.returncode == 0, r.stderr[-2000:]
    s = load_train_summary(tmp_path / "s.h5")
    batches = list(s.batch)
    largest = batches[-1]
    assert batches[:-1] == [2**k for k in range(len(batches) - 1)] and batches[-2] < largest <= 2 * batches[-2]
    assert (s.status == "ok").all() and (s.batch_auto == 1).all()
    best = int(s.loc[s.samples_per_s.idxmax(), "batch"])
    assert f"batch {best} per rank is the fastest" in r.stdout
