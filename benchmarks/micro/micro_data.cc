// Micro-benchmarks: the data pipeline's hot paths. Indexing a WebDataset shard (tar scan and
// grouping) and the dataset.json manifest; JPEG decode and the training augmentation (random-
// resized crop + flip + normalise to 224x224) per source image size; decode of a box per crop
// fraction, whole (full), region of interest (roi) and DCT-scaled (fast), with the coefficient
// bytes each inverse-transforms; and the loader's whole per-image path in each decode mode.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "data/formats/dataset.h"
#include "data/formats/tar.h"
#include "data/image/jpeg.h"
#include "data/image/jpeg_crop.h"
#include "data/image/synthetic.h"
#include "data/image/transform.h"

namespace {

namespace dd = dtune::data;

// A shard of `samples` (jpg, cls) pairs of 20 KB each, built in memory.
std::string shard(int samples) {
  dd::TarWriter w;
  const std::string jpg(20000, 'x');
  for (int i = 0; i < samples; ++i) {
    const std::string key = std::to_string(100000 + i);
    w.add(key + ".jpg", jpg);
    w.add(key + ".cls", std::to_string(i % 10));
  }
  return w.finish();
}

void BM_TarIndex(benchmark::State& state) {
  const std::string bytes = shard(static_cast<int>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(dd::group_webdataset(dd::scan_tar(bytes)));
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes.size()));
}
BENCHMARK(BM_TarIndex)->Arg(64)->Arg(1024);

void BM_DatasetJson(benchmark::State& state) {
  // A manifest of 100 shards of 1,000 samples, written and parsed back.
  dd::Dataset d;
  d.kind = dd::DatasetKind::kImages;
  d.format = "webdataset";
  d.num_classes = 10;
  for (int s = 0; s < 100; ++s)
    d.objects.push_back({"shard-" + std::to_string(s) + ".tar", 20000000});
  for (uint32_t s = 0; s < 100; ++s)
    for (int i = 0; i < 1000; ++i) d.samples.push_back({s, 1024LL * i, 20000, i % 10});
  for (auto _ : state) {
    const std::string text = dd::manifest_to_json(d);
    benchmark::DoNotOptimize(dd::manifest_from_json(text, "bench"));
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(d.samples.size()));
}
BENCHMARK(BM_DatasetJson)->Unit(benchmark::kMillisecond);

std::string jpeg_of_side(int side) {
  dd::JpegCodec codec;
  return codec.encode(dd::synthetic_image(side, side * 3 / 4, 3, 10, 7), 90);
}

void BM_JpegDecode(benchmark::State& state) {
  const std::string jpg = jpeg_of_side(static_cast<int>(state.range(0)));
  dd::JpegCodec codec;
  for (auto _ : state) benchmark::DoNotOptimize(codec.decode(jpg.data(), jpg.size()));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_JpegDecode)->Arg(160)->Arg(500)->Arg(1024);

void BM_Augment224(benchmark::State& state) {
  dd::JpegCodec codec;
  const std::string jpg = jpeg_of_side(static_cast<int>(state.range(0)));
  const dd::RgbImage img = codec.decode(jpg.data(), jpg.size());
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  auto draw = [&] { return u(rng); };
  std::vector<float> out(3 * 224 * 224);
  for (auto _ : state) {
    const dd::CropBox box = dd::random_resized_crop_box(img.width, img.height, draw);
    dd::crop_resize_normalize(img, box, 224, 224, draw() < 0.5, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Augment224)->Arg(160)->Arg(500)->Arg(1024);

// The decode modes of dtune's loader (--decode full|roi, --fast-decode).
enum Mode : int64_t { kFull = 0, kRoi = 1, kFast = 2 };
const char* mode_name(int64_t m) { return m == kFull ? "full" : m == kRoi ? "roi" : "roi+fast"; }

// Decode of a centred box holding area% of the image (aspect kept), resized to 224 afterwards (so
// fast may scale when the box is at least 448 on both sides). Counters: the coefficient bytes
// inverse-transformed per image, and their share of a full decode's.
void BM_DecodeCrop(benchmark::State& state) {
  const int side = static_cast<int>(state.range(0));
  const double fraction = static_cast<double>(state.range(1)) / 100.0;
  const int64_t mode = state.range(2);
  const std::string jpg = jpeg_of_side(side);
  dd::JpegCodec codec;
  dd::JpegCropDecoder roi;
  const auto [w, h] = codec.dimensions(jpg.data(), jpg.size());
  dd::CropBox box;
  box.width = std::max(1, static_cast<int>(w * std::sqrt(fraction)));
  box.height = std::max(1, static_cast<int>(h * std::sqrt(fraction)));
  box.left = (w - box.width) / 2;
  box.top = (h - box.height) / 2;
  const auto choose = [box](int, int) { return box; };
  double coef = 0, full_coef = 0;
  for (auto _ : state) {
    if (mode == kFull) {
      benchmark::DoNotOptimize(codec.decode(jpg.data(), jpg.size()));
    } else {
      const dd::CroppedImage c =
          roi.decode(jpg.data(), jpg.size(), choose, 224, 224, mode == kFast);
      coef = static_cast<double>(c.coef_bytes);
      full_coef = static_cast<double>(c.full_coef_bytes);
      benchmark::DoNotOptimize(c.image.pixels.data());
    }
  }
  if (mode == kFull) {
    const dd::CroppedImage c = roi.decode(jpg.data(), jpg.size(), choose);
    coef = full_coef = static_cast<double>(c.full_coef_bytes);
  }
  state.counters["coef_KB"] = coef / 1e3;
  state.counters["coef_share"] = full_coef > 0 ? coef / full_coef : 0.0;
  state.SetLabel(mode_name(mode));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DecodeCrop)
    ->ArgsProduct({{500, 1024}, {10, 25, 50, 100}, {kFull, kRoi, kFast}})
    ->ArgNames({"side", "area%", "mode"});

// The floor under any exact region decode: a 16x16 box in the bottom-right corner makes the decoder
// entropy-decode every row (Huffman decoding is sequential; libjpeg-turbo skips rows above a box by
// decoding their coefficients without the inverse DCT), and inverse-transform almost nothing. Its
// time over a full decode's (BM_DecodeCrop area% 100 mode 0) is entropy decoding's share, the part
// a region decode cannot save above the box's last row.
void BM_EntropyFloor(benchmark::State& state) {
  const int side = static_cast<int>(state.range(0));
  const std::string jpg = jpeg_of_side(side);
  dd::JpegCodec codec;
  dd::JpegCropDecoder roi;
  const auto [w, h] = codec.dimensions(jpg.data(), jpg.size());
  const dd::CropBox box{h - 16, w - 16, 16, 16};
  dd::CroppedImage c;
  for (auto _ : state) {
    roi.decode_into(c, jpg.data(), jpg.size(), [box](int, int) { return box; });
    benchmark::DoNotOptimize(c.image.pixels.data());
  }
  state.counters["coef_share"] =
      c.full_coef_bytes > 0 ? static_cast<double>(c.coef_bytes) / c.full_coef_bytes : 0.0;
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EntropyFloor)->Arg(500)->Arg(1024)->ArgNames({"side"});

// The loader's per-image path: RandomResizedCrop's box from the header's size, decode (whole, or
// the region), crop + resize to 224 + flip + normalise, for a stream of seeds.
void BM_LoaderImage224(benchmark::State& state) {
  const int side = static_cast<int>(state.range(0));
  const int64_t mode = state.range(1);
  const std::string jpg = jpeg_of_side(side);
  dd::JpegCodec codec;
  dd::JpegCropDecoder roi;
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  auto draw = [&] { return u(rng); };
  std::vector<float> out(3 * 224 * 224);
  dd::CroppedImage c;  // reused, as the loader's worker reuses its buffer
  for (auto _ : state) {
    if (mode == kFull) {
      codec.decode_into(c.image, jpg.data(), jpg.size());
      const dd::CropBox box = dd::random_resized_crop_box(c.image.width, c.image.height, draw);
      dd::crop_resize_normalize(c.image, box, 224, 224, draw() < 0.5, out.data());
    } else {
      roi.decode_into(
          c, jpg.data(), jpg.size(),
          [&](int w, int h) { return dd::random_resized_crop_box(w, h, draw); }, 224, 224,
          mode == kFast);
      dd::crop_resize_normalize(c.image, c.box, 224, 224, draw() < 0.5, out.data());
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(mode_name(mode));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_LoaderImage224)
    ->ArgsProduct({{500, 1024}, {kFull, kRoi, kFast}})
    ->ArgNames({"side", "mode"});

}  // namespace
