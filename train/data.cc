// Synthetic data, and dtune's loader as a data source.
#include "train/data.h"

#include <algorithm>

#include "core/error.h"
#include "data/loader/loader.h"
#include "data/loader/open_data.h"
#include "train/device_stager.h"

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

class LoaderSource final : public DataSource {
 public:
  LoaderSource(std::string data, int rank, int64_t batch, std::shared_ptr<data::Storage> storage,
               data::NodeCache* cache, std::unique_ptr<data::Loader> loader,
               std::unique_ptr<DeviceStager> stager)
      : data_(std::move(data)),
        rank_(rank),
        batch_(batch),
        storage_(std::move(storage)),
        loader_(std::move(loader)),
        cache_(cache),
        stager_(std::move(stager)) {
    loader_->start_epoch(epoch_);
  }
  std::string name() const override { return loader_->dataset().describe(); }
  Batch next(int) override {
    if (!stager_) {
      data::LoadedBatch b = next_host();
      return {b.input, b.target};
    }
    // GPU: hand over the batch staged during the previous step and start copying the next one, so
    // its host-to-device copy overlaps this step's compute.
    if (!staged_) stage_next();
    auto [input, target] = stager_->take();
    stage_next();
    return {input, target};
  }
  DataSummary summary() const override {
    const data::LoaderTotals t = loader_->totals();
    const data::StorageStats s = storage_->stats();
    DataSummary d{name(),    t.samples,  t.bad,       t.bytes,  s.requests,
                  s.retries, t.fetch_ms, t.decode_ms, t.wait_ms};
    d.undecodable = t.undecodable;
    d.truncated = t.truncated;
    d.batches = t.batches;
    d.jpeg_ms = t.jpeg_ms;
    d.coef_bytes = t.coef_bytes;
    if (cache_) {
      const data::CacheStats c = cache_->cache_stats();
      d.cache_hits = c.hits;
      d.cache_misses = c.misses;
      d.cache_hit_bytes = c.hit_bytes;
      d.cache_miss_bytes = c.miss_bytes;
      d.cache_evictions = c.evictions;
    }
    return d;
  }

 private:
  std::string data_;  // "--data URL", for messages
  int rank_;
  int64_t batch_;
  std::shared_ptr<data::Storage> storage_;
  data::LoadedBatch next_host() {
    std::optional<data::LoadedBatch> b = loader_->next();
    if (!b) {  // this rank's epoch is over (see loader.h): its next one, reshuffled
      const data::LoaderTotals before = loader_->totals();
      loader_->start_epoch(++epoch_);
      b = loader_->next();
      if (!b) {
        const data::LoaderTotals t = loader_->totals();
        throw UsageError(data_ + ": rank " + std::to_string(rank_) + "'s slice of epoch " +
                         std::to_string(epoch_) + " holds fewer than " + std::to_string(batch_) +
                         " good samples (" + std::to_string(t.undecodable - before.undecodable) +
                         " undecodable, " + std::to_string(t.truncated - before.truncated) +
                         " truncated): repair the data or lower --batch");
      }
    }
    return std::move(*b);
  }
  void stage_next() {
    data::LoadedBatch b = next_host();
    stager_->stage(b.input, b.target);
    staged_ = true;
  }

  std::unique_ptr<data::Loader> loader_;
  data::NodeCache* cache_;                // within storage_, when there is a cache tier
  std::unique_ptr<DeviceStager> stager_;  // GPU only
  bool staged_ = false;
  int epoch_ = 0;
};

}  // namespace

std::unique_ptr<DataSource> make_loader_source(const Options& o, const models::Model& model,
                                               int64_t batch, int rank, int world,
                                               const torch::Device& device) {
  data::OpenedData opened =
      data::open_data(o.data,
                      data::CacheOptions{o.cache_dir, static_cast<int64_t>(o.cache_mb * (1 << 20)),
                                         static_cast<int64_t>(o.cache_block_mb * (1 << 20))},
                      "--data " + o.data);
  data::Dataset& d = opened.dataset;
  // The model's input shape tells what the data must be: (1, 3, S, S) images or (1, T) tokens.
  const auto [x, y] = model.synthetic_batch(1, torch::kCPU, 0);
  data::LoaderOptions lo;
  lo.batch = batch;
  lo.workers = o.workers;
  lo.prefetch = o.prefetch;
  lo.seed = o.seed;
  lo.rank = rank;
  lo.world = world;
  lo.strict = o.strict;
  lo.decode = data::parse_decode_mode(o.decode);
  // nvJPEG decodes on the rank's own GPU (on a CPU run it is refused when the loader is built).
  lo.decode_device = device.is_cuda() && device.has_index() ? device.index() : 0;
  lo.fast_decode = o.fast_decode;
  lo.pin_memory = device.is_cuda();
  if (x.dim() == 4) {
    if (d.kind != data::DatasetKind::kImages)
      throw UsageError("--data " + o.data + " holds tokens but --model " + o.model +
                       " takes images");
    if (x.size(2) != x.size(3)) throw UsageError("--data: the loader makes square images only");
    lo.image_size = static_cast<int>(x.size(2));
    // Labels were checked against the dataset's num_classes at open; the model must cover them all.
    const int64_t classes = o.model_options.num_classes;
    const auto top = std::max_element(
        d.samples.begin(), d.samples.end(),
        [](const data::SampleRef& a, const data::SampleRef& b) { return a.label < b.label; });
    if (d.num_classes > classes) {
      std::string example;
      if (top != d.samples.end() && top->label >= classes)
        example = " (sample " + std::to_string(top - d.samples.begin()) + " in " +
                  d.objects[top->object].key + " has label " + std::to_string(top->label) + ")";
      throw UsageError("--data " + o.data + " has " + std::to_string(d.num_classes) + " classes" +
                       example + " but the model has --num-classes " + std::to_string(classes) +
                       ": pass --num-classes " + std::to_string(d.num_classes));
    }
  } else {
    if (d.kind != data::DatasetKind::kTokens)
      throw UsageError("--data " + o.data + " holds images but --model " + o.model +
                       " takes tokens");
    lo.context = static_cast<int>(x.size(1));
    if (o.model_options.vocab > 0 && d.vocab > o.model_options.vocab)
      throw UsageError("--data " + o.data + " has a vocabulary of " + std::to_string(d.vocab) +
                       " but --vocab is " + std::to_string(o.model_options.vocab));
  }
  auto loader = std::make_unique<data::Loader>(opened.storage, std::move(d), lo);
  if (loader->batches_per_epoch() < 1)
    throw UsageError("--data " + o.data + ": " + std::to_string(loader->samples_this_rank()) +
                     " samples per rank, fewer than one batch of " + std::to_string(batch));
  return std::make_unique<LoaderSource>("--data " + o.data, rank, batch, std::move(opened.storage),
                                        opened.cache, std::move(loader),
                                        make_device_stager(device));
}

std::unique_ptr<DataSource> make_synthetic_source(const models::Model& model, int64_t batch,
                                                  int accum_steps, int rank, uint64_t seed,
                                                  const torch::Device& device) {
  std::vector<Batch> micro;
  for (int m = 0; m < accum_steps; ++m) {
    std::vector<torch::Tensor> xs, ys;
    const int64_t first = (static_cast<int64_t>(rank) * accum_steps + m) * batch;
    for (int64_t j = first; j < first + batch; ++j) {
      auto [x, y] =
          model.synthetic_batch(1, torch::kCPU, seed * 1000003ull + static_cast<uint64_t>(j));
      xs.push_back(x);
      ys.push_back(y);
    }
    micro.push_back({torch::cat(xs).to(device), torch::cat(ys).to(device)});
  }
  return std::make_unique<SyntheticSource>(std::move(micro));
}

}  // namespace dtune::train
