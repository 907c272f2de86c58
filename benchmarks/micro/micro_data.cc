// Micro-benchmarks: the data pipeline's hot paths. Indexing a WebDataset shard (tar scan and
// grouping) and the dataset.json manifest; JPEG decode and the training augmentation (random-
// resized crop + flip + normalise to 224x224) per source image size.
#include <benchmark/benchmark.h>

#include <random>
#include <string>

#include "data/formats/dataset.h"
#include "data/formats/tar.h"
#include "data/image/jpeg.h"
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

}  // namespace
