// Who stopped: every rank's pid and progress counter in node-local shared memory
// (MPI_Win_allocate_shared over the ranks of one node), readable by every rank of the node without
// a message. When a wait runs past its deadline, the waiting rank reads the board and names the
// ranks of its node that are stopped (SIGSTOP), gone (killed) or behind (never reached the step
// the others wait in), instead of only saying where it itself was waiting. Ranks on other nodes
// are not visible this way; the message says so.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/context.h"

namespace dtune {

class RankBoard {
 public:
  // Collective over ctx.comm(): every rank of every node takes part.
  explicit RankBoard(const RunContext& ctx);
  RankBoard(const RankBoard&) = delete;
  RankBoard& operator=(const RankBoard&) = delete;
  ~RankBoard();

  // This rank reached step `step` (monotonic; a relaxed store: a few ns, fine in timed loops).
  void reach(uint64_t step);
  uint64_t step() const;

  // One line naming the ranks of this node (world ranks) that are stopped, gone or behind this
  // rank's step; empty when none is. Reads /proc; safe to call from a watchdog thread.
  std::string diagnose() const;

  // This rank is ending the job with its own message and exit status `code` (marked before it
  // saves and aborts). A rank of the node that times out later (one that was stopped and then
  // resumed finds its peer gone) reads it with ended_by() and stays quiet: the job's end has been
  // explained, and "rank 0 gone (killed or crashed)" would be wrong.
  void mark_ended(int code);
  // "rank 0 (pid 123, exit 3)" for a rank of this node that marked itself ending, or "".
  std::string ended_by() const;

 private:
  struct Slot {
    std::atomic<uint64_t> step;
    std::atomic<int32_t> ended;  // exit status of a rank ending the job itself; 0 while running
    int64_t pid;
    int64_t world_rank;
  };
  MPI_Win win_ = MPI_WIN_NULL;
  MpiComm local_;
  Slot* mine_ = nullptr;
  std::vector<Slot*> slots_;  // every rank of this node, by local rank
  int world_size_ = 1;
  int local_size_ = 1;
};

}  // namespace dtune
