// Point-to-point arrival check with deadlines (nonblocking sends/receives polled with MPI_Test*).
#include "core/arrival.h"

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "core/deadline.h"
#include "core/error.h"

namespace dtune {
namespace {

// Polls until every request completed or the deadline passed; returns the indices still pending.
std::vector<int> wait_until(std::vector<MPI_Request>& reqs, Deadline deadline) {
  int spins = 0;
  while (true) {
    int done = 0;
    DTUNE_MPI_CHECK(
        MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE));
    if (done) return {};
    if (deadline.expired()) break;
    // Spin briefly (arrivals are usually near-simultaneous), then back off so an oversubscribed
    // node does not lose a core to polling.
    if (++spins > 2000) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  std::vector<int> pending;
  for (size_t i = 0; i < reqs.size(); ++i) {
    int flag = 0;
    if (reqs[i] != MPI_REQUEST_NULL) DTUNE_MPI_CHECK(MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE));
    if (reqs[i] != MPI_REQUEST_NULL && !flag) pending.push_back(static_cast<int>(i));
  }
  return pending;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

}  // namespace

ArrivalCheck::ArrivalCheck(const RunContext& ctx)
    : comm_(MpiComm::dup(ctx.comm())), rank_(ctx.rank()), size_(ctx.world_size()) {}

bool ArrivalCheck::arrive(const std::string& label, double timeout_s, bool stop_requested) {
  if (size_ == 1) return stop_requested;
  const Deadline deadline = Deadline::after_s(timeout_s);
  constexpr int kTagArrive = 1, kTagDecide = 2;
  int mine = stop_requested ? 1 : 0;
  if (rank_ == 0) {
    std::vector<int> flags(static_cast<size_t>(size_), 0);
    std::vector<MPI_Request> reqs(static_cast<size_t>(size_ - 1), MPI_REQUEST_NULL);
    for (int r = 1; r < size_; ++r)
      DTUNE_MPI_CHECK(MPI_Irecv(&flags[r], 1, MPI_INT, r, kTagArrive, comm_.get(), &reqs[r - 1]));
    const std::vector<int> pending = wait_until(reqs, deadline);
    if (!pending.empty()) {
      std::string ranks;
      for (int i : pending) ranks += (ranks.empty() ? "" : ",") + std::to_string(i + 1);
      throw TimeoutError("rank" + std::string(pending.size() > 1 ? "s " : " ") + ranks +
                         " did not arrive at " + label + " within " + seconds_text(timeout_s) +
                         " s (--timeout); aborting the job");
    }
    int decision = mine;
    for (int r = 1; r < size_; ++r) decision |= flags[r];
    std::vector<MPI_Request> sends(static_cast<size_t>(size_ - 1), MPI_REQUEST_NULL);
    for (int r = 1; r < size_; ++r)
      DTUNE_MPI_CHECK(MPI_Isend(&decision, 1, MPI_INT, r, kTagDecide, comm_.get(), &sends[r - 1]));
    wait_until(sends, Deadline::after_s(timeout_s));
    return decision != 0;
  }
  int decision = 0;
  std::vector<MPI_Request> reqs(2, MPI_REQUEST_NULL);
  DTUNE_MPI_CHECK(MPI_Isend(&mine, 1, MPI_INT, 0, kTagArrive, comm_.get(), &reqs[0]));
  DTUNE_MPI_CHECK(MPI_Irecv(&decision, 1, MPI_INT, 0, kTagDecide, comm_.get(), &reqs[1]));
  if (!wait_until(reqs, deadline).empty())
    throw TimeoutError("rank 0 did not answer at " + label + " within " + seconds_text(timeout_s) +
                       " s (--timeout); aborting the job");
  return decision != 0;
}

}  // namespace dtune
