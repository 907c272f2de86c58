"""Sharded data parallelism (--shard zero1|zero2|zero3, train/zero.h, train/zero3.h) trains exactly
as DDP does: after K
steps the parameters equal DDP's on the same ranks (and one process's with N x b) for the GPT and
the BatchNorm ResNet, with accumulation, bf16 weights under AdamW and fp16 loss scaling with a
planted overflow (every rank skips the same step); each rank holds 1/N of DDP's optimizer state
(plus at most one element of padding per shard), on 2 and 3 ranks, and with zero2 only its 1/N of
the reduced gradients between steps; a rank stopped mid-run ends the
job within --timeout, named; the flags it cannot go with are refused in one line."""

from collections import Counter

import h5py
import pytest
import torch

from conftest import bin_dir, mpirun_prefix, run_train
from pipeline_checks import max_rel, stop_rank_then_wait
from side_by_side import outcome, side_by_side

GPT = ["--model", "gpt2-tiny", "--context", "32", "--vocab", "256", "--lr", "0.01"]
RESNET = ["--model", "resnet18", "--width", "8", "--image-size", "32", "--num-classes", "10", "--lr", "0.01"]
# Small buckets, so that zero2 reduce-scatters many buckets (each padded to a multiple of the ranks)
# and a shard is made of parts of all of them.
BUCKETS = ["--bucket-mb", "0.05", "--first-bucket-mb", "0.01"]
# Elementwise optimizers over the same averaged gradients: equal up to the vectorised kernels'
# rounding (measured: bit-identical here).
TOL = 1e-6
# zero2 and zero3 reduce-scatter every micro-step and add the parts (FSDP2's and DeepSpeed's
# default), so with accumulation the sum over micro-steps and ranks runs in another order than
# DDP's: 6e-8 after 3 steps in fp32 and bf16, and under fp16 autocast the step-1 differences (1e-6
# in the loss) flip fp16 roundings in the next forwards: 1.9e-4 after 3 steps (measured). One step
# is within TOL (test_reduce_scatter_per_micro_step_adds_up_as_ddp).
TOL_FP16_ACCUM = 1e-3


def train(tmp_path, name, np_, args):
    """(final parameters, the run's HDF5 group as a dict of what the tests read, stdout)."""
    dump, out = tmp_path / f"{name}.pt", tmp_path / f"{name}.h5"
    r = run_train(np_, [*args, "--warmup-steps", "0", "--debug-dump", dump, "--output", out])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    with h5py.File(out) as f:
        (g,) = f["runs"].values()
        rec = {
            "shard": g.attrs["shard"],
            "state": list(g["optimizer_state_bytes"][()]),
            "gathered": int(g.attrs["gathered_bytes_per_step"]),
            "scattered": int(g.attrs["reduce_scattered_bytes_per_step"]),
            "params_held": list(g["param_bytes_resident"][()]),
            "params_peak": list(g["param_bytes_peak"][()]),
            "grads_held": list(g["grad_bytes_resident"][()]),
            "grads_peak": list(g["grad_bytes_peak"][()]),
            "buckets": list(g["bucket_bytes"][()]),
            "param_bytes": list(g["param_bytes"][()]) if "param_bytes" in g else None,
            "parameters": int(g.attrs["parameters"]),
            "skipped": list(g["skipped"][()]),
            "loss_scale": list(g["loss_scale"][()]),
            "attrs": dict(g.attrs),
        }
    params = {k: v for k, v in torch.load(dump, weights_only=False).items() if k.startswith("param.")}
    return params, rec, r.stdout


def flags(model, *extra, batch=2, steps=3):
    """A run's flags in one order (the model, small buckets, batch, steps, then the rest), so that
    tests asking for the same run get the same key in `runs`."""
    return [*model, *BUCKETS, "--batch", str(batch), "--steps", str(steps), *map(str, extra)]


ZERO3_OFF = ["--shard", "zero3", "--reshard-after-forward", "off"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """runs(ranks, flags): dtune-train launched once per distinct (ranks, flags) in this module.
    The tests read the same DDP and sharded runs for different properties (equal parameters,
    state, gradient and parameter memory): a run is not repeated for each."""
    base, done = tmp_path_factory.mktemp("runs"), {}

    def run(np_, args):
        key = (np_, tuple(map(str, args)))
        if key not in done:
            done[key] = train(base, f"run{len(done)}", np_, args)
        return done[key]

    return run


@pytest.mark.parametrize(
    "model, extra",
    [
        (GPT, ["--accum-steps", "2"]),
        (RESNET, []),
        (GPT, ["--optimizer", "adamw", "--weights-dtype", "bf16"]),
        (GPT, ["--precision", "fp16", "--accum-steps", "2", "--debug-plant-inf-step", "1"]),
    ],
    ids=["gpt-accum", "resnet", "gpt-adamw-bf16", "gpt-fp16-overflow"],
)
def test_zero1_and_zero2_train_as_ddp(runs, model, extra):
    args = flags(model, *extra)
    ddp, ddp_rec, _ = runs(2, args)
    fp16_accum = "fp16" in extra and "--accum-steps" in extra
    for mode in ("zero1", "zero2", "zero3"):
        got, rec, out = runs(2, [*args, "--shard", mode])
        assert rec["shard"] == mode and f"shard {mode}" in out
        assert max_rel(got, ddp) <= (TOL_FP16_ACCUM if fp16_accum and mode != "zero1" else TOL), mode
        # fp16: the planted overflow on rank 0 made every rank skip step 1 and halve the scale.
        assert rec["skipped"] == ddp_rec["skipped"] and rec["loss_scale"] == ddp_rec["loss_scale"]
    if "--debug-plant-inf-step" in extra:
        assert ddp_rec["skipped"] == [0, 1, 0]


def test_reduce_scatter_per_micro_step_adds_up_as_ddp(runs):
    """With accumulation zero2 and zero3 reduce-scatter each micro-step's gradients and add the
    parts: after one fp16 step (loss-scaled, 4 micro-steps) the parameters equal DDP's, which sums
    the micro-steps locally and reduces once, within TOL; and the gradient peak stays below what
    holding the model's gradients across micro-steps takes: the parts (S), the buckets in flight
    (at most N x S, as test_sharded_gradients_are_freed_as_they_are_reduced) and the incoming parts
    of a micro-step after the first (at most S), under (N + 2) x S; every .grad would be N x S more."""
    args = flags(GPT, "--precision", "fp16", "--accum-steps", "4", batch=1, steps=1)
    ddp, ddp_rec, _ = runs(2, args)
    for mode in ("zero2", "zero3"):
        got, rec, _ = runs(2, [*args, "--shard", mode])
        assert max_rel(got, ddp) <= TOL, mode
        assert rec["skipped"] == ddp_rec["skipped"] == [0]
        S = rec["scattered"]
        assert all(S + max(rec["buckets"]) <= peak <= 4 * S for peak in rec["grads_peak"]), (mode, rec, S)


def test_two_sharded_ranks_equal_one_process_with_double_batch(runs):
    one, _, _ = runs(1, flags(GPT, batch=4))
    for mode in ("zero1", "zero2", "zero3"):
        two, _, _ = runs(2, [*flags(GPT), "--shard", mode])
        assert max_rel(two, one) <= TOL, mode


@pytest.mark.parametrize("ranks", [2, 3])
def test_each_rank_holds_one_nth_of_the_optimizer_state(runs, ranks):
    """SGD's momentum (the default optimizer) is 4 bytes per parameter element; AdamW's two
    moments 8 and, with bf16 weights, the fp32 master 4 more (and 4 bytes of step count per tensor
    for DDP, one for a shard). A shard is ceil(P / N) elements (zero1) or the sum over buckets of
    ceil(bucket / N) (zero2): at most one element of padding per shard and bucket."""
    for opt, extra, per_elem in (("sgd", [], 4), ("adamw", ["--optimizer", "adamw", "--weights-dtype", "bf16"], 12)):
        args = flags(GPT, *extra)
        _, ddp, _ = runs(ranks, args)
        P = ddp["parameters"]
        assert ddp["state"][0] >= per_elem * P and ddp["gathered"] == 0
        for mode in ("zero1", "zero2"):
            _, rec, _ = runs(ranks, [*args, "--shard", mode])
            assert len(set(rec["state"])) == 1, rec["state"]  # equal shards
            steps = 4 if opt == "adamw" else 0  # AdamW's step count, one per shard
            assert (rec["state"][0] - steps) % per_elem == 0, rec["state"]
            shard = (rec["state"][0] - steps) // per_elem
            pad = 1 if mode == "zero1" else 64  # zero2: one per bucket, fewer than 64 buckets here
            assert P <= shard * ranks <= P + pad * ranks, (mode, opt, shard)
            # The gather brings the other N - 1 shards, in the weights' dtype.
            dtype_bytes = 2 if extra else 4
            assert rec["gathered"] == (ranks - 1) * shard * dtype_bytes
            # Between steps zero2 holds only its parts of the reduced gradients (the whole
            # gradients and the buckets are gone); zero1 holds DDP's.
            if mode == "zero2":
                assert rec["grads_held"][0] == rec["scattered"] == shard * dtype_bytes
            else:
                assert rec["grads_held"] == ddp["grads_held"] and rec["scattered"] == 0
            assert rec["params_held"][0] <= ddp["params_held"][0] + ranks * dtype_bytes


@pytest.mark.parametrize("model", [GPT, RESNET], ids=["gpt", "resnet"])
def test_zero3_holds_a_shard_of_parameters_gradients_and_state(runs, model):
    """Between steps a zero3 rank holds no gathered unit (its fp32 master shard is the parameters'
    only copy, counted with the optimizer state), 1/N of the reduced gradients and 1/N of the
    state: parameters + gradients + state at most 0.55x DDP's on 2 ranks (0.375x exactly but for
    padding: DDP 4 + 8 + 4 bytes per element, zero3 0 + 2 + 4). Both reshard settings train as DDP;
    with resharding (the default) every unit is gathered again for backward, so at least twice
    the bytes."""
    args = flags(model)
    ddp_params, ddp, _ = runs(2, args)
    total = {}
    for reshard, z3 in (("on", ["--shard", "zero3"]), ("off", ZERO3_OFF)):
        got, rec, _ = runs(2, [*args, *z3])
        assert rec["attrs"]["reshard_after_forward"] == (reshard == "on")
        assert max_rel(got, ddp_params) <= TOL, reshard
        assert rec["params_held"] == [0, 0]
        held = rec["params_held"][0] + rec["grads_held"][0] + rec["state"][0]
        ddp_held = ddp["params_held"][0] + ddp["grads_held"][0] + ddp["state"][0]
        assert held <= 0.55 * ddp_held, (held, ddp_held)
        total[reshard] = rec["gathered"]
    P = ddp["parameters"]
    # Each unit is gathered once in forward (the GPT's tied embedding held until the head has used
    # it, as FSDP2's root unit is) and, with resharding, once more in backward: exactly twice.
    assert total["off"] >= P * 4 // 2 and total["on"] == 2 * total["off"]


@pytest.mark.parametrize("model", [GPT, RESNET], ids=["gpt", "resnet"])
def test_sharded_gradients_are_freed_as_they_are_reduced(runs, model):
    """During backward DDP holds every gradient twice at its peak (the parameters' .grad and the
    buckets carrying them: 8 bytes per element). zero2 and zero3 drop each .grad as soon as autograd
    has set it (its value is in the bucket already), allocate a bucket when its first gradient
    arrives and let it go when its reduce-scatter is done: at any moment a rank holds its parts (S
    bytes, what it receives) plus the buckets not yet reduced, so its peak lies between S plus the
    largest bucket and S plus all of them (N x S with their padding). How many are in flight at
    once depends on the reducer's pace, so only these bounds are exact; holding every .grad as well
    (4P bytes more) is outside them."""
    ranks = 2
    args = flags(model)
    _, ddp, _ = runs(ranks, args)
    P = ddp["parameters"]
    assert ddp["grads_peak"] == [8 * P] * ranks, (ddp["grads_peak"], P)
    for mode in ("zero2", "zero3"):
        _, rec, _ = runs(ranks, [*args, "--shard", mode])
        S = rec["scattered"]
        assert P * 4 <= S * ranks <= P * 4 + 4 * ranks * len(rec["buckets"]), (mode, S)
        for peak in rec["grads_peak"]:
            assert S + max(rec["buckets"]) <= peak <= (ranks + 1) * S, (mode, peak, S, max(rec["buckets"]))


def test_zero3_frees_each_unit_after_the_backward_of_its_first_user(runs):
    """FSDP's post-backward reshard: with --reshard-after-forward on, a rank holds at most the units
    of the piece at hand plus those an earlier piece still needs and the prefetched ones. For a
    4-block GPT with its head tied to the embedding and --shard-prefetch 0 that peak is the
    embedding and one block (backward keeps the embedding from the head until the embedding's own
    backward), not the whole model that backward would gather back piece by piece if units were
    freed only when it ends; each unit of prefetch adds one block (forward gathers the next blocks
    while one computes, backward the previous ones). Without resharding forward leaves every unit
    gathered: the whole model, as DDP holds it. All train as DDP and gather the same bytes."""
    width, vocab, context, layers = 128, 256, 32, 4
    args = flags([*GPT, "--layers", str(layers)])
    ddp_params, ddp, _ = runs(2, args)
    P = ddp["parameters"]
    assert ddp["params_peak"] == ddp["params_held"] == [4 * P] * 2
    embedding, final_norm = (vocab + context) * width, 2 * width  # token + position; LayerNorm
    block = (P - embedding - final_norm) // layers
    assert embedding + layers * block + final_norm == P
    peak, gathered = {}, set()
    for reshard, prefetch in (("on", 0), ("on", 1), ("on", 2), ("off", 0)):
        z3 = ["--shard", "zero3", "--reshard-after-forward", reshard, "--shard-prefetch", str(prefetch)]
        got, rec, _ = runs(2, [*args, *z3])
        assert max_rel(got, ddp_params) <= TOL, (reshard, prefetch)
        assert rec["params_peak"][0] == rec["params_peak"][1], rec["params_peak"]
        peak[reshard, prefetch] = rec["params_peak"][0]
        if reshard == "on":
            gathered.add(rec["gathered"])
    # Each unit's buffer is padded to a multiple of the ranks: at most 1 element per rank and unit.
    for prefetch in (0, 1, 2):
        held = embedding + (1 + prefetch) * block
        assert 4 * held <= peak["on", prefetch] <= 4 * (held + 2 * (2 + prefetch)), (prefetch, peak)
    assert 4 * P <= peak["off", 0] <= 4 * (P + 2 * (layers + 2)), peak
    assert len(gathered) == 1, gathered  # prefetching moves the gathers, it adds none


def test_zero3_units_of_the_resnet_are_its_stages(runs):
    """A ResNet's units are its stages, as dtune-comm --pattern fsdp's "block" units and the issue
    have them (not its residual blocks): with resharding and no prefetch a rank's peak is its
    largest stage, layer4, exactly (its parameter count divides by the 2 ranks, so no padding);
    with one unit of prefetch (the default), layer4 and the stage gathered beside it, layer3."""
    args = flags(RESNET)
    ddp_params, _, _ = runs(2, args)
    stages = Counter()
    for name, t in ddp_params.items():
        if name.startswith("param.layer"):
            stages[name.split(".")[1]] += t.numel()
    assert sorted(stages) == ["layer1", "layer2", "layer3", "layer4"]
    for prefetch, held in ((0, stages["layer4"]), (1, stages["layer4"] + stages["layer3"])):
        z3 = ["--shard", "zero3", "--shard-prefetch", "0"] if prefetch == 0 else ["--shard", "zero3"]
        got, rec, _ = runs(2, [*args, *z3])
        assert rec["attrs"]["shard_prefetch"] == prefetch and rec["attrs"]["reshard_after_forward"] == 1
        assert max_rel(got, ddp_params) <= TOL
        assert rec["params_peak"] == [4 * held] * 2, (prefetch, rec["params_peak"], stages)


@pytest.mark.parametrize("model", [GPT, RESNET], ids=["gpt", "resnet"])
def test_zero3_units_of_a_size_are_cut_as_the_scaling_model_cuts_them(runs, model):
    """--shard-unit MiB: the parameters cut as gradient buckets are, every unit at most that size
    (a larger parameter a unit of its own): the units (one gradient bucket each, in backward order)
    are exactly report/dtune_report/scaling_model.py plan_buckets of the run's own parameter sizes
    with that cap, the one definition `dtune model --shard-unit-mb` plans with. They train as DDP,
    with and without prefetch. The ResNet's small units hold less at the peak than its stages do;
    the GPT's need not: the unit holding the tied embedding also holds the parameters cut with it
    (block 0's first ones) from the head's backward to the embedding's. (--bucket-mb does not
    cut zero3's units: they are the units' own plan.)"""
    from dtune_report.scaling_model import caps_bytes, plan_buckets

    args = [*flags(model), "--shard", "zero3"]
    ddp_params, _, _ = runs(2, flags(model))
    _, blocks, _ = runs(2, [*args, "--shard-prefetch", "0"])
    mib = 0.25 if model is GPT else 0.05
    for prefetch in (0, 1):
        z3 = ["--shard-unit", str(mib), "--shard-prefetch", str(prefetch)]
        got, rec, _ = runs(2, [*args, *z3])
        assert max_rel(got, ddp_params) <= TOL, prefetch
        param_bytes = rec["param_bytes"]
        assert rec["attrs"]["shard_unit"] == str(mib) and rec["attrs"]["shard_prefetch"] == prefetch
        cap = caps_bytes(mib, mib)[1]
        units = plan_buckets(param_bytes, cap, cap)
        want = [sum(param_bytes[k] for k in u) for u in units]
        assert rec["buckets"] == want, (rec["buckets"], want)
        assert len(want) > 10 and all(b <= cap or len(u) == 1 for b, u in zip(want, units))
        if prefetch == 0 and model is RESNET:
            assert rec["params_peak"][0] < blocks["params_peak"][0], (rec["params_peak"], blocks["params_peak"])


def test_a_stopped_rank_ends_a_sharded_run_within_the_timeout(tmp_path):
    exe = bin_dir() / "dtune-train"
    cmd = mpirun_prefix(2) + [str(exe), "--threads", "1", *GPT, *BUCKETS, "--batch", "2", "--steps", "100000"]
    cmd += ["--shard", "zero3", "--timeout", "3", "--output", str(tmp_path / "t.h5")]
    rc, err, took, _ = stop_rank_then_wait(cmd, settle_s=8, timeout_s=120)
    assert rc == 3, err
    assert took < 3 + 30, f"ended {took:.0f} s after the stop"
    assert "rank 1" in err, err
    with h5py.File(tmp_path / "t.h5") as f:
        (g,) = f["runs"].values()
        assert g.attrs["status"] == "timeout" and g.attrs["shard"] == "zero3"


REFUSED = [
    (["--shard", "zero1", "--local-sgd", "2"], ["--shard zero1", "--local-sgd"]),
    (["--shard", "zero2", "--batch", "auto", "--memory-limit-mb", "500"], ["--shard zero2", "--batch auto"]),
    # zero1 and zero2 run with pipeline stages (test_mesh_mpi.py); zero3 does not yet.
    (["--shard", "zero3", "--pipeline-stages", "2"], ["--pipeline-stages 2", "--shard zero3"]),
    (["--shard", "zero2", "--reduce-algo", "hierarchical"], ["--shard zero2", "--reduce-algo hierarchical"]),
    # Both modes reduce-scatter; hierarchical only all-reduces (zero3 died on an internal check).
    (["--shard", "zero3", "--reduce-algo", "hierarchical"], ["--shard zero3", "--reduce-algo hierarchical"]),
    (["--shard", "zero3", "--check-every", "1"], ["--shard zero3", "--check-every"]),
    (["--shard", "zero1", "--reshard-after-forward", "off"], ["--reshard-after-forward", "--shard zero1"]),
    (["--shard", "zero2", "--shard-unit", "4"], ["--shard-unit", "--shard zero2"]),
    (["--shard-prefetch", "2"], ["--shard-prefetch", "--shard none"]),
    (["--shard", "zero3", "--shard-unit", "0"], ["--shard-unit 0", "block", "MiB"]),
    (["--shard", "zero3", "--shard-unit", "4MB"], ["--shard-unit 4MB", "block", "MiB"]),
    # Past 2^63 bytes the cap wrapped and every parameter became its own unit.
    (["--shard", "zero3", "--shard-unit", "9e12"], ["--shard-unit 9e12", "1 PiB"]),
    (["--shard", "zero3", "--shard-prefetch", "-1"], ["--shard-prefetch"]),
    (["--shard", "zero9"], ["--shard"]),
]


@pytest.fixture(scope="module")
def refusals():
    """Every case launched before the first test reads it, four at a time (side_by_side.py)."""
    return side_by_side(
        lambda extra: run_train(2, [*GPT, "--steps", "1", "--no-output", *extra], timeout=120),
        [tuple(c[0]) for c in REFUSED],
    )


@pytest.mark.parametrize("extra, names", REFUSED)
def test_what_sharding_cannot_go_with_is_refused_in_one_line(refusals, extra, names):
    r = outcome(refusals, tuple(extra))
    assert r.returncode == 2, r.stdout + r.stderr
    line = next(x for x in r.stderr.splitlines() if x.startswith("dtune-train: error"))
    for n in names:
        assert n in line, line


def test_zero3_counts_every_byte_in_the_weights_element_size(runs):
    """The same units in bf16 and fp32 weights: the bytes gathered per step and the gathered
    parameters' peak are each exactly half in bf16 (same elements, padding included), and the
    gathered bytes are N - 1 ranks' parts of every unit, gathered once per step without
    resharding: sum over units of ceil(unit elements / 2) x the element size. Counted at 4 bytes an
    element, bf16 reported fp32's figures. (The gradient peak counts reductions still in flight
    when it is sampled, which depends on the communication thread's pace: not compared here.)"""
    recs = {}
    for dtype in ("fp32", "bf16"):
        extra = ["--weights-dtype", "bf16"] if dtype == "bf16" else []
        _, recs[dtype], _ = runs(2, [*flags(GPT, *extra), *ZERO3_OFF])
    for dtype, elem in (("fp32", 4), ("bf16", 2)):
        rec = recs[dtype]
        units = [b // elem for b in rec["buckets"]]
        assert rec["gathered"] == sum((n + 1) // 2 for n in units) * elem, (dtype, rec["gathered"], units)
    f32, b16 = recs["fp32"], recs["bf16"]
    assert f32["buckets"] == [2 * b for b in b16["buckets"]]
    assert f32["gathered"] == 2 * b16["gathered"]
    assert f32["params_peak"] == [2 * x for x in b16["params_peak"]]
