// JPEG decoding and encoding with libjpeg-turbo's TurboJPEG API. Images are 8-bit RGB, row-major,
// interleaved (H, W, 3). Torch-free.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace dtune::data {

struct RgbImage {
  int width = 0, height = 0;
  // (height, width, 3). A buffer reused by decode_into may hold more bytes than that: only the
  // first width * height * 3 are the image's.
  std::vector<uint8_t> pixels;
};

// A buffer that is not a decodable JPEG (truncated, corrupt, not a JPEG at all). Loaders count and
// skip these (fatal with --strict).
struct BadImage : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The most pixels an image may have to be decoded: Pillow's decompression-bomb bound (PIL/Image.py
// _decompression_bomb_check: DecompressionBombError above 2 * MAX_IMAGE_PIXELS, where
// MAX_IMAGE_PIXELS = 1 GiB / 4 / 3), so dtune skips what a torchvision ImageFolder refuses. A
// header is a few bytes: a JPEG of a few hundred bytes that claims 65500 x 65500 would otherwise
// cost 12 GB of pixels before its missing data is noticed. Every decoder (whole-image, region,
// nvJPEG, PNG) checks the whole image, so the modes skip the same files.
inline constexpr int64_t kMaxImagePixels = 2 * (int64_t{1024} * 1024 * 1024 / 4 / 3);
// Throws BadImage naming the size and the limit when width x height is above kMaxImagePixels.
// `what`: "JPEG", "PNG".
void check_image_pixels(const char* what, int64_t width, int64_t height);

// Thread-compatible: one decoder per thread (TurboJPEG handles are not shared). Never poisoned: a
// call that fails replaces its TurboJPEG handle before it throws, so the next image decodes as it
// would on a fresh codec (tests/unit/data/test_image.cc proves it for every kind of damage).
class JpegCodec {
 public:
  JpegCodec();
  ~JpegCodec();
  JpegCodec(const JpegCodec&) = delete;
  JpegCodec& operator=(const JpegCodec&) = delete;

  // Full-size decode to RGB (grayscale sources are converted; CMYK and YCCK ones are refused as
  // BadImage, "Unsupported color conversion request": TurboJPEG leaves that to a colour manager).
  // Throws BadImage.
  RgbImage decode(const void* data, size_t size);
  // The same into `img`, reusing its buffer: grown when too small, never shrunk or cleared, so a
  // thread that decodes image after image allocates (and zero-fills) only while sizes grow.
  void decode_into(RgbImage& img, const void* data, size_t size);
  // Width and height from the header alone. Throws BadImage.
  std::pair<int, int> dimensions(const void* data, size_t size);
  // Baseline JPEG at `quality` (1-100), 4:2:0 chroma subsampling, as most cameras and datasets.
  std::string encode(const RgbImage& img, int quality = 90);
  // How many times a handle was replaced after a failure (for tests).
  int64_t renewals() const { return renewals_; }
  // The DCT coefficient bytes (64 two-byte coefficients per block, every component) the last
  // successful decode() inverse-transformed: the whole image's.
  int64_t last_coef_bytes() const { return last_coef_bytes_; }

 private:
  void renew(void*& handle, void* (*init)());  // destroy + create, or throw dtune::Error
  [[noreturn]] void fail_decode(const std::string& message);  // renews the decoder, throws BadImage

  void* decoder_ = nullptr;
  void* encoder_ = nullptr;
  int64_t renewals_ = 0;
  int64_t last_coef_bytes_ = 0;
  int last_subsamp_ = -1;  // TurboJPEG's TJSAMP_* of the last header read
};

}  // namespace dtune::data
