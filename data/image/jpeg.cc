// JpegCodec over TurboJPEG. Decoding uses TurboJPEG's defaults, which are libjpeg's: the accurate
// integer DCT (JDCT_ISLOW) and fancy (triangle) chroma upsampling, as Pillow's JPEG decoder does,
// so decoded pixels equal Image.open(...).convert("RGB") for RGB and grayscale sources. A handle
// that failed is replaced before the error leaves: TurboJPEG 2.1's decompressor keeps the state of
// a header it could not finish ("Bogus Huffman table definition"), and every later header read on
// it failed the same way, so one damaged file cost every good image after it on that thread.
#include "data/image/jpeg.h"

#include <turbojpeg.h>

#include <cstring>
#include <string>

#include "core/error.h"

namespace dtune::data {

namespace {

std::string tj_message(void* handle) { return tjGetErrorStr2(static_cast<tjhandle>(handle)); }

// libjpeg reports a truncated or corrupt entropy-coded stream only as a warning and fills the rest
// with grey; such an image is bad (Pillow refuses truncated files too). The one warning that
// Pillow and every camera pipeline ignore is stray bytes between segments: the image is intact.
bool harmless_warning(const std::string& message) {
  return message.find("extraneous bytes before marker") != std::string::npos;
}

// Blocks of every component of a width x height image with TurboJPEG's chroma subsampling, as
// bytes of 64 two-byte coefficients: luma ceil(w/8) x ceil(h/8), chroma over the MCU's size.
int64_t coef_bytes(int width, int height, int subsamp) {
  const auto blocks = [](int64_t n, int64_t px) { return (n + px - 1) / px; };
  int64_t n = blocks(width, 8) * blocks(height, 8);
  if (subsamp != TJSAMP_GRAY && subsamp >= 0 && subsamp < TJ_NUMSAMP)
    n += 2 * blocks(width, tjMCUWidth[subsamp]) * blocks(height, tjMCUHeight[subsamp]);
  return n * 64 * 2;
}

}  // namespace

void check_image_pixels(const char* what, int64_t width, int64_t height) {
  if (width * height > kMaxImagePixels)
    throw BadImage(std::string(what) + " header: " + std::to_string(width) + "x" +
                   std::to_string(height) + " is " + std::to_string(width * height) +
                   " pixels, more than the " + std::to_string(kMaxImagePixels) +
                   " dtune decodes (Pillow's decompression-bomb limit)");
}

JpegCodec::JpegCodec() {
  decoder_ = tjInitDecompress();
  encoder_ = tjInitCompress();
  if (decoder_ == nullptr || encoder_ == nullptr) {
    if (decoder_ != nullptr) tjDestroy(static_cast<tjhandle>(decoder_));
    if (encoder_ != nullptr) tjDestroy(static_cast<tjhandle>(encoder_));
    throw Error(std::string("TurboJPEG: cannot create a handle: ") + tjGetErrorStr2(nullptr));
  }
}

JpegCodec::~JpegCodec() {
  tjDestroy(static_cast<tjhandle>(decoder_));
  tjDestroy(static_cast<tjhandle>(encoder_));
}

void JpegCodec::renew(void*& handle, void* (*init)()) {
  void* fresh = init();
  if (fresh == nullptr)
    throw Error(std::string("TurboJPEG: cannot create a handle: ") + tjGetErrorStr2(nullptr));
  tjDestroy(static_cast<tjhandle>(handle));
  handle = fresh;
  ++renewals_;
}

void JpegCodec::fail_decode(const std::string& message) {
  renew(decoder_, [] { return static_cast<void*>(tjInitDecompress()); });
  throw BadImage(message);
}

std::pair<int, int> JpegCodec::dimensions(const void* data, size_t size) {
  if (data == nullptr || size == 0) throw BadImage("JPEG: empty buffer");
  int width = 0, height = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(static_cast<tjhandle>(decoder_), static_cast<const unsigned char*>(data),
                          static_cast<unsigned long>(size), &width, &height, &subsamp,
                          &colorspace) != 0)
    fail_decode("JPEG header: " + tj_message(decoder_));
  if (width <= 0 || height <= 0) fail_decode("JPEG header: zero-sized image");
  last_subsamp_ = subsamp;
  return {width, height};
}

RgbImage JpegCodec::decode(const void* data, size_t size) {
  RgbImage img;
  decode_into(img, data, size);
  return img;
}

void JpegCodec::decode_into(RgbImage& img, const void* data, size_t size) {
  const auto [width, height] = dimensions(data, size);
  const int subsamp = last_subsamp_;
  try {
    check_image_pixels("JPEG", width, height);  // before the pixels are allocated
  } catch (const BadImage& e) {
    fail_decode(e.what());
  }
  img.width = width;
  img.height = height;
  const size_t bytes = static_cast<size_t>(width) * height * 3;
  if (img.pixels.size() < bytes) img.pixels.resize(bytes);
  const int rc = tjDecompress2(
      static_cast<tjhandle>(decoder_), static_cast<const unsigned char*>(data),
      static_cast<unsigned long>(size), img.pixels.data(), width, width * 3, height, TJPF_RGB, 0);
  if (rc != 0) {
    const std::string message = tj_message(decoder_);
    const bool warning = tjGetErrorCode(static_cast<tjhandle>(decoder_)) == TJERR_WARNING;
    if (!warning || !harmless_warning(message)) fail_decode("JPEG: " + message);
    // A harmless warning still leaves the handle as a failed call does: start the next image on
    // a fresh one too.
    renew(decoder_, [] { return static_cast<void*>(tjInitDecompress()); });
  }
  last_coef_bytes_ = coef_bytes(width, height, subsamp);
}

std::string JpegCodec::encode(const RgbImage& img, int quality) {
  if (img.width <= 0 || img.height <= 0 ||
      img.pixels.size() != static_cast<size_t>(img.width) * img.height * 3)
    throw UsageError("JPEG encode: image is " + std::to_string(img.width) + "x" +
                     std::to_string(img.height) + " with " + std::to_string(img.pixels.size()) +
                     " bytes, expected width*height*3 > 0");
  if (quality < 1 || quality > 100)
    throw UsageError("JPEG encode: quality " + std::to_string(quality) + " is not in 1-100");
  unsigned char* jpeg = nullptr;
  unsigned long jpeg_size = 0;
  const int rc =
      tjCompress2(static_cast<tjhandle>(encoder_), img.pixels.data(), img.width, img.width * 3,
                  img.height, TJPF_RGB, &jpeg, &jpeg_size, TJSAMP_420, quality, TJFLAG_ACCURATEDCT);
  if (rc != 0) {
    const std::string message = tj_message(encoder_);
    tjFree(jpeg);
    renew(encoder_, [] { return static_cast<void*>(tjInitCompress()); });
    throw Error("JPEG encode: " + message);
  }
  std::string out(reinterpret_cast<const char*>(jpeg), jpeg_size);
  tjFree(jpeg);
  return out;
}

}  // namespace dtune::data
