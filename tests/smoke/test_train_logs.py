"""dtune-train's logs read by their real readers: TensorBoard's own event reader returns exactly the
scalars and steps dtune wrote, and --mllog prints parseable MLPerf lines from rank 0."""
import json
import subprocess

import h5py
import pytest

from conftest import bin_dir, mpirun_prefix


def test_tensorboard_reads_every_scalar_and_step(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    out, tb = tmp_path / "t.h5", tmp_path / "tb"
    r = subprocess.run(mpirun_prefix(2) + [str(bin_dir() / "dtune-train"), "--model", "gpt2-tiny", "--context", "16",
                                           "--vocab", "128", "--threads", "1", "--batch", "2", "--steps", "4",
                                           "--warmup-steps", "1", "--precision", "fp16", "--tensorboard", str(tb),
                                           "--output", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    with h5py.File(out) as f:
        (g,) = f["runs"].values()
        loss, total, scale = g["loss"][()], g["total_ms"][()], g["loss_scale"][()]
    for rank in (0, 1):
        acc = EventAccumulator(str(tb / f"rank{rank}"))
        acc.Reload()
        tags = set(acc.Tags()["scalars"])
        assert {"loss", "step_time_ms", "samples_per_s", "loss_scale", "phase/forward_ms",
                "phase/backward_ms", "phase/comm_exposed_ms"} <= tags
        got = acc.Scalars("loss")
        assert [e.step for e in got] == [0, 1, 2, 3, 4]
        assert [e.value for e in got] == pytest.approx(list(loss[:, rank]), rel=1e-6)  # float32 of the same value
        assert [e.value for e in acc.Scalars("step_time_ms")] == pytest.approx(list(total[:, rank]), rel=1e-6)
        assert [e.value for e in acc.Scalars("loss_scale")] == pytest.approx(list(scale), rel=1e-6)


def test_mllog_lines(tmp_path):
    r = subprocess.run([str(bin_dir() / "dtune-train"), "--model", "gpt2-tiny", "--context", "16", "--vocab", "128",
                        "--batch", "2", "--steps", "2", "--no-output", "--mllog"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(l.split(":::MLLOG ", 1)[1]) for l in r.stdout.splitlines() if l.startswith(":::MLLOG ")]
    keys = [l["key"] for l in lines]
    assert keys[0] == "run_start" and keys[-1] == "run_stop" and "throughput" in keys
    assert all({"key", "value", "time_ms", "metadata"} <= set(l) for l in lines)
    assert lines[-1]["metadata"]["status"] == "success"
    assert next(l for l in lines if l["key"] == "global_batch_size")["value"] == 2
