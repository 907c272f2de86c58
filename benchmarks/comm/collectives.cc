// The collective table: one row per collective, each function beside it a line or two taken from
// the nccl-tests file named in its comment (NVIDIA/nccl-tests src/*.cu).
#include "benchmarks/comm/collectives.h"

#include <algorithm>

#include "benchmarks/comm/check.h"
#include "core/error.h"

namespace dtune::comm {
namespace {

// --- Counts (nccl-tests' *GetCollByteCount) ---------------------------------------------------
// The size is what each rank sends and receives (src/all_reduce.cu, broadcast.cu, reduce.cu,
// sendrecv.cu).
Counts same_counts(size_t elems, size_t) { return {elems, elems, elems, 0, 0}; }
// The size is the gathered output; each rank sends count = size / n, and in-place its input is
// its own slice of the output (src/all_gather.cu).
Counts gathered_counts(size_t elems, size_t n) {
  const size_t c = elems / n;
  return {c, c, c * n, c, 0};
}
// The size is the input; each rank receives count = size / n, and in-place its result is its own
// slice of the input (src/reduce_scatter.cu).
Counts scattered_counts(size_t elems, size_t n) {
  const size_t c = elems / n;
  return {c, c * n, c, 0, c};
}
// The size is what each rank sends in all; count to each peer (src/alltoall.cu).
Counts all_to_all_counts(size_t elems, size_t n) {
  const size_t c = elems / n;
  return {c, c * n, c * n, 0, 0};
}

// --- busbw factors (nccl-tests' *GetBw; derived in doc/metrics.md) ----------------------------
double twice_ring_factor(double n) { return 2.0 * (n - 1) / n; }  // src/all_reduce.cu
// src/all_gather.cu, reduce_scatter.cu, alltoall.cu
double ring_factor(double n) { return (n - 1) / n; }
double unit_factor(double) { return 1.0; }  // broadcast.cu, reduce.cu, sendrecv.cu

// --- Expected results (nccl-tests' *InitData expected buffers) --------------------------------
double reduced_at(const OpShape& s, int, size_t i) { return reduced_value(s, i); }
double root_input(const OpShape& s, int, size_t i) { return input_value(s, s.root, i); }
// Block r of the output is rank r's input.
double gathered(const OpShape& s, int, size_t i) {
  return input_value(s, static_cast<int>(i / s.count), i % s.count);
}
// This rank's block of the reduction.
double scattered(const OpShape& s, int rank, size_t i) {
  return reduced_value(s, static_cast<size_t>(rank) * s.count + i);
}
// Block r of the output is block `rank` of rank r's input.
double all_to_all(const OpShape& s, int rank, size_t i) {
  return input_value(s, static_cast<int>(i / s.count),
                     static_cast<size_t>(rank) * s.count + i % s.count);
}
// A ring shift: the previous rank's input.
double from_previous(const OpShape& s, int rank, size_t i) {
  return input_value(s, (rank - 1 + s.nranks) % s.nranks, i);
}

std::deque<CollectiveSpec> builtin_rows() {
  using C = Collective;
  return {
      {.value = C::kAllreduce,
       .name = "allreduce",
       .aliases = {"all_reduce"},
       .reduction = true,
       .counts = same_counts,
       .busbw_factor = twice_ring_factor,
       .expected = reduced_at},
      {.value = C::kAllgather,
       .name = "allgather",
       .aliases = {"all_gather"},
       .counts = gathered_counts,
       .busbw_factor = ring_factor,
       .expected = gathered},
      {.value = C::kReduceScatter,
       .name = "reduce_scatter",
       .aliases = {"reducescatter", "reduce-scatter"},
       .reduction = true,
       .counts = scattered_counts,
       .busbw_factor = ring_factor,
       .expected = scattered},
      // The root only sends: its receive buffer holds nothing to check.
      {.value = C::kBroadcast,
       .name = "broadcast",
       .aliases = {"bcast"},
       .rooted = true,
       .counts = same_counts,
       .busbw_factor = unit_factor,
       .expected = root_input,
       .result_ranks = ResultRanks::kAllButRoot},
      {.value = C::kReduce,
       .name = "reduce",
       .reduction = true,
       .rooted = true,
       .counts = same_counts,
       .busbw_factor = unit_factor,
       .expected = reduced_at,
       .result_ranks = ResultRanks::kRootOnly},
      // NCCL has no in-place alltoall or sendrecv (grouped ncclSend/ncclRecv on one buffer).
      {.value = C::kAlltoall,
       .name = "alltoall",
       .aliases = {"all_to_all", "alltoallv"},
       .nccl_in_place = false,
       .counts = all_to_all_counts,
       .busbw_factor = ring_factor,
       .expected = all_to_all},
      {.value = C::kSendrecv,
       .name = "sendrecv",
       .nccl_in_place = false,
       .counts = same_counts,
       .busbw_factor = unit_factor,
       .expected = from_previous},
  };
}

std::deque<CollectiveSpec>& rows() {
  static std::deque<CollectiveSpec> table = builtin_rows();
  return table;
}

}  // namespace

const std::deque<CollectiveSpec>& collective_table() { return rows(); }

const CollectiveSpec& collective_spec(Collective c) {
  // Built-in rows sit at their enum value: the check looks a row up per element.
  const auto& table = rows();
  const size_t i = static_cast<size_t>(c);
  if (i < table.size() && table[i].value == c) return table[i];
  for (const auto& r : table)
    if (r.value == c) return r;
  throw Error("collective " + std::to_string(static_cast<int>(c)) + " has no row in the table");
}

const CollectiveSpec& add_collective(CollectiveSpec row) {
  bool taken = find_named(rows(), row.name) != nullptr;
  for (std::string_view a : row.aliases) taken |= find_named(rows(), a) != nullptr;
  for (const auto& r : rows()) taken |= r.value == row.value;
  if (taken)
    throw Error("collective table: '" + std::string(row.name) + "' or its value is already a row");
  DTUNE_CHECK(row.counts && row.busbw_factor && row.expected,
              "collective table: row '" + std::string(row.name) + "' lacks a function");
  return rows().emplace_back(std::move(row));
}

std::vector<Collective> all_collectives() { return values_of(rows()); }
std::string to_string(Collective c) { return name_of(rows(), c); }
Collective parse_collective(const std::string& s, const std::string& flag) {
  return parse_list_item(rows(), s, flag, "collective");
}
bool is_reduction(Collective c) { return collective_spec(c).reduction; }
bool is_rooted(Collective c) { return collective_spec(c).rooted; }

OpShape make_shape(Collective c, Dtype d, ReduceOp op, int root, int nranks,
                   size_t requested_bytes) {
  const CollectiveSpec& spec = collective_spec(c);
  OpShape s{c, d, op, spec.rooted ? root : -1, nranks, requested_bytes};
  // Sizes that do not divide in n equal parts are rounded down, as nccl-tests does.
  const Counts k = spec.counts(requested_bytes / dtype_size(d), static_cast<size_t>(nranks));
  s.count = k.count;
  s.send_count = k.send_count;
  s.recv_count = k.recv_count;
  s.send_in_place_offset = k.send_in_place_offset;
  s.recv_in_place_offset = k.recv_in_place_offset;
  s.bytes = std::max(s.send_count, s.recv_count) * dtype_size(d);
  return s;
}

}  // namespace dtune::comm
