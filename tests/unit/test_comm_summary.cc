// dtune-comm's summaries: a rank's samples survive the gather's flat layout (run, not run,
// checked, not checked), a size's statistics combine the ranks as -a says, a configuration's
// status and fit, and the HDF5 reporter's [placement][size][rank][iteration] layout.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "benchmarks/comm/bandwidth.h"
#include "benchmarks/comm/comm_results.h"
#include "benchmarks/comm/summary.h"
#include "core/results_file.h"

namespace dtune::comm {
namespace {

namespace fs = std::filesystem;

RankSample sample(std::vector<double> oop, int64_t oop_wrong, std::vector<double> ip,
                  int64_t ip_wrong) {
  RankSample s;
  s.placement[0] = {!oop.empty(), oop, oop_wrong >= 0, oop_wrong >= 0 ? oop_wrong : 0};
  s.placement[1] = {!ip.empty(), ip, ip_wrong >= 0, ip_wrong >= 0 ? ip_wrong : 0};
  return s;
}

void expect_same(const RankSample& a, const RankSample& b) {
  for (int p = 0; p < 2; ++p) {
    EXPECT_EQ(a.placement[p].run, b.placement[p].run) << p;
    EXPECT_EQ(a.placement[p].times_us, b.placement[p].times_us) << p;
    EXPECT_EQ(a.placement[p].checked, b.placement[p].checked) << p;
    EXPECT_EQ(a.placement[p].wrong, b.placement[p].wrong) << p;
  }
}

TEST(RankSample, PacksIntoTheGatherLayout) {
  // Out-of-place ran and was checked (2 wrong); in-place did not run (NCCL's in-place alltoall).
  const std::vector<double> flat = pack(sample({1.5, 2.5, 3.5}, 2, {}, -1), 3);
  ASSERT_EQ(flat.size(), packed_size(3));
  EXPECT_EQ(flat[0], 1.5);
  EXPECT_EQ(flat[2], 3.5);
  for (int i = 3; i < 6; ++i) EXPECT_TRUE(std::isnan(flat[i])) << i;
  EXPECT_EQ(flat[6], 2);
  EXPECT_EQ(flat[7], -1);
}

TEST(RankSample, RoundTripsEveryCase) {
  const std::vector<RankSample> cases = {
      sample({1, 2}, 0, {3, 4}, 7),    // both ran and were checked; no wrong, then 7 wrong
      sample({1, 2}, -1, {3, 4}, -1),  // ran, -c 0: not checked
      sample({5, 6}, 1, {}, -1),       // in-place not run
      sample({}, -1, {}, -1),          // zero count: nothing ran
  };
  for (const RankSample& s : cases) expect_same(unpack(pack(s, 2), 2), s);
  // Every rank's block, in rank order.
  std::vector<double> all;
  for (const RankSample& s : cases) {
    const std::vector<double> f = pack(s, 2);
    all.insert(all.end(), f.begin(), f.end());
  }
  const std::vector<RankSample> back = unpack_ranks(all, cases.size(), 2);
  ASSERT_EQ(back.size(), cases.size());
  for (size_t r = 0; r < cases.size(); ++r) expect_same(back[r], cases[r]);
}

// Two ranks, two iterations: rank 0's out-of-place mean 15 us, rank 1's 40 us.
std::vector<RankSample> two_ranks() {
  return {sample({10, 20}, 0, {}, -1), sample({30, 50}, 3, {}, -1)};
}

TEST(SummarizeSize, CombinesTheRanksAsTimeModeSays) {
  const OpShape s = make_shape(Collective::kAllreduce, Dtype::kFloat32, ReduceOp::kSum, 0, 2, 4000);
  EXPECT_DOUBLE_EQ(summarize_size(s, two_ranks(), TimeMode::kRank0).placement[0].time_us, 15);
  EXPECT_DOUBLE_EQ(summarize_size(s, two_ranks(), TimeMode::kAvg).placement[0].time_us, 27.5);
  EXPECT_DOUBLE_EQ(summarize_size(s, two_ranks(), TimeMode::kMin).placement[0].time_us, 15);
  EXPECT_DOUBLE_EQ(summarize_size(s, two_ranks(), TimeMode::kMax).placement[0].time_us, 40);
  const SizeSummary z = summarize_size(s, two_ranks(), TimeMode::kMax);
  const auto& p = z.placement[0];
  EXPECT_TRUE(p.run);
  EXPECT_EQ(p.wrong, 3);  // summed over the ranks
  EXPECT_EQ(p.ranks.slowest_rank, 1);
  EXPECT_EQ(p.iters.n, 4u);  // every rank's iterations
  EXPECT_DOUBLE_EQ(p.iters.min, 10);
  EXPECT_DOUBLE_EQ(p.iters.max, 50);
  EXPECT_DOUBLE_EQ(p.algbw_gbps, algbw_gbps(4000, 40));
  EXPECT_DOUBLE_EQ(p.busbw_gbps, busbw_gbps(Collective::kAllreduce, 2, 4000, 40));
  EXPECT_FALSE(z.placement[1].run);
  EXPECT_EQ(z.placement[1].wrong, -1);
  ASSERT_EQ(z.samples.size(), 2u);
  RunTotals totals;
  totals.add(z);
  EXPECT_EQ(totals.wrong, 3);
  EXPECT_EQ(totals.busbw_gbps, std::vector<double>{p.busbw_gbps});  // the in-place did not run
}

TEST(SummarizeSize, UncheckedIsMinusOne) {
  const OpShape s = make_shape(Collective::kAllreduce, Dtype::kFloat32, ReduceOp::kSum, 0, 1, 64);
  const SizeSummary z = summarize_size(s, {sample({1, 1}, -1, {2, 2}, -1)}, TimeMode::kRank0);
  EXPECT_EQ(z.placement[0].wrong, -1);
  EXPECT_EQ(z.placement[1].wrong, -1);
  RunTotals totals;
  totals.add(z);
  EXPECT_EQ(totals.wrong, 0);
  EXPECT_EQ(totals.busbw_gbps.size(), 2u);
}

std::vector<SizeSummary> sizes(int64_t wrong) {
  std::vector<SizeSummary> out;
  for (size_t bytes : {1000, 2000, 4000}) {
    const double t = 10 + static_cast<double>(bytes) / 100;  // alpha 10 us, 100 B/us
    const OpShape s =
        make_shape(Collective::kAllgather, Dtype::kFloat32, ReduceOp::kSum, 0, 2, bytes);
    out.push_back(
        summarize_size(s, {sample({t}, 0, {t}, wrong), sample({t}, 0, {t}, 0)}, TimeMode::kRank0));
  }
  return out;
}

TEST(SummarizeConfig, StatusAndFit) {
  const auto c = [](int64_t wrong, ConfigEnd end) {
    return summarize_config(Collective::kAllgather, Dtype::kFloat32, ReduceOp::kSum, 2,
                            sizes(wrong), end);
  };
  EXPECT_EQ(c(0, ConfigEnd::kComplete).status, "ok");
  EXPECT_EQ(c(1, ConfigEnd::kComplete).status, "wrong");  // found by one rank, in-place
  EXPECT_EQ(c(1, ConfigEnd::kInterrupted).status, "interrupted");
  EXPECT_EQ(c(0, ConfigEnd::kTimeout).status, "timeout");
  const CommSummary s = c(0, ConfigEnd::kComplete);
  EXPECT_DOUBLE_EQ(s.busbw_factor, busbw_factor(Collective::kAllgather, 2));
  ASSERT_TRUE(s.fit.ok);
  EXPECT_NEAR(s.fit.alpha_us, 10, 1e-6);
  EXPECT_NEAR(s.fit.bandwidth_gbps, 0.1 * s.busbw_factor, 1e-9);  // 100 B/us of S x factor
  EXPECT_EQ(s.sizes.size(), 3u);
}

class CommResultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("dtune-comm-results-test-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

template <typename T>
std::vector<T> read_dataset(hid_t file, const std::string& path, hid_t type, size_t n) {
  std::vector<T> v(n);
  const hid_t d = H5Dopen2(file, path.c_str(), H5P_DEFAULT);
  EXPECT_GE(d, 0) << path;
  EXPECT_GE(H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0) << path;
  H5Dclose(d);
  return v;
}

TEST_F(CommResultsTest, WritesThePlacementSizeRankIterationLayout) {
  // Two sizes, two ranks, two iterations; time = 1000 p + 100 s + 10 r + i, in-place not run at
  // size 1, in-place not checked anywhere.
  std::vector<SizeSummary> zs;
  for (size_t s = 0; s < 2; ++s) {
    std::vector<RankSample> ranks;
    for (size_t r = 0; r < 2; ++r) {
      const double b = 100.0 * static_cast<double>(s) + 10.0 * static_cast<double>(r);
      std::vector<double> ip =
          s == 1 ? std::vector<double>{} : std::vector<double>{1000 + b, 1001 + b};
      ranks.push_back(sample({b, b + 1}, static_cast<int64_t>(s + r), ip, -1));
    }
    zs.push_back(summarize_size(
        make_shape(Collective::kAllreduce, Dtype::kFloat32, ReduceOp::kSum, 0, 2, 64 << s),
        std::move(ranks), TimeMode::kRank0));
  }
  const CommSummary c = summarize_config(Collective::kAllreduce, Dtype::kFloat32, ReduceOp::kSum, 2,
                                         std::move(zs), ConfigEnd::kComplete);
  Options o;
  o.iters = 2;
  const std::string path = (dir_ / "r.h5").string();
  {
    ResultsFile f = ResultsFile::create(path, "dtune-comm", "--output");
    write_comm_group(f, c, o, "mpi");
    f.finish("complete", 0);
  }
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  const std::string g = "/runs/0000-allreduce-float32-sum/";
  const auto t = read_dataset<double>(file, g + "time_us", H5T_NATIVE_DOUBLE, 16);
  for (size_t p = 0; p < 2; ++p)
    for (size_t s = 0; s < 2; ++s)
      for (size_t r = 0; r < 2; ++r)
        for (size_t i = 0; i < 2; ++i) {
          const double v = t[((p * 2 + s) * 2 + r) * 2 + i];
          if (p == 1 && s == 1)
            EXPECT_TRUE(std::isnan(v));
          else
            EXPECT_EQ(v, 1000.0 * p + 100.0 * s + 10.0 * r + i) << p << s << r << i;
        }
  const auto w = read_dataset<int64_t>(file, g + "wrong", H5T_NATIVE_INT64, 8);
  EXPECT_EQ(w, (std::vector<int64_t>{0, 1, 1, 2, -1, -1, -1, -1}));
  const auto rep = read_dataset<double>(file, g + "time_us_reported", H5T_NATIVE_DOUBLE, 4);
  EXPECT_EQ(rep[0], 0.5);    // out-of-place, size 0: rank 0's mean
  EXPECT_EQ(rep[1], 100.5);  // out-of-place, size 1
  EXPECT_EQ(rep[2], 1000.5);
  EXPECT_TRUE(std::isnan(rep[3]));
  const auto sizes_b = read_dataset<int64_t>(file, g + "size_bytes", H5T_NATIVE_INT64, 2);
  EXPECT_EQ(sizes_b, (std::vector<int64_t>{64, 128}));
  H5Fclose(file);
}

}  // namespace
}  // namespace dtune::comm
