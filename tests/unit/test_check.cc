// The correctness check's CPU reference: a simulated collective (the reference applied by hand
// to every rank's input images) has zero wrong elements, and one changed element is caught.
#include <gtest/gtest.h>

#include <cstring>

#include "benchmarks/comm/check.h"

namespace dtune::comm {
namespace {

// Allreduce simulated on the host: element-wise sum of every rank's input.
std::vector<uint8_t> simulated_allreduce(const OpShape& s) {
  std::vector<uint8_t> out(s.recv_count * dtype_size(s.dtype));
  for (size_t i = 0; i < s.count; ++i) {
    double acc = 0;
    for (int r = 0; r < s.nranks; ++r) acc += input_value(s, r, i);
    store_element(s.dtype, out.data(), i, acc);
  }
  return out;
}

TEST(Check, ExactSumIsRightInEveryDtype) {
  for (Dtype d : all_dtypes()) {
    const OpShape s = make_shape(Collective::kAllreduce, d, ReduceOp::kSum, 0, 8, 4096);
    std::vector<uint8_t> result = simulated_allreduce(s);
    EXPECT_EQ(count_wrong(s, Placement::kOutOfPlace, 3, result, 0), 0) << to_string(d);
    store_element(d, result.data(), 17, load_element(d, result.data(), 17) + 1);
    EXPECT_EQ(count_wrong(s, Placement::kOutOfPlace, 3, result, 0), 1) << to_string(d);
  }
}

TEST(Check, UntouchedReceiveBufferIsAllWrong) {
  const OpShape s = make_shape(Collective::kAllgather, Dtype::kBfloat16, ReduceOp::kSum, 0, 4, 256);
  const CheckImages img = make_check_images(s, Placement::kOutOfPlace, 1, false);
  EXPECT_EQ(count_wrong(s, Placement::kOutOfPlace, 1, img.recv, 0),
            static_cast<int64_t>(s.recv_count));
}

TEST(Check, InPlaceAllgatherInputSitsAtRankSlice) {
  const OpShape s = make_shape(Collective::kAllgather, Dtype::kInt32, ReduceOp::kSum, 0, 4, 256);
  const CheckImages img = make_check_images(s, Placement::kInPlace, 2, false);
  EXPECT_TRUE(img.send.empty());
  for (size_t i = 0; i < s.count; ++i)
    EXPECT_EQ(load_element(s.dtype, img.recv.data(), 2 * s.count + i), input_value(s, 2, i));
}

TEST(Check, PlantedWrongChangesOneInput) {
  const OpShape s = make_shape(Collective::kAllreduce, Dtype::kFloat32, ReduceOp::kSum, 0, 2, 64);
  const CheckImages good = make_check_images(s, Placement::kOutOfPlace, 0, false);
  const CheckImages bad = make_check_images(s, Placement::kOutOfPlace, 0, true);
  EXPECT_NE(std::memcmp(good.send.data(), bad.send.data(), 4), 0);
  EXPECT_EQ(std::memcmp(good.send.data() + 4, bad.send.data() + 4, good.send.size() - 4), 0);
}

}  // namespace
}  // namespace dtune::comm
