// Rank 0's output: the nccl-tests table (same columns and number formats, '#'-commented headers,
// so `grep -v '^#'` and existing nccl-tests parsers work; a run of several collectives adds a last
// column naming each row's collective), dtune's extra statistics as '#' lines, and the JSON / CSV
// alternatives.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "benchmarks/comm/options.h"
#include "benchmarks/comm/types.h"
#include "core/stats.h"

namespace dtune::comm {

// One size of one configuration, both placements, as rank 0 sees it after the per-size gather.
struct SizeResult {
  OpShape shape;
  struct PerPlacement {
    bool run = false;
    double time_us = 0;  // reported (combined by -a)
    double algbw_gbps = 0, busbw_gbps = 0;
    int64_t wrong = -1;  // summed over ranks; -1 unchecked
    Summary iters;       // all ranks' iterations
    RankSpread ranks;    // per-rank mean iteration time
  } placement[2];
};

// nccl-tests' src/util.cu getFloatStr: `value` in at most `width` characters (right-aligned).
std::string float_text(double value, int width);

class TablePrinter {
 public:
  TablePrinter(Format format, std::FILE* out) : format_(format), out_(out) {}
  void banner(const Options& o, int nranks, const std::vector<std::string>& rank_lines);
  // A '#' line: on the table's stream, or on stderr when stdout carries JSON or CSV.
  void note(const std::string& line);
  void begin_config(Collective c, Dtype d, ReduceOp op, const std::string& backend);
  void row(const SizeResult& r);
  // Per-iteration statistics and the alpha-beta fit of the configuration just measured.
  void end_config(const std::vector<SizeResult>& rows, const AlphaBetaFit& fit, double factor);
  void footer(int64_t total_wrong, bool checked, const std::vector<double>& busbw_all,
              const std::string& results_path);

 private:
  Format format_;
  std::FILE* out_;
  bool csv_header_done_ = false;
  bool collective_column_ = false;  // set by banner(): more than one collective in the run
  std::string json_rows_;
};

}  // namespace dtune::comm
