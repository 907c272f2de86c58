// Correctness checking as nccl-tests does it: inputs whose exact result is known (small integers
// depending on rank and index, exactly representable in every dtype, including bf16 and fp16),
// and a zero-error comparison of the result (a small relative tolerance only for avg, whose
// division rounds differently across libraries). Check iterations are separate from timed ones.
#pragma once

#include <cstdint>
#include <vector>

#include "benchmarks/comm/types.h"

namespace dtune::comm {

// The value rank `rank` contributes at element `index` of its send buffer.
double input_value(const OpShape& s, int rank, size_t index);
// The exact reduction over every rank of element `index` of the send buffers (with s.op).
double reduced_value(const OpShape& s, size_t index);
// Reads and writes one element of a buffer of dtype `d`.
double load_element(Dtype d, const uint8_t* base, size_t index);
void store_element(Dtype d, uint8_t* base, size_t index, double value);

// Host images to upload before a check iteration.
struct CheckImages {
  std::vector<uint8_t> send;  // send buffer (out-of-place); empty for in-place
  std::vector<uint8_t> recv;  // receive buffer: sentinel out-of-place, the input in-place
};
// `plant_wrong` corrupts element 0 of this rank's input (test-only: proves the check can fail).
CheckImages make_check_images(const OpShape& s, Placement p, int rank, bool plant_wrong);

// Number of elements of the result region (receive buffer from `result_offset` on) that differ
// from the exact result (the collective's `expected` in collectives.cc). Ranks with no defined
// result (its `result_ranks`: non-roots of reduce, the root of broadcast, which only sends)
// return 0.
int64_t count_wrong(const OpShape& s, Placement p, int rank, const std::vector<uint8_t>& recv,
                    size_t result_offset);

}  // namespace dtune::comm
