// PNG decoding (see png.h).
#include "data/image/png.h"

#include <png.h>

#include <cstring>
#include <string>

namespace dtune::data {

bool is_png(const void* data, size_t size) {
  static constexpr unsigned char kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  return size >= sizeof kSignature && std::memcmp(data, kSignature, sizeof kSignature) == 0;
}

RgbImage decode_png(const void* data, size_t size) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, data, size))
    throw BadImage(std::string("not a decodable PNG: ") + image.message);
  // JPEG's limit (libjpeg's JPEG_MAX_DIMENSION): a larger PNG could not be transcoded anyway, and
  // is refused before its pixels are allocated.
  if (image.width > 65500 || image.height > 65500) {
    const std::string size = std::to_string(image.width) + "x" + std::to_string(image.height);
    png_image_free(&image);
    throw BadImage("a " + size + " PNG is beyond JPEG's limit of 65500 pixels per side");
  }
  try {
    check_image_pixels("PNG", image.width, image.height);
  } catch (const BadImage&) {
    png_image_free(&image);
    throw;
  }
  image.format = PNG_FORMAT_RGB;
  RgbImage out;
  out.width = static_cast<int>(image.width);
  out.height = static_cast<int>(image.height);
  out.pixels.resize(PNG_IMAGE_SIZE(image));  // (height, width, 3)
  if (!png_image_finish_read(&image, nullptr, out.pixels.data(), 0, nullptr)) {
    const std::string why = image.message;
    png_image_free(&image);
    throw BadImage("not a decodable PNG: " + why);
  }
  return out;
}

}  // namespace dtune::data
