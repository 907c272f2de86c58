// The option enums' name tables: each name parses back to its value and is what to_string writes
// (the command line and the results file agree), and the names are the documented ones.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "train/config.h"

namespace dtune::train {
namespace {

template <class E, std::size_t N>
void expect_round_trip(const EnumName<E> (&table)[N], const std::vector<std::string>& documented) {
  EXPECT_EQ(enum_names(table), documented);
  std::set<std::string> seen;
  for (const auto& e : table) {
    EXPECT_TRUE(seen.insert(std::string(e.name)).second) << "duplicate name " << e.name;
    EXPECT_EQ(enum_value(table, e.name), e.value) << e.name;
    EXPECT_EQ(to_string(e.value), e.name);
  }
}

TEST(OptionNames, EveryTableRoundTripsAndMatchesTheSchema) {
  expect_round_trip(kPrecisionNames, {"fp32", "tf32", "fp16", "bf16"});
  expect_round_trip(kWeightsDtypeNames, {"fp32", "bf16"});
  expect_round_trip(kOptimizerNames, {"sgd", "adamw"});
  expect_round_trip(kBackendNames, {"mpi", "nccl"});
  expect_round_trip(kOverlapNames, {"on", "off"});
  expect_round_trip(kCompressionNames, {"none", "fp16", "bf16"});
  expect_round_trip(kDeviceNames, {"cpu", "cuda"});
  expect_round_trip(kScheduleNames, {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"});
  expect_round_trip(kPipelineLayoutNames, {"within-node", "across-nodes"});
  expect_round_trip(kPartitionNames, {"flops", "measured"});
}

}  // namespace
}  // namespace dtune::train
