// PNG decoding with libpng's simplified API (png_image, libpng >= 1.6), for `dtune-data convert`,
// which transcodes PNGs to JPEG: dtune's loader reads JPEG only. Torch-free.
#pragma once

#include <cstddef>

#include "data/image/jpeg.h"

namespace dtune::data {

// True when the buffer starts with PNG's 8-byte signature.
bool is_png(const void* data, size_t size);

// Decodes to 8-bit RGB (palette, grayscale, 16-bit and alpha sources converted; alpha composited
// over black, as libpng's simplified API does without a background). Throws BadImage, also for a
// side above 65500 pixels (JPEG's limit), before allocating the pixels.
RgbImage decode_png(const void* data, size_t size);

}  // namespace dtune::data
