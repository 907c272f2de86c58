// dtune-train's pipeline results (--pipeline-stages > 1): every rank's stage measurements
// (train/pipeline/pipeline_stats.h) gathered to rank 0, summarised per rank over the measured
// steps (mean per step of forward, backward, receive wait, send wait, idle; the measured bubble
// beside the schedule's theory; peak activation memory), printed as a table, and written into the
// run's group under pipeline/ (results/SCHEMA.md), the last step's timeline included.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/h5.h"
#include "train/config.h"
#include "train/mode_results.h"
#include "train/pipeline/pipeline_stats.h"

namespace dtune::train {

struct PipelineRow {  // one rank, means over the measured steps
  int stage = 0, dp_index = 0;
  double forward_ms = 0, backward_ms = 0, recv_wait_ms = 0, send_wait_ms = 0, idle_ms = 0;
  double span_ms = 0, bubble = 0;
  long long peak_activation_bytes = 0;  // the largest of any step
  double planned_share = 0;             // of the partition's cost (pipeline_stats.h)
};

struct PipelineTable {
  std::vector<PipelineRow> ranks;
  // (N, 6): rank, backward (0/1), micro-batch, chunk, start_ms, end_ms of the last step.
  std::vector<double> timeline;
  std::string cuts, partitioned;
  std::string channel;  // "mpi" or "nccl"
  double theory_bubble = 0;
  // (S, R) over every step, warm-up included: each rank's loss scale, found inf/NaN, skipped.
  size_t steps = 0;
  std::vector<double> loss_scale;
  std::vector<int64_t> found_inf, skipped;
  // Only this rank's stage (a run that timed out: the stopped stage cannot take part in a gather);
  // written as the attribute ranks_reported.
  bool partial = false;
};

// Collective over ctx.comm(); the table is complete on rank 0 only.
PipelineTable gather_pipeline(const Options& o, const RunContext& ctx, const PipelineStats& st);
// This rank's stage alone, no communication: what rank 0 writes into a run that timed out.
PipelineTable local_pipeline_table(const Options& o, const PipelineStats& st);
void print_pipeline(const Options& o, const PipelineTable& t, FILE* f);
void write_pipeline(hid_t run_group, const Options& o, const PipelineTable& t);

// The pipeline's part of the results (mode_results.h): this rank's stage measurements, which the
// step fills while it runs and the run monitor holds too (a save on the way out of a failure
// writes rank 0's own stage: pipeline/ with complete 0, ranks_reported 1).
class PipelineResults final : public ModeResults {
 public:
  explicit PipelineResults(const Options& o) : o_(o) {}
  PipelineStats& stats() { return stats_; }
  std::string name() const override { return "pipeline"; }
  void gather(const RunContext& ctx) override { table_ = gather_pipeline(o_, ctx, stats_); }
  void print(FILE* f) const override { print_pipeline(o_, table_, f); }
  void write(hid_t run_group) const override { write_pipeline(run_group, o_, table_); }
  void write_partial(hid_t run_group) const override {
    write_pipeline(run_group, o_, local_pipeline_table(o_, stats_));
  }

 private:
  Options o_;  // a copy: a failure's save may come after the run's parts are gone
  PipelineStats stats_;
  PipelineTable table_;
};

}  // namespace dtune::train
