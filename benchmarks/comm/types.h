// The vocabulary of dtune-comm: collectives, element types, reduction ops, buffer placement, the
// run's modes, and the shape of one operation. Names follow nccl-tests where it has them; every
// enum's names live in one table (types.cc; collectives in collectives.cc), read by the CLI,
// to_string and the results writers alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "benchmarks/comm/names.h"

namespace dtune::comm {

// The built-in collectives; what each one means is its row in collectives.cc.
enum class Collective : int {
  kAllreduce,
  kAllgather,
  kReduceScatter,
  kBroadcast,
  kReduce,
  kAlltoall,
  kSendrecv
};
enum class Dtype { kFloat32, kFloat64, kInt32, kBfloat16, kFloat16 };
enum class ReduceOp { kSum, kProd, kMin, kMax, kAvg };
// Out-of-place: separate send and receive buffers. In-place: the result overwrites the input,
// laid out as NCCL defines it (allgather's input is this rank's slice of the output, etc.).
enum class Placement { kOutOfPlace, kInPlace };
enum class TimeMode { kRank0 = 0, kAvg = 1, kMin = 2, kMax = 3 };  // nccl-tests -a
enum class Format { kTable, kJson, kCsv };                         // --format
enum class BackendKind { kMpi, kNccl };                            // --backend
enum class MpiBuffers { kHost, kDevice };                          // --mpi-buffers
// --algorithm: how the MPI backend runs allreduce (core/hierarchical_allreduce.h).
enum class Algorithm { kFlat, kHierarchical };
// --mpi-progress: how the MPI backend waits for an operation: inside the library's blocking call,
// or on a communication thread polling the nonblocking one (benchmarks/comm/progress_thread.h).
enum class MpiProgress { kCall, kThread };
// --pattern: what is measured: a sweep of sizes (-b..-e) of each collective, or the collective
// calls of one FSDP training step for a model (fsdp_plan.h).
enum class Pattern { kSizes, kFsdp };

// One row per element type: its names and size.
struct DtypeSpec {
  Dtype value;
  std::string_view name;             // canonical: "float32"
  std::string_view nccl_tests_name;  // as nccl-tests prints it: "float", "half", "bfloat16"
  size_t size_bytes;
  std::vector<std::string_view> aliases;  // also accepted: nccl-tests' names, fp32, bf16, ...
};

// The name tables (types.cc).
const std::vector<DtypeSpec>& dtype_table();
const std::vector<EnumName<ReduceOp>>& reduce_op_names();
const std::vector<EnumName<Placement>>& placement_names();
const std::vector<EnumName<TimeMode>>& time_mode_names();
const std::vector<EnumName<Format>>& format_names();
const std::vector<EnumName<BackendKind>>& backend_names();
const std::vector<EnumName<MpiBuffers>>& mpi_buffers_names();
const std::vector<EnumName<Algorithm>>& algorithm_names();
const std::vector<EnumName<MpiProgress>>& mpi_progress_names();
const std::vector<EnumName<Pattern>>& pattern_names();

std::vector<Collective> all_collectives();
std::vector<Dtype> all_dtypes();
std::vector<ReduceOp> all_ops();

std::string to_string(Collective c);   // "allreduce"
std::string to_string(Dtype d);        // canonical: "float32"
std::string nccl_tests_name(Dtype d);  // as nccl-tests prints it: "float", "half", "bfloat16"
std::string to_string(ReduceOp op);    // "sum"
std::string to_string(Placement p);    // "out-of-place"
std::string to_string(TimeMode m);     // "avg"
std::string to_string(Format f);       // "table"
std::string to_string(BackendKind b);  // "mpi"
std::string to_string(MpiBuffers b);   // "host"
std::string to_string(Algorithm a);    // "flat"
std::string to_string(MpiProgress m);  // "call"
std::string to_string(Pattern p);      // "sizes"
// Parsing accepts canonical names and aliases (float/float32, half/float16, double/float64,
// int/int32, bcast/broadcast, ...), in any case; throws UsageError naming `flag` otherwise.
Collective parse_collective(const std::string& s, const std::string& flag);
Dtype parse_dtype(const std::string& s, const std::string& flag);
ReduceOp parse_op(const std::string& s, const std::string& flag);

size_t dtype_size(Dtype d);
bool is_reduction(Collective c);  // takes a reduction op (allreduce, reduce_scatter, reduce)
bool is_rooted(Collective c);     // broadcast, reduce

// One operation's element counts, derived from a requested size as nccl-tests does: `bytes` is
// the size column (max of send and receive bytes per rank), `count` the count column
// (nccl-tests' paramcount: elements per rank per call), and sizes that do not divide by
// n × dtype size (where the collective needs it) are rounded down.
struct OpShape {
  Collective collective;
  Dtype dtype;
  ReduceOp op;
  int root = 0;
  int nranks = 1;
  size_t requested_bytes = 0;
  size_t bytes = 0;       // size column after rounding
  size_t count = 0;       // elements per rank per call (NCCL's count argument)
  size_t send_count = 0;  // elements in this rank's send buffer
  size_t recv_count = 0;  // elements in this rank's receive buffer
  // In-place, the receive buffer is the only buffer: the input starts at rank ×
  // send_in_place_offset elements, the result at rank × recv_in_place_offset (nccl-tests'
  // sendInplaceOffset and recvInplaceOffset, src/common.cu startColl).
  size_t send_in_place_offset = 0;
  size_t recv_in_place_offset = 0;
  bool rounded() const { return bytes != requested_bytes; }
};
OpShape make_shape(Collective c, Dtype d, ReduceOp op, int root, int nranks,
                   size_t requested_bytes);

}  // namespace dtune::comm
