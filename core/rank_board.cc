// Node-local rank board (see core/rank_board.h).
#include "core/rank_board.h"

#include <unistd.h>

#include <exception>
#include <fstream>
#include <new>

#include "core/error.h"

namespace dtune {

namespace {

// The process state letter from /proc/<pid>/stat ('R', 'S', 'D', 'T' stopped, 't' traced,
// 'Z' zombie, ...), or 0 when the process is gone.
char process_state(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return 0;
  const size_t close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? 0 : stat[close + 2];
}

}  // namespace

RankBoard::RankBoard(const RunContext& ctx) : local_(MpiComm::dup(ctx.node_comm())) {
  world_size_ = ctx.world_size();
  local_size_ = local_.size();
  void* base = nullptr;
  // The check of the node map against the MPI library's own view: the ranks that share a host
  // name must be able to share memory. Where the library's locality data says otherwise, every
  // shared-memory path of it is suspect: say so rather than measure through it.
  const int rc = MPI_Win_allocate_shared(sizeof(Slot), sizeof(Slot), MPI_INFO_NULL, local_.get(),
                                         &base, &win_);
  if (rc != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING] = {0};
    int len = 0;
    MPI_Error_string(rc, text, &len);
    throw Error("the MPI library cannot share memory among the " + std::to_string(local_size_) +
                " ranks on host " + ctx.host() + " (" + text +
                "): its idea of which ranks share a node disagrees with their host names and boot "
                "ids (with Open MPI on simulated nodes: PMIX_MCA_gds=hash does this; leave it "
                "unset) [" +
                process_identity() + "]");
  }
  mine_ = new (base) Slot{};
  mine_->step.store(0, std::memory_order_relaxed);
  mine_->ended.store(0, std::memory_order_relaxed);
  mine_->pid = static_cast<int64_t>(getpid());
  mine_->world_rank = ctx.rank();
  DTUNE_MPI_CHECK(MPI_Barrier(local_.get()));  // every slot is written before anyone reads
  for (int r = 0; r < local_size_; ++r) {
    MPI_Aint size = 0;
    int disp = 0;
    void* ptr = nullptr;
    DTUNE_MPI_CHECK(MPI_Win_shared_query(win_, r, &size, &disp, &ptr));
    slots_.push_back(static_cast<Slot*>(ptr));
  }
}

RankBoard::~RankBoard() {
  // MPI_Win_free synchronises the node's ranks: while an exception unwinds (a timeout, a rank
  // gone) it could wait forever for a rank that stopped, so the window is left to the abort.
  if (win_ != MPI_WIN_NULL && std::uncaught_exceptions() == 0) MPI_Win_free(&win_);
}

void RankBoard::reach(uint64_t step) { mine_->step.store(step, std::memory_order_relaxed); }

uint64_t RankBoard::step() const { return mine_->step.load(std::memory_order_relaxed); }

void RankBoard::mark_ended(int code) { mine_->ended.store(code, std::memory_order_release); }

std::string RankBoard::ended_by() const {
  for (const Slot* s : slots_) {
    const int32_t code = s->ended.load(std::memory_order_acquire);
    if (s != mine_ && code != 0)
      return "rank " + std::to_string(s->world_rank) + " (pid " + std::to_string(s->pid) +
             ", exit " + std::to_string(code) + ")";
  }
  return "";
}

std::string RankBoard::diagnose() const {
  const uint64_t here = step();
  std::string stopped, gone, ended, behind;
  auto add = [](std::string& list, const std::string& item) {
    list += (list.empty() ? "" : ", ") + item;
  };
  for (const Slot* s : slots_) {
    if (s == mine_) continue;
    const std::string who =
        "rank " + std::to_string(s->world_rank) + " (pid " + std::to_string(s->pid) + ")";
    const char state = process_state(s->pid);
    const uint64_t at = s->step.load(std::memory_order_relaxed);
    const int32_t code = s->ended.load(std::memory_order_acquire);
    if (code != 0) {
      add(ended, who + " with exit status " + std::to_string(code));
    } else if (state == 0 || state == 'Z' || state == 'X') {
      add(gone, who);
    } else if (state == 'T' || state == 't') {
      add(stopped, who);
    } else if (at < here) {
      add(behind, who + " at step " + std::to_string(at));
    }
  }
  std::string out;
  if (!stopped.empty()) out += "stopped (SIGSTOP or a debugger): " + stopped + "; ";
  if (!gone.empty()) out += "gone (killed or crashed): " + gone + "; ";
  if (!ended.empty()) out += "ending the job with its own message: " + ended + "; ";
  if (!behind.empty())
    out += "behind this rank's step " + std::to_string(here) + ": " + behind + "; ";
  if (out.empty()) {
    out = "every rank on this node is running and at this step";
    if (local_size_ < world_size_) out += ": the rank that stopped is on another node";
  } else {
    out.resize(out.size() - 2);
    if (local_size_ < world_size_) out += " (ranks on other nodes not shown)";
  }
  return out;
}

}  // namespace dtune
