// The trainer's test hooks.
#include "train/fault_injector.h"

#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <iomanip>

#include "core/error.h"
#include "models/model.h"
#include "models/weights.h"
#include "train/divergence.h"

namespace dtune::train {

FaultInjector::FaultInjector(const Options& o, int rank)
    : rank_(rank),
      plant_inf_step_(o.plant_inf_step),
      plant_inf_rank_(o.plant_inf_rank),
      perturb_rank_(o.perturb_rank),
      dump_path_(o.dump_path),
      dump_writes_(rank == 0),
      checksums_path_(
          o.checksums_path.empty() ? "" : o.checksums_path + ".rank" + std::to_string(rank)) {
  if (!checksums_path_.empty()) {
    std::ofstream truncate(checksums_path_);
    if (!truncate) throw UsageError("--debug-checksums: cannot write " + checksums_path_);
  }
}

void FaultInjector::after_reduction(int step, std::vector<torch::Tensor>& grads) const {
  if (step != plant_inf_step_ || rank_ != plant_inf_rank_) return;
  torch::NoGradGuard no_grad;
  for (auto& g : grads) g.fill_(INFINITY);
}

void FaultInjector::after_step(int step, std::vector<torch::Tensor>& params) const {
  if (step == 0 && rank_ == perturb_rank_ && !params.empty()) {
    torch::NoGradGuard no_grad;
    params.front().add_(1e-3);
  }
  if (!checksums_path_.empty()) {
    std::ofstream out(checksums_path_, std::ios::app);
    out << step << ' ' << std::setprecision(17) << parameter_checksum(params) << '\n';
  }
}

void FaultInjector::at_end(models::Model& model, const std::vector<torch::Tensor>& master) const {
  if (dump_path_.empty() || !dump_writes_) return;
  models::TensorMap dump;
  const auto named = model.named_parameters();
  for (size_t i = 0; i < named.size(); ++i) {
    const auto& p = named[i];
    dump["param." + p.key()] = p.value().detach().to(torch::kCPU).contiguous();
    if (p.value().grad().defined())
      dump["grad." + p.key()] = p.value().grad().to(torch::kCPU).contiguous();
    if (i < master.size()) dump["master." + p.key()] = master[i].detach().to(torch::kCPU);
  }
  models::write_tensors(dump_path_, dump);
}

}  // namespace dtune::train
