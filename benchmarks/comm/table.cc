// nccl-tests compatible table, statistics lines, CSV and JSON.
#include "benchmarks/comm/table.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/build_info.h"
#include "core/cli.h"

namespace dtune::comm {

// nccl-tests' number format (src/util.cu getFloatStr): two decimals, then one, then none, then an
// exponent, whichever first fits `width`, so a column never grows into its neighbour.
std::string float_text(double value, int width) {
  char buf[64];
  for (const char* f : {"%*.2f", "%*.1f", "%*.0f"})
    if (std::snprintf(buf, sizeof buf, f, width, value) <= width) return buf;
  std::snprintf(buf, sizeof buf, width >= 7 ? "%*.1e" : "%*.0e", width, value);
  return buf;
}

namespace {

const char* op_text(const OpShape& s) { return is_reduction(s.collective) ? nullptr : "none"; }

}  // namespace

void TablePrinter::banner(const Options& o, int nranks, int nnodes,
                          const std::vector<std::string>& rank_lines) {
  if (format_ != Format::kTable) return;
  std::fprintf(out_, "# dtune-comm %s (git %s%s): collective benchmark, nccl-tests conventions\n",
               build_info::dtune_version().c_str(),
               build_info::git_revision().substr(0, 12).c_str(),
               build_info::git_dirty() ? ", dirty" : "");
  // --pattern fsdp takes its sizes from the model (its plan's lines follow): no -b/-e/-i/-f.
  const std::string sizes =
      o.pattern == Pattern::kFsdp
          ? "pattern: fsdp"
          : "minBytes " + std::to_string(o.min_bytes) + " maxBytes " + std::to_string(o.max_bytes) +
                " step: " +
                (o.step_factor > 1 ? std::to_string(o.step_factor) + "(factor)"
                                   : std::to_string(o.step_bytes) + "(bytes)");
  std::fprintf(out_,
               "#  nranks %d %s warmup iters: %d iters: %d validation: %d blocking: %d average: "
               "%s timeout: %gs\n",
               nranks, sizes.c_str(), o.warmup_iters, o.iters, o.check_iters,
               o.blocking == Blocking::kYes ? 1 : 0, to_string(o.time_mode).c_str(), o.timeout_s);
  std::fprintf(out_, "#  nnodes %d algorithm: %s mpi progress: %s load threads: %d gap: %dus\n",
               nnodes, to_string(o.algorithm).c_str(), to_string(o.mpi_progress).c_str(),
               o.load_threads, o.gap_us);
  std::fprintf(out_, "#\n# Using devices\n");
  for (const auto& l : rank_lines) std::fprintf(out_, "%s\n", l.c_str());
  collective_column_ = o.collectives.size() > 1;
  std::fflush(out_);
}

void TablePrinter::note(const std::string& line) {
  std::FILE* f = format_ == Format::kTable ? out_ : stderr;
  std::fprintf(f, "%s\n", line.c_str());
  std::fflush(f);
}

void TablePrinter::begin_config(Collective c, Dtype d, ReduceOp op, const std::string& backend) {
  if (format_ != Format::kTable) return;
  std::fprintf(out_, "#\n# Collective: %s  datatype: %s  op: %s  backend: %s\n",
               to_string(c).c_str(), to_string(d).c_str(),
               is_reduction(c) ? to_string(op).c_str() : "none", backend.c_str());
  std::fprintf(out_, "#%75s%36s\n", "out-of-place", "in-place");
  std::fprintf(out_, "#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s%s\n",
               "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
               "algbw", "busbw", "#wrong", collective_column_ ? "  collective" : "");
  std::fprintf(out_, "#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)",
               "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
               "");
  std::fflush(out_);
}

void TablePrinter::row(const SizeSummary& r) {
  const OpShape& s = r.shape;
  if (format_ == Format::kTable) {
    if (s.rounded())
      std::fprintf(
          out_, "# note: %zu B rounded down to %zu B (a multiple of nranks x %zu B for %s)\n",
          s.requested_bytes, s.bytes, dtype_size(s.dtype), to_string(s.collective).c_str());
    std::fprintf(out_, "%12zu  %12zu  %8s  %6s  %6d", s.bytes, s.count,
                 nccl_tests_name(s.dtype).c_str(),
                 op_text(s) ? op_text(s) : to_string(s.op).c_str(), s.root);
    for (const auto& p : r.placement) {
      if (!p.run) {
        std::fprintf(out_, "  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
        continue;
      }
      // src/util.cu writeBenchmarkLineBody: %6g for the wrong count, N/A when not checked.
      char wrong[32] = "N/A";
      if (p.wrong >= 0) std::snprintf(wrong, sizeof wrong, "%g", static_cast<double>(p.wrong));
      std::fprintf(out_, "  %7s  %6s  %6s  %6s", float_text(p.time_us, 7).c_str(),
                   float_text(p.algbw_gbps, 6).c_str(), float_text(p.busbw_gbps, 6).c_str(), wrong);
    }
    // After nccl-tests' 13 columns, so parsers that index them still find them in place.
    if (collective_column_) std::fprintf(out_, "  %s", to_string(s.collective).c_str());
    std::fprintf(out_, "\n");
    std::fflush(out_);
    return;
  }
  for (int pi = 0; pi < 2; ++pi) {
    const auto& p = r.placement[pi];
    if (!p.run) continue;
    const std::string placement = to_string(pi == 0 ? Placement::kOutOfPlace : Placement::kInPlace);
    const std::string op = is_reduction(s.collective) ? to_string(s.op) : "none";
    if (format_ == Format::kCsv) {
      if (!csv_header_done_) {
        std::fprintf(out_,
                     "collective,dtype,op,root,placement,size_bytes,count,time_us,algbw_gbps,"
                     "busbw_gbps,wrong,p50_us,p95_us,p99_us,min_us,max_us,slowest_rank\n");
        csv_header_done_ = true;
      }
      std::fprintf(out_, "%s,%s,%s,%d,%s,%zu,%zu,%.3f,%.4f,%.4f,%lld,%.3f,%.3f,%.3f,%.3f,%.3f,%d\n",
                   to_string(s.collective).c_str(), to_string(s.dtype).c_str(), op.c_str(), s.root,
                   placement.c_str(), s.bytes, s.count, p.time_us, p.algbw_gbps, p.busbw_gbps,
                   static_cast<long long>(p.wrong), p.iters.p50, p.iters.p95, p.iters.p99,
                   p.iters.min, p.iters.max, p.ranks.slowest_rank);
      std::fflush(out_);
    } else {
      nlohmann::json j = {{"collective", to_string(s.collective)},
                          {"dtype", to_string(s.dtype)},
                          {"op", op},
                          {"root", s.root},
                          {"placement", placement},
                          {"size_bytes", s.bytes},
                          {"count", s.count},
                          {"time_us", p.time_us},
                          {"algbw_gbps", p.algbw_gbps},
                          {"busbw_gbps", p.busbw_gbps},
                          {"wrong", p.wrong},
                          {"p50_us", p.iters.p50},
                          {"p95_us", p.iters.p95},
                          {"p99_us", p.iters.p99},
                          {"min_us", p.iters.min},
                          {"max_us", p.iters.max},
                          {"slowest_rank", p.ranks.slowest_rank}};
      json_rows_ += (json_rows_.empty() ? "" : ",\n    ") + j.dump();
    }
  }
}

void TablePrinter::end_config(const CommSummary& c) {
  if (format_ != Format::kTable) return;
  const AlphaBetaFit& fit = c.fit;
  std::fprintf(out_,
               "#\n# Iteration statistics, out-of-place, all ranks' iterations "
               "(p50/p95/p99/min/max in us; per-rank mean: min/avg/max, slowest rank)\n");
  std::fprintf(out_, "#%11s  %9s  %9s  %9s  %9s  %9s  %9s  %9s  %9s  %7s  %6s\n", "size", "p50",
               "p95", "p99", "min", "max", "rank-min", "rank-avg", "rank-max", "slowest", "cv");
  for (const auto& r : c.sizes) {
    const auto& p = r.placement[0];
    if (!p.run) continue;
    std::fprintf(out_,
                 "#%11zu  %9.2f  %9.2f  %9.2f  %9.2f  %9.2f  %9.2f  %9.2f  %9.2f  %7d  %6.3f\n",
                 r.shape.bytes, p.iters.p50, p.iters.p95, p.iters.p99, p.iters.min, p.iters.max,
                 p.ranks.min, p.ranks.avg, p.ranks.max, p.ranks.slowest_rank, p.iters.cv);
  }
  if (fit.ok)
    std::fprintf(out_,
                 "# alpha-beta fit of the out-of-place medians, t = alpha + S x %.4f / B: "
                 "alpha %.2f us, B %.3f GB/s (bus), R^2 %.4f\n",
                 c.busbw_factor, fit.alpha_us, fit.bandwidth_gbps, fit.r2);
  else
    std::fprintf(out_, "# alpha-beta fit: needs at least two sizes\n");
  std::fflush(out_);
}

void TablePrinter::footer(const RunTotals& totals, bool checked, const std::string& results_path) {
  const int64_t total_wrong = totals.wrong;
  const std::vector<double>& busbw_all = totals.busbw_gbps;
  if (format_ == Format::kJson) {
    std::fprintf(out_, "{\n  \"schema_version\": 1,\n  \"results\": [\n    %s\n  ]\n}\n",
                 json_rows_.c_str());
  }
  std::FILE* meta = format_ == Format::kTable ? out_ : stderr;
  double sum = 0;
  for (double b : busbw_all) sum += b;
  if (format_ == Format::kTable) {
    std::fprintf(out_, "# Out of bounds values : %lld %s\n", static_cast<long long>(total_wrong),
                 !checked           ? "(not checked)"
                 : total_wrong == 0 ? "OK"
                                    : "FAILED");
    std::fprintf(out_, "# Avg bus bandwidth    : %g \n",
                 busbw_all.empty() ? 0.0 : sum / static_cast<double>(busbw_all.size()));
    std::fprintf(out_,
                 "#   (nccl-tests' figure: a plain mean over all sizes, small ones included; "
                 "read the large sizes or the fit's B instead)\n#\n");
  }
  if (!results_path.empty()) std::fprintf(meta, "# Results: %s\n", results_path.c_str());
  std::fflush(out_);
}

}  // namespace dtune::comm
