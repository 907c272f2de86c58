// The multi-worker loader (see loader.h).
#include "data/loader/loader.h"

#include <chrono>
#include <cstring>
#include <random>

#include "core/deadline.h"
#include "core/error.h"
#include "data/image/jpeg.h"
#include "data/image/jpeg_crop.h"
#include "data/image/nvjpeg_decoder.h"
#include "data/image/transform.h"
#include "data/loader/sampler.h"

namespace dtune::data {
namespace {

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Uniform [0, 1) from a 64-bit generator, identical on every platform.
struct Uniform {
  std::mt19937_64& rng;
  double operator()() { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }
};

}  // namespace

Loader::Loader(std::shared_ptr<Storage> storage, Dataset dataset, LoaderOptions o)
    : storage_(std::move(storage)), dataset_(std::move(dataset)), o_(o) {
  DTUNE_CHECK(o_.batch >= 1 && o_.workers >= 0 && o_.prefetch >= 1 && o_.world >= 1,
              "bad loader options");
  if (dataset_.kind == DatasetKind::kTokens) {
    if (o_.context < 1) throw UsageError("a token dataset needs the model's context length");
    samples_ = token_windows(dataset_, o_.context);
  } else {
    samples_ = dataset_.samples;
  }
  if (samples_.empty()) throw UsageError(storage_->describe() + ": the dataset has no samples");
  if (dataset_.kind == DatasetKind::kImages && o_.decode == DecodeMode::kNvjpeg) {
    if (o_.fast_decode)
      throw UsageError("--fast-decode scales libjpeg's region decode: it needs --decode roi");
    // Refused here, before any worker starts, rather than as the first batch's error.
    const std::string why = nvjpeg_unavailable_reason();
    if (!why.empty())
      throw UsageError("--decode nvjpeg cannot run here: " + why + "; use --decode roi");
  }
  // drop_last: the largest batch count every rank can fill (slices differ by at most one sample).
  const int64_t m = static_cast<int64_t>(samples_.size());
  mine_count_ = m * (o_.rank + 1) / o_.world - m * o_.rank / o_.world;
  batches_ = o_.drop_last ? (m / o_.world) / o_.batch : (mine_count_ + o_.batch - 1) / o_.batch;
  chunks_ = (mine_count_ + o_.batch - 1) / o_.batch;
}

Loader::~Loader() { stop_workers(); }

DecodeMode parse_decode_mode(const std::string& name) {
  for (DecodeMode m : {DecodeMode::kRoi, DecodeMode::kFull, DecodeMode::kNvjpeg})
    if (name == to_string(m)) return m;
  throw UsageError("--decode " + name + ": unknown; use roi, full or nvjpeg");
}

void Loader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

void Loader::start_epoch(int epoch) {
  stop_workers();
  epoch_ = epoch;
  mine_ =
      rank_slice(epoch_order(samples_, dataset_.objects.size(), o_.seed, epoch), o_.rank, o_.world);
  ready_.clear();
  taken_.clear();
  used_ = next_claim_ = next_take_ = delivered_ = 0;
  epoch_over_ = false;
  named_bad_.clear();
  stop_ = false;
  error_ = nullptr;
  for (int w = 0; w < o_.workers; ++w) workers_.emplace_back([this] { worker_loop(); });
}

void Loader::worker_loop() {
  while (true) {
    int64_t chunk;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] {
        return stop_ || error_ || next_claim_ >= chunks_ || next_claim_ < next_take_ + o_.prefetch;
      });
      if (stop_ || error_ || next_claim_ >= chunks_) return;
      chunk = next_claim_++;
    }
    try {
      LoadedBatch b = build(chunk);
      std::lock_guard<std::mutex> lock(mutex_);
      ready_.emplace(chunk, std::move(b));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    cv_.notify_all();
  }
}

bool Loader::take_chunk(BatchTiming& timing) {
  if (next_take_ >= chunks_) return false;
  LoadedBatch c;
  if (o_.workers == 0) {
    c = build(next_take_++);
  } else {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return error_ || ready_.count(next_take_); });
    if (error_) std::rethrow_exception(error_);
    auto it = ready_.find(next_take_);
    c = std::move(it->second);
    ready_.erase(it);
    ++next_take_;
    lock.unlock();
    cv_.notify_all();
  }
  const BatchTiming& t = c.timing;
  timing.fetch_ms += t.fetch_ms;
  timing.decode_ms += t.decode_ms;
  timing.jpeg_ms += t.jpeg_ms;
  timing.coef_bytes += t.coef_bytes;
  timing.bytes += t.bytes;
  timing.bad += t.bad;
  timing.undecodable += t.undecodable;
  timing.truncated += t.truncated;
  totals_.bad += t.bad;
  totals_.undecodable += t.undecodable;
  totals_.truncated += t.truncated;
  totals_.bytes += t.bytes;
  totals_.fetch_ms += t.fetch_ms;
  totals_.decode_ms += t.decode_ms;
  totals_.jpeg_ms += t.jpeg_ms;
  totals_.coef_bytes += t.coef_bytes;
  for (auto& bad : c.bad)
    if (named_bad_.size() < kNamedBadSamples) named_bad_.push_back(std::move(bad));
  c.bad.clear();
  if (!c.ids.empty()) taken_.push_back(std::move(c));
  return true;
}

int64_t Loader::rows_taken() const {
  int64_t n = -used_;
  for (const auto& c : taken_) n += static_cast<int64_t>(c.ids.size());
  return n;
}

// A fresh batch buffer costs its pages: the kernel zeroes and maps each on first touch (a
// 32 x 3 x 224 x 224 float batch is 19 MB, 4,700 faults; about a fifth of a worker's time went
// there), and glibc returns a freed block that large to the kernel. So the loader keeps up to
// prefetch + workers + 2 buffers and reuses one whose tensor and storage only the pool still
// holds (the consumer dropped the batch and every view of it). The pool's own reference is taken
// under the lock before it is released, so two workers never share a buffer.
torch::Tensor Loader::input_buffer(at::IntArrayRef shape, torch::ScalarType dtype) {
  const auto opts = torch::TensorOptions().dtype(dtype).pinned_memory(o_.pin_memory);
  if (o_.pin_memory) return torch::empty(shape, opts);
  const size_t cap = static_cast<size_t>(o_.prefetch + o_.workers + 2);
  std::lock_guard<std::mutex> lock(pool_mutex_);
  for (const torch::Tensor& t : pool_)
    if (t.use_count() == 1 && t.storage().use_count() == 1 && t.scalar_type() == dtype &&
        t.sizes() == shape)
      return t;
  torch::Tensor t = torch::empty(shape, opts);
  if (pool_.size() < cap) {
    pool_.push_back(t);
  } else {  // full: replace a free buffer of another shape (the last, shorter batch's), if any
    for (torch::Tensor& old : pool_)
      if (old.use_count() == 1 && old.storage().use_count() == 1) {
        old = t;
        break;
      }
  }
  return t;
}

LoadedBatch Loader::assemble(int64_t n) {
  LoadedBatch b;
  LoadedBatch& first = taken_.front();
  if (used_ == 0 && static_cast<int64_t>(first.ids.size()) == n) {  // a whole chunk: no copy
    b.input = std::move(first.input);
    b.target = std::move(first.target);
    b.ids = std::move(first.ids);
    taken_.pop_front();
    return b;
  }
  auto rows = [n](const torch::Tensor& t) {  // t's shape with n rows
    std::vector<int64_t> shape = t.sizes().vec();
    shape[0] = n;
    return shape;
  };
  b.input = input_buffer(rows(first.input), first.input.scalar_type());
  b.target = torch::empty(rows(first.target), first.target.options().pinned_memory(o_.pin_memory));
  for (int64_t filled = 0; filled < n;) {
    LoadedBatch& c = taken_.front();
    const int64_t k = std::min(n - filled, static_cast<int64_t>(c.ids.size()) - used_);
    b.input.narrow(0, filled, k).copy_(c.input.narrow(0, used_, k));
    b.target.narrow(0, filled, k).copy_(c.target.narrow(0, used_, k));
    b.ids.insert(b.ids.end(), c.ids.begin() + used_, c.ids.begin() + used_ + k);
    filled += k;
    used_ += k;
    if (used_ == static_cast<int64_t>(c.ids.size())) {
      taken_.pop_front();
      used_ = 0;
    }
  }
  return b;
}

std::optional<LoadedBatch> Loader::next() {
  DTUNE_CHECK(epoch_ >= 0, "Loader::next before start_epoch");
  if (epoch_over_ || delivered_ >= batches_) return std::nullopt;
  const auto t0 = Clock::now();
  BatchTiming timing;
  while (rows_taken() < o_.batch && take_chunk(timing)) {
  }
  const int64_t rows = rows_taken();
  if (rows == 0 || (rows < o_.batch && o_.drop_last)) {  // the slice ran out of good samples
    epoch_over_ = true;
    taken_.clear();
    used_ = 0;
    return std::nullopt;
  }
  LoadedBatch b = assemble(std::min<int64_t>(rows, o_.batch));
  b.index = delivered_++;
  // Fewer than two batches' worth left (or this was the last): take the rest of the slice now,
  // so that the epoch's skipped samples are all counted by the time its last batch is out.
  const int64_t unread =
      static_cast<int64_t>(mine_.size()) - std::min<int64_t>(next_take_ * o_.batch, mine_.size());
  if (delivered_ >= batches_ || rows_taken() + unread < 2 * o_.batch)
    while (take_chunk(timing)) {
    }
  b.timing = timing;
  b.timing.wait_ms = ms_since(t0);
  ++totals_.batches;
  totals_.samples += static_cast<int64_t>(b.ids.size());
  totals_.wait_ms += b.timing.wait_ms;
  return b;
}

std::string Loader::sample_name(int64_t id) const {
  const SampleRef& s = samples_[static_cast<size_t>(id)];
  const std::string& key = dataset_.objects[s.object].key;
  if (dataset_.format == "imagefolder") return key;
  return "sample " + std::to_string(id) + " of " + key + " (byte " + std::to_string(s.offset) + ")";
}

LoadedBatch Loader::build(int64_t chunk) {
  thread_local std::unique_ptr<JpegCodec> codec;
  thread_local std::unique_ptr<JpegCropDecoder> roi;
  thread_local std::unique_ptr<NvjpegDecoder> nvjpeg;
  // Decoded images are kept per thread so their buffers are reused (a fresh ~0.5 MB buffer per
  // image was cleared and often page-faulted in).
  thread_local CroppedImage c;
  LoadedBatch b;
  b.index = chunk;
  const int64_t lo = chunk * o_.batch;
  const int64_t hi = std::min<int64_t>(lo + o_.batch, static_cast<int64_t>(mine_.size()));
  const int64_t n = hi - lo;
  const bool images = dataset_.kind == DatasetKind::kImages;
  const int64_t S = o_.image_size, T = o_.context;
  auto opts = torch::TensorOptions().pinned_memory(o_.pin_memory);
  b.input = images ? input_buffer({n, 3, S, S}, torch::kFloat) : input_buffer({n, T}, torch::kLong);
  b.target = images ? torch::empty({n}, opts.dtype(torch::kLong))
                    : torch::empty({n, T}, opts.dtype(torch::kLong));
  int64_t filled = 0;
  for (int64_t k = lo; k < hi; ++k) {
    const int64_t id = mine_[static_cast<size_t>(k)];
    const SampleRef& s = samples_[static_cast<size_t>(id)];
    const std::string& key = dataset_.objects[s.object].key;
    auto t0 = Clock::now();
    std::string bytes = storage_->read(key, s.offset, s.size);
    b.timing.fetch_ms += ms_since(t0);
    b.timing.bytes += static_cast<int64_t>(bytes.size());
    t0 = Clock::now();
    if (static_cast<int64_t>(bytes.size()) < s.size) {
      if (o_.strict)
        throw Error(key + ": sample " + std::to_string(id) + " cut short (" +
                    std::to_string(bytes.size()) + " of " + std::to_string(s.size) +
                    " bytes): truncated shard (--strict)");
      ++b.timing.truncated;
      ++b.timing.bad;
      b.bad.push_back({id, sample_name(id),
                       "read short (" + std::to_string(bytes.size()) + " of " +
                           std::to_string(s.size) + " bytes): a truncated shard"});
      continue;
    }
    try {
      if (images) {
        std::mt19937_64 rng(
            mix_seed(o_.seed, static_cast<uint64_t>(epoch_), static_cast<uint64_t>(id)));
        Uniform u{rng};
        // The box is a function of the image's size and the sample's seed: chosen from the
        // header's dimensions, the same whichever way the image is decoded.
        const auto choose = [&](int width, int height) {
          return o_.augment ? random_resized_crop_box(width, height, u)
                            : center_crop_box(width, height, static_cast<int>(S * 256 / 224),
                                              static_cast<int>(S));
        };
        // Decoded either way into a region (the whole image, or the rows and columns around
        // the box) and the box inside it; then the same crop, resize, flip and normalise.
        const auto tj = Clock::now();
        if (o_.decode == DecodeMode::kFull) {
          if (!codec) codec = std::make_unique<JpegCodec>();
          codec->decode_into(c.image, bytes.data(), bytes.size());
          c.coef_bytes = codec->last_coef_bytes();
          c.box = choose(c.image.width, c.image.height);
        } else if (o_.decode == DecodeMode::kNvjpeg) {
          if (!nvjpeg) nvjpeg = std::make_unique<NvjpegDecoder>(o_.decode_device);
          nvjpeg->decode_into(c, bytes.data(), bytes.size(), choose);
        } else {
          if (!roi) roi = std::make_unique<JpegCropDecoder>();
          roi->decode_into(c, bytes.data(), bytes.size(), choose, static_cast<int>(S),
                           static_cast<int>(S), o_.fast_decode);
        }
        b.timing.jpeg_ms += ms_since(tj);
        b.timing.coef_bytes += c.coef_bytes;
        const bool flip = o_.augment && u() < 0.5;
        crop_resize_normalize(c.image, c.box, static_cast<int>(S), static_cast<int>(S), flip,
                              b.input.data_ptr<float>() + filled * 3 * S * S);
        b.target.data_ptr<int64_t>()[filled] = s.label;
      } else {
        int64_t* in = b.input.data_ptr<int64_t>() + filled * T;
        int64_t* tg = b.target.data_ptr<int64_t>() + filled * T;
        const auto* tok = reinterpret_cast<const uint16_t*>(bytes.data());
        for (int64_t t = 0; t < T; ++t) {
          in[t] = tok[t];
          tg[t] = tok[t + 1];
        }
      }
      b.ids.push_back(id);
      ++filled;
    } catch (const BadImage& e) {
      if (o_.strict)
        throw Error(key + ": sample " + std::to_string(id) + ": " + e.what() + " (--strict)");
      ++b.timing.undecodable;
      ++b.timing.bad;
      b.bad.push_back({id, sample_name(id), e.what()});
    }
    b.timing.decode_ms += ms_since(t0);
  }
  if (filled < n) {
    b.input = b.input.narrow(0, 0, filled);
    b.target = b.target.narrow(0, 0, filled);
  }
  return b;
}

}  // namespace dtune::data
