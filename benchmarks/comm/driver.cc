// Measurement loop, timing and gathering for dtune-comm; rank 0 summarises each size and hands the
// summaries to the reporters (table, HDF5, -J).
#include "benchmarks/comm/driver.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <thread>

#include "benchmarks/comm/bandwidth.h"
#include "benchmarks/comm/check.h"
#include "benchmarks/comm/comm_results.h"
#include "benchmarks/comm/cpu_load.h"
#include "benchmarks/comm/fsdp_replay.h"
#include "benchmarks/comm/fsdp_results.h"
#include "benchmarks/comm/fsdp_summary.h"
#include "benchmarks/comm/fsdp_table.h"
#include "benchmarks/comm/nccl_tests_json.h"
#include "benchmarks/comm/summary.h"
#include "benchmarks/comm/table.h"
#include "core/arrival.h"
#include "core/cli.h"
#include "core/deadline.h"
#include "core/error.h"
#include "core/gather.h"
#include "core/host_memory.h"
#include "core/provenance.h"
#include "core/rank_board.h"
#include "core/results_file.h"
#include "core/signals.h"
#include "core/watchdog.h"

namespace dtune::comm {
namespace {

constexpr double kWatchdogGraceS = 2.0;

std::string describe(const OpShape& s, Placement p) {
  return to_string(s.collective) + " " + to_string(s.dtype) +
         (is_reduction(s.collective) ? " " + to_string(s.op) : "") + " of " +
         std::to_string(s.bytes) + " B (" + to_string(p) + ")";
}

// The configuration being measured: rank 0 holds the summaries of the sizes done so far, which a
// timeout saves.
struct ConfigInProgress {
  Collective collective{};
  Dtype dtype{};
  ReduceOp op{};
  std::vector<SizeSummary> sizes;
};

class Driver {
 public:
  Driver(const Options& o, const MainArgs& a)
      : o_(o),
        ctx_(a.ctx),
        arrival_(a.ctx),
        board_(a.ctx),
        watchdog_(a.watchdog),
        printer_(o.format, stdout) {
    if (o.pattern == Pattern::kFsdp)
      fsdp_ = make_fsdp_plan(o.model, o.shard_unit, o.dtypes.at(0), a.ctx.world_size(), o.reshard,
                             o.fsdp_placement);
  }
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;
  ~Driver() {
    watchdog_.disarm();
    watchdog_.on_fire(nullptr, nullptr);  // they capture this object
  }

  int run() {
    {
      // The set-up's collectives (the backend's communicators, rank 0's verdicts on the output
      // files, the ranks' provenance).
      const DeadlineGuard guard(watchdog_, o_.timeout_s,
                                "setting up (the backend's communicators, the output files, every "
                                "rank's host and device)");
      backend_ = o_.backend == BackendKind::kNccl
                     ? make_nccl_backend(ctx_)
                     : make_mpi_backend(ctx_, o_.mpi_buffers, o_.algorithm, o_.mpi_progress);
      claim_json();
      open_results();
      const std::string device = backend_->device();
      const std::string nccl_version = o_.backend == BackendKind::kNccl ? backend_->version() : "";
      Provenance prov = collect_provenance(ctx_, o_.command_line, device, nccl_version);
      if (ctx_.is_root()) {
        if (results_) results_->write_provenance(prov);
        print_banner(prov);
      }
      describe_json_devices(prov);
    }
    allocate();
    // A wait past --timeout: say which ranks of this node stopped, and (rank 0) save every size
    // measured so far, the current configuration's included, before the job is aborted.
    watchdog_.on_fire([this] { return board_.diagnose(); },
                      [this] {
                        if (ctx_.is_root()) save_on_timeout();
                      });
    try {
      const CpuLoad load(o_.load_threads);  // --load-threads: busy until the measurement ends
      return measure();
    } catch (const TimeoutError& e) {
      // A rank that never arrived at a size: rank 0 saves, and the message says what the board
      // shows of the missing ranks (stopped, gone or behind), as the watchdog's does.
      if (!ctx_.is_root()) throw;
      save_on_timeout();
      throw TimeoutError(std::string(e.what()) + "; " + board_.diagnose());
    }
  }

 private:
  // Rank 0, when the run ends by a timeout: the configuration in progress is written with the
  // sizes it completed (status "timeout"), and the file is finished with status "timeout".
  void save_on_timeout() {
    if (current_) finish_config(ConfigEnd::kTimeout);
    if (json_) json_->finish();
    if (results_) {
      results_->finish("timeout", kTimeoutExitStatus);
      std::printf("# Results (up to the timeout): %s\n", results_->path().c_str());
      std::fflush(stdout);
    }
  }

  // Rank 0: the version banner, the settings and every rank's device.
  void print_banner(const Provenance& prov) {
    std::vector<std::string> lines;
    for (int r = 0; r < ctx_.world_size(); ++r) {
      char buf[512];
      std::snprintf(buf, sizeof buf, "#  Rank %2d Node %2lld Local %2lld on %s device %s", r,
                    prov.rank_node[r], prov.rank_local_rank[r], prov.rank_host[r].c_str(),
                    prov.rank_device[r].c_str());
      lines.push_back(buf);
    }
    if (const auto m = ctx_.launcher_mismatch(); m.expected > 1)
      std::fprintf(stderr,
                   "dtune-comm: warning: MPI world size is 1 but %s=%d: the launcher "
                   "started separate singletons, not one job (use srun --mpi=pmix, or an mpirun "
                   "from the same MPI dtune was built with)\n",
                   m.variable.c_str(), m.expected);
    printer_.banner(o_, ctx_.world_size(), ctx_.node_count(), lines);
  }

  int measure() {
    if (fsdp_) return finish_run(measure_fsdp());
    bool stopped = false;
    for (Collective c : o_.collectives) {
      if (json_) json_->begin(c);
      for (Dtype d : o_.dtypes) {
        const std::vector<ReduceOp> ops =
            is_reduction(c) ? o_.ops : std::vector<ReduceOp>{ReduceOp::kSum};
        for (ReduceOp op : ops) {
          stopped = run_config(c, d, op);
          if (stopped) break;
        }
        if (stopped) break;
      }
      if (json_) json_->finish();  // interrupted: what was measured of this collective
      if (stopped) break;
    }
    return finish_run(stopped);
  }

  // --pattern fsdp: the step's plan (rank 0 prints it), replayed on every rank, gathered to rank 0,
  // which prints and stores it. Returns true when the ranks agreed to stop (nothing is reported).
  bool measure_fsdp() {
    if (ctx_.is_root()) print_fsdp_plan(stdout, *fsdp_, backend_->name());
    const auto mine =
        replay_fsdp_step(*fsdp_, o_, {*backend_, ctx_, arrival_, board_, watchdog_, step_});
    if (!mine) return true;
    const size_t R = static_cast<size_t>(ctx_.world_size()), I = static_cast<size_t>(o_.iters);
    const std::vector<double> all = gather_doubles(ctx_.comm(), pack_calls(*mine, I));
    if (!ctx_.is_root()) return false;
    const FsdpSummary summary =
        summarize_fsdp(*fsdp_, unpack_calls(all, R, fsdp_->calls.size(), I), o_.time_mode);
    print_fsdp_calls(stdout, summary);
    for (const SizeSummary& z : summary.calls) totals_.add(z);
    if (results_) write_fsdp_group(*results_, summary, o_, backend_->name());
    return false;
  }

  // Rank 0: the footer and the results file's status; every rank: the exit status.
  int finish_run(bool stopped) {
    const int code = stopped ? 130 : totals_.wrong > 0 ? 1 : 0;
    if (ctx_.is_root()) {
      printer_.footer(totals_, o_.check_iters > 0, results_ ? results_->path() : "");
      if (results_) results_->finish(stopped ? "interrupted" : "complete", code);
      if (totals_.wrong > 0)
        std::fprintf(stderr,
                     "dtune-comm: error: %lld wrong elements: the collective results are "
                     "incorrect\n",
                     static_cast<long long>(totals_.wrong));
    }
    return code;
  }

  // Rank 0 creates the -J files before anything else, so a bad name stops every rank with exit 2
  // and leaves no HDF5 file behind.
  void claim_json() {
    if (o_.json_path.empty()) return;
    std::string error;
    if (ctx_.is_root()) {
      try {
        std::vector<std::string> claimed;
        for (const auto& p : json_paths(o_.json_path, o_.collectives))
          claimed.push_back(claim_json_path(p, "-J/--output_file"));
        json_.emplace(o_, claimed);
      } catch (const UsageError& e) {
        error = e.what();
      }
    }
    error = broadcast_string(ctx_.comm(), error);
    if (!error.empty()) throw UsageError(error);
    if (ctx_.is_root())
      for (const auto& p : json_->paths()) printer_.note("# Writing JSON output to " + p);
  }

  // Every rank's pid for the -J file's "devices" (collective: every rank calls it).
  void describe_json_devices(const Provenance& prov) {
    if (o_.json_path.empty()) return;
    const std::vector<double> pids = gather_doubles(ctx_.comm(), {static_cast<double>(::getpid())});
    if (!ctx_.is_root()) return;
    std::vector<JsonDevice> devices;
    for (int r = 0; r < ctx_.world_size(); ++r)
      devices.push_back(make_json_device(r, static_cast<int>(pids[static_cast<size_t>(r)]),
                                         prov.rank_host[static_cast<size_t>(r)],
                                         prov.rank_device[static_cast<size_t>(r)]));
    json_->set_run_info(devices, nccl_version_code(prov.nccl_version));
  }

  void open_results() {
    if (!o_.output.empty())
      results_ = create_results_on_root(ctx_, o_.output, "dtune-comm", "--output",
                                        o_.overwrite ? Existing::kOverwrite : Existing::kNewName);
  }

  // Buffers for the largest shape of the run: every size of every configuration, or every call
  // of the FSDP step.
  void allocate() {
    std::vector<OpShape> shapes;
    if (fsdp_) {
      for (const FsdpCall& c : fsdp_->calls) shapes.push_back(c.shape);
    } else {
      for (Collective c : o_.collectives)
        for (Dtype d : o_.dtypes)
          for (uint64_t b : o_.sizes())
            shapes.push_back(make_shape(c, d, ReduceOp::kSum, o_.root, ctx_.world_size(), b));
    }
    size_t send = 0, recv = 0;
    for (const OpShape& s : shapes) {
      send = std::max(send, s.send_count * dtype_size(s.dtype));
      recv = std::max(recv, std::max(s.send_count, s.recv_count) * dtype_size(s.dtype));
    }
    refuse_if_too_large(send, recv);
    backend_->allocate(send, recv);
  }

  // Host memory one rank takes at the largest size: the input and expected-output images built
  // for every upload, the buffers themselves when they live on the host, and the result copied
  // back for a check. Refused with one line before anything is allocated, when the ranks of this
  // node would need more than the node has available.
  void refuse_if_too_large(size_t send, size_t recv) {
    const bool host_buffers =
        o_.backend == BackendKind::kMpi && o_.mpi_buffers == MpiBuffers::kHost;
    const uint64_t per_rank = 2ull * (send + recv) / (host_buffers ? 1 : 2) +
                              (o_.check_iters > 0 ? std::max(send, recv) : 0);
    if (fsdp_)
      refuse_unless_host_fits(per_rank, ctx_, "--model " + o_.model + "'s largest unit",
                              "give a smaller --shard-unit");
    else
      refuse_unless_host_fits(per_rank, ctx_, "-e/--maxbytes " + format_size(o_.max_bytes),
                              "lower -e/--maxbytes");
  }

  void upload_images(const OpShape& s, Placement p) {
    const CheckImages img =
        make_check_images(s, p, ctx_.rank(), ctx_.rank() == o_.plant_wrong_rank);
    backend_->upload(img.send.data(), img.send.size(), img.recv.data(), img.recv.size());
  }

  // Returns true when the ranks agreed to stop (a signal).
  bool run_config(Collective c, Dtype d, ReduceOp op) {
    const auto sizes = o_.sizes();
    const size_t R = static_cast<size_t>(ctx_.world_size()), I = static_cast<size_t>(o_.iters);
    current_.emplace(ConfigInProgress{c, d, op, {}});
    if (ctx_.is_root()) printer_.begin_config(c, d, op, backend_->name());
    bool stopped = false;
    for (uint64_t bytes : sizes) {
      const OpShape s = make_shape(c, d, op, o_.root, ctx_.world_size(), bytes);
      board_.reach(++step_);
      if (ctx_.rank() == o_.hang_rank) std::this_thread::sleep_for(std::chrono::hours(24 * 365));
      if (arrival_.arrive(describe(s, Placement::kOutOfPlace), o_.timeout_s, stop_requested())) {
        stopped = true;
        break;
      }
      const RankSample mine = measure_size(s);
      // Gathered per size, outside the timed region, so rank 0 prints each row as it completes.
      const std::vector<double> all = gather_doubles(ctx_.comm(), pack(mine, I));
      if (ctx_.is_root()) report_size(summarize_size(s, unpack_ranks(all, R, I), o_.time_mode));
    }
    if (ctx_.is_root()) finish_config(stopped ? ConfigEnd::kInterrupted : ConfigEnd::kComplete);
    current_.reset();
    return stopped;
  }

  // This rank's iterations of both placements, and the wrong elements its checks found.
  RankSample measure_size(const OpShape& s) {
    RankSample mine;
    std::vector<double> scratch;
    for (size_t pi = 0; pi < 2; ++pi) {
      const Placement p = kPlacements[pi];
      if (s.count == 0 || !backend_->supports(s, p)) continue;
      // Rank 0 fires first: the others wait a moment longer, so that rank 0 saves what was
      // measured before any abort takes the job down.
      const DeadlineGuard guard(watchdog_, o_.timeout_s + (ctx_.is_root() ? 0.0 : kWatchdogGraceS),
                                describe(s, p));
      const Deadline deadline = Deadline::after_s(o_.timeout_s);
      auto& mp = mine.placement[pi];
      upload_images(s, p);
      if (o_.warmup_iters > 0)
        backend_->run(s, p, o_.warmup_iters, o_.blocking, deadline.at(), scratch);
      timed(s, p, deadline, mp.times_us);
      mp.run = true;
      if (o_.check_iters > 0) {
        mp.checked = true;
        mp.wrong = run_checks(s, p, deadline);
      }
    }
    return mine;
  }

  // The timed iterations: back to back, or (--gap-us) one at a time, each after the rank slept
  // outside the timed region, so that every call starts cold, as a training step's sparse gradient
  // reductions do (beside --load-threads, the busy threads then hold the rank's cores when it
  // starts).
  void timed(const OpShape& s, Placement p, const Deadline& deadline, std::vector<double>& out) {
    if (o_.gap_us <= 0) {
      backend_->run(s, p, o_.iters, o_.blocking, deadline.at(), out);
      return;
    }
    out.clear();
    std::vector<double> one;
    for (int i = 0; i < o_.iters; ++i) {
      std::this_thread::sleep_for(std::chrono::microseconds(o_.gap_us));
      backend_->run(s, p, 1, o_.blocking, deadline.at(), one);
      out.push_back(one.at(0));
    }
  }

  // -c: separate iterations on fresh check data, each result compared with the expected one.
  int64_t run_checks(const OpShape& s, Placement p, Deadline deadline) {
    int64_t wrong = 0;
    std::vector<double> scratch;
    std::vector<uint8_t> result(std::max(s.send_count, s.recv_count) * dtype_size(s.dtype));
    for (int k = 0; k < o_.check_iters; ++k) {
      upload_images(s, p);
      backend_->run(s, p, 1, Blocking::kYes, deadline.at(), scratch);
      backend_->download_recv(result.data(), result.size());
      wrong += count_wrong(s, p, ctx_.rank(), result, backend_->result_offset(s, p));
    }
    return wrong;
  }

  // Rank 0: one size to every reporter that prints as it goes, and to the configuration.
  void report_size(SizeSummary z) {
    printer_.row(z);
    if (json_) json_->add(z);
    totals_.add(z);
    current_->sizes.push_back(std::move(z));
  }

  // Rank 0: the configuration's summary (fit, status) to the table and the HDF5 file.
  void finish_config(ConfigEnd end) {
    ConfigInProgress cfg = std::move(*current_);
    current_.reset();
    const CommSummary summary = summarize_config(cfg.collective, cfg.dtype, cfg.op,
                                                 ctx_.world_size(), std::move(cfg.sizes), end);
    printer_.end_config(summary);
    if (results_) write_comm_group(*results_, summary, o_, backend_->name());
  }

  const Options& o_;
  const RunContext& ctx_;
  ArrivalCheck arrival_;
  RankBoard board_;
  Watchdog& watchdog_;                       // the process's (run_main's)
  uint64_t step_ = 0;                        // sizes begun, on the rank board
  std::optional<ConfigInProgress> current_;  // for a save on timeout
  TablePrinter printer_;
  std::unique_ptr<Backend> backend_;
  std::optional<ResultsFile> results_;
  std::optional<NcclTestsJson> json_;  // rank 0, with -J
  RunTotals totals_;                   // rank 0
  std::optional<FsdpPlan> fsdp_;       // --pattern fsdp
};

}  // namespace

int run_driver(const Options& o, const MainArgs& args) {
  // The driver's own communicators (arrival checks, the rank board's node window) are made under
  // the watchdog too: no collective of the set-up can wait unbounded.
  std::optional<Driver> driver;
  {
    const DeadlineGuard guard(args.watchdog, o.timeout_s,
                              "setting up (dtune-comm's communicators, the rank board)");
    driver.emplace(o, args);
  }
  return driver->run();
}

}  // namespace dtune::comm
