// The data loader: N worker threads (0: in the caller's thread) each build whole batches, as
// PyTorch's DataLoader workers do, at most --prefetch batches ahead of the consumer; batches come
// out in order. A batch reads its samples from storage (byte ranges of shards or files), decodes
// and augments images (random-resized crop + flip + normalise, seeded per sample so the result does
// not depend on the worker count) or cuts token windows, into (pinned, with CUDA) host tensors.
// Every batch carries its timing: fetch (storage reads), decode (decode + transform; of it, jpeg:
// the JPEG decoder alone, with the DCT coefficient bytes it inverse-transformed) and, at the
// consumer, wait (time next() blocked). Images are decoded whole then cropped (DecodeMode::kFull)
// or only around the crop box (kRoi, the default: data/image/jpeg_crop.h, the same tensors);
// fast_decode adds DCT scaling where the box is at least twice the output (other pixels). Bad
// samples (undecodable, truncated) are skipped and counted by cause, or fatal with strict.
//
// Every batch is full: workers decode the rank's slice in chunks of `batch` consecutive samples
// (as many as prefetch allows, in any order), and next() hands out the good samples in slice
// order, `batch` at a time, so a batch that lost samples is refilled from the next samples of the
// same slice and the batches do not depend on the worker count. The slice's tail beyond the last
// full batch (fewer than `batch` + 1 samples) is read too, as spares. When the slice runs out of
// good samples, the epoch ends there and the last partial batch is dropped, as drop_last does
// (kept with drop_last off); a rank with many bad samples can then deliver fewer batches in an
// epoch than the others. dtune-train rolls each rank into its next epoch when its own ends, so
// every rank still runs the same number of steps, each on a full batch (N ranks x b samples are
// the N·b samples of one step, as 1 rank x N·b). When fewer than two batches' worth of samples
// remain, next() takes the rest of the slice at once: so when an epoch's last batch is out,
// every sample of the slice was read and the skipped counts are those of the whole slice.
#pragma once

#include <torch/types.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "data/formats/dataset.h"
#include "data/storage/storage.h"

namespace dtune::data {

// kNvjpeg: nvJPEG on a CUDA GPU, the box copied back (data/image/nvjpeg_decoder.h); refused at
// construction where it cannot run.
enum class DecodeMode { kFull, kRoi, kNvjpeg };
inline const char* to_string(DecodeMode m) {
  return m == DecodeMode::kFull ? "full" : m == DecodeMode::kRoi ? "roi" : "nvjpeg";
}
// "roi", "full" or "nvjpeg" (the --decode values); throws UsageError for any other.
DecodeMode parse_decode_mode(const std::string& name);

struct LoaderOptions {
  int64_t batch = 32;
  int workers = 2;
  int prefetch = 4;  // batches built ahead of the consumer, in all
  uint64_t seed = 0;
  int rank = 0, world = 1;
  bool strict = false;    // a bad sample is an error instead of skipped
  bool drop_last = true;  // every rank runs the same number of full batches
  int image_size = 224;   // images: output side
  bool augment = true;    // images: random-resized crop + flip (else resize 256/224 + center crop)
  DecodeMode decode = DecodeMode::kRoi;  // images: whole, or the region around the crop box
  int decode_device = 0;                 // kNvjpeg: the CUDA device that decodes
  bool fast_decode = false;  // images (kRoi): scale 1/2-1/8 in the DCT where the box allows
  int context = 0;           // tokens: T
  bool pin_memory = false;
};

struct BatchTiming {
  double fetch_ms = 0, decode_ms = 0;  // summed over the batch's samples, in the worker
  double jpeg_ms = 0;                  // of decode_ms: the JPEG decoder alone (images)
  int64_t coef_bytes = 0;              // DCT coefficient bytes inverse-transformed (images)
  double wait_ms = 0;                  // the consumer, blocked in next()
  int64_t bytes = 0;
  int bad = 0;                         // undecodable + truncated
  int undecodable = 0, truncated = 0;  // not a decodable JPEG; read short (a truncated shard)
};

// A sample left out, named for the user: "cls/img.jpg" (one file per image) or "sample 5 of
// shard-000000.tar (byte 2560)", and why ("JPEG header: Bogus Huffman table definition").
struct BadSample {
  int64_t id = 0;  // dataset sample index
  std::string name, why;
};

// How many bad samples an epoch names (the first, in slice order); the rest are counted.
inline constexpr size_t kNamedBadSamples = 10;

struct LoadedBatch {
  int64_t index = 0;           // within the epoch, on this rank
  torch::Tensor input;         // images: float (B, 3, S, S); tokens: int64 (B, T)
  torch::Tensor target;        // images: int64 labels (B); tokens: int64 (B, T)
  std::vector<int64_t> ids;    // dataset sample indices, in batch order (bad ones left out)
  BatchTiming timing;          // of the chunks this batch took first (see above)
  std::vector<BadSample> bad;  // the chunk's bad samples (workers only; next() keeps them)
};

struct LoaderTotals {
  int64_t batches = 0, samples = 0, bad = 0, bytes = 0;  // samples: delivered in batches
  int64_t undecodable = 0, truncated = 0;                // bad, by cause
  double fetch_ms = 0, decode_ms = 0, wait_ms = 0;
  double jpeg_ms = 0;      // of decode_ms
  int64_t coef_bytes = 0;  // DCT coefficient bytes inverse-transformed
};

class Loader {
 public:
  Loader(std::shared_ptr<Storage> storage, Dataset dataset, LoaderOptions o);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  const Dataset& dataset() const { return dataset_; }
  int64_t samples_this_rank() const { return mine_count_; }
  // Full batches per epoch (with drop_last, the same on every rank) while no sample is bad.
  int64_t batches_per_epoch() const { return batches_; }
  // Starts (or restarts) the workers on `epoch`'s order.
  void start_epoch(int epoch);
  // The next batch of the epoch, or nullopt after the last. Rethrows a worker's error.
  std::optional<LoadedBatch> next();
  LoaderTotals totals() const { return totals_; }
  // The first kNamedBadSamples bad samples of the current epoch met so far, in slice order.
  const std::vector<BadSample>& named_bad() const { return named_bad_; }

 private:
  LoadedBatch build(
      int64_t chunk);  // chunk c: slice positions [c*batch, (c+1)*batch), bad ones left out
  void worker_loop();
  void stop_workers();
  bool take_chunk(BatchTiming& timing);  // the next chunk into taken_; false when none is left
  int64_t rows_taken() const;            // good samples in taken_ not yet handed out
  LoadedBatch assemble(int64_t n);       // the first n of them, as one batch
  std::string sample_name(int64_t id) const;
  // A (batch, ...) input buffer: a pooled one nobody holds any more, else a new one (pooled).
  torch::Tensor input_buffer(at::IntArrayRef shape, torch::ScalarType dtype);

  std::shared_ptr<Storage> storage_;
  Dataset dataset_;
  std::vector<SampleRef> samples_;  // images: dataset_.samples; tokens: the windows
  LoaderOptions o_;
  int epoch_ = -1;
  std::vector<int64_t> mine_;  // this rank's sample indices, this epoch
  int64_t mine_count_ = 0;
  int64_t batches_ = 0;
  int64_t chunks_ = 0;  // ceil(|mine_| / batch)

  // The consumer's side: chunks taken in order, the first one partly handed out.
  std::deque<LoadedBatch> taken_;
  int64_t used_ = 0;       // rows of taken_.front() already handed out
  int64_t next_take_ = 0;  // next chunk to take
  int64_t delivered_ = 0;  // batches handed out this epoch
  bool epoch_over_ = false;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<int64_t, LoadedBatch> ready_;  // chunks built, not yet taken
  int64_t next_claim_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> workers_;
  LoaderTotals totals_;
  std::vector<BadSample> named_bad_;  // this epoch's first bad samples

  // Recycled input buffers (not with pin_memory: a pinned batch may still be copying to the GPU
  // after its last reference goes; PyTorch's pinned allocator caches those itself).
  std::mutex pool_mutex_;
  std::vector<torch::Tensor> pool_;
};

}  // namespace dtune::data
