// The divergence guard: data parallelism keeps every rank's parameters equal, bit for bit, so a
// difference means the gradient synchronisation is broken. The guard compares a checksum of all
// parameters across ranks every --check-every steps (where local SGD leaves the ranks equal) and
// once at the end, and stops the run on every rank with a message naming the ranks that differ.
#pragma once

#include <mpi.h>
#include <torch/types.h>

#include <string>
#include <vector>

#include "core/context.h"
#include "train/local_sgd.h"
#include "train/step_observer.h"

namespace dtune::train {

// The fp64 sum of every parameter: equal on every rank unless they diverged.
double parameter_checksum(const std::vector<torch::Tensor>& params);

class DivergenceGuard final : public StepObserver {
 public:
  // `params` are the model's (held by reference: the trainer's).
  // With tensor parallelism (`tp_comm` not MPI_COMM_NULL) a rank's checksum is its tp group's
  // sum: the ranks of a group hold different slices, and each data-parallel replica the same sum.
  DivergenceGuard(const RunContext& ctx, const std::vector<torch::Tensor>& params, int check_every,
                  LocalSgdSchedule local_sgd, MPI_Comm tp_comm = MPI_COMM_NULL);
  // Every --check-every steps: out.diverged is set (on every rank) when the ranks differ.
  void end_step(int step, const StepRecord& rec, TrainOutcome& out) override;
  // Collective: "" when every rank's checksum equals rank 0's after `steps_done` optimizer steps
  // (warm-up included), else the message, on every rank.
  std::string check(int steps_done);
  // Rank 0: every rank's checksum at the last check (empty elsewhere or before any check).
  const std::vector<double>& checksums() const { return checksums_; }

 private:
  const RunContext& ctx_;
  const std::vector<torch::Tensor>& params_;
  int check_every_;
  LocalSgdSchedule local_sgd_;
  MPI_Comm tp_comm_;
  std::vector<double> checksums_;
};

}  // namespace dtune::train
