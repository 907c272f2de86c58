// crop_resize_normalize: Pillow's ImagingResample (libImaging/Resample.c) for 8-bit RGB with the
// bilinear filter, re-implemented so that the loader's output equals torchvision's
// F.resized_crop(pil, ...) + to_tensor + normalize to within one 8-bit level (in practice exactly).
// torchvision crops first (PIL's crop copies the box), then resizes the crop, so the filter only
// ever sees pixels inside the box. Pillow's 8-bit path is reproduced step by step: coefficients in
// double, normalised per output pixel, converted to 22-bit fixed point; a horizontal pass that
// rounds to uint8, then a vertical pass that rounds to uint8 again.
#include "data/image/transform.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"

namespace dtune::data {

namespace {

// Pillow: PRECISION_BITS = 32 - 8 - 2, so 255 * sum(weights) plus the rounding half fits an int32.
constexpr int kPrecisionBits = 22;
constexpr int32_t kHalf = 1 << (kPrecisionBits - 1);

// One axis of the resampling: output pixel i reads `count[i]` input pixels from `first[i]` with the
// fixed-point weights weights[i * ksize ...]. When the input holds at least ksize pixels every
// window is widened to exactly ksize taps (`fixed`), shifted left at the far edge and padded with
// zero weights: the sums are unchanged (a zero weight adds exactly 0) and the inner loops get a
// compile-time trip count.
struct AxisFilter {
  int ksize = 0;
  bool fixed = false;
  std::vector<int> first, count;
  std::vector<int32_t> weights;
  // For the AVX2 horizontal pass (fixed windows only): per pair of output pixels (2p, 2p + 1) and
  // tap x, 8 lanes [w(2p, x) x4, w(2p + 1, x) x4]; empty when not used.
  std::vector<int32_t> pairs;
};

// Fills f.pairs from f.weights (an odd out_size leaves the last pixel to the other kernels).
void make_pairs(AxisFilter& f, int out_size) {
  const int K = f.ksize;
  f.pairs.assign(static_cast<size_t>(out_size / 2) * K * 8, 0);
  for (int p = 0; p < out_size / 2; ++p)
    for (int x = 0; x < K; ++x)
      for (int lane = 0; lane < 8; ++lane)
        f.pairs[(static_cast<size_t>(p) * K + x) * 8 + lane] =
            f.weights[static_cast<size_t>(2 * p + lane / 4) * K + x];
}

// Pillow's precompute_coeffs + normalize_coeffs_8bpc for the bilinear (triangle, support 1) filter
// over the input range [0, in_size). Downscaling widens the triangle by the scale factor, which is
// the antialiasing.
AxisFilter bilinear_axis(int in_size, int out_size) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;
  AxisFilter f;
  f.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  f.fixed = in_size >= f.ksize;
  f.first.resize(out_size);
  f.count.resize(out_size);
  f.weights.assign(static_cast<size_t>(out_size) * f.ksize, 0);
  std::vector<double> k(f.ksize);
  const double ss = 1.0 / filterscale;
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    // Pillow rounds with (int)(v + 0.5), truncating toward zero, then clamps.
    const int xmin = std::max(static_cast<int>(center - support + 0.5), 0);
    const int xmax = std::min(static_cast<int>(center + support + 0.5), in_size) - xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      const double t = std::abs((x + xmin - center + 0.5) * ss);
      k[x] = t < 1.0 ? 1.0 - t : 0.0;
      ww += k[x];
    }
    const int start = f.fixed ? std::min(xmin, in_size - f.ksize) : xmin;
    for (int x = 0; x < xmax; ++x) {
      const double w = ww != 0.0 ? k[x] / ww : k[x];
      // Bilinear weights are never negative; Pillow's rounding of non-negative values.
      f.weights[static_cast<size_t>(xx) * f.ksize + (xmin - start) + x] =
          static_cast<int32_t>(0.5 + w * (1 << kPrecisionBits));
    }
    f.first[xx] = start;
    f.count[xx] = f.fixed ? f.ksize : std::max(xmax, 0);
  }
  return f;
}

// Pillow's clip8: the fixed-point sum (already offset by kHalf) shifted down and clamped.
inline uint8_t clip8(int32_t v) {
  if (v < 0) return 0;
  v >>= kPrecisionBits;
  return static_cast<uint8_t>(v > 255 ? 255 : v);
}

// One output row of the horizontal pass: `row` is interleaved RGB (already offset to the crop's
// left column), `out` receives out_w RGB pixels. K > 0: every window has exactly K taps.
template <int K>
void horizontal_row_scalar(const uint8_t* row, const AxisFilter& f, int xx_begin, int xx_end,
                           uint8_t* out) {
  for (int xx = xx_begin; xx < xx_end; ++xx) {
    const int32_t* k = &f.weights[static_cast<size_t>(xx) * f.ksize];
    const uint8_t* p = row + static_cast<size_t>(f.first[xx]) * 3;
    const int n = K > 0 ? K : f.count[xx];
    int32_t s0 = kHalf, s1 = kHalf, s2 = kHalf;
    for (int x = 0; x < n; ++x) {
      s0 += p[3 * x + 0] * k[x];
      s1 += p[3 * x + 1] * k[x];
      s2 += p[3 * x + 2] * k[x];
    }
    out[3 * xx + 0] = clip8(s0);
    out[3 * xx + 1] = clip8(s1);
    out[3 * xx + 2] = clip8(s2);
  }
}

// The same with the three channels of a pixel in one SSE4.1 register: each tap loads 4 bytes
// (R, G, B and the next pixel's R, whose lane is discarded), widens them to int32 and adds
// pixel * weight: the same integer sums as the scalar loop, so the same bytes. Pixels whose
// 4-byte load would pass `end` (the last pixel of the buffer) take the scalar loop.
template <int K>
[[gnu::target("sse4.1")]] void horizontal_row_sse41(const uint8_t* row, const uint8_t* end,
                                                    const AxisFilter& f, int xx_begin, int out_w,
                                                    uint8_t* out) {
  int xx = xx_begin;
  for (; xx < out_w; ++xx) {
    const uint8_t* p = row + static_cast<size_t>(f.first[xx]) * 3;
    if (p + 3 * K + 1 > end) break;
    const int32_t* k = &f.weights[static_cast<size_t>(xx) * K];
    __m128i acc = _mm_set1_epi32(kHalf);
    for (int x = 0; x < K; ++x) {
      int32_t px;
      std::memcpy(&px, p + 3 * x, 4);
      const __m128i v = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(px));
      acc = _mm_add_epi32(acc, _mm_mullo_epi32(v, _mm_set1_epi32(k[x])));
    }
    // clip8 per lane: shift down, then the saturating packs clamp to [0, 255].
    acc = _mm_srai_epi32(acc, kPrecisionBits);
    const __m128i bytes = _mm_packus_epi16(_mm_packus_epi32(acc, acc), _mm_setzero_si128());
    const uint32_t rgb = static_cast<uint32_t>(_mm_cvtsi128_si32(bytes));
    out[3 * xx + 0] = static_cast<uint8_t>(rgb);
    out[3 * xx + 1] = static_cast<uint8_t>(rgb >> 8);
    out[3 * xx + 2] = static_cast<uint8_t>(rgb >> 16);
  }
  horizontal_row_scalar<K>(row, f, xx, out_w, out);
}

// The pair of output pixels xx, xx + 1 from their sums (lanes 0-2 and 4-6): clip8 per lane
// (shift, saturating packs), then bytes R0 G0 B0 x R1 G1 B1 x to R0 G0 B0 R1 G1 B1: 8 bytes stored
// where the next pair's store overwrites the last two (6 at the row's end).
[[gnu::target("avx2")]] inline void store_pair(__m256i acc, int xx, int out_w, uint8_t* out) {
  acc = _mm256_srai_epi32(acc, kPrecisionBits);
  const __m128i words =
      _mm_packus_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
  const __m128i rgb =
      _mm_shuffle_epi8(_mm_packus_epi16(words, words),
                       _mm_setr_epi8(0, 1, 2, 4, 5, 6, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1));
  if (3 * xx + 8 <= 3 * out_w) {
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + 3 * xx), rgb);
  } else {
    const uint64_t v = static_cast<uint64_t>(_mm_cvtsi128_si64(rgb));
    std::memcpy(out + 3 * xx, &v, 6);
  }
}

// Two output pixels per AVX2 register: lanes 0-3 the first pixel's R, G, B (and a discarded
// fourth byte), lanes 4-7 the second's; the same integer sums as the scalar loop, so the same
// bytes. Pairs whose second 4-byte load would pass `end` and an odd last pixel go to the SSE4.1
// kernel.
template <int K>
[[gnu::target("avx2")]] void horizontal_row_avx2(const uint8_t* row, const uint8_t* end,
                                                 const AxisFilter& f, int xx_begin, int out_w,
                                                 uint8_t* out) {
  int xx = xx_begin;
  for (; xx + 1 < out_w; xx += 2) {
    const uint8_t* p0 = row + static_cast<size_t>(f.first[xx]) * 3;
    const uint8_t* p1 = row + static_cast<size_t>(f.first[xx + 1]) * 3;
    if (p0 + 3 * K + 1 > end || p1 + 3 * K + 1 > end) break;
    const int32_t* w = &f.pairs[static_cast<size_t>(xx / 2) * K * 8];
    __m256i acc = _mm256_set1_epi32(kHalf);
    for (int x = 0; x < K; ++x) {
      int32_t a, b;
      std::memcpy(&a, p0 + 3 * x, 4);
      std::memcpy(&b, p1 + 3 * x, 4);
      const __m256i v =
          _mm256_cvtepu8_epi32(_mm_unpacklo_epi32(_mm_cvtsi32_si128(a), _mm_cvtsi32_si128(b)));
      const __m256i k = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 8 * x));
      acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(v, k));
    }
    store_pair(acc, xx, out_w, out);
  }
  if (xx < out_w) horizontal_row_sse41<K>(row, end, f, xx, out_w, out);
}

// K <= 5 (the common 3- and 5-tap windows: downscales up to 2x): one 16-byte load per output pixel
// covers its whole window (3K <= 15 bytes), the pair's two loads share a register (one per
// 128-bit lane), and each tap's R, G, B come out zero-extended to int32 with one in-lane pshufb
// instead of two 4-byte loads, an unpack and a widen. The same integer sums, so the same bytes.
// Pairs whose 16-byte loads would pass `end` go to horizontal_row_avx2 from there on.
template <int K>
[[gnu::target("avx2")]] void horizontal_row_avx2_window(const uint8_t* row, const uint8_t* end,
                                                        const AxisFilter& f, int out_w,
                                                        uint8_t* out) {
  static_assert(K <= 5, "the window must fit in 16 bytes");
  int xx = 0;
  for (; xx + 1 < out_w; xx += 2) {
    const uint8_t* p0 = row + static_cast<size_t>(f.first[xx]) * 3;
    const uint8_t* p1 = row + static_cast<size_t>(f.first[xx + 1]) * 3;
    if (p0 + 16 > end || p1 + 16 > end) break;
    const __m256i window = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p0))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p1)), 1);
    const int32_t* w = &f.pairs[static_cast<size_t>(xx / 2) * K * 8];
    __m256i acc = _mm256_set1_epi32(kHalf);
    for (int x = 0; x < K; ++x) {
      const char b = static_cast<char>(3 * x);
      const __m256i take = _mm256_setr_epi8(b, -1, -1, -1, static_cast<char>(b + 1), -1, -1, -1,
                                            static_cast<char>(b + 2), -1, -1, -1, -1, -1, -1, -1, b,
                                            -1, -1, -1, static_cast<char>(b + 1), -1, -1, -1,
                                            static_cast<char>(b + 2), -1, -1, -1, -1, -1, -1, -1);
      const __m256i v = _mm256_shuffle_epi8(window, take);
      const __m256i k = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 8 * x));
      acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(v, k));
    }
    store_pair(acc, xx, out_w, out);
  }
  if (xx < out_w) horizontal_row_avx2<K>(row, end, f, xx, out_w, out);
}

// Dispatches on the kernel size (scale <= 1 gives 3 taps, <= 2 five, <= 3 seven: RandomResizedCrop
// to 224 from ImageNet-sized images is almost always 3, 5 or 7) and on SSE4.1. `end` is the end of
// the buffer that `row` lies in.
void horizontal_row(const uint8_t* row, const uint8_t* end, const AxisFilter& f, int out_w,
                    uint8_t* out) {
  static const bool sse41 = __builtin_cpu_supports("sse4.1");
  const int k = f.fixed ? f.ksize : 0;
  if (!f.pairs.empty()) {
    switch (k) {
      case 3:
        return horizontal_row_avx2_window<3>(row, end, f, out_w, out);
      case 5:
        return horizontal_row_avx2_window<5>(row, end, f, out_w, out);
      case 7:
        return horizontal_row_avx2<7>(row, end, f, 0, out_w, out);
      case 9:
        return horizontal_row_avx2<9>(row, end, f, 0, out_w, out);
      case 11:
        return horizontal_row_avx2<11>(row, end, f, 0, out_w, out);
      default:
        break;
    }
  }
  if (sse41) {
    switch (k) {
      case 3:
        return horizontal_row_sse41<3>(row, end, f, 0, out_w, out);
      case 5:
        return horizontal_row_sse41<5>(row, end, f, 0, out_w, out);
      case 7:
        return horizontal_row_sse41<7>(row, end, f, 0, out_w, out);
      case 9:
        return horizontal_row_sse41<9>(row, end, f, 0, out_w, out);
      case 11:
        return horizontal_row_sse41<11>(row, end, f, 0, out_w, out);
      default:
        break;
    }
  }
  switch (k) {
    case 3:
      return horizontal_row_scalar<3>(row, f, 0, out_w, out);
    case 5:
      return horizontal_row_scalar<5>(row, f, 0, out_w, out);
    case 7:
      return horizontal_row_scalar<7>(row, f, 0, out_w, out);
    default:
      return horizontal_row_scalar<0>(row, f, 0, out_w, out);
  }
}

// One output row `yy` of the vertical pass over rows of n bytes at `stride` (row 0 = the filter's
// input row `first_row`). The taps are the outer loop so the inner loop runs contiguously over the
// row and vectorises; `acc` is scratch of n int32.
void vertical_row_generic(const uint8_t* rows, size_t stride, int first_row, int n,
                          const AxisFilter& f, int yy, int32_t* acc, uint8_t* out) {
  std::fill(acc, acc + n, kHalf);
  const int32_t* k = &f.weights[static_cast<size_t>(yy) * f.ksize];
  const int ymin = f.first[yy] - first_row;
  for (int y = 0, taps = f.count[yy]; y < taps; ++y) {
    const uint8_t* row = rows + (ymin + y) * stride;
    const int32_t w = k[y];
    for (int i = 0; i < n; ++i) acc[i] += row[i] * w;
  }
  for (int i = 0; i < n; ++i) out[i] = clip8(acc[i]);
}

// Eight bytes at p as eight int32.
[[gnu::target("avx2")]] inline __m256i widen8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// The same sums with AVX2, 32 bytes of the row at a time in four registers of eight int32 and the
// taps inside, so the accumulators stay in registers (the generic loop stores them once per tap);
// then clip8 per lane (shift, saturating packs) and the packs' lane order undone.
[[gnu::target("avx2")]] void vertical_row_avx2(const uint8_t* rows, size_t stride, int first_row,
                                               int n, const AxisFilter& f, int yy, int32_t* acc,
                                               uint8_t* out) {
  const int32_t* k = &f.weights[static_cast<size_t>(yy) * f.ksize];
  const int ymin = f.first[yy] - first_row, taps = f.count[yy];
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  int i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i a0 = _mm256_set1_epi32(kHalf), a1 = a0, a2 = a0, a3 = a0;
    for (int y = 0; y < taps; ++y) {
      const uint8_t* r = rows + (ymin + y) * stride + i;
      const __m256i w = _mm256_set1_epi32(k[y]);
      a0 = _mm256_add_epi32(a0, _mm256_mullo_epi32(widen8(r), w));
      a1 = _mm256_add_epi32(a1, _mm256_mullo_epi32(widen8(r + 8), w));
      a2 = _mm256_add_epi32(a2, _mm256_mullo_epi32(widen8(r + 16), w));
      a3 = _mm256_add_epi32(a3, _mm256_mullo_epi32(widen8(r + 24), w));
    }
    a0 = _mm256_srai_epi32(a0, kPrecisionBits);
    a1 = _mm256_srai_epi32(a1, kPrecisionBits);
    a2 = _mm256_srai_epi32(a2, kPrecisionBits);
    a3 = _mm256_srai_epi32(a3, kPrecisionBits);
    const __m256i packed =
        _mm256_packus_epi16(_mm256_packus_epi32(a0, a1), _mm256_packus_epi32(a2, a3));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm256_permutevar8x32_epi32(packed, order));
  }
  if (i < n) vertical_row_generic(rows + i, stride, first_row, n - i, f, yy, acc, out + i);
}

void vertical_row(const uint8_t* rows, size_t stride, int first_row, int n, const AxisFilter& f,
                  int yy, int32_t* acc, uint8_t* out) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return vertical_row_avx2(rows, stride, first_row, n, f, yy, acc, out);
  vertical_row_generic(rows, stride, first_row, n, f, yy, acc, out);
}

// Writes one finished row of interleaved uint8 RGB into the three float planes through the
// normalisation tables, mirrored if asked.
// ToTensor divides by 255 in float32, Normalize subtracts the mean and divides by the std in
// float32: the same three IEEE operations per value give bit-identical floats, whether from the
// table (scalar tail) or computed eight lanes at a time (AVX2: no FMA, no reciprocal).
struct Normalize {
  float lut[3][256];
  std::array<float, 3> mean, std;
  Normalize(const std::array<float, 3>& m, const std::array<float, 3>& s) : mean(m), std(s) {
    for (int c = 0; c < 3; ++c)
      for (int v = 0; v < 256; ++v) lut[c][v] = (static_cast<float>(v) / 255.0f - m[c]) / s[c];
  }
};

void emit_pixels_scalar(const uint8_t* rgb, int x_begin, int out_w, bool flip, const Normalize& nz,
                        float* r, float* g, float* b) {
  for (int x = x_begin; x < out_w; ++x) {
    const int o = flip ? out_w - 1 - x : x;
    r[o] = nz.lut[0][rgb[3 * x + 0]];
    g[o] = nz.lut[1][rgb[3 * x + 1]];
    b[o] = nz.lut[2][rgb[3 * x + 2]];
  }
}

// Eight interleaved RGB pixels (24 bytes) at a time: pshufb gathers each channel's 8 bytes from a
// 16-byte and an 8-byte load, then widen, convert and normalise; a flipped row stores the lanes
// reversed at the mirrored position. Returns the first pixel left to the scalar tail.
[[gnu::target("avx2")]] int emit_pixels_avx2(const uint8_t* rgb, int out_w, bool flip,
                                             const Normalize& nz, float* r, float* g, float* b) {
  const __m128i lo_mask[3] = {
      _mm_setr_epi8(0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1),
      _mm_setr_epi8(1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1),
      _mm_setr_epi8(2, 5, 8, 11, 14, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1)};
  const __m128i hi_mask[3] = {
      _mm_setr_epi8(-1, -1, -1, -1, -1, -1, 2, 5, -1, -1, -1, -1, -1, -1, -1, -1),
      _mm_setr_epi8(-1, -1, -1, -1, -1, 0, 3, 6, -1, -1, -1, -1, -1, -1, -1, -1),
      _mm_setr_epi8(-1, -1, -1, -1, -1, 1, 4, 7, -1, -1, -1, -1, -1, -1, -1, -1)};
  const __m256 k255 = _mm256_set1_ps(255.0f);
  const __m256i reverse = _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0);
  __m256 mean[3], sd[3];
  for (int c = 0; c < 3; ++c) {
    mean[c] = _mm256_set1_ps(nz.mean[c]);
    sd[c] = _mm256_set1_ps(nz.std[c]);
  }
  float* planes[3] = {r, g, b};
  int x = 0;
  for (; x + 8 <= out_w; x += 8) {
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rgb + 3 * x));
    const __m128i hi = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(rgb + 3 * x + 16));
    for (int c = 0; c < 3; ++c) {
      const __m128i v =
          _mm_or_si128(_mm_shuffle_epi8(lo, lo_mask[c]), _mm_shuffle_epi8(hi, hi_mask[c]));
      const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
      __m256 y = _mm256_div_ps(_mm256_sub_ps(_mm256_div_ps(f, k255), mean[c]), sd[c]);
      if (flip) {
        y = _mm256_permutevar8x32_ps(y, reverse);
        _mm256_storeu_ps(planes[c] + (out_w - 8 - x), y);
      } else {
        _mm256_storeu_ps(planes[c] + x, y);
      }
    }
  }
  return x;
}

// One output row of uint8 RGB into the three float planes, flipped if asked.
void emit_row(const uint8_t* rgb, int out_w, int yy, bool flip, const Normalize& nz, size_t plane,
              float* out) {
  float* r = out + static_cast<size_t>(yy) * out_w;
  float* g = r + plane;
  float* b = g + plane;
  static const bool avx2 = __builtin_cpu_supports("avx2");
  const int done = avx2 ? emit_pixels_avx2(rgb, out_w, flip, nz, r, g, b) : 0;
  emit_pixels_scalar(rgb, done, out_w, flip, nz, r, g, b);
}

}  // namespace

void check_crop_box(const CropBox& box, int width, int height) {
  if (box.width <= 0 || box.height <= 0 || box.left < 0 || box.top < 0 ||
      box.left + box.width > width || box.top + box.height > height)
    throw UsageError("crop box (top " + std::to_string(box.top) + ", left " +
                     std::to_string(box.left) + ", " + std::to_string(box.height) + "x" +
                     std::to_string(box.width) + ") is not inside the " + std::to_string(width) +
                     "x" + std::to_string(height) + " image");
}

void crop_resize_normalize(const RgbImage& src, const CropBox& box, int out_h, int out_w, bool flip,
                           float* out, const std::array<float, 3>& mean,
                           const std::array<float, 3>& std) {
  check_crop_box(box, src.width, src.height);
  if (out_h <= 0 || out_w <= 0)
    throw UsageError("output size " + std::to_string(out_h) + "x" + std::to_string(out_w) +
                     " must be positive");
  if (src.pixels.size() < static_cast<size_t>(src.width) * src.height * 3)
    throw UsageError("image pixel buffer holds fewer than width*height*3 bytes");

  const Normalize nz(mean, std);

  const size_t src_stride = static_cast<size_t>(src.width) * 3;
  const uint8_t* crop =
      src.pixels.data() + box.top * src_stride + static_cast<size_t>(box.left) * 3;
  const size_t plane = static_cast<size_t>(out_h) * out_w;
  // Pillow's ImagingResampleInner skips a pass whose axis keeps its size (the box is the whole
  // cropped image), so an identity resize returns the crop's pixels unchanged.
  const bool need_horizontal = out_w != box.width;
  const bool need_vertical = out_h != box.height;
  if (!need_horizontal && !need_vertical) {
    for (int yy = 0; yy < out_h; ++yy)
      emit_row(crop + yy * src_stride, out_w, yy, flip, nz, plane, out);
    return;
  }
  // Pillow 13 (python-pillow/Pillow#9549) runs the vertical pass first when the height shrinks by
  // more than twice as many pixels as the width; otherwise horizontal first. The order changes
  // the intermediate uint8 rounding, so it is followed exactly.
  const bool vertical_first = need_horizontal && need_vertical && out_h < box.height &&
                              box.height - out_h > 2 * (box.width - out_w);
  const AxisFilter fv = bilinear_axis(box.height, out_h);
  AxisFilter fh = need_horizontal ? bilinear_axis(box.width, out_w) : AxisFilter{};
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2 && fh.fixed && fh.ksize <= 11 && fh.ksize % 2 == 1) make_pairs(fh, out_w);
  // Scratch kept per thread and only grown: a loader worker resamples image after image, and a
  // fresh ~200 KB intermediate per image was allocated, cleared and often page-faulted in.
  thread_local std::vector<uint8_t> line, tmp;
  thread_local std::vector<int32_t> acc;
  const auto grow = [](auto& v, size_t n) {
    if (v.size() < n) v.resize(n);
  };
  grow(line, static_cast<size_t>(out_w) * 3);

  if (vertical_first) {
    // (out_h, box.width, 3) after the vertical pass, then each row resampled horizontally.
    const int n = box.width * 3;
    grow(acc, static_cast<size_t>(n));
    grow(tmp, static_cast<size_t>(out_h) * n);
    for (int yy = 0; yy < out_h; ++yy)
      vertical_row(crop, src_stride, 0, n, fv, yy, acc.data(),
                   tmp.data() + static_cast<size_t>(yy) * n);
    for (int yy = 0; yy < out_h; ++yy) {
      horizontal_row(tmp.data() + static_cast<size_t>(yy) * n, tmp.data() + tmp.size(), fh, out_w,
                     line.data());
      emit_row(line.data(), out_w, yy, flip, nz, plane, out);
    }
    return;
  }

  // Horizontal first, over only the rows of the crop that the vertical pass reads.
  const int row_first = need_vertical ? fv.first.front() : 0;
  const int row_last = need_vertical ? fv.first.back() + fv.count.back() : box.height;
  const uint8_t* rows = crop + row_first * src_stride;
  size_t rows_stride = src_stride;
  if (need_horizontal) {
    rows_stride = static_cast<size_t>(out_w) * 3;
    grow(tmp, static_cast<size_t>(row_last - row_first) * rows_stride);
    for (int y = row_first; y < row_last; ++y)
      horizontal_row(crop + y * src_stride, src.pixels.data() + src.pixels.size(), fh, out_w,
                     tmp.data() + (y - row_first) * rows_stride);
    rows = tmp.data();
  }
  if (!need_vertical) {
    for (int yy = 0; yy < out_h; ++yy)
      emit_row(rows + yy * rows_stride, out_w, yy, flip, nz, plane, out);
    return;
  }
  const int n = out_w * 3;
  grow(acc, static_cast<size_t>(n));
  for (int yy = 0; yy < out_h; ++yy) {
    vertical_row(rows, rows_stride, row_first, n, fv, yy, acc.data(), line.data());
    emit_row(line.data(), out_w, yy, flip, nz, plane, out);
  }
}

// Resize(resize) maps the shorter side to `resize` and the longer to int(resize * long / short)
// (torchvision's _compute_resized_output_size); CenterCrop(out) then takes rows and columns from
// round((new - out) / 2). Mapped back to source pixels with each axis's scale, rounded: one
// resample of that box approximates the two resamples of torchvision's evaluation transform.
CropBox center_crop_box(int width, int height, int resize, int out) {
  if (width <= 0 || height <= 0 || resize <= 0 || out <= 0 || out > resize)
    throw UsageError("center crop: need image, resize and crop sizes > 0 and crop " +
                     std::to_string(out) + " <= resize " + std::to_string(resize));
  const int short_side = std::min(width, height), long_side = std::max(width, height);
  const int new_long = static_cast<int>(static_cast<double>(resize) * long_side / short_side);
  const int new_w = width <= height ? resize : new_long;
  const int new_h = width <= height ? new_long : resize;
  const double sx = static_cast<double>(width) / new_w, sy = static_cast<double>(height) / new_h;
  const auto fit = [](double start, double size, int limit, int& pos, int& len) {
    len = std::clamp(static_cast<int>(std::nearbyint(size)), 1, limit);
    pos = std::clamp(static_cast<int>(std::nearbyint(start)), 0, limit - len);
  };
  CropBox box;
  fit(std::nearbyint((new_h - out) / 2.0) * sy, out * sy, height, box.top, box.height);
  fit(std::nearbyint((new_w - out) / 2.0) * sx, out * sx, width, box.left, box.width);
  return box;
}

}  // namespace dtune::data
