// Region-of-interest decoding (data/image/jpeg_crop.h) equals a full decode inside the box, byte
// for byte, on JPEGs of every common kind: 4:2:0, 4:2:2, 4:4:0, 4:4:4 and grayscale, restart
// markers, progressive scans, sizes that are not a multiple of the iMCU, and boxes touching every
// edge and corner, aligned on the iMCU grid or not. With no margin, the documented exception shows:
// fancy upsampling treats the region's left and right edges as image edges, so pixels on the box's
// edge can differ (the test measures the largest difference); the margin removes it. Also the
// DCT-scaled (fast) path's geometry and the scale rule.
#include <gtest/gtest.h>

// clang-format off
#include <cstdio>
#include <jpeglib.h>
// clang-format on

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "data/image/jpeg.h"
#include "data/image/jpeg_crop.h"
#include "data/image/synthetic.h"

namespace dtune::data {
namespace {

struct Kind {
  std::string name;
  int h_samp = 2, v_samp = 2;  // luma sampling factors (chroma 1x1); ignored for gray
  bool gray = false, progressive = false;
  int restart_rows = 0;  // a restart marker every N MCU rows
};

// libjpeg's compressor with the options TurboJPEG 2.1's API lacks (restart markers, 4:4:0).
std::string encode(const RgbImage& img, const Kind& k, int quality = 90) {
  jpeg_compress_struct c{};
  jpeg_error_mgr err{};
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = static_cast<JDIMENSION>(img.width);
  c.image_height = static_cast<JDIMENSION>(img.height);
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  if (k.gray) jpeg_set_colorspace(&c, JCS_GRAYSCALE);
  jpeg_set_quality(&c, quality, TRUE);
  if (!k.gray) {
    c.comp_info[0].h_samp_factor = k.h_samp;
    c.comp_info[0].v_samp_factor = k.v_samp;
  }
  c.restart_in_rows = k.restart_rows;
  if (k.progressive) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  std::vector<JSAMPLE> row(static_cast<size_t>(img.width) * 3);
  while (c.next_scanline < c.image_height) {
    const uint8_t* src = &img.pixels[static_cast<size_t>(c.next_scanline) * img.width * 3];
    std::copy(src, src + row.size(), row.begin());
    JSAMPROW r = row.data();
    jpeg_write_scanlines(&c, &r, 1);
  }
  jpeg_finish_compress(&c);
  std::string out(reinterpret_cast<const char*>(buf), size);
  jpeg_destroy_compress(&c);
  std::free(buf);
  return out;
}

std::vector<Kind> kinds() {
  return {{"4:2:0"},
          {"4:2:2", 2, 1},
          {"4:4:0", 1, 2},
          {"4:4:4", 1, 1},
          {"grayscale", 1, 1, true},
          {"4:2:0 progressive", 2, 2, false, true},
          {"4:4:4 progressive", 1, 1, false, true},
          {"4:2:0 restart markers", 2, 2, false, false, 1},
          {"4:2:2 restart markers", 2, 1, false, false, 2}};
}

// Boxes in a width x height image: every edge and corner, the whole image, single pixels, boxes
// starting and ending on the 16-pixel grid and one pixel off it, and random ones.
std::vector<CropBox> boxes(int width, int height, uint32_t seed) {
  std::vector<CropBox> out = {
      {0, 0, height, width},              // whole image
      {0, 0, 40, 50},                     // top-left corner
      {0, width - 50, 40, 50},            // top-right corner
      {height - 40, 0, 40, 50},           // bottom-left corner
      {height - 40, width - 50, 40, 50},  // bottom-right corner
      {0, 37, 30, 61},                    // top edge
      {height - 30, 37, 30, 61},          // bottom edge
      {41, 0, 61, 30},                    // left edge
      {41, width - 30, 61, 30},           // right edge
      {0, 0, height, 1},                  // leftmost column
      {0, width - 1, height, 1},          // rightmost column
      {17, 17, 1, 1},                     // a single pixel
      {32, 32, 64, 64},                   // on the iMCU grid
      {31, 31, 66, 66},                   // one pixel outside it
      {33, 33, 62, 62},                   // one pixel inside it
      {16, 48, height - 32, 16},          // one iMCU column
      {height / 2, width / 2, height - height / 2, width - width / 2},
  };
  std::mt19937 rng(seed);
  for (int i = 0; i < 24; ++i) {
    CropBox b;
    b.width = 1 + static_cast<int>(rng() % width);
    b.height = 1 + static_cast<int>(rng() % height);
    b.left = static_cast<int>(rng() % (width - b.width + 1));
    b.top = static_cast<int>(rng() % (height - b.height + 1));
    out.push_back(b);
  }
  return out;
}

// The largest absolute difference between the box of the full decode and the box of the ROI
// decode, and how many of those pixels lie away from the box's left and right edges.
struct Diff {
  int largest = 0;
  int64_t differing = 0, inside = 0;  // inside: not in the box's first or last column
};

Diff compare_box(const RgbImage& full, const CropBox& box, const CroppedImage& roi) {
  EXPECT_EQ(roi.box.width, box.width);
  EXPECT_EQ(roi.box.height, box.height);
  Diff d;
  for (int y = 0; y < box.height; ++y)
    for (int x = 0; x < box.width; ++x)
      for (int c = 0; c < 3; ++c) {
        const int a =
            full.pixels[(static_cast<size_t>(box.top + y) * full.width + box.left + x) * 3 + c];
        const int b = roi.image.pixels[(static_cast<size_t>(roi.box.top + y) * roi.image.width +
                                        roi.box.left + x) *
                                           3 +
                                       c];
        if (a != b) {
          d.largest = std::max(d.largest, std::abs(a - b));
          ++d.differing;
          if (x != 0 && x != box.width - 1) ++d.inside;
        }
      }
  return d;
}

ChooseBox fixed(const CropBox& b) {
  return [b](int, int) { return b; };
}

TEST(JpegCrop, EqualsFullDecodeInsideTheBoxForEveryKindAndEdge) {
  JpegCodec full_codec;
  JpegCropDecoder roi;
  // 333 x 217: neither side a multiple of 16, so the last iMCU row and column are partial.
  const RgbImage src = synthetic_image(333, 217, 3, 10, 42);
  CroppedImage reused;
  for (const Kind& k : kinds()) {
    const std::string jpeg = encode(src, k);
    const RgbImage full = full_codec.decode(jpeg.data(), jpeg.size());
    for (const CropBox& b : boxes(src.width, src.height, 7)) {
      const CroppedImage c = roi.decode(jpeg.data(), jpeg.size(), fixed(b));
      ASSERT_EQ(c.full_width, 333);
      ASSERT_EQ(c.full_height, 217);
      const Diff d = compare_box(full, b, c);
      EXPECT_EQ(d.differing, 0) << k.name << ": box top " << b.top << " left " << b.left << " "
                                << b.height << "x" << b.width << ": largest difference "
                                << d.largest;
      EXPECT_LE(c.coef_bytes, c.full_coef_bytes) << k.name;
      // Into a buffer reused from every earlier (larger and smaller) region: the same region,
      // box and counts; the bytes past the region are the buffer's and are not part of it.
      roi.decode_into(reused, jpeg.data(), jpeg.size(), fixed(b));
      const size_t bytes = c.image.pixels.size();
      ASSERT_GE(reused.image.pixels.size(), bytes);
      EXPECT_TRUE(
          reused.image.width == c.image.width && reused.image.height == c.image.height &&
          std::equal(c.image.pixels.begin(), c.image.pixels.end(), reused.image.pixels.begin()))
          << k.name << ": box top " << b.top << " left " << b.left;
      EXPECT_TRUE(reused.box.top == c.box.top && reused.box.left == c.box.left &&
                  reused.box.width == c.box.width && reused.box.height == c.box.height &&
                  reused.coef_bytes == c.coef_bytes && reused.full_coef_bytes == c.full_coef_bytes)
          << k.name;
    }
  }
  EXPECT_EQ(roi.renewals(), 0);
}

// libjpeg.txt, "Partial image decompression": the fancy h2v1 and h2v2 upsampling may treat a
// partial region's left and right edges as image edges. Without the margin that shows on the box's
// edge columns and nowhere else; with 4:4:4 (no upsampling) there is nothing to show.
TEST(JpegCrop, WithoutTheMarginOnlyTheBoxEdgeColumnsDiffer) {
  JpegCodec full_codec;
  JpegCropDecoder roi;
  const RgbImage src = synthetic_image(333, 217, 5, 10, 9);
  int largest = 0;
  for (const Kind& k : kinds()) {
    const std::string jpeg = encode(src, k);
    const RgbImage full = full_codec.decode(jpeg.data(), jpeg.size());
    int64_t differing = 0;
    for (const CropBox& b : boxes(src.width, src.height, 11)) {
      const CroppedImage c = roi.decode(jpeg.data(), jpeg.size(), fixed(b), 0, 0, false, 0);
      const Diff d = compare_box(full, b, c);
      EXPECT_EQ(d.inside, 0) << k.name << ": a pixel away from the box's edge columns differs";
      differing += d.differing;
      largest = std::max(largest, d.largest);
    }
    const bool upsampled_horizontally = !k.gray && k.h_samp == 2;
    if (!upsampled_horizontally) {
      EXPECT_EQ(differing, 0) << k.name;
    }
    if (k.name == "4:2:0" || k.name == "4:2:2") {
      EXPECT_GT(differing, 0) << k.name;
    }
  }
  std::printf("largest difference on a box edge without the margin: %d levels\n", largest);
}

TEST(JpegCrop, DecodesOnlyTheRowsAndColumnsAroundTheBox) {
  JpegCropDecoder roi;
  const RgbImage src = synthetic_image(500, 375, 1, 10, 3);
  const std::string jpeg = encode(src, Kind{"4:2:0"});
  const CroppedImage c = roi.decode(jpeg.data(), jpeg.size(), fixed({100, 200, 120, 150}));
  // Rows: the box and the margin; columns: from the iMCU boundary at or left of the margin.
  EXPECT_EQ(c.image.height, 120 + 2 * kRoiMargin);
  EXPECT_EQ(c.box.top, kRoiMargin);
  EXPECT_LE(c.image.width, 150 + 2 * kRoiMargin + 16);
  EXPECT_EQ((200 - c.box.left) % 16, 0);
  // About 150x120 of 500x375 went through the IDCT (plus the iMCU rounding): well under half.
  EXPECT_LT(c.coef_bytes, c.full_coef_bytes / 4);
  EXPECT_GT(c.coef_bytes, c.full_coef_bytes / 20);
}

TEST(JpegCrop, FastScaleIsTheLargestThatKeepsTheOutputSize) {
  EXPECT_EQ(fast_scale_denom(500, 375, 224, 224), 1);
  EXPECT_EQ(fast_scale_denom(448, 448, 224, 224), 2);
  EXPECT_EQ(fast_scale_denom(447, 900, 224, 224), 1);
  EXPECT_EQ(fast_scale_denom(900, 900, 224, 224), 4);
  EXPECT_EQ(fast_scale_denom(1792, 1792, 224, 224), 8);
  EXPECT_EQ(fast_scale_denom(4000, 4000, 224, 224), 8);
  EXPECT_EQ(fast_scale_denom(500, 500, 0, 0), 1);
}

TEST(JpegCrop, FastDecodeScalesTheBoxAndStaysCloseToTheExactPixels) {
  JpegCropDecoder roi;
  const RgbImage src = synthetic_image(1000, 800, 2, 10, 5);
  const std::string jpeg = encode(src, Kind{"4:2:0"});
  const CropBox b{100, 60, 600, 900};
  const CroppedImage exact = roi.decode(jpeg.data(), jpeg.size(), fixed(b), 224, 224, false);
  const CroppedImage fast = roi.decode(jpeg.data(), jpeg.size(), fixed(b), 224, 224, true);
  EXPECT_EQ(exact.scale_denom, 1);
  ASSERT_EQ(fast.scale_denom, 2);  // 900x600 holds 224x224 twice, not four times
  EXPECT_EQ(fast.box.width, 450);
  EXPECT_EQ(fast.box.height, 300);
  // The same blocks go through the (scaled, 4x4-output) inverse DCT: fewer pixels, not fewer
  // coefficients.
  EXPECT_EQ(fast.coef_bytes, exact.coef_bytes);
  // Every scaled pixel against the mean of the 2x2 exact pixels it stands for: close, not equal.
  double sum = 0;
  int64_t n = 0;
  for (int y = 0; y < fast.box.height; ++y)
    for (int x = 0; x < fast.box.width; ++x)
      for (int c = 0; c < 3; ++c) {
        const auto at = [&](const CroppedImage& im, int yy, int xx) {
          return static_cast<double>(
              im.image.pixels
                  [(static_cast<size_t>(im.box.top + yy) * im.image.width + im.box.left + xx) * 3 +
                   c]);
        };
        const double mean = (at(exact, 2 * y, 2 * x) + at(exact, 2 * y, 2 * x + 1) +
                             at(exact, 2 * y + 1, 2 * x) + at(exact, 2 * y + 1, 2 * x + 1)) /
                            4;
        sum += std::abs(at(fast, y, x) - mean);
        ++n;
      }
  EXPECT_LT(sum / n, 4.0) << "mean difference in levels";
}

TEST(JpegCrop, ABoxOutsideTheImageIsAUsageErrorAndLeavesTheDecoderUsable) {
  JpegCropDecoder roi;
  const RgbImage src = synthetic_image(64, 48, 0, 3, 1);
  const std::string jpeg = encode(src, Kind{"4:2:0"});
  EXPECT_ANY_THROW(roi.decode(jpeg.data(), jpeg.size(), fixed({0, 0, 49, 10})));
  EXPECT_ANY_THROW(roi.decode(jpeg.data(), jpeg.size(), fixed({0, 60, 10, 10})));
  const CroppedImage c = roi.decode(jpeg.data(), jpeg.size(), fixed({0, 0, 48, 64}));
  EXPECT_EQ(c.box.width, 64);
}

}  // namespace
}  // namespace dtune::data
