// busbw factors of every collective as nccl-tests defines them (its doc/PERFORMANCE.md and the
// GetBw of each src/*.cu; derived in doc/metrics.md), for n = 2, 3, 4, 8, and the algbw unit
// (GB/s = 1e9 B/s).
#include <gtest/gtest.h>

#include "benchmarks/comm/bandwidth.h"
#include "benchmarks/comm/types.h"

namespace dtune::comm {
namespace {

TEST(Bandwidth, BusbwFactorsMatchNcclTests) {
  for (int n : {2, 3, 4, 8}) {
    const double d = n;
    EXPECT_DOUBLE_EQ(busbw_factor(Collective::kAllreduce, n), 2 * (d - 1) / d) << n;
    EXPECT_DOUBLE_EQ(busbw_factor(Collective::kReduceScatter, n), (d - 1) / d) << n;
    EXPECT_DOUBLE_EQ(busbw_factor(Collective::kAllgather, n), (d - 1) / d) << n;
    EXPECT_DOUBLE_EQ(busbw_factor(Collective::kAlltoall, n), (d - 1) / d) << n;
    EXPECT_DOUBLE_EQ(busbw_factor(Collective::kBroadcast, n), 1.0) << n;
    EXPECT_DOUBLE_EQ(busbw_factor(Collective::kReduce, n), 1.0) << n;
    EXPECT_DOUBLE_EQ(busbw_factor(Collective::kSendrecv, n), 1.0) << n;
  }
  // Spot values: allreduce on 8 ranks moves 1.75 S per link; allgather on 4, 0.75 S.
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kAllreduce, 8), 1.75);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kAllgather, 4), 0.75);
}

TEST(Bandwidth, AlgbwUnits) {
  // 1 GB in 1 s = 1 GB/s; 64 MiB in 1000 us = 67.108864 GB/s.
  EXPECT_DOUBLE_EQ(algbw_gbps(1e9, 1e6), 1.0);
  EXPECT_NEAR(algbw_gbps(64.0 * (1 << 20), 1000.0), 67.108864, 1e-9);
  EXPECT_NEAR(busbw_gbps(Collective::kAllreduce, 4, 64.0 * (1 << 20), 1000.0), 67.108864 * 1.5,
              1e-9);
  EXPECT_EQ(algbw_gbps(8, 0), 0.0);
}

TEST(Shapes, SizesAndCountsAsNcclTests) {
  // allreduce: count = size / dtype size.
  OpShape s = make_shape(Collective::kAllreduce, Dtype::kFloat32, ReduceOp::kSum, 0, 4, 1024);
  EXPECT_EQ(s.count, 256u);
  EXPECT_EQ(s.bytes, 1024u);
  EXPECT_FALSE(s.rounded());
  // allgather: size is the total output; each rank sends size / n.
  s = make_shape(Collective::kAllgather, Dtype::kFloat32, ReduceOp::kSum, 0, 4, 1024);
  EXPECT_EQ(s.count, 64u);
  EXPECT_EQ(s.send_count, 64u);
  EXPECT_EQ(s.recv_count, 256u);
  // reduce_scatter on 3 ranks: 1024 B of float = 256 elements, rounded down to 255.
  s = make_shape(Collective::kReduceScatter, Dtype::kFloat32, ReduceOp::kSum, 0, 3, 1024);
  EXPECT_EQ(s.count, 85u);
  EXPECT_EQ(s.send_count, 255u);
  EXPECT_EQ(s.bytes, 1020u);
  EXPECT_TRUE(s.rounded());
  // alltoall: count per peer.
  s = make_shape(Collective::kAlltoall, Dtype::kFloat16, ReduceOp::kSum, 0, 2, 64);
  EXPECT_EQ(s.count, 16u);
  EXPECT_EQ(s.send_count, 32u);
  EXPECT_EQ(s.root, -1);
  EXPECT_EQ(make_shape(Collective::kBroadcast, Dtype::kInt32, ReduceOp::kSum, 1, 2, 64).root, 1);
}

TEST(Names, ParseAcceptsNcclTestsNames) {
  EXPECT_EQ(parse_dtype("float", "-d"), Dtype::kFloat32);
  EXPECT_EQ(parse_dtype("half", "-d"), Dtype::kFloat16);
  EXPECT_EQ(parse_dtype("double", "-d"), Dtype::kFloat64);
  EXPECT_EQ(parse_dtype("bfloat16", "-d"), Dtype::kBfloat16);
  EXPECT_EQ(parse_collective("reduce_scatter", "--collective"), Collective::kReduceScatter);
  EXPECT_EQ(parse_op("avg", "-o"), ReduceOp::kAvg);
  EXPECT_THROW(parse_dtype("float8", "-d"), std::exception);
  EXPECT_THROW(parse_op("xor", "-o"), std::exception);
}

}  // namespace
}  // namespace dtune::comm
