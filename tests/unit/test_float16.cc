// fp16 and bf16 conversions: exact values round-trip, ties round to even, specials survive.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/float16.h"

namespace dtune {
namespace {

TEST(Half, KnownEncodings) {
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);                // rounds to infinity
  EXPECT_EQ(float_to_half(5.960464477539063e-08f), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_half(1.0f + 1.0f / 2048), 0x3c00);      // tie -> even
  EXPECT_EQ(float_to_half(1.0f + 3.0f / 2048), 0x3c02);      // tie -> even (up)
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(half_to_float(0x7c00), std::numeric_limits<float>::infinity());
}

TEST(Half, AllFiniteValuesRoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;  // inf / NaN
    EXPECT_EQ(float_to_half(half_to_float(static_cast<uint16_t>(h))), h) << std::hex << h;
  }
}

TEST(Bfloat16, KnownEncodingsAndRoundTrip) {
  EXPECT_EQ(float_to_bfloat16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bfloat16(-3.0f), 0xc040);
  EXPECT_EQ(float_to_bfloat16(1.0f + 1.0f / 256), 0x3f80);  // tie -> even
  EXPECT_EQ(float_to_bfloat16(1.0f + 3.0f / 256), 0x3f82);  // tie -> even (up)
  for (uint32_t b = 0; b < 0x10000; ++b) {
    if ((b & 0x7f80) == 0x7f80) continue;
    EXPECT_EQ(float_to_bfloat16(bfloat16_to_float(static_cast<uint16_t>(b))), b) << std::hex << b;
  }
  for (int i = -256; i <= 256; ++i) EXPECT_EQ(bfloat16_to_float(float_to_bfloat16(i)), i);
}

}  // namespace
}  // namespace dtune
