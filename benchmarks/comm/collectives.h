// What each collective means, one row per collective, as nccl-tests has one small file per
// collective filling in a `struct testColl` (src/common.h; e.g. src/all_reduce.cu's
// {"AllReduce", AllReduceGetCollByteCount, AllReduceInitData, AllReduceGetBw, AllReduceRunColl}):
// its names, its counts and in-place layout from a size, its busbw factor, and the exact result
// the correctness check expects. The driver, the check, the table and result writers and the
// backends' buffer layouts all read these rows; a backend keeps only the library call.
#pragma once

#include <cstddef>
#include <deque>
#include <string_view>
#include <vector>

#include "benchmarks/comm/types.h"

namespace dtune::comm {

// Element counts of one operation per rank (nccl-tests' *GetCollByteCount outputs).
struct Counts {
  size_t count = 0;       // NCCL's count argument (nccl-tests' paramcount)
  size_t send_count = 0;  // elements in the send buffer
  size_t recv_count = 0;  // elements in the receive buffer
  // In-place: where this rank's input / result start in the receive buffer, in elements per rank
  // index (nccl-tests' sendInplaceOffset / recvInplaceOffset, multiplied by the rank).
  size_t send_in_place_offset = 0;
  size_t recv_in_place_offset = 0;
};

// Which ranks' receive buffers hold a defined result after the operation.
enum class ResultRanks { kAll, kRootOnly, kAllButRoot };

struct CollectiveSpec {
  Collective value;
  std::string_view name;                       // --collective, to_string, results files
  std::vector<std::string_view> aliases = {};  // also accepted by --collective
  bool reduction = false;     // takes a reduction op (-o); inputs are reduction patterns
  bool rooted = false;        // takes a root (-r)
  bool nccl_in_place = true;  // NCCL has an in-place form (else the table prints N/A)
  // Counts from the elements a requested size holds and the rank count.
  Counts (*counts)(size_t elems, size_t nranks) = nullptr;
  // busbw = algbw × factor (nccl-tests' *GetBw; doc/metrics.md derives each one).
  double (*busbw_factor)(double nranks) = nullptr;
  // The exact value of element `i` of rank `rank`'s result (nccl-tests' *InitData expected
  // buffer), built from check.h's input_value and reduced_value.
  double (*expected)(const OpShape& s, int rank, size_t i) = nullptr;
  ResultRanks result_ranks = ResultRanks::kAll;
};

// Every collective's row, built-in ones in --collective all's order, then any added ones.
const std::deque<CollectiveSpec>& collective_table();
// The row of `c`; throws Error when `c` has none.
const CollectiveSpec& collective_spec(Collective c);
// Appends a row (a unit test's made-up collective); throws Error when its value or name is taken.
// Call it before other threads use the table: rows are never removed, and references to rows stay
// valid.
const CollectiveSpec& add_collective(CollectiveSpec row);

}  // namespace dtune::comm
