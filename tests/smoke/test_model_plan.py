"""`dtune model plan` (report/dtune_report/layouts.py): the shapes dtune-models gives it count the
published parameters and Megatron's cut; each figure of a plan against a value computed here by
hand on an input where a plausible wrong formula gives another (the compute split over the stages
with the head on the last, the 1F1B bubble and in-flight micro-batches, ZeRO's shares, the
tensor-parallel volume); what fits is kept and ranked; inputs it cannot use exit 2 with one line.
The bytes and parameters against real runs are in tests/mpi/test_llama_mpi.py."""

import subprocess
from pathlib import Path

import pytest

from conftest import bin_dir
from dtune_report.clusters import CLUSTERS
from dtune_report.layouts import Layout, Machine, ModelShape, Run, layouts, load_shape, plan, rank, stage_units, why
from dtune_report.projection import link_fits

REPO = Path(__file__).resolve().parents[2]
H100 = CLUSTERS["h100-ib400"]


def machine(nodes=2, mfu=0.4, memory_gb=80.0):
    fits = link_fits(H100, 2.0, 6.0, H100.nics_per_node)
    return Machine(nodes, 8, fits, H100.peak_tflops * 1e12 * mfu, memory_gb * 1e9, H100.peak_tflops * 1e12)


def dtune(*args):
    return subprocess.run(
        [str(REPO / "scripts" / "dtune"), *map(str, args)], capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def l8b():
    return load_shape("llama3.1-8b", bin_dir())


def test_the_shape_counts_the_published_parameters_and_megatrons_cut(l8b):
    # REFERENCE.md's Llama 3.1 8B: hidden 4096, 32 layers, 32 heads of 128, 8 KV heads, MLP 14336,
    # vocabulary 128,256, untied.
    h, kv, i, v = 4096, 8 * 128, 14336, 128256
    assert l8b.parameters == sum(u[1] for u in l8b.units) == 8_030_261_248
    assert (l8b.layers, l8b.width, l8b.heads, l8b.kv_heads, l8b.head_dim, l8b.mlp, l8b.vocab) == (
        32,
        h,
        32,
        8,
        128,
        i,
        v,
    )
    cut = 2 * h * h + 2 * h * kv + 3 * h * i  # q and o h², k and v h·KV·d, gate/up/down h·i
    assert l8b.units[1] == ("layers.0", cut + 2 * h, cut)  # the two norms whole
    assert l8b.units[0] == ("embed", v * h, v * h) and l8b.units[-1] == ("head", h + v * h, v * h)
    gpt = load_shape("gpt2-d12", bin_dir())
    c = 768  # c_attn 3C²+3C and c_fc 4C²+4C by columns, both projections' weights by rows
    assert gpt.units[1] == ("h.0", 12 * c * c + 13 * c, 12 * c * c + 7 * c)
    assert gpt.units[0][2] == 50304 * c  # wte cut, wpe whole


def test_compute_is_the_models_flops_cut_over_tp_with_the_head_on_the_last_stage(l8b):
    m, run = machine(), Run(64)
    flops = l8b.flops_per_sample
    whole = plan(l8b, Layout(16, 1, 1, "none", 4), run, m)
    assert whole.parts_ms["compute"] == pytest.approx(flops * 64 / 16 / m.flops_per_s * 1e3, rel=1e-12)
    tp2 = plan(l8b, Layout(8, 2, 1, "none", 8), run, m)
    assert tp2.parts_ms["compute"] == pytest.approx(whole.parts_ms["compute"], rel=1e-12)
    # Two stages of 16 blocks: the second holds the head (6·V·h·T a sample), so it is the slowest.
    head = 6 * 128256 * 4096 * 8192
    block = (flops - head) / 32
    pp2 = plan(l8b, Layout(8, 1, 2, "none", 8), run, m)
    assert pp2.parts_ms["compute"] == pytest.approx(8 * (16 * block + head) / m.flops_per_s * 1e3, rel=1e-12)
    # Its bubble: the first micro-batch through the first stage, with its sends; the other M - 1
    # wait on the slowest stage (not (P - 1)/(M + P - 1) of the step: the stages differ).
    first = 16 * block / m.flops_per_s * 1e3 + pp2.parts_ms["p2p"] / 8
    assert pp2.parts_ms["bubble"] == pytest.approx(first, rel=1e-12)
    assert [[u[0] for u in s] for s in stage_units(l8b, 2)] == [
        ["embed", *(f"layers.{k}" for k in range(16))],
        [*(f"layers.{k}" for k in range(16, 32)), "head"],
    ]
    full = plan(l8b, Layout(16, 1, 1, "none", 4, "full"), run, m)
    assert full.parts_ms["recompute"] == pytest.approx(4 * 32 * block / 3 / m.flops_per_s * 1e3, rel=1e-12)
    # MFU counts the model once: every rank's compute at 0.4 of peak, less for the exposed rest.
    assert whole.mfu == pytest.approx(0.4 * whole.parts_ms["compute"] / whole.step_ms, rel=1e-9)


def balanced(layers=8):
    """A model with no head: stages of equal blocks cost the same."""
    units = (("embed", 0, 0), *((f"layers.{k}", 1000, 1000) for k in range(layers)), ("head", 0, 0))
    return ModelShape("balanced", 1000 * layers, 6e12, False, layers, 64, 4, 4, 16, 256, 0, 128, units)


@pytest.mark.parametrize("stages,micro", [(2, 4), (4, 4), (4, 8), (4, 2)])
def test_the_bubble_is_the_first_micro_batch_through_the_other_stages(stages, micro):
    # Balanced stages: 1F1B's idle time is (P - 1) micro-batches' work with their sends, (P - 1)/M
    # of it (for M < P too: the pipeline never fills), not (P - 1)/(M + P - 1).
    p = plan(balanced(), Layout(1, 1, stages, "none", micro), Run(micro), machine(1))
    work = p.parts_ms["compute"] + p.parts_ms["p2p"]
    assert p.parts_ms["p2p"] > 0 and p.parts_ms["bubble"] == pytest.approx(work * (stages - 1) / micro, rel=1e-12)


def test_memory_counts_the_cut_zeros_shares_and_the_micro_batches_in_flight(l8b):
    run = Run(64, optimizer="adamw", weights="fp32", precision="bf16")
    layer_whole, layer_cut = 2 * 4096, l8b.units[1][2]
    stage = stage_units(l8b, 1)[0]
    elems = sum(n for _, n, _ in stage)
    p = plan(l8b, Layout(8, 2, 1, "none", 8), run, machine())
    cut = sum(c for _, _, c in stage)
    tp_elems = elems - cut + cut / 2
    assert layer_whole + layer_cut == l8b.units[1][1]
    assert p.memory["weights"] == pytest.approx(4 * tp_elems)
    assert p.memory["optimizer"] == pytest.approx(8 * tp_elems) and p.memory["cast"] == pytest.approx(2 * tp_elems)
    assert p.memory["grads"] == pytest.approx(2 * 4 * tp_elems)  # the parameters' and the buckets'
    z1 = plan(l8b, Layout(8, 2, 1, "zero1", 8), run, machine())
    assert z1.memory["optimizer"] == pytest.approx(8 * tp_elems / 8)
    assert z1.memory["weights"] == pytest.approx(4 * tp_elems)
    z3 = plan(l8b, Layout(8, 2, 1, "zero3", 8), run, machine())
    assert z3.memory["weights"] == pytest.approx(4 * tp_elems / 8)
    assert z3.memory["grads"] == pytest.approx(4 * tp_elems / 8 + 2 * (25 << 20))
    # 1F1B: the first stage holds P micro-batches' activations once M >= P, M of them before
    # (beside one block's working set in the backward).
    acts = {m: plan(l8b, Layout(1, 4, 4, "none", m), Run(m), machine(2)).memory["activations"] for m in (2, 4, 8)}
    # A block's micro-batch at tp 4 in bf16: norms 4h and the row-parallel outputs 2h whole, the
    # rest (q, k, v, attention out; gate, up, their product and SiLU) cut in 4.
    block = 8192 * 2 * (6 * 4096 + (2 * 32 * 128 + 2 * 8 * 128 + 4 * 14336) / 4)
    assert acts[4] == acts[8] == pytest.approx(4 * 8 * block + block) and acts[2] == pytest.approx(
        2 * 8 * block + block
    )
    # Sequence parallelism cuts the norms' 4h a token too.
    sp = plan(l8b, Layout(8, 2, 1, "none", 8, sp=True), run, machine())
    per_token_block = (4 * 4096 - 4 * 4096 / 2) * 2  # bf16
    assert p.memory["activations"] - sp.memory["activations"] == pytest.approx(32 * 8192 * per_token_block)


def test_tensor_parallel_time_is_four_ring_allreduces_a_block_on_nvlink(l8b):
    m = machine()
    p = plan(l8b, Layout(8, 2, 1, "none", 8), Run(64), m)
    n = 8192 * 4096 * 2  # (b, T, h) in bf16
    ring = 2 * (2 - 1) * 2e-6 + 2 * (2 - 1) / 2 * n / (H100.intra_busbw_gbps * 1e9)
    ce = 2 * 2e-6 + 8192 * 4 / (H100.intra_busbw_gbps * 1e9)
    assert p.parts_ms["tp"] == pytest.approx(8 * ((32 * 4 + 2) * ring + 3 * ce) * 1e3, rel=1e-9)
    assert p.tp_bytes == 8 * ((32 * 4 + 2) * n + 3 * 8192 * 4)


def test_layouts_refuse_what_dtune_train_refuses_and_rank_what_fits(l8b):
    found, refused = layouts(l8b, 16, Run(64), [1, 2, 3, 16], [1, 2], ["none", "zero3"], ["none"])
    assert ("tp3", "does not divide the heads, KV heads, MLP width") in refused
    assert ("tp16", "does not divide the KV heads") in refused  # 8 KV heads
    assert {(lo.dp, lo.tp, lo.pp) for lo in found} == {(16, 1, 1), (8, 1, 2), (8, 2, 1), (4, 2, 2)}
    assert all(lo.dp * lo.micro_batches == 64 for lo in found)
    plans = [plan(l8b, lo, Run(64), machine()) for lo in found]
    ok = rank(plans)
    assert [p.step_ms for p in ok] == sorted(p.step_ms for p in ok)
    assert {p.layout for p in ok} == {p.layout for p in plans if p.memory_bytes <= 80e9}
    assert len(ok) < len(plans)  # some do not fit in 80 GB
    text = why(ok[0], ok[1])
    assert text.startswith(f"{ok[0].layout.label()} beats {ok[1].layout.label()} by ")


def test_why_names_the_parts_that_differ(l8b):
    m = machine()
    dp = plan(l8b, Layout(16, 1, 1, "zero3", 4), Run(64), m)
    tp = plan(l8b, Layout(8, 2, 1, "zero3", 8), Run(64), m)
    first, second = (dp, tp) if dp.step_ms < tp.step_ms else (tp, dp)
    text = why(first, second)
    # The compute is the same; the tp all-reduces and ZeRO's gathers differ.
    assert "tensor-parallel all-reduces " in text and "ZeRO's parameter gathers " in text and "compute " not in text


def test_the_command_prints_the_plan_and_refuses_what_it_cannot_use():
    r = dtune("model", "plan", "--model", "llama3.1-8b", "--nodes", 2, "--global-batch", 64, "--top", 3)
    assert r.returncode == 0, r.stderr
    assert "# PLAN (arithmetic, not a measurement): llama3.1-8b (8,030,261,248 parameters)" in r.stdout
    assert r.stdout.count("\n     ") == 3 and "# first: dtune-train --model llama3.1-8b" in r.stdout
    for args, message in [
        (["--model", "resnet50"], "a ResNet has no tp or pp"),
        (["--model", "llama3.1-8b", "--tp", "3"], "tp3: does not divide the heads"),
        (["--model", "llama3.1-8b", "--memory-gb", "5"], "no layout fits in 5 GB a GPU"),
        (["--model", "nope"], "nope"),
        (["--model", "llama3.1-8b", "--global-batch", "0"], "--global-batch 0: give a positive number"),
        (["--model", "llama3.1-8b", "--memory-gb", "nan"], "--memory-gb nan: give a positive size"),
        (["--model", "llama3.1-8b", "--mfu", "nan"], "--mfu nan: give a fraction in (0, 1]"),
        (["--model", "llama3.1-8b", "--alpha-inter-us", "-1"], "--alpha-inter-us -1: give a latency"),
    ]:
        r = dtune("model", "plan", "--global-batch", 8, *args)
        assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
