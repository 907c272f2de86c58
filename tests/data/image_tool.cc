// dtune_image_tool: a small CLI over data/image for tests/data/test_image_reference.py, which
// checks it against Pillow and torchvision, and for the speed figure of the loader's per-image
// work:
//   decode IN.jpg OUT.rgb                      raw (H, W, 3) uint8; prints "W H"
//   decode IN.jpg OUT.rgb --region T L H W [--fast H W]
//                                              the region decoder (jpeg_crop.h): raw (H, W, 3) of
//                                              the decoded region; prints "W H top left h w d
//                                              coef full_coef" (the box inside it, d the DCT scale
//                                              denominator, the coefficient bytes inverse-
//                                              transformed and those of a whole decode)
//   transform IN.jpg OUT.f32 --box T L H W --size H W [--flip] [--decode full|roi] [--fast]
//                                              raw float32 (3, H, W)
//   synth OUT.jpg --width --height --label --classes --seed [--quality]
//   bench [--images N] [--seconds S]           decode + random-resized-crop + flip + normalise
// Errors: one line "dtune_image_tool: error: ..." on stderr; exit 2 for bad input or a bad image.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/image/jpeg.h"
#include "data/image/jpeg_crop.h"
#include "data/image/synthetic.h"
#include "data/image/transform.h"

namespace {

using dtune::UsageError;
using namespace dtune::data;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_file(const std::string& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) throw UsageError("cannot write " + path);
}

int run_bench(int images, double seconds) {
  // ~500x375 quality-90 JPEGs (ImageNet's typical size), mixed orientations, 10 classes.
  JpegCodec codec;
  std::vector<std::string> jpegs;
  for (int i = 0; i < images; ++i) {
    const bool portrait = i % 4 == 3;
    jpegs.push_back(codec.encode(
        synthetic_image(portrait ? 375 : 500, portrait ? 500 : 375, i % 10, 10, i), 90));
  }
  size_t total_bytes = 0;
  for (const auto& j : jpegs) total_bytes += j.size();
  std::mt19937_64 gen(1234);
  std::uniform_real_distribution<double> dist(0.0, 1.0);
  auto uniform = [&] { return dist(gen); };
  std::vector<float> out(3 * 224 * 224);
  double checksum = 0;
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  long done = 0;
  double elapsed_s = 0, decode_s = 0;
  do {
    const std::string& j = jpegs[done % jpegs.size()];
    const auto t0 = Clock::now();
    const RgbImage img = codec.decode(j.data(), j.size());
    decode_s += std::chrono::duration<double>(Clock::now() - t0).count();
    const CropBox box = random_resized_crop_box(img.width, img.height, uniform);
    crop_resize_normalize(img, box, 224, 224, uniform() < 0.5, out.data());
    checksum += out[done % out.size()];
    ++done;
    elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed_s < seconds);
  std::printf("# images %d, mean JPEG %.1f KB, one thread\n", images,
              total_bytes / 1024.0 / images);
  std::printf(
      "images_per_s %.1f  (n %ld, %.2f s; decode %.3f ms/image, crop+resize+normalise "
      "%.3f ms/image; checksum %.3f)\n",
      done / elapsed_s, done, elapsed_s, 1e3 * decode_s / done, 1e3 * (elapsed_s - decode_s) / done,
      checksum);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dtune_image_tool: data/image against Pillow and torchvision (tests only)"};
  app.require_subcommand(1);

  std::string in_path, out_path;
  auto* decode = app.add_subcommand("decode", "decode a JPEG to raw (H, W, 3) uint8");
  decode->add_option("in", in_path, "JPEG file")->required();
  decode->add_option("out", out_path, "raw RGB output")->required();
  std::vector<int> region_v, fast_v;
  decode->add_option("--region", region_v, "decode only around this box: top left height width")
      ->expected(4);
  decode->add_option("--fast", fast_v, "DCT-scale for this output size: height width")->expected(2);

  std::vector<int> box_v, size_v;
  bool flip = false;
  auto* transform = app.add_subcommand(
      "transform", "decode, crop, bilinear resize, flip, normalise: raw float32 (3, H, W)");
  transform->add_option("in", in_path, "JPEG file")->required();
  transform->add_option("out", out_path, "raw float32 output")->required();
  transform->add_option("--box", box_v, "crop box: top left height width (source pixels)")
      ->expected(4)
      ->required();
  transform->add_option("--size", size_v, "output height width")->expected(2)->required();
  transform->add_flag("--flip", flip, "mirror horizontally");
  std::string decode_mode = "full";
  bool fast = false;
  transform->add_option("--decode", decode_mode, "full or roi")
      ->check(CLI::IsMember({"full", "roi"}))
      ->capture_default_str();
  transform->add_flag("--fast", fast, "roi: DCT-scaled where the box allows");

  int width = 224, height = 224, label = 0, classes = 10, quality = 90;
  uint64_t seed = 0;
  auto* synth = app.add_subcommand("synth", "write a synthetic class-structured JPEG");
  synth->add_option("out", out_path, "JPEG output")->required();
  synth->add_option("--width", width, "pixels")->capture_default_str();
  synth->add_option("--height", height, "pixels")->capture_default_str();
  synth->add_option("--label", label, "class")->capture_default_str();
  synth->add_option("--classes", classes, "number of classes")->capture_default_str();
  synth->add_option("--seed", seed, "sample seed")->capture_default_str();
  synth->add_option("--quality", quality, "JPEG quality 1-100")->capture_default_str();

  int images = 64;
  double seconds = 3.0;
  auto* bench = app.add_subcommand("bench", "images/s of the training transform on one thread");
  bench->add_option("--images", images, "distinct synthetic JPEGs cycled")->capture_default_str();
  bench->add_option("--seconds", seconds, "measuring time, s")->capture_default_str();

  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::Success& e) {
      return app.exit(e);
    } catch (const CLI::ParseError& e) {
      throw UsageError(e.what());
    }
    if (decode->parsed() && !region_v.empty()) {
      const std::string jpeg = read_file(in_path);
      JpegCropDecoder roi;
      const CropBox box{region_v[0], region_v[1], region_v[2], region_v[3]};
      const CroppedImage c = roi.decode(
          jpeg.data(), jpeg.size(), [&](int, int) { return box; }, fast_v.empty() ? 0 : fast_v[1],
          fast_v.empty() ? 0 : fast_v[0], !fast_v.empty());
      write_file(out_path, c.image.pixels.data(), c.image.pixels.size());
      std::printf("%d %d %d %d %d %d %d %lld %lld\n", c.image.width, c.image.height, c.box.top,
                  c.box.left, c.box.height, c.box.width, c.scale_denom,
                  static_cast<long long>(c.coef_bytes), static_cast<long long>(c.full_coef_bytes));
    } else if (decode->parsed()) {
      const std::string jpeg = read_file(in_path);
      JpegCodec codec;
      const RgbImage img = codec.decode(jpeg.data(), jpeg.size());
      write_file(out_path, img.pixels.data(), img.pixels.size());
      std::printf("%d %d\n", img.width, img.height);
    } else if (transform->parsed()) {
      const std::string jpeg = read_file(in_path);
      const CropBox box{box_v[0], box_v[1], box_v[2], box_v[3]};
      std::vector<float> out(3 * static_cast<size_t>(size_v[0]) * size_v[1]);
      if (decode_mode == "full") {
        if (fast) throw UsageError("--fast needs --decode roi");
        JpegCodec codec;
        const RgbImage img = codec.decode(jpeg.data(), jpeg.size());
        crop_resize_normalize(img, box, size_v[0], size_v[1], flip, out.data());
      } else {
        JpegCropDecoder roi;
        const CroppedImage c = roi.decode(
            jpeg.data(), jpeg.size(), [&](int, int) { return box; }, size_v[1], size_v[0], fast);
        crop_resize_normalize(c.image, c.box, size_v[0], size_v[1], flip, out.data());
      }
      write_file(out_path, out.data(), out.size() * sizeof(float));
    } else if (synth->parsed()) {
      JpegCodec codec;
      const std::string jpeg =
          codec.encode(synthetic_image(width, height, label, classes, seed), quality);
      write_file(out_path, jpeg.data(), jpeg.size());
      std::printf("%zu\n", jpeg.size());
    } else if (bench->parsed()) {
      if (images <= 0 || seconds <= 0) throw UsageError("--images and --seconds must be > 0");
      return run_bench(images, seconds);
    }
    return 0;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "dtune_image_tool: error: %s\n", e.what());
    return 2;
  } catch (const BadImage& e) {
    std::fprintf(stderr, "dtune_image_tool: error: bad image: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtune_image_tool: error: %s\n", e.what());
    return 1;
  }
}
