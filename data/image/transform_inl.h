// Template half of transform.h: torchvision's RandomResizedCrop.get_params, generic over the source
// of uniform numbers so the loader can pass its per-sample RNG and tests a scripted sequence.
#pragma once

#include <algorithm>
#include <cmath>

namespace dtune::data {

// Each try draws, in torchvision's order: the area fraction (uniform in [scale_lo, scale_hi)), the
// log aspect ratio (uniform in [log ratio_lo, log ratio_hi)), then - only when the box fits - the
// top row and the left column as randint(0, height - h + 1) and randint(0, width - w + 1), i.e.
// floor(u * n). Python's round() rounds half to even, as std::nearbyint does in the default
// rounding mode.
template <class Uniform>
CropBox random_resized_crop_box(int width, int height, Uniform&& u, double scale_lo,
                                double scale_hi, double ratio_lo, double ratio_hi) {
  const double area = static_cast<double>(width) * height;
  const double log_lo = std::log(ratio_lo), log_hi = std::log(ratio_hi);
  const auto randint = [&u](int n) {  // uniform in [0, n)
    const int v = static_cast<int>(std::floor(static_cast<double>(u()) * n));
    return std::clamp(v, 0, n - 1);
  };
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * (scale_lo + static_cast<double>(u()) * (scale_hi - scale_lo));
    const double aspect_ratio = std::exp(log_lo + static_cast<double>(u()) * (log_hi - log_lo));
    const int w = static_cast<int>(std::nearbyint(std::sqrt(target_area * aspect_ratio)));
    const int h = static_cast<int>(std::nearbyint(std::sqrt(target_area / aspect_ratio)));
    if (0 < w && w <= width && 0 < h && h <= height) {
      CropBox box;
      box.height = h;
      box.width = w;
      box.top = randint(height - h + 1);
      box.left = randint(width - w + 1);
      return box;
    }
  }
  // Fallback: the central crop, its aspect ratio clamped to [ratio_lo, ratio_hi].
  const double in_ratio = static_cast<double>(width) / height;
  int w = width, h = height;
  if (in_ratio < std::min(ratio_lo, ratio_hi)) {
    h = static_cast<int>(std::nearbyint(w / std::min(ratio_lo, ratio_hi)));
  } else if (in_ratio > std::max(ratio_lo, ratio_hi)) {
    w = static_cast<int>(std::nearbyint(h * std::max(ratio_lo, ratio_hi)));
  }
  CropBox box;
  box.height = h;
  box.width = w;
  box.top = (height - h) / 2;
  box.left = (width - w) / 2;
  return box;
}

}  // namespace dtune::data
