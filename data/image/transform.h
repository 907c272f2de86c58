// The standard ImageNet training transforms, as torchvision applies them to a PIL image:
// RandomResizedCrop(size, scale=(0.08, 1), ratio=(3/4, 4/3)) with bilinear antialiased resampling
// (Pillow's algorithm: a triangle filter whose support widens with the downscale factor), then
// RandomHorizontalFlip(0.5), then ToTensor + Normalize(mean, std), giving float32 (3, size, size)
// planes. Also the evaluation path: Resize(shorter side) + CenterCrop. Torch-free.
#pragma once

#include <array>
#include <cstdint>

#include "data/image/jpeg.h"

namespace dtune::data {

struct CropBox {
  int top = 0, left = 0, height = 0, width = 0;  // in source pixels
};

// Throws UsageError naming the box and the image unless `box` is non-empty and inside a
// width x height image.
void check_crop_box(const CropBox& box, int width, int height);

// torchvision.transforms.RandomResizedCrop.get_params: up to 10 tries of a random area fraction in
// `scale` and a log-uniform aspect ratio in `ratio`; if none fits, the central crop clamped to the
// ratio range. `u` draws uniform numbers in [0, 1) (so tests can script them).
template <class Uniform>
CropBox random_resized_crop_box(int width, int height, Uniform&& u, double scale_lo = 0.08,
                                double scale_hi = 1.0, double ratio_lo = 3.0 / 4.0,
                                double ratio_hi = 4.0 / 3.0);

inline constexpr std::array<float, 3> kImagenetMean = {0.485f, 0.456f, 0.406f};
inline constexpr std::array<float, 3> kImagenetStd = {0.229f, 0.224f, 0.225f};

// Crops `box` out of `src`, resizes it to out_h x out_w with Pillow's bilinear (antialiased)
// filter, flips horizontally if asked, and writes normalised float planes to `out`
// (3 * out_h * out_w floats, channel-major: the layout of a (3, H, W) tensor).
void crop_resize_normalize(const RgbImage& src, const CropBox& box, int out_h, int out_w, bool flip,
                           float* out, const std::array<float, 3>& mean = kImagenetMean,
                           const std::array<float, 3>& std = kImagenetStd);

// Resize so the shorter side is `resize`, then the central out x out crop (torchvision's
// Resize(256) + CenterCrop(224) evaluation transform), as a CropBox in source pixels for
// crop_resize_normalize (which resamples once).
CropBox center_crop_box(int width, int height, int resize, int out);

}  // namespace dtune::data

#include "data/image/transform_inl.h"
