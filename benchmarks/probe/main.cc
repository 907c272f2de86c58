// dtune-probe: the hardware's limits, measured, so that MFU and bandwidth figures have a ceiling
// that this machine can reach: `gemm` (TFLOP/s of torch::mm and cuBLASLt), `memory` (STREAM, host
// and GPU), `copy` (host<->GPU, pinned against pageable), `p2p` (GPU x GPU), `launch` (kernel
// launch and event overhead) and `topology` (hwloc + NVML, as `nvidia-smi topo -m`). Launch: one
// process, or mpirun -np N for every rank's device. Each invocation writes one results file
// (SCHEMA.md).
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "benchmarks/probe/device_probes.h"
#include "benchmarks/probe/gemm.h"
#include "benchmarks/probe/memory.h"
#include "core/build_info.h"
#include "core/cli.h"
#include "core/deadline.h"
#include "core/device_info.h"
#include "core/error.h"
#include "core/gather.h"
#include "core/main_guard.h"
#include "core/provenance.h"
#include "core/results_file.h"

namespace {

namespace dp = dtune::probe;

struct Common {
  std::string output;
  bool no_output = false, overwrite = false;
  double timeout_s = 600;
};

// Whether every rank sees a GPU (ranks agree: rank 0 decides and broadcasts).
bool every_rank_sees_gpus(const dtune::RunContext& ctx) {
  const auto have = dtune::gather_longs(ctx.comm(), {dp::visible_gpus() > 0 ? 1LL : 0LL});
  std::string verdict = "1";
  for (long long h : have)
    if (h == 0) verdict = "0";
  return dtune::broadcast_string(ctx.comm(), verdict) == "1";
}

}  // namespace

int main(int argc, char** argv) {
  dtune::end_process(dtune::run_main(argc, argv, "dtune-probe", [](const dtune::MainArgs& a) {
    CLI::App app{
        "dtune-probe: measure this machine's limits (GEMM TFLOP/s, memory and copy bandwidth, "
        "launch overhead) and its topology, into a results file that dtune-train's MFU and the "
        "report read."};
    app.require_subcommand(1);
    Common c;
    app.add_option("--output", c.output,
                   "HDF5 results file [default: results/dtune-probe-<time>-<pid>.h5, under "
                   "$DTUNE_RESULTS_DIR when set].");
    app.add_flag("--no-output", c.no_output, "Write no HDF5 file.");
    app.add_flag("--overwrite", c.overwrite,
                 "Replace an existing --output file (default: keep it and write NAME.1.h5, ...).");
    app.add_option("--timeout", c.timeout_s,
                   "Seconds the ranks wait for each other while setting up before the job is "
                   "aborted.")
        ->capture_default_str()
        ->check(dtune::kPositive);

    dp::GemmOptions g;
    CLI::App* gemm = app.add_subcommand(
        "gemm",
        "Achieved TFLOP/s of torch::mm (and cuBLASLt on a GPU) over a sweep of shapes, per dtype.");
    gemm->add_option("--shapes", g.shapes,
                     "Shapes: N (square) or MxNxK [default: 256 512 1024 2048 on a CPU, "
                     "1024 to 8192 on a GPU].")
        ->delimiter(',');
    gemm->add_option("--dtype", g.dtypes,
                     "fp32, tf32 (GPU), fp16, bf16 [default: fp32,bf16 on a CPU; all four on a "
                     "GPU].")
        ->delimiter(',');
    gemm->add_option("--threads", g.threads, "CPU intra-op threads (0: LibTorch's default).")
        ->capture_default_str()
        ->check(dtune::thread_count());
    gemm->add_option("--min-time", g.min_time_s, "Seconds of timed products per shape, at least.")
        ->capture_default_str()
        ->check(dtune::kPositive);
    gemm->add_option("--min-iters", g.min_iters, "Timed products per shape, at least.")
        ->capture_default_str()
        ->check(dtune::integer_in(1, 1000000));
    gemm->add_option("-w,--warmup", g.warmup, "Untimed products per shape first.")
        ->capture_default_str()
        ->check(dtune::integer_in(0, 1000));
    gemm->add_option("--max-seconds", g.max_seconds,
                     "Per dtype and library: a shape whose estimated time (the previous shape's, "
                     "scaled by FLOPs) would end past this is not started; the peak is then the "
                     "largest shape measured, and the file says which were left out (0: no "
                     "bound).")
        ->capture_default_str()
        ->check(dtune::kNonNegative);
    gemm->add_option("--device", g.device, "auto (the rank's GPU when there is one), cpu, cuda.")
        ->capture_default_str()
        ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
    gemm->add_option("--library", g.libraries,
                     "torch (torch::mm), cublaslt (cuBLASLt called directly: heuristic algorithm, "
                     "32 MiB workspace, CUDA-event timing; GPU only) [default: both on a GPU, "
                     "torch on a CPU].")
        ->delimiter(',');

    dp::MemoryOptions m;
    std::string array_size;
    bool host_only = false;
    CLI::App* memory = app.add_subcommand(
        "memory", "STREAM copy/scale/add/triad bandwidth, host (and the rank's GPU).");
    memory->add_option("--array-size", array_size,
                       "Bytes per array, K/M/G suffixes [default: 4 x the caches, at least 64M].");
    memory->add_option("--threads", m.threads, "Host threads (0: OpenMP's default).")
        ->capture_default_str()
        ->check(dtune::thread_count());
    memory->add_option("-n,--iters", m.iters, "Iterations of the four kernels (first not counted).")
        ->capture_default_str()
        ->check(dtune::integer_in(1, 100000));
    memory->add_flag("--host-only", host_only, "Leave the GPU out.");

    dp::CopyOptions cp;
    std::string cmin = "4K", cmax = "1G";
    CLI::App* copy = app.add_subcommand(
        "copy", "GPU only: host<->device copy bandwidth, pinned against pageable host memory.");
    copy->add_option("-b,--minbytes", cmin, "Smallest copy (K/M/G).")->capture_default_str();
    copy->add_option("-e,--maxbytes", cmax, "Largest copy (K/M/G).")->capture_default_str();
    copy->add_option("-f,--stepfactor", cp.factor, "Multiplicative size step.")
        ->capture_default_str()
        ->check(CLI::Range(1.01, 1024.0));
    copy->add_option("-n,--iters", cp.iters, "Timed copies per size.")
        ->capture_default_str()
        ->check(dtune::integer_in(1, 100000));

    std::string p2p_size = "256M";
    int64_t p2p_iters = 10;
    CLI::App* p2p = app.add_subcommand(
        "p2p", "GPU only: GPU x GPU copy bandwidth and latency, peer access on and off.");
    p2p->add_option("--size", p2p_size, "Bytes per copy (K/M/G).")->capture_default_str();
    p2p->add_option("-n,--iters", p2p_iters, "Timed copies per pair.")
        ->capture_default_str()
        ->check(dtune::integer_in(1, 100000));

    int64_t launch_iters = 1000;
    CLI::App* launch = app.add_subcommand("launch", "GPU only: kernel launch and event overhead.");
    launch->add_option("-n,--iters", launch_iters, "Timed launches.")
        ->capture_default_str()
        ->check(dtune::integer_in(1, 10000000));

    CLI::App* topology = app.add_subcommand(
        "topology",
        "Sockets, NUMA nodes, cores, caches and PCI devices (hwloc); GPUs and NVLink (NVML); "
        "the GPU/NIC link matrix as nvidia-smi topo -m prints it.");
    for (CLI::App* sub : {gemm, memory, copy, p2p, launch, topology}) sub->fallthrough();

    const int rc = dtune::parse_cli(app, a.argc, a.argv, a.ctx.is_root());
    if (rc >= 0) return rc;
    if (c.no_output && !c.output.empty())
      throw dtune::UsageError("--no-output and --output both given: keep one");
    if (!array_size.empty())
      m.array_bytes = static_cast<int64_t>(dtune::parse_size(array_size, "--array-size"));
    m.device = !host_only;
    cp.min_bytes = static_cast<int64_t>(dtune::parse_size(cmin, "-b/--minbytes"));
    cp.max_bytes = static_cast<int64_t>(dtune::parse_size(cmax, "-e/--maxbytes"));
    if (cp.min_bytes > cp.max_bytes)
      throw dtune::UsageError("-b/--minbytes is larger than -e/--maxbytes: swap them");
    const int64_t p2p_bytes = static_cast<int64_t>(dtune::parse_size(p2p_size, "--size"));
    const std::string which = app.get_subcommands().front()->get_name();

    if (a.ctx.is_root())
      std::printf("# dtune-probe %s (%s), %d rank(s): %s\n",
                  dtune::build_info::dtune_version().c_str(),
                  dtune::build_info::git_revision().c_str(), a.ctx.world_size(), which.c_str());
    // The GPU-only probes on a machine without GPUs: said plainly, nothing measured, exit 0.
    const bool gpus = every_rank_sees_gpus(a.ctx);
    if (!gpus && (copy->parsed() || p2p->parsed() || launch->parsed())) {
      if (a.ctx.is_root())
        std::printf(
            "# dtune-probe %s: no GPU: %s no CUDA device (cudaGetDeviceCount); nothing "
            "measured, no results file written\n",
            which.c_str(), a.ctx.world_size() > 1 ? "a rank sees" : "this machine has");
      return 0;
    }
    const char* dir = std::getenv("DTUNE_RESULTS_DIR");
    if (!c.no_output && c.output.empty())
      c.output = dtune::default_results_path(dir ? dir : "results", "dtune-probe");
    std::optional<dtune::ResultsFile> file;
    std::optional<dtune::DeadlineGuard> setup;
    setup.emplace(a.watchdog, c.timeout_s, "setting up (the results file, every rank's host)");
    if (!c.output.empty())
      file = dtune::create_results_on_root(
          a.ctx, c.output, "dtune-probe", "--output",
          c.overwrite ? dtune::Existing::kOverwrite : dtune::Existing::kNewName);
    const std::string device =
        gpus && !(gemm->parsed() && g.device == "cpu") && !(memory->parsed() && host_only)
            ? dtune::describe_device(a.ctx.local_rank() % dp::visible_gpus())
            : "cpu";
    const dtune::Provenance prov =
        dtune::collect_provenance(a.ctx, dtune::join_command_line(a.argc, a.argv), device, "");
    setup.reset();
    if (file) file->write_provenance(prov);
    const bool root = a.ctx.is_root();
    if (gemm->parsed()) {
      for (const auto& r : dp::run_gemm(a.ctx, g)) {
        if (!root) continue;
        dp::print_gemm(r);
        if (file) dp::write_gemm(*file, r);
      }
    } else if (memory->parsed()) {
      for (const auto& r : dp::run_memory(a.ctx, m)) {
        if (!root) continue;
        dp::print_memory(r);
        if (file) dp::write_memory(*file, r);
      }
    } else if (copy->parsed()) {
      for (const auto& r : dp::run_copy(a.ctx, cp)) {
        if (!root) continue;
        dp::print_copy(r);
        if (file) dp::write_copy(*file, r);
      }
    } else if (p2p->parsed()) {
      if (root) {
        if (dp::visible_gpus() < 2)
          std::printf("# dtune-probe p2p: one GPU visible to rank 0: no pair to measure\n");
        else
          for (const auto& r : dp::run_p2p(p2p_bytes, p2p_iters)) {
            dp::print_p2p(r);
            if (file) dp::write_p2p(*file, r);
          }
      }
    } else if (launch->parsed()) {
      const dp::LaunchRecord r = dp::run_launch(a.ctx, launch_iters);
      if (root) {
        dp::print_launch(r);
        if (file) dp::write_launch(*file, r);
      }
    } else if (topology->parsed() && root) {
      std::printf("# %s\n%s", prov.topology.summary().c_str(),
                  dtune::format_link_matrix(prov.topology).c_str());
      if (file) dp::write_topology_run(*file, prov.topology);
    }
    if (file) {
      file->finish("complete", 0);
      if (file->runs() > 0) std::printf("# results: %s\n", file->path().c_str());
    }
    return 0;
  }));
}
