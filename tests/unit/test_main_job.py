"""scripts/main.sh's own decisions, with stand-ins for what it runs (the set-up, the probes, the
sweep), since the real main job takes minutes: a main job stopped by Ctrl-C says how it stopped and
that a rerun resumes it, and the rerun resumes the same sweep folder (before, it started a new
sweep and redid every point); the folder named in results/sweeps/.main-unfinished is read as data.
And the summary's lines (report/dtune_report/main_summary.py): two lines never read the same but
for their figures (the DDP and ZeRO-3 runs of one global batch printed identical labels)."""

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "report"))

from dtune_report.main_summary import main, train_lines  # noqa: E402

FAKE_DTUNE = """#!/usr/bin/env bash
echo "dtune $*" >>"$(dirname "$0")/../calls.log"
if [[ "$1 $2" == "sweep run" ]]; then
  out=${@: -1}
  mkdir -p "$out"
  if [[ -f stop-first && ! -f "$out/first" ]]; then  # the first run: one point, then Ctrl-C
    touch "$out/first"
    trap 'kill %1; echo "# interrupted: the running point is marked interrupted; rerun to resume" >&2; exit 130' INT
    echo "[1/2] p1 ok"
    sleep 60 &
    wait
  fi
  echo "# resume: 1 of 2 points already complete"
fi
"""


def clone(tmp_path):
    c = tmp_path / "clone"
    (c / "scripts").mkdir(parents=True)
    for f in ("main.sh", "progress.sh"):
        shutil.copy(REPO / "scripts" / f, c / "scripts" / f)
    (c / "sweeps").mkdir()
    shutil.copy(REPO / "sweeps/quickstart.yaml", c / "sweeps")
    (c / "results/data/quickstart-images").mkdir(parents=True)
    (c / "results/data/quickstart-images/dataset.json").write_text("{}")
    (c / "build/bin").mkdir(parents=True)
    (c / ".venv/bin").mkdir(parents=True)
    (c / ".venv/bin/python").symlink_to(REPO / ".venv/bin/python")
    for path, body in {
        "scripts/setup.sh": "exit 0\n",
        "scripts/dtune": FAKE_DTUNE,
        "build/bin/dtune-probe": "#!/bin/sh\necho '# results: results/probe.h5'\n",
        "build/bin/dtune-data": "#!/bin/sh\nexit 0\n",
    }.items():
        (c / path).write_text(body if body.startswith("#!") else "#!/bin/sh\n" + body)
        (c / path).chmod(0o755)
    return c


def main_job(c, interrupt=False):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(c), "DTUNE_PROGRESS_EVERY": "5"}
    p = subprocess.Popen(
        ["bash", "scripts/main.sh"],
        cwd=c,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines = []
    for line in p.stdout:
        lines.append(line.rstrip("\n"))
        if interrupt and line.startswith("[1/2] p1 ok"):
            os.killpg(p.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group
    p.wait(timeout=60)
    return p.returncode, lines


def sweep_outs(c):
    return [ln.split()[-1] for ln in (c / "calls.log").read_text().splitlines() if ln.startswith("dtune sweep run")]


def test_a_main_job_stopped_by_ctrl_c_says_so_and_the_rerun_resumes_its_sweep(tmp_path):
    c = clone(tmp_path)
    (c / "stop-first").touch()
    rc, lines = main_job(c, interrupt=True)
    text = "\n".join(lines)
    assert rc != 0
    (first,) = sweep_outs(c)
    assert "# interrupted: the running point is marked interrupted; rerun to resume" in text, text
    assert f"rerun bash scripts/main.sh to resume {first}" in text, text
    rc, lines = main_job(c)
    text = "\n".join(lines)
    assert sweep_outs(c) == [first, first], sweep_outs(c)
    assert f"resuming the main job stopped before its report: {first}" in text, text
    assert "# resume: 1 of 2 points already complete" in text, text


def test_a_hostile_unfinished_marker_is_data_never_a_path_or_a_command(tmp_path):
    c = clone(tmp_path)
    pwned = tmp_path / "pwned"
    (c / "results/sweeps").mkdir(parents=True)
    (c / "results/sweeps/elsewhere").mkdir()
    for marker in (f"$(touch {pwned})", "results/sweeps/elsewhere", "results/sweeps/quickstart-20260101-000000"):
        (c / "results/sweeps/.main-unfinished").write_text(marker + "\n")
        (c / "calls.log").unlink(missing_ok=True)
        main_job(c)
        (out,) = sweep_outs(c)
        assert out.startswith("results/sweeps/quickstart-") and out != marker, (marker, out)
    assert not pwned.exists()


def row(**kw):
    base = {
        "model": "gpt2-tiny",
        "batch": 4,
        "precision": "fp32",
        "bucket_mb": 25.0,
        "data": "synthetic",
        "pipeline_stages": 1,
        "accum_steps": 1,
        "shard": "none",
        "world_size": 2,
        "samples_per_s": 100.0,
        "step_time_p50_ms": 80.0,
        "mfu": 0.01,
        "mfu_valid": 1,
    }
    return {**base, **kw}


def label(line):
    return line.rsplit(": ", 1)[0] if "samples/s" not in line else line[: line.index(": ")]


def test_summary_lines_name_every_setting_that_tells_two_runs_apart():
    train = pd.DataFrame(
        [
            row(),
            row(shard="zero3", samples_per_s=90.0),
            row(shard="zero3", shard_prefetch=2, samples_per_s=95.0),
            row(model="resnet18", batch=8),
        ]
    )
    train.loc[[1, 2], "shard_unit"] = "block"  # recorded by zero3 runs only: NaN for the others
    train.loc[[0, 1, 3], "shard_prefetch"] = 1
    lines = train_lines(train)
    labels = [ln.split(": ")[0] for ln in lines]
    assert len(set(labels)) == len(labels), lines  # no two read the same but for their figures
    assert labels[0].endswith("MiB, shard none, shard_prefetch 1"), labels[0]
    assert labels[1].endswith(", shard zero3, shard_prefetch 1, shard_unit block"), labels[1]
    assert labels[2].endswith(", shard zero3, shard_prefetch 2, shard_unit block"), labels[2]
    assert "shard" not in labels[3], labels[3]  # alone under its label: nothing added


def test_summary_lines_read_each_figure_and_label_part_as_printed():
    # Written out by hand from the format: the model right-aligned in 10, the batch in 3, the
    # precision in 4, the buckets %5g; JPEG data names its workers, a pipeline its mesh (the
    # degrees above 1, then the order where two are) and micro-batches (before accumulation's),
    # accumulation alone its micro-batches; samples/s %8.1f,
    # step p50 %6.1f, MFU %6.1f%% only when it is a number of at most 100% (n/a otherwise), and a
    # rejected peak named by its source.
    rejected = "datasheet (H100 SXM bf16): 989 TFLOP/s below the achieved 1210 TFLOP/s"
    train = pd.DataFrame(
        [
            row(),
            row(model="resnet50", batch=32, precision="bf16", bucket_mb=0.5, data="/d/shards", workers=4, mfu=1.5)
            | {"mfu_valid": 0, "mfu_rejected_peaks": rejected},
            row(pipeline_stages=2, micro_batches=4, accum_steps=2, samples_per_s=1234.56, step_time_p50_ms=7.25),
            row(accum_steps=3, mfu=float("nan"), bucket_mb=100.0),
            # a file with the mesh: 2 groups of 2 stages, a stage's group on consecutive ranks
            row(world_size=4, micro_batches=2, accum_steps=2, pipeline_stages=2, pipeline_layout="across-nodes")
            | {"mesh_dp": 2, "mesh_pp": 2, "mesh_tp": 1, "mesh_order": "tp,dp,pp"},
            row(mfu=1.0, batch=128),
        ]
    )
    assert train_lines(train) == [
        "   gpt2-tiny batch   4/rank fp32 buckets    25 MiB:    100.0 samples/s, step p50   80.0 ms, MFU   1.0%",
        "    resnet50 batch  32/rank bf16 buckets   0.5 MiB, JPEG shards via 4 workers:    100.0 samples/s, step p50"
        "   80.0 ms, MFU    n/a [a peak below the achieved rate was rejected: datasheet (H100 SXM bf16)]",
        "   gpt2-tiny batch   4/rank fp32 buckets    25 MiB, mesh pp2, 4 micro-batches:   1234.6 "
        "samples/s, step p50    7.2 ms, MFU   1.0%",
        "   gpt2-tiny batch   4/rank fp32 buckets   100 MiB, 3 micro-batches:    100.0 samples/s, step p50   80.0 ms, "
        "MFU    n/a",
        "   gpt2-tiny batch   4/rank fp32 buckets    25 MiB, mesh dp2×pp2 (tp,dp,pp), 2 micro-batches:    100.0 "
        "samples/s, step p50   80.0 ms, MFU   1.0%",
        "   gpt2-tiny batch 128/rank fp32 buckets    25 MiB:    100.0 samples/s, step p50   80.0 ms, MFU 100.0%",
    ]


def test_summary_labels_of_jpeg_data_with_a_pipeline_or_accumulation_and_of_a_pair_told_apart():
    # JPEG data names its workers before the pipeline or the accumulation (both are added to it);
    # two runs (exactly two) of one label each name the setting that differs.
    jpeg = {"data": "/d/shards", "workers": 2}
    train = pd.DataFrame(
        [
            row(**jpeg, pipeline_stages=4, micro_batches=8, world_size=8),
            row(**jpeg, accum_steps=2),
            row(model="m", shard="none"),
            row(model="m", shard="zero1"),
        ]
    )
    assert [line.split(": ")[0] for line in train_lines(train)] == [
        "   gpt2-tiny batch   4/rank fp32 buckets    25 MiB, JPEG shards via 2 workers, mesh dp2×pp4 (tp,pp,dp), 8 "
        "micro-batches",
        "   gpt2-tiny batch   4/rank fp32 buckets    25 MiB, JPEG shards via 2 workers, 2 micro-batches",
        "           m batch   4/rank fp32 buckets    25 MiB, shard none",
        "           m batch   4/rank fp32 buckets    25 MiB, shard zero1",
    ]


def comm_group(runs, name: str, collective: str, sizes_mib: list, busbw: list, env: dict) -> None:
    """A merged sweep file's dtune-comm run: out-of-place then in-place, busbw_gbps as given
    ([[out-of-place per size], [in-place per size]]), its point exporting `env`."""
    g = runs.create_group(name)
    g.attrs.update(benchmark="comm", collective=collective, status="ok", point=json.dumps({"id": name, "env": env}))
    sizes = np.array(sizes_mib, np.int64) << 20
    P, S = 2, len(sizes)
    g["placement"] = np.array([b"out-of-place", b"in-place"])
    g["size_bytes"] = g["requested_bytes"] = sizes
    g["count"] = sizes // 4
    g["time_us"] = np.ones((P, S, 2, 1))
    g["wrong"] = np.zeros((P, S, 2), np.int64)
    g["time_us_reported"] = g["algbw_gbps"] = np.ones((P, S))
    g["busbw_gbps"] = np.array(busbw, float)
    g["slowest_rank"] = np.zeros((P, S), np.int64)


def test_the_summary_prints_each_runs_busbw_at_its_largest_size_and_transport_then_the_training_lines(tmp_path, capsys):
    path = tmp_path / "merged.h5"
    with h5py.File(path, "w") as f:
        f.attrs.update(schema="dtune-results", schema_version=np.int64(1), tool="dtune sweep merge", status="complete")
        runs = f.create_group("runs")
        # Each run's largest size differs (2, 4 and 8 MiB), so they print in that order; the
        # in-place figures and the smaller sizes are never printed.
        comm_group(
            runs, "0000-p0-allreduce", "allreduce", [1, 8], [[1.0, 5.24288], [9.0, 99.0]], {"OMPI_MCA_btl": "tcp,self"}
        )
        comm_group(runs, "0001-p1-allgather", "allgather", [2, 1], [[20.97152, 2.0], [9.0, 99.0]], {})
        comm_group(
            runs,
            "0002-p2-allreduce",
            "allreduce",
            [4, 1],
            [[10.48576, 3.0], [99.0, 9.0]],
            {"OMPI_MCA_btl": "vader,self"},
        )
        t = runs.create_group("0003-p3-train")
        t.attrs.update(benchmark="train", model="resnet18", batch=np.int64(8), precision="bf16", bucket_mb=25.0)
        t.attrs.update(samples_per_s=512.25, step_time_p50_ms=31.25, mfu=0.4125, point=json.dumps({"env": {}}))
    main(str(path))
    assert capsys.readouterr().out.splitlines() == [
        "",
        f"Results: {path}",
        "   allgather 2 MiB, btl default    : busbw  20.97 GB/s",
        "   allreduce 4 MiB, btl vader,self : busbw  10.49 GB/s",
        "   allreduce 8 MiB, btl tcp,self   : busbw   5.24 GB/s",
        "    resnet18 batch   8/rank bf16 buckets    25 MiB:    512.2 samples/s, step p50   31.2 ms, MFU  41.2%",
    ]
