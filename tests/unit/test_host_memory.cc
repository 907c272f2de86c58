// The one host-memory check (core/host_memory.h): the node's need is the per-rank need times the
// ranks on it, saturating instead of wrapping, compared with what the node has available.
#include <gtest/gtest.h>

#include <cstdint>

#include "core/error.h"
#include "core/host_memory.h"

namespace dtune {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

TEST(HostMemory, FitsWhenTheRanksTogetherFit) {
  EXPECT_NO_THROW(refuse_unless_fits(4 * kGiB, 2, 8 * kGiB, "node0", "--batch 4", "lower --batch"));
  // An unknown MemAvailable (0) is no limit.
  EXPECT_NO_THROW(refuse_unless_fits(UINT64_MAX, 2, 0, "node0", "--batch 4", "lower --batch"));
}

TEST(HostMemory, RefusedWhenTheRanksTogetherDoNotFitWithOneLineNamingTheFix) {
  try {
    refuse_unless_fits(4 * kGiB + 1, 2, 8 * kGiB, "node0", "--batch 4", "lower --batch");
    FAIL() << "not refused";
  } catch (const UsageError& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    for (const char* w :
         {"--batch 4 needs 4.0 GiB of host memory per rank", "for the 2 rank(s) on node0",
          "8.0 GiB is available there: lower --batch"})
      EXPECT_NE(m.find(w), std::string::npos) << w << " not in " << m;
  }
}

TEST(HostMemory, ANeedNear2To64TimesTheRanksDoesNotWrapRound) {
  // 2^63 per rank on 4 ranks wraps to 0 in 64-bit arithmetic, which would pass.
  EXPECT_THROW(refuse_unless_fits(1ull << 63, 4, 8 * kGiB, "n", "x", "y"), UsageError);
  EXPECT_THROW(refuse_unless_fits(UINT64_MAX / 3 + 1, 3, UINT64_MAX - 1, "n", "x", "y"),
               UsageError);
}

TEST(HostMemory, FormatBytes) {
  EXPECT_EQ(format_bytes(100), "100 B");
  EXPECT_EQ(format_bytes(12 * 1024), "12.0 KiB");
  EXPECT_EQ(format_bytes(3 * kGiB / 2), "1.5 GiB");
}

}  // namespace
}  // namespace dtune
