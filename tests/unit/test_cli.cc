// Size parsing: nccl-tests' K/M/G are powers of two; bad sizes are usage errors naming the flag.
#include <gtest/gtest.h>

#include "core/cli.h"
#include "core/error.h"

namespace dtune {
namespace {

TEST(ParseSize, PlainAndSuffixes) {
  EXPECT_EQ(parse_size("8", "-b"), 8u);
  EXPECT_EQ(parse_size("64K", "-b"), 65536u);
  EXPECT_EQ(parse_size("64k", "-b"), 65536u);
  EXPECT_EQ(parse_size("64KB", "-b"), 65536u);
  EXPECT_EQ(parse_size("1M", "-b"), 1u << 20);
  EXPECT_EQ(parse_size("1MiB", "-b"), 1u << 20);
  EXPECT_EQ(parse_size("2G", "-b"), 2ull << 30);
  EXPECT_EQ(parse_size("0", "-i", /*allow_zero=*/true), 0u);
}

TEST(ParseSize, RejectsMalformed) {
  for (const char* bad : {"", "M", "-8", "8X", "1.5M", "8 M", "0", "99999999999G"}) {
    try {
      parse_size(bad, "-b/--minbytes");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("-b/--minbytes"), std::string::npos) << e.what();
    }
  }
}

TEST(FormatSize, InverseOfParse) {
  EXPECT_EQ(format_size(65536), "64K");
  EXPECT_EQ(format_size(3 << 20), "3M");
  EXPECT_EQ(format_size(1000), "1000");
  for (const char* s : {"8", "64K", "1M", "2G"}) EXPECT_EQ(format_size(parse_size(s, "-b")), s);
}

TEST(CommandLine, QuotesWhatNeedsIt) {
  const char* argv[] = {"dtune-comm", "-b", "8", "--output", "my file.h5", "it's"};
  EXPECT_EQ(join_command_line(6, const_cast<char**>(argv)),
            "dtune-comm -b 8 --output 'my file.h5' 'it'\\''s'");
}

}  // namespace
}  // namespace dtune
