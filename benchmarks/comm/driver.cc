// Measurement loop, gathering and results writing for dtune-comm.
#include "benchmarks/comm/driver.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <thread>

#include <unistd.h>

#include "benchmarks/comm/bandwidth.h"
#include "benchmarks/comm/check.h"
#include "benchmarks/comm/nccl_tests_json.h"
#include "benchmarks/comm/table.h"
#include "core/arrival.h"
#include "core/error.h"
#include "core/gather.h"
#include "core/host_memory.h"
#include "core/cli.h"
#include "core/provenance.h"
#include "core/rank_board.h"
#include "core/results_file.h"
#include "core/signals.h"
#include "core/timer.h"
#include "core/watchdog.h"

namespace dtune::comm {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kWatchdogGraceS = 2.0;
constexpr Placement kPlacements[2] = {Placement::kOutOfPlace, Placement::kInPlace};

std::string describe(const OpShape& s, Placement p) {
  return to_string(s.collective) + " " + to_string(s.dtype) +
         (is_reduction(s.collective) ? " " + to_string(s.op) : "") + " of " +
         std::to_string(s.bytes) + " B (" + to_string(p) + ")";
}

double combine(TimeMode m, const RankSpread& r, double rank0) {
  switch (m) {
    case TimeMode::kRank0: return rank0;
    case TimeMode::kAvg: return r.avg;
    case TimeMode::kMin: return r.min;
    case TimeMode::kMax: return r.max;
  }
  return r.avg;
}

// What rank 0 holds of one configuration: every rank's iterations in the schema's order
// [placement][size][rank][iteration], wrong counts [placement][size][rank], and the table rows.
struct ConfigData {
  std::vector<OpShape> shapes;
  std::vector<double> times;
  std::vector<int64_t> wrong;
  std::vector<SizeResult> rows;
};

class Driver {
 public:
  Driver(const Options& o, const MainArgs& a)
      : o_(o), ctx_(a.ctx), arrival_(a.ctx), board_(a.ctx),
        watchdog_("dtune-comm", a.mpi_thread_level == MPI_THREAD_MULTIPLE),
        printer_(o.format, stdout) {}

  int run() {
    backend_ = o_.backend == BackendKind::kNccl ? make_nccl_backend(ctx_)
                                                : make_mpi_backend(ctx_, o_.mpi_buffers);
    claim_json();
    open_results();
    const std::string device = backend_->device();
    const std::string nccl_version = o_.backend == BackendKind::kNccl ? backend_->version() : "";
    Provenance prov = collect_provenance(ctx_, o_.command_line, device, nccl_version);
    if (ctx_.is_root()) {
      if (results_) results_->write_provenance(prov);
      std::vector<std::string> lines;
      for (int r = 0; r < ctx_.world_size(); ++r) {
        char buf[512];
        std::snprintf(buf, sizeof buf, "#  Rank %2d Local %2lld on %s device %s", r,
                      prov.rank_local_rank[r], prov.rank_host[r].c_str(), prov.rank_device[r].c_str());
        lines.push_back(buf);
      }
      if (const auto m = ctx_.launcher_mismatch(); m.expected > 1)
        std::fprintf(stderr, "dtune-comm: warning: MPI world size is 1 but %s=%d: the launcher "
                     "started separate singletons, not one job (use srun --mpi=pmix, or an mpirun "
                     "from the same MPI dtune was built with)\n", m.variable.c_str(), m.expected);
      printer_.banner(o_, ctx_.world_size(), lines);
    }
    describe_json_devices(prov);
    allocate();
    // A wait past --timeout: say which ranks of this node stopped, and (rank 0) save every size
    // measured so far, the current configuration's included, before the job is aborted.
    watchdog_.on_fire([this] { return board_.diagnose(); },
                      [this] {
                        if (ctx_.is_root()) save_on_timeout();
                      });
    try {
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
    if (in_config_) {
      in_config_ = false;
      finish_config(current_c_, current_d_, current_op_, current_, "timeout");
    }
    if (json_) json_->finish();
    if (results_) {
      results_->finish("timeout", kTimeoutExitStatus);
      std::printf("# Results (up to the timeout): %s\n", results_->path().c_str());
      std::fflush(stdout);
    }
  }

  int measure() {

    bool stopped = false;
    for (Collective c : o_.collectives) {
      if (json_) json_->begin(c);
      for (Dtype d : o_.dtypes) {
        const std::vector<ReduceOp> ops = is_reduction(c) ? o_.ops : std::vector<ReduceOp>{ReduceOp::kSum};
        for (ReduceOp op : ops) {
          stopped = run_config(c, d, op);
          if (stopped) break;
        }
        if (stopped) break;
      }
      if (json_) json_->finish();  // interrupted: what was measured of this collective
      if (stopped) break;
    }
    const int code = stopped ? 130 : total_wrong_ > 0 ? 1 : 0;
    if (ctx_.is_root()) {
      printer_.footer(total_wrong_, o_.check_iters > 0, busbw_all_, results_ ? results_->path() : "");
      if (results_) results_->finish(stopped ? "interrupted" : "complete", code);
      if (total_wrong_ > 0)
        std::fprintf(stderr, "dtune-comm: error: %lld wrong elements: the collective results are "
                     "incorrect\n", static_cast<long long>(total_wrong_));
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

  void allocate() {
    size_t send = 0, recv = 0;
    for (Collective c : o_.collectives)
      for (Dtype d : o_.dtypes)
        for (uint64_t b : o_.sizes()) {
          const OpShape s = make_shape(c, d, ReduceOp::kSum, o_.root, ctx_.world_size(), b);
          send = std::max(send, s.send_count * dtype_size(d));
          recv = std::max(recv, std::max(s.send_count, s.recv_count) * dtype_size(d));
        }
    refuse_if_too_large(send, recv);
    backend_->allocate(send, recv);
  }

  // Host memory one rank takes at the largest size: the input and expected-output images built
  // for every upload, the buffers themselves when they live on the host, and the result copied
  // back for a check. Refused with one line before anything is allocated, when the ranks of this
  // node would need more than the node has available.
  void refuse_if_too_large(size_t send, size_t recv) {
    const bool host_buffers = o_.backend == BackendKind::kMpi && o_.mpi_buffers == MpiBuffers::kHost;
    const uint64_t per_rank = 2ull * (send + recv) / (host_buffers ? 1 : 2) +
                              (o_.check_iters > 0 ? std::max(send, recv) : 0);
    const uint64_t node = per_rank * static_cast<uint64_t>(ctx_.local_size());
    const uint64_t available = host_memory_available_bytes();
    if (available == 0 || node <= available) return;
    throw UsageError("-e/--maxbytes " + format_size(o_.max_bytes) + " needs " + format_bytes(per_rank) +
                     " of host memory per rank (" + format_bytes(node) + " for the " +
                     std::to_string(ctx_.local_size()) + " ranks on " + ctx_.host() + "), but " +
                     format_bytes(available) + " is available there: lower -e/--maxbytes");
  }

  void upload_images(const OpShape& s, Placement p) {
    const CheckImages img = make_check_images(s, p, ctx_.rank(), ctx_.rank() == o_.plant_wrong_rank);
    backend_->upload(img.send.data(), img.send.size(), img.recv.data(), img.recv.size());
  }

  // Returns true when the ranks agreed to stop (a signal).
  bool run_config(Collective c, Dtype d, ReduceOp op) {
    const auto sizes = o_.sizes();
    const size_t I = static_cast<size_t>(o_.iters);
    current_ = ConfigData{};
    current_c_ = c;
    current_d_ = d;
    current_op_ = op;
    in_config_ = true;
    if (ctx_.is_root()) printer_.begin_config(c, d, op, backend_->name());
    bool stopped = false;
    std::vector<double> times;
    for (size_t si = 0; si < sizes.size(); ++si) {
      const OpShape s = make_shape(c, d, op, o_.root, ctx_.world_size(), sizes[si]);
      board_.reach(++step_);
      if (ctx_.rank() == o_.hang_rank) std::this_thread::sleep_for(std::chrono::hours(24 * 365));
      if (arrival_.arrive(describe(s, Placement::kOutOfPlace), o_.timeout_s, stop_requested())) {
        stopped = true;
        break;
      }
      // This rank's contribution: iterations of both placements, then the two wrong counts.
      std::vector<double> mine(2 * I + 2, kNaN);
      mine[2 * I] = mine[2 * I + 1] = -1;
      for (int pi = 0; pi < 2; ++pi) {
        const Placement p = kPlacements[pi];
        if (s.count == 0 || !backend_->supports(s, p)) continue;
        // Rank 0 fires first: the others wait a moment longer, so that rank 0 saves what was
        // measured before any abort takes the job down.
        watchdog_.arm(o_.timeout_s + (ctx_.is_root() ? 0.0 : kWatchdogGraceS), describe(s, p));
        const auto deadline = deadline_after_s(o_.timeout_s);
        upload_images(s, p);
        if (o_.warmup_iters > 0) backend_->run(s, p, o_.warmup_iters, o_.blocking, deadline, times);
        backend_->run(s, p, o_.iters, o_.blocking, deadline, times);
        std::copy(times.begin(), times.end(), mine.begin() + static_cast<long>(pi * I));
        if (o_.check_iters > 0) {
          int64_t wrong = 0;
          std::vector<uint8_t> result(std::max(s.send_count, s.recv_count) * dtype_size(d));
          for (int k = 0; k < o_.check_iters; ++k) {
            upload_images(s, p);
            backend_->run(s, p, 1, Blocking::kYes, deadline, times);
            backend_->download_recv(result.data(), result.size());
            wrong += count_wrong(s, p, ctx_.rank(), result, backend_->result_offset(s, p));
          }
          mine[2 * I + static_cast<size_t>(pi)] = static_cast<double>(wrong);
        }
        watchdog_.disarm();
      }
      // Gathered per size, outside the timed region, so rank 0 prints each row as it completes.
      const std::vector<double> all = gather_doubles(ctx_.comm(), mine);
      if (ctx_.is_root()) add_size(s, all, current_);
    }
    in_config_ = false;
    if (ctx_.is_root()) finish_config(c, d, op, current_, stopped ? "interrupted" : nullptr);
    return stopped;
  }

  void add_size(const OpShape& s, const std::vector<double>& all, ConfigData& data) {
    const size_t R = static_cast<size_t>(ctx_.world_size()), I = static_cast<size_t>(o_.iters);
    const size_t stride = 2 * I + 2;
    SizeResult r{s, {}};
    data.shapes.push_back(s);
    // Staged per size as [placement][rank][iteration]; reordered into the schema at the end.
    for (size_t pi = 0; pi < 2; ++pi) {
      auto& p = r.placement[pi];
      std::vector<double> means(R), iters;
      int64_t wrong = 0;
      bool checked = false;
      for (size_t rk = 0; rk < R; ++rk) {
        const double* it = &all[rk * stride + pi * I];
        data.times.insert(data.times.end(), it, it + I);
        double sum = 0;
        for (size_t i = 0; i < I; ++i) sum += it[i];
        means[rk] = sum / static_cast<double>(I);
        const double w = all[rk * stride + 2 * I + pi];
        data.wrong.push_back(static_cast<int64_t>(w));
        if (w >= 0) {
          checked = true;
          wrong += static_cast<int64_t>(w);
        }
      }
      p.run = !std::isnan(means[0]);
      if (!p.run) continue;
      p.iters = summarize(std::span<const double>(&data.times[data.times.size() - R * I], R * I));
      p.ranks = spread_over_ranks(means);
      p.time_us = combine(o_.time_mode, p.ranks, means[0]);
      p.algbw_gbps = algbw_gbps(static_cast<double>(s.bytes), p.time_us);
      p.busbw_gbps = busbw_gbps(s.collective, static_cast<int>(R), static_cast<double>(s.bytes), p.time_us);
      p.wrong = checked ? wrong : -1;
      if (checked) total_wrong_ += wrong;
      busbw_all_.push_back(p.busbw_gbps);
    }
    printer_.row(r);
    if (json_) json_->add(r, all, static_cast<int>(R));
    data.rows.push_back(r);
  }

  // Rank 0: the fit, the statistics lines and the HDF5 group of one configuration.
  // `cut_short`: nullptr when every size ran, else the status of a configuration that ended early
  // ("interrupted", "timeout").
  void finish_config(Collective c, Dtype d, ReduceOp op, ConfigData& data, const char* cut_short) {
    const size_t S = data.shapes.size(), R = static_cast<size_t>(ctx_.world_size());
    const size_t I = static_cast<size_t>(o_.iters);
    const double factor = busbw_factor(c, static_cast<int>(R));
    std::vector<double> fit_x, fit_t;
    for (size_t s = 0; s < S; ++s) {
      const auto& pp = data.rows[s].placement[0];
      if (!pp.run) continue;
      fit_x.push_back(static_cast<double>(data.shapes[s].bytes) * factor);
      fit_t.push_back(pp.iters.p50);
    }
    const AlphaBetaFit fit = fit_alpha_beta(fit_x, fit_t);
    printer_.end_config(data.rows, fit, factor);
    if (!results_ || S == 0) return;
    // Staged [size][placement][rank][iteration] -> schema [placement][size][rank][iteration].
    std::vector<double> times(2 * S * R * I);
    std::vector<int64_t> wrong(2 * S * R);
    for (size_t s = 0; s < S; ++s)
      for (size_t p = 0; p < 2; ++p) {
        std::copy_n(&data.times[(s * 2 + p) * R * I], R * I, &times[(p * S + s) * R * I]);
        std::copy_n(&data.wrong[(s * 2 + p) * R], R, &wrong[(p * S + s) * R]);
      }
    write_group(c, d, op, data, times, wrong, fit, factor, cut_short);
  }

  void write_group(Collective c, Dtype d, ReduceOp op, const ConfigData& data,
                   const std::vector<double>& times, const std::vector<int64_t>& wrong,
                   const AlphaBetaFit& fit, double factor, const char* cut_short) {
    const size_t S = data.shapes.size(), R = static_cast<size_t>(ctx_.world_size());
    const size_t I = static_cast<size_t>(o_.iters);
    const std::string op_name = is_reduction(c) ? to_string(op) : "none";
    h5::Handle g = results_->new_run(to_string(c) + "-" + to_string(d) + (is_reduction(c) ? "-" + op_name : ""));
    const hid_t id = g.get();
    bool any_wrong = false;
    for (int64_t w : wrong) any_wrong |= w > 0;
    h5::write_attr(id, "benchmark", "comm");
    h5::write_attr(id, "collective", to_string(c));
    h5::write_attr(id, "backend", backend_->name());
    h5::write_attr(id, "dtype", to_string(d));
    h5::write_attr(id, "op", op_name);
    h5::write_attr(id, "root", is_rooted(c) ? o_.root : -1);
    h5::write_attr(id, "iters", o_.iters);
    h5::write_attr(id, "warmup_iters", o_.warmup_iters);
    h5::write_attr(id, "check_iters", o_.check_iters);
    h5::write_attr(id, "blocking", o_.blocking == Blocking::kYes ? 1 : 0);
    h5::write_attr(id, "time_mode", to_string(o_.time_mode));
    h5::write_attr(id, "busbw_factor", factor);
    h5::write_attr(id, "status", cut_short ? cut_short : any_wrong ? "wrong" : "ok");
    h5::write_attr(id, "fit_alpha_us", fit.ok ? fit.alpha_us : kNaN);
    h5::write_attr(id, "fit_busbw_gbps", fit.ok ? fit.bandwidth_gbps : kNaN);
    h5::write_attr(id, "fit_r2", fit.ok ? fit.r2 : kNaN);
    h5::write_strings(id, "placement", {to_string(Placement::kOutOfPlace), to_string(Placement::kInPlace)});
    std::vector<int64_t> size_b, req_b, count;
    std::vector<double> rep(2 * S), alg(2 * S), bus(2 * S);
    std::vector<int64_t> slowest(2 * S);
    for (size_t s = 0; s < S; ++s) {
      size_b.push_back(static_cast<int64_t>(data.shapes[s].bytes));
      req_b.push_back(static_cast<int64_t>(data.shapes[s].requested_bytes));
      count.push_back(static_cast<int64_t>(data.shapes[s].count));
      for (size_t p = 0; p < 2; ++p) {
        const auto& pp = data.rows[s].placement[p];
        rep[p * S + s] = pp.run ? pp.time_us : kNaN;
        alg[p * S + s] = pp.run ? pp.algbw_gbps : kNaN;
        bus[p * S + s] = pp.run ? pp.busbw_gbps : kNaN;
        slowest[p * S + s] = pp.run ? pp.ranks.slowest_rank : -1;
      }
    }
    h5::write_dataset(id, "size_bytes", {S}, size_b.data());
    h5::write_dataset(id, "requested_bytes", {S}, req_b.data());
    h5::write_dataset(id, "count", {S}, count.data());
    h5::write_dataset(id, "time_us", {2, S, R, I}, times.data());
    h5::write_dataset(id, "wrong", {2, S, R}, wrong.data());
    h5::write_dataset(id, "time_us_reported", {2, S}, rep.data());
    h5::write_dataset(id, "algbw_gbps", {2, S}, alg.data());
    h5::write_dataset(id, "busbw_gbps", {2, S}, bus.data());
    h5::write_dataset(id, "slowest_rank", {2, S}, slowest.data());
    g.close();
    results_->flush();
  }

  const Options& o_;
  const RunContext& ctx_;
  ArrivalCheck arrival_;
  RankBoard board_;
  Watchdog watchdog_;
  uint64_t step_ = 0;  // sizes begun, on the rank board
  // The configuration being measured (rank 0 holds its data), for a save on timeout.
  ConfigData current_;
  Collective current_c_{};
  Dtype current_d_{};
  ReduceOp current_op_{};
  bool in_config_ = false;
  TablePrinter printer_;
  std::unique_ptr<Backend> backend_;
  std::optional<ResultsFile> results_;
  std::optional<NcclTestsJson> json_;  // rank 0, with -J
  int64_t total_wrong_ = 0;
  std::vector<double> busbw_all_;
};

}  // namespace

int run_driver(const Options& o, const MainArgs& args) { return Driver(o, args).run(); }

}  // namespace dtune::comm
