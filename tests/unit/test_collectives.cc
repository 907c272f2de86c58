// The collective table and the enum name tables. A collective dtune does not have (nccl-tests'
// gather, src/gather.cu) is added as one row, and the shape, busbw, name and check machinery work
// for it with no other change; every enum's names round-trip through its one table.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "benchmarks/comm/bandwidth.h"
#include "benchmarks/comm/check.h"
#include "benchmarks/comm/collectives.h"
#include "benchmarks/comm/types.h"

namespace dtune::comm {
namespace {

constexpr Collective kGather = static_cast<Collective>(100);

// nccl-tests' src/gather.cu as one row: each rank sends count = size / n elements, the root
// receives every rank's block in rank order; in-place the input is this rank's slice of the
// output; busbw factor (n-1)/n; only the root holds a result.
const CollectiveSpec& gather_row() {
  static const CollectiveSpec& row = add_collective({
      .value = kGather,
      .name = "gather",
      .rooted = true,
      .counts =
          [](size_t elems, size_t n) {
            const size_t c = elems / n;
            return Counts{c, c, c * n, c, 0};
          },
      .busbw_factor = [](double n) { return (n - 1) / n; },
      .expected =
          [](const OpShape& s, int, size_t i) {
            return input_value(s, static_cast<int>(i / s.count), i % s.count);
          },
      .result_ranks = ResultRanks::kRootOnly,
  });
  return row;
}

// The root's receive buffer after a correct gather, computed here from the inputs alone.
std::vector<uint8_t> simulated_gather(const OpShape& s) {
  std::vector<uint8_t> out(s.recv_count * dtype_size(s.dtype));
  for (int r = 0; r < s.nranks; ++r)
    for (size_t i = 0; i < s.count; ++i)
      store_element(s.dtype, out.data(), static_cast<size_t>(r) * s.count + i,
                    input_value(s, r, i));
  return out;
}

TEST(CollectiveTable, MadeUpCollectiveNeedsOneRow) {
  const CollectiveSpec& row = gather_row();
  EXPECT_EQ(&collective_spec(kGather), &row);
  // Names: parsed (any case), printed, and part of "all".
  EXPECT_EQ(parse_collective("GATHER", "--collective"), kGather);
  EXPECT_EQ(to_string(kGather), "gather");
  const auto all = all_collectives();
  EXPECT_NE(std::find(all.begin(), all.end(), kGather), all.end());
  EXPECT_TRUE(is_rooted(kGather));
  EXPECT_FALSE(is_reduction(kGather));

  // Shape: 1000 B of float on 4 ranks = 250 elements, 62 per rank, 992 B.
  const OpShape s = make_shape(kGather, Dtype::kFloat32, ReduceOp::kSum, 1, 4, 1000);
  EXPECT_EQ(s.count, 62u);
  EXPECT_EQ(s.send_count, 62u);
  EXPECT_EQ(s.recv_count, 248u);
  EXPECT_EQ(s.bytes, 992u);
  EXPECT_TRUE(s.rounded());
  EXPECT_EQ(s.root, 1);
  EXPECT_EQ(s.send_in_place_offset, 62u);

  // busbw: (n-1)/n.
  EXPECT_DOUBLE_EQ(busbw_factor(kGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(busbw_gbps(kGather, 8, 1e9, 1e6), 0.875);
}

TEST(CollectiveTable, MadeUpCollectiveIsChecked) {
  gather_row();
  const OpShape s = make_shape(kGather, Dtype::kBfloat16, ReduceOp::kSum, 2, 4, 512);
  std::vector<uint8_t> result = simulated_gather(s);
  EXPECT_EQ(count_wrong(s, Placement::kOutOfPlace, 2, result, 0), 0);
  store_element(s.dtype, result.data(), 3 * s.count + 5, 1000.0);
  EXPECT_EQ(count_wrong(s, Placement::kOutOfPlace, 2, result, 0), 1);
  // Non-roots hold no result: an untouched buffer is not wrong there, but it is at the root.
  const CheckImages img = make_check_images(s, Placement::kOutOfPlace, 1, false);
  EXPECT_EQ(count_wrong(s, Placement::kOutOfPlace, 1, img.recv, 0), 0);
  EXPECT_EQ(count_wrong(s, Placement::kOutOfPlace, 2, img.recv, 0),
            static_cast<int64_t>(s.recv_count));
  // In-place, rank 3's input sits at its slice of the receive buffer (the row's offset).
  const CheckImages ip = make_check_images(s, Placement::kInPlace, 3, false);
  EXPECT_TRUE(ip.send.empty());
  for (size_t i = 0; i < s.count; ++i)
    EXPECT_EQ(load_element(s.dtype, ip.recv.data(), 3 * s.count + i), input_value(s, 3, i)) << i;
}

TEST(CollectiveTable, RowsAreUniqueAndComplete) {
  // Complete rows, refused only for a name (an alias, in another case) or a value already taken.
  CollectiveSpec dup = gather_row();
  dup.value = static_cast<Collective>(101);
  dup.name = "Bcast";
  EXPECT_THROW(add_collective(dup), Error);
  dup.value = Collective::kReduce;
  dup.name = "reduce2";
  EXPECT_THROW(add_collective(dup), Error);
  std::set<std::string> seen;
  for (const CollectiveSpec& r : collective_table()) {
    EXPECT_TRUE(r.counts && r.busbw_factor && r.expected) << r.name;
    EXPECT_TRUE(seen.insert(std::string(r.name)).second) << r.name;
    EXPECT_EQ(&collective_spec(r.value), &r) << r.name;
  }
}

// In-place layouts as nccl-tests' *GetCollByteCount: allgather's input and reduce_scatter's result
// at rank × count, everything else at 0; NCCL has in-place forms except alltoall and sendrecv.
TEST(CollectiveTable, InPlaceOffsetsAsNcclTests) {
  for (Collective c : {Collective::kAllreduce, Collective::kAllgather, Collective::kReduceScatter,
                       Collective::kBroadcast, Collective::kReduce, Collective::kAlltoall,
                       Collective::kSendrecv}) {
    const OpShape s = make_shape(c, Dtype::kFloat32, ReduceOp::kSum, 0, 4, 4096);
    EXPECT_EQ(s.send_in_place_offset, c == Collective::kAllgather ? s.count : 0u) << to_string(c);
    EXPECT_EQ(s.recv_in_place_offset, c == Collective::kReduceScatter ? s.count : 0u)
        << to_string(c);
    EXPECT_EQ(collective_spec(c).nccl_in_place,
              c != Collective::kAlltoall && c != Collective::kSendrecv)
        << to_string(c);
  }
}

// Every name and alias parses back to its value, and no spelling names two values.
template <typename Rows, typename Parse>
void expect_round_trip(const Rows& rows, Parse parse) {
  std::set<std::string> spellings;
  for (const auto& r : rows) {
    EXPECT_EQ(parse(std::string(r.name)), r.value) << r.name;
    EXPECT_EQ(find_named(rows, r.name), &r) << r.name;
    EXPECT_TRUE(spellings.insert(std::string(r.name)).second) << r.name;
    for (std::string_view a : r.aliases) {
      EXPECT_EQ(parse(std::string(a)), r.value) << a;
      if (!same_name(a, r.name)) {
        EXPECT_TRUE(spellings.insert(std::string(a)).second) << a;
      }
    }
  }
}

TEST(NameTables, EveryEnumRoundTrips) {
  expect_round_trip(collective_table(),
                    [](const std::string& s) { return parse_collective(s, "x"); });
  expect_round_trip(dtype_table(), [](const std::string& s) { return parse_dtype(s, "x"); });
  expect_round_trip(reduce_op_names(), [](const std::string& s) { return parse_op(s, "x"); });
  const auto by_name = [](const auto& rows) {
    return [&rows](const std::string& s) { return find_named(rows, s)->value; };
  };
  expect_round_trip(placement_names(), by_name(placement_names()));
  expect_round_trip(time_mode_names(), by_name(time_mode_names()));
  expect_round_trip(format_names(), by_name(format_names()));
  expect_round_trip(backend_names(), by_name(backend_names()));
  expect_round_trip(mpi_buffers_names(), by_name(mpi_buffers_names()));
}

TEST(NameTables, NamesAsWrittenToResults) {
  EXPECT_EQ(to_string(Placement::kInPlace), "in-place");
  EXPECT_EQ(to_string(TimeMode::kRank0), "rank0");
  EXPECT_EQ(to_string(BackendKind::kNccl), "nccl");
  EXPECT_EQ(to_string(MpiBuffers::kDevice), "device");
  EXPECT_EQ(names_of(format_names()), (std::vector<std::string>{"table", "json", "csv"}));
  EXPECT_EQ(nccl_tests_name(Dtype::kFloat16), "half");
  EXPECT_EQ(dtype_size(Dtype::kFloat64), 8u);
  EXPECT_EQ(to_string(static_cast<ReduceOp>(42)), "?");
}

}  // namespace
}  // namespace dtune::comm
