// Synthetic data.
#include "benchmarks/train/data.h"

namespace dtune::train {
namespace {

class SyntheticSource final : public DataSource {
 public:
  explicit SyntheticSource(std::vector<Batch> micro) : micro_(std::move(micro)) {}
  std::string name() const override { return "synthetic"; }
  Batch next(int micro) override { return micro_[static_cast<size_t>(micro)]; }

 private:
  std::vector<Batch> micro_;
};

}  // namespace

std::unique_ptr<DataSource> make_synthetic_source(const models::Model& model, int64_t batch,
                                                  int accum_steps, int rank, uint64_t seed,
                                                  const torch::Device& device) {
  std::vector<Batch> micro;
  for (int m = 0; m < accum_steps; ++m) {
    std::vector<torch::Tensor> xs, ys;
    const int64_t first = (static_cast<int64_t>(rank) * accum_steps + m) * batch;
    for (int64_t j = first; j < first + batch; ++j) {
      auto [x, y] = model.synthetic_batch(1, torch::kCPU, seed * 1000003ull + static_cast<uint64_t>(j));
      xs.push_back(x);
      ys.push_back(y);
    }
    micro.push_back({torch::cat(xs).to(device), torch::cat(ys).to(device)});
  }
  return std::make_unique<SyntheticSource>(std::move(micro));
}

}  // namespace dtune::train
