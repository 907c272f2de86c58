// Rank 0's output: the nccl-tests table (same columns and number formats, '#'-commented headers,
// so `grep -v '^#'` and existing nccl-tests parsers work; a run of several collectives adds a last
// column naming each row's collective), dtune's extra statistics as '#' lines, and the JSON / CSV
// alternatives. A reporter: it prints the summaries (summary.h) it is given.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "benchmarks/comm/options.h"
#include "benchmarks/comm/summary.h"
#include "benchmarks/comm/types.h"

namespace dtune::comm {

// nccl-tests' src/util.cu getFloatStr: `value` in at most `width` characters (right-aligned).
std::string float_text(double value, int width);

class TablePrinter {
 public:
  TablePrinter(Format format, std::FILE* out) : format_(format), out_(out) {}
  void banner(const Options& o, int nranks, int nnodes, const std::vector<std::string>& rank_lines);
  // A '#' line: on the table's stream, or on stderr when stdout carries JSON or CSV.
  void note(const std::string& line);
  void begin_config(Collective c, Dtype d, ReduceOp op, const std::string& backend);
  void row(const SizeSummary& r);
  // Per-iteration statistics and the alpha-beta fit of the configuration just measured.
  void end_config(const CommSummary& c);
  void footer(const RunTotals& totals, bool checked, const std::string& results_path);

 private:
  Format format_;
  std::FILE* out_;
  bool csv_header_done_ = false;
  bool collective_column_ = false;  // set by banner(): more than one collective in the run
  std::string json_rows_;
};

}  // namespace dtune::comm
