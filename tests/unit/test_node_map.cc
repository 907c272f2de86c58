// Node identity from gathered keys: nodes numbered by first appearance, local ranks in rank order,
// a host name shared by two machines (different boot ids) is two nodes; and the set-up timeout
// read before the options are parsed.
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/main_guard.h"
#include "core/node_map.h"

namespace dtune {
namespace {

TEST(NodeMap, NodesByFirstAppearanceLocalRanksInRankOrder) {
  // Ranks 0 and 2 on a, 1 and 3 on b (a round-robin placement), 4 alone on c.
  const std::vector<std::string> keys = {"a boot1", "b boot1", "a boot1", "b boot1", "c boot2"};
  const int want_node[] = {0, 1, 0, 1, 2}, want_local[] = {0, 0, 1, 1, 0};
  const int want_size[] = {2, 2, 2, 2, 1};
  for (int r = 0; r < 5; ++r) {
    const NodeMap m = node_map_from_keys(keys, r);
    EXPECT_EQ(m.rank_node, (std::vector<int>{0, 1, 0, 1, 2}));
    EXPECT_EQ(m.node_host, (std::vector<std::string>{"a", "b", "c"}));
    EXPECT_EQ(m.node_count(), 3);
    EXPECT_EQ(m.node, want_node[r]) << r;
    EXPECT_EQ(m.local_rank, want_local[r]) << r;
    EXPECT_EQ(m.local_size, want_size[r]) << r;
  }
}

TEST(NodeMap, SameHostNameOnTwoMachinesIsTwoNodes) {
  const NodeMap m = node_map_from_keys({"gpu01 x", "gpu01 y", "gpu01 x"}, 2);
  EXPECT_EQ(m.rank_node, (std::vector<int>{0, 1, 0}));
  EXPECT_EQ(m.node_host, (std::vector<std::string>{"gpu01", "gpu01"}));
  EXPECT_EQ(m.local_rank, 1);
  EXPECT_EQ(m.local_size, 2);
}

TEST(NodeMap, OwnKeyHasHostAndBootId) {
  const std::string k = node_key();
  ASSERT_NE(k.find(' '), std::string::npos);
  EXPECT_GT(k.size() - k.find(' '), 30u);  // a boot id is a 36-character UUID
}

TEST(SetupTimeout, FlagThenEnvironmentThenDefault) {
  auto timeout = [](std::vector<std::string> args) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    return setup_timeout_s(static_cast<int>(argv.size()), argv.data(), "dtune-comm");
  };
  unsetenv("DTUNE_COMM_TIMEOUT");
  EXPECT_EQ(timeout({"dtune-comm"}), 300);
  EXPECT_EQ(timeout({"dtune-comm", "--timeout", "10"}), 10);
  EXPECT_EQ(timeout({"dtune-comm", "--timeout=2.5", "-b", "8"}), 2.5);
  EXPECT_EQ(timeout({"dtune-comm", "--timeout", "soon"}), 300);  // the parser refuses it later
  EXPECT_EQ(timeout({"dtune-comm", "--timeout", "-1"}), 300);
  setenv("DTUNE_COMM_TIMEOUT", "42", 1);
  EXPECT_EQ(timeout({"dtune-comm"}), 42);
  EXPECT_EQ(timeout({"dtune-comm", "--timeout", "7"}), 7);  // the flag wins, as in the parser
  unsetenv("DTUNE_COMM_TIMEOUT");
}

}  // namespace
}  // namespace dtune
