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
