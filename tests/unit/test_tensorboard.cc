// TFRecord checksums: CRC-32C of the standard check string, and the TFRecord mask.
#include <gtest/gtest.h>

#include <cstring>

#include "train/telemetry/tensorboard.h"

namespace dtune {
namespace {

TEST(Crc32c, CheckValue) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the CRC-32C check value
  EXPECT_EQ(crc32c("", 0), 0u);
}

TEST(Crc32c, MaskAsTfRecord) {
  const uint32_t c = crc32c("abc", 3);
  EXPECT_EQ(masked_crc32c("abc", 3), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

}  // namespace
}  // namespace dtune
