"""Synthetic dtune-train results in the binary's layout (results/SCHEMA.md,
benchmarks/train/train_results.cc), written with h5py, so that statistics are tested on fixed
inputs and without a LibTorch build."""

from pathlib import Path

import h5py
import numpy as np

PHASES = ["data_ms", "h2d_ms", "forward_ms", "backward_ms", "comm_exposed_ms", "optimizer_ms", "scaler_ms"]
DATA_FIELDS = [
    "data_samples",
    "data_bad_samples",
    "data_bytes",
    "data_requests",
    "data_retries",
    "data_fetch_ms",
    "data_decode_ms",
    "data_wait_ms",
    "cache_hits",
    "cache_misses",
    "cache_hit_bytes",
    "cache_miss_bytes",
    "cache_evictions",
]


def config_attrs(batch, world_size, **extra) -> dict:
    """The configuration attributes every train run group carries, ok or not (results/SCHEMA.md)."""
    return {
        "benchmark": "train",
        "model": "resnet18",
        "batch": batch,
        "batch_auto": 0,
        "accum_steps": 1,
        "global_batch": world_size * batch,
        "precision": "fp32",
        "tf32": 0,
        "weights_dtype": "fp32",
        "optimizer": "sgd",
        "lr": 0.1,
        "device": "cpu",
        "backend": "mpi",
        "overlap": "on",
        "bucket_mb": 25.0,
        "first_bucket_mb": 1.0,
        "compression": "none",
        "local_sgd_every": 0,
        "channels_last": 0,
        "threads": 1,
        "world_size": world_size,
        "data": "synthetic",
        "workers": 0,
        "prefetch": 2,
        "cache_dir": "",
        **extra,
    }


def train_run(
    group,
    step_ms,
    profiled=None,
    warmup=1,
    rank_factors=(1.0, 0.98),
    shares=None,
    loss=2.3,
    peak_memory=1 << 20,
    rank_device=None,
    skipped=0,
    **attrs,
):
    """One train run group: step s of rank r takes step_ms[s] * rank_factors[r] (or
    rank_factors[s][r], one row per step); each phase is a tenth of it unless `shares` gives its
    fraction ({"comm_exposed_ms": 0.18}); `loss` is a value or one per step; `skipped` steps (the
    last ones) are marked skipped."""
    factors = np.asarray(rank_factors, float)  # (R,) or (S, R)
    S, R = len(step_ms), factors.shape[-1]
    a = {
        **config_attrs(8, R, global_batch=16),
        "status": "ok",
        "parameters": 11689512,
        "steps": S - warmup,
        "throughput_steps": S - warmup,
        "warmup_steps": warmup,
        "samples_per_s": 100.0,
        "tokens_per_s": 0.0,
        "step_time_p50_ms": float(np.median(step_ms)),
        "step_time_p90_ms": 0.0,
        "skipped_steps": 0,
        "training_flops_per_sample": 1e9,
        "tokens_per_sample": 0.0,
        "flops_formula": "counted",
        "mfu": float("nan"),
        "peak_tflops": float("nan"),
        "peak_source": "unknown",
        "memory_source": "cpu",
        "data_description": "synthetic",
        **{k: 0.0 for k in DATA_FIELDS},
    }
    a.update(attrs)
    for k, v in a.items():
        group.attrs[k] = np.int64(v) if isinstance(v, int) else v
    total = np.asarray(step_ms, float)[:, None] * (factors if factors.ndim == 2 else factors[None, :])  # (S, R)
    for name in PHASES:
        group[name] = total * (shares or {}).get(name, 0.1)
    group["total_ms"] = total
    group["loss"] = np.broadcast_to(np.asarray(loss, float).reshape(-1, 1), (S, R)).copy()
    group["loss_scale"] = np.ones(S)
    group["skipped"] = (np.arange(S) >= S - skipped).astype(np.int64)
    group["profiled"] = np.zeros(S, np.int64) if profiled is None else np.asarray(profiled, np.int64)
    group["peak_memory_bytes"] = np.full(R, peak_memory, np.int64)
    group["bucket_bytes"] = np.array([1 << 20], np.int64)
    if rank_device:
        group["rank_device"] = np.array([d.encode() for d in rank_device])


def oom_run(group, batch, peak_memory, **attrs):
    """An out-of-memory run group as the binary leaves it: the configuration, status "oom", the
    batch, peak_memory_bytes and a message; no step datasets."""
    a = {
        **config_attrs(batch, 2),
        "status": "oom",
        "peak_memory_bytes": peak_memory,
        "message": "out of memory",
        **attrs,
    }
    for k, v in a.items():
        group.attrs[k] = np.int64(v) if isinstance(v, int) else v


def train_file(path: Path, runs: list, command_line: str, hosts=("h0", "h1"), env=None, oom=(), devices=None):
    """runs: list of (step_ms, profiled, attrs); attrs may hold rank_factors (one per host) and
    train_run's other keywords; `env`: more provenance environment; `oom`: (batch, peak bytes) of
    out-of-memory runs written after the others; `devices`: provenance rank_device."""
    with h5py.File(path, "w") as f:
        f.attrs.update(
            {
                "schema": "dtune-results",
                "schema_version": np.int64(1),
                "tool": "dtune-train",
                "dtune_version": "0.1.0",
                "status": "complete",
                "exit_status": np.int64(0),
            }
        )
        p = f.create_group("provenance")
        p.attrs.update({"command_line": command_line, "start_time": str(path), "world_size": np.int64(len(hosts))})
        p["rank_host"] = np.array([h.encode() for h in hosts])
        p.create_group("env").attrs.update({"OMPI_MCA_ess_base_jobid": str(hash(path)), **(env or {})})
        if devices:
            p["rank_device"] = np.array([d.encode() for d in devices])
        runs_g = f.create_group("runs")
        for n, (step_ms, profiled, attrs) in enumerate(runs):
            train_run(
                runs_g.create_group(f"{n:04d}-train-{attrs.get('model', 'resnet18')}"), step_ms, profiled, **attrs
            )
        for n, (batch, peak) in enumerate(oom, start=len(runs)):
            oom_run(runs_g.create_group(f"{n:04d}-train-resnet18-oom"), batch, peak, world_size=len(hosts))
