// The vocabulary of dtune-comm: collectives, element types, reduction ops, buffer placement, and
// the shape of one operation. Names follow nccl-tests where it has them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dtune::comm {

enum class Collective { kAllreduce, kAllgather, kReduceScatter, kBroadcast, kReduce, kAlltoall, kSendrecv };
enum class Dtype { kFloat32, kFloat64, kInt32, kBfloat16, kFloat16 };
enum class ReduceOp { kSum, kProd, kMin, kMax, kAvg };
// Out-of-place: separate send and receive buffers. In-place: the result overwrites the input,
// laid out as NCCL defines it (allgather's input is this rank's slice of the output, etc.).
enum class Placement { kOutOfPlace, kInPlace };

const std::vector<Collective>& all_collectives();
const std::vector<Dtype>& all_dtypes();
const std::vector<ReduceOp>& all_ops();

std::string to_string(Collective c);      // "allreduce"
std::string to_string(Dtype d);           // canonical: "float32"
std::string nccl_tests_name(Dtype d);     // as nccl-tests prints it: "float", "half", "bfloat16"
std::string to_string(ReduceOp op);       // "sum"
std::string to_string(Placement p);       // "out-of-place"
// Parsing accepts canonical and nccl-tests names (float/float32, half/float16, double/float64,
// int/int32); throws UsageError naming `flag` otherwise.
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
  size_t bytes = 0;        // size column after rounding
  size_t count = 0;        // elements per rank per call (NCCL's count argument)
  size_t send_count = 0;   // elements in this rank's send buffer
  size_t recv_count = 0;   // elements in this rank's receive buffer
  bool rounded() const { return bytes != requested_bytes; }
};
OpShape make_shape(Collective c, Dtype d, ReduceOp op, int root, int nranks, size_t requested_bytes);

}  // namespace dtune::comm
