"""A synthetic dtune-train for the tuner's tests (installed as `dtune-train` in a temporary bin
directory, DTUNE_BIN_DIR): it sleeps briefly per step and writes a results file as dtune-train does
(the datasets and attributes the report's loader reads), with a known optimum and seeded noise.

Step time (ms) = 10 x (1 + 0.05 (x - 3)^2) x (1 + 0.1 [z == 1]) x noise, so --x 3 --z 0 is the
optimum (--precision bf16 multiplies it by 12, as LibTorch's emulated bf16 on a CPU without bf16
units: a candidate far dearer to run than the others); --y has no effect at all, and the noise is
seeded by (--x, --z, --noise-seed, step) only, so candidates differing in --y measure exactly the
same samples (an exact tie). The noise is lognormal with sigma --noise (default 0.01). --x 6 fails
(exit 1), --x 7 runs out of memory (exit 4, status oom). --nan-at X records NaN step times at --x X,
--zero-ms-at X steps of 0 ms (an infinite samples/s), --hang-at X hangs there (sleeps an hour: the
runner's --timeout ends it), and --flaky-at X fails there from its second launch on. Every launch
appends its arguments to launches.log in the sweep directory (two levels above --output), so the
tests can count how often each point ran.

--drift SEED (not 0) makes the noise a shared machine's, still seeded (so a test's outcome is a
function of its seeds and of the order the tuner launches in): each run draws its step noise's
sigma from U(0.05, 0.20), and slow periods slow every run started in them by a factor from
U(1.3, 1.8). Time is the launch clock: the nominal duration (--startup-ms + steps x --sleep-ms) of
the launches before this one in launches.log, so the same launch order meets the same periods; the
periods last Exp(--slow-period-ms) each (default 2000) and a third of them are slow. The run
sleeps --startup-ms once and --sleep-ms per step, scaled by the step's time over 10 ms; with
--drift the step times recorded are the ones slept.
"""

import json
import sys
import time
from pathlib import Path

import h5py
import numpy as np

FLAGS = ["--x", "--y", "--z", "--steps", "--warmup-steps", "--noise", "--noise-seed", "--sleep-ms", "--batch"]
FLAGS += ["--drift", "--startup-ms", "--slow-period-ms", "--precision", "--nan-at", "--zero-ms-at", "--hang-at"]
FLAGS += ["--flaky-at"]
BF16_SLOWDOWN = 12


def nominal_ms(o: dict) -> float:
    """A launch's duration on the launch clock (its options): start-up plus steps x --sleep-ms."""
    steps = int(o.get("--steps", 10)) + int(o.get("--warmup-steps", 1))
    slow = BF16_SLOWDOWN if o.get("--precision") == "bf16" else 1
    return float(o.get("--startup-ms", 0)) + steps * float(o.get("--sleep-ms", 2)) * slow


def _opts(argv: list) -> dict:
    return dict(zip(*[iter([a for a in argv if a != "--overwrite"])] * 2))


def slow_factor(seed: int, t_ms: float, period_ms: float) -> float:
    """The slow-down of a run started at t_ms on the launch clock: 1, or U(1.3, 1.8) in a slow period."""
    rng = np.random.default_rng([seed, 7])
    t = 0.0
    while True:
        t += rng.exponential(period_ms)
        slow, factor = rng.random() < 1 / 3, rng.uniform(1.3, 1.8)
        if t > t_ms:
            return factor if slow else 1.0


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
    log = out.parent.parent / "launches.log"
    before = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    with open(log, "a") as f:
        f.write(json.dumps(argv) + "\n")
    x, z = float(opts.get("--x", 3)), int(opts.get("--z", 0))
    steps, warm = int(opts.get("--steps", 10)), int(opts.get("--warmup-steps", 1))
    sigma, seed = float(opts.get("--noise", 0.01)), int(opts.get("--noise-seed", 0))
    batch = int(opts.get("--batch", 8))
    if x == 6:
        print("dtune-train: error: the fake fails at --x 6", file=sys.stderr)
        return 1
    if x == float(opts.get("--flaky-at", "nan")) and any(float(_opts(a).get("--x", 3)) == x for a in before):
        print("dtune-train: error: the fake fails at --flaky-at after its first launch", file=sys.stderr)
        return 1
    if x == float(opts.get("--hang-at", "nan")):
        time.sleep(3600)
    base = 10 * (1 + 0.05 * (x - 3) ** 2) * (1 + 0.1 * (z == 1))
    precision = opts.get("--precision", "fp32")
    base *= BF16_SLOWDOWN if precision == "bf16" else 1
    drift = int(opts.get("--drift", 0))
    if drift:
        clock_ms = sum(nominal_ms(_opts(a)) for a in before)
        rng = np.random.default_rng([drift, len(before), int(x * 1000), z])
        sigma = rng.uniform(0.05, 0.20)
        base *= slow_factor(drift, clock_ms, float(opts.get("--slow-period-ms", 2000)))
    else:
        rng = np.random.default_rng([int(x * 1000), z, seed])
    total = base * np.exp(rng.normal(0, sigma, steps + warm))
    slept = total * float(opts.get("--sleep-ms", 2)) / 10
    if drift:  # the step times recorded are the ones slept, as a real run's (a cost model reads them)
        total = slept
    time.sleep((float(opts.get("--startup-ms", 0)) + slept.sum()) / 1000)
    if x == float(opts.get("--nan-at", "nan")):
        total[:] = np.nan
    if x == float(opts.get("--zero-ms-at", "nan")):
        total[:] = 0.0
    with h5py.File(out, "w") as f:
        f.attrs.update(schema="dtune-results", schema_version=1, tool="fake dtune-train")
        g = f.create_group("runs").create_group("0000-train")
        g.attrs.update(benchmark="train", model="fake", precision=precision, batch=batch, world_size=1)
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
