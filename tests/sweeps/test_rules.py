"""Cross-flag rules at plan time (sweeps/dtune_sweep/rules.py): each rule of dtune-train and
dtune-comm flags its broken example and passes its repaired one; a sweep with points that break a
rule is refused by `plan` before any point runs, the message naming every such point (id and axis
values) and the rule; the shipped sweep files break none. That the binaries refuse the same
examples is checked against the built binaries in tests/smoke/test_new_user.py."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "sweeps")]

from dtune_sweep.rules import check_point, parse_args  # noqa: E402
from dtune_sweep.spec import Point, SweepError, check_rules, load, parse, plan  # noqa: E402
from dtune_sweep.spec import points as points_of  # noqa: E402

# (binary, ranks, broken args, the words the complaint must hold, repaired args)
CASES = [
    ("dtune-train", 2, "--bucket-mb 0.5", "--first-bucket-mb", "--bucket-mb 0.5 --first-bucket-mb 0.5"),
    ("dtune-train", 2, "--bucket-mb 4 --first-bucket-mb 8", "--first-bucket-mb (8)", "--bucket-mb 8"),
    ("dtune-train", 2, "--batch-sweep", "--batch-sweep", "--batch-sweep --batch auto --memory-limit-mb 99"),
    ("dtune-train", 2, "--global-batch 6 --accum-steps 2", "ranks (2)", "--global-batch 8 --accum-steps 2"),
    ("dtune-train", 2, "--batch auto --global-batch 8 --memory-limit-mb 9", "--global-batch", "--global-batch 8"),
    ("dtune-train", 2, "--backend nccl", "--device cuda", "--backend nccl --device cuda"),
    ("dtune-train", 2, "--precision tf32", "--device cuda", "--precision tf32 --device cuda"),
    # A pipeline over NCCL (the NCCL stage channel) needs only the GPU, as data parallelism does.
    (
        "dtune-train",
        2,
        "--pipeline-stages 2 --backend nccl",
        "--device cuda",
        "--pipeline-stages 2 --backend nccl --device cuda",
    ),
    (
        "dtune-train",
        2,
        "--reduce-algo hierarchical --backend nccl --device cuda",
        "--reduce-algo",
        "--reduce-algo hierarchical",
    ),
    ("dtune-train", 2, "--weights-dtype bf16 --precision fp16", "--weights-dtype", "--weights-dtype bf16"),
    ("dtune-train", 2, "--local-sgd 2 --accum-steps 2", "--local-sgd", "--local-sgd 2"),
    ("dtune-train", 2, "--batch auto", "--memory-limit-mb", "--batch auto --device cuda"),
    ("dtune-train", 2, "--cache-dir /tmp/c", "--data", "--cache-dir /tmp/c --data d"),
    ("dtune-train", 2, "--profile-steps 5:10", "--profile-steps", "--profile-steps 2:10"),
    ("dtune-train", 2, "--no-output", "--no-output", ""),
    ("dtune-train", 2, "--pipeline-stages 3", "--pipeline-stages (3)", "--pipeline-stages 2"),
    ("dtune-train", 2, "--virtual-stages 2", "--schedule interleaved", "--virtual-stages 1"),
    (
        "dtune-train",
        2,
        "--pipeline-stages 2 --schedule interleaved --virtual-stages 2 --micro-batches 3",
        "--micro-batches (3)",
        "--pipeline-stages 2 --schedule interleaved --virtual-stages 2 --micro-batches 4",
    ),
    (
        "dtune-train",
        2,
        "--pipeline-stages 2 --local-sgd 2 --data d --precision fp16 --reduce-algo hierarchical",
        "--local-sgd",
        "--pipeline-stages 2 --data d --precision fp16 --reduce-algo hierarchical",
    ),
    ("dtune-train", 2, "--micro-batches 2 --accum-steps 3", "--micro-batches", "--micro-batches 3 --accum-steps 3"),
    # Sharded data parallelism (--shard zero1|zero2): what dtune-train refuses with it.
    ("dtune-train", 2, "--shard zero1 --local-sgd 2", "--local-sgd", "--shard none --local-sgd 2"),
    (
        "dtune-train",
        2,
        "--shard zero2 --batch auto --memory-limit-mb 99",
        "--batch auto",
        "--batch auto --memory-limit-mb 99",
    ),
    (
        "dtune-train",
        2,
        "--shard zero2 --reduce-algo hierarchical",
        "--reduce-algo",
        "--shard zero1 --reduce-algo hierarchical",
    ),
    # zero1 and zero2 shard each stage over its data-parallel group; zero3 is refused with stages.
    ("dtune-train", 2, "--pipeline-stages 2 --shard zero3", "--shard zero3", "--pipeline-stages 2 --shard zero2"),
    ("dtune-train", 2, "--pp 2 --shard zero3", "--pp 2 does not go with --shard zero3", "--pp 2 --shard zero1"),
    # The mesh (train/mesh.h): --tp for the Llama family over MPI, --mesh-order a permutation,
    # --pp x --tp divides the ranks.
    ("dtune-train", 2, "--tp 2 --model resnet18", "--tp 2 with --model resnet18", "--tp 2 --model gpt2-tiny"),
    (
        "dtune-train",
        2,
        "--tp 2 --sequence-parallel",
        "--sequence-parallel with --model gpt2-tiny",
        "--tp 2 --model llama3-tiny --sequence-parallel",
    ),
    (
        "dtune-train",
        2,
        "--tp 2 --model llama3-tiny --local-sgd 2",
        "--tp 2 with --local-sgd",
        "--tp 2 --model llama3-tiny",
    ),
    (
        "dtune-train",
        2,
        "--activation-checkpoint full",
        "only the Llama family recomputes",
        "--activation-checkpoint full --model llama3-tiny",
    ),
    (
        "dtune-train",
        2,
        "--model llama3-tiny --activation-checkpoint most",
        "--activation-checkpoint most: choose none, full or selective",
        "--model llama3-tiny --activation-checkpoint selective",
    ),
    (
        "dtune-train",
        2,
        "--model llama3-tiny --sequence-parallel",
        "--sequence-parallel needs --tp 2",
        "--model llama3-tiny --sequence-parallel --tp 2",
    ),
    (
        "dtune-train",
        2,
        "--pp 2 --stage-pieces halves",
        "--stage-pieces halves: choose blocks or ends",
        "--pp 2 --stage-pieces ends",
    ),
    ("dtune-train", 2, "--mesh-order tp,pp", "--mesh-order 'tp,pp': give the axes", "--mesh-order tp,dp,pp"),
    ("dtune-train", 2, "--mesh-order tp,pp,pp", "--mesh-order 'tp,pp,pp'", "--mesh-order dp,pp,tp"),
    ("dtune-train", 4, "--pp 3", "--pp (3) must divide ranks (4)", "--pp 4"),
    (
        "dtune-train",
        2,
        "--pipeline-layout within-node --mesh-order tp,dp,pp",
        "--pipeline-layout within-node is --mesh-order tp,pp,dp, not tp,dp,pp",
        "--pipeline-layout across-nodes --mesh-order tp,dp,pp",
    ),
    (
        "dtune-train",
        2,
        "--shard zero3 --reduce-algo hierarchical",
        "--reduce-algo",
        "--shard zero1 --reduce-algo hierarchical",
    ),
    # The sharding flags' values, as dtune-train's parser takes them (rules.SHARD_NAMES and the rest).
    ("dtune-train", 2, "--shard zero9", "--shard zero9: give one of none, zero1, zero2, zero3", "--shard zero3"),
    (
        "dtune-train",
        2,
        "--shard zero3 --shard-unit 4MB",
        "--shard-unit 4MB: give block",
        "--shard zero3 --shard-unit 4",
    ),
    ("dtune-train", 2, "--shard zero3 --shard-unit 9e12", "--shard-unit 9e12", "--shard zero3 --shard-unit 9e5"),
    (
        "dtune-train",
        2,
        "--shard zero3 --shard-prefetch 65",
        "--shard-prefetch 65: give",
        "--shard zero3 --shard-prefetch 64",
    ),
    (
        "dtune-train",
        2,
        "--shard zero3 --reshard-after-forward yes",
        "--reshard-after-forward yes: give one of on, off",
        "--shard zero3 --reshard-after-forward off",
    ),
    ("dtune-comm", 2, "-b 1M -e 8", "-b (1M)", "-b 8 -e 1M"),
    ("dtune-comm", 2, "--minbytes 64K --maxbytes 1K", "-b (64K)", "--minbytes 1K --maxbytes 64K"),
    ("dtune-comm", 2, "-r 2", "-r (2)", "-r 1"),
    ("dtune-comm", 2, "--mpi-buffers device --backend nccl", "--mpi-buffers", "--backend nccl"),
    ("dtune-comm", 2, "--algorithm hierarchical --backend nccl", "--algorithm", "--algorithm hierarchical"),
    # --pattern fsdp (the calls of one FSDP step of --model): what dtune-comm refuses with it.
    ("dtune-comm", 2, "--pattern fsdp", "--model", "--pattern fsdp --model gpt2-tiny"),
    ("dtune-comm", 2, "--model gpt2-tiny", "--pattern fsdp", "--pattern fsdp --model gpt2-tiny"),
    ("dtune-comm", 2, "--pattern fsdp --model gpt2-tiny -b 8", "-b/--minbytes", "--pattern fsdp --model gpt2-tiny"),
    (
        "dtune-comm",
        2,
        "--pattern fsdp --model resnet50 --collective allreduce",
        "--collective",
        "--pattern fsdp --model resnet50",
    ),
    (
        "dtune-comm",
        2,
        "--pattern fsdp --model gpt2-tiny -d float16",
        "-d float16",
        "--pattern fsdp --model gpt2-tiny -d bf16",
    ),
    ("dtune-comm", 2, "--pattern fsdp --model gpt2-tiny --format csv", "--format", "--format csv"),
    (
        "dtune-comm",
        2,
        "--pattern fsdp --model gpt2-tiny --shard-unit 4MB",
        "--shard-unit 4MB",
        "--pattern fsdp --model gpt2-tiny --shard-unit 4",
    ),
    (
        "dtune-comm",
        2,
        "--pattern fsdp --model gpt2-tiny --reshard-after-forward 1",
        "--reshard-after-forward 1",
        "--pattern fsdp --model gpt2-tiny --reshard-after-forward on",
    ),
]


@pytest.mark.parametrize("binary,ranks,broken,words,fixed", CASES)
def test_each_rule_flags_its_broken_example_and_passes_the_fixed_one(binary, ranks, broken, words, fixed):
    bad = check_point(binary, broken.split(), ranks)
    assert len(bad) == 1 and words in bad[0], bad
    assert check_point(binary, fixed.split(), ranks) == []


@pytest.mark.parametrize(
    "bucket,first,breaks",
    [("9", "10", True), ("10", "9", False), ("2.5", "10", True), ("100", "25", False), ("1e1", "9", False)],
)
def test_the_first_bucket_rule_compares_numbers_not_text(bucket, first, breaks):
    # As text "10" < "9" and "100" < "25": the rule must read both flags as numbers.
    bad = check_point("dtune-train", ["--bucket-mb", bucket, "--first-bucket-mb", first], 2)
    assert bad == ([f"--first-bucket-mb ({first}) must be at most --bucket-mb ({bucket})"] if breaks else []), bad


def test_argument_parsing_takes_values_bare_flags_and_equals():
    assert parse_args(["--batch", "8", "--batch-sweep", "--bucket-mb=0.5", "-b", "-1"]) == {
        "--batch": "8",
        "--batch-sweep": True,
        "--bucket-mb": "0.5",
        "-b": "-1",
    }


def test_argument_parsing_keeps_an_equals_sign_in_the_value_and_skips_a_bare_word():
    # CLI11 splits --flag=value at the first '='; a bare word is no flag (and no flag's value when
    # the flag before it already took one).
    assert parse_args(["--data=s3://b/k=v", "--batch", "8", "stray", "--batch-sweep"]) == {
        "--data": "s3://b/k=v",
        "--batch": "8",
        "--batch-sweep": True,
    }


def test_plan_names_every_point_that_breaks_a_rule_before_running(tmp_path):
    f = tmp_path / "buckets.yaml"
    f.write_text(
        "name: buckets\nbinary: dtune-train\nargs: [--model, gpt2-tiny]\n"
        "axes: {--bucket-mb: [0.5, 1, 25], --precision: [fp32, bf16]}\nrepeats: 2\nlaunch: {ranks: 2}\n"
    )
    with pytest.raises(SweepError) as e:
        plan(str(f))
    text = str(e.value)
    first, *points = text.splitlines()
    assert first.startswith(f"{f}: buckets: 4 of 12 points") and "nothing was run" in first, first
    # each broken point once (repeats break the same rule), with its values and the rule
    assert len(points) == 2, text
    assert all("--bucket-mb 0.5" in p and "must be at most --bucket-mb (0.5)" in p for p in points), text
    # the ids are those of the sweep's points (expanded here without the rules)
    every = {p.id: p for p in points_of(parse(str(f), load(str(f))[0]))}
    named = [ln.split()[0] for ln in points]
    assert all(every[i].values["--bucket-mb"] == 0.5 and every[i].repeat == 0 for i in named), named
    assert {every[i].values["--precision"] for i in named} == {"fp32", "bf16"}
    assert not (tmp_path / "results").exists()


def test_a_fixed_argument_can_break_a_rule_for_every_point(tmp_path):
    f = tmp_path / "fixed.yaml"
    f.write_text(
        "name: b\nbinary: dtune-train\nargs: [--model, gpt2-tiny, --first-bucket-mb, 0.75]\n"
        "axes: {--bucket-mb: [0.5, 1]}\nlaunch: {ranks: 2}\n"
    )
    with pytest.raises(SweepError) as e:
        plan(str(f))
    assert "1 of 2 points" in str(e.value)
    assert "--first-bucket-mb (0.75) must be at most --bucket-mb (0.5)" in str(e.value)


@pytest.mark.parametrize("name", ["quickstart.yaml", "bucket-size.yaml"])
def test_shipped_sweeps_break_no_rule(name):
    assert plan(str(REPO / "sweeps" / name))


def test_a_shard_axis_plans_and_its_points_with_local_sgd_are_refused_until_excluded(tmp_path):
    # --shard is an axis like any flag of dtune-train; zero1 and zero2 with local SGD are refused
    # at plan time (as dtune-train refuses them), and the exclusions the README gives repair it.
    f = tmp_path / "shard.yaml"
    axes = "axes: {--shard: [none, zero1, zero2], --local-sgd: [0, 4]}\n"
    f.write_text("name: s\nbinary: dtune-train\nargs: [--model, gpt2-tiny]\n" + axes + "launch: {ranks: 2}\n")
    with pytest.raises(SweepError) as e:
        plan(str(f))
    first, *points = str(e.value).splitlines()
    assert "2 of 6 points" in first, first
    assert sorted(p.split("  ", 2)[2] for p in points) == [
        "--shard zero1 --local-sgd 4: --shard zero1 does not go with --local-sgd "
        "(local SGD keeps every rank's optimizer state)",
        "--shard zero2 --local-sgd 4: --shard zero2 does not go with --local-sgd "
        "(local SGD keeps every rank's optimizer state)",
    ], points
    exclude = "exclude: [{--shard: zero1, --local-sgd: 4}, {--shard: zero2, --local-sgd: 4}]\n"
    f.write_text(f.read_text() + exclude)
    pts = plan(str(f), known_flags={"dtune-train": {"--shard", "--local-sgd"}})
    assert [(p.values["--shard"], p.values["--local-sgd"]) for p in pts] == [
        ("none", 0),
        ("none", 4),
        ("zero1", 0),
        ("zero2", 0),
    ]


def test_the_sweeps_readme_example_plans(tmp_path):
    import re

    text = (REPO / "sweeps" / "README.md").read_text()
    f = tmp_path / "example.yaml"
    f.write_text(re.search(r"```yaml\n(.*?)```", text, flags=re.S).group(1))
    # 2 x 2 env (4), 4 workers, 2 batches x 2 precisions x 3 buckets - 3 excluded = 9, x 3 repeats = 27
    assert len(plan(str(f))) == 4 + 4 + 27


def test_launch_shape_ranks_computed_and_impossible_shapes_refused(tmp_path):
    # ranks left out: nodes x ranks_per_node (1 per node without it); the default launch stays 1.
    f = tmp_path / "launch.yaml"
    f.write_text("binary: dtune-comm\nlaunch: {nodes: [1, 2], ranks_per_node: [1, 2]}\n")
    assert [(p.ranks, p.nodes, p.ranks_per_node) for p in plan(str(f))] == [(1, 1, 1), (2, 1, 2), (2, 2, 1), (4, 2, 2)]
    f.write_text("binary: dtune-comm\nlaunch: {nodes: 2}\n")
    assert [(p.ranks, p.nodes) for p in plan(str(f))] == [(2, 2)]
    f.write_text("binary: dtune-comm\n")
    (p,) = plan(str(f))
    assert (p.ranks, p.nodes, p.ranks_per_node) == (1, 1, 0)
    # Impossible shapes: named point by point before anything runs (exit 2 from the command).
    for launch, words in (
        ("{ranks: 1, nodes: 2}", "ranks 1 on nodes 2: every node needs at least one rank"),
        ("{ranks: 3, nodes: 2, ranks_per_node: 2}", "ranks 3 is not nodes 2 x ranks_per_node 2 (= 4)"),
    ):
        f.write_text(f"binary: dtune-comm\nlaunch: {launch}\n")
        with pytest.raises(SweepError) as e:
            plan(str(f))
        assert "1 of 1 points" in str(e.value) and words in str(e.value), str(e.value)
    # A product of launch axes: the impossible combinations are named, and an exclude repairs it.
    f.write_text("binary: dtune-comm\nlaunch: {ranks: [2, 4], nodes: [1, 2], ranks_per_node: 2}\n")
    with pytest.raises(SweepError) as e:
        plan(str(f))
    assert "2 of 4 points" in str(e.value) and "ranks 4 nodes 1 ranks_per_node 2" in str(e.value)
    f.write_text(
        "binary: dtune-comm\nlaunch: {ranks: [2, 4], nodes: [1, 2], ranks_per_node: 2}\n"
        "exclude: [{ranks: 4, nodes: 1}, {ranks: 2, nodes: 2}]\n"
    )
    assert [(p.ranks, p.nodes) for p in plan(str(f))] == [(2, 1), (4, 2)]


# What the planner tells a user to change, word for word (the CASES above check only a few words).
EXACT = [
    ("dtune-train", 2, "--bucket-mb 0.25", ["--first-bucket-mb (default 1) must be at most --bucket-mb (0.25)"]),
    ("dtune-train", 2, "--batch-sweep", ["--batch-sweep needs --batch auto"]),
    (
        "dtune-train",
        2,
        "--micro-batches 2 --accum-steps 3",
        ["--micro-batches and --accum-steps differ: they are the same; keep one"],
    ),
    ("dtune-train", 2, "--virtual-stages 2", ["--virtual-stages > 1 needs --schedule interleaved"]),
    (
        "dtune-train",
        2,
        "--pipeline-stages 2 --schedule interleaved --virtual-stages 1 --micro-batches 2",
        ["--schedule interleaved needs --virtual-stages 2 or more"],
    ),
    (
        "dtune-train",
        2,
        "--pipeline-stages 2 --schedule interleaved --virtual-stages 2 --accum-steps 3",
        ["--schedule interleaved needs --micro-batches (3) a multiple of --pipeline-stages"],
    ),
    (
        "dtune-train",
        2,
        "--batch auto --global-batch 8 --memory-limit-mb 9",
        ["--global-batch and --batch auto both given: keep one"],
    ),
    (
        "dtune-train",
        2,
        "--global-batch 7",
        ["--global-batch (7) must divide by data-parallel ranks (2) x --accum-steps (default 1)"],
    ),
    # The data-parallel ranks are the ranks over the pipeline's stages when the stages divide them.
    ("dtune-train", 4, "--pipeline-stages 2 --global-batch 2", []),
    (
        "dtune-train",
        4,
        "--pipeline-stages 3 --global-batch 2",
        [
            "--pipeline-stages (3) must divide ranks (4)",
            "--global-batch (2) must divide by data-parallel ranks (4) x --accum-steps (default 1)",
        ],
    ),
    ("dtune-train", 2, "--backend nccl", ["--backend nccl needs --device cuda"]),
    (
        "dtune-train",
        2,
        "--reduce-algo hierarchical --backend nccl --device cuda",
        ["--reduce-algo hierarchical is for --backend mpi"],
    ),
    ("dtune-train", 2, "--precision tf32", ["--precision tf32 needs --device cuda"]),
    (
        "dtune-train",
        2,
        "--weights-dtype bf16 --precision fp16",
        ["--weights-dtype bf16 does not go with --precision fp16 (use --precision bf16)"],
    ),
    ("dtune-train", 2, "--local-sgd 1 --accum-steps 2", ["--local-sgd does not go with --accum-steps > 1"]),
    ("dtune-train", 2, "--batch auto", ["--batch auto on CPU needs --memory-limit-mb"]),
    ("dtune-train", 2, "--cache-dir /tmp/c", ["--cache-dir needs --data (a dataset, not synthetic)"]),
    (
        "dtune-train",
        2,
        "--pipeline-stages 2 --local-sgd 1 --data d",
        ["--pipeline-stages 2 does not go with --local-sgd 1"],
    ),
    (
        "dtune-train",
        2,
        "--pipeline-stages 2 --batch auto --device cuda",
        ["--pipeline-stages 2 does not go with --batch auto"],
    ),
    (
        "dtune-train",
        2,
        "--shard zero1 --local-sgd 2",
        ["--shard zero1 does not go with --local-sgd (local SGD keeps every rank's optimizer state)"],
    ),
    (
        "dtune-train",
        2,
        "--shard zero2 --batch auto --device cuda",
        ["--shard zero2 does not go with --batch auto (the batch finder probes unsharded)"],
    ),
    (
        "dtune-train",
        2,
        "--shard zero2 --reduce-algo hierarchical",
        ["--shard zero2 does not go with --reduce-algo hierarchical (it all-reduces)"],
    ),
    ("dtune-train", 2, "--pipeline-stages 2 --shard zero2", []),
    ("dtune-train", 2, "--pipeline-stages 2 --shard zero3", ["--pipeline-stages 2 does not go with --shard zero3"]),
    # zero3 with pipeline stages: a stage's units from its one chunk, so no tied embedding (GPT-2) and
    # no interleaved chunks; a ResNet on 1F1B runs.
    ("dtune-train", 2, "--pipeline-stages 2 --shard zero3 --model resnet18", []),
    # The Llamas: llama3.2-1b and -3b tie their head to the token embedding (refused), the others not.
    *[
        (
            "dtune-train",
            2,
            f"--pipeline-stages 2 --shard zero3 --model {m}",
            ["--pipeline-stages 2 does not go with --shard zero3"],
        )
        for m in ("llama3.2-1b", "llama3.2-3b")
    ],
    *[
        ("dtune-train", 2, f"--pipeline-stages 2 --shard zero3 --model {m}", [])
        for m in ("llama3-tiny", "llama3.1-8b", "llama3.1-70b", "llama3.1-405b")
    ],
    (
        "dtune-train",
        2,
        "--pipeline-stages 2 --shard zero3 --model resnet18 --schedule interleaved --virtual-stages 2"
        " --micro-batches 2",
        ["--pipeline-stages 2 does not go with --shard zero3"],
    ),
    # Every complaint of a point that breaks several: the local SGD one twice (with the pipeline too).
    (
        "dtune-train",
        2,
        "--pipeline-stages 2 --shard zero3 --local-sgd 1",
        [
            "--shard zero3 does not go with --local-sgd (local SGD keeps every rank's optimizer state)",
            "--pipeline-stages 2 does not go with --local-sgd 1",
            "--pipeline-stages 2 does not go with --shard zero3",
        ],
    ),
    # DDP, given or by default, and zero1 with the hierarchical algorithm: accepted, as dtune-train does.
    (
        "dtune-train",
        2,
        "--shard none --local-sgd 2 --pipeline-stages 2 --data d",
        ["--pipeline-stages 2 does not go with --local-sgd 2"],
    ),
    ("dtune-train", 2, "--shard zero1 --reduce-algo hierarchical --accum-steps 2", []),
    (
        "dtune-train",
        2,
        "--shard zero3 --local-sgd 2",
        ["--shard zero3 does not go with --local-sgd (local SGD keeps every rank's optimizer state)"],
    ),
    (
        "dtune-train",
        2,
        "--shard zero3 --reduce-algo hierarchical --check-every 2 --channels-last",
        [
            "--shard zero3 does not go with --reduce-algo hierarchical (it all-reduces)",
            "--shard zero3 does not go with --check-every (the parameters are sharded between steps)",
            "--shard zero3 does not go with --channels-last (a unit's parameters are one flat buffer)",
        ],
    ),
    ("dtune-train", 2, "--shard zero3 --check-every 0 --reshard-after-forward off", []),
    (
        "dtune-train",
        2,
        "--shard zero2 --reshard-after-forward on",
        ["--reshard-after-forward needs --shard zero3 (not zero2)"],
    ),
    ("dtune-train", 2, "--reshard-after-forward on", ["--reshard-after-forward needs --shard zero3 (not none)"]),
    ("dtune-train", 2, "--shard zero3 --shard-unit 4 --shard-prefetch 2", []),
    (
        "dtune-train",
        2,
        "--shard zero1 --shard-unit 4 --shard-prefetch 0",
        ["--shard-unit needs --shard zero3 (not zero1)", "--shard-prefetch needs --shard zero3 (not zero1)"],
    ),
    # Not a mode: refused as dtune-train's parser refuses it, and no cross-flag rule read on top of it.
    (
        "dtune-train",
        2,
        "--shard zero9 --local-sgd 2 --shard-unit 4",
        ["--shard zero9: give one of none, zero1, zero2, zero3"],
    ),
    (
        "dtune-train",
        2,
        "--warmup-steps 0 --profile-steps 6:5",
        ["--profile-steps 6:5 goes past the last step (10 steps)"],
    ),
    ("dtune-train", 2, "--warmup-steps 0 --profile-steps 5:5", []),
    ("dtune-train", 2, "--steps 0 --profile-steps 1:2", ["--profile-steps 1:2 goes past the last step (2 steps)"]),
    # Interleaving on one stage changes nothing: dtune-train accepts it (options.cc returns at P == 1).
    ("dtune-train", 2, "--schedule interleaved", []),
    ("dtune-train", 2, "--pipeline-stages 2 --schedule interleaved --virtual-stages 2 --micro-batches 2", []),
    ("dtune-comm", 2, "-r 2", ["-r (2) must be a rank, 0..1"]),
    ("dtune-comm", 2, "--mpi-buffers device --backend nccl", ["--mpi-buffers device is for --backend mpi"]),
    ("dtune-comm", 2, "--algorithm hierarchical --backend nccl", ["--algorithm hierarchical is for --backend mpi"]),
    ("dtune-train", 2, "--no-output", ["--no-output: the sweep runner writes each point's results file"]),
    # Every complaint, the runner's first: one line per rule broken.
    (
        "dtune-comm",
        2,
        "-b 2M -e 1M --no-output",
        ["--no-output: the sweep runner writes each point's results file", "-b (2M) must be at most -e (1M)"],
    ),
    (
        "dtune-train",
        2,
        "--decode full --fast-decode",
        ["--fast-decode needs --decode roi (it scales the region decode)"],
    ),
    (
        "dtune-train",
        2,
        "--decode nvjpeg --fast-decode",
        ["--fast-decode needs --decode roi (it scales the region decode)"],
    ),
    ("dtune-train", 2, "--fast-decode", []),
    # dtune-comm --pattern fsdp (benchmarks/comm/options.cc check_pattern) and --shard zero3.
    ("dtune-comm", 2, "--pattern fsdp", ["--pattern fsdp needs --model"]),
    ("dtune-comm", 2, "--pattern fsdp --model gpt2-tiny", []),
    (
        "dtune-comm",
        2,
        "--pattern fsdp --model gpt2-tiny --minbytes 8",
        ["-b/--minbytes does not apply to --pattern fsdp"],
    ),
    (
        "dtune-comm",
        2,
        "--pattern fsdp --model gpt2-tiny --algorithm hierarchical",
        ["--algorithm hierarchical does not apply to --pattern fsdp (no allreduce)"],
    ),
    (
        "dtune-comm",
        2,
        "--pattern fsdp --model gpt2-tiny --format json",
        ["--pattern fsdp prints a table only (no --format json or csv)"],
    ),
    (
        "dtune-comm",
        2,
        "--pattern fsdp --model gpt2-tiny --datatype float16",
        ["-d float16: --pattern fsdp takes one of float32 and bfloat16"],
    ),
    ("dtune-comm", 2, "--pattern fsdp --model gpt2-tiny --datatype bfloat16", []),
    (
        "dtune-train",
        2,
        "--shard zero3 --check-every 1",
        ["--shard zero3 does not go with --check-every (the parameters are sharded between steps)"],
    ),
    ("dtune-train", 2, "--shard zero3 --check-every 0", []),
]


@pytest.mark.parametrize("binary,ranks,args,expect", EXACT)
def test_each_rule_says_exactly_what_to_change(binary, ranks, args, expect):
    assert check_point(binary, args.split(), ranks) == expect


@pytest.mark.parametrize(
    "config,refused",
    [
        ('{"tie_word_embeddings": true}', True),
        ('{"tie_word_embeddings": false}', False),
        ("{}", False),  # LlamaConfig's default: untied
    ],
)
def test_an_hf_config_with_tied_embeddings_is_refused_with_zero3_stages(tmp_path, config, refused):
    # --model hf:PATH, PATH the config.json or its directory; a file that is not there (or not a
    # JSON object) is left to dtune-train, which names what is wrong with it.
    (tmp_path / "config.json").write_text(config)
    expect = ["--pipeline-stages 2 does not go with --shard zero3"] if refused else []
    for path in (tmp_path, tmp_path / "config.json"):
        assert check_point("dtune-train", f"--pipeline-stages 2 --shard zero3 --model hf:{path}".split(), 2) == expect
        assert check_point("dtune-train", f"--pipeline-stages 2 --shard zero2 --model hf:{path}".split(), 2) == []
    (tmp_path / "bad.json").write_text("[1")
    for unread in (tmp_path / "none", tmp_path / "bad.json"):
        assert check_point("dtune-train", f"--pipeline-stages 2 --shard zero3 --model hf:{unread}".split(), 2) == []


def test_the_micro_batches_count_in_the_global_batch_rule():
    # 4 samples over 2 ranks x 3 micro-batches does not divide (over 2 ranks x 1 it would).
    (bad,) = check_point("dtune-train", "--global-batch 4 --micro-batches 3".split(), 2)
    assert bad == "--global-batch (4) must divide by data-parallel ranks (2) x --micro-batches (3)"


@pytest.mark.parametrize(
    "lo,hi,ok",
    [
        ("2MB", "1MB", False),
        ("2MiB", "1MiB", False),
        ("2G", "1G", False),
        ("1G", "2G", True),
        ("1MiB", "1M", True),  # K/M/G are powers of 2 with or without iB/B, in either case
        ("1mb", "1024kb", True),
    ],
)
def test_sizes_read_as_dtune_comm_reads_them(lo, hi, ok):
    bad = check_point("dtune-comm", ["-b", lo, "-e", hi], 2)
    assert bad == ([] if ok else [f"-b ({lo}) must be at most -e ({hi})"])


@pytest.mark.parametrize(
    "flag,value,ok",
    [
        # --shard-unit: block, or what C's strtod reads whole, in (0, 1 PiB] (models/shard_unit.cc)
        ("--shard-unit", "block", True),
        ("--shard-unit", "0.5", True),
        ("--shard-unit", "1e3", True),
        ("--shard-unit", "0x10", True),
        ("--shard-unit", " 4", True),  # strtod skips leading white space
        ("--shard-unit", "1073741824", True),
        ("--shard-unit", "1073741825", False),
        ("--shard-unit", "9e12", False),  # the size cap's overflow (issue 60, 15)
        ("--shard-unit", "4MB", False),
        ("--shard-unit", "4M", False),
        ("--shard-unit", "4 ", False),
        ("--shard-unit", "0", False),
        ("--shard-unit", "-1", False),
        ("--shard-unit", "inf", False),
        ("--shard-unit", "nan", False),
        ("--shard-unit", "1_000", False),  # Python's float() reads it; strtod does not
        ("--shard-unit", "Block", False),
        # --shard-prefetch: what strtoll(base 0) reads whole, in CLI::Range(0, 64)
        ("--shard-prefetch", "0", True),
        ("--shard-prefetch", "64", True),
        ("--shard-prefetch", "0x40", True),
        ("--shard-prefetch", "0100", True),  # octal 64
        ("--shard-prefetch", "0101", False),  # octal 65
        ("--shard-prefetch", "65", False),
        ("--shard-prefetch", "-1", False),
        ("--shard-prefetch", "1.5", False),
        ("--shard-prefetch", "two", False),
        ("--shard", "none", True),
        ("--shard", "ZERO3", False),
        ("--shard", "zero4", False),
    ],
)
def test_sharding_values_read_as_dtune_train_reads_them(flag, value, ok):
    args = ["--shard", value] if flag == "--shard" else ["--shard", "zero3", flag, value]
    bad = check_point("dtune-train", args, 2)
    assert bad == [] if ok else len(bad) == 1 and bad[0].startswith(f"{flag} {value}: give "), bad


def test_plan_refuses_bad_sharding_values_naming_each_point_and_value(tmp_path):
    """`dtune sweep plan` exits 2 on values dtune-train would refuse only at launch."""

    def plan_cli(text):
        f = tmp_path / "s.yaml"
        f.write_text(text)
        cmd = [str(REPO / "scripts" / "dtune"), "sweep", "plan", str(f)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert r.returncode == 2, r.stdout + r.stderr
        return r.stderr.splitlines()

    lines = plan_cli(
        "binary: dtune-train\nargs: [--shard, zero3]\naxes: {--shard-unit: [block, 4MB], --shard-prefetch: [1, 65]}\n"
    )
    assert "3 of 4 points" in lines[0] and len(lines) == 4, lines
    assert sum("--shard-unit 4MB: give block" in ln for ln in lines) == 2, lines
    assert sum("--shard-prefetch 65: give a whole number of units from 0 to 64" in ln for ln in lines) == 2, lines
    for ln in lines[1:]:
        assert re.match(r"  [0-9a-f]{12}  --shard-unit \S+ --shard-prefetch \S+: ", ln), ln
    lines = plan_cli("binary: dtune-train\naxes: {--shard: [zero3, zero9]}\n")
    assert "1 of 2 points" in lines[0] and len(lines) == 2, lines
    assert re.fullmatch(
        r"  [0-9a-f]{12}  --shard zero9: --shard zero9: give one of none, zero1, zero2, zero3", lines[1]
    )


@pytest.mark.parametrize(
    "args",
    ["--pipeline-stages 0", "--pipeline-stages x --global-batch 4", "--global-batch 8 --accum-steps 0"],
)
def test_values_only_the_binary_can_refuse_are_left_to_it(args):
    """Not numbers, or zero where the rules divide: the binary's own parser says what is wrong
    (exit 2); the rules neither crash on them nor invent a complaint."""
    assert check_point("dtune-train", args.split(), 2) == []
    assert check_point("dtune-comm", ["-b", "big", "-e", "1M"], 2) == []


# The plan itself (spec.py): point ids, axes of bare flags, the flag check, exclusions and order.


def planned(tmp_path, text, **kw):
    f = tmp_path / "s.yaml"
    f.write_text(text)
    return plan(str(f), **kw), f


def test_a_point_id_hashes_its_definition_and_manifests_record_it():
    """Resume and merge find a point by its id across versions: the hash of its definition."""
    p = Point("s", "dtune-comm", ["-b", 8], {"NCCL_ALGO": "Ring"}, 2, 1, 0, 0, {"-b": 8})
    assert p.id == "6741e75f73bf"
    assert p.to_json() == {
        "id": "6741e75f73bf",
        "sweep": "s",
        "binary": "dtune-comm",
        "args": ["-b", "8"],
        "env": {"NCCL_ALGO": "Ring"},
        "ranks": 2,
        "nodes": 1,
        "ranks_per_node": 0,
        "repeat": 0,
        "values": {"-b": 8},
    }
    assert Point("s", "dtune-comm", ["-b", 8], {"NCCL_ALGO": "Ring"}, 2, 1, 0, 1).id != p.id  # a repeat


def test_an_axis_of_true_and_false_adds_the_bare_flag_or_nothing(tmp_path):
    pts, _ = planned(
        tmp_path, "name: t\nbinary: dtune-train\naxes: {--channels-last: [true, false], --batch: [2, 4]}\n"
    )
    assert [p.args for p in pts] == [
        ["--channels-last", "--batch", "2"],
        ["--channels-last", "--batch", "4"],
        ["--batch", "2"],
        ["--batch", "4"],
    ]


def test_axes_must_be_flags_of_the_binary_when_its_flags_are_known(tmp_path):
    text = "name: t\nbinary: dtune-train\naxes: {--batch: [2, 4]}\n"
    with pytest.raises(SweepError) as e:
        planned(tmp_path, text, known_flags={"dtune-train": {"--steps"}})
    assert (
        str(e.value)
        == f"{tmp_path / 's.yaml'}: axes.--batch: unknown axis '--batch' (not a flag of dtune-train; see its --help)"
    )
    assert len(planned(tmp_path, text, known_flags={"dtune-train": {"--batch"}})[0]) == 2
    assert len(planned(tmp_path, text, known_flags={"dtune-comm": {"--steps"}})[0]) == 2  # dtune-train not built
    assert len(planned(tmp_path, text, known_flags=lambda: {})[0]) == 2


def test_exclusions_drop_their_points_and_an_empty_plan_names_the_rule(tmp_path):
    pts, _ = planned(tmp_path, "name: t\nbinary: dtune-train\naxes: {--batch: [2, 4, 8]}\nexclude: [{--batch: 4}]\n")
    assert [p.values["--batch"] for p in pts] == [2, 8]
    with pytest.raises(SweepError) as e:
        planned(
            tmp_path, "name: t\nbinary: dtune-train\naxes: {--batch: [2, 4]}\nexclude: [{--batch: 2}, {--batch: 4}]\n"
        )
    assert str(e.value) == f"{tmp_path / 's.yaml'}: exclude: no points left after the exclusions; remove a rule"


def test_a_constraint_that_cannot_be_evaluated_names_its_place(tmp_path):
    with pytest.raises(SweepError) as e:
        planned(tmp_path, "name: t\nbinary: dtune-train\naxes: {--batch: [auto, 4]}\nconstraints: ['--batch <= 4']\n")
    assert str(e.value) == f"{tmp_path / 's.yaml'}: constraints: '--batch <= 4': auto is not a number"


def test_random_order_is_the_seeds(tmp_path):
    text = "name: t\nbinary: dtune-train\naxes: {--batch: [1, 2, 3, 4, 5, 6, 7, 8]}\norder: random\nseed: 3\n"
    assert [p.values["--batch"] for p in planned(tmp_path, text)[0]] == [1, 6, 8, 3, 2, 7, 5, 4]
    text = text.replace("seed: 3", "seed: 4")
    assert [p.values["--batch"] for p in planned(tmp_path, text)[0]] != [1, 6, 8, 3, 2, 7, 5, 4]


def test_rule_breaks_listed_once_per_point_up_to_a_limit(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("name: t\nbinary: dtune-train\naxes: {--bucket-mb: [0.1, 0.2, 0.3, 0.4]}\nrepeats: 2\n")
    sw = parse(str(f), load(str(f))[0])
    pts = points_of(sw)
    with pytest.raises(SweepError) as e:
        check_rules(sw, pts, show=2)
    first, *rest = str(e.value).splitlines()
    assert first.startswith(f"{f}: t: 8 of 8 points of sweep 't' break dtune-train's cross-flag rules")
    assert rest == [
        f"  {pts[0].id}  --bucket-mb 0.1: --first-bucket-mb (default 1) must be at most --bucket-mb (0.1)",
        f"  {pts[2].id}  --bucket-mb 0.2: --first-bucket-mb (default 1) must be at most --bucket-mb (0.2)",
        "  ... 2 more",
    ]
    with pytest.raises(SweepError) as e:
        check_rules(sw, pts, show=4)
    assert "more" not in str(e.value) and len(str(e.value).splitlines()) == 5
    # No axis values to show: the fixed arguments break the rule; two rules joined with '; '.
    f.write_text("name: t\nbinary: dtune-train\nargs: [--bucket-mb, '0.5', --precision, tf32]\n")
    with pytest.raises(SweepError) as e:
        plan(str(f))
    assert (
        str(e.value)
        .splitlines()[1]
        .endswith(
            "  (fixed args): --first-bucket-mb (default 1) must be at most --bucket-mb (0.5); "
            "--precision tf32 needs --device cuda"
        )
    )


# The device mesh (issue 56): --pp is --pipeline-stages, --tp the transformers', --mesh-order a permutation of
# tp,pp,dp, and the data-parallel degree the ranks over pp x tp; messages as dtune-train's
# (benchmarks/train/options.cc parse_mesh, train/mesh.cc).
TP_LLAMA = "tensor parallelism splits the transformers' layers (gpt2-*, llama3-*, hf:PATH); give --tp 1"
MESH_EXACT = [
    ("--tp 2", 4, []),
    ("--tp 2 --model resnet50", 4, ["--tp 2 with --model resnet50: " + TP_LLAMA]),
    ("--tp 2 --model llama3-tiny", 4, []),
    ("--tp 2 --model hf:/m/config.json --pp 2", 4, []),
    (
        "--tp 2 --model llama3-tiny --backend nccl --device cuda",
        4,
        ["--tp 2 with --backend nccl: the tp group's collectives run over MPI only so far; use --backend mpi"],
    ),
    ("--tp 0", 4, ["--tp 0: give a whole number of tensor-parallel ranks, 1 or more"]),
    ("--tp", 4, ["--tp: give a whole number of tensor-parallel ranks, 1 or more"]),
    ("--tp 1 --pp 2", 4, []),
    (
        "--mesh-order tp,pp,dp,",
        4,
        [
            "--mesh-order 'tp,pp,dp,': give the axes tp, pp and dp once each, innermost first, "
            "e.g. tp,pp,dp (the default) or tp,dp,pp"
        ],
    ),
    (
        "--mesh-order TP,PP,DP",
        4,
        [
            "--mesh-order 'TP,PP,DP': give the axes tp, pp and dp once each, innermost first, "
            "e.g. tp,pp,dp (the default) or tp,dp,pp"
        ],
    ),
    (
        "--mesh-order",
        4,
        [
            "--mesh-order: give the axes tp, pp and dp once each, innermost first, "
            "e.g. tp,pp,dp (the default) or tp,dp,pp"
        ],
    ),
    ("--mesh-order pp,dp,tp --pp 2", 4, []),
    # --pipeline-layout beside --mesh-order: the same order as written, or refused.
    ("--pipeline-layout across-nodes --mesh-order tp,dp,pp", 4, []),
    ("--pipeline-layout across-nodes --pp 2", 4, []),
    (
        "--pipeline-layout across-nodes --mesh-order tp,pp,dp",
        4,
        ["--pipeline-layout across-nodes is --mesh-order tp,dp,pp, not tp,pp,dp: give one of the two"],
    ),
    (
        # both spellings: refused, and the rules read --pipeline-stages's value (3 does not divide 4)
        "--pp 2 --pipeline-stages 3",
        4,
        [
            "--pp and --pipeline-stages are one option (the pipeline's stages): give it once",
            "--pipeline-stages (3) must divide ranks (4)",
        ],
    ),
    # --pp counts as the stages: in the ranks' divisibility, the data-parallel degree of
    # --global-batch (8 ranks / 2 stages = 4 groups x 1 micro-batch: 12 divides, 6 does not) and
    # the pipeline's refusals.
    ("--pp 3", 8, ["--pp (3) must divide ranks (8)"]),
    (
        "--tp 3",
        4,
        [
            "--tp (3) x --pipeline-stages (1) must divide ranks (4)",
        ],
    ),
    ("--pp 0", 4, []),  # not positive: dtune-train's parser refuses it, no rule reads it
    (
        "--pp 2 --schedule interleaved --virtual-stages 2 --micro-batches 3",
        4,
        ["--schedule interleaved needs --micro-batches (3) a multiple of --pp"],
    ),
    ("--pp 2 --global-batch 12", 8, []),
    (
        "--pp 2 --global-batch 6",
        8,
        ["--global-batch (6) must divide by data-parallel ranks (4) x --accum-steps (default 1)"],
    ),
    ("--pp 2 --local-sgd 1 --data d", 8, ["--pp 2 does not go with --local-sgd 1"]),
    # Pipeline stages with zero1 and zero2 (each stage's state sharded over its data-parallel group).
    ("--pp 2 --shard zero1 --global-batch 2", 4, []),
    ("--pipeline-stages 2 --shard zero2 --mesh-order tp,dp,pp", 4, []),
    ("--pp 2 --shard zero3", 4, ["--pp 2 does not go with --shard zero3"]),
]


@pytest.mark.parametrize("args,ranks,expect", MESH_EXACT)
def test_the_mesh_rules_say_exactly_what_dtune_train_refuses(args, ranks, expect):
    assert check_point("dtune-train", args.split(), ranks) == expect


def test_a_mesh_sweep_plans_its_orders_and_refuses_zero3_with_stages_until_excluded(tmp_path):
    f = tmp_path / "mesh.yaml"
    f.write_text(
        "name: m\nbinary: dtune-train\nargs: [--model, gpt2-tiny]\n"
        "axes: {--pp: [1, 2], --mesh-order: ['tp,pp,dp', 'tp,dp,pp'], --shard: [zero1, zero3]}\nlaunch: {ranks: 4}\n"
    )
    flags = {"dtune-train": {"--pp", "--mesh-order", "--shard"}}
    with pytest.raises(SweepError) as e:
        plan(str(f), known_flags=flags)
    first, *points = str(e.value).splitlines()
    assert "2 of 8 points" in first, first
    assert sorted(p.split("  ", 2)[2] for p in points) == [
        "--pp 2 --mesh-order tp,dp,pp --shard zero3: --pp 2 does not go with --shard zero3",
        "--pp 2 --mesh-order tp,pp,dp --shard zero3: --pp 2 does not go with --shard zero3",
    ], points
    f.write_text(f.read_text() + "exclude: [{--pp: 2, --shard: zero3}]\n")
    pts = plan(str(f), known_flags=flags)
    assert sorted((p.values["--pp"], p.values["--mesh-order"], p.values["--shard"]) for p in pts) == [
        (1, "tp,dp,pp", "zero1"),
        (1, "tp,dp,pp", "zero3"),
        (1, "tp,pp,dp", "zero1"),
        (1, "tp,pp,dp", "zero3"),
        (2, "tp,dp,pp", "zero1"),
        (2, "tp,pp,dp", "zero1"),
    ]
