// The test hooks of dtune-train (--debug-plant-inf-step/-rank, --debug-perturb-rank, --debug-dump),
// in one place: the trainer calls the injector at named points between the measured phases, and
// with no --debug-* flag every call is an integer comparison. Tests use them to prove that the
// fault paths act (every rank skips an overflowed step; the divergence guard sees a drift; the
// parameters and gradients a run leaves are what a reference computes).
#pragma once

#include <torch/types.h>

#include <string>
#include <vector>

#include "train/config.h"

namespace dtune::models {
class Model;
}

namespace dtune::train {

class FaultInjector {
 public:
  FaultInjector(const Options& o, int rank);

  // After the gradient reduction of optimizer step `step`: with --debug-plant-inf-step at this
  // step, on --debug-plant-inf-rank, this rank's reduced gradients become inf, as an fp16
  // overflow leaves them. Only the cross-rank found-inf agreement makes the other ranks skip too.
  void after_reduction(int step, std::vector<torch::Tensor>& grads) const;
  // After optimizer step `step` (and local SGD's averaging), its clock stopped:
  // --debug-perturb-rank's parameters drift by 1e-3 after the first step, which the divergence
  // guard must report; --debug-checksums appends "step checksum" (17 significant digits) to
  // FILE.rank<r>, so tests can follow each rank's parameters step by step.
  void after_step(int step, std::vector<torch::Tensor>& params) const;
  // After the last step, before the final check: --debug-dump (rank 0) writes the final parameters
  // and the last gradients ("param.<name>", "grad.<name>"; models/weights.h) and, with bf16
  // weights, the fp32 master copy the optimizer updates ("master.<name>"; `master` is empty or
  // holds one tensor per parameter, in the model's order).
  void at_end(models::Model& model, const std::vector<torch::Tensor>& master) const;
  // With tensor parallelism the first data-parallel rank of each tp coordinate writes its slices
  // to <path>.tp<T> (rank 0 alone writes <path> otherwise).
  void dump_tp_slices(bool writes, int tp_coord) {
    if (dump_path_.empty()) return;  // no --debug-dump
    dump_writes_ = writes;
    dump_path_ += ".tp" + std::to_string(tp_coord);
  }

 private:
  int rank_;
  int plant_inf_step_, plant_inf_rank_;
  int perturb_rank_;
  std::string dump_path_;
  bool dump_writes_;
  std::string checksums_path_;  // with ".rank<r>"
};

}  // namespace dtune::train
