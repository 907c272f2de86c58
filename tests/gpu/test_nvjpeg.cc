// nvJPEG behind the loader's decoder interface (data/image/nvjpeg_decoder.h). On a GPU: the pixels
// are close to libjpeg's exact decode (they are not equal: nvJPEG's inverse DCT and upsampling are
// its own; the test prints by how much), a crop box is exactly the box of the whole image's nvJPEG
// decode, and a damaged file is a BadImage that leaves the decoder usable. Without a GPU: building
// a decoder is refused with the reason and the flag to use instead.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/device_info.h"
#include "core/error.h"
#include "data/image/jpeg.h"
#include "data/image/nvjpeg_decoder.h"
#include "data/image/synthetic.h"

namespace dtune::data {
namespace {

int visible_gpus() { return query_device_summary().device_count; }

ChooseBox fixed(const CropBox& b) {
  return [b](int, int) { return b; };
}

TEST(Nvjpeg, WithoutGpuIsRefusedWithTheReason) {
  if (visible_gpus() > 0)
    GTEST_SKIP()
        << "a CUDA device is visible: this test checks the refusal on a machine without one";
  EXPECT_FALSE(nvjpeg_unavailable_reason().empty());
  try {
    NvjpegDecoder d;
    FAIL() << "NvjpegDecoder was built without a GPU";
  } catch (const UsageError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--decode nvjpeg cannot run here"), std::string::npos) << m;
    EXPECT_NE(m.find("no CUDA device"), std::string::npos) << m;
  }
}

// The build found nvjpeg.h and the library it will open at run time: libnvjpeg.so.13 opens and
// every entry point dtune calls resolves, GPU or not (a misspelt name or a missing wheel fails
// here).
TEST(Nvjpeg, LibraryOpensWithEveryEntryPoint) { EXPECT_EQ(nvjpeg_library_error(), ""); }

TEST(Nvjpeg, CloseToLibjpegAndExactToItsOwnWholeDecode) {
  if (visible_gpus() == 0) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount)";
  // The GPU bundle does not carry libnvjpeg (5.6 MiB); a machine without it says so here.
  if (!nvjpeg_library_error().empty()) GTEST_SKIP() << nvjpeg_library_error();
  ASSERT_EQ(nvjpeg_unavailable_reason(), "");
  JpegCodec codec;
  NvjpegDecoder gpu;
  CroppedImage whole, box;
  for (int seed = 0; seed < 8; ++seed) {
    const int w = 500 + 13 * seed, h = 375 - 7 * seed;
    const std::string jpeg = codec.encode(synthetic_image(w, h, seed % 3, 10, seed), 90);
    const RgbImage exact = codec.decode(jpeg.data(), jpeg.size());
    gpu.decode_into(whole, jpeg.data(), jpeg.size(), fixed(CropBox{0, 0, h, w}));
    ASSERT_EQ(whole.image.width, w);
    ASSERT_EQ(whole.image.height, h);
    double se = 0;
    int largest = 0;
    const size_t n = static_cast<size_t>(w) * h * 3;
    for (size_t i = 0; i < n; ++i) {
      const int d = std::abs(int{whole.image.pixels[i]} - int{exact.pixels[i]});
      largest = std::max(largest, d);
      se += static_cast<double>(d) * d;
    }
    const double psnr = 10 * std::log10(255.0 * 255.0 / std::max(se / n, 1e-12));
    std::printf("nvJPEG vs libjpeg, %dx%d: PSNR %.1f dB, largest difference %d levels\n", w, h,
                psnr, largest);
    // Two decoders of one file that differ only in IDCT rounding and upsampling stay far above
    // what the eye or a network notices; a wrong colour conversion or a shifted row falls far
    // below.
    EXPECT_GE(psnr, 35.0) << "seed " << seed;
    // A box is the same decode, copied back in part: equal to the whole image's box, byte for byte.
    const CropBox b{h / 5, w / 3, h / 2, w / 4};
    gpu.decode_into(box, jpeg.data(), jpeg.size(), fixed(b));
    ASSERT_EQ(box.image.width, b.width);
    ASSERT_EQ(box.image.height, b.height);
    EXPECT_EQ(box.full_width, w);
    for (int y = 0; y < b.height; ++y)
      for (int x = 0; x < b.width * 3; ++x)
        ASSERT_EQ(box.image.pixels[static_cast<size_t>(y) * b.width * 3 + x],
                  whole.image.pixels[(static_cast<size_t>(b.top + y) * w + b.left) * 3 + x])
            << "seed " << seed << " row " << y;
  }
}

TEST(Nvjpeg, ADamagedFileIsABadImageAndTheNextDecodesAsOnAFreshDecoder) {
  if (visible_gpus() == 0) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount)";
  if (!nvjpeg_library_error().empty()) GTEST_SKIP() << nvjpeg_library_error();
  JpegCodec codec;
  const std::string good = codec.encode(synthetic_image(320, 240, 1, 10, 5), 90);
  NvjpegDecoder fresh, used;
  CroppedImage a, b;
  const ChooseBox all = [](int w, int h) { return CropBox{0, 0, h, w}; };
  fresh.decode_into(a, good.data(), good.size(), all);
  std::string cut = good.substr(0, good.size() / 3);  // a truncated file
  std::string garbage = good;
  for (size_t i = 20; i < 200 && i < garbage.size(); ++i) garbage[i] = static_cast<char>(0xFF);
  for (const std::string* bad : {&cut, &garbage}) {
    try {
      used.decode_into(b, bad->data(), bad->size(), all);
      ADD_FAILURE() << "a damaged file decoded";
    } catch (const BadImage&) {
    }
    used.decode_into(b, good.data(), good.size(), all);
    ASSERT_EQ(b.image.width, a.image.width);
    EXPECT_TRUE(std::equal(a.image.pixels.begin(),
                           a.image.pixels.begin() + static_cast<size_t>(320) * 240 * 3,
                           b.image.pixels.begin()));
  }
}

}  // namespace
}  // namespace dtune::data
