"""A synthetic dtune-train for the tuner's tests (installed as `dtune-train` in a temporary bin
directory, DTUNE_BIN_DIR): it sleeps briefly per step and writes a results file as dtune-train does
(the datasets and attributes the report's loader reads), with a known optimum and seeded noise.

Step time (ms) = 10 x (1 + 0.05 (x - 3)^2) x (1 + 0.1 [z == 1]) x noise, so --x 3 --z 0 is the
optimum; --y has no effect at all, and the noise is seeded by (--x, --z, --noise-seed, step) only, so
candidates differing in --y measure exactly the same samples (an exact tie). The noise is lognormal
with sigma --noise (default 0.01). --x 6 fails (exit 1), --x 7 runs out of memory (exit 4, status
oom). Every launch appends its arguments to launches.log in the sweep directory (two levels above
--output), so the tests can count how often each point ran.
"""

import json
import sys
import time
from pathlib import Path

import h5py
import numpy as np

FLAGS = ["--x", "--y", "--z", "--steps", "--warmup-steps", "--noise", "--noise-seed", "--sleep-ms", "--batch"]


def main(argv):
    if "--help" in argv:
        print("fake dtune-train\n" + "\n".join(f"  {f} VALUE" for f in FLAGS + ["--output", "--overwrite"]))
        return 0
    opts, i = {}, 0
    while i < len(argv):
        if argv[i] == "--overwrite":
            i += 1
            continue
        opts[argv[i]] = argv[i + 1]
        i += 2
    out = Path(opts["--output"])
    with open(out.parent.parent / "launches.log", "a") as f:
        f.write(json.dumps(argv) + "\n")
    x, z = float(opts.get("--x", 3)), int(opts.get("--z", 0))
    steps, warm = int(opts.get("--steps", 10)), int(opts.get("--warmup-steps", 1))
    sigma, seed = float(opts.get("--noise", 0.01)), int(opts.get("--noise-seed", 0))
    batch = int(opts.get("--batch", 8))
    if x == 6:
        print("dtune-train: error: the fake fails at --x 6", file=sys.stderr)
        return 1
    base = 10 * (1 + 0.05 * (x - 3) ** 2) * (1 + 0.1 * (z == 1))
    rng = np.random.default_rng([int(x * 1000), z, seed])
    total = base * np.exp(rng.normal(0, sigma, steps + warm))
    time.sleep((steps + warm) * float(opts.get("--sleep-ms", 2)) / 1000)
    with h5py.File(out, "w") as f:
        f.attrs.update(schema="dtune-results", schema_version=1, tool="fake dtune-train")
        g = f.create_group("runs").create_group("0000-train")
        g.attrs.update(benchmark="train", model="fake", precision="fp32", batch=batch, world_size=1)
        g.attrs.update(warmup_steps=warm, steps=steps, global_batch=batch, accum_steps=1, device="cpu")
        g.attrs.update(backend="mpi", overlap="on", bucket_mb=25.0, first_bucket_mb=1.0, compression="none")
        g.attrs.update(weights_dtype="fp32", tf32=0, threads=1, data="synthetic", workers=2, prefetch=4)
        g.attrs.update(local_sgd_every=0, batch_auto=0, channels_last=0, optimizer="sgd", lr=0.1)
        if x == 7:
            f.attrs["status"] = "oom"
            g.attrs.update(status="oom", message="out of memory (fake)")
            return 4
        f.attrs["status"] = "ok"
        g.attrs.update(status="ok", steps_written=steps + warm, mfu=float("nan"), peak_source="unknown (fake)")
        g.attrs["samples_per_s"] = batch / (np.mean(total[warm:]) / 1000)
        g.attrs.update(step_time_p50_ms=float(np.median(total[warm:])), step_time_p90_ms=float(np.max(total[warm:])))
        g.attrs.update(tokens_per_s=0.0, parameters=1000, throughput_steps=steps, skipped_steps=0)
        n = steps + warm
        for k in ["data_ms", "h2d_ms", "forward_ms", "backward_ms", "comm_exposed_ms", "optimizer_ms", "scaler_ms"]:
            g[k] = np.zeros((n, 1))
        g["total_ms"] = total.reshape(n, 1)
        g["loss"] = np.ones((n, 1))
        g["loss_scale"] = np.ones(n)
        g["skipped"] = np.zeros(n, dtype=np.int8)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
