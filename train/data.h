// Where training batches come from. DataSource is the per-rank sharded interface real datasets
// plug into (each rank sees a disjoint shard of every epoch); SyntheticSource is fixed random
// samples made once on the device, so data costs nothing and the step measures the model and
// the communication only (the "synthetic" leg of the data-stall method).
#pragma once

#include <memory>
#include <vector>

#include "core/context.h"
#include "models/model.h"
#include "train/config.h"

namespace dtune::train {

struct Batch {
  torch::Tensor input;
  torch::Tensor target;
};

class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual std::string name() const = 0;
  // The batch for micro-step `micro` of the current step (host or device memory; the trainer
  // copies it to the device, timed as the host-to-device phase).
  virtual Batch next(int micro) = 0;
  // What loading cost so far (zeros for synthetic data).
  virtual DataSummary summary() const { return {name(), 0, 0, 0, 0, 0, 0, 0, 0}; }
};

// Sample j of the global batch is drawn from seed (seed, j) alone, and rank r's micro-step m holds
// global samples [(r·K + m)·b, (r·K + m + 1)·b): so 2 ranks × b see exactly the samples 1 rank ×
// 2b sees, and K micro-steps of b exactly those of one step of K·b (the equivalence tests).
std::unique_ptr<DataSource> make_synthetic_source(const models::Model& model, int64_t batch,
                                                  int accum_steps, int rank, uint64_t seed,
                                                  const torch::Device& device);

// --data PATH|s3://...: dtune's loader (data/loader/loader.h) over a WebDataset, ImageFolder or
// token dataset, slice `rank` of `world` of each epoch (data parallelism: the rank and the ranks;
// a pipeline: its data-parallel index and the pipelines), epochs rolling over as the steps need
// them. Throws UsageError before training when the dataset is missing or does not fit the model.
std::unique_ptr<DataSource> make_loader_source(const Options& o, const models::Model& model,
                                               int64_t batch, int rank, int world,
                                               const torch::Device& device);

}  // namespace dtune::train
