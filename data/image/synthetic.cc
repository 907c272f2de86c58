// synthetic_image: a class-coloured, class-oriented stripe texture with a smooth shading gradient,
// a soft-edged darker blob of a nearby hue and mild pixel noise. The class decides hue,
// stripe angle and frequency; the sample (seed) decides phase, blob, shading, brightness, noise.
#include "data/image/synthetic.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace dtune::data {

namespace {

constexpr double kPi = 3.14159265358979323846;

// SplitMix64: a full-period 64-bit generator, good enough to scatter classes and samples.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
};

// HSV (all in [0, 1]) to RGB in [0, 1].
void hsv_to_rgb(double h, double s, double v, double rgb[3]) {
  const double hh = (h - std::floor(h)) * 6.0;
  const int i = static_cast<int>(hh) % 6;
  const double f = hh - std::floor(hh);
  const double p = v * (1 - s), q = v * (1 - s * f), t = v * (1 - s * (1 - f));
  const double table[6][3] = {{v, t, p}, {q, v, p}, {p, v, t}, {p, q, v}, {t, p, v}, {v, p, q}};
  for (int c = 0; c < 3; ++c) rgb[c] = table[i][c];
}

}  // namespace

RgbImage synthetic_image(int width, int height, int label, int num_classes, uint64_t seed) {
  if (width <= 0 || height <= 0 || num_classes <= 0 || label < 0 || label >= num_classes)
    throw UsageError(
        "synthetic image: need width, height, classes > 0 and 0 <= label < classes "
        "(got " +
        std::to_string(width) + "x" + std::to_string(height) + ", label " + std::to_string(label) +
        " of " + std::to_string(num_classes) + ")");
  // Class parameters depend on the label alone. Hues are spread evenly around the circle; the
  // stripe angle and frequency are scrambled so neighbouring classes differ in all three.
  SplitMix64 class_rng{0xC1A55ull * 0x100000001B3ull + static_cast<uint64_t>(label)};
  const double hue = (label + 0.5) / num_classes;
  const double angle = class_rng.uniform() * kPi;
  const double cycles = 3.0 + 9.0 * class_rng.uniform();  // stripes across the longer side
  const double saturation = 0.45 + 0.35 * class_rng.uniform();

  SplitMix64 rng{seed * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(label) << 32) ^ 0x5EEDull};
  const double phase = 2 * kPi * rng.uniform();
  const double brightness = 0.8 + 0.15 * rng.uniform();
  const double contrast = 0.2 + 0.15 * rng.uniform();
  const double shade_angle = 2 * kPi * rng.uniform(), shade_depth = 0.3 * rng.uniform();
  const double blob_x = width * (0.2 + 0.6 * rng.uniform());
  const double blob_y = height * (0.2 + 0.6 * rng.uniform());
  const double blob_r = std::min(width, height) * (0.12 + 0.18 * rng.uniform());
  const double noise = 10.0 + 8.0 * rng.uniform();  // peak-to-peak pixel noise in 8-bit levels
  // A fine sample-specific grain on top of the class stripes: detail for the JPEG coder to keep.
  const double grain_angle = kPi * rng.uniform(), grain_cycles = 40.0 + 40.0 * rng.uniform();

  double base[3], blob[3];
  hsv_to_rgb(hue, saturation, 1.0, base);
  hsv_to_rgb(hue + 0.08, 0.9, 0.55, blob);  // a darker object of a nearby hue
  const double longer = std::max(width, height);
  const double kx = 2 * kPi * cycles / longer * std::cos(angle);
  const double ky = 2 * kPi * cycles / longer * std::sin(angle);
  const double sx = std::cos(shade_angle) / longer, sy = std::sin(shade_angle) / longer;
  const double edge = std::max(2.0, blob_r * 0.15);  // soft edge width of the blob, pixels

  RgbImage img;
  img.width = width;
  img.height = height;
  img.pixels.resize(static_cast<size_t>(width) * height * 3);
  uint64_t noise_state = rng.next() | 1;
  // The stripe phase advances by kx per column: sin/cos of the row start, then a rotation per
  // pixel keeps the inner loop free of transcendental calls.
  const double step_c = std::cos(kx), step_s = std::sin(kx);
  const double gx = 2 * kPi * grain_cycles / longer * std::cos(grain_angle);
  const double gy = 2 * kPi * grain_cycles / longer * std::sin(grain_angle);
  const double grain_c = std::cos(gx), grain_s = std::sin(gx);
  for (int y = 0; y < height; ++y) {
    uint8_t* row = img.pixels.data() + static_cast<size_t>(y) * width * 3;
    double s = std::sin(ky * y + phase), c = std::cos(ky * y + phase);
    double gs = std::sin(gy * y), gc = std::cos(gy * y);
    const double dy = y - blob_y;
    for (int x = 0; x < width; ++x) {
      const double shade =
          1.0 - shade_depth * (0.5 + (x - width / 2.0) * sx + (y - height / 2.0) * sy);
      const double level = brightness * shade * (1.0 - contrast + contrast * s + 0.05 * gs);
      const double dx = x - blob_x;
      const double dist = std::sqrt(dx * dx + dy * dy);
      const double inside = std::clamp((blob_r - dist) / edge + 0.5, 0.0, 1.0);
      noise_state ^= noise_state << 13;
      noise_state ^= noise_state >> 7;
      noise_state ^= noise_state << 17;
      for (int ch = 0; ch < 3; ++ch) {
        const double colour = (1 - inside) * base[ch] * level + inside * blob[ch] * shade;
        const double n =
            (static_cast<double>((noise_state >> (ch * 16)) & 0xFFFF) / 65535.0 - 0.5) * noise;
        row[3 * x + ch] = static_cast<uint8_t>(std::clamp(colour * 255.0 + n + 0.5, 0.0, 255.0));
      }
      const double s2 = s * step_c + c * step_s;
      c = c * step_c - s * step_s;
      s = s2;
      const double gs2 = gs * grain_c + gc * grain_s;
      gc = gc * grain_c - gs * grain_s;
      gs = gs2;
    }
  }
  return img;
}

}  // namespace dtune::data
