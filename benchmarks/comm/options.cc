// CLI11 definition of dtune-comm's flags, with nccl-tests' short names and defaults.
#include "benchmarks/comm/options.h"

#include <cctype>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <utility>

#include "benchmarks/comm/collectives.h"
#include "core/build_info.h"
#include "core/cli.h"
#include "core/error.h"
#include "core/results_file.h"

namespace dtune::comm {

std::vector<uint64_t> Options::sizes() const {
  std::vector<uint64_t> out;
  for (uint64_t s = min_bytes; s <= max_bytes;) {
    out.push_back(s);
    const uint64_t next = step_factor > 1 ? s * static_cast<uint64_t>(step_factor) : s + step_bytes;
    if (next <= s) break;
    s = next;
  }
  return out;
}

namespace {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

template <typename T, typename Parse>
std::vector<T> parse_list(const std::string& text, const std::string& flag,
                          const std::vector<T>& all, Parse parse) {
  std::vector<T> out;
  for (const auto& item : split_list(text)) {
    if (item == "all") return all;
    out.push_back(parse(item, flag));
  }
  if (out.empty()) throw UsageError(flag + ": empty list");
  return out;
}

// --pattern fsdp against the other flags: its sizes, collectives and op come from the model, so
// the flags that set them are refused rather than ignored; its own flags need it.
void check_pattern(const CLI::App& app, Options& o, const std::string& shard_unit, int world_size) {
  const auto given = [&app](const char* flag) { return app.count(flag) > 0; };
  if (o.pattern != Pattern::kFsdp) {
    for (const char* flag : {"--model", "--shard-unit", "--reshard-after-forward", "--placement"})
      if (given(flag))
        throw UsageError(std::string(flag) + " is for --pattern fsdp: add --pattern fsdp or drop " +
                         flag);
    return;
  }
  if (o.model.empty())
    throw UsageError("--pattern fsdp needs --model NAME (e.g. --model gpt2-tiny)");
  for (const auto& [flag, name] :
       {std::pair{"--minbytes", "-b/--minbytes"}, std::pair{"--maxbytes", "-e/--maxbytes"},
        std::pair{"--stepbytes", "-i/--stepbytes"}, std::pair{"--stepfactor", "-f/--stepfactor"},
        std::pair{"--collective", "--collective"}, std::pair{"--op", "-o/--op"},
        std::pair{"--output_file", "-J/--output_file"},
        std::pair{"--per_iter_timing", "-I/--per_iter_timing"}})
    if (given(flag))
      throw UsageError(std::string(name) +
                       " does not apply to --pattern fsdp (its calls and sizes come from --model "
                       "and --shard-unit): drop " +
                       name);
  if (o.algorithm == Algorithm::kHierarchical)
    throw UsageError(
        "--algorithm hierarchical is for allreduce, which --pattern fsdp does not call: drop "
        "one of them");
  if (o.format != Format::kTable)
    throw UsageError("--format " + to_string(o.format) +
                     ": --pattern fsdp prints a table only (its HDF5 file holds every value): "
                     "drop --format");
  if (o.dtypes.size() != 1 || (o.dtypes[0] != Dtype::kFloat32 && o.dtypes[0] != Dtype::kBfloat16))
    throw UsageError(
        "-d/--datatype: --pattern fsdp takes the weights' dtype, one of float32 and bfloat16");
  o.shard_unit = parse_shard_unit(shard_unit);
  // An unknown model, or a unit size that cuts it into nothing or too much, exits 2 here on every
  // rank alike (the driver makes the same plan again).
  make_fsdp_plan(o.model, o.shard_unit, o.dtypes[0], world_size, o.reshard, o.fsdp_placement);
}

}  // namespace

int parse_options(int argc, char** argv, bool print, int world_size, Options& o) {
  CLI::App app{
      "dtune-comm: collective communication benchmark (nccl-tests conventions).\n"
      "Launch with mpirun -np N (or srun --mpi=pmix); rank 0 prints an nccl-tests table and writes "
      "every iteration of every rank to an HDF5 file (results/SCHEMA.md).",
      "dtune-comm"};
  app.set_version_flag("--version", "dtune-comm " + build_info::dtune_version());
  app.footer(
      "Exit status: 0 all results exact; 1 wrong elements or an error; 2 bad input; 3 a rank\n"
      "did not arrive within --timeout; 130 interrupted (measured sizes kept).\n"
      "Rules between flags (exit 2 naming both; `dtune sweep plan` checks them for every point):\n"
      "-b <= -e; -r is a rank (0..ranks-1); --mpi-buffers device, --algorithm hierarchical and\n"
      "--mpi-progress thread only with --backend mpi;\n"
      "--output or --no-output, not both;\n"
      "--pattern fsdp needs --model, takes one -d of float32 or bfloat16 and the table format, "
      "and\n"
      "refuses -b -e -i -f --collective -o -J -I and --algorithm hierarchical (its sizes and "
      "calls\n"
      "come from the model); --model, --shard-unit, --reshard-after-forward and --placement only\n"
      "with --pattern fsdp.");
  app.get_formatter()->column_width(34);
  std::string min_b = "32M", max_b = "32M", step_b = "1M", coll = to_string(o.collectives[0]),
              dtype = to_string(o.dtypes[0]), op = to_string(o.ops[0]),
              backend = to_string(o.backend), mpi_buffers = to_string(o.mpi_buffers),
              format = to_string(o.format), algorithm = to_string(o.algorithm),
              mpi_progress = to_string(o.mpi_progress), output, pattern = to_string(o.pattern),
              shard_unit = "block", reshard = to_string(o.reshard),
              placement = to_string(o.fsdp_placement);
  int blocking = 0, average = 1, nthreads = 1, ngpus = 1, per_iter = 0;
  std::string json_path;
  bool no_output = false;
  auto env = [](const char* name) { return std::string("DTUNE_COMM_") + name; };
  app.add_option("-b,--minbytes", min_b, "smallest size in bytes per rank (K/M/G = 2^10/2^20/2^30)")
      ->envname(env("MINBYTES"))
      ->capture_default_str();
  app.add_option("-e,--maxbytes", max_b, "largest size in bytes")
      ->envname(env("MAXBYTES"))
      ->capture_default_str();
  app.add_option("-i,--stepbytes", step_b, "additive step between sizes (used when -f is 1)")
      ->envname(env("STEPBYTES"))
      ->capture_default_str();
  app.add_option("-f,--stepfactor", o.step_factor, "multiplicative step between sizes (> 1)")
      ->envname(env("STEPFACTOR"))
      ->capture_default_str()
      ->check(kPositive);
  app.add_option("-n,--iters", o.iters, "timed iterations per size")
      ->envname(env("ITERS"))
      ->capture_default_str()
      ->check(kPositive);
  app.add_option("-w,--warmup_iters", o.warmup_iters, "warm-up iterations per size (not timed)")
      ->envname(env("WARMUP_ITERS"))
      ->capture_default_str()
      ->check(kNonNegative);
  app.add_option("-c,--check", o.check_iters, "check iterations per size (0: no correctness check)")
      ->envname(env("CHECK"))
      ->capture_default_str()
      ->check(kNonNegative);
  app.add_option(
         "--collective", coll,
         "collectives, comma separated: " + join_names(collective_table(), ", ") + ", or all")
      ->envname(env("COLLECTIVE"))
      ->capture_default_str();
  app.add_option("-d,--datatype", dtype,
                 join_names(dtype_table(), "|") +
                     " (or nccl-tests names "
                     "float, double, half), comma separated, or all")
      ->envname(env("DATATYPE"))
      ->capture_default_str();
  app.add_option("-o,--op", op,
                 "reduction: " + join_names(reduce_op_names(), "|") + ", comma separated, or all")
      ->envname(env("OP"))
      ->capture_default_str();
  app.add_option("-r,--root", o.root, "root rank of broadcast and reduce")
      ->envname(env("ROOT"))
      ->capture_default_str()
      ->check(kNonNegative);
  app.add_option("-z,--blocking", blocking, "1: wait for completion after every operation")
      ->envname(env("BLOCKING"))
      ->capture_default_str()
      ->check(integer_in(0, 1));
  app.add_option("-a,--average", average,
                 "time reported across ranks: 0 rank 0, 1 average, 2 min, 3 max")
      ->envname(env("AVERAGE"))
      ->capture_default_str()
      ->check(integer_in(0, 3));
  app.add_option("-J,--output_file", json_path,
                 "also write nccl-tests' JSON (schema version 3) to this .json file; an existing "
                 "file is kept and FILE.0, FILE.1, ... used instead; several collectives: one file "
                 "each, FILE with -<collective> before .json")
      ->envname(env("OUTPUT_FILE"));
  app.add_option("-I,--per_iter_timing", per_iter,
                 "1: the -J file also holds every iteration's time (nccl-tests -I)")
      ->envname(env("PER_ITER_TIMING"))
      ->capture_default_str()
      ->check(integer_in(0, 1));
  app.add_option("-t,--nthreads", nthreads,
                 "threads per process: 1 only (nccl-tests -t; dtune runs "
                 "one GPU per process)")
      ->envname(env("NTHREADS"))
      ->capture_default_str();
  app.add_option("-g,--ngpus", ngpus,
                 "GPUs per thread: 1 only (nccl-tests -g; dtune runs one GPU per "
                 "process)")
      ->envname(env("NGPUS"))
      ->capture_default_str();
  app.add_option("--backend", backend, "mpi (host buffers) or nccl (one GPU per rank)")
      ->envname(env("BACKEND"))
      ->capture_default_str()
      ->check(CLI::IsMember(names_of(backend_names())));
  app.add_option("--mpi-buffers", mpi_buffers,
                 "mpi backend: host memory, or device memory passed to a CUDA-aware MPI")
      ->envname(env("MPI_BUFFERS"))
      ->capture_default_str()
      ->check(CLI::IsMember(names_of(mpi_buffers_names())));
  app.add_option("--algorithm", algorithm,
                 "allreduce with --backend mpi: flat (the library's MPI_Allreduce) or hierarchical "
                 "(reduce within each node over shared memory, allreduce among the node leaders, "
                 "broadcast within each node); other collectives are always the library's")
      ->envname(env("ALGORITHM"))
      ->capture_default_str()
      ->check(CLI::IsMember(names_of(algorithm_names())));
  app.add_option(
         "--mpi-progress", mpi_progress,
         "--backend mpi: call (the library's blocking collective, progressed inside the call) or "
         "thread (the nonblocking one, MPI_Iallreduce etc., started and polled with MPI_Test by a "
         "communication thread while the caller sleeps, as dtune-train's gradient reducer does; "
         "in-place sendrecv has no nonblocking form and is left out)")
      ->envname(env("MPI_PROGRESS"))
      ->capture_default_str()
      ->check(CLI::IsMember(names_of(mpi_progress_names())));
  app.add_option("--format", format,
                 "what rank 0 prints on stdout: table (nccl-tests), json or csv")
      ->envname(env("FORMAT"))
      ->capture_default_str()
      ->check(CLI::IsMember(names_of(format_names())));
  app.add_option("--output", output,
                 "HDF5 results file [default: $DTUNE_RESULTS_DIR or results/, "
                 "dtune-comm-<UTC time>-<pid>.h5]")
      ->envname(env("OUTPUT"));
  app.add_flag("--no-output", no_output, "write no HDF5 file")->envname(env("NO_OUTPUT"));
  app.add_flag(
         "--overwrite", o.overwrite,
         "replace an existing --output file (default: keep it and write NAME.1.h5, NAME.2.h5, ...)")
      ->envname(env("OVERWRITE"));
  app.add_option("--load-threads", o.load_threads,
                 "busy threads per rank that keep cores computing beside the measurement (CPU "
                 "training's compute threads beside its communication thread; `dtune model` fits "
                 "the link of a run with as many compute threads per rank from it)")
      ->envname(env("LOAD_THREADS"))
      ->capture_default_str()
      ->check(thread_count());
  app.add_option(
         "--gap-us", o.gap_us,
         "microseconds every rank sleeps before each timed iteration, outside the timing, so "
         "that each call starts cold, as training's sparse gradient reductions do (0: back "
         "to back)")
      ->envname(env("GAP_US"))
      ->capture_default_str()
      ->check(CLI::Range(0, 10000000));
  app.add_option("--timeout", o.timeout_s,
                 "seconds a collective or rank arrival may take before the "
                 "job is aborted, naming the ranks that did not arrive")
      ->envname(env("TIMEOUT"))
      ->capture_default_str()
      ->check(kPositive);
  app.add_option("--pattern", pattern,
                 "sizes (each --collective over -b..-e) or fsdp (the collective calls of one "
                 "ZeRO-3/FSDP training step of --model, each timed: doc/comm.md)")
      ->envname(env("PATTERN"))
      ->capture_default_str()
      ->check(CLI::IsMember(names_of(pattern_names())));
  app.add_option("--model", o.model,
                 "--pattern fsdp: the model whose step is replayed (a dtune model name, e.g. "
                 "gpt2-tiny, gpt2-d12, resnet50; sizes from its parameter count)")
      ->envname(env("MODEL"));
  app.add_option("--shard-unit", shard_unit,
                 "--pattern fsdp: block (one unit per transformer block or ResNet stage, the "
                 "embeddings, final norm, stem and head their own) or a size in MiB (whole "
                 "parameters grouped as gradient buckets are, each unit at most that size, as "
                 "dtune-train --shard-unit)")
      ->envname(env("SHARD_UNIT"))
      ->capture_default_str();
  app.add_option("--reshard-after-forward", reshard,
                 "--pattern fsdp: on (free each unit's gathered parameters after its forward and "
                 "gather them again in backward: 3 calls per unit) or off (2 calls per unit)")
      ->envname(env("RESHARD_AFTER_FORWARD"))
      ->capture_default_str()
      ->check(CLI::IsMember(names_of(reshard_names())));
  app.add_option("--placement", placement,
                 "--pattern fsdp: fsdp2 (all-gather in place, reduce-scatter out of place, as "
                 "PyTorch's fully_shard calls them), out-of-place or in-place (every call)")
      ->envname(env("PLACEMENT"))
      ->capture_default_str()
      ->check(CLI::IsMember(names_of(fsdp_placement_names())));
  app.add_option("--debug-plant-wrong", o.plant_wrong_rank,
                 "test only: corrupt one input element on this rank (the check must catch it)")
      ->group("Testing");
  app.add_option("--debug-hang-rank", o.hang_rank,
                 "test only: this rank stops taking part (the timeout must name it)")
      ->group("Testing");

  const int rc = parse_cli(app, argc, argv, print);
  if (rc >= 0) return rc;

  // nccl-tests drives nThreads x nGpus GPUs from one process (src/common.cu -t, -g); dtune runs one
  // GPU per rank, so only the value 1 (which nccl-tests' README passes: -g 1) means the same run.
  for (const auto& [flag, value] :
       {std::pair{"-t/--nthreads", nthreads}, std::pair{"-g/--ngpus", ngpus}})
    if (value != 1)
      throw UsageError(std::string(flag) + " " + std::to_string(value) +
                       ": dtune runs one GPU per rank (one process per GPU): use " +
                       std::string(flag).substr(0, 2) + " 1 and mpirun -np <GPUs>");
  o.min_bytes = parse_size(min_b, "-b/--minbytes");
  o.max_bytes = parse_size(max_b, "-e/--maxbytes");
  o.step_bytes = parse_size(step_b, "-i/--stepbytes");
  if (o.min_bytes > o.max_bytes)
    throw UsageError("-b/--minbytes (" + min_b + ") is larger than -e/--maxbytes (" + max_b +
                     "): make -b at most -e");
  o.collectives = parse_list(coll, "--collective", all_collectives(), parse_collective);
  o.dtypes = parse_list(dtype, "-d/--datatype", all_dtypes(), parse_dtype);
  o.ops = parse_list(op, "-o/--op", all_ops(), parse_op);
  if (o.root >= world_size)
    throw UsageError("-r/--root " + std::to_string(o.root) + " is not a rank (world size " +
                     std::to_string(world_size) + "): choose 0.." + std::to_string(world_size - 1));
  o.blocking = blocking ? Blocking::kYes : Blocking::kNo;
  o.time_mode = static_cast<TimeMode>(average);
  o.backend = find_named(backend_names(), backend)->value;  // checked by IsMember
  o.mpi_buffers = find_named(mpi_buffers_names(), mpi_buffers)->value;
  if (o.backend == BackendKind::kNccl && o.mpi_buffers == MpiBuffers::kDevice)
    throw UsageError(
        "--mpi-buffers device is for --backend mpi (the nccl backend always uses device "
        "buffers): drop one of them");
  o.algorithm = find_named(algorithm_names(), algorithm)->value;
  if (o.backend == BackendKind::kNccl && o.algorithm == Algorithm::kHierarchical)
    throw UsageError(
        "--algorithm hierarchical is for --backend mpi (NCCL picks its own ring or tree across "
        "nodes): drop one of them");
  o.mpi_progress = find_named(mpi_progress_names(), mpi_progress)->value;
  if (o.backend == BackendKind::kNccl && o.mpi_progress == MpiProgress::kThread)
    throw UsageError(
        "--mpi-progress thread is for --backend mpi (NCCL progresses on the GPU): drop one of "
        "them");
  o.format = find_named(format_names(), format)->value;
  if (no_output && !output.empty())
    throw UsageError("--no-output and --output both given: keep one");
  if (!no_output) {
    const char* dir = std::getenv("DTUNE_RESULTS_DIR");
    o.output = output.empty() ? default_results_path(dir ? dir : "results", "dtune-comm") : output;
  }
  // nccl-tests infers the file type from the suffix and writes JSON only for ".json" (any case),
  // silently nothing otherwise (src/common.cu classifyOutputFile); dtune says so instead.
  if (!json_path.empty()) {
    const auto dot = json_path.rfind('.');
    std::string ext = dot == std::string::npos ? "" : json_path.substr(dot + 1);
    for (char& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (ext != "json" || json_path.find('/', dot) != std::string::npos)
      throw UsageError("-J/--output_file " + json_path +
                       ": nccl-tests' JSON is written to a file named *.json: add .json");
  }
  o.json_path = json_path;
  o.per_iter_timing = per_iter == 1;
  // A deadline is a time point: beyond about 11 days it stops meaning anything (and 1e300 s
  // overflows the clock).
  constexpr double kMaxTimeoutS = 1e6;
  if (o.timeout_s > kMaxTimeoutS) throw UsageError("--timeout: at most 1000000 s (about 11 days)");
  if (o.sizes().size() > 4096)
    throw UsageError("-b/-e/-i give " + std::to_string(o.sizes().size()) +
                     " sizes; use -f for a multiplicative step or a larger -i");
  o.pattern = find_named(pattern_names(), pattern)->value;
  o.reshard = find_named(reshard_names(), reshard)->value;
  o.fsdp_placement = find_named(fsdp_placement_names(), placement)->value;
  check_pattern(app, o, shard_unit, world_size);
  o.command_line = join_command_line(argc, argv);
  o.args.assign(argv, argv + argc);
  return -1;
}

}  // namespace dtune::comm
