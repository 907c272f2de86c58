// The divergence guard's checksum and cross-rank comparison.
#include "train/divergence.h"

#include <torch/torch.h>

#include "core/error.h"
#include "core/gather.h"

namespace dtune::train {

double parameter_checksum(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  double s = 0;
  for (const auto& p : params) s += p.to(torch::kDouble).sum().item<double>();
  return s;
}

DivergenceGuard::DivergenceGuard(const RunContext& ctx, const std::vector<torch::Tensor>& params,
                                 int check_every, LocalSgdSchedule local_sgd, MPI_Comm tp_comm)
    : ctx_(ctx),
      params_(params),
      check_every_(check_every),
      local_sgd_(local_sgd),
      tp_comm_(tp_comm) {}

void DivergenceGuard::end_step(int step, const StepRecord&, TrainOutcome& out) {
  if (check_every_ > 0 && (step + 1) % check_every_ == 0 && local_sgd_.equal_after(step))
    out.diverged = check(step + 1);
}

std::string DivergenceGuard::check(int steps_done) {
  double mine = parameter_checksum(params_);
  if (tp_comm_ != MPI_COMM_NULL)
    DTUNE_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &mine, 1, MPI_DOUBLE, MPI_SUM, tp_comm_));
  checksums_ = gather_doubles(ctx_.comm(), {mine});
  std::string bad;
  if (ctx_.is_root()) {
    for (size_t r = 1; r < checksums_.size(); ++r)
      if (checksums_[r] != checksums_[0]) bad += (bad.empty() ? "" : ",") + std::to_string(r);
  }
  bad = broadcast_string(ctx_.comm(), bad);
  if (bad.empty()) return "";
  return "parameters diverged after step " + std::to_string(steps_done) +
         " (warm-up included): rank(s) " + bad +
         " differ from rank 0 (checksum over all parameters); the gradient synchronisation is "
         "broken";
}

}  // namespace dtune::train
