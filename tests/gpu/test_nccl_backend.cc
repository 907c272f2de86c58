// The NCCL backend end to end on this machine's GPUs (label gpu): an allreduce whose result is
// checked element by element, exactly, in both placements on two ranks (every rank's input
// differs, so a reduction that does nothing fails), out of place over a sentinel on one. Without a
// GPU per rank that test skips visibly and a second one checks that asking for the backend fails
// with a clear message instead. The communicators' configuration (blocking, as nccl-tests') is
// checked on any machine. MPI is initialised in this file's main; run with one rank or under
// mpirun.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "benchmarks/comm/backend.h"
#include "core/context.h"
#include "core/cuda/nccl_comm.h"
#include "core/device_info.h"
#include "core/error.h"
#include "core/mpi_session.h"

namespace dtune::comm {
namespace {

int visible_gpus() { return query_device_summary().device_count; }

// Small integers, so every sum over ranks is exact in float32 and any order of addition agrees.
float input_value(size_t i, int rank) {
  return static_cast<float>(i % 251) + static_cast<float>(rank);
}

TEST(NcclBackend, AllreduceSumFloat32IsExact) {
  const RunContext ctx = RunContext::create();
  // NCCL refuses two ranks of one communicator on the same GPU ("Duplicate GPU detected").
  if (visible_gpus() < ctx.local_size())
    GTEST_SKIP() << "needs one GPU per rank: " << visible_gpus() << " visible to "
                 << ctx.local_size() << " ranks on this node (cudaGetDeviceCount)";
  ASSERT_TRUE(nccl_backend_built());
  auto backend = make_nccl_backend(ctx);
  EXPECT_EQ(backend->name(), "nccl");
  EXPECT_EQ(backend->version().rfind("NCCL ", 0), 0u) << backend->version();
  EXPECT_EQ(backend->device().rfind("cuda:", 0), 0u) << backend->device();

  constexpr size_t kBytes = size_t{1} << 20;  // 1 MiB
  const OpShape s = make_shape(Collective::kAllreduce, Dtype::kFloat32, ReduceOp::kSum, 0,
                               ctx.world_size(), kBytes);
  ASSERT_EQ(s.count, kBytes / sizeof(float));
  backend->allocate(kBytes, kBytes);

  const int n = ctx.world_size();
  std::vector<float> input(s.count), expected(s.count);
  for (size_t i = 0; i < s.count; ++i) {
    input[i] = input_value(i, ctx.rank());
    // sum over r of (i % 251 + r) = n * (i % 251) + n (n - 1) / 2
    expected[i] = static_cast<float>(n * static_cast<int>(i % 251) + n * (n - 1) / 2);
  }
  const std::vector<float> sentinel(s.count, -1.0f);

  // On one rank NCCL takes a shortcut (src/enqueue.cc, onerank.cu): out of place a copy, in place
  // nothing at all, so an in-place check there would pass with NCCL doing nothing; only the copy
  // into distinct buffers over the sentinel is checked, and no time (it would time a host gap).
  std::vector<Placement> placements = {Placement::kOutOfPlace};
  if (n > 1)
    placements.push_back(Placement::kInPlace);
  else
    std::printf("one rank: in place is NCCL's no-op, not checked; run the 2-rank test\n");
  for (Placement p : placements) {
    SCOPED_TRACE(to_string(p));
    ASSERT_TRUE(backend->supports(s, p));
    // In-place reads its input from the receive buffer; out-of-place must overwrite the sentinel.
    const std::vector<float>& recv_init = p == Placement::kInPlace ? input : sentinel;
    backend->upload(input.data(), kBytes, recv_init.data(), kBytes);

    std::vector<double> times_us;
    backend->run(s, p, 1, Blocking::kNo,
                 std::chrono::steady_clock::now() + std::chrono::seconds(60), times_us);
    ASSERT_EQ(times_us.size(), 1u);
    if (n > 1) {
      EXPECT_GT(times_us[0], 0.0);
    }
    EXPECT_EQ(backend->result_offset(s, p), 0u);

    std::vector<float> result(s.count, 0.0f);
    backend->download_recv(result.data(), kBytes);
    size_t mismatches = 0;
    for (size_t i = 0; i < s.count; ++i) {
      if (result[i] != expected[i] && ++mismatches <= 5)
        ADD_FAILURE() << "element " << i << ": got " << result[i] << ", expected " << expected[i];
    }
    EXPECT_EQ(mismatches, 0u) << "of " << s.count << " elements";
  }
}

// nccl-tests times a blocking communicator (src/common.cu, NCCL_CONFIG_INITIALIZER); a
// nonblocking one makes every group end start a host thread and return ncclInProgress, which
// dtune-comm's small-message latency and the reducers' per-bucket enqueue would pay.
TEST(NcclComm, ConfigIsBlockingAsNcclTests) {
  const ncclConfig_t config = nccl_comm_config();
  EXPECT_EQ(config.blocking, 1);
  // Everything else is NCCL's default (its own initializer's values).
  const ncclConfig_t defaults = NCCL_CONFIG_INITIALIZER;
  EXPECT_EQ(config.cgaClusterSize, defaults.cgaClusterSize);
  EXPECT_EQ(config.minCTAs, defaults.minCTAs);
  EXPECT_EQ(config.maxCTAs, defaults.maxCTAs);
  EXPECT_EQ(config.splitShare, defaults.splitShare);
}

TEST(NcclBackend, WithoutGpuFailsWithClearMessage) {
  if (visible_gpus() > 0)
    GTEST_SKIP()
        << "a CUDA device is visible: this test checks the failure on a machine without one";
  const RunContext ctx = RunContext::create();
  try {
    auto backend = make_nccl_backend(ctx);
    FAIL() << "make_nccl_backend succeeded without a GPU";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_TRUE(m.find("GPU") != std::string::npos || m.find("CUDA device") != std::string::npos)
        << m;
  }
}

}  // namespace
}  // namespace dtune::comm

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  dtune::MpiSession mpi(&argc, &argv);
  return RUN_ALL_TESTS();
}
