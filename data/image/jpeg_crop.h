// Region-of-interest JPEG decoding with libjpeg-turbo's libjpeg API (Debian 12 ships 2.1.5:
// jpeg_crop_scanline and jpeg_skip_scanlines; TurboJPEG's own crop API only arrives in 3.0), as
// DALI's CPU path does. The crop box is chosen from the header's dimensions (RandomResizedCrop's
// box is a function of the image size and the per-sample seed), then only the rows and the
// iMCU-aligned columns around it go through the inverse DCT, upsampling and colour conversion.
// Torch-free.
//
// Exact: the pixels inside the box equal a full decode's (JpegCodec::decode, the same library and
// settings: accurate integer DCT, fancy upsampling). libjpeg's documentation (libjpeg.txt,
// "Partial image decompression") notes that a cropped or skipped region's edge is upsampled as an
// image edge; the decoded region therefore reaches kRoiMargin pixels beyond the box on every side
// that is not the image's own edge, and those edge pixels, which can differ, are never inside the
// box (tests/unit/data/test_jpeg_crop.cc measures the difference with no margin and proves the
// equality with it).
//
// DCT-scaled decoding (`fast`, dtune's --fast-decode): where the box is at least twice the output
// size on both sides, the decoder scales by 1/2, 1/4 or 1/8 in the inverse DCT (the largest that
// keeps the scaled box at least the output size on both sides), as Pillow's draft mode does. It
// changes the pixels; dtune-micro's decode table reports by how much.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "data/image/jpeg.h"
#include "data/image/transform.h"

namespace dtune::data {

// Pixels decoded beyond the box on each side that is not the image's edge.
inline constexpr int kRoiMargin = 2;

struct CroppedImage {
  RgbImage image;      // the decoded region (DCT-scaled when scale_denom > 1)
  CropBox box;         // the crop inside `image`, in its pixels
  int full_width = 0;  // the source image, from the header
  int full_height = 0;
  int scale_denom = 1;     // 1: exact; 2, 4 or 8: scaled in the inverse DCT (fast)
  int64_t coef_bytes = 0;  // DCT coefficients inverse-transformed, as bytes (64 JCOEF per block)
  int64_t full_coef_bytes = 0;  // what a full decode inverse-transforms

  // Every field as a new CroppedImage's, but the pixel buffer is kept (its size and capacity) so
  // that a decoder reusing `out` across images does not allocate for each.
  void reset_keeping_pixels() {
    std::vector<uint8_t> pixels = std::move(image.pixels);
    *this = CroppedImage{};
    image.pixels = std::move(pixels);
  }
};

// Given the source's width and height, the box to keep (in source pixels).
using ChooseBox = std::function<CropBox(int width, int height)>;

// Thread-compatible, one per thread. Never poisoned: a failed decode leaves a fresh decompressor
// behind, so the next image decodes as it would on a new decoder.
class JpegCropDecoder {
 public:
  JpegCropDecoder();
  ~JpegCropDecoder();
  JpegCropDecoder(const JpegCropDecoder&) = delete;
  JpegCropDecoder& operator=(const JpegCropDecoder&) = delete;

  // Reads the header, asks `choose` for the box, decodes around it. `out_w` x `out_h` is what the
  // box will be resized to (only `fast` uses it). `margin` is for tests (0 shows what the margin
  // is for). Throws BadImage as JpegCodec::decode does, plus "Premature end of JPEG file" when
  // the buffer has no end-of-image marker after the scan (the rows below the box are not read,
  // so a truncated file would otherwise pass). Corrupt entropy-coded data below the box's last
  // row is not read either, so not seen: such a file decodes here and is refused by a full decode
  // (DALI's region decode has the same limit); every kind of damage in the damaged-file matrix
  // (tests/unit/data/test_image_damage.cc) is refused.
  CroppedImage decode(const void* data, size_t size, const ChooseBox& choose, int out_w = 0,
                      int out_h = 0, bool fast = false, int margin = kRoiMargin);
  // The same into `out`, reusing its pixel buffer as JpegCodec::decode_into does (grown, never
  // shrunk or cleared; it may hold more than the region's bytes).
  void decode_into(CroppedImage& out, const void* data, size_t size, const ChooseBox& choose,
                   int out_w = 0, int out_h = 0, bool fast = false, int margin = kRoiMargin);
  // How many times the decompressor was replaced after a failure (for tests).
  int64_t renewals() const { return renewals_; }

 private:
  struct State;
  void renew();
  State* state_ = nullptr;
  int64_t renewals_ = 0;
};

// Whether [from, end) holds an end-of-image marker (FF D9). Searched from the first scan's header
// on, it is the EOI: inside entropy-coded data an 0xFF is always followed by 0x00 or a restart
// marker, and an EXIF thumbnail's EOI lies before the scan.
bool has_eoi(const unsigned char* from, const unsigned char* end);

// The DCT scale denominator `fast` decoding uses for a box of box_w x box_h resized to
// out_w x out_h: the largest of 8, 4, 2 with box / d >= out on both sides, else 1.
int fast_scale_denom(int box_w, int box_h, int out_w, int out_h);

}  // namespace dtune::data
