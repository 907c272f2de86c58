"""dtune-train's logs read by their real readers: TensorBoard's own event reader returns exactly the
scalars and steps dtune wrote, and --mllog prints, from rank 0, the lines that the mlperf-logging
package's MLLogger would print for the same events (re-encoded by the package itself, byte for byte),
which its compliance checker parses and whose rules they pass."""

import io
import json
import logging
import subprocess

import h5py
import pytest
import yaml

from conftest import bin_dir, mpirun_prefix


def test_tensorboard_reads_every_scalar_and_step(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out, tb = tmp_path / "t.h5", tmp_path / "tb"
    r = subprocess.run(
        mpirun_prefix(2)
        + [
            str(bin_dir() / "dtune-train"),
            "--model",
            "gpt2-tiny",
            "--context",
            "16",
            "--vocab",
            "128",
            "--threads",
            "1",
            "--batch",
            "2",
            "--steps",
            "4",
            "--warmup-steps",
            "1",
            "--precision",
            "fp16",
            "--tensorboard",
            str(tb),
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    with h5py.File(out) as f:
        (g,) = f["runs"].values()
        loss, total, scale = g["loss"][()], g["total_ms"][()], g["loss_scale"][()]
    for rank in (0, 1):
        acc = EventAccumulator(str(tb / f"rank{rank}"))
        acc.Reload()
        tags = set(acc.Tags()["scalars"])
        assert {
            "loss",
            "step_time_ms",
            "samples_per_s",
            "loss_scale",
            "phase/forward_ms",
            "phase/backward_ms",
            "phase/comm_exposed_ms",
        } <= tags
        got = acc.Scalars("loss")
        assert [e.step for e in got] == [0, 1, 2, 3, 4]
        assert [e.value for e in got] == pytest.approx(list(loss[:, rank]), rel=1e-6)  # float32 of the same value
        assert [e.value for e in acc.Scalars("step_time_ms")] == pytest.approx(list(total[:, rank]), rel=1e-6)
        assert [e.value for e in acc.Scalars("loss_scale")] == pytest.approx(list(scale), rel=1e-6)


MLLOG_FIELDS = ["namespace", "time_ms", "event_type", "key", "value", "metadata"]
# What a training submission logs and dtune cannot: who submits, on which platform and division, its
# dataset sizes, evaluation, config file, cache clearing.
NOT_LOGGED = {
    "submission_org",
    "submission_platform",
    "submission_division",
    "cache_clear",
    "train_samples",
    "eval_samples",
    "eval_accuracy",
    "config_filename",
}


def mllog_run(*extra):
    r = subprocess.run(
        [
            str(bin_dir() / "dtune-train"),
            "--model",
            "gpt2-tiny",
            "--context",
            "16",
            "--vocab",
            "128",
            "--threads",
            "1",
            "--steps",
            "2",
            "--warmup-steps",
            "1",
            "--lr",
            "1e-05",
            "--no-output",
            "--mllog",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return [line for line in r.stdout.splitlines() if line.startswith(":::MLLOG ")]


def reencoded(line):
    """The line MLLogger prints for the same namespace, time, event type, key, value and metadata."""
    from mlperf_logging.mllog import mllog

    d = json.loads(line[len(":::MLLOG ") :])
    out = io.StringIO()
    logger = logging.Logger("reencode")
    handler = logging.StreamHandler(out)
    handler.addFilter(lambda rec: rec.levelno == logging.INFO)  # not its "Metadata fields overridden"
    logger.addHandler(handler)
    log = {
        "INTERVAL_START": mllog.MLLogger.start,
        "INTERVAL_END": mllog.MLLogger.end,
        "POINT_IN_TIME": mllog.MLLogger.event,
    }[d["event_type"]]
    log(
        mllog.MLLogger(logger=logger),
        d["key"],
        d["value"],
        metadata=d["metadata"],
        namespace=d["namespace"],
        time_ms=d["time_ms"],
    )
    return out.getvalue().rstrip("\n")


def test_mllog_lines_are_mllogger_bytes(tmp_path):
    from mlperf_logging.compliance_checker.mlp_parser import ruleset_610
    from mlperf_logging.mllog import constants

    # --batch-sweep: a block per measured batch (powers of two below the largest that fits, then it)
    lines = mllog_run("--batch", "auto", "--memory-limit-mb", "6", "--batch-sweep")
    loglines, failed = ruleset_610.parse_generator(lines)
    assert not failed and len(loglines) == len(lines)
    known = {v for k, v in vars(constants).items() if k.isupper() and isinstance(v, str)}
    events = []
    for line in lines:
        d = json.loads(line[len(":::MLLOG ") :])
        assert list(d) == MLLOG_FIELDS and list(d["metadata"])[:2] == ["file", "lineno"]
        assert d["metadata"]["file"] == "benchmarks/train/main.cc" and d["metadata"]["lineno"] > 0
        assert line == reencoded(line)
        # tracked_stats is not in constants.py; MLCommons' reference trainers log throughput with it.
        assert d["key"] in known or d["key"] == "tracked_stats" or d["key"].startswith("dtune_"), d["key"]
        phase = d["key"].rsplit("_", 1)[-1]
        assert d["event_type"] == {"start": "INTERVAL_START", "stop": "INTERVAL_END"}.get(phase, "POINT_IN_TIME")
        events.append(d)
    keys = [d["key"] for d in events]
    # Per block: its batch, then throughput at the optimizer steps done so far (3 a block).
    batches = [d["value"] for d in events if d["key"] == "micro_batch_size"]
    n = len(batches)
    assert n >= 2 and batches[:-1] == [2**i for i in range(n - 1)] and batches[-1] > batches[-2]
    assert [d["value"] for d in events if d["key"] == "global_batch_size"] == batches
    # Intervals: init, then the run holding the blocks, each closed before the next opens.
    intervals = [k for k in keys if k.endswith(("_start", "_stop"))]
    assert intervals == ["init_start", "init_stop", "run_start"] + ["block_start", "block_stop"] * n + ["run_stop"]
    assert events[-1]["metadata"]["status"] == "success"
    assert next(d for d in events if d["key"] == "opt_base_learning_rate")["value"] == 1e-05
    assert '"value": 1e-05,' in next(x for x in lines if '"opt_base_learning_rate"' in x)
    stats = [d for d in events if d["key"] == "tracked_stats"]
    assert [list(d["value"]) for d in stats] == [["throughput"]] * n
    assert all(d["value"]["throughput"] > 0 for d in stats)
    assert [d["metadata"]["step"] for d in stats] == [3 * (i + 1) for i in range(n)]
    done = [3 * sum(batches[: i + 1]) for i in range(n)]
    assert [d["metadata"]["samples_count"] for d in events if d["key"] == "block_start"] == [0] + done[:-1]
    assert [d["metadata"]["samples_count"] for d in events if d["key"] == "block_stop"] == done
    assert "throughput" not in keys


def test_mllog_passes_the_compliance_rules_it_can(tmp_path):
    """The training 6.1.0 rules find nothing wrong but the fields that only a submission has. The rule
    that init end within compile_time_mins of its start is left out: the limit comes from
    submission_division (0 minutes without one)."""
    from mlperf_logging.compliance_checker import mlp_compliance
    from mlperf_logging.compliance_checker.mlp_parser import ruleset_610

    loglines, _ = ruleset_610.parse_generator(mllog_run("--batch", "2"))
    rules = yaml.safe_load(open(mlp_compliance.__file__.replace("mlp_compliance.py", "training_6.1.0/common.yaml")))
    for r in rules:
        if "KEY" in r and r["KEY"]["NAME"] == "init_stop":
            r["KEY"]["CHECK"] = [c for c in r["KEY"]["CHECK"] if "compile_time_mins" not in c]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    checker = mlp_compliance.ComplianceChecker("training", "6.1.0", quiet=False, werror=True)
    checker.check_loglines(loglines, str(tmp_path / "rules.yaml"))
    assert not checker.not_overwritable, checker.not_overwritable
    assert set(checker.overwritable) == NOT_LOGGED, checker.overwritable
    assert all(m.startswith("Required ") for m in checker.overwritable.values()), checker.overwritable
