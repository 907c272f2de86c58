"""What defines a run, so that `dtune compare` matches like with like and never pools two
configurations: the run group's setting attributes, the flags of the command line that made it
(with the DTUNE_COMM_* / DTUNE_TRAIN_* environment fallbacks of those flags), the environment
settings provenance recorded (NCCL_*, UCX_*, OMPI_*, OMP_*, ...) and the number of ranks. When
both sides come from sweeps, the point's definition (what its id hashes, results/SCHEMA.md "Merged
sweep files") gives the arguments, adds its exported variables and its launch shape (ranks, nodes,
ranks per node); its sweep name and repeat number do not count, so repeats pool and a renamed
sweep still matches. A train run's mesh counts by its pipeline and tensor degrees and the order in
which it places ranks (MESH_FIELDS, mesh.py): --pipeline-layout and --mesh-order spellings of one
layout match, and so do orders that place ranks alike (with one axis of degree > 1, every order).

Attributes: a run group records its settings beside its results (MFU and whether its peak held,
summaries, counters, status). Of dtune-comm's and dtune-train's groups only the settings count
(SETTING_ATTRS, the writers' configuration), so a result never splits a configuration, however it
came out and whatever is added later; a test checks that every attribute the writers write is
either a setting or in IGNORED_ATTRS. Other benchmarks' groups count every attribute but those.
Flags and environment variables: left out, each list below says why: what differs between two
runs of one configuration (sample counts, output paths, seeds, the launcher's job bookkeeping) and
flags recorded as attributes (matched on the attribute). Any other flag or variable counts, so one
added later splits rows rather than pooling.
"""

from __future__ import annotations

import fnmatch
import re
import shlex

from .mesh import canonical_order, mesh_of

# dtune-comm's short flags (nccl-tests' letters), by long name: benchmarks/comm/options.cc.
COMM_SHORT = {
    "-b": "--minbytes",
    "-e": "--maxbytes",
    "-i": "--stepbytes",
    "-f": "--stepfactor",
    "-n": "--iters",
    "-w": "--warmup_iters",
    "-c": "--check",
    "-d": "--datatype",
    "-o": "--op",
    "-r": "--root",
    "-z": "--blocking",
    "-a": "--average",
    "-J": "--output_file",
    "-I": "--per_iter_timing",
    "-t": "--nthreads",
    "-g": "--ngpus",
}
# dtune-comm's flags spelt with '_' (nccl-tests'); their DTUNE_COMM_* fallbacks read as '-'.
_COMM_UNDERSCORED = {"--warmup_iters", "--output_file", "--per_iter_timing"}

# Flags that are not part of a run's identity (benchmarks/{comm,train}/options.cc).
IGNORED_FLAGS = {
    "dtune-comm": {
        # The sizes run: the size is part of each row, so overlapping sizes still match.
        "--minbytes",
        "--maxbytes",
        "--stepbytes",
        "--stepfactor",
        # Sample counts: more or fewer samples of the same configuration (untimed warm-up and
        # check iterations included).
        "--iters",
        "--warmup_iters",
        "--check",
        # Which runs a file holds and how each ran: each run records its own collective, dtype,
        # op, root, blocking, backend, algorithm, MPI progress, load threads and gap as
        # attributes, and is matched on those (a flag left at its default is absent from the
        # command line but present there).
        "--collective",
        "--datatype",
        "--op",
        "--root",
        "--blocking",
        "--backend",
        "--algorithm",
        "--mpi-progress",
        "--load-threads",
        "--gap-us",
        # How the printed table combines ranks, and where results go: not what is measured
        # (-J writes nccl-tests' JSON beside the HDF5 file; -I puts every iteration in it).
        "--average",
        "--format",
        "--output",
        "--no-output",
        "--overwrite",
        "--output_file",
        "--per_iter_timing",
        # nccl-tests' threads and GPUs per process: dtune-comm accepts 1 only, so they change nothing.
        "--nthreads",
        "--ngpus",
        # A deadline, not work done.
        "--timeout",
    },
    "dtune-train": {
        # Recorded as run attributes with their resolved values (a flag left at its default is
        # absent from the command line but present there): matched on the attributes.
        "--model",
        "--batch",
        "--batch-sweep",
        "--global-batch",
        "--accum-steps",
        "--precision",
        "--weights-dtype",
        "--optimizer",
        "--lr",
        "--threads",
        "--channels-last",
        "--device",
        "--backend",
        "--bucket-mb",
        "--first-bucket-mb",
        "--overlap",
        "--compression",
        "--local-sgd",
        "--reduce-algo",
        "--shard",
        "--reshard-after-forward",  # recorded (reshard_after_forward) for --shard zero3 runs
        "--shard-unit",  # recorded (shard_unit) for --shard zero3 runs
        "--shard-prefetch",  # recorded (shard_prefetch) for --shard zero3 runs
        "--data",
        "--workers",
        "--prefetch",
        "--decode",
        "--fast-decode",
        "--cache-dir",
        "--pipeline-stages",
        "--micro-batches",
        "--schedule",
        "--virtual-stages",
        "--pipeline-layout",
        "--partition",
        "--stage-pieces",
        "--activation-checkpoint",
        "--sequence-parallel",
        # The mesh (--pp is --pipeline-stages): matched on the mesh_* attributes (MESH_FIELDS).
        "--pp",
        "--tp",
        "--mesh-order",
        # Sample counts.
        "--steps",
        "--warmup-steps",
        # Which random numbers, not how much work.
        "--seed",
        # Outputs and diagnostics; profiled steps are left out of the samples.
        "--output",
        "--no-output",
        "--overwrite",
        "--tensorboard",
        "--mllog",
        "--profile-steps",
        "--profile-dir",
        "--profile-top",
        "--debug-dump",
        # Only MFU's denominator; a deadline.
        "--peak-tflops",
        "--peak-from",
        "--timeout",
    },
}

# The attributes that are settings, by benchmark: what the run was told to do, as the writers
# record it (dtune-comm: benchmarks/comm/comm_results.cc write_attributes and write_timing_attrs;
# dtune-train: train/step_log.cc write_config, before the first step). Only these count.
SETTING_ATTRS = {
    "comm": {
        "benchmark",
        "collective",
        "backend",
        "algorithm",
        "mpi_progress",
        "dtype",
        "op",
        "root",
        "blocking",
        "load_threads",
        "gap_us",
    },
    "train": {
        "benchmark",
        "model",
        "batch",
        "batch_auto",
        "accum_steps",
        "global_batch",
        "precision",
        "tf32",
        "weights_dtype",
        "optimizer",
        "lr",
        "device",
        "backend",
        "reduce_algo",
        "overlap",
        "bucket_mb",
        "first_bucket_mb",
        "compression",
        "local_sgd_every",
        "shard",
        "reshard_after_forward",
        "shard_unit",
        "shard_prefetch",
        "channels_last",
        "threads",
        "world_size",
        "data",
        "workers",
        "prefetch",
        "decode",
        "fast_decode",
        "cache_dir",
        "pipeline_stages",
        "micro_batches",
        "schedule",
        "virtual_stages",
        "pipeline_layout",
        "partition",
        "stage_pieces",
        "mesh_dp",
        "mesh_pp",
        "mesh_tp",
        "mesh_order",
        "activation_checkpoint",
        "sequence_parallel",
    },
}

# A train run's mesh counts as MESH_FIELDS (mesh.py: the pipeline and tensor degrees and the order
# as it places ranks, so that orders that place them alike match), in place of the attributes that
# spell it (MESH_SPELLINGS; files written before the mesh_* attributes have only the first two).
# The data-parallel degree follows from the ranks (world_size, np) and those degrees.
MESH_SPELLINGS = ("pipeline_stages", "pipeline_layout", "mesh_dp", "mesh_pp", "mesh_tp", "mesh_order")
MESH_FIELDS = ("mesh_pp", "mesh_tp", "mesh_order")

# Run attributes that are results, sample counts or derived text, not settings
# (results/SCHEMA.md): comm fits and status, train summaries and data/cache counters. For the
# benchmarks of SETTING_ATTRS this is the record of what was classified as not a setting; for the
# others, what is left out.
IGNORED_ATTRS = {
    "status",
    "iters",
    "warmup_iters",
    "check_iters",
    "time_mode",
    "busbw_factor",
    "fit_alpha_us",
    "fit_busbw_gbps",
    "fit_r2",
    "point_id",
    "point",
    "steps",
    "warmup_steps",
    "throughput_steps",
    "samples_per_s",
    "tokens_per_s",
    "step_time_p50_ms",
    "step_time_p90_ms",
    "skipped_steps",
    "training_flops_per_sample",
    "tokens_per_sample",
    "flops_formula",
    "mfu",
    "peak_tflops",
    "peak_source",
    "memory_source",
    "data_description",
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
    "message",
    "peak_memory_bytes",
    # Added since: how far a run got (steps written as it went, loader batches and skipped-sample
    # causes), the second FLOPs convention derived from the model, and local SGD's closing
    # average (it follows from --steps and --local-sgd).
    "steps_written",
    "data_batches",
    "data_undecodable",
    "data_truncated",
    "alt_training_flops_per_sample",
    "alt_flops_formula",
    "alt_mfu",
    "local_sgd_final_average",
    # The JPEG decoder's share of data_decode_ms and the coefficients it inverse-transformed.
    "data_jpeg_ms",
    "data_coef_bytes",
    # What the parameter all-gather of --shard zero1|zero2 receives per step, and what zero2's
    # reduce-scatter leaves on a rank: they follow from the `shard` attribute (which counts), the
    # model and the buckets.
    "gathered_bytes_per_step",
    "reduce_scattered_bytes_per_step",
    # The model's size (it follows from --model and the shape flags, which count), whether MFU's
    # peak held and the peaks rejected (results: issue 60 found them splitting configurations),
    # and how many steps were written so far.
    "parameters",
    "mfu_valid",
    "mfu_rejected_peaks",
    # What the step held for its backward and spent recomputing (they follow from
    # activation_checkpoint, which counts, and the model), and the attention kernel the runtime
    # picked for the device it ran on.
    "activation_bytes",
    "recompute_ms_per_step",
    "attention_backend",
    # What tensor parallelism's collectives reduced and took per step: they follow from mesh_tp
    # and the model.
    "tp_comm_bytes_per_step",
    "tp_comm_ms_per_step",
    # Where the weights came from: the --init-from flag counts (a model shape flag, as --layers).
    "init_from",
}

# Setting attributes added since files were first written, with the value a run written before
# them ran with: such a run matches one that records the default (dtune-train before --shard
# existed ran DDP). reshard_after_forward, shard_unit and shard_prefetch are written for --shard
# zero3 runs only: the others take zero3's defaults (on, block, 1), so that they tell
# configurations apart only where a zero3 run changed them. (zero3 runs written before
# --shard-prefetch gathered each unit when it was needed, prefetch 0: they read as 1.) Runs from
# before --activation-checkpoint kept every activation; before --sequence-parallel, none; before
# --stage-pieces, a pipeline cut between blocks.
ATTR_DEFAULTS = {
    "train": {
        "shard": "none",
        "reshard_after_forward": "1",
        "shard_unit": "block",
        "shard_prefetch": "1",
        "activation_checkpoint": "none",
        "sequence_parallel": "0",
        "stage_pieces": "blocks",
    }
}

# Recorded environment variables that change between two launches of one configuration.
IGNORED_ENV = [
    # Open MPI's launcher telling each process who and where it is: job id, session
    # directories, daemon URIs, the working directory, this process's rank, the command.
    "OMPI_MCA_orte_*",
    "OMPI_MCA_ess_*",
    "OMPI_MCA_initial_wdir",
    "OMPI_COMM_WORLD_*",
    "OMPI_FILE_LOCATION",
    "OMPI_COMMAND",
    "OMPI_ARGV",
    "OMPI_FIRST_RANKS",
    "OMPI_NUM_APP_CTX",
    "OMPI_APP_CTX_NUM_PROCS",
    "OMPI_UNIVERSE_SIZE",
    # Permission to run as root: says who ran it, not how.
    "OMPI_ALLOW_RUN_AS_ROOT*",
    # PMIx wire-up (namespace, server URIs, rank, temporary directories); PMIX_MCA_* settings count.
    "PMIX_*",
    # Slurm's job bookkeeping (job and array ids, node lists, ports, directories, times); the
    # launch shape is matched by the number of ranks, and in sweeps by the point's nodes and
    # ranks per node.
    "SLURM_*",
    # Where dtune's scripts find the binaries and the launcher: A and B are often two builds.
    "DTUNE_BIN_DIR",
    "DTUNE_MPIRUN",
]
_KEEP_ENV = ["PMIX_MCA_*"]
# What Open MPI's mpirun sets in every process it starts (Open MPI 4.1: the ess and pmix components
# to wire up with, the shared-memory hint, PMIx's security and logging defaults, and whether the
# node is oversubscribed), so a pasted command need not pass them. All but the last are how the
# launcher talks to its processes and are left out of identities; whether the ranks share cores
# (OMPI_MCA_mpi_oversubscribe: they then yield when idle) is a condition of the measurement and
# counts. OMPI_MCA_rmaps_base_oversubscribe is the permission (--oversubscribe), which changes
# nothing until the node is oversubscribed.
LAUNCHER_SET_ENV = [
    "OMPI_MCA_ess",
    "OMPI_MCA_pmix",
    "OMPI_MCA_shmem_RUNTIME_QUERY_hint",
    "OMPI_MCA_rmaps_base_oversubscribe",
    "PMIX_MCA_mca_base_component_show_load_errors",
    "PMIX_MCA_psec",
    "OMPI_MCA_mpi_oversubscribe",
]
_LAUNCHER_IGNORED = set(LAUNCHER_SET_ENV) - {"OMPI_MCA_mpi_oversubscribe"}

BINARY = {"comm": "dtune-comm", "train": "dtune-train"}
_FLAG_ENV = {"dtune-comm": "DTUNE_COMM_", "dtune-train": "DTUNE_TRAIN_"}
_NUMBER = re.compile(r"^-\d")


def parse_flags(tokens: list, binary: str) -> dict:
    """{long flag: value} of an argument list (no program name), as CLI11 reads it: `--x v`,
    `--x=v`, `-xV`, short flags by their long names; a flag without a value maps to ""."""
    out, i = {}, 0
    short = COMM_SHORT if binary == "dtune-comm" else {}
    while i < len(tokens):
        t = str(tokens[i])
        i += 1
        if not t.startswith("-") or _NUMBER.match(t):
            continue
        value = None
        if t.startswith("--") and "=" in t:
            t, value = t.split("=", 1)
        elif not t.startswith("--") and len(t) > 2:
            t, value = t[:2], t[2:]
        if value is None and i < len(tokens) and (not str(tokens[i]).startswith("-") or _NUMBER.match(str(tokens[i]))):
            value = str(tokens[i])
            i += 1
        out[short.get(t, t)] = "" if value is None else value
    return out


def _flags_with_env_fallbacks(tokens: list, env: dict, binary: str) -> dict:
    """The flags set on the command line, or through their DTUNE_COMM_X / DTUNE_TRAIN_X
    environment fallback (X: the long name upper-cased, '-' as '_'); the command line wins."""
    flags = parse_flags(tokens, binary)
    prefix = _FLAG_ENV.get(binary)
    for k, v in env.items():
        if prefix and k.startswith(prefix):
            flags.setdefault("--" + k[len(prefix) :].lower().replace("_", "-"), str(v))
    if binary == "dtune-comm":  # its underscore flags, which their fallbacks spell with '-'
        under = {f.replace("_", "-"): f for f in _COMM_UNDERSCORED}
        flags = {under.get(k, k): v for k, v in flags.items()}
    ignored = IGNORED_FLAGS.get(binary, set())
    return {k: v for k, v in flags.items() if k not in ignored}


def settings_env(env: dict) -> dict:
    """The recorded environment less IGNORED_ENV, what the launcher sets for its own use
    (LAUNCHER_SET_ENV but OMPI_MCA_mpi_oversubscribe) and the flag fallbacks (folded into flags)."""

    def ignored(k):
        if k in _LAUNCHER_IGNORED:
            return True
        if any(fnmatch.fnmatchcase(k, p) for p in _KEEP_ENV):
            return False
        return any(fnmatch.fnmatchcase(k, p) for p in IGNORED_ENV) or k.startswith(tuple(_FLAG_ENV.values()))

    return {k: str(v) for k, v in env.items() if not ignored(k)}


def run_identity(run: dict, by_point: bool) -> dict:
    """{name: value as str} defining a run (a row of loader.load_runs). `by_point`: identify it
    by its sweep point (both sides of a comparison come from merged sweep files)."""
    binary = BINARY.get(run["benchmark"], str(run["benchmark"]))
    attrs = run["attrs"]
    settings = SETTING_ATTRS.get(run["benchmark"])
    counts = (lambda k: k in settings) if settings is not None else (lambda k: k not in IGNORED_ATTRS)
    out = {k: str(v) for k, v in attrs.items() if counts(k)}
    for k, v in ATTR_DEFAULTS.get(run["benchmark"], {}).items():
        out.setdefault(k, v)
    if "cache_dir" in out:  # a path: whether a cache was used counts, not where it was
        out["cache_dir"] = "yes" if attrs["cache_dir"] else "no"
    env = dict(run["env"] or {})
    if by_point:  # the point's arguments, exported variables and launch shape
        p = run["point"]
        env.update(p.get("env", {}))
        tokens = p.get("args", [])
        out.update(
            {"np": str(p.get("ranks")), "nodes": str(p.get("nodes")), "ranks_per_node": str(p.get("ranks_per_node"))}
        )
    else:
        tokens = shlex.split(run["command_line"])[1:] if run["command_line"] else []
        out["np"] = str(run["world_size"])
    if run["benchmark"] == "train":
        out = {k: v for k, v in out.items() if k not in MESH_SPELLINGS} | mesh_fields(attrs, out["np"])
    out.update(_flags_with_env_fallbacks(tokens, env, binary))
    out.update(settings_env(env))
    return out


def mesh_fields(attrs: dict, ranks) -> dict:
    """A train run's MESH_FIELDS, from its attributes (`ranks`: where they lack world_size)."""
    m = mesh_of(attrs, ranks)
    return {"mesh_pp": str(m.pp), "mesh_tp": str(m.tp), "mesh_order": canonical_order(m)}
