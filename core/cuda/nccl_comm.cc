// NcclComm: MPI bootstrap, polling with deadlines, and teardown that cannot hang. Every poll loop
// follows nccl-tests' testStreamSynchronize (cudaStreamQuery + ncclCommGetAsyncError), adding a
// deadline and a back-off so a long wait does not take a core from NCCL's proxy thread.
#include "core/cuda/nccl_comm.h"

#include <mpi.h>

#include <cstdio>
#include <exception>
#include <sstream>
#include <thread>
#include <utility>

#include "core/cuda/cuda_error.h"
#include "core/error.h"

namespace dtune {
namespace {

// Spin (yielding) for the first few milliseconds so that short waits return within
// microseconds (this matters for -z, where every iteration waits), then sleep between polls.
constexpr auto kSpinPhase = std::chrono::milliseconds(5);
constexpr auto kSleepPerPoll = std::chrono::microseconds(50);
// How long the destructor lets ncclCommFinalize flush before it gives up and aborts (polled only
// on a communicator the environment made nonblocking; a blocking one returns when done).
constexpr auto kFinalizeTimeout = std::chrono::seconds(30);
// Initialisation made nonblocking by the environment: as long as the watchdogs' longest wait.
constexpr auto kInitPollTimeout = std::chrono::seconds(300);

void back_off(Clock::time_point since) {
  if (Clock::now() - since < kSpinPhase)
    std::this_thread::yield();
  else
    std::this_thread::sleep_for(kSleepPerPoll);
}

}  // namespace

ncclConfig_t nccl_comm_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;  // as nccl-tests (see nccl_comm.h for why)
  return config;
}

NcclComm NcclComm::create(const RunContext& ctx) { return create(ctx.comm()); }

NcclComm NcclComm::create(MPI_Comm comm) {
  int rank = 0, size = 1;
  DTUNE_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  DTUNE_MPI_CHECK(MPI_Comm_size(comm, &size));
  // Rank 0 broadcasts whether it got an id, so a failure there cannot leave the other ranks
  // waiting in ncclCommInitRankConfig for a peer that will never come.
  struct Bootstrap {
    int ok = 0;
    ncclUniqueId id{};
  } boot;
  std::string root_error;
  if (rank == 0) {
    const ncclResult_t rc = ncclGetUniqueId(&boot.id);
    boot.ok = rc == ncclSuccess ? 1 : 0;
    if (!boot.ok)
      root_error = detail::nccl_message(ncclGetErrorString(rc), ncclGetLastError(nullptr));
  }
  DTUNE_MPI_CHECK(MPI_Bcast(&boot, static_cast<int>(sizeof boot), MPI_BYTE, 0, comm));
  if (!boot.ok) {
    detail::raise_library_error(
        "NCCL", "ncclGetUniqueId(&id)",
        rank == 0 ? root_error : "rank 0 could not create the NCCL unique id (its error says why)",
        __FILE__, __LINE__);
  }

  NcclComm c;
  c.rank_ = rank;
  c.size_ = size;
  ncclConfig_t config = nccl_comm_config();
  const ncclResult_t rc = ncclCommInitRankConfig(&c.comm_, c.size_, boot.id, c.rank_, &config);
  if (rc != ncclSuccess && c.comm_ == nullptr) {
    detail::raise_nccl_error("ncclCommInitRankConfig(&comm, nranks, id, rank, &config)",
                             ncclGetErrorString(rc), ncclGetLastError(nullptr), __FILE__, __LINE__);
  }
  // NCCL_COMM_BLOCKING=0 in the environment makes it nonblocking after all: poll it then.
  c.settle(rc, "ncclCommInitRankConfig(&comm, nranks, id, rank, &config)", __FILE__, __LINE__,
           Clock::now() + kInitPollTimeout);
  return c;
}

NcclComm::NcclComm(NcclComm&& other) noexcept
    : comm_(std::exchange(other.comm_, nullptr)),
      rank_(std::exchange(other.rank_, 0)),
      size_(std::exchange(other.size_, 0)) {}

NcclComm& NcclComm::operator=(NcclComm&& other) noexcept {
  if (this != &other) {
    destroy();
    comm_ = std::exchange(other.comm_, nullptr);
    rank_ = std::exchange(other.rank_, 0);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

NcclComm::~NcclComm() { destroy(); }

void NcclComm::abort() noexcept {
  if (comm_ == nullptr) return;
  const ncclResult_t rc = ncclCommAbort(comm_);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    detail::warn_library_error("NCCL", "ncclCommAbort(comm)", ncclGetErrorString(rc), __FILE__,
                               __LINE__);
  }
  comm_ = nullptr;
}

void NcclComm::destroy() noexcept {
  if (comm_ == nullptr) return;
  // While an exception unwinds, this rank is leaving the run: finalize could wait for peers that
  // are still inside an operation, so abort (main then aborts the job).
  if (std::uncaught_exceptions() > 0) {
    abort();
    return;
  }
  ncclResult_t state = ncclCommFinalize(comm_);
  const auto since = Clock::now();
  while (state == ncclInProgress && Clock::now() - since < kFinalizeTimeout) {
    back_off(since);
    if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) state = ncclInternalError;
  }
  if (state != ncclSuccess) {
    detail::warn_library_error("NCCL", "ncclCommFinalize(comm)",
                               state == ncclInProgress ? "did not finish within 30 s; aborting"
                                                       : ncclGetErrorString(state),
                               __FILE__, __LINE__);
    abort();
    return;
  }
  DTUNE_NCCL_WARN(ncclCommDestroy(comm_));
  comm_ = nullptr;
}

void NcclComm::fail(ncclResult_t rc, const char* expr, const char* file, int line) {
  // Read the detail before aborting: it belongs to the communicator being freed.
  const char* last = comm_ != nullptr ? ncclGetLastError(comm_) : ncclGetLastError(nullptr);
  const std::string detail_text = last ? last : "";
  abort();
  detail::raise_nccl_error(expr, ncclGetErrorString(rc), detail_text.c_str(), file, line);
}

void NcclComm::time_out(const std::string& what, Clock::time_point since) {
  const double waited_s = std::chrono::duration<double>(Clock::now() - since).count();
  abort();
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  os << "NCCL timeout: " << process_identity() << " (NCCL rank " << rank_ << " of " << size_
     << ") waited " << waited_s << " s for " << what
     << " and gave up at its deadline; the communicator was aborted. A peer rank probably "
        "failed, is stuck elsewhere, or never reached the same operation.";
  throw TimeoutError(os.str());
}

void NcclComm::settle(ncclResult_t rc, const char* expr, const char* file, int line,
                      Clock::time_point deadline) {
  if (rc == ncclSuccess) return;
  DTUNE_CHECK(comm_ != nullptr, "NCCL call on an empty or aborted NcclComm");
  if (rc != ncclInProgress) fail(rc, expr, file, line);
  const auto since = Clock::now();
  while (true) {
    ncclResult_t state = ncclInProgress;
    const ncclResult_t q = ncclCommGetAsyncError(comm_, &state);
    if (q != ncclSuccess) fail(q, "ncclCommGetAsyncError(comm, &state)", file, line);
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) fail(state, expr, file, line);
    if (Clock::now() >= deadline)
      time_out(std::string("the NCCL call ") + expr + " to complete", since);
    back_off(since);
  }
}

void NcclComm::wait(cudaStream_t stream, Clock::time_point deadline, const std::string& what) {
  DTUNE_CHECK(comm_ != nullptr, "wait() on an empty or aborted NcclComm");
  const auto since = Clock::now();
  while (true) {
    const cudaError_t q = cudaStreamQuery(stream);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) {
      abort();
      detail::raise_cuda_error("cudaStreamQuery(stream)", q, __FILE__, __LINE__);
    }
    ncclResult_t state = ncclSuccess;
    const ncclResult_t rc = ncclCommGetAsyncError(comm_, &state);
    if (rc != ncclSuccess) fail(rc, "ncclCommGetAsyncError(comm, &state)", __FILE__, __LINE__);
    if (state != ncclSuccess && state != ncclInProgress)
      fail(state, "ncclCommGetAsyncError(comm, &state) while waiting", __FILE__, __LINE__);
    if (Clock::now() >= deadline) time_out(what, since);
    back_off(since);
  }
}

std::string nccl_version_string() {
  int v = 0;
  DTUNE_NCCL_CHECK(ncclGetVersion(&v));
  // NCCL_VERSION(X, Y, Z) is X*1000 + Y*100 + Z up to 2.8, X*10000 + Y*100 + Z from 2.9 on.
  const int major = v >= 10000 ? v / 10000 : v / 1000;
  const int minor = v >= 10000 ? v / 100 % 100 : v / 100 % 10;
  const int patch = v % 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

}  // namespace dtune
