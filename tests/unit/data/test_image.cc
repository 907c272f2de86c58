// Unit tests of data/image: JPEG round trip and error handling, torchvision's RandomResizedCrop
// parameters under a scripted uniform sequence, properties of the Pillow-style bilinear resample
// (constant stays constant, identity is exact, a hand-computed 2x reduction, flip, normalisation)
// and the synthetic images' determinism and class structure. The comparison against Pillow and
// torchvision themselves is tests/data/test_image_reference.py.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "data/image/jpeg.h"
#include "data/image/synthetic.h"
#include "data/image/transform.h"

namespace dtune::data {
namespace {

RgbImage smooth_image(int width, int height) {
  RgbImage img{width, height, std::vector<uint8_t>(static_cast<size_t>(width) * height * 3)};
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      uint8_t* p = &img.pixels[(static_cast<size_t>(y) * width + x) * 3];
      p[0] = static_cast<uint8_t>(128 + 100 * std::sin(x * 0.03));
      p[1] = static_cast<uint8_t>(128 + 100 * std::cos(y * 0.025));
      p[2] = static_cast<uint8_t>((x + y) * 255 / (width + height));
    }
  return img;
}

RgbImage constant_image(int width, int height, uint8_t r, uint8_t g, uint8_t b) {
  RgbImage img{width, height, std::vector<uint8_t>(static_cast<size_t>(width) * height * 3)};
  for (size_t i = 0; i < img.pixels.size(); i += 3) {
    img.pixels[i] = r;
    img.pixels[i + 1] = g;
    img.pixels[i + 2] = b;
  }
  return img;
}

// A uniform source that replays a script and counts how many numbers were drawn.
struct Scripted {
  std::vector<double> values;
  size_t next = 0;
  double operator()() { return values.at(next++); }
};

float normalised(int level, int channel) {
  return (static_cast<float>(level) / 255.0f - kImagenetMean[channel]) / kImagenetStd[channel];
}

TEST(Jpeg, RoundTripKeepsSmoothImage) {
  JpegCodec codec;
  const RgbImage src = smooth_image(333, 217);
  const std::string jpeg = codec.encode(src, 95);
  EXPECT_EQ(codec.dimensions(jpeg.data(), jpeg.size()), std::make_pair(333, 217));
  const RgbImage back = codec.decode(jpeg.data(), jpeg.size());
  ASSERT_EQ(back.width, 333);
  ASSERT_EQ(back.height, 217);
  double mse = 0;
  for (size_t i = 0; i < src.pixels.size(); ++i) {
    const double d = static_cast<double>(src.pixels[i]) - back.pixels[i];
    mse += d * d;
  }
  mse /= static_cast<double>(src.pixels.size());
  const double psnr_db = 10 * std::log10(255.0 * 255.0 / mse);  // PSNR = 10 log10(MAX^2 / MSE)
  EXPECT_GT(psnr_db, 35.0);
}

TEST(Jpeg, BadBuffersThrowBadImage) {
  JpegCodec codec;
  const std::string jpeg = codec.encode(smooth_image(64, 48), 90);
  const std::string truncated = jpeg.substr(0, jpeg.size() / 2);
  EXPECT_THROW(codec.decode(truncated.data(), truncated.size()), BadImage);
  std::string garbage(4000, '\0');
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>(i * 7919 % 251);
  EXPECT_THROW(codec.decode(garbage.data(), garbage.size()), BadImage);
  EXPECT_THROW(codec.dimensions(garbage.data(), garbage.size()), BadImage);
  EXPECT_THROW(codec.decode(nullptr, 0), BadImage);
  EXPECT_THROW(codec.decode(jpeg.data(), 0), BadImage);
  // A stream whose entropy-coded data is cut off before the end marker: libjpeg only warns.
  const std::string no_tail = jpeg.substr(0, jpeg.size() - 40);
  EXPECT_THROW(codec.decode(no_tail.data(), no_tail.size()), BadImage);
  // The codec is still usable after errors.
  EXPECT_EQ(codec.decode(jpeg.data(), jpeg.size()).width, 64);
}

TEST(Jpeg, EncodeRejectsBadArguments) {
  JpegCodec codec;
  EXPECT_THROW(codec.encode(RgbImage{}, 90), UsageError);
  EXPECT_THROW(codec.encode(smooth_image(8, 8), 0), UsageError);
}

TEST(TransformRandomResizedCrop, FirstTryFits) {
  // 500x375, area fraction 0.08 + 0.5 * 0.92 = 0.54 -> 101250 px, log-ratio midpoint -> 1:1,
  // side round(sqrt(101250)) = 318; top floor(0.25 * 58) = 14, left floor(0.75 * 183) = 137.
  Scripted u{{0.5, 0.5, 0.25, 0.75}};
  const CropBox box = random_resized_crop_box(500, 375, u);
  EXPECT_EQ(box.height, 318);
  EXPECT_EQ(box.width, 318);
  EXPECT_EQ(box.top, 14);
  EXPECT_EQ(box.left, 137);
  EXPECT_EQ(u.next, 4u);
}

TEST(TransformRandomResizedCrop, SecondTryAfterMiss) {
  // 100x400: the first try asks for ~99% of the area at ratio ~4/3 (w = 229 > 100) and is
  // rejected; the second asks for 8% (3200 px) at 3/4: w = round(sqrt(2400)) = 49,
  // h = round(sqrt(4266.7)) = 65; top floor(0.5 * 336) = 168, left floor(0.999 * 52) = 51.
  Scripted u{{0.99, 0.99, 0.0, 0.0, 0.5, 0.999}};
  const CropBox box = random_resized_crop_box(100, 400, u);
  EXPECT_EQ(box.width, 49);
  EXPECT_EQ(box.height, 65);
  EXPECT_EQ(box.top, 168);
  EXPECT_EQ(box.left, 51);
  EXPECT_EQ(u.next, 6u);
}

TEST(TransformRandomResizedCrop, FallbackIsCentralCropWithClampedRatio) {
  // Ten misses (20 draws), then the central crop: a tall 100x400 image clamps to ratio 3/4
  // (h = round(100 / 0.75) = 133), a wide 400x100 one to 4/3 (w = 133).
  Scripted tall{std::vector<double>(20, 0.99)};
  const CropBox t = random_resized_crop_box(100, 400, tall);
  EXPECT_EQ(tall.next, 20u);
  EXPECT_EQ(t.width, 100);
  EXPECT_EQ(t.height, 133);
  EXPECT_EQ(t.top, (400 - 133) / 2);
  EXPECT_EQ(t.left, 0);
  Scripted wide;  // 99% of the area at ratio 3/4: h = round(sqrt(39632 / 0.75)) = 230 > 100
  for (int i = 0; i < 10; ++i) wide.values.insert(wide.values.end(), {0.99, 0.0});
  const CropBox w = random_resized_crop_box(400, 100, wide);
  EXPECT_EQ(w.height, 100);
  EXPECT_EQ(w.width, 133);
  EXPECT_EQ(w.top, 0);
  EXPECT_EQ(w.left, (400 - 133) / 2);
}

TEST(TransformRandomResizedCrop, FallbackWholeImageWhenRatioInRange) {
  // Scale range above 1 never fits; a 4:3 image is within the ratio range, so the whole image.
  Scripted u{std::vector<double>(20, 0.5)};
  const CropBox box = random_resized_crop_box(400, 300, u, 2.0, 3.0);
  EXPECT_EQ(box.top, 0);
  EXPECT_EQ(box.left, 0);
  EXPECT_EQ(box.height, 300);
  EXPECT_EQ(box.width, 400);
}

TEST(Transform, ConstantImageStaysConstant) {
  const RgbImage src = constant_image(61, 47, 10, 200, 77);
  const int sizes[][2] = {{224, 224}, {7, 3}, {47, 200}, {13, 61}};
  for (const auto& s : sizes) {
    std::vector<float> out(3 * s[0] * s[1]);
    crop_resize_normalize(src, CropBox{3, 5, 40, 50}, s[0], s[1], false, out.data());
    for (int i = 0; i < s[0] * s[1]; ++i) {
      ASSERT_EQ(out[i], normalised(10, 0));
      ASSERT_EQ(out[s[0] * s[1] + i], normalised(200, 1));
      ASSERT_EQ(out[2 * s[0] * s[1] + i], normalised(77, 2));
    }
  }
}

TEST(Transform, IdentityResizeReturnsSourceExactly) {
  const RgbImage src = smooth_image(37, 29);
  std::vector<float> out(3 * 29 * 37);
  crop_resize_normalize(src, CropBox{0, 0, 29, 37}, 29, 37, false, out.data());
  for (int y = 0; y < 29; ++y)
    for (int x = 0; x < 37; ++x)
      for (int c = 0; c < 3; ++c)
        ASSERT_EQ(out[(c * 29 + y) * 37 + x], normalised(src.pixels[(y * 37 + x) * 3 + c], c));
  // A box of the output's size is an exact crop.
  std::vector<float> crop(3 * 10 * 12);
  crop_resize_normalize(src, CropBox{4, 6, 10, 12}, 10, 12, false, crop.data());
  for (int y = 0; y < 10; ++y)
    for (int x = 0; x < 12; ++x)
      ASSERT_EQ(crop[y * 12 + x], normalised(src.pixels[((y + 4) * 37 + x + 6) * 3], 0));
}

TEST(Transform, HandComputedTwoTimesReduction) {
  // A 4x1 row [0, 70, 140, 210] to 2x1: scale 2 widens the triangle to support 2; output pixel 0
  // (centre 1.0) weighs inputs 0,1,2 by 3/7, 3/7, 1/7 -> 50; pixel 1 weighs 1,2,3 by 1/7, 3/7, 3/7
  // -> 160. Mean 0 and std 1 leave level / 255.
  RgbImage src{4, 1, std::vector<uint8_t>(12)};
  const uint8_t row[4] = {0, 70, 140, 210};
  for (int i = 0; i < 12; ++i) src.pixels[i] = row[i / 3];
  std::vector<float> out(3 * 2);
  crop_resize_normalize(src, CropBox{0, 0, 1, 4}, 1, 2, false, out.data(), {0, 0, 0}, {1, 1, 1});
  EXPECT_EQ(out[0], 50.0f / 255.0f);
  EXPECT_EQ(out[1], 160.0f / 255.0f);
}

TEST(Transform, FlipMirrorsColumns) {
  const RgbImage src = smooth_image(300, 200);
  const CropBox box{20, 30, 150, 170};
  std::vector<float> plain(3 * 64 * 80), flipped(3 * 64 * 80);
  crop_resize_normalize(src, box, 64, 80, false, plain.data());
  crop_resize_normalize(src, box, 64, 80, true, flipped.data());
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 64; ++y)
      for (int x = 0; x < 80; ++x)
        ASSERT_EQ(flipped[(c * 64 + y) * 80 + x], plain[(c * 64 + y) * 80 + 79 - x]);
}

// Every level of every channel through the normalising step (the identity resize hands the
// source pixels straight to it), at widths that exercise the 8-pixel vector loop and its scalar
// tail, flipped and not: each float equals ToTensor + Normalize's float32 arithmetic exactly.
TEST(Transform, NormalisationIsExactForEveryLevelWidthAndFlip) {
  for (int width : {1, 7, 8, 9, 23, 259}) {
    const int height = 3;
    RgbImage src{width, height, std::vector<uint8_t>(static_cast<size_t>(width) * height * 3)};
    for (int y = 0; y < height; ++y)
      for (int x = 0; x < width; ++x)
        for (int c = 0; c < 3; ++c)
          src.pixels[(y * width + x) * 3 + c] =
              static_cast<uint8_t>((x * 7 + y * 31 + c * 101) % 256);
    for (bool flip : {false, true}) {
      std::vector<float> out(3 * height * width);
      crop_resize_normalize(src, CropBox{0, 0, height, width}, height, width, flip, out.data());
      for (int c = 0; c < 3; ++c)
        for (int y = 0; y < height; ++y)
          for (int x = 0; x < width; ++x) {
            const int from = flip ? width - 1 - x : x;
            ASSERT_EQ(out[(c * height + y) * width + x],
                      normalised(src.pixels[(y * width + from) * 3 + c], c))
                << "width " << width << " flip " << flip << " channel " << c << " x " << x;
          }
    }
  }
}

TEST(Transform, NormalisationValues) {
  const RgbImage black = constant_image(4, 4, 0, 0, 0), white = constant_image(4, 4, 255, 255, 255);
  std::vector<float> out(3 * 4 * 4);
  crop_resize_normalize(black, CropBox{0, 0, 4, 4}, 4, 4, false, out.data());
  EXPECT_NEAR(out[0], -0.485f / 0.229f, 1e-6);
  EXPECT_NEAR(out[16], -0.456f / 0.224f, 1e-6);
  EXPECT_NEAR(out[32], -0.406f / 0.225f, 1e-6);
  crop_resize_normalize(white, CropBox{0, 0, 4, 4}, 4, 4, false, out.data());
  EXPECT_NEAR(out[0], (1 - 0.485f) / 0.229f, 1e-6);
  EXPECT_NEAR(out[47], (1 - 0.406f) / 0.225f, 1e-6);
}

TEST(Transform, RejectsBoxOutsideImage) {
  const RgbImage src = smooth_image(20, 10);
  std::vector<float> out(3 * 4 * 4);
  EXPECT_THROW(crop_resize_normalize(src, CropBox{0, 0, 11, 5}, 4, 4, false, out.data()),
               UsageError);
  EXPECT_THROW(crop_resize_normalize(src, CropBox{-1, 0, 5, 5}, 4, 4, false, out.data()),
               UsageError);
  EXPECT_THROW(crop_resize_normalize(src, CropBox{0, 0, 5, 5}, 0, 4, false, out.data()),
               UsageError);
}

TEST(Transform, CenterCropBox) {
  // 500x375 -> Resize(256) gives 341x256; CenterCrop(224) starts at row round(16) = 16 and
  // column round(58.5) = 58 (half to even). In source pixels (x 500/341, y 375/256):
  // top round(23.44) = 23, height round(328.1) = 328, left round(85.04) = 85, width
  // round(328.4) = 328.
  const CropBox box = center_crop_box(500, 375, 256, 224);
  EXPECT_EQ(box.top, 23);
  EXPECT_EQ(box.height, 328);
  EXPECT_EQ(box.left, 85);
  EXPECT_EQ(box.width, 328);
  const CropBox square = center_crop_box(256, 256, 256, 224);
  EXPECT_EQ(square.top, 16);
  EXPECT_EQ(square.left, 16);
  EXPECT_EQ(square.height, 224);
  EXPECT_THROW(center_crop_box(100, 100, 200, 224), UsageError);
}

TEST(Synthetic, DeterministicPerSeedAndLabel) {
  const RgbImage a = synthetic_image(96, 64, 3, 10, 42);
  const RgbImage b = synthetic_image(96, 64, 3, 10, 42);
  const RgbImage c = synthetic_image(96, 64, 3, 10, 43);
  EXPECT_EQ(a.width, 96);
  EXPECT_EQ(a.height, 64);
  EXPECT_EQ(a.pixels, b.pixels);
  EXPECT_NE(a.pixels, c.pixels);
  EXPECT_THROW(synthetic_image(96, 64, 10, 10, 1), UsageError);
  EXPECT_THROW(synthetic_image(0, 64, 1, 10, 1), UsageError);
}

TEST(Synthetic, ClassesDifferInMeanColour) {
  // The class picks the hue: mean colours of two classes, averaged over seeds, lie far apart
  // compared with the spread between seeds of one class.
  auto mean_rgb = [](int label, uint64_t seed) {
    const RgbImage img = synthetic_image(64, 64, label, 4, seed);
    std::array<double, 3> m{};
    for (size_t i = 0; i < img.pixels.size(); ++i) m[i % 3] += img.pixels[i];
    for (double& v : m) v /= 64.0 * 64.0;
    return m;
  };
  auto dist = [](const std::array<double, 3>& p, const std::array<double, 3>& q) {
    return std::sqrt((p[0] - q[0]) * (p[0] - q[0]) + (p[1] - q[1]) * (p[1] - q[1]) +
                     (p[2] - q[2]) * (p[2] - q[2]));
  };
  for (int a = 0; a < 4; ++a)
    for (int b = a + 1; b < 4; ++b) {
      const double between = dist(mean_rgb(a, 1), mean_rgb(b, 1));
      const double within = dist(mean_rgb(a, 1), mean_rgb(a, 2));
      EXPECT_GT(between, 2 * within) << "classes " << a << " and " << b;
    }
}

}  // namespace
}  // namespace dtune::data
