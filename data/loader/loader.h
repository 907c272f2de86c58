// The data loader: N worker threads (0: in the caller's thread) each build whole batches, as
// PyTorch's DataLoader workers do, at most --prefetch batches ahead of the consumer; batches come
// out in order. A batch reads its samples from storage (byte ranges of shards or files), decodes
// and augments images (random-resized crop + flip + normalise, seeded per sample so the result does
// not depend on the worker count) or cuts token windows, into (pinned, with CUDA) host tensors.
// Every batch carries its timing: fetch (storage reads), decode (decode + transform) and, at the
// consumer, wait (time next() blocked). Bad samples (undecodable, truncated) are skipped and
// counted, or fatal with strict.
#pragma once

#include <torch/types.h>

#include <atomic>
#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "data/formats/dataset.h"
#include "data/storage/storage.h"

namespace dtune::data {

struct LoaderOptions {
  int64_t batch = 32;
  int workers = 2;
  int prefetch = 4;       // batches built ahead of the consumer, in all
  uint64_t seed = 0;
  int rank = 0, world = 1;
  bool strict = false;    // a bad sample is an error instead of skipped
  bool drop_last = true;  // every rank runs the same number of full batches
  int image_size = 224;   // images: output side
  bool augment = true;    // images: random-resized crop + flip (else resize 256/224 + center crop)
  int context = 0;        // tokens: T
  bool pin_memory = false;
};

struct BatchTiming {
  double fetch_ms = 0, decode_ms = 0;  // summed over the batch's samples, in the worker
  double wait_ms = 0;                  // the consumer, blocked in next()
  int64_t bytes = 0;
  int bad = 0;
};

struct LoadedBatch {
  int64_t index = 0;          // within the epoch, on this rank
  torch::Tensor input;        // images: float (B, 3, S, S); tokens: int64 (B, T)
  torch::Tensor target;       // images: int64 labels (B); tokens: int64 (B, T)
  std::vector<int64_t> ids;   // dataset sample indices, in batch order (bad ones left out)
  BatchTiming timing;
};

struct LoaderTotals {
  int64_t batches = 0, samples = 0, bad = 0, bytes = 0;
  double fetch_ms = 0, decode_ms = 0, wait_ms = 0;
};

class Loader {
 public:
  Loader(std::shared_ptr<Storage> storage, Dataset dataset, LoaderOptions o);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  const Dataset& dataset() const { return dataset_; }
  int64_t samples_this_rank() const { return mine_count_; }
  int64_t batches_per_epoch() const { return batches_; }
  // Starts (or restarts) the workers on `epoch`'s order.
  void start_epoch(int epoch);
  // The next batch of the epoch, or nullopt after the last. Rethrows a worker's error.
  std::optional<LoadedBatch> next();
  LoaderTotals totals() const { return totals_; }

 private:
  LoadedBatch build(int64_t index);
  void worker_loop();
  void stop_workers();

  std::shared_ptr<Storage> storage_;
  Dataset dataset_;
  std::vector<SampleRef> samples_;  // images: dataset_.samples; tokens: the windows
  LoaderOptions o_;
  int epoch_ = -1;
  std::vector<int64_t> mine_;  // this rank's sample indices, this epoch
  int64_t mine_count_ = 0;
  int64_t batches_ = 0;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<int64_t, LoadedBatch> ready_;
  int64_t next_claim_ = 0, next_out_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> workers_;
  LoaderTotals totals_;
};

}  // namespace dtune::data
