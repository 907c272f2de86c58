// Writing datasets (see make_dataset.h).
#include "benchmarks/data/make_dataset.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "benchmarks/data/memory_fit.h"
#include "core/error.h"
#include "data/formats/dataset.h"
#include "data/formats/tar.h"
#include "data/formats/token_shard.h"
#include "data/image/jpeg.h"
#include "data/image/synthetic.h"
#include "data/loader/sampler.h"

namespace dtune::data {
std::string numbered(const std::string& stem, int64_t i, const std::string& ext) {
  char b[64];
  std::snprintf(b, sizeof b, "%s-%06lld%s", stem.c_str(), static_cast<long long>(i), ext.c_str());
  return b;
}

std::unique_ptr<Storage> open_storage_for_writing(const std::string& url) {
  if (url.rfind("s3://", 0) != 0) {
    std::error_code ec;
    std::filesystem::create_directories(url.rfind("file://", 0) == 0 ? url.substr(7) : url, ec);
    if (ec) throw UsageError("--out " + url + ": cannot create it (" + ec.message() + ")");
  }
  try {
    return open_storage(url);
  } catch (const NotFound& e) {
    throw UsageError("--out " + url + ": " + e.what());
  }
}

namespace {

// libjpeg's limit on either side (JPEG_MAX_DIMENSION in jmorecfg.h, "a tad under 64K to prevent
// overflows"); libjpeg-turbo refuses to encode beyond it.
constexpr int64_t kJpegMaxSide = 65500;

// The largest image (sides scaled by up to 1 + --size-jitter) must be encodable, and one image's
// working set must fit: its RGB pixels (3 bytes/pixel), TurboJPEG's output buffer (tjBufSize: 3
// bytes/pixel at 4:2:0, plus 2 KiB) and our copy of the JPEG (at most as large): 9 bytes/pixel.
// Plus the manifest, about 256 bytes per sample as JSON in memory.
void check_image_sizes_fit(const MakeImagesOptions& o) {
  const double w = o.width * (1 + o.size_jitter), h = o.height * (1 + o.size_jitter);
  if (w > kJpegMaxSide || h > kJpegMaxSide)
    throw UsageError("make images: --width " + std::to_string(o.width) + " --height " +
                     std::to_string(o.height) +
                     (o.size_jitter > 0 ? " with --size-jitter " + std::to_string(o.size_jitter)
                                        : std::string()) +
                     " makes images up to " + std::to_string(static_cast<int64_t>(w)) + "x" +
                     std::to_string(static_cast<int64_t>(h)) + ", beyond JPEG's limit of " +
                     std::to_string(kJpegMaxSide) +
                     " pixels per side (libjpeg's JPEG_MAX_DIMENSION): lower them");
  require_memory(9.0 * w * h + 256.0 * static_cast<double>(o.samples),
                 "make images: --width " + std::to_string(o.width) + " --height " +
                     std::to_string(o.height) + " --samples " + std::to_string(o.samples),
                 "lower --width/--height (or --samples)");
}

}  // namespace

std::string make_images(const MakeImagesOptions& o) {
  if (o.samples < 1 || o.classes < 1 || o.width < 8 || o.height < 8 || o.shard_samples < 1)
    throw UsageError(
        "make images: --samples, --classes, --shard-samples must be positive and sizes at least 8");
  if (o.quality < 1 || o.quality > 100) throw UsageError("make images: --quality must be 1..100");
  if (o.size_jitter < 0 || o.size_jitter >= 1)
    throw UsageError("make images: --size-jitter must be in [0, 1)");
  if (o.layout != "webdataset" && o.layout != "imagefolder")
    throw UsageError("make images: --layout must be webdataset or imagefolder");
  check_image_sizes_fit(o);
  std::unique_ptr<Storage> out = open_storage_for_writing(o.out);
  JpegCodec codec;
  Dataset d;
  d.format = o.layout;
  d.num_classes = o.classes;
  const auto t0 = std::chrono::steady_clock::now();
  int64_t bytes = 0;
  TarWriter tar;
  int64_t in_shard = 0, shard = 0;
  auto flush_shard = [&] {
    if (in_shard == 0) return;
    const std::string key = numbered("shard", shard++, ".tar");
    std::string data = tar.finish();
    bytes += static_cast<int64_t>(data.size());
    d.objects.push_back({key, static_cast<int64_t>(data.size())});
    out->write(key, data);
    std::printf("# wrote %s (%lld images, %.1f MB)\n", key.c_str(),
                static_cast<long long>(in_shard), data.size() / 1e6);
    tar = TarWriter();
    in_shard = 0;
  };
  for (int64_t i = 0; i < o.samples; ++i) {
    const int label = static_cast<int>(i % o.classes);
    std::mt19937_64 rng(mix_seed(o.seed, 0x5157, static_cast<uint64_t>(i)));
    auto jitter = [&] {
      return 1.0 + o.size_jitter * (2.0 * static_cast<double>(rng() >> 11) * 0x1.0p-53 - 1.0);
    };
    const int w = std::max(8, static_cast<int>(o.width * jitter()));
    const int h = std::max(8, static_cast<int>(o.height * jitter()));
    const std::string jpg = codec.encode(
        synthetic_image(w, h, label, o.classes, mix_seed(o.seed, static_cast<uint64_t>(i))),
        o.quality);
    if (o.layout == "imagefolder") {
      const std::string key = numbered("class", label, "") + "/" + numbered("img", i, ".jpg");
      out->write(key, jpg);
      d.samples.push_back(
          {static_cast<uint32_t>(d.objects.size()), 0, static_cast<int64_t>(jpg.size()), label});
      d.objects.push_back({key, static_cast<int64_t>(jpg.size())});
      bytes += static_cast<int64_t>(jpg.size());
      continue;
    }
    const std::string stem = numbered("sample", i, "");
    const int64_t offset = static_cast<int64_t>(tar.size()) + 512;  // after this member's header
    tar.add(stem + ".jpg", jpg);
    tar.add(stem + ".cls", std::to_string(label));
    d.samples.push_back(
        {static_cast<uint32_t>(d.objects.size()), offset, static_cast<int64_t>(jpg.size()), label});
    if (++in_shard == o.shard_samples) flush_shard();
  }
  flush_shard();
  out->write(kManifestKey, manifest_to_json(d));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::ostringstream msg;
  msg << d.describe() << ", " << bytes / 1e6 << " MB (mean "
      << bytes / 1e3 / static_cast<double>(o.samples) << " KB/image), written in " << s << " s to "
      << out->describe();
  return msg.str();
}

std::string make_tokens(const MakeTokensOptions& o) {
  if (o.inputs.empty()) throw UsageError("make tokens: give text files with --input");
  if (o.shard_tokens < 2 || o.repeat < 1)
    throw UsageError("make tokens: --shard-tokens >= 2 and --repeat >= 1");
  std::string text;
  for (const auto& path : o.inputs) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UsageError("make tokens: --input " + path + " cannot be read");
    std::ostringstream ss;
    ss << in.rdbuf();
    text += ss.str();
  }
  if (text.empty()) throw UsageError("make tokens: the --input files are empty");
  // All tokens are held at once (2 bytes each), with one repeat's worth in flight and one shard
  // encoded (2 bytes per token + header).
  const double tokens = static_cast<double>(text.size()) * o.repeat;
  require_memory(2.0 * tokens + 2.0 * static_cast<double>(text.size()) +
                     2.0 * std::min<double>(tokens, static_cast<double>(o.shard_tokens)) +
                     kTokenHeaderBytes,
                 "make tokens: " + std::to_string(text.size()) + " bytes of --input x --repeat " +
                     std::to_string(o.repeat),
                 "lower --repeat");
  std::unique_ptr<Storage> out = open_storage_for_writing(o.out);
  Dataset d;
  d.format = "tokens";
  d.kind = DatasetKind::kTokens;
  d.vocab = 256;
  std::vector<uint16_t> all;
  all.reserve(text.size() * static_cast<size_t>(o.repeat));
  for (int r = 0; r < o.repeat; ++r) {
    const auto t = byte_tokens(text);
    all.insert(all.end(), t.begin(), t.end());
  }
  for (int64_t start = 0, shard = 0; start < static_cast<int64_t>(all.size());
       start += o.shard_tokens, ++shard) {
    const int64_t end = std::min<int64_t>(start + o.shard_tokens, static_cast<int64_t>(all.size()));
    const std::string key = numbered("tokens", shard, ".bin");
    const std::string data =
        encode_token_shard(std::vector<uint16_t>(all.begin() + start, all.begin() + end));
    out->write(key, data);
    d.objects.push_back({key, static_cast<int64_t>(data.size())});
    std::printf("# wrote %s (%lld tokens)\n", key.c_str(), static_cast<long long>(end - start));
  }
  d.tokens = static_cast<int64_t>(all.size());
  out->write(kManifestKey, manifest_to_json(d));
  return d.describe() + " (byte-level, vocabulary 256) in " + out->describe();
}

std::string index_data(const std::string& url) {
  std::unique_ptr<Storage> s;
  Dataset d;
  try {
    s = open_storage(url);
    d = index_dataset(*s);
  } catch (const UsageError& e) {  // also NotFound: a missing directory or bucket
    throw UsageError(url + ": " + e.what());
  }
  s->write(kManifestKey, manifest_to_json(d));
  std::string out = d.describe() + "; wrote " + s->describe() + "/" + kManifestKey;
  // The files the index left out, counted and named (the loader reads JPEGs only: a PNG in a class
  // folder is not silently a missing sample).
  std::set<std::string> used;
  for (const auto& obj : d.objects) used.insert(obj.key);
  std::vector<std::string> left;
  for (const auto& obj : s->list())
    if (!used.contains(obj.key) && obj.key != kManifestKey && obj.key != "classes.txt")
      left.push_back(obj.key);
  if (!left.empty()) {
    out += "\n# left out " + std::to_string(left.size()) +
           " files (dtune-data convert transcodes PNGs and names why it skips the others):";
    for (const auto& k : left) out += "\n#   " + k;
  }
  return out;
}

}  // namespace dtune::data
